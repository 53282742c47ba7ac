//! AVX2 activation quantizer, byte for byte `quantize_row_q8`. The maximum
//! runs on the bits of `|x|` (`abs_max_bits`): exact, and it finds NaN and
//! ±∞ in the same pass. The quotients are `x · (1/s)` rounded to nearest
//! even wherever that provably rounds as §3.2's `x / s` does, and divided
//! and clamped in the rare steps of 8 where it may not (`q8_reciprocal`,
//! which holds the proof); the column tail divides.

use std::arch::x86_64::*;

use qlinear_kernels_scalar::{abs_max_bits, q8_reciprocal, q8_scale_from_abs_max_bits};
use qlinear_quant_recipe::Q8_MAX_ABS;

#[target_feature(enable = "avx2")]
pub(crate) fn quantize_row_q8(x: &[f32], codes: &mut [i8]) -> Option<f32> {
    assert_eq!(x.len(), codes.len());
    let k = x.len();
    let abs_mask = _mm256_set1_epi32(0x7FFF_FFFF);
    // two maxima, so that two chains of `vpmaxud` run side by side (the
    // float `vmaxps` this replaces took four: its latency is 4 cycles, the
    // integer maximum's 1)
    let mut vmax = [_mm256_setzero_si256(); 2];
    let mut c = 0;
    while c + 16 <= k {
        for (j, m) in vmax.iter_mut().enumerate() {
            // SAFETY: c + 8j + 8 <= c + 16 <= k = x.len().
            let v = unsafe { _mm256_loadu_si256(x.as_ptr().add(c + 8 * j).cast()) };
            *m = _mm256_max_epu32(*m, _mm256_and_si256(v, abs_mask));
        }
        c += 16;
    }
    while c + 8 <= k {
        // SAFETY: c + 8 <= k = x.len().
        let v = unsafe { _mm256_loadu_si256(x.as_ptr().add(c).cast()) };
        vmax[0] = _mm256_max_epu32(vmax[0], _mm256_and_si256(v, abs_mask));
        c += 8;
    }
    let mut lanes = [0u32; 8];
    // SAFETY: a 32-byte store into a local 8-lane u32 array.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), _mm256_max_epu32(vmax[0], vmax[1])) };
    let scale = q8_scale_from_abs_max_bits(abs_max_bits(lanes.into_iter().max().unwrap_or(0), &x[c..]))?;
    if scale == 0.0 {
        codes.fill(0);
        return Some(0.0);
    }
    let (r, near) = q8_reciprocal(scale);
    let (vs, vr, vnear) = (_mm256_set1_ps(scale), _mm256_set1_ps(r), _mm256_set1_ps(near));
    let (lim, neg_lim) = (
        _mm256_set1_ps(f32::from(Q8_MAX_ABS)),
        _mm256_set1_ps(-f32::from(Q8_MAX_ABS)),
    );
    let abs_ps = _mm256_castsi256_ps(abs_mask);
    const RTE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    let mut c = 0;
    while c + 8 <= k {
        // SAFETY: c + 8 <= k = x.len() = codes.len(); the 8 result bytes are
        // stored with an 8-byte store at codes[c..c + 8].
        unsafe {
            let v = _mm256_loadu_ps(x.as_ptr().add(c));
            let y = _mm256_mul_ps(v, vr);
            let mut n = _mm256_round_ps::<RTE>(y);
            // `n` is the division's integer, within [−127, 127], unless `y`
            // lies near a half-integer (`q8_reciprocal`): then these 8 divide
            let d = _mm256_and_ps(_mm256_sub_ps(y, n), abs_ps);
            if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(d, vnear)) != 0 {
                let q = _mm256_round_ps::<RTE>(_mm256_div_ps(v, vs));
                n = _mm256_min_ps(_mm256_max_ps(q, neg_lim), lim);
            }
            let q = _mm256_cvtps_epi32(n);
            let w16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
            _mm_storel_epi64(codes.as_mut_ptr().add(c).cast(), _mm_packs_epi16(w16, w16));
        }
        c += 8;
    }
    for (o, &v) in codes[c..].iter_mut().zip(&x[c..]) {
        let m = f32::from(Q8_MAX_ABS);
        *o = (v / scale).round_ties_even().clamp(-m, m) as i8;
    }
    Some(scale)
}
