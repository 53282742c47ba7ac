//! AVX-512 VNNI W8A8 micro-kernels. `vpdpbusd` multiplies u8 by i8 and adds
//! each quad of exact products straight into an i32 lane. Two ways to give
//! it an unsigned operand:
//! - decode (one activation row): `|x|` and `w · sign(x)` (both within
//!   [-127, 127]: -128 is never a code), per weight load;
//! - batches: the weights biased to u8 once per load (`xor 0x80`, i.e.
//!   `w + 128`), shared by every activation row of the tile, and `128·Σx`
//!   subtracted per activation row (computed in the tile by a `vpdpbusd`
//!   against ones). Wrapping i32 is exact: the true sum fits in i32
//!   (`k <= MAX_K_W8A8`, NUMERICS.md §6.1).

use std::arch::x86_64::*;

use super::{hsum_epi32, hsum_rows};

/// Bytes ahead of the current load that each weight row is prefetched: 4 KiB
/// reached 1.3× the throughput of 1 KiB for decode on the Intel Xeon
/// (family 6 model 207; cold, W4A8), 8 KiB no further (`a6b869c`,
/// `docs/benchmarks/history.md`). On AMD CPUs the W4A8 tiles issue none
/// ([`super::far_prefetch`]); the W8A8 decode tile prefetches on every CPU
/// ([`dot_blocks_lanes`]).
const PREFETCH: usize = 4096;
/// Columns per load.
pub(crate) const BLOCK: usize = 64;

/// Loads up to 64 bytes at `c`, zero past the end of `v` (masked load: the
/// masked-off bytes are never touched).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn load64(v: &[i8], c: usize) -> __m512i {
    let rem = v.len() - c;
    let mask: u64 = if rem >= 64 { u64::MAX } else { (1u64 << rem) - 1 };
    // SAFETY: only the `rem` bytes from c, all inside `v`, are read.
    unsafe { _mm512_maskz_loadu_epi8(mask, v.as_ptr().add(c)) }
}

/// `Σ x·w_r` for `R` weight rows sharing one activation row (sign trick);
/// all slices have the same length. Each row's stream is prefetched
/// [`PREFETCH`] bytes ahead, which runs on into the next row of a matrix
/// (rows are contiguous).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_rows<const R: usize>(x: &[i8], w: [&[i8]; R]) -> [i32; R] {
    dot_rows_lanes(x, w).map(|v| hsum_epi32(v))
}

/// [`dot_rows`] before the reduction: each row's 16 lane sums.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_rows_lanes<const R: usize>(x: &[i8], w: [&[i8]; R]) -> [__m512i; R] {
    assert!(w.iter().all(|w| w.len() == x.len()));
    let mut acc = [_mm512_setzero_si512(); R];
    let zero = _mm512_setzero_si512();
    let mut c = 0;
    while c < x.len() {
        let xv = load64(x, c);
        let ax = _mm512_abs_epi8(xv);
        let neg = _mm512_movepi8_mask(xv);
        for r in 0..R {
            // a hint: an address past the row is harmless
            _mm_prefetch::<_MM_HINT_T0>(w[r].as_ptr().wrapping_add(c + PREFETCH).cast());
            let wv = load64(w[r], c);
            acc[r] = _mm512_dpbusd_epi32(acc[r], ax, _mm512_mask_sub_epi8(wv, neg, zero, wv));
        }
        c += 64;
    }
    acc
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn dot_i8_i8(a: &[i8], b: &[i8]) -> i32 {
    dot_rows::<1>(a, [b])[0]
}

/// W8A8 decode micro-kernel (frame tile `R` × 1): `R` weight rows against
/// one activation row, one row after another, so that the weights stream as
/// one sequential run while the activation row stays in L1 (the AVX2
/// tier's finding: 4 rows in lockstep left the hardware prefetcher behind).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w8a8_seq<const R: usize>(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    assert!(x.len() == 1 && w.len() == R && acc.len() == R);
    let lanes: [__m512i; R] = std::array::from_fn(|r| dot_blocks_lanes(x[0], w[r]));
    hsum_rows(&lanes, acc);
}

