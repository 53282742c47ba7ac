//! SIMD128 activation quantizer, byte for byte `quantize_row_q8`: `max|x|` is
//! order-independent; the same f32 division; `f32x4_nearest` rounds to
//! nearest even; the clamp and conversion are exact on integral values.

use std::arch::wasm32::*;

use qlinear_quant_recipe::Q8_MAX_ABS;

pub(crate) fn quantize_row_q8(x: &[f32], codes: &mut [i8]) -> f32 {
    assert_eq!(x.len(), codes.len());
    let k = x.len();
    let load = |at: usize| {
        assert!(at + 4 <= k);
        // SAFETY: at + 4 <= k = x.len() (asserted).
        unsafe { v128_load(x.as_ptr().add(at).cast()) }
    };
    let mut vmax = f32x4_splat(0.0);
    let mut c = 0;
    while c + 4 <= k {
        vmax = f32x4_max(vmax, f32x4_abs(load(c)));
        c += 4;
    }
    let lanes = [
        f32x4_extract_lane::<0>(vmax),
        f32x4_extract_lane::<1>(vmax),
        f32x4_extract_lane::<2>(vmax),
        f32x4_extract_lane::<3>(vmax),
    ];
    let amax = x[c..].iter().map(|v| v.abs()).chain(lanes).fold(0f32, f32::max);
    let scale = amax / f32::from(Q8_MAX_ABS);
    if scale == 0.0 {
        codes.fill(0);
        return 0.0;
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
    scale
}
