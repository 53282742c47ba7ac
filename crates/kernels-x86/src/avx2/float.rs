//! AVX2 weight-only kernels (W8A16, W4A16). One `__m256` accumulator per
//! output per group *is* the spec's 8 lanes: element ℓ takes positions ℓ,
//! ℓ+8, … of the group in order (for Q4, elements hold lanes
//! `[0, 2, 4, 6, 1, 3, 5, 7]`, the order 4 packed bytes unpack in, and the
//! activations are laid out to match). `mul` then `add`, never FMA.
//!
//! Work is tiled as `R` weight rows × `MI` activation rows: each weight chunk
//! is dequantized once per tile and each activation chunk loaded once per
//! tile; the per-output arithmetic is unchanged, so tiling never changes bits.

use std::arch::x86_64::*;
use std::ops::Range;

use qlinear_kernels_scalar::{ActivationsF32, OutputTile};
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrixQ4};

use super::{lane_tree, lane_tree_q4};
use qlinear_kernels_scalar::layout::chunked_f32;

/// Bytes ahead of the current load that each W8A16 weight row is prefetched
/// (past the row's end: into the row that takes its place in the next block
/// of `R` rows, which follows `R` rows on in the row-major matrix).
const PREFETCH: usize = 512;

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

/// The codes of 4 packed bytes starting at byte `b` (the zero code past
/// `end`), as f32 in Q4 order `[c0, c2, c4, c6, c1, c3, c5, c7]`.
#[inline]
#[target_feature(enable = "avx2")]
fn q4_chunk(p: &[u8], b: usize, end: usize) -> __m256 {
    let mut buf = [0x88u8; 4];
    buf[..end.min(b + 4) - b].copy_from_slice(&p[b..end.min(b + 4)]);
    let bytes = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(i32::from_le_bytes(buf)));
    let lo = _mm_and_si128(bytes, _mm_set1_epi32(0x0F));
    let hi = _mm_srli_epi32::<4>(bytes);
    _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_set_m128i(hi, lo), _mm256_set1_epi32(8)))
}

/// Two consecutive chunks (8 packed bytes in the low half of `v`), each in Q4 order.
#[inline]
#[target_feature(enable = "avx2")]
fn q4_pair(v: __m128i) -> [__m256; 2] {
    let bytes = _mm256_cvtepu8_epi32(v);
    let lo = _mm256_and_si256(bytes, _mm256_set1_epi32(0x0F));
    let hi = _mm256_srli_epi32::<4>(bytes);
    let eight = _mm256_set1_epi32(8);
    let a = _mm256_permute2x128_si256::<0x20>(lo, hi); // bytes 0-3: [lo | hi]
    let c = _mm256_permute2x128_si256::<0x31>(lo, hi); // bytes 4-7
    [
        _mm256_cvtepi32_ps(_mm256_sub_epi32(a, eight)),
        _mm256_cvtepi32_ps(_mm256_sub_epi32(c, eight)),
    ]
}

#[inline]
#[target_feature(enable = "avx2")]
fn load8(x: &[f32], at: usize) -> __m256 {
    assert!(at + 8 <= x.len());
    // SAFETY: bounded by the assert.
    unsafe { _mm256_loadu_ps(x.as_ptr().add(at)) }
}

/// `acc[i][q] += x_i(chunk) · w_q(chunk)` for one weight chunk per row.
#[inline]
#[target_feature(enable = "avx2")]
fn fma_free_tile<const R: usize, const MI: usize>(
    acc: &mut [[__m256; R]; MI],
    xs: [&[f32]; MI],
    at: usize,
    wv: &[__m256; R],
) {
    for i in 0..MI {
        let xv = load8(xs[i], at);
        for q in 0..R {
            acc[i][q] = _mm256_add_ps(acc[i][q], _mm256_mul_ps(xv, wv[q]));
        }
    }
}

