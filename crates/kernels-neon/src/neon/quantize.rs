//! NEON activation quantizer, byte for byte `quantize_row_q8`: `max|x|` on
//! the bits of `|x|` (`abs_max_bits`: exact in any order, and NaN or ±∞ found
//! in the same pass); the same f32 division; `frintn` rounds to nearest even.

use std::arch::aarch64::*;

use qlinear_kernels_scalar::{abs_max_bits, q8_scale_from_abs_max_bits};
use qlinear_quant_recipe::Q8_MAX_ABS;

#[target_feature(enable = "neon")]
pub(crate) fn quantize_row_q8(x: &[f32], codes: &mut [i8]) -> Option<f32> {
    assert_eq!(x.len(), codes.len());
    let k = x.len();
    let abs_mask = vdupq_n_u32(0x7FFF_FFFF);
    let mut vmax = vdupq_n_u32(0);
    let mut c = 0;
    while c + 4 <= k {
        // SAFETY: c + 4 <= k = x.len().
        let v = unsafe { vld1q_u32(x.as_ptr().add(c).cast()) };
        vmax = vmaxq_u32(vmax, vandq_u32(v, abs_mask));
        c += 4;
    }
    let scale = q8_scale_from_abs_max_bits(abs_max_bits(vmaxvq_u32(vmax), &x[c..]))?;
    if scale == 0.0 {
        codes.fill(0);
        return Some(0.0);
    }
    let lim = f32::from(Q8_MAX_ABS);
    let (vs, hi, lo) = (vdupq_n_f32(scale), vdupq_n_f32(lim), vdupq_n_f32(-lim));
    let q4 = |at: usize| {
        // SAFETY: callers pass at + 4 <= k = x.len().
        let v = unsafe { vld1q_f32(x.as_ptr().add(at)) };
        vcvtq_s32_f32(vminq_f32(vmaxq_f32(vrndnq_f32(vdivq_f32(v, vs)), lo), hi))
    };
    let mut c = 0;
    while c + 8 <= k {
        let w16 = vcombine_s16(vmovn_s32(q4(c)), vmovn_s32(q4(c + 4)));
        // SAFETY: c + 8 <= k = codes.len(); an 8-byte store.
        unsafe { vst1_s8(codes.as_mut_ptr().add(c), vmovn_s16(w16)) };
        c += 8;
    }
    for (o, &v) in codes[c..].iter_mut().zip(&x[c..]) {
        *o = (v / scale).round_ties_even().clamp(-lim, lim) as i8;
    }
    Some(scale)
}
