//! AVX2 weight-only kernels (W8A16, W4A16). One `__m256` accumulator per
//! output per group *is* the spec's 8 lanes: element ℓ takes positions ℓ,
//! ℓ+8, … of the group in order (`docs/NUMERICS.md` §6.2), for Q4 as for Q8.
//! `mul` then `add`, never FMA.
//!
//! Work is tiled as `R` weight rows × `MI` activation rows: each weight chunk
//! is dequantized once per tile and each activation chunk loaded once per
//! tile; the per-output arithmetic is unchanged, so tiling never changes bits.

use std::arch::x86_64::*;

use super::{lane_trees, lane_trees_vec};

/// Bytes ahead of the current load that each W8A16 weight row is prefetched
/// (past the row's end: into the row that takes its place in the next block
/// of `R` rows, which follows `R` rows on in the row-major matrix).
const PREFETCH: usize = 512;
/// The same for W4A16's packed rows (half the bytes per column).
const PREFETCH_Q4: usize = 256;

/// 8 int8 codes at column `c` (zero-padded past the row's end), as f32.
#[inline]
#[target_feature(enable = "avx2")]
fn q8_chunk(w: &[i8], c: usize) -> __m256 {
    let v = if c + 8 <= w.len() {
        // SAFETY: c + 8 <= w.len(); an unaligned 8-byte load.
        unsafe { _mm_loadl_epi64(w.as_ptr().add(c).cast()) }
    } else {
        let mut buf = [0i8; 8];
        buf[..w.len() - c].copy_from_slice(&w[c..]);
        // SAFETY: an 8-byte load of a local 8-byte array.
        unsafe { _mm_loadl_epi64(buf.as_ptr().cast()) }
    };
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
}

/// `f32::from_bits(0x4B00_0000 | n)` is exactly 2^23 + n for a nibble `n`,
/// so subtracting 2^23 + 8 leaves the code `n − 8` exactly (Sterbenz): a
/// conversion with no cross-lane shuffle, `+0.0` for the zero code as the
/// scalar tier's `(n − 8) as f32`.
const MAGIC_BITS: i32 = 0x4B00_0000;
const MAGIC: f32 = 8_388_616.0;

/// The 8 codes of 4 packed bytes (column `2j` in byte `j`'s low nibble,
/// `2j + 1` in its high nibble) as f32 in column order. `word` is the 4
/// bytes little-endian; every lane gets the whole word and shifts its own
/// nibble down, so the unpack stays inside 128-bit lanes (Zen 3 and Intel
/// both run cross-lane shuffles on one or two ports, which capped the
/// earlier zero-extend-and-permute unpack).
#[inline]
#[target_feature(enable = "avx2")]
fn q4_codes(word: i32) -> __m256 {
    let shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    let n = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(word), shifts),
        _mm256_set1_epi32(0x0F),
    );
    let biased = _mm256_castsi256_ps(_mm256_or_si256(n, _mm256_set1_epi32(MAGIC_BITS)));
    _mm256_sub_ps(biased, _mm256_set1_ps(MAGIC))
}

/// The codes of the 4 packed bytes starting at byte `b` (the zero code, byte
/// 0x88, past `end`), in column order.
#[inline]
#[target_feature(enable = "avx2")]
fn q4_chunk(p: &[u8], b: usize, end: usize) -> __m256 {
    let mut buf = [0x88u8; 4];
    buf[..end.min(b + 4) - b].copy_from_slice(&p[b..end.min(b + 4)]);
    q4_codes(i32::from_le_bytes(buf))
}

/// `acc[i][q] += x_i(chunk) · w_q(chunk)` for one weight chunk per row.
///
/// # Safety
/// `at + 8 <= xs[i].len()` for every `i` (the callers assert the rows'
/// lengths once, not on every chunk of the hot loop).
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn fma_free_tile<const R: usize, const MI: usize>(
    acc: &mut [[__m256; R]; MI],
    xs: [&[f32]; MI],
    at: usize,
    wv: &[__m256; R],
) {
    for i in 0..MI {
        // SAFETY: at + 8 <= xs[i].len() (this function's contract).
        let xv = unsafe { _mm256_loadu_ps(xs[i].as_ptr().add(at)) };
        for q in 0..R {
            acc[i][q] = _mm256_add_ps(acc[i][q], _mm256_mul_ps(xv, wv[q]));
        }
    }
}