/// [`dot_rows_lanes`] of one row over whole 64-column blocks (what the
/// frame passes a tile: its tails are the frame's): plain loads, where
/// [`load64`]'s mask, computed per load for a tail that never comes, was a
/// third of the loop's instructions. Each load prefetches the row
/// [`PREFETCH`] bytes ahead on every CPU, AMD's too (unlike the W4A8 tiles,
/// [`super::far_prefetch`]): on an AMD EPYC Zen 5 (family 26 model 2) a
/// 49152 × 576 decode call (SmolLM2's head, 28 MB: hot only in name) took
/// 750 µs with it against 1 146 without, the 576 × 576 and 1536 × 576 calls
/// held in cache 3.0 and 8.4 against 4.1 and 11.8 (four alternated runs,
/// one thread; docs/benchmarks/history.md). Two accumulators, or the
/// batch tile's bias instead of the sign trick, gained nothing more there
/// and cost a fifth of the calls held in cache.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_blocks_lanes(x: &[i8], w: &[i8]) -> __m512i {
    assert!(w.len() == x.len() && x.len().is_multiple_of(BLOCK));
    let (mut acc, zero) = (_mm512_setzero_si512(), _mm512_setzero_si512());
    for c in (0..x.len()).step_by(BLOCK) {
        // SAFETY: c + 64 <= len, the length of both rows (asserted above).
        let (xv, wv) = unsafe {
            (
                _mm512_loadu_si512(x.as_ptr().add(c).cast()),
                _mm512_loadu_si512(w.as_ptr().add(c).cast()),
            )
        };
        // a hint: an address past the row is harmless
        _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().wrapping_add(c + PREFETCH).cast());
        let neg = _mm512_movepi8_mask(xv);
        acc = _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(xv), _mm512_mask_sub_epi8(wv, neg, zero, wv));
    }
    acc
}

/// `Σ (w + 128)·x` (wrapping) for 4 weight rows × `XR` activation rows over
/// whole 64-column blocks: each weight load is biased once and serves the
/// `XR` rows (4 × `XR` accumulators in registers).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_tile_biased<const XR: usize>(x: [&[i8]; XR], w: [&[i8]; 4]) -> [[i32; 4]; XR] {
    let k = x[0].len();
    assert!(k.is_multiple_of(BLOCK) && w.iter().all(|w| w.len() == k) && x.iter().all(|x| x.len() == k));
    let bias = _mm512_set1_epi8(-128);
    let mut acc = [[_mm512_setzero_si512(); 4]; XR];
    for c in (0..k).step_by(BLOCK) {
        // SAFETY: c + 64 <= k, the length of every row (asserted above).
        unsafe {
            let wv: [__m512i; 4] = std::array::from_fn(|r| {
                _mm_prefetch::<_MM_HINT_T0>(w[r].as_ptr().wrapping_add(c + PREFETCH).cast());
                _mm512_xor_si512(_mm512_loadu_si512(w[r].as_ptr().add(c).cast()), bias)
            });
            for i in 0..XR {
                let xv = _mm512_loadu_si512(x[i].as_ptr().add(c).cast());
                for r in 0..4 {
                    acc[i][r] = _mm512_dpbusd_epi32(acc[i][r], wv[r], xv);
                }
            }
        }
    }
    std::array::from_fn(|i| std::array::from_fn(|r| hsum_epi32(acc[i][r])))
}

/// `128·Σx` (wrapping) of an activation row of whole blocks: `vpdpbusd`
/// against ones.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn bias_sum(x: &[i8]) -> i32 {
    let ones = _mm512_set1_epi8(1);
    let mut acc = _mm512_setzero_si512();
    for c in (0..x.len()).step_by(BLOCK) {
        // SAFETY: the callers pass whole blocks (c + 64 <= x.len()).
        acc = _mm512_dpbusd_epi32(acc, ones, unsafe { _mm512_loadu_si512(x.as_ptr().add(c).cast()) });
    }
    hsum_epi32(acc).wrapping_mul(128)
}

/// W8A8 batch micro-kernel (frame tile `4·QUADS` × `XR`): `QUADS` blocks of 4 weight
/// rows, each run over the `XR` activation rows (64-byte aligned by the
/// frame's layout) while it is in L1; `128·Σx` once per activation row per
/// call, so its cost is shared by the `4·QUADS` weight rows. The loop over
/// blocks is here, not in the frame, so that the frame's per-tile work is
/// paid once per `4·QUADS · XR` outputs.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w8a8_batch<const QUADS: usize, const XR: usize>(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    let wr = 4 * QUADS;
    assert!(x.len() == XR && w.len() == wr && acc.len() == wr * XR);
    let xs: [&[i8]; XR] = std::array::from_fn(|i| x[i]);
    let bias: [i32; XR] = std::array::from_fn(|i| bias_sum(xs[i]));
    for b in 0..QUADS {
        let sums = dot_tile_biased::<XR>(xs, std::array::from_fn(|q| w[4 * b + q]));
        for i in 0..XR {
            for q in 0..4 {
                acc[i * wr + 4 * b + q] = sums[i][q].wrapping_sub(bias[i]);
            }
        }
    }
}

/// W8A8 micro-kernel for the weight rows left over by the batch tile (frame
/// tile 1 × `XR`): the sign trick per activation row.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w8a8_column<const XR: usize>(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    assert!(x.len() == XR && w.len() == 1 && acc.len() == XR);
    for (a, x) in acc.iter_mut().zip(x) {
        *a = dot_rows::<1>(x, [w[0]])[0];
    }
}
