//! AVX-512 activation quantizer, byte for byte `quantize_row_q8`
//! (docs/NUMERICS.md §3.2), 16 values a step with masked tails.
//!
//! `max |x|` runs on the bits of `|x|` (`abs_max_bits`): exact in any order,
//! and NaN or ±∞ found in the same pass.
//!
//! **The quotients** are `x · (1/s)` rounded wherever that provably rounds
//! as §3.2's `x / s` does, and divided in the rare steps where it may not
//! (`q8_reciprocal`, which holds the proof). A division of 16 lanes took
//! about 11.5 cycles on an Intel Xeon (family 6 model 167), so at K = 576
//! the 36 divisions were most of the row's time.

use std::arch::x86_64::*;

use qlinear_kernels_scalar::{q8_reciprocal, q8_scale_from_abs_max_bits};
use qlinear_quant_recipe::Q8_MAX_ABS;

/// The broadcast scale, reciprocal and bound of one row's steps.
struct Steps {
    s: __m512,
    r: __m512,
    near: __m512,
}

impl Steps {
    /// Quantizes the lanes `m` selects of the 16 values at `x` into the 16
    /// codes at `codes`.
    ///
    /// # Safety
    /// AVX-512 F is present; the lanes `m` selects are readable at `x` and
    /// writable at `codes`.
    #[inline(always)]
    unsafe fn step(&self, x: *const f32, codes: *mut i8, m: __mmask16) {
        const RTE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        let lim = f32::from(Q8_MAX_ABS);
        // SAFETY: the caller's: the features, and the lanes `m` selects.
        unsafe {
            let v = _mm512_maskz_loadu_ps(m, x);
            let y = _mm512_mul_ps(v, self.r);
            let mut n = _mm512_roundscale_ps::<RTE>(y);
            // the fast path needs no clamp: |y| ≤ 127 (1 + 3.1 u) rounds
            // into [−127, 127] (`q8_reciprocal`)
            if _mm512_cmp_ps_mask::<_CMP_GT_OQ>(_mm512_abs_ps(_mm512_sub_ps(y, n)), self.near) != 0 {
                let q = _mm512_roundscale_ps::<RTE>(_mm512_div_ps(v, self.s));
                n = _mm512_min_ps(_mm512_max_ps(q, _mm512_set1_ps(-lim)), _mm512_set1_ps(lim));
            }
            // `n` is integral and within i8, so the conversion and the
            // saturating narrowing are exact
            _mm512_mask_cvtsepi32_storeu_epi8(codes, m, _mm512_cvtps_epi32(n));
        }
    }
}

#[target_feature(enable = "avx512f")]
pub(crate) fn quantize_row_q8(x: &[f32], codes: &mut [i8]) -> Option<f32> {
    assert_eq!(x.len(), codes.len());
    let k = x.len();
    let abs_mask = _mm512_set1_epi32(0x7FFF_FFFF);
    // two chains of integer maxima side by side
    let mut vmax = [_mm512_setzero_si512(); 2];
    let mut c = 0;
    while c + 32 <= k {
        for (j, m) in vmax.iter_mut().enumerate() {
            // SAFETY: c + 16j + 16 <= c + 32 <= k = x.len().
            let v = unsafe { _mm512_loadu_si512(x.as_ptr().add(c + 16 * j).cast()) };
            *m = _mm512_max_epu32(*m, _mm512_and_si512(v, abs_mask));
        }
        c += 32;
    }
    while c < k {
        let m = if k - c >= 16 { 0xFFFF } else { (1u16 << (k - c)) - 1 };
        // SAFETY: c < k = x.len(); the masked load reads only the lanes `m`
        // selects, c..min(c + 16, k), and the others are 0.
        let v = unsafe { _mm512_maskz_loadu_epi32(m, x.as_ptr().add(c).cast()) };
        vmax[0] = _mm512_max_epu32(vmax[0], _mm512_and_si512(v, abs_mask));
        c += 16;
    }
    let bits = _mm512_reduce_max_epu32(_mm512_max_epu32(vmax[0], vmax[1]));
    let scale = q8_scale_from_abs_max_bits(bits)?;
    if scale == 0.0 {
        codes.fill(0);
        return Some(0.0);
    }
    let (r, near) = q8_reciprocal(scale);
    let v = Steps {
        s: _mm512_set1_ps(scale),
        r: _mm512_set1_ps(r),
        near: _mm512_set1_ps(near),
    };
    let mut c = 0;
    while c + 16 <= k {
        // SAFETY: c + 16 <= k = x.len() = codes.len().
        unsafe { v.step(x.as_ptr().add(c), codes.as_mut_ptr().add(c), 0xFFFF) };
        c += 16;
    }
    if c < k {
        // SAFETY: c < k = x.len() = codes.len(), and the lanes k − c < 16
        // select are c..k.
        unsafe { v.step(x.as_ptr().add(c), codes.as_mut_ptr().add(c), (1u16 << (k - c)) - 1) };
    }
    Some(scale)
}
