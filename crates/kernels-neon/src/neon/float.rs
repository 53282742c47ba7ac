//! NEON weight-only micro-kernels: the spec's 8 lanes are two `float32x4_t`
//! (lanes 0-3 and 4-7, natural column order), `vmulq` then `vaddq`, never
//! `vfmaq`; the tree `((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))` is two pairwise
//! adds and one add. A tile keeps `WR` × `XR` lane pairs in registers: each
//! dequantized weight chunk serves the `XR` activation rows and each
//! activation chunk the `WR` weight rows; per output the arithmetic is the
//! scalar tier's, so tiling never changes a bit.

use std::arch::aarch64::*;

#[inline]
#[target_feature(enable = "neon")]
fn tree(lo: float32x4_t, hi: float32x4_t) -> f32 {
    let p = vpaddq_f32(lo, hi); // [l0+l1, l2+l3, l4+l5, l6+l7]
    let p = vpaddq_f32(p, p); // [(l0+l1)+(l2+l3), (l4+l5)+(l6+l7), ..]
    vgetq_lane_f32::<0>(p) + vgetq_lane_f32::<1>(p)
}

/// 8 codes (as i8) to two float32x4.
#[inline]
#[target_feature(enable = "neon")]
fn widen(codes: int8x8_t) -> (float32x4_t, float32x4_t) {
    let w16 = vmovl_s8(codes);
    (
        vcvtq_f32_s32(vmovl_s16(vget_low_s16(w16))),
        vcvtq_f32_s32(vmovl_high_s16(w16)),
    )
}

/// 8 int8 codes from column `c` (zero past the end).
#[inline]
#[target_feature(enable = "neon")]
fn q8_codes(w: &[i8], c: usize) -> int8x8_t {
    if c + 8 <= w.len() {
        // SAFETY: 8 bytes from c lie inside w.
        return unsafe { vld1_s8(w.as_ptr().add(c)) };
    }
    let mut buf = [0i8; 8];
    let n = (w.len() - c).min(8);
    buf[..n].copy_from_slice(&w[c..c + n]);
    // SAFETY: an 8-byte load of a local 8-byte array.
    unsafe { vld1_s8(buf.as_ptr()) }
}

/// The 8 codes of 4 packed bytes from byte `b` (the zero code past `end`), in
/// natural column order: zip of low and high nibbles, minus the bias 8.
#[inline]
#[target_feature(enable = "neon")]
fn q4_codes(p: &[u8], b: usize, end: usize) -> int8x8_t {
    let v = if b + 4 <= end && b + 8 <= p.len() {
        // SAFETY: 8 bytes from b lie inside p; only the first 4 are used.
        unsafe { vld1_u8(p.as_ptr().add(b)) }
    } else {
        let mut buf = [0x88u8; 8];
        let n = (end - b).min(4);
        buf[..n].copy_from_slice(&p[b..b + n]);
        // SAFETY: an 8-byte load of a local 8-byte array.
        unsafe { vld1_u8(buf.as_ptr()) }
    };
    let nib = vzip1_u8(vand_u8(v, vdup_n_u8(0x0F)), vshr_n_u8::<4>(v));
    vsub_s8(vreinterpret_s8_u8(nib), vdup_n_s8(8))
}

/// The 8-lane partials of `WR` × `XR` outputs over `chunks` chunks of 8
/// from chunk `first` of each activation row (laid out by `chunked_f32`),
/// codes of weight row `q`'s chunk `c` from `code8(q, c)`.
#[inline]
#[target_feature(enable = "neon")]
fn partials<const WR: usize, const XR: usize>(
    x: &[&[f32]],
    first: usize,
    chunks: usize,
    code8: impl Fn(usize, usize) -> int8x8_t,
) -> [[f32; WR]; XR] {
    assert!(x.len() == XR && x.iter().all(|r| r.len() >= (first + chunks) * 8));
    let mut lo = [[vdupq_n_f32(0.0); WR]; XR];
    let mut hi = [[vdupq_n_f32(0.0); WR]; XR];
    for c in first..first + chunks {
        let wv: [(float32x4_t, float32x4_t); WR] = std::array::from_fn(|q| widen(code8(q, c)));
        for i in 0..XR {
            // SAFETY: c < first + chunks and every row holds that many chunks (asserted).
            let (xl, xh) = unsafe {
                (
                    vld1q_f32(x[i].as_ptr().add(c * 8)),
                    vld1q_f32(x[i].as_ptr().add(c * 8 + 4)),
                )
            };
            for q in 0..WR {
                lo[i][q] = vaddq_f32(lo[i][q], vmulq_f32(xl, wv[q].0));
                hi[i][q] = vaddq_f32(hi[i][q], vmulq_f32(xh, wv[q].1));
            }
        }
    }
    std::array::from_fn(|i| std::array::from_fn(|q| tree(lo[i][q], hi[i][q])))
}

