//! AVX-512 VNNI W4A8 micro-kernels: biased nibbles are already the unsigned
//! operand `vpdpbusd` wants, so `Σ x·b` needs no sign trick; the frame
//! subtracts `8·Σx`. Activations are split even/odd per 128 columns (the
//! frame's `EvenOdd` layout with blocks of 128), so 64 packed bytes give
//! the 64 even columns (low nibbles) and the 64 odd columns (high nibbles)
//! of a block with one mask and one shift.

use std::arch::x86_64::*;

use qlinear_kernels_core::dot_i8_q4_biased as tail_biased;
use qlinear_kernels_core::frame::layout::split_even_odd_i8;

use super::{far_prefetch, hsum_epi32, hsum_rows};

/// Columns per block: 64 packed bytes.
pub(crate) const BLOCK: usize = 128;
/// Bytes ahead of the current load that each weight row is prefetched.
pub(crate) const PREFETCH: usize = 4096;

/// `Σ x·b` (biased, uncorrected) of `R` packed rows against one split
/// activation row, over the whole blocks of `xs`. Each row's stream is
/// prefetched [`PREFETCH`] bytes ahead; past the row's end that is the next
/// row of the matrix (rows are contiguous), so a decode tile reading its
/// rows one after another never waits at a row's start.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_rows_biased<const R: usize>(xs: &[i8], w: [&[u8]; R]) -> [i32; R] {
    dot_rows_biased_lanes(xs, w).map(|v| hsum_epi32(v))
}

/// [`dot_rows_biased`] before the reduction: each row's 16 lane sums.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_rows_biased_lanes<const R: usize>(xs: &[i8], w: [&[u8]; R]) -> [__m512i; R] {
    let blocks = xs.len() / BLOCK;
    assert!(w.iter().all(|w| w.len() >= blocks * BLOCK / 2));
    let mask = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_si512(); R];
    for blk in 0..blocks {
        // SAFETY: blk < blocks: the assert above bounds every 64-byte load.
        unsafe {
            let xe = _mm512_loadu_si512(xs.as_ptr().add(blk * BLOCK).cast());
            let xo = _mm512_loadu_si512(xs.as_ptr().add(blk * BLOCK + 64).cast());
            for r in 0..R {
                // a hint: an address past the matrix is harmless
                _mm_prefetch::<_MM_HINT_T0>(w[r].as_ptr().wrapping_add(blk * BLOCK / 2 + PREFETCH).cast());
                let b = _mm512_loadu_si512(w[r].as_ptr().add(blk * BLOCK / 2).cast());
                let lo = _mm512_and_si512(b, mask);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(b), mask);
                acc[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[r], lo, xe), hi, xo);
            }
        }
    }
    acc
}

/// [`dot_rows_biased_lanes`] of one row, the low and the high nibbles
/// accumulated apart: the two `vpdpbusd`s of a block then start together
/// instead of one waiting for the other, which put two latencies a block on
/// each row's chain (wrapping i32 sums are exact in any order where the
/// true sum fits, NUMERICS.md §6.1). `FAR`: each load prefetches the row
/// [`PREFETCH`] bytes ahead ([`far_prefetch`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_row_biased_lanes<const FAR: bool>(xs: &[i8], w: &[u8]) -> __m512i {
    let blocks = xs.len() / BLOCK;
    assert!(w.len() >= blocks * BLOCK / 2);
    let mask = _mm512_set1_epi8(0x0F);
    let (mut lo_acc, mut hi_acc) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    for blk in 0..blocks {
        // SAFETY: blk < blocks: the assert above bounds every 64-byte load.
        unsafe {
            let xe = _mm512_loadu_si512(xs.as_ptr().add(blk * BLOCK).cast());
            let xo = _mm512_loadu_si512(xs.as_ptr().add(blk * BLOCK + 64).cast());
            if FAR {
                // a hint: an address past the matrix is harmless
                _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().wrapping_add(blk * BLOCK / 2 + PREFETCH).cast());
            }
            let b = _mm512_loadu_si512(w.as_ptr().add(blk * BLOCK / 2).cast());
            lo_acc = _mm512_dpbusd_epi32(lo_acc, _mm512_and_si512(b, mask), xe);
            hi_acc = _mm512_dpbusd_epi32(hi_acc, _mm512_and_si512(_mm512_srli_epi16::<4>(b), mask), xo);
        }
    }
    _mm512_add_epi32(lo_acc, hi_acc)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn dot_i8_q4(x: &[i8], packed: &[u8]) -> i32 {
    let xs = split_even_odd_i8(x, BLOCK);
    let c = xs.len();
    let sum: i32 = x.iter().map(|&v| i32::from(v)).sum();
    dot_rows_biased::<1>(&xs, [packed])[0] + tail_biased(&x[c..], &packed[c / 2..]) - 8 * sum
}

