//! The AVX2 tier (with F16C for group scales). Integer kernels use `maddubs`
//! on operands that cannot saturate its i16 pairs; float kernels keep one
//! 8-wide accumulator per row per group — exactly the 8 lanes of the spec.

use std::arch::x86_64::*;

use qlinear_kernels_scalar::KernelTable;

pub(crate) mod float;
pub(crate) mod q4;
pub(crate) mod q8;
pub(crate) mod quantize;

pub(crate) fn detected() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c")
}

/// SAFETY (for every entry): reachable only through `TABLE`, which
/// `crate::avx2_table` returns only when `detected()` confirmed AVX2 and F16C
/// on this CPU; the kernels assert the lengths and shapes they rely on.
mod entry {
    use super::*;
    qlinear_kernels_scalar::safe_entries! {
        dot_i8_i8 => q8::dot_i8_i8: dot_i8,
        dot_i8_q4 => q4::dot_i8_q4: dot_q4,
        quantize_row_q8 => quantize::quantize_row_q8: quantize,
        gemm_w8a8 => q8::gemm_w8a8: q8q8,
        gemm_w4a8 => q4::gemm_w4a8: q8q4,
        gemm_w4a8_grouped => q4::gemm_w4a8_grouped: q8q4,
        gemm_w8a16 => float::gemm_w8a16: f32q8,
        gemm_w4a16 => float::gemm_w4a16: f32q4,
        gemm_w4a16_grouped => float::gemm_w4a16_grouped: f32q4,
    }
}

use entry::*;

pub(crate) static TABLE: KernelTable = KernelTable {
    name: "avx2",
    dot_i8_i8,
    dot_i8_q4,
    quantize_row_q8,
    gemm_w8a8,
    gemm_w4a8,
    gemm_w4a8_grouped,
    gemm_w8a16,
    gemm_w4a16,
    gemm_w4a16_grouped,
};

/// Sum of the 8 i32 lanes (integer addition: any order is exact).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    hsum_epi32_128(s)
}

/// Sum of the 4 i32 lanes of a 128-bit vector.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum_epi32_128(s: __m128i) -> i32 {
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// The spec's lane tree `((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))` for an
/// accumulator holding lane ℓ in element ℓ.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn lane_tree(v: __m256) -> f32 {
    let h = _mm256_hadd_ps(v, v); // [l0+l1, l2+l3, ·, · | l4+l5, l6+l7, ·, ·]
    let h = _mm256_hadd_ps(h, h); // [(l0+l1)+(l2+l3), · | (l4+l5)+(l6+l7), ·]
    _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h)))
}

/// The same tree for an accumulator in Q4 order: elements hold lanes
/// `[l0, l2, l4, l6, l1, l3, l5, l7]`, so adding the two halves forms the
/// tree's first level `[l0+l1, l2+l3, l4+l5, l6+l7]` directly.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn lane_tree_q4(v: __m256) -> f32 {
    let p = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let p = _mm_hadd_ps(p, p); // [(l0+l1)+(l2+l3), (l4+l5)+(l6+l7), ·, ·]
    _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)))
}
