//! The SIMD128 tier. Integer kernels widen with `i16x8_extmul_*` (every i8·i8
//! product is exact in i16) and `i32x4_extadd_pairwise_i16x8`, never a
//! saturating step; float kernels keep the spec's 8 lanes as two `f32x4`
//! (natural column order), `f32x4_mul` then `f32x4_add`, no relaxed-SIMD FMA.

use std::arch::wasm32::*;

use qlinear_kernels_scalar::{dot_i8_i8 as tail_i8, dot_i8_q4_biased as tail_biased, KernelTable};

mod float;
mod quantize;

pub(crate) static TABLE: KernelTable = KernelTable {
    name: "wasm-simd128",
    dot_i8_i8,
    dot_i8_q4,
    quantize_row_q8: quantize::quantize_row_q8,
    gemm_w8a8,
    gemm_w4a8,
    gemm_w4a8_grouped,
    gemm_w8a16: float::gemm_w8a16,
    gemm_w4a16: float::gemm_w4a16,
    gemm_w4a16_grouped: float::gemm_w4a16_grouped,
};

/// 16 bytes of `v` at `at`.
#[inline]
pub(crate) fn load16<T: Copy>(v: &[T], at: usize) -> v128 {
    assert!(std::mem::size_of::<T>() == 1 && at + 16 <= v.len());
    // SAFETY: 16 one-byte elements from `at` lie inside `v` (asserted);
    // v128_load has no alignment requirement.
    unsafe { v128_load(v.as_ptr().add(at).cast()) }
}

/// `acc[l] += Σ` of four exact i8·i8 products.
#[inline]
fn dot16(acc: v128, a: v128, b: v128) -> v128 {
    let lo = i32x4_extadd_pairwise_i16x8(i16x8_extmul_low_i8x16(a, b));
    let hi = i32x4_extadd_pairwise_i16x8(i16x8_extmul_high_i8x16(a, b));
    i32x4_add(acc, i32x4_add(lo, hi))
}

#[inline]
fn hsum(v: v128) -> i32 {
    i32x4_extract_lane::<0>(v) + i32x4_extract_lane::<1>(v) + i32x4_extract_lane::<2>(v) + i32x4_extract_lane::<3>(v)
}

fn dot_i8_i8(a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len());
    let mut acc = i32x4_splat(0);
    let mut c = 0;
    while c + 16 <= a.len() {
        acc = dot16(acc, load16(a, c), load16(b, c));
        c += 16;
    }
    hsum(acc) + tail_i8(&a[c..], &b[c..])
}

/// `Σ x·b` over biased nibbles (no correction): 16 bytes give 32 columns in
/// natural order by zipping the low and high nibbles.
fn dot_biased(x: &[i8], p: &[u8]) -> i32 {
    assert_eq!(p.len(), x.len().div_ceil(2));
    let mut acc = i32x4_splat(0);
    let mut c = 0;
    while c + 32 <= x.len() {
        let b = load16(p, c / 2);
        let (lo, hi) = (v128_and(b, u8x16_splat(0x0F)), u8x16_shr(b, 4));
        let c0 = i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(lo, hi);
        let c1 = i8x16_shuffle::<8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31>(lo, hi);
        acc = dot16(dot16(acc, c0, load16(x, c)), c1, load16(x, c + 16));
        c += 32;
    }
    hsum(acc) + tail_biased(&x[c..], &p[c / 2..])
}

fn dot_i8_q4(x: &[i8], p: &[u8]) -> i32 {
    dot_biased(x, p) - 8 * x.iter().map(|&v| i32::from(v)).sum::<i32>()
}

qlinear_kernels_scalar::int_gemms_over_dots!();
