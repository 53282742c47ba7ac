//! The AVX2 tier's declaration, compiled on every architecture (the
//! registry lists every tier everywhere).

use qlinear_kernels_core::TierSpec;

/// x86-64 AVX2 with F16C (for the group scales).
pub const AVX2: TierSpec = TierSpec {
    name: "avx2",
    arch: "x86_64",
    features: qlinear_kernels_core::cpu_features!(x86_64: "avx2", "f16c"),
    detect,
    build_features: "",
    emulated_with: "",
    emulated_without: &[],
    folder: "crates/kernels-x86/src/avx2",
    mutants: &[
        "src/avx2/mutants.rs::saturating_and_unsigned_avx2_variants_fail_the_proof",
        "src/avx2/mutants.rs::a_shared_correction_in_the_batch_tile_fails_the_proof",
        "src/avx2/mutants.rs::a_nibble_order_slip_in_the_w4a16_unpack_fails_the_proof",
        "src/avx2/mutants.rs::a_w4a8_pairs_tile_storing_each_pair_as_a_2x4_tile_fails_the_proof",
        "src/avx2/mutants.rs::the_16_row_float_decode_tiles_fail_the_proof_on_their_slips",
        "src/avx2/mutants.rs::the_quantizer_fails_the_proof_on_its_slips",
        "src/avx2/mutants.rs::the_group_sums_fail_the_proof_on_their_slips",
        "src/avx2/frame_mutants.rs::a_tree_sum_in_the_grouped_batch_tile_fails_the_proof",
        "src/avx2/frame_mutants.rs::a_repeated_row_in_the_sequential_decode_tiles_fails_the_proof",
        "src/avx2/panel_mutants.rs::the_avx2_panel_tiles_fail_the_proof_on_their_slips",
        "src/avx2/panel_mutants.rs::the_avx2_one_pass_panel_tile_fails_the_proof_on_its_slips",
    ],
};

/// The AVX2 table, if this CPU reports AVX2 and F16C.
#[cfg(target_arch = "x86_64")]
pub fn avx2_table() -> Option<&'static qlinear_kernels_core::KernelTable> {
    crate::avx2::detected().then_some(&crate::avx2::TABLE)
}

qlinear_kernels_core::detect_on!(
    cfg(target_arch = "x86_64"),
    crate::avx2_table(),
    missing: "this CPU lacks AVX2 or F16C",
    elsewhere: "avx2 is x86-64 only",
);
