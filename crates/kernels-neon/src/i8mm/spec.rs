//! The NEON I8MM tier's declaration, compiled on every architecture (the
//! registry lists every tier everywhere).

use qlinear_kernels_core::TierSpec;

/// aarch64 FEAT_I8MM (`smmla`) for the batch families, on top of [`NEON_SDOT`](crate::NEON_SDOT).
pub const NEON_I8MM: TierSpec = TierSpec {
    name: "neon-i8mm",
    arch: "aarch64",
    features: qlinear_kernels_core::cpu_features!(aarch64: "neon", "dotprod", "i8mm"),
    detect,
    build_features: "",
    emulated_with: "max",
    emulated_without: &["cortex-a72", "neoverse-n1"],
    folder: "crates/kernels-neon/src/i8mm",
    mutants: &[
        "src/i8mm/mutants.rs::an_i8mm_tile_read_transposed_fails_the_proof",
        "src/i8mm/mutants.rs::an_i8mm_tile_with_its_nibble_operands_exchanged_fails_the_proof",
        "src/i8mm/mutants.rs::an_i8mm_w8a8_16x1_tile_reusing_an_accumulator_fails_the_proof",
    ],
};

/// The NEON I8MM table, if this CPU reports FEAT_I8MM (and the FEAT_DotProd
/// whose entries it shares).
#[cfg(target_arch = "aarch64")]
pub fn i8mm_table() -> Option<&'static qlinear_kernels_core::KernelTable> {
    crate::NEON_I8MM.features_present().then_some(&crate::i8mm::TABLE)
}

qlinear_kernels_core::detect_on!(
    cfg(target_arch = "aarch64"),
    crate::i8mm_table(),
    missing: "this CPU lacks FEAT_I8MM (i8mm) or FEAT_DotProd",
    elsewhere: "neon-i8mm is aarch64 only",
);