/// W8A16 for `R` rows × `MI` activation rows: writes `out[t · R + q]`, the
/// tree of each output's lanes (the frame applies the scale).
///
/// The whole chunks run in a loop with no tail test, so the `R × MI`
/// accumulators stay in registers; the padded last chunk (k % 8 != 0) follows.
#[inline]
#[target_feature(enable = "avx2")]
fn w8a16_tile<const R: usize, const MI: usize>(xs: [&[f32]; MI], w: [&[i8]; R], k: usize, out: &mut [f32]) {
    let whole = k / 8;
    assert!(w.iter().all(|w| w.len() >= k) && xs.iter().all(|x| x.len() >= k.div_ceil(8) * 8));
    let mut acc = [[_mm256_setzero_ps(); R]; MI];
    for c in 0..whole {
        // one prefetch per row per 64-byte line, not per 8-byte chunk
        if c % 8 == 0 {
            let ahead = c * 8 + PREFETCH;
            let ahead = if ahead < k { ahead } else { ahead - k + R * k };
            for row in w {
                // A hint: an address past the matrix is harmless.
                _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(ahead).cast());
            }
        }
        let mut wv = [_mm256_setzero_ps(); R];
        for q in 0..R {
            // SAFETY: c < k / 8 and every row holds k >= 8c + 8 codes (asserted).
            let v = unsafe { _mm_loadl_epi64(w[q].as_ptr().add(c * 8).cast()) };
            wv[q] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
        }
        // SAFETY: c * 8 + 8 <= k <= every activation row's length (asserted).
        unsafe { fma_free_tile::<R, MI>(&mut acc, xs, c * 8, &wv) };
    }
    if whole * 8 < k {
        let wv: [__m256; R] = std::array::from_fn(|q| q8_chunk(w[q], whole * 8));
        // SAFETY: whole * 8 + 8 = k.div_ceil(8) * 8 <= every activation row's
        // length (asserted).
        unsafe { fma_free_tile::<R, MI>(&mut acc, xs, whole * 8, &wv) };
    }
    lane_trees(acc.as_flattened(), out);
}

/// A tile's `N` row views as an array (the caller has checked `N`). Not
/// `array::from_fn`: its closure was not inlined into these
/// `target_feature` tiles, and its calls, 5 a 4-row decode tile, were 2.6 %
/// of a W8A16 decode call at 576 × 576 (callgrind, AMD EPYC Zen 4, family
/// 25 model 17).
#[inline(always)]
fn tile_rows<T: Copy, const N: usize>(rows: &[T]) -> [T; N] {
    rows.try_into().expect("a tile's rows")
}

/// W8A16 micro-kernel (frame tile `R` × `MI`): the partials of whole rows.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w8a16<const R: usize, const MI: usize>(x: &[&[f32]], w: &[&[i8]], k: usize, out: &mut [f32]) {
    // the trees of at most 8 outputs share one vector
    const { assert!(R * MI <= 8) };
    assert!(x.len() == MI && w.len() == R && out.len() == R * MI);
    w8a16_tile::<R, MI>(tile_rows(x), tile_rows(w), k, out);
}

/// `n` whole chunks (4 packed bytes each) from byte `byte0` of every weight
/// row against the activation chunks from float `x0`, added to `acc`.
///
/// # Safety
/// `byte0 + 4n <= w[q].len()` and `x0 + 8n <= xs[i].len()` for every row.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn q4_chunks<const R: usize, const MI: usize>(
    acc: &mut [[__m256; R]; MI],
    xs: [&[f32]; MI],
    w: [&[u8]; R],
    byte0: usize,
    x0: usize,
    n: usize,
) {
    for c in 0..n {
        let wv: [__m256; R] = std::array::from_fn(|q| {
            // SAFETY: byte0 + 4c + 4 <= w[q].len() (this function's contract).
            q4_codes(unsafe { w[q].as_ptr().add(byte0 + c * 4).cast::<i32>().read_unaligned() })
        });
        // SAFETY: x0 + 8c + 8 <= xs[i].len() (this function's contract).
        unsafe { fma_free_tile::<R, MI>(acc, xs, x0 + c * 8, &wv) };
    }
}

