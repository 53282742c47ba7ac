//! SIMD128 weight-only kernels: lanes 0-3 and 4-7 of the spec are two `f32x4`
//! in natural column order; the tree's first level pairs neighbours with two
//! shuffles, then `((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))` exactly.

use std::arch::wasm32::*;

use super::load16;

#[inline]
fn tree(lo: v128, hi: v128) -> f32 {
    let p = f32x4_add(i32x4_shuffle::<0, 2, 4, 6>(lo, hi), i32x4_shuffle::<1, 3, 5, 7>(lo, hi));
    (f32x4_extract_lane::<0>(p) + f32x4_extract_lane::<1>(p))
        + (f32x4_extract_lane::<2>(p) + f32x4_extract_lane::<3>(p))
}

/// The low 8 i8 codes of `v` as two f32x4.
#[inline]
fn widen(v: v128) -> (v128, v128) {
    let w16 = i16x8_extend_low_i8x16(v);
    (
        f32x4_convert_i32x4(i32x4_extend_low_i16x8(w16)),
        f32x4_convert_i32x4(i32x4_extend_high_i16x8(w16)),
    )
}

/// The 8-lane partial of one group (activations laid out by `chunked_f32`).
#[inline]
fn partial(x: &[f32], chunks: usize, codes8: impl Fn(usize) -> v128) -> f32 {
    assert!(x.len() >= chunks * 8);
    let (mut lo, mut hi) = (f32x4_splat(0.0), f32x4_splat(0.0));
    for c in 0..chunks {
        let (wl, wh) = widen(codes8(c));
        // SAFETY: c < chunks and x holds chunks · 8 floats (asserted above).
        let (xl, xh) = unsafe {
            (
                v128_load(x.as_ptr().add(c * 8).cast()),
                v128_load(x.as_ptr().add(c * 8 + 4).cast()),
            )
        };
        lo = f32x4_add(lo, f32x4_mul(xl, wl));
        hi = f32x4_add(hi, f32x4_mul(xh, wh));
    }
    tree(lo, hi)
}

/// 8 int8 codes from column `c` (zero past the end) in the low half.
#[inline]
fn q8_codes(w: &[i8], c: usize) -> v128 {
    let mut buf = [0i8; 16];
    let n = (w.len() - c).min(8);
    buf[..n].copy_from_slice(&w[c..c + n]);
    load16(&buf, 0)
}

/// The 8 codes of 4 packed bytes from byte `b` (the zero code past `end`),
/// natural order, in the low half: zip of low and high nibbles, minus 8.
#[inline]
fn q4_codes(p: &[u8], b: usize, end: usize) -> v128 {
    let mut buf = [0x88u8; 16];
    let n = (end - b).min(4);
    buf[..n].copy_from_slice(&p[b..b + n]);
    let v = load16(&buf, 0);
    let (lo, hi) = (v128_and(v, u8x16_splat(0x0F)), u8x16_shr(v, 4));
    let nib = i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(lo, hi);
    i8x16_sub(nib, i8x16_splat(8))
}

qlinear_kernels_scalar::weight_only_gemms!();
