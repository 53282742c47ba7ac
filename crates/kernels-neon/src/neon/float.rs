//! NEON weight-only kernels: the spec's 8 lanes are two `float32x4_t`
//! (lanes 0-3 and 4-7, natural column order), `vmulq` then `vaddq`; the tree
//! `((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))` is two pairwise adds and one add.

use std::arch::aarch64::*;

#[inline]
#[target_feature(enable = "neon")]
fn tree(lo: float32x4_t, hi: float32x4_t) -> f32 {
    let p = vpaddq_f32(lo, hi); // [l0+l1, l2+l3, l4+l5, l6+l7]
    let p = vpaddq_f32(p, p); // [(l0+l1)+(l2+l3), (l4+l5)+(l6+l7), ..]
    vgetq_lane_f32::<0>(p) + vgetq_lane_f32::<1>(p)
}

/// 8 codes (as i8) to two float32x4.
#[inline]
#[target_feature(enable = "neon")]
fn widen(codes: int8x8_t) -> (float32x4_t, float32x4_t) {
    let w16 = vmovl_s8(codes);
    (
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(w16))),
        vcvtq_f32_s32(vmovl_high_s16(w16)),
    )
}

/// The 8-lane partial of one group: `x` is the group's activations laid out
/// by `chunked_f32` (zero-padded chunks of 8), `code8(c)` the codes of chunk c.
#[inline]
#[target_feature(enable = "neon")]
fn partial(x: &[f32], chunks: usize, code8: impl Fn(usize) -> int8x8_t) -> f32 {
    assert!(x.len() >= chunks * 8);
    let (mut lo, mut hi) = (vdupq_n_f32(0.0), vdupq_n_f32(0.0));
    for c in 0..chunks {
        let (wl, wh) = widen(code8(c));
        // SAFETY: c < chunks and x holds chunks · 8 floats (asserted above).
        let (xl, xh) = unsafe { (vld1q_f32(x.as_ptr().add(c * 8)), vld1q_f32(x.as_ptr().add(c * 8 + 4))) };
        lo = vaddq_f32(lo, vmulq_f32(xl, wl));
        hi = vaddq_f32(hi, vmulq_f32(xh, wh));
    }
    tree(lo, hi)
}

/// 8 int8 codes from column `c` (zero past the end).
#[inline]
#[target_feature(enable = "neon")]
fn q8_codes(w: &[i8], c: usize) -> int8x8_t {
    let mut buf = [0i8; 8];
    let n = (w.len() - c).min(8);
    buf[..n].copy_from_slice(&w[c..c + n]);
    // SAFETY: an 8-byte load of a local 8-byte array.
    unsafe { vld1_s8(buf.as_ptr()) }
}

/// The 8 codes of 4 packed bytes from byte `b` (the zero code past `end`), in
/// natural column order: zip of low and high nibbles, minus the bias 8.
#[inline]
#[target_feature(enable = "neon")]
fn q4_codes(p: &[u8], b: usize, end: usize) -> int8x8_t {
    let mut buf = [0x88u8; 8];
    let n = (end - b).min(4);
    buf[..n].copy_from_slice(&p[b..b + n]);
    // SAFETY: an 8-byte load of a local 8-byte array.
    let v = unsafe { vld1_u8(buf.as_ptr()) };
    let nib = vzip1_u8(vand_u8(v, vdup_n_u8(0x0F)), vshr_n_u8::<4>(v));
    vsub_s8(vreinterpret_s8_u8(nib), vdup_n_s8(8))
}

qlinear_kernels_scalar::weight_only_gemms!(#[target_feature(enable = "neon")]);