/// Prefetches each weight row `PREFETCH_Q4` bytes past byte `b` (past the
/// row's end: into the row that takes its place in the next block of `R`
/// rows, `stride` bytes per row).
#[inline]
#[target_feature(enable = "avx2")]
fn prefetch_q4<const R: usize>(w: [&[u8]; R], b: usize, stride: usize) {
    let ahead = b + PREFETCH_Q4;
    let ahead = if ahead < stride {
        ahead
    } else {
        ahead - stride + R * stride
    };
    for row in w {
        // A hint: an address past the matrix is harmless.
        _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(ahead).cast());
    }
}

/// The per-group lanes of `R` rows × `MI` activation rows (activations laid
/// out by [`chunked_f32`](qlinear_kernels_core::frame::layout::chunked_f32), in
/// column order): `emit(g, acc)` receives each group's accumulators, in
/// increasing g.
///
/// Groups of 32 (the common size) take a path whose 4 chunks are a
/// constant, so the loop unrolls; other sizes run their whole chunks in runs
/// that end at a 64-byte line of the packed rows (one prefetch test per run),
/// then a last partial chunk.
#[inline]
#[target_feature(enable = "avx2")]
fn q4_tile<const R: usize, const MI: usize>(
    xs: [&[f32]; MI],
    w: [&[u8]; R],
    k: usize,
    g: usize,
    mut emit: impl FnMut(usize, &[[__m256; R]; MI]),
) {
    let chunks_per_group = g.div_ceil(8);
    let groups = k.div_ceil(g);
    let stride = k.div_ceil(2);
    assert!(w.iter().all(|w| w.len() >= stride) && xs.iter().all(|x| x.len() >= groups * chunks_per_group * 8));
    if g == 32 && k.is_multiple_of(32) {
        for gi in 0..groups {
            if gi % 4 == 0 {
                prefetch_q4(w, gi * 16, stride);
            }
            let mut acc = [[_mm256_setzero_ps(); R]; MI];
            // SAFETY: group gi's 16 bytes end at 16(gi + 1) <= k / 2 = stride
            // and its 32 floats at 32(gi + 1) <= every activation row's length.
            unsafe { q4_chunks::<R, MI>(&mut acc, xs, w, gi * 16, gi * 32, 4) };
            emit(gi, &acc);
        }
        return;
    }
    for gi in 0..groups {
        let (col0, col_end) = (gi * g, ((gi + 1) * g).min(k));
        let end = col_end.div_ceil(2);
        let x0 = gi * chunks_per_group * 8;
        let whole = (col_end - col0) / 8;
        let mut acc = [[_mm256_setzero_ps(); R]; MI];
        let mut c = 0;
        while c < whole {
            let b = col0 / 2 + c * 4;
            if b % 64 == 0 {
                prefetch_q4(w, b, stride);
            }
            // at least one chunk: a group of g / 2 odd bytes can start 61–63
            // bytes into a line (the run then ends just past it)
            let run = (whole - c).min((64 - b % 64).div_ceil(4));
            // The run's bytes end at (col0 + 8(c + run)) / 2 <= col_end / 2 <=
            // stride (col0 is even, as g is), and its floats at x0 + 8(c + run)
            // <= (gi + 1) · chunks_per_group · 8 (asserted); in fours where it
            // can, since a constant count unrolls.
            let fours = run / 4 * 4;
            for f in (0..fours).step_by(4) {
                // SAFETY: chunks c + f .. c + f + 4 lie within the run (above).
                unsafe { q4_chunks::<R, MI>(&mut acc, xs, w, b + f * 4, x0 + (c + f) * 8, 4) };
            }
            // SAFETY: chunks c + fours .. c + run lie within the run (above).
            unsafe { q4_chunks::<R, MI>(&mut acc, xs, w, b + fours * 4, x0 + (c + fours) * 8, run - fours) };
            c += run;
        }
        for c in whole..chunks_per_group {
            let wv: [__m256; R] = std::array::from_fn(|q| q4_chunk(w[q], (col0 + c * 8) / 2, end));
            // SAFETY: x0 + 8c + 8 <= (gi + 1) · chunks_per_group · 8 (asserted).
            unsafe { fma_free_tile::<R, MI>(&mut acc, xs, x0 + c * 8, &wv) };
        }
        emit(gi, &acc);
    }
}

