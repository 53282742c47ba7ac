//! The NEON SDOT tier's declaration, compiled on every architecture (the
//! registry lists every tier everywhere).

use qlinear_kernels_scalar::{KernelTable, TierSpec};

/// aarch64 FEAT_DotProd (`sdot`).
pub const NEON_SDOT: TierSpec = TierSpec {
    name: "neon-sdot",
    arch: "aarch64",
    detect,
    build_features: "",
    emulated_with: "max",
    emulated_without: &["cortex-a72"],
    folder: "crates/kernels-neon/src/sdot",
    mutants: &[
        "tests/mutants.rs::an_sdot_kernel_with_the_wrong_lane_order_fails_the_proof",
        "tests/mutants.rs::an_sdot_batch_tile_with_a_hoisted_load_fails_the_proof",
        "tests/mutants.rs::an_sdot_decode_step_with_its_activation_loads_swapped_fails_the_proof",
    ],
};

#[cfg(target_arch = "aarch64")]
fn detect() -> Result<&'static KernelTable, &'static str> {
    crate::sdot_table().ok_or("this CPU lacks FEAT_DotProd (dotprod)")
}

#[cfg(not(target_arch = "aarch64"))]
fn detect() -> Result<&'static KernelTable, &'static str> {
    Err("neon-sdot is aarch64 only")
}
