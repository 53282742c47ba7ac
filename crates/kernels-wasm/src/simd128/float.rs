//! SIMD128 weight-only micro-kernels: lanes 0-3 and 4-7 of the spec are two
//! `f32x4` in natural column order; the tree's first level pairs neighbours
//! with two shuffles, then `((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))` exactly. A
//! tile keeps `WR` × `XR` lane pairs: each dequantized weight chunk serves
//! the `XR` activation rows and each activation chunk the `WR` weight rows;
//! per output the arithmetic is the scalar tier's.

use std::arch::wasm32::*;

use qlinear_kernels_core::abi::tile::{Family, Layout, Shapes, Tile, TileF32Q4, TileF32Q4Grouped, TileF32Q8};

use super::{load16, split_nibbles};

#[inline]
fn tree(lo: v128, hi: v128) -> f32 {
    let p = f32x4_add(i32x4_shuffle::<0, 2, 4, 6>(lo, hi), i32x4_shuffle::<1, 3, 5, 7>(lo, hi));
    (f32x4_extract_lane::<0>(p) + f32x4_extract_lane::<1>(p))
        + (f32x4_extract_lane::<2>(p) + f32x4_extract_lane::<3>(p))
}

/// The low 8 i8 codes of `v` as two f32x4.
#[inline]
fn widen(v: v128) -> (v128, v128) {
    let w16 = i16x8_extend_low_i8x16(v);
    (
        f32x4_convert_i32x4(i32x4_extend_low_i16x8(w16)),
        f32x4_convert_i32x4(i32x4_extend_high_i16x8(w16)),
    )
}

/// 8 int8 codes from column `c` (zero past the end) in the low half.
#[inline]
fn q8_codes(w: &[i8], c: usize) -> v128 {
    if c + 8 <= w.len() {
        // SAFETY: 8 bytes from c lie inside w.
        return unsafe { v128_load64_zero(w.as_ptr().add(c).cast()) };
    }
    let mut buf = [0i8; 16];
    let n = (w.len() - c).min(8);
    buf[..n].copy_from_slice(&w[c..c + n]);
    load16(&buf, 0)
}

/// The 8 codes of 4 packed bytes from byte `b` (the zero code past `end`),
/// natural order, in the low half: zip of low and high nibbles, minus 8.
#[inline]
fn q4_codes(p: &[u8], b: usize, end: usize) -> v128 {
    let v = if b + 4 <= end {
        // SAFETY: 4 bytes from b lie inside p (end <= p.len()).
        unsafe { v128_load32_zero(p.as_ptr().add(b).cast()) }
    } else {
        let mut buf = [0x88u8; 16];
        let n = (end - b).min(4);
        buf[..n].copy_from_slice(&p[b..b + n]);
        load16(&buf, 0)
    };
    let (lo, hi) = split_nibbles(v);
    let nib = i8x16_shuffle::<0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23>(lo, hi);
    i8x16_sub(nib, i8x16_splat(8))
}

/// The 8-lane partials of `WR` × `XR` outputs over `chunks` chunks of 8
/// from chunk `first` of each activation row, weight row `q`'s chunk `c`
/// from `code8(q, c)`.
#[inline]
fn partials<const WR: usize, const XR: usize>(
    x: &[&[f32]],
    first: usize,
    chunks: usize,
    code8: impl Fn(usize, usize) -> v128,
) -> [[f32; WR]; XR] {
    assert!(x.len() == XR && x.iter().all(|r| r.len() >= (first + chunks) * 8));
    let mut lo = [[f32x4_splat(0.0); WR]; XR];
    let mut hi = [[f32x4_splat(0.0); WR]; XR];
    for c in first..first + chunks {
        let wv: [(v128, v128); WR] = std::array::from_fn(|q| widen(code8(q, c)));
        for i in 0..XR {
            // SAFETY: c < first + chunks and every row holds that many chunks (asserted).
            let (xl, xh) = unsafe {
                (
                    v128_load(x[i].as_ptr().add(c * 8).cast()),
                    v128_load(x[i].as_ptr().add(c * 8 + 4).cast()),
                )
            };
            for q in 0..WR {
                lo[i][q] = f32x4_add(lo[i][q], f32x4_mul(xl, wv[q].0));
                hi[i][q] = f32x4_add(hi[i][q], f32x4_mul(xh, wv[q].1));
            }
        }
    }
    std::array::from_fn(|i| std::array::from_fn(|q| tree(lo[i][q], hi[i][q])))
}

