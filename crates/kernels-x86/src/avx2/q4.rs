//! AVX2 W4A8. Biased nibbles are unsigned (0..15), so `maddubs(nibble, x)` is
//! exact (a pair is at most 2·15·127 = 3810) and the bias costs one
//! `−8·Σx` per group. Activations are split even/odd per 64 columns once per
//! call, so 32 packed bytes give the 32 even columns (low nibbles) and the 32
//! odd columns (high nibbles) of a block with one mask and one shift.

use qlinear_kernels_core::dot_i8_q4_biased as tail_biased;
use std::arch::x86_64::*;

use super::hsum_epi32;
use qlinear_kernels_core::frame::layout::split_even_odd_i8;

/// Columns per block: 32 packed bytes.
pub(crate) const BLOCK: usize = 64;

/// The madd vector of 64-column block `blk` of one packed row against one
/// split activation row: group `2·blk` in lanes 0-3, `2·blk + 1` in lanes
/// 4-7 (biased, uncorrected; exact i32).
///
/// # Safety
/// `w` holds at least `(blk + 1) · 32` bytes and `xs` `(blk + 1) · 64` codes.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn block_madd(xs: &[i8], w: &[u8], blk: usize) -> __m256i {
    let mask = _mm256_set1_epi8(0x0F);
    // SAFETY: bounded by the caller's contract; unaligned loads.
    unsafe {
        let b = _mm256_loadu_si256(w.as_ptr().add(blk * BLOCK / 2).cast());
        let lo = _mm256_and_si256(b, mask);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(b), mask);
        let xe = _mm256_loadu_si256(xs.as_ptr().add(blk * BLOCK).cast());
        let xo = _mm256_loadu_si256(xs.as_ptr().add(blk * BLOCK + 32).cast());
        // each maddubs pair <= 3810, their sum <= 7620: no i16 saturation
        let p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
        _mm256_madd_epi16(p, _mm256_set1_epi16(1))
    }
}

/// The 8 i32 lanes of `Σ x·b` over one 64-column block for `R` rows: lanes 0-3
/// cover columns 0..32 of the block, lanes 4-7 columns 32..64.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn block_rows<const R: usize>(xs: &[i8], w: [&[u8]; R], blk: usize) -> [__m256i; R] {
    assert!(xs.len() >= (blk + 1) * BLOCK && w.iter().all(|w| w.len() >= (blk + 1) * BLOCK / 2));
    let mut v = [_mm256_setzero_si256(); R];
    for (v, w) in v.iter_mut().zip(w) {
        // prefetch ahead on each row's stream (a hint: past the row is harmless)
        _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().wrapping_add(blk * BLOCK / 2 + 768).cast());
        // SAFETY: the assert above bounds the block's loads.
        *v = unsafe { block_madd(xs, w, blk) };
    }
    v
}

/// `Σ x·b` (biased, uncorrected) of `R` packed rows against one activation row.
#[inline]
#[target_feature(enable = "avx2")]
fn dot_rows_biased<const R: usize>(xs: &[i8], x: &[i8], w: [&[u8]; R]) -> [i32; R] {
    let blocks = x.len() / BLOCK;
    let mut acc = [_mm256_setzero_si256(); R];
    for blk in 0..blocks {
        let v = block_rows::<R>(xs, w, blk);
        for r in 0..R {
            acc[r] = _mm256_add_epi32(acc[r], v[r]);
        }
    }
    let c = blocks * BLOCK;
    std::array::from_fn(|r| hsum_epi32(acc[r]) + tail_biased(&x[c..], &w[r][c / 2..]))
}

/// The batch tile of W4A8: `WR` packed weight rows against `XR` split
/// activation rows, `Σ x·b` (biased, uncorrected) over the whole 64-column
/// blocks. Each block's nibbles are unpacked once for the `XR` rows and each
/// activation load serves the `WR` rows; `WR · XR` i32 accumulators (with
/// WR = 2, XR = 4 the 16 registers hold the tile). Integer sums: any order
/// is exact.
#[inline]
#[target_feature(enable = "avx2")]
fn tile_biased<const WR: usize, const XR: usize>(xs: [&[i8]; XR], w: [&[u8]; WR], blocks: usize) -> [[i32; XR]; WR] {
    assert!(xs.iter().all(|x| x.len() >= blocks * BLOCK) && w.iter().all(|w| w.len() >= blocks * BLOCK / 2));
    let mask = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); XR]; WR];
    for blk in 0..blocks {
        // SAFETY: the assert above bounds every load; unaligned loads.
        unsafe {
            let nib: [(__m256i, __m256i); WR] = std::array::from_fn(|r| {
                _mm_prefetch::<_MM_HINT_T0>(w[r].as_ptr().wrapping_add(blk * BLOCK / 2 + 768).cast());
                let b = _mm256_loadu_si256(w[r].as_ptr().add(blk * BLOCK / 2).cast());
                (
                    _mm256_and_si256(b, mask),
                    _mm256_and_si256(_mm256_srli_epi16::<4>(b), mask),
                )
            });
            for i in 0..XR {
                let xe = _mm256_loadu_si256(xs[i].as_ptr().add(blk * BLOCK).cast());
                let xo = _mm256_loadu_si256(xs[i].as_ptr().add(blk * BLOCK + 32).cast());
                for r in 0..WR {
                    // each maddubs pair <= 3810, their sum <= 7620: no i16 saturation
                    let p = _mm256_add_epi16(_mm256_maddubs_epi16(nib[r].0, xe), _mm256_maddubs_epi16(nib[r].1, xo));
                    acc[r][i] = _mm256_add_epi32(acc[r][i], _mm256_madd_epi16(p, ones));
                }
            }
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|i| hsum_epi32(acc[r][i])))
}