/// W4A16 micro-kernel (frame tile `R` × `MI`): the partials of whole rows
/// (activations in column order).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w4a16<const R: usize, const MI: usize>(x: &[&[f32]], w: &[&[u8]], k: usize, out: &mut [f32]) {
    // the trees of at most 8 outputs share one vector
    const { assert!(R * MI <= 8) };
    assert!(x.len() == MI && w.len() == R && out.len() == R * MI);
    if k == 0 {
        // no lanes: every partial is the tree of +0 lanes
        out.fill(0.0);
        return;
    }
    q4_tile::<R, MI>(tile_rows(x), tile_rows(w), k, k, |_, acc| {
        lane_trees(acc.as_flattened(), out)
    });
}

/// W4A16-grouped micro-kernel (frame tile `R` × `MI`): `Σ_g s_g · partial_g`
/// in increasing g from +0, with the f32 scales of the tile's rows.
///
/// The running sums of the tile's (at most 8) outputs are the lanes of one
/// vector, output `t · R + q` in lane `t · R + q`: one `mul` and one `add`
/// per group advance all of them, each lane in the spec's order.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w4a16_grouped<const R: usize, const MI: usize>(
    x: &[&[f32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) {
    const { assert!(R * MI <= 8) };
    assert!(x.len() == MI && w.len() == R && s.len().is_multiple_of(R) && out.len() == R * MI && g > 0);
    let groups = s.len() / R;
    let k = groups * g;
    let mut sums = _mm256_setzero_ps();
    q4_tile::<R, MI>(tile_rows(x), tile_rows(w), k, g, |gi, acc| {
        let scale = |j: usize| if j < R * MI { s[(j % R) * groups + gi] } else { 0.0 };
        let sv = _mm256_setr_ps(
            scale(0),
            scale(1),
            scale(2),
            scale(3),
            scale(4),
            scale(5),
            scale(6),
            scale(7),
        );
        sums = _mm256_add_ps(sums, _mm256_mul_ps(sv, lane_trees_vec(acc.as_flattened())));
    });
    let mut lanes = [0f32; 8];
    // SAFETY: a 32-byte store into a local [f32; 8].
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sums) };
    out.copy_from_slice(&lanes[..R * MI]);
}

/// The float decode tiles of 16 weight rows (frame tile 16 × 1): the
/// tier's 4 × 1 tile over each 4 rows in turn, its partials stored at
/// their rows' outputs, so that the frame's work per tile call (the views,
/// the scales, the store) is paid once per 16 rows instead of 4. A 4 × 1
/// call cost the frame about 260 instructions, 12 % of a W8A16 decode call
/// at 576 × 576 (callgrind, AMD EPYC Zen 4, family 25 model 17). The
/// partials are the 4 × 1 tile's, so are the bits.
///
/// `tile(w4, p, out4)` runs the 4 × 1 tile on rows `4p .. 4p + 4`.
#[inline(always)]
fn rows_in_turn<W>(w: &[&[W]], out: &mut [f32], mut tile: impl FnMut(&[&[W]], usize, &mut [f32])) {
    assert!(w.len() == 16 && out.len() == 16);
    for (p, out) in out.chunks_exact_mut(4).enumerate() {
        tile(&w[4 * p..4 * p + 4], p, out);
    }
}

/// W8A16 decode micro-kernel of 16 rows ([`rows_in_turn`]).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w8a16_16x1(x: &[&[f32]], w: &[&[i8]], k: usize, out: &mut [f32]) {
    rows_in_turn(w, out, |w, _, out| tile_w8a16::<4, 1>(x, w, k, out));
}

/// W4A16 decode micro-kernel of 16 rows ([`rows_in_turn`]).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w4a16_16x1(x: &[&[f32]], w: &[&[u8]], k: usize, out: &mut [f32]) {
    rows_in_turn(w, out, |w, _, out| tile_w4a16::<4, 1>(x, w, k, out));
}

/// W4A16-grouped decode micro-kernel of 16 rows ([`rows_in_turn`]): each
/// 4 rows with their own rows of group scales.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w4a16_grouped_16x1(x: &[&[f32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) {
    assert!(s.len().is_multiple_of(16));
    let groups = s.len() / 16;
    rows_in_turn(w, out, |w, p, out| {
        tile_w4a16_grouped::<4, 1>(x, w, &s[4 * p * groups..(4 * p + 4) * groups], g, out)
    });
}
