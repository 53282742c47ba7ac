//! The AVX-512 VNNI tier's declaration, compiled on every architecture (the
//! registry lists every tier everywhere).

use qlinear_kernels_core::TierSpec;

/// x86-64 AVX-512 (F, BW, DQ, VL) with VNNI (`vpdpbusd`).
pub const AVX512_VNNI: TierSpec = TierSpec {
    name: "avx512-vnni",
    arch: "x86_64",
    features: qlinear_kernels_core::cpu_features!(
        x86_64: "avx2", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512vnni"
    ),
    detect,
    build_features: "",
    emulated_with: "",
    emulated_without: &[],
    folder: "crates/kernels-x86/src/avx512vnni",
    mutants: &[
        "src/avx512vnni/mutants.rs::the_w8a8_tiles_fail_the_proof_on_their_slips",
        "src/avx512vnni/mutants.rs::the_w4a8_tiles_fail_the_proof_on_their_slips",
        "src/avx512vnni/mutants.rs::the_w4a8_grouped_tiles_fail_the_proof_on_their_slips",
        "src/avx512vnni/mutants.rs::the_w4a16_tiles_fail_the_proof_on_their_slip",
        "src/avx512vnni/mutants.rs::the_w4a16_grouped_tiles_fail_the_proof_on_their_slip",
        "src/avx512vnni/panel_mutants.rs::the_panel_tiles_fail_the_proof_on_their_slips",
        "src/avx512vnni/mutants.rs::the_quantizer_fails_the_proof_on_its_slips",
    ],
};

/// The AVX-512 VNNI table, if this CPU reports AVX-512 F, BW, DQ, VL, VNNI (and
/// AVX2 and F16C, which its float kernels share with the AVX2 tier).
#[cfg(target_arch = "x86_64")]
pub fn avx512vnni_table() -> Option<&'static qlinear_kernels_core::KernelTable> {
    crate::avx512vnni::detected().then(crate::avx512vnni::table)
}

qlinear_kernels_core::detect_on!(
    cfg(target_arch = "x86_64"),
    crate::avx512vnni_table(),
    missing: "this CPU lacks AVX-512 F/BW/DQ/VL with VNNI (or AVX2/F16C)",
    elsewhere: "avx512-vnni is x86-64 only",
);
