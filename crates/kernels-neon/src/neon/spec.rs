//! The NEON tier's declaration, compiled on every architecture (the
//! registry lists every tier everywhere).

use qlinear_kernels_core::TierSpec;

/// aarch64 baseline ASIMD (`smull` + `sadalp`).
pub const NEON: TierSpec = TierSpec {
    name: "neon",
    arch: "aarch64",
    features: qlinear_kernels_core::cpu_features!(aarch64: "neon"),
    detect,
    build_features: "",
    emulated_with: "max",
    emulated_without: &[],
    folder: "crates/kernels-neon/src/neon",
    mutants: &[
        "src/neon/mutants.rs::a_neon_dot_summing_four_products_in_i16_fails_the_proof",
        "src/neon/mutants.rs::a_w4a8_16x4_tile_storing_its_quads_as_4x4_tiles_fails_the_proof",
        "src/neon/mutants.rs::a_neon_panel_tile_pairing_its_rows_crosswise_fails_the_proof",
        "src/neon/mutants.rs::a_w8a8_16x1_tile_reusing_an_accumulator_fails_the_proof",
    ],
};

/// The NEON table, if this CPU reports ASIMD (every aarch64 CPU does).
#[cfg(target_arch = "aarch64")]
pub fn neon_table() -> Option<&'static qlinear_kernels_core::KernelTable> {
    crate::NEON.features_present().then_some(&crate::neon::TABLE)
}

qlinear_kernels_core::detect_on!(
    cfg(target_arch = "aarch64"),
    crate::neon_table(),
    missing: "this CPU lacks ASIMD",
    elsewhere: "neon is aarch64 only",
);