/// W8A16 for `R` rows × `MI` activation rows: returns `w_scale · tree(lanes)`.
///
/// The whole chunks run in a loop with no tail test, so the `R × MI`
/// accumulators stay in registers; the padded last chunk (k % 8 != 0) follows.
#[inline]
#[target_feature(enable = "avx2")]
fn w8a16_tile<const R: usize, const MI: usize>(xs: [&[f32]; MI], w: [&[i8]; R], k: usize) -> [[f32; R]; MI] {
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
        fma_free_tile::<R, MI>(&mut acc, xs, c * 8, &wv);
    }
    if whole * 8 < k {
        let wv: [__m256; R] = std::array::from_fn(|q| q8_chunk(w[q], whole * 8));
        fma_free_tile::<R, MI>(&mut acc, xs, whole * 8, &wv);
    }
    std::array::from_fn(|i| std::array::from_fn(|q| lane_tree(acc[i][q])))
}

/// W8A16 micro-kernel (frame tile `R` × `MI`): the partials of whole rows.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w8a16<const R: usize, const MI: usize>(x: &[&[f32]], w: &[&[i8]], k: usize, out: &mut [f32]) {
    assert!(x.len() == MI && w.len() == R && out.len() == R * MI);
    let p = w8a16_tile::<R, MI>(std::array::from_fn(|i| x[i]), std::array::from_fn(|q| w[q]), k);
    for i in 0..MI {
        out[i * R..(i + 1) * R].copy_from_slice(&p[i]);
    }
}

/// The per-group partials of `R` rows × `MI` activation rows (activations laid
/// out by [`chunked_f32`] in Q4 order); `emit(t, q, g, partial)` receives each,
/// groups in increasing order.
///
/// Within a group, pairs of whole chunks (8 packed bytes) run in a loop with
/// no tail test, keeping the accumulators in registers; a last odd or
/// partial chunk follows.
#[inline]
#[target_feature(enable = "avx2")]
fn q4_tile<const R: usize, const MI: usize>(
    xs: [&[f32]; MI],
    w: [&[u8]; R],
    k: usize,
    g: usize,
    mut emit: impl FnMut(usize, usize, usize, f32),
) {
    let chunks_per_group = g.div_ceil(8);
    let groups = k.div_ceil(g);
    assert!(w.iter().all(|w| w.len() >= k.div_ceil(2)) && xs.iter().all(|x| x.len() >= groups * chunks_per_group * 8));
    for gi in 0..groups {
        let (col0, col_end) = (gi * g, ((gi + 1) * g).min(k));
        let end = col_end.div_ceil(2);
        let x0 = gi * chunks_per_group * 8;
        let pairs = (col_end - col0) / 16;
        let mut acc = [[_mm256_setzero_ps(); R]; MI];
        for p in 0..pairs {
            let mut lo = [_mm256_setzero_ps(); R];
            let mut hi = [_mm256_setzero_ps(); R];
            for q in 0..R {
                // SAFETY: col0 is even (g is) and col0 + 16p + 16 <= col_end <= k,
                // so the 8 bytes at col0 / 2 + 8p lie within the row's ceil(k / 2).
                let v = unsafe { _mm_loadl_epi64(w[q].as_ptr().add(col0 / 2 + p * 8).cast()) };
                [lo[q], hi[q]] = q4_pair(v);
            }
            fma_free_tile::<R, MI>(&mut acc, xs, x0 + p * 16, &lo);
            fma_free_tile::<R, MI>(&mut acc, xs, x0 + p * 16 + 8, &hi);
        }
        for c in 2 * pairs..chunks_per_group {
            let wv: [__m256; R] = std::array::from_fn(|q| q4_chunk(w[q], (col0 + c * 8) / 2, end));
            fma_free_tile::<R, MI>(&mut acc, xs, x0 + c * 8, &wv);
        }
        for t in 0..MI {
            for q in 0..R {
                emit(t, q, gi, lane_tree_q4(acc[t][q]));
            }
        }
    }
}

