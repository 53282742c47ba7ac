//! AVX2 weight-only kernels (W8A16, W4A16). One `__m256` accumulator per
//! output row per group *is* the spec's 8 lanes: element ℓ takes positions
//! ℓ, ℓ+8, … of the group in order (for Q4, elements hold lanes
//! `[0, 2, 4, 6, 1, 3, 5, 7]`, the order 4 packed bytes unpack in, and the
//! activations are laid out to match). `mul` then `add`, never FMA.

use std::arch::x86_64::*;
use std::ops::Range;

use qlinear_kernels_scalar::{ActivationsF32, OutputTile};
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrix, QuantizedMatrixQ4};

use super::{lane_tree, lane_tree_q4, q4::scales_to_f32};
use crate::layout::chunked_f32;

const ROWS: usize = 4;

/// 8 int8 codes (zero-padded past `len`) as f32.
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

/// The 8 codes of 4 packed bytes starting at byte `b` (padded with the zero
/// code past `end`), as f32 in Q4 order `[c0, c2, c4, c6, c1, c3, c5, c7]`.
#[inline]
#[target_feature(enable = "avx2")]
fn q4_chunk(p: &[u8], b: usize, end: usize) -> __m256 {
    let word = if b + 4 <= end {
        u32::from_le_bytes([p[b], p[b + 1], p[b + 2], p[b + 3]])
    } else {
        let mut buf = [0x88u8; 4];
        buf[..end - b].copy_from_slice(&p[b..end]);
        u32::from_le_bytes(buf)
    };
    let bytes = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(word as i32));
    let lo = _mm_and_si128(bytes, _mm_set1_epi32(0x0F));
    let hi = _mm_srli_epi32::<4>(bytes);
    let codes = _mm256_sub_epi32(_mm256_set_m128i(hi, lo), _mm256_set1_epi32(8));
    _mm256_cvtepi32_ps(codes)
}

#[target_feature(enable = "avx2")]
pub(crate) fn gemm_w8a16(x: &ActivationsF32<'_>, w: &QuantizedMatrix, rows: Range<usize>, y: &mut OutputTile<'_>) {
    x.check();
    y.check(x.m, rows.len());
    assert!(rows.end <= w.n() && w.k() == x.k, "W8A16 shapes");
    let k = x.k;
    let chunks = k.div_ceil(8);
    let xc: Vec<f32> = (0..x.m).flat_map(|i| chunked_f32(x.row(i), k, false)).collect();
    let mut r = rows.start;
    while r < rows.end {
        let n = if r + ROWS <= rows.end { ROWS } else { 1 };
        for i in 0..x.m {
            let xi = &xc[i * chunks * 8..(i + 1) * chunks * 8];
            let mut acc = [_mm256_setzero_ps(); ROWS];
            for c in 0..chunks {
                // SAFETY: xi holds chunks · 8 floats.
                let xv = unsafe { _mm256_loadu_ps(xi.as_ptr().add(c * 8)) };
                for q in 0..n {
                    acc[q] = _mm256_add_ps(acc[q], _mm256_mul_ps(xv, q8_chunk(w.row(r + q), c * 8)));
                }
            }
            for q in 0..n {
                y.set(i, r - rows.start + q, w.scales()[r + q] * lane_tree(acc[q]));
            }
        }
        r += n;
    }
}

