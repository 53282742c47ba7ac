//! AVX2 activation quantizer, byte for byte `quantize_row_q8`. The maximum
//! runs on the bits of `|x|` (`abs_max_bits`): exact, and it finds NaN and
//! ±∞ in the same pass. The quotients are `x · (1/s)` rounded to nearest
//! even wherever that provably rounds as §3.2's `x / s` does, and divided
//! and clamped in the rare steps of 8 where it may not (`q8_reciprocal`,
//! which holds the proof); the column tail divides. Blocks of 32 test and
//! pack four steps at once.

use std::arch::x86_64::*;

use qlinear_kernels_core::{abs_max_bits, q8_reciprocal, q8_scale_from_abs_max_bits};
use qlinear_quant_recipe::Q8_MAX_ABS;

const RTE: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

/// The broadcast scale, reciprocal, bound and `|·|` mask of one row's steps.
struct Steps {
    s: __m256,
    r: __m256,
    near: __m256,
    abs: __m256,
}

impl Steps {
    /// `y = x · (1/s)` of the 8 values at `x`, its integers `n`, and the
    /// `|y − n|`.
    ///
    /// # Safety
    /// AVX2 is present; 8 values are readable at `x`.
    #[inline(always)]
    unsafe fn products(&self, x: *const f32) -> (__m256, __m256) {
        // SAFETY: the caller's.
        unsafe {
            let y = _mm256_mul_ps(_mm256_loadu_ps(x), self.r);
            let n = _mm256_round_ps::<RTE>(y);
            (n, _mm256_and_ps(_mm256_sub_ps(y, n), self.abs))
        }
    }

    /// Quantizes the 8 values at `x` into the 8 codes at `codes`.
    ///
    /// # Safety
    /// AVX2 is present; 8 values are readable at `x` and 8 codes writable at
    /// `codes`.
    #[inline(always)]
    unsafe fn step(&self, x: *const f32, codes: *mut i8) {
        // SAFETY: the caller's.
        unsafe {
            let (mut n, d) = self.products(x);
            // `n` is the division's integer, within [−127, 127], unless `y`
            // lies near a half-integer (`q8_reciprocal`): then these 8 divide
            if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(d, self.near)) != 0 {
                let lim = f32::from(Q8_MAX_ABS);
                let q = _mm256_round_ps::<RTE>(_mm256_div_ps(_mm256_loadu_ps(x), self.s));
                n = _mm256_min_ps(_mm256_max_ps(q, _mm256_set1_ps(-lim)), _mm256_set1_ps(lim));
            }
            let q = _mm256_cvtps_epi32(n);
            let w16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
            _mm_storel_epi64(codes.cast(), _mm_packs_epi16(w16, w16));
        }
    }

    /// Quantizes the 32 values at `x` into the 32 codes at `codes`: four
    /// [`Steps::step`]s' codes with one test for the need to divide (the
    /// largest `|y − n|` of the 32) and one packing, where all 32 products
    /// lie far enough from half-integers, and the four steps otherwise.
    ///
    /// # Safety
    /// AVX2 is present; 32 values are readable at `x` and 32 codes writable
    /// at `codes`.
    #[inline(always)]
    unsafe fn block(&self, x: *const f32, codes: *mut i8) {
        // SAFETY: the caller's: 32 values at `x`, 32 codes at `codes`.
        unsafe {
            let p: [(__m256, __m256); 4] = std::array::from_fn(|j| self.products(x.add(8 * j)));
            let far = _mm256_max_ps(_mm256_max_ps(p[0].1, p[1].1), _mm256_max_ps(p[2].1, p[3].1));
            if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(far, self.near)) != 0 {
                for j in 0..4 {
                    self.step(x.add(8 * j), codes.add(8 * j));
                }
                return;
            }
            // integers in [−127, 127] (`q8_reciprocal`): both saturating
            // packs are exact; they interleave the four steps by 128-bit
            // lanes, 4 codes of each a lane, and one permutation of 32-bit
            // pieces puts them back in order
            let q = p.map(|(n, _)| _mm256_cvtps_epi32(n));
            let bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            _mm256_storeu_si256(codes.cast(), _mm256_permutevar8x32_epi32(bytes, order));
        }
    }
}

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
    let v = Steps {
        s: _mm256_set1_ps(scale),
        r: _mm256_set1_ps(r),
        near: _mm256_set1_ps(near),
        abs: _mm256_castsi256_ps(abs_mask),
    };
    let mut c = 0;
    while c + 32 <= k {
        // SAFETY: c + 32 <= k = x.len() = codes.len().
        unsafe { v.block(x.as_ptr().add(c), codes.as_mut_ptr().add(c)) };
        c += 32;
    }
    while c + 8 <= k {
        // SAFETY: c + 8 <= k = x.len() = codes.len().
        unsafe { v.step(x.as_ptr().add(c), codes.as_mut_ptr().add(c)) };
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