/// What every per-channel W4A16 kernel does first: checks the shapes, and
/// returns the row scales with the activations laid out by [`chunked_f32`] in
/// Q4 order (`per_row` floats per activation row) — or `None` when K = 0,
/// after writing the outputs (`scale · 0`).
pub(crate) fn w4a16_prologue<'w>(
    x: &ActivationsF32<'_>,
    w: &'w QuantizedMatrixQ4,
    rows: &Range<usize>,
    y: &mut OutputTile<'_>,
) -> Option<(&'w [f32], Vec<f32>, usize)> {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::PerChannel(s) = w.scales() else {
        panic!("gemm_w4a16 needs per-channel scales")
    };
    assert!(rows.end <= w.n() && w.k() == x.k, "W4A16 shapes");
    let k = x.k;
    if k == 0 {
        for i in 0..x.m {
            for r in rows.clone() {
                y.set(i, r - rows.start, s[r] * 0.0);
            }
        }
        return None;
    }
    let xc: Vec<f32> = (0..x.m).flat_map(|i| chunked_f32(x.row(i), k, true)).collect();
    Some((s, xc, k.div_ceil(8) * 8))
}

/// W4A16 micro-kernel (frame tile `R` × `MI`): the partials of whole rows
/// (activations in Q4 order).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w4a16<const R: usize, const MI: usize>(x: &[&[f32]], w: &[&[u8]], k: usize, out: &mut [f32]) {
    assert!(x.len() == MI && w.len() == R && out.len() == R * MI);
    if k == 0 {
        // no lanes: every partial is the tree of +0 lanes
        out.fill(0.0);
        return;
    }
    q4_tile::<R, MI>(
        std::array::from_fn(|i| x[i]),
        std::array::from_fn(|q| w[q]),
        k,
        k,
        |t, q, _, p| out[t * R + q] = p,
    );
}

/// W4A16-grouped micro-kernel (frame tile `R` × `MI`): `Σ_g s_g · partial_g`
/// in increasing g from +0, with the f32 scales of the tile's rows.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w4a16_grouped<const R: usize, const MI: usize>(
    x: &[&[f32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) {
    assert!(x.len() == MI && w.len() == R && s.len().is_multiple_of(R) && out.len() == R * MI && g > 0);
    let groups = s.len() / R;
    let k = groups * g;
    let mut acc = [[0f32; R]; MI];
    q4_tile::<R, MI>(
        std::array::from_fn(|i| x[i]),
        std::array::from_fn(|q| w[q]),
        k,
        g,
        |t, q, gi, p| acc[t][q] += s[q * groups + gi] * p,
    );
    for i in 0..MI {
        out[i * R..(i + 1) * R].copy_from_slice(&acc[i]);
    }
}

/// What both tiers' grouped W4A16 kernels start from: the group size, the f16
/// scales (`groups` per row) and the activations chunked per group in Q4
/// order, `per_row` floats per activation row.
pub(crate) struct GroupedW4A16<'w> {
    pub(crate) g: usize,
    pub(crate) groups: usize,
    pub(crate) scales: &'w [half::f16],
    pub(crate) xc: Vec<f32>,
    pub(crate) per_row: usize,
}

/// The grouped counterpart of [`w4a16_prologue`]: checks the shapes and lays
/// out the activations.
pub(crate) fn w4a16_grouped_prologue<'w>(
    x: &ActivationsF32<'_>,
    w: &'w QuantizedMatrixQ4,
    rows: &Range<usize>,
    y: &mut OutputTile<'_>,
) -> GroupedW4A16<'w> {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::Grouped { group, scales } = w.scales() else {
        panic!("gemm_w4a16_grouped needs group scales")
    };
    let (g, k) = (*group, x.k);
    assert!(rows.end <= w.n() && w.k() == k, "W4A16 grouped shapes");
    let groups = k / g;
    GroupedW4A16 {
        g,
        groups,
        scales,
        xc: (0..x.m).flat_map(|i| chunked_f32(x.row(i), g, true)).collect(),
        per_row: groups * g.div_ceil(8) * 8,
    }
}