/// W8A16 micro-kernel: the partials of `WR` × `XR` whole rows.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn tile_w8a16<const WR: usize, const XR: usize>(x: &[&[f32]], w: &[&[i8]], k: usize, out: &mut [f32]) {
    assert!(w.len() == WR && w.iter().all(|r| r.len() == k) && out.len() == WR * XR);
    let p = partials::<WR, XR>(x, 0, k.div_ceil(8), |q, c| q8_codes(w[q], c * 8));
    for i in 0..XR {
        out[i * WR..(i + 1) * WR].copy_from_slice(&p[i]);
    }
}

/// W4A16 micro-kernel: the partials of `WR` × `XR` whole rows.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn tile_w4a16<const WR: usize, const XR: usize>(x: &[&[f32]], w: &[&[u8]], k: usize, out: &mut [f32]) {
    assert!(w.len() == WR && w.iter().all(|r| r.len() == k.div_ceil(2)) && out.len() == WR * XR);
    let p = partials::<WR, XR>(x, 0, k.div_ceil(8), |q, c| q4_codes(w[q], c * 4, w[q].len()));
    for i in 0..XR {
        out[i * WR..(i + 1) * WR].copy_from_slice(&p[i]);
    }
}

/// W4A16-grouped micro-kernel: `Σ_g s_g · partial_g` in increasing g, from +0.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn tile_w4a16_grouped<const WR: usize, const XR: usize>(
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

use qlinear_kernels_core::abi::tile::{Family, Layout, Shapes, Tile, TileF32Q4, TileF32Q4Grouped, TileF32Q8};

/// 4 weight rows in flight for M = 1 (8 accumulators), 2 × 4 for batches
/// (16 accumulators, 4 + 2 operand registers), single rows left over.
/// (Weight rows in chunks of 4, so the matrix streams once for a batch.)
const FLOAT_TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(2, 4), Tile::new(1, 4)];

pub(crate) const W8A16: Family<TileF32Q8> = Family {
    shapes: Shapes {
        tiles: FLOAT_TILES,
        chunk: 4,
    },
    kernels: &[entry::w8a16_1x1, entry::w8a16_4x1, entry::w8a16_2x4, entry::w8a16_1x4],
    block: 8,
    layout: Layout::Chunked,
    scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
};
pub(crate) const W4A16: Family<TileF32Q4> = Family {
    shapes: Shapes {
        tiles: FLOAT_TILES,
        chunk: 4,
    },
    kernels: &[entry::w4a16_1x1, entry::w4a16_4x1, entry::w4a16_2x4, entry::w4a16_1x4],
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
        entry::w4a16g_1x1,
        entry::w4a16g_4x1,
        entry::w4a16g_2x4,
        entry::w4a16g_1x4,
    ],
    block: 8,
    layout: Layout::Chunked,
    scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
};

/// SAFETY (for every entry): reachable only through the NEON and SDOT
/// tables, which `crate::neon_table` / `crate::sdot_table` return only after
/// detecting ASIMD; the micro-kernels assert what they rely on.
mod entry {
    qlinear_kernels_core::safe_entries! {
        w8a16_1x1 => super::tile_w8a16::<1, 1>: tile_f32q8,
        w8a16_4x1 => super::tile_w8a16::<4, 1>: tile_f32q8,
        w8a16_2x4 => super::tile_w8a16::<2, 4>: tile_f32q8,
        w8a16_1x4 => super::tile_w8a16::<1, 4>: tile_f32q8,
        w4a16_1x1 => super::tile_w4a16::<1, 1>: tile_f32q4,
        w4a16_4x1 => super::tile_w4a16::<4, 1>: tile_f32q4,
        w4a16_2x4 => super::tile_w4a16::<2, 4>: tile_f32q4,
        w4a16_1x4 => super::tile_w4a16::<1, 4>: tile_f32q4,
        w4a16g_1x1 => super::tile_w4a16_grouped::<1, 1>: tile_f32q4_grouped,
        w4a16g_4x1 => super::tile_w4a16_grouped::<4, 1>: tile_f32q4_grouped,
        w4a16g_2x4 => super::tile_w4a16_grouped::<2, 4>: tile_f32q4_grouped,
        w4a16g_1x4 => super::tile_w4a16_grouped::<1, 4>: tile_f32q4_grouped,
    }
}
