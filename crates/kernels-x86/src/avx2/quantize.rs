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

/// The activation codes' sums per group (`GroupSums`), exact: `maddubs`
/// of 32 codes against 32 ones (pairs of at most 254: no saturation), then
/// `madd` with ones, leaves 8 sums of 4 codes in i32 lanes. Groups of 32
/// are one load each, four groups' lanes reduced together by three `hadd`;
/// any other group (per channel: the whole row) adds its loads' lanes and
/// reduces once, its last codes short of 32 one by one.
#[target_feature(enable = "avx2")]
pub(crate) fn group_sums(codes: &[i8], group: usize, sums: &mut [i32]) {
    assert!(group > 0 && codes.len() == group * sums.len(), "group sums shape");
    let (ones8, ones16) = (_mm256_set1_epi8(1), _mm256_set1_epi16(1));
    // the 8 i32 lanes of the sums of 4 of the first 32 codes of `g`
    let quads = |g: &[i8]| {
        assert!(g.len() >= 32);
        // SAFETY: 32 codes lie in `g` (asserted); no alignment needed.
        let v = unsafe { _mm256_loadu_si256(g.as_ptr().cast()) };
        _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, v), ones16)
    };
    if group == 32 {
        let done = 4 * (sums.len() / 4);
        for (four, g) in sums[..done].chunks_exact_mut(4).zip(codes.chunks_exact(128)) {
            let (a, b, c, d) = (quads(g), quads(&g[32..]), quads(&g[64..]), quads(&g[96..]));
            // per 128 bits: lanes 0–3 (low) and 4–7 (high) of a, b, c, d
            // summed in pairs, then the halves added
            let h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
            let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
            // SAFETY: a 16-byte store into `four`'s 4 sums.
            unsafe { _mm_storeu_si128(four.as_mut_ptr().cast(), s) };
        }
        for (s, g) in sums[done..].iter_mut().zip(codes[32 * done..].chunks_exact(32)) {
            *s = lanes_sum(quads(g));
        }
        return;
    }
    for (s, g) in sums.iter_mut().zip(codes.chunks_exact(group)) {
        let mut acc = _mm256_setzero_si256();
        let mut loads = g.chunks_exact(32);
        for c in &mut loads {
            acc = _mm256_add_epi32(acc, quads(c));
        }
        *s = lanes_sum(acc) + loads.remainder().iter().map(|&c| i32::from(c)).sum::<i32>();
    }
}

/// The sum of 8 i32 lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn lanes_sum(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0x4E>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0xB1>(s));
    _mm_cvtsi128_si32(s)
}