fn tile_w8a16<const WR: usize, const XR: usize>(x: &[&[f32]], w: &[&[i8]], k: usize, out: &mut [f32]) {
    assert!(w.len() == WR && w.iter().all(|r| r.len() == k) && out.len() == WR * XR);
    let p = partials::<WR, XR>(x, 0, k.div_ceil(8), |q, c| q8_codes(w[q], c * 8));
    for i in 0..XR {
        out[i * WR..(i + 1) * WR].copy_from_slice(&p[i]);
    }
}

fn tile_w4a16<const WR: usize, const XR: usize>(x: &[&[f32]], w: &[&[u8]], k: usize, out: &mut [f32]) {
    assert!(w.len() == WR && w.iter().all(|r| r.len() == k.div_ceil(2)) && out.len() == WR * XR);
    let p = partials::<WR, XR>(x, 0, k.div_ceil(8), |q, c| q4_codes(w[q], c * 4, w[q].len()));
    for i in 0..XR {
        out[i * WR..(i + 1) * WR].copy_from_slice(&p[i]);
    }
}

fn tile_w4a16_grouped<const WR: usize, const XR: usize>(
    x: &[&[f32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) {
    assert!(w.len() == WR && out.len() == WR * XR && g > 0 && s.len().is_multiple_of(WR));
    let groups = s.len() / WR;
    assert!(w.iter().all(|r| 2 * r.len() >= groups * g));
    let per_group = g.div_ceil(8);
    let mut acc = [[0f32; WR]; XR];
    for gi in 0..groups {
        let (b0, end) = (gi * g / 2, (gi + 1) * g / 2);
        let p = partials::<WR, XR>(x, gi * per_group, per_group, |q, c| {
            q4_codes(w[q], b0 + (c - gi * per_group) * 4, end)
        });
        for i in 0..XR {
            for q in 0..WR {
                acc[i][q] += s[q * groups + gi] * p[i][q];
            }
        }
    }
    for i in 0..XR {
        out[i * WR..(i + 1) * WR].copy_from_slice(&acc[i]);
    }
}

/// 4 weight rows in flight for M = 1, 2 × 4 for batches, single rows left over.
/// (Weight rows in chunks of 4, so the matrix streams once for a batch.)
const FLOAT_TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(2, 4), Tile::new(1, 4)];

pub(crate) const W8A16: Family<TileF32Q8> = Family {
    shapes: Shapes {
        tiles: FLOAT_TILES,
        chunk: 4,
    },
    kernels: &[
        tile_w8a16::<1, 1>,
        tile_w8a16::<4, 1>,
        tile_w8a16::<2, 4>,
        tile_w8a16::<1, 4>,
    ],
    block: 8,
    layout: Layout::Chunked,
    scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
};
pub(crate) const W4A16: Family<TileF32Q4> = Family {
    shapes: Shapes {
        tiles: FLOAT_TILES,
        chunk: 4,
    },
    kernels: &[
        tile_w4a16::<1, 1>,
        tile_w4a16::<4, 1>,
        tile_w4a16::<2, 4>,
        tile_w4a16::<1, 4>,
    ],
    block: 8,
    layout: Layout::Chunked,
    scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
};
pub(crate) const W4A16_GROUPED: Family<TileF32Q4Grouped> = Family {
    shapes: Shapes {
        tiles: FLOAT_TILES,
        chunk: 16,
    },
    kernels: &[
        tile_w4a16_grouped::<1, 1>,
        tile_w4a16_grouped::<4, 1>,
        tile_w4a16_grouped::<2, 4>,
        tile_w4a16_grouped::<1, 4>,
    ],
    block: 8,
    layout: Layout::Chunked,
    scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
};
