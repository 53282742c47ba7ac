//! AVX-512 activation quantizer, byte for byte `quantize_row_q8`
//! (docs/NUMERICS.md §3.2): 64 values a block, then 16 a step with masked
//! tails. Its blocks need AVX-512 DQ (`vreduceps`, `vrangeps`), which the
//! tier's detection requires (every CPU with AVX-512 VNNI has it).
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

use qlinear_kernels_core::{q8_reciprocal, q8_scale_from_abs_max_bits};
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

    /// Quantizes the 64 values at `x` into the 64 codes at `codes`: four
    /// [`Steps::step`]s' codes in fewer instructions, where all 64 products
    /// lie far enough from half-integers, and the four steps otherwise.
    ///
    /// A step's roundings (`vrndscaleps` is two µops), the test of each step
    /// and the narrowing store (`vpmovsdb`, two) kept it at about 10 µops on
    /// the two 512-bit ports; here a value takes the product, one rounding
    /// conversion, `vreduceps` (`y − n` in one µop) and a quarter of a
    /// `vrangeps` (the largest `|y − n|` of the four), and four steps share
    /// one test and one packing.
    ///
    /// # Safety
    /// AVX-512 F, BW and DQ are present; 64 values are readable at `x` and
    /// 64 codes writable at `codes`.
    #[inline(always)]
    unsafe fn block(&self, x: *const f32, codes: *mut i8) {
        const RTE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        // `vreduceps`: keep 0 fraction bits, round to nearest even, no
        // precision exception: `y − rne(y)`, exact
        const REDUCE: i32 = 0x08;
        // `vrangeps`: the larger magnitude, its sign cleared
        const ABS_MAX: i32 = 0x0B;
        // SAFETY: the caller's: the features, and 64 values at `x` and codes
        // at `codes`.
        unsafe {
            let y: [__m512; 4] = std::array::from_fn(|j| _mm512_mul_ps(_mm512_loadu_ps(x.add(16 * j)), self.r));
            let d = y.map(|y| _mm512_reduce_ps::<REDUCE>(y));
            let far = _mm512_range_ps::<ABS_MAX>(
                _mm512_range_ps::<ABS_MAX>(d[0], d[1]),
                _mm512_range_ps::<ABS_MAX>(d[2], d[3]),
            );
            if _mm512_cmp_ps_mask::<_CMP_GT_OQ>(far, self.near) != 0 {
                for j in 0..4 {
                    self.step(x.add(16 * j), codes.add(16 * j), 0xFFFF);
                }
                return;
            }
            // the fast path's integers are in [−127, 127] (`q8_reciprocal`),
            // so both saturating packs are exact; they interleave the four
            // vectors by 128-bit lanes, 4 codes of each a lane, which one
            // permutation of 32-bit pieces puts back in order
            let n = y.map(|y| _mm512_cvt_roundps_epi32::<RTE>(y));
            let bytes = _mm512_packs_epi16(_mm512_packs_epi32(n[0], n[1]), _mm512_packs_epi32(n[2], n[3]));
            let order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
            _mm512_storeu_si512(codes.cast(), _mm512_permutexvar_epi32(order, bytes));
        }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512dq")]
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
    while c + 64 <= k {
        // SAFETY: c + 64 <= k = x.len() = codes.len(); DQ by the target
        // features.
        unsafe { v.block(x.as_ptr().add(c), codes.as_mut_ptr().add(c)) };
        c += 64;
    }
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
