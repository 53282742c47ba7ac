//! The relaxed-SIMD tier's declaration, compiled on every architecture (the
//! registry lists every tier everywhere).

use qlinear_kernels_core::{KernelTable, TierSpec};

/// WebAssembly relaxed SIMD (`i16x8.relaxed_dot_i8x16_i7x16_s` for W4A8), on top of
/// [`WASM_SIMD128`](crate::WASM_SIMD128): a build with `+relaxed-simd`, for engines that have it.
pub const WASM_RELAXED_SIMD: TierSpec = TierSpec {
    name: "wasm-relaxed-simd",
    arch: "wasm32",
    features: qlinear_kernels_core::cpu_features!(wasm32: "simd128", "relaxed-simd"),
    detect,
    build_features: "+simd128,+relaxed-simd",
    emulated_with: "",
    emulated_without: &[],
    folder: "crates/kernels-wasm/src/relaxed",
    mutants: &[
        "src/relaxed/mutants.rs::signed_nibbles_fail_the_proof_wherever_the_engine_reads_them_unsigned",
        "src/relaxed/mutants.rs::i16_sums_across_the_row_fail_the_proof",
        "src/relaxed/mutants.rs::a_relaxed_panel_tile_with_its_halves_swapped_fails_the_proof",
    ],
};

/// The relaxed-SIMD table (this build has `+simd128,+relaxed-simd`): SIMD128
/// with W4A8's nibble products on `i16x8.relaxed_dot_i8x16_i7x16_s`, exact
/// for qlinear's operands (`docs/NUMERICS.md`).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128", target_feature = "relaxed-simd"))]
pub fn relaxed_simd_table() -> Option<&'static KernelTable> {
    Some(&crate::relaxed::TABLE)
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128", target_feature = "relaxed-simd"))]
fn detect() -> Result<&'static KernelTable, &'static str> {
    crate::relaxed_simd_table().ok_or("not compiled in")
}

#[cfg(all(
    target_arch = "wasm32",
    not(all(target_feature = "simd128", target_feature = "relaxed-simd"))
))]
fn detect() -> Result<&'static KernelTable, &'static str> {
    Err("this build lacks +simd128,+relaxed-simd (WebAssembly has no run-time detection)")
}

#[cfg(not(target_arch = "wasm32"))]
fn detect() -> Result<&'static KernelTable, &'static str> {
    Err("wasm-relaxed-simd is wasm32 with +simd128,+relaxed-simd only")
}