/// The per-group partials of `R` rows against one activation row laid out by
/// [`chunked_f32`] in Q4 order; `emit(q, g, partial)` receives each in order.
#[inline]
#[target_feature(enable = "avx2")]
fn q4_partials<const R: usize>(xi: &[f32], w: [&[u8]; R], k: usize, g: usize, mut emit: impl FnMut(usize, usize, f32)) {
    let chunks_per_group = g.div_ceil(8);
    let row_bytes = k.div_ceil(2);
    for gi in 0..k.div_ceil(g) {
        let end = ((gi + 1) * g).min(k).div_ceil(2).min(row_bytes);
        let mut acc = [_mm256_setzero_ps(); R];
        for c in 0..chunks_per_group {
            let xoff = (gi * chunks_per_group + c) * 8;
            assert!(xoff + 8 <= xi.len());
            // SAFETY: bounded by the assert above.
            let xv = unsafe { _mm256_loadu_ps(xi.as_ptr().add(xoff)) };
            let b = (gi * g + c * 8) / 2;
            for q in 0..R {
                acc[q] = _mm256_add_ps(acc[q], _mm256_mul_ps(xv, q4_chunk(w[q], b, end)));
            }
        }
        for (q, a) in acc.iter().enumerate() {
            emit(q, gi, lane_tree_q4(*a));
        }
    }
}

#[target_feature(enable = "avx2")]
pub(crate) fn gemm_w4a16(x: &ActivationsF32<'_>, w: &QuantizedMatrixQ4, rows: Range<usize>, y: &mut OutputTile<'_>) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::PerChannel(s) = w.scales() else {
        panic!("gemm_w4a16 needs per-channel scales")
    };
    assert!(rows.end <= w.n() && w.k() == x.k, "W4A16 shapes");
    let k = x.k;
    if k == 0 {
        for i in 0..x.m {
            for (j, r) in rows.clone().enumerate() {
                y.set(i, j, s[r] * 0.0);
            }
        }
        return;
    }
    let per_row = k.div_ceil(8) * 8;
    let xc: Vec<f32> = (0..x.m).flat_map(|i| chunked_f32(x.row(i), k, true)).collect();
    let mut r = rows.start;
    while r < rows.end {
        let j = r - rows.start;
        for i in 0..x.m {
            let xi = &xc[i * per_row..(i + 1) * per_row];
            if r + ROWS <= rows.end {
                let wr: [&[u8]; ROWS] = std::array::from_fn(|q| w.row_packed(r + q));
                q4_partials::<ROWS>(xi, wr, k, k, |q, _, p| y.set(i, j + q, s[r + q] * p));
            } else {
                q4_partials::<1>(xi, [w.row_packed(r)], k, k, |_, _, p| y.set(i, j, s[r] * p));
            }
        }
        r += if r + ROWS <= rows.end { ROWS } else { 1 };
    }
}

#[target_feature(enable = "avx2,f16c")]
pub(crate) fn gemm_w4a16_grouped(
    x: &ActivationsF32<'_>,
    w: &QuantizedMatrixQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::Grouped { group, scales } = w.scales() else {
        panic!("gemm_w4a16_grouped needs group scales")
    };
    let (g, k) = (*group, x.k);
    assert!(rows.end <= w.n() && w.k() == k, "W4A16 grouped shapes");
    let groups = k / g;
    let per_row = groups * g.div_ceil(8) * 8;
    let xc: Vec<f32> = (0..x.m).flat_map(|i| chunked_f32(x.row(i), g, true)).collect();
    let mut sf: [Vec<f32>; ROWS] = Default::default();
    let mut r = rows.start;
    while r < rows.end {
        let n = if r + ROWS <= rows.end { ROWS } else { 1 };
        for q in 0..n {
            scales_to_f32(&scales[(r + q) * groups..(r + q + 1) * groups], &mut sf[q]);
        }
        for i in 0..x.m {
            let xi = &xc[i * per_row..(i + 1) * per_row];
            let mut acc = [0f32; ROWS];
            if n == ROWS {
                let wr: [&[u8]; ROWS] = std::array::from_fn(|q| w.row_packed(r + q));
                q4_partials::<ROWS>(xi, wr, k, g, |q, gi, p| acc[q] += sf[q][gi] * p);
            } else {
                q4_partials::<1>(xi, [w.row_packed(r)], k, g, |_, gi, p| acc[0] += sf[0][gi] * p);
            }
            for q in 0..n {
                y.set(i, r - rows.start + q, acc[q]);
            }
        }
        r += n;
    }
}