/// `Σ x·b` (biased, uncorrected) of one packed row against one split
/// activation row over its whole blocks, two blocks (one cache line of
/// weights) a step with one prefetch and two accumulators, then the odd
/// block and the natural-order tail: by its loop body, about 10
/// instructions a block against 12 for [`dot_rows_biased`] at `R = 1` (a
/// prefetch per block, the loop's own count and test per block). Integer
/// sums: any order is exact.
#[inline]
#[target_feature(enable = "avx2")]
fn dot_row_biased(xs: &[i8], x: &[i8], w: &[u8]) -> i32 {
    let blocks = x.len() / BLOCK;
    assert!(xs.len() >= blocks * BLOCK && w.len() >= blocks * BLOCK / 2);
    let step = |acc: __m256i, blk: usize| {
        // SAFETY: every caller has blk < blocks, bounded by the assert above.
        _mm256_add_epi32(acc, unsafe { block_madd(xs, w, blk) })
    };
    let (mut a0, mut a1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
    let mut blk = 0;
    while blk + 2 <= blocks {
        // a hint on the row's stream: an address past the row is harmless
        _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().wrapping_add(blk * BLOCK / 2 + 768).cast());
        a0 = step(a0, blk);
        a1 = step(a1, blk + 1);
        blk += 2;
    }
    if blk < blocks {
        a0 = step(a0, blk);
    }
    let c = blocks * BLOCK;
    let tail = if c < x.len() {
        tail_biased(&x[c..], &w[c / 2..])
    } else {
        0
    };
    hsum_epi32(_mm256_add_epi32(a0, a1)) + tail
}

#[target_feature(enable = "avx2")]
pub(crate) fn dot_i8_q4(x: &[i8], packed: &[u8]) -> i32 {
    let xs = split_even_odd_i8(x, BLOCK);
    let sum: i32 = x.iter().map(|&v| i32::from(v)).sum();
    dot_row_biased(&xs, x, packed) - 8 * sum
}

/// W4A8 micro-kernel (frame tile `R` × 1): `R` packed weight rows against
/// one split activation row, over whole 64-column blocks.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w4a8_rows<const R: usize>(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    assert!(x.len() == 1 && w.len() == R && acc.len() == R && x[0].len().is_multiple_of(BLOCK));
    // whole blocks only: the natural-order tail `dot_rows_biased` would add is empty
    acc.copy_from_slice(&dot_rows_biased::<R>(x[0], x[0], std::array::from_fn(|q| w[q])));
}

/// W4A8 decode micro-kernel (frame tile `R` × 1): `R` packed weight rows
/// against one split activation row, one row after another, so that the
/// weights stream as one sequential run (the activation row stays in L1).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w4a8_seq<const R: usize>(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    assert!(x.len() == 1 && w.len() == R && acc.len() == R && x[0].len().is_multiple_of(BLOCK));
    for (a, w) in acc.iter_mut().zip(w) {
        *a = dot_row_biased(x[0], x[0], w);
    }
}

/// W4A8 batch micro-kernel (frame tile `2·PAIRS` × 4): [`tile_biased`]'s
/// 2 × 4 tile over `PAIRS` pairs of weight rows in turn, the 4 activation
/// rows re-read from L1, so that the frame's work per tile call (the views,
/// the scales, the store; about 690 instructions) is paid once per
/// `2·PAIRS` weight rows: with the 2 × 4 tile alone it was half of a
/// 576 × 576 call at M = 16. Registers allow no wider tile (2 × 4 holds 8
/// accumulators beside the loads).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w4a8_batch_pairs<const PAIRS: usize>(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    assert!(x.len() == 4 && w.len() == 2 * PAIRS && acc.len() == 8 * PAIRS);
    let blocks = x[0].len() / BLOCK;
    assert!(x.iter().all(|r| r.len() == blocks * BLOCK) && w.iter().all(|r| r.len() == blocks * BLOCK / 2));
    let xs: [&[i8]; 4] = std::array::from_fn(|i| x[i]);
    for p in 0..PAIRS {
        let sums = tile_biased::<2, 4>(xs, [w[2 * p], w[2 * p + 1]], blocks);
        for (i, row) in acc.chunks_exact_mut(2 * PAIRS).enumerate() {
            row[2 * p] = sums[0][i];
            row[2 * p + 1] = sums[1][i];
        }
    }
}

/// W4A8 batch micro-kernel (frame tile `WR` × `XR`, through [`tile_biased`]).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w4a8_batch<const WR: usize, const XR: usize>(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    assert!(x.len() == XR && w.len() == WR && acc.len() == WR * XR);
    let blocks = x[0].len() / BLOCK;
    assert!(x.iter().all(|r| r.len() == blocks * BLOCK) && w.iter().all(|r| r.len() == blocks * BLOCK / 2));
    let sums = tile_biased::<WR, XR>(std::array::from_fn(|i| x[i]), std::array::from_fn(|q| w[q]), blocks);
    for i in 0..XR {
        for q in 0..WR {
            acc[i * WR + q] = sums[q][i];
        }
    }
}
