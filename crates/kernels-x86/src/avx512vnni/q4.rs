//! AVX-512 VNNI W4A8: biased nibbles are already the unsigned operand
//! `vpdpbusd` wants, so `Σ x·b` needs no sign trick; the bias is one `−8·Σx`.
//! Activations are split even/odd per 128 columns (64 packed bytes).

use std::arch::x86_64::*;
use std::ops::Range;

use qlinear_kernels_scalar::{dot_i8_q4_biased as tail_biased, ActivationsQ8, OutputTile};
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrixQ4};

use super::{hsum_epi32, AlignedRows, SweepPrefetch};
use qlinear_kernels_scalar::layout::{split_even_odd_i8, split_even_odd_into};

const ROWS: usize = 4;
/// Activation rows per tile when M > 1.
const TILE_M: usize = 4;
const BLOCK: usize = 128;
/// Bytes ahead of the current load that each weight row is prefetched.
const PREFETCH: usize = 1024;

/// `Σ x_i·b_q` (biased, uncorrected) for `R` rows and one activation row.
///
/// Each row's stream is prefetched `PREFETCH` bytes ahead; past the row's end
/// the prefetch moves on to the same offset of the row `next` bytes further
/// (the row this one hands over to in the next block of `R` rows, 0 for none),
/// so a block starts with its first lines already on the way.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_rows_biased<const R: usize>(xs: &[i8], x: &[i8], w: [&[u8]; R], next: usize) -> [i32; R] {
    let blocks = x.len() / BLOCK;
    let len = w[0].len();
    assert!(xs.len() >= blocks * BLOCK && w.iter().all(|w| w.len() >= blocks * BLOCK / 2));
    let mask = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_setzero_si512(); R];
    for blk in 0..blocks {
        // SAFETY: blk < blocks: the assert above bounds every 64-byte load.
        unsafe {
            let xe = _mm512_loadu_si512(xs.as_ptr().add(blk * BLOCK).cast());
            let xo = _mm512_loadu_si512(xs.as_ptr().add(blk * BLOCK + 64).cast());
            for r in 0..R {
                // Prefetch ahead on each row's stream: with several rows in
                // flight the hardware streamer alone leaves DRAM latency exposed.
                // (A prefetch is a hint: an address past the row is harmless.)
                let off = blk * BLOCK / 2 + PREFETCH;
                let off = if off < len { off } else { off - len + next };
                _mm_prefetch::<_MM_HINT_T0>(w[r].as_ptr().wrapping_add(off).cast());
                let b = _mm512_loadu_si512(w[r].as_ptr().add(blk * BLOCK / 2).cast());
                let lo = _mm512_and_si512(b, mask);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(b), mask);
                acc[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[r], lo, xe), hi, xo);
            }
        }
    }
    let c = blocks * BLOCK;
    std::array::from_fn(|r| hsum_epi32(acc[r]) + tail_biased(&x[c..], &w[r][c / 2..]))
}

/// Blocks of K per chunk in the batch regime: 2048 columns, so a chunk of 16
/// activation rows (32 KiB) stays in L1 while each tile sweeps it (8, 16 and
/// 32 blocks measured alike at K = 4096; chunks matter for longer rows).
const CHUNK_BLOCKS: usize = 16;

