//! The SIMD128 tier's declaration, compiled on every architecture (the
//! registry lists every tier everywhere).

use qlinear_kernels_core::{KernelTable, TierSpec};

/// WebAssembly SIMD128.
pub const WASM_SIMD128: TierSpec = TierSpec {
    name: "wasm-simd128",
    arch: "wasm32",
    features: qlinear_kernels_core::cpu_features!(wasm32: "simd128"),
    detect,
    build_features: "+simd128",
    emulated_with: "",
    emulated_without: &[],
    folder: "crates/kernels-wasm/src/simd128",
    mutants: &[
        "src/simd128/mutants.rs::a_saturating_simd128_batch_tile_fails_the_proof",
        "src/simd128/mutants.rs::a_widened_w8a8_tile_crossing_its_halves_fails_the_proof",
        "src/simd128/mutants.rs::a_repeated_row_in_the_sequential_w4a8_decode_tile_fails_the_proof",
        "src/simd128/mutants.rs::a_w4a8_16x4_tile_storing_its_quads_as_4x4_tiles_fails_the_proof",
        "src/simd128/mutants.rs::a_panel_tile_adding_its_pairs_across_rows_fails_the_proof",
    ],
};

/// The SIMD128 table (this build has `+simd128`).
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub fn simd128_table() -> Option<&'static KernelTable> {
    Some(&crate::simd128::TABLE)
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn detect() -> Result<&'static KernelTable, &'static str> {
    crate::simd128_table().ok_or("not compiled in")
}

#[cfg(all(target_arch = "wasm32", not(target_feature = "simd128")))]
fn detect() -> Result<&'static KernelTable, &'static str> {
    Err("this build lacks +simd128 (WebAssembly has no run-time detection)")
}

#[cfg(not(target_arch = "wasm32"))]
fn detect() -> Result<&'static KernelTable, &'static str> {
    Err("wasm-simd128 is wasm32 with +simd128 only")
}
