//! The NEON SDOT tier's declaration, compiled on every architecture (the
//! registry lists every tier everywhere).

use qlinear_kernels_core::TierSpec;

/// aarch64 FEAT_DotProd (`sdot`).
pub const NEON_SDOT: TierSpec = TierSpec {
    name: "neon-sdot",
    arch: "aarch64",
    features: qlinear_kernels_core::cpu_features!(aarch64: "neon", "dotprod"),
    detect,
    build_features: "",
    emulated_with: "max",
    emulated_without: &["cortex-a72"],
    folder: "crates/kernels-neon/src/sdot",
    mutants: &[
        "src/sdot/mutants.rs::an_sdot_kernel_with_the_wrong_lane_order_fails_the_proof",
        "src/sdot/mutants.rs::an_sdot_batch_tile_with_a_hoisted_load_fails_the_proof",
        "src/sdot/mutants.rs::an_sdot_decode_step_with_its_activation_loads_swapped_fails_the_proof",
        "src/sdot/mutants.rs::an_sdot_w4a8_16x4_tile_storing_its_quads_as_4x4_tiles_fails_the_proof",
        "src/sdot/mutants.rs::an_sdot_panel_tile_with_its_activation_loads_swapped_fails_the_proof",
        "src/sdot/mutants.rs::an_sdot_w8a8_16x1_tile_reusing_an_accumulator_fails_the_proof",
    ],
};

/// The NEON SDOT table, if this CPU reports FEAT_DotProd.
#[cfg(target_arch = "aarch64")]
pub fn sdot_table() -> Option<&'static qlinear_kernels_core::KernelTable> {
    crate::NEON_SDOT.features_present().then_some(&crate::sdot::TABLE)
}

qlinear_kernels_core::detect_on!(
    cfg(target_arch = "aarch64"),
    crate::sdot_table(),
    missing: "this CPU lacks FEAT_DotProd (dotprod)",
    elsewhere: "neon-sdot is aarch64 only",
);