/// `acc[i][q] += Σ x_i·b_q` (biased, uncorrected) over `blocks` for `R` rows ×
/// `MI` activation rows: each weight block is unpacked once and each
/// activation block loaded once per tile (the batch micro-kernel: 4 × 4 × 2
/// accumulating `vpdpbusd`s per 64 packed bytes, all in registers).
///
/// The rows are swept once per tile of activation rows, `passes` times in
/// all; the first pass would stream them from DRAM while the others find them
/// in cache. So each pass (`phase` of `passes`) prefetches every `passes`-th
/// line of the rows `next` bytes on (the next block's), spreading the next
/// block's DRAM traffic evenly over the current block's passes. Into L2 (T1):
/// the activation tiles cycle through L1 between passes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_tile<const R: usize, const MI: usize>(
    acc: &mut [[__m512i; R]; MI],
    xs: [&[i8]; MI],
    w: [&[u8]; R],
    blocks: Range<usize>,
    next: usize,
    (phase, passes): (usize, usize),
) {
    let mut sweep = SweepPrefetch::new((phase, passes));
    sweep.skip(blocks.start);
    assert!(xs.iter().all(|v| v.len() >= blocks.end * BLOCK) && w.iter().all(|w| w.len() >= blocks.end * BLOCK / 2));
    let mask = _mm512_set1_epi8(0x0F);
    let mut a = *acc;
    for blk in blocks {
        let mine = sweep.take();
        // SAFETY: blk < blocks.end: the assert above bounds every 64-byte load.
        unsafe {
            let nib: [[__m512i; 2]; R] = std::array::from_fn(|r| {
                if mine {
                    _mm_prefetch::<_MM_HINT_T1>(w[r].as_ptr().wrapping_add(next + blk * BLOCK / 2).cast());
                }
                let b = _mm512_loadu_si512(w[r].as_ptr().add(blk * BLOCK / 2).cast());
                [
                    _mm512_and_si512(b, mask),
                    _mm512_and_si512(_mm512_srli_epi16::<4>(b), mask),
                ]
            });
            for i in 0..MI {
                let xe = _mm512_loadu_si512(xs[i].as_ptr().add(blk * BLOCK).cast());
                let xo = _mm512_loadu_si512(xs[i].as_ptr().add(blk * BLOCK + 64).cast());
                for r in 0..R {
                    a[i][r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(a[i][r], nib[r][0], xe), nib[r][1], xo);
                }
            }
        }
    }
    *acc = a;
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn dot_i8_q4(x: &[i8], packed: &[u8]) -> i32 {
    let xs = split_even_odd_i8(x, BLOCK);
    let sum: i32 = x.iter().map(|&v| i32::from(v)).sum();
    dot_rows_biased::<1>(&xs, x, [packed], 0)[0] - 8 * sum
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn gemm_w4a8(x: &ActivationsQ8<'_>, w: &QuantizedMatrixQ4, rows: Range<usize>, y: &mut OutputTile<'_>) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::PerChannel(s) = w.scales() else {
        panic!("gemm_w4a8 needs per-channel scales")
    };
    assert!(
        rows.end <= w.n() && w.k() == x.k && (x.sum_group == x.k || x.k == 0),
        "W4A8 shapes"
    );
    let whole = x.k / BLOCK * BLOCK;
    let split = AlignedRows::new(x.m, whole, |i, dst| {
        split_even_odd_into(x.row(i), BLOCK, dst);
    });
    let blocks = x.k / BLOCK;
    let c = blocks * BLOCK;
    let tiles = x.m / TILE_M;
    let mut accs = vec![[[_mm512_setzero_si512(); ROWS]; TILE_M]; tiles];
    let mut r = rows.start;
    while r < rows.end {
        let j = r - rows.start;
        let n = if r + ROWS <= rows.end { ROWS } else { 1 };
        let mut i0 = 0;
        if n == ROWS && tiles > 0 {
            // K in chunks, every tile per chunk: the chunk's activations stay
            // in L1 across the tiles; the tiles' sums wait in `accs`.
            let wr: [&[u8]; ROWS] = std::array::from_fn(|q| w.row_packed(r + q));
            let next = ROWS * w.row_packed(r).len();
            accs.fill([[_mm512_setzero_si512(); ROWS]; TILE_M]);
            for start in (0..blocks).step_by(CHUNK_BLOCKS) {
                let chunk = start..(start + CHUNK_BLOCKS).min(blocks);
                for (tile, acc) in accs.iter_mut().enumerate() {
                    let xs: [&[i8]; TILE_M] = std::array::from_fn(|t| split.row(tile * TILE_M + t));
                    dot_tile::<ROWS, TILE_M>(acc, xs, wr, chunk.clone(), next, (tile, tiles));
                }
            }
            for (tile, acc) in accs.iter().enumerate() {
                for t in 0..TILE_M {
                    let i = tile * TILE_M + t;
                    let correction = 8 * x.row_sums(i)[0];
                    for q in 0..ROWS {
                        let dot = hsum_epi32(acc[t][q]) + tail_biased(&x.row(i)[c..], &wr[q][c / 2..]);
                        y.set(i, j + q, (dot - correction) as f32 * (x.scales[i] * s[r + q]));
                    }
                }
            }
            i0 = tiles * TILE_M;
        }
        for i in i0..x.m {
            let correction = 8 * x.row_sums(i)[0];
            if n == ROWS {
                let wr: [&[u8]; ROWS] = std::array::from_fn(|q| w.row_packed(r + q));
                let acc = dot_rows_biased::<ROWS>(split.row(i), x.row(i), wr, ROWS * w.row_packed(r).len());
                for q in 0..ROWS {
                    y.set(i, j + q, (acc[q] - correction) as f32 * (x.scales[i] * s[r + q]));
                }
            } else {
                let acc = dot_rows_biased::<1>(split.row(i), x.row(i), [w.row_packed(r)], 0)[0] - correction;
                y.set(i, j, acc as f32 * (x.scales[i] * s[r]));
            }
        }
        r += n;
    }
}
