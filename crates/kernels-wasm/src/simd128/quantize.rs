//! SIMD128 activation quantizer, byte for byte `quantize_row_q8`: `max|x|` on
//! the bits of `|x|` (`abs_max_bits`: exact in any order, and NaN or ±∞ found
//! in the same pass); the same f32 division; `f32x4_nearest` rounds to
//! nearest even; the clamp and conversion are exact on integral values.

use std::arch::wasm32::*;

use qlinear_kernels_core::{abs_max_bits, q8_scale_from_abs_max_bits};
use qlinear_quant_recipe::Q8_MAX_ABS;

pub(crate) fn quantize_row_q8(x: &[f32], codes: &mut [i8]) -> Option<f32> {
    assert_eq!(x.len(), codes.len());
    let k = x.len();
    let load = |at: usize| {
        assert!(at + 4 <= k);
        // SAFETY: at + 4 <= k = x.len() (asserted).
        unsafe { v128_load(x.as_ptr().add(at).cast()) }
    };
    let abs_mask = u32x4_splat(0x7FFF_FFFF);
    let mut vmax = u32x4_splat(0);
    let mut c = 0;
    while c + 4 <= k {
        vmax = u32x4_max(vmax, v128_and(load(c), abs_mask));
        c += 4;
    }
    let lanes = [
        u32x4_extract_lane::<0>(vmax),
        u32x4_extract_lane::<1>(vmax),
        u32x4_extract_lane::<2>(vmax),
        u32x4_extract_lane::<3>(vmax),
    ];
    let bits = abs_max_bits(lanes.into_iter().max().unwrap_or(0), &x[c..]);
    let scale = q8_scale_from_abs_max_bits(bits)?;
    if scale == 0.0 {
        codes.fill(0);
        return Some(0.0);
    }
    let lim = f32::from(Q8_MAX_ABS);
    let (vs, hi, lo) = (f32x4_splat(scale), f32x4_splat(lim), f32x4_splat(-lim));
    let q4 = |at: usize| i32x4_trunc_sat_f32x4(f32x4_min(f32x4_max(f32x4_nearest(f32x4_div(load(at), vs)), lo), hi));
    let mut c = 0;
    while c + 16 <= k {
        let a = i16x8_narrow_i32x4(q4(c), q4(c + 4));
        let b = i16x8_narrow_i32x4(q4(c + 8), q4(c + 12));
        let mut out = [0i8; 16];
        // SAFETY: a 16-byte store into a local 16-byte array.
        unsafe { v128_store(out.as_mut_ptr().cast(), i8x16_narrow_i16x8(a, b)) };
        codes[c..c + 16].copy_from_slice(&out);
        c += 16;
    }
    for (o, &v) in codes[c..].iter_mut().zip(&x[c..]) {
        *o = (v / scale).round_ties_even().clamp(-lim, lim) as i8;
    }
    Some(scale)
}
