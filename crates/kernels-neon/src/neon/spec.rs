//! The NEON tier's declaration, compiled on every architecture (the
//! registry lists every tier everywhere).

use qlinear_kernels_scalar::TierSpec;

/// aarch64 baseline ASIMD (`smull` + `sadalp`).
pub const NEON: TierSpec = TierSpec {
    name: "neon",
    arch: "aarch64",
    detect,
    build_features: "",
    emulated_with: "max",
    emulated_without: &[],
    folder: "crates/kernels-neon/src/neon",
    mutants: &["tests/mutants.rs::a_neon_dot_summing_four_products_in_i16_fails_the_proof"],
};

qlinear_kernels_scalar::detect_on!(
    cfg(target_arch = "aarch64"),
    crate::neon_table(),
    missing: "this CPU lacks ASIMD",
    elsewhere: "neon is aarch64 only",
);