/// W4A8 decode micro-kernel (frame tile `R` × 1): `R` packed rows against
/// one split activation row, one row after another, so that the weights
/// stream as one sequential run (the activation row stays in L1).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w4a8_seq<const R: usize>(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    assert!(x.len() == 1 && w.len() == R && acc.len() == R && x[0].len().is_multiple_of(BLOCK));
    let lanes: [__m512i; R] = if far_prefetch() {
        std::array::from_fn(|r| dot_row_biased_lanes::<true>(x[0], w[r]))
    } else {
        std::array::from_fn(|r| dot_row_biased_lanes::<false>(x[0], w[r]))
    };
    hsum_rows(&lanes, acc);
}

/// `Σ x·b` (biased, uncorrected) for `WR` packed rows × `XR` split
/// activation rows over whole blocks: each weight block is unpacked once
/// and each activation block loaded once per tile (4 × 4 × 2 `vpdpbusd`s
/// per 64 packed bytes, all in registers).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_tile<const WR: usize, const XR: usize>(xs: [&[i8]; XR], w: [&[u8]; WR]) -> [[i32; WR]; XR] {
    let blocks = xs[0].len() / BLOCK;
    assert!(xs.iter().all(|v| v.len() == blocks * BLOCK) && w.iter().all(|w| w.len() == blocks * BLOCK / 2));
    let mask = _mm512_set1_epi8(0x0F);
    let mut acc = [[_mm512_setzero_si512(); WR]; XR];
    for blk in 0..blocks {
        // SAFETY: blk < blocks: the assert above bounds every 64-byte load.
        unsafe {
            let nib: [[__m512i; 2]; WR] = std::array::from_fn(|r| {
                _mm_prefetch::<_MM_HINT_T0>(w[r].as_ptr().wrapping_add(blk * BLOCK / 2 + PREFETCH).cast());
                let b = _mm512_loadu_si512(w[r].as_ptr().add(blk * BLOCK / 2).cast());
                [
                    _mm512_and_si512(b, mask),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(b), mask),
                ]
            });
            for i in 0..XR {
                let xe = _mm512_loadu_si512(xs[i].as_ptr().add(blk * BLOCK).cast());
                let xo = _mm512_loadu_si512(xs[i].as_ptr().add(blk * BLOCK + 64).cast());
                for r in 0..WR {
                    acc[i][r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[i][r], nib[r][0], xe), nib[r][1], xo);
                }
            }
        }
    }
    std::array::from_fn(|i| std::array::from_fn(|r| hsum_epi32(acc[i][r])))
}

/// W4A8 batch micro-kernel (frame tile `4·QUADS` × 4): [`dot_tile`]'s
/// 4 × 4 tile over `QUADS` quads of weight rows in turn, the 4 activation
/// rows re-read from L1, so that the frame's work per tile call is paid once
/// per `4·QUADS` weight rows (the AVX2 tier's 16 × 4 tile, for the same
/// reason). Registers allow no wider tile (4 × 4 holds 16 accumulators
/// beside 8 unpacked weight registers).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w4a8_batch_quads<const QUADS: usize>(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    assert!(x.len() == 4 && w.len() == 4 * QUADS && acc.len() == 16 * QUADS);
    let xs: [&[i8]; 4] = std::array::from_fn(|i| x[i]);
    for p in 0..QUADS {
        let sums = dot_tile::<4, 4>(xs, std::array::from_fn(|r| w[4 * p + r]));
        for (row, sums) in acc.chunks_exact_mut(4 * QUADS).zip(&sums) {
            row[4 * p..4 * p + 4].copy_from_slice(sums);
        }
    }
}

/// W4A8 batch micro-kernel (frame tile `WR` × `XR`, through [`dot_tile`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w4a8_batch<const WR: usize, const XR: usize>(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    assert!(x.len() == XR && w.len() == WR && acc.len() == WR * XR);
    let sums = dot_tile::<WR, XR>(std::array::from_fn(|i| x[i]), std::array::from_fn(|q| w[q]));
    for i in 0..XR {
        acc[i * WR..(i + 1) * WR].copy_from_slice(&sums[i]);
    }
}
