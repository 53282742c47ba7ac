//! AVX2 W8A8: `maddubs(|x|, sign(w, x))` forms `x·w` in i16 pairs without
//! saturating (codes in [-127, 127]: a pair is at most 2·127·127 = 32258), and
//! `madd` with ones widens the pairs to i32.

use std::arch::x86_64::*;

use qlinear_kernels_core::dot_i8_i8 as dot_tail;

use super::hsum_epi32;

/// `Σ x·w_r` for `R` weight rows sharing one activation row; all slices have
/// the same length (checked by the callers).
#[inline]
#[target_feature(enable = "avx2")]
fn dot_rows<const R: usize>(x: &[i8], w: [&[i8]; R]) -> [i32; R] {
    let k = x.len();
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_si256(); R];
    let mut c = 0;
    while c + 32 <= k {
        // SAFETY: c + 32 <= k = x.len() = w[r].len(); unaligned loads.
        unsafe {
            let xv = _mm256_loadu_si256(x.as_ptr().add(c).cast());
            let ax = _mm256_abs_epi8(xv);
            for r in 0..R {
                // prefetch ahead on each row's stream (a hint: past the row is harmless)
                _mm_prefetch::<_MM_HINT_T0>(w[r].as_ptr().wrapping_add(c + 1024).cast());
                let wv = _mm256_loadu_si256(w[r].as_ptr().add(c).cast());
                let p = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv, xv));
                acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(p, ones));
            }
        }
        c += 32;
    }
    let mut out = [0i32; R];
    for r in 0..R {
        // the frame hands over whole blocks: the tail is usually empty
        let tail = if c < k { dot_tail(&x[c..], &w[r][c..]) } else { 0 };
        out[r] = hsum_epi32(acc[r]) + tail;
    }
    out
}

/// `Σ x·w` of one weight row, 64 columns (one cache line of weights) a
/// step with one prefetch and two accumulators, then a 32-column step and
/// the scalar tail: by its loop body, about 8 instructions per 32 columns
/// against 11 for [`dot_rows`] at `R = 1` (a prefetch per 32 columns, the
/// loop's own count and test per 32). With the frame's changes of
/// `75abfa8`, a 576 × 576 call's callgrind count fell 21 % (`f8180df`, Zen
/// 3 EPYC, docs/benchmarks/history.md). Integer sums: any order is exact.
#[inline]
#[target_feature(enable = "avx2")]
fn dot_row(x: &[i8], w: &[i8]) -> i32 {
    assert_eq!(x.len(), w.len());
    let k = x.len();
    let ones = _mm256_set1_epi16(1);
    let step = |acc: __m256i, c: usize| {
        // SAFETY: every caller has c + 32 <= k = x.len() = w.len(); unaligned loads.
        unsafe {
            let xv = _mm256_loadu_si256(x.as_ptr().add(c).cast());
            let wv = _mm256_loadu_si256(w.as_ptr().add(c).cast());
            let p = _mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(wv, xv));
            _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones))
        }
    };
    let (mut a0, mut a1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    let mut c = 0;
    while c + 64 <= k {
        // a hint on the row's stream: an address past the row is harmless
        _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().wrapping_add(c + 1024).cast());
        a0 = step(a0, c);
        a1 = step(a1, c + 32);
        c += 64;
    }
    if c + 32 <= k {
        a0 = step(a0, c);
        c += 32;
    }
    // the frame hands over whole blocks: the tail is usually empty
    let tail = if c < k { dot_tail(&x[c..], &w[c..]) } else { 0 };
    hsum_epi32(_mm256_add_epi32(a0, a1)) + tail
}

#[target_feature(enable = "avx2")]
pub(crate) fn dot_i8_i8(a: &[i8], b: &[i8]) -> i32 {
    dot_row(a, b)
}

/// W8A8 decode micro-kernel (frame tile `R` × 1): `R` weight rows against
/// one activation row, one row after another, so that the weights stream as
/// one sequential run (the activation row stays in L1); the loop over rows
/// is here so that the frame's per-tile work is paid once per `R` rows.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w8a8_seq<const R: usize>(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    assert!(x.len() == 1 && w.len() == R && acc.len() == R);
    assert!(w.iter().all(|r| r.len() == x[0].len()));
    for (a, w) in acc.iter_mut().zip(w) {
        *a = dot_row(x[0], w);
    }
}

/// W8A8 micro-kernel (frame tile `4·QUADS` × `XR`): `QUADS` blocks of 4 weight rows,
/// each block sharing every load of one activation row, run over the `XR`
/// activation rows while the block is in L1 (`QUADS = 0`: one weight row). The
/// loops over blocks and rows are here, not in the frame, so that the
/// frame's per-tile work is paid once per `4·QUADS · XR` outputs: the M = 1
/// stream is bound by load latency, and per-call gaps between 4-row tiles
/// cost a fifth of its speed.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w8a8<const QUADS: usize, const XR: usize>(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    let wr = if QUADS == 0 { 1 } else { 4 * QUADS };
    assert!(x.len() == XR && w.len() == wr && acc.len() == wr * XR);
    assert!(x.iter().all(|r| r.len() == x[0].len()) && w.iter().all(|r| r.len() == x[0].len()));
    if QUADS == 0 {
        for (i, xi) in x.iter().enumerate() {
            acc[i] = dot_row(xi, w[0]);
        }
        return;
    }
    for b in 0..QUADS {
        let rows: [&[i8]; 4] = std::array::from_fn(|q| w[4 * b + q]);
        for (i, xi) in x.iter().enumerate() {
            acc[i * wr + 4 * b..i * wr + 4 * b + 4].copy_from_slice(&dot_rows::<4>(xi, rows));
        }
    }
}
