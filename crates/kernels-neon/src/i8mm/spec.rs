//! The NEON I8MM tier's declaration, compiled on every architecture (the
//! registry lists every tier everywhere).

use qlinear_kernels_scalar::TierSpec;

/// aarch64 FEAT_I8MM (`smmla`) for the batch families, on top of [`NEON_SDOT`](crate::NEON_SDOT).
pub const NEON_I8MM: TierSpec = TierSpec {
    name: "neon-i8mm",
    arch: "aarch64",
    detect,
    build_features: "",
    emulated_with: "max",
    emulated_without: &["cortex-a72", "neoverse-n1"],
    folder: "crates/kernels-neon/src/i8mm",
    mutants: &[
        "tests/mutants.rs::an_i8mm_tile_read_transposed_fails_the_proof",
        "tests/mutants.rs::an_i8mm_tile_with_its_nibble_operands_exchanged_fails_the_proof",
    ],
};

qlinear_kernels_scalar::detect_on!(
    cfg(target_arch = "aarch64"),
    crate::i8mm_table(),
    missing: "this CPU lacks FEAT_I8MM (i8mm) or FEAT_DotProd",
    elsewhere: "neon-i8mm is aarch64 only",
);
