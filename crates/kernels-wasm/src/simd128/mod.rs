//! The SIMD128 tier. Integer micro-kernels widen with `i16x8_extmul_*`
//! (every i8·i8 product is exact in i16) and `i32x4_extadd_pairwise_i16x8`,
//! never a saturating step; float micro-kernels keep the spec's 8 lanes as
//! two `f32x4` (natural column order), `f32x4_mul` then `f32x4_add`, no
//! relaxed-SIMD FMA. The frame owns the loops, tails and outputs; this
//! module registers the tiles: 4 weight rows per pass for M = 1 sharing each
//! activation load (W4A8: 16 rows one after another), 4 × 4 for batches,
//! single rows for what is left; and W4A8 grouped's panel tiles
//! ([`panels`]), which `Linear` runs on a weight it holds in the panel form.
//!
//! The whole build has `+simd128`, so the kernels are ordinary safe
//! functions and register as they are. The W4A8 tiles are generic over how
//! 16 nibbles meet 16 codes ([`NibbleDot`]), so that the relaxed-SIMD tier
//! (`crate::relaxed`) is this tier with one instruction swapped.
#![cfg(all(target_arch = "wasm32", target_feature = "simd128"))]

use std::arch::wasm32::*;

use qlinear_kernels_core::abi::tile::{Family, Layout, Shapes, Tile, TileGroupedQ4, TileI8I8, TileI8Q4};
use qlinear_kernels_core::{dot_i8_i8 as tail_i8, dot_i8_q4_biased as tail_biased, KernelTable};

mod float;
pub(crate) mod panels;
mod quantize;

// the plausible mistakes of this tier, which the proof must fail
#[cfg(test)]
mod mutants;

pub(crate) static TABLE: KernelTable = KernelTable {
    name: "wasm-simd128",
    dot_i8_i8,
    dot_i8_q4,
    quantize_row_q8: quantize::quantize_row_q8,
    group_sums: qlinear_kernels_core::SCALAR.group_sums,
    gemm_w8a8: gemm::gemm_w8a8,
    gemm_w4a8: gemm::gemm_w4a8,
    gemm_w4a8_grouped: gemm::gemm_w4a8_grouped,
    gemm_w4a8_grouped_panels: Some(panels::gemm_w4a8_grouped_panels),
    gemm_w4a8_panels: Some(panels::gemm_w4a8_panels),
    gemm_w8a16: gemm::gemm_w8a16,
    gemm_w4a16: gemm::gemm_w4a16,
    gemm_w4a16_grouped: gemm::gemm_w4a16_grouped,
    shapes: gemm::SHAPES,
};

const W4A8: Family<TileI8Q4> = Int4::<ExtMul>::W4A8;
const W4A8_GROUPED: Family<TileGroupedQ4> = Int4::<ExtMul>::W4A8_GROUPED;

mod gemm {
    use super::float::{W4A16, W4A16_GROUPED, W8A16};
    use super::{W4A8, W4A8_GROUPED, W8A8};
    qlinear_kernels_core::frame_gemms! {
        w8a8: W8A8, w4a8: W4A8, w4a8_grouped: W4A8_GROUPED,
        w8a16: W8A16, w4a16: W4A16, w4a16_grouped: W4A16_GROUPED,
    }
}

const INT_TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(4, 4), Tile::new(1, 4)];
/// W4A8 also takes 16 weight rows per call at M = 1, one after another:
/// 1.19–1.21× the 4-row tile on SIMD128 under Node.js (level on relaxed
/// SIMD, 0.95–1.02×), on a Zen 3 EPYC (family 25 model 1), `3b2c1bc`:
/// `docs/benchmarks/history.md`.
const DECODE_TILES: &[Tile] = &[
    Tile::ONE,
    Tile::new(4, 1),
    Tile::new(16, 1),
    Tile::new(4, 4),
    Tile::new(16, 4),
    Tile::new(1, 4),
];

/// W8A8 takes 16 weight rows per call at M = 1 as well, one after another:
/// level with the 4-row tile on weights in cache (0.93–1.03× at SmolLM2's
/// shapes), but 2.88–2.89× as fast on its LM head's 49152 × 576 and
/// 1.37–1.40× on 11008 × 4096, which stream from memory, where 4 rows read
/// side by side ran at about 4 GB/s, below the scalar tier's 6 (Node.js,
/// AMD EPYC Zen 4, `docs/benchmarks/history.md`, "W8A8 in wasm: rows one
/// after another").
const W8A8_TILES: &[Tile] = &[
    Tile::ONE,
    Tile::new(4, 1),
    Tile::new(16, 1),
    Tile::new(4, 4),
    Tile::new(1, 4),
];

const W8A8: Family<TileI8I8> = Family {
    shapes: Shapes {
        tiles: W8A8_TILES,
        chunk: 16,
    },
    kernels: &[
        tile_i8::<1, 1>,
        tile_i8::<4, 1>,
        tile_i8_seq::<16>,
        tile_i8::<4, 4>,
        tile_i8::<1, 4>,
    ],
    block: 16,
    layout: Layout::Natural,
    scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
};
const INT4_SHAPES: Shapes = Shapes {
    tiles: DECODE_TILES,
    chunk: 64,
};
const INT4_GROUPED_SHAPES: Shapes = Shapes {
    tiles: INT_TILES,
    chunk: 16,
};

/// How a tier multiplies 16 biased nibbles by 16 activation codes.
pub(crate) trait NibbleDot {
    /// Eight i16 lanes that together hold the 16 exact products of
    /// `nibbles` (0..15) and `x` (codes, |x| <= 127), two per lane (which
    /// two is the implementation's choice: the caller only adds all the
    /// lanes). A lane is at most 2·15·127 = 3810 in magnitude.
    fn pairs(nibbles: v128, x: v128) -> v128;
}

/// SIMD128's widening multiplies: lane j holds the products at bytes j
/// and j + 8.
pub(crate) struct ExtMul;

impl NibbleDot for ExtMul {
    #[inline]
    fn pairs(nibbles: v128, x: v128) -> v128 {
        i16x8_add(i16x8_extmul_low_i8x16(nibbles, x), i16x8_extmul_high_i8x16(nibbles, x))
    }
}

/// The W4A8 families with the nibble products of `D`: the same tiles, chunks
/// and layout for every `D`.
pub(crate) struct Int4<D>(std::marker::PhantomData<D>);

impl<D: NibbleDot> Int4<D> {
    pub(crate) const W4A8: Family<TileI8Q4> = Family {
        shapes: INT4_SHAPES,
        kernels: &[
            tile_q4::<1, 1, D>,
            tile_q4::<4, 1, D>,
            tile_q4_seq::<16, D>,
            tile_q4::<4, 4, D>,
            tile_q4_quads::<4, D>,
            tile_q4::<1, 4, D>,
        ],
        block: 32,
        layout: Layout::EvenOdd,
        scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
    };
    pub(crate) const W4A8_GROUPED: Family<TileGroupedQ4> = Family {
        shapes: INT4_GROUPED_SHAPES,
        kernels: &[
            tile_grouped::<1, 1, D>,
            tile_grouped::<4, 1, D>,
            tile_grouped::<4, 4, D>,
            tile_grouped::<1, 4, D>,
        ],
        block: 32,
        layout: Layout::EvenOdd,
        scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
    };
}

/// 16 bytes of `v` at `at`.
#[inline]
pub(crate) fn load16<T: Copy>(v: &[T], at: usize) -> v128 {
    assert!(std::mem::size_of::<T>() == 1 && at + 16 <= v.len());
    // SAFETY: 16 one-byte elements from `at` lie inside `v` (asserted);
    // v128_load has no alignment requirement.
    unsafe { v128_load(v.as_ptr().add(at).cast()) }
}

#[inline]
fn hsum(v: v128) -> i32 {
    i32x4_extract_lane::<0>(v) + i32x4_extract_lane::<1>(v) + i32x4_extract_lane::<2>(v) + i32x4_extract_lane::<3>(v)
}

/// The 32 biased nibbles of 16 packed bytes at byte `b`: the low nibbles
/// are the block's 16 even columns, the high its 16 odd ones — the order of
/// the family's `EvenOdd` activation layout, so a mask and a shift are the
/// whole unpack.
#[inline]
fn nibbles(p: &[u8], b: usize) -> (v128, v128) {
    split_nibbles(load16(p, b))
}

/// The low and the high nibbles of 16 bytes, each in its own byte (0..15).
/// The high ones take a 16-bit shift and the low ones' mask: WebAssembly's
/// `i8x16.shr_u` has no x86 instruction, and V8 lowers it to a 16-bit shift
/// and a mask of its own that it builds anew at each use (three more
/// instructions a load in the panel tiles' loop, Node.js 20 on x86-64).
#[inline(always)]
pub(crate) fn split_nibbles(v: v128) -> (v128, v128) {
    let low = u8x16_splat(0x0F);
    (v128_and(v, low), v128_and(u16x8_shr(v, 4), low))
}

/// One 32-column block of the W4A8 tile at column `c`. A nibble (0..15)
/// times a code (|x| <= 127) is at most 1905 in magnitude, so the block's
/// two i16 pair vectors ([`NibbleDot::pairs`], at most 3810 a lane) add in
/// i16 exactly (at most 7620) and widen once: with [`ExtMul`], 9 operations
/// per block and pair of rows, where a widening multiply and a pairwise
/// add per half of each 16 bytes would take 12.
#[inline]
fn q4_block<const WR: usize, const XR: usize, D: NibbleDot>(
    a: &mut [[v128; WR]; XR],
    x: &[&[i8]],
    w: &[&[u8]],
    c: usize,
) {
    let nib: [(v128, v128); WR] = std::array::from_fn(|q| nibbles(w[q], c / 2));
    for i in 0..XR {
        let (even, odd) = (load16(x[i], c), load16(x[i], c + 16));
        for q in 0..WR {
            let (lo, hi) = nib[q];
            let (e, o) = (D::pairs(lo, even), D::pairs(hi, odd));
            a[i][q] = i32x4_add(a[i][q], i32x4_extadd_pairwise_i16x8(i16x8_add(e, o)));
        }
    }
}

/// 16 codes sign-extended to two i16x8 halves (bytes 0..8, then 8..16).
#[inline(always)]
fn widen(v: v128) -> (v128, v128) {
    (i16x8_extend_low_i8x16(v), i16x8_extend_high_i8x16(v))
}

/// W8A8 micro-kernel: `Σ x·w` of `WR` × `XR` rows over whole blocks of 16.
/// Each operand is widened to i16 once a block (the weights' for all `XR`
/// activation rows, an activation row's for all `WR` weight rows), and
/// `i32x4.dot_i16x8_s` multiplies and adds pairs: lane j of a block adds
/// the products at bytes 2j, 2j + 1, 2j + 8 and 2j + 9, each at most
/// 127² in magnitude, so every lane and the final sum are exact i32 within
/// `MAX_K_W8A8` (`docs/NUMERICS.md` §4). Two multiply-adds a pair of rows
/// beside the shared widenings, where widening multiplies and pairwise adds
/// of each pair took two of each: SmolLM2's q8 prefill 1.27–1.44× as fast
/// under Node.js 20's WASI (AMD EPYC Zen 4, three ABBA rounds,
/// `docs/benchmarks/history.md`, "W8A8 in wasm: one widening a block").
fn tile_i8<const WR: usize, const XR: usize>(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    let k = x.first().map_or(0, |r| r.len());
    assert!(x.len() == XR && w.len() == WR && acc.len() == WR * XR && k.is_multiple_of(16));
    assert!(x.iter().all(|r| r.len() == k) && w.iter().all(|r| r.len() == k));
    let mut a = [[i32x4_splat(0); WR]; XR];
    let mut c = 0;
    while c < k {
        let wv: [(v128, v128); WR] = std::array::from_fn(|q| widen(load16(w[q], c)));
        for i in 0..XR {
            let (xl, xh) = widen(load16(x[i], c));
            for q in 0..WR {
                let (wl, wh) = wv[q];
                a[i][q] = i32x4_add(a[i][q], i32x4_add(i32x4_dot_i16x8(xl, wl), i32x4_dot_i16x8(xh, wh)));
            }
        }
        c += 16;
    }
    for i in 0..XR {
        for q in 0..WR {
            acc[i * WR + q] = hsum(a[i][q]);
        }
    }
}

/// W8A8 decode micro-kernel (`WR` × 1): `WR` weight rows one after
/// another.
fn tile_i8_seq<const WR: usize>(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    assert!(w.len() == WR && acc.len() == WR);
    for q in 0..WR {
        tile_i8::<1, 1>(x, &w[q..q + 1], &mut acc[q..q + 1]);
    }
}

/// W4A8 decode micro-kernel (`WR` × 1): `WR` weight rows one after another,
/// so that the weights stream as one sequential run (the activation row
/// stays in L1).
fn tile_q4_seq<const WR: usize, D: NibbleDot>(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    assert!(w.len() == WR && acc.len() == WR);
    for q in 0..WR {
        tile_q4::<1, 1, D>(x, &w[q..q + 1], &mut acc[q..q + 1]);
    }
}

/// W4A8 batch micro-kernel (`4·QUADS` × 4): the 4 × 4 tile over each 4
/// weight rows in turn, each result stored at its rows' columns, so that the
/// frame's work per tile call is paid once per `4·QUADS` rows (the x86
/// tiers' 16 × 4 tiles, for the same reason).
fn tile_q4_quads<const QUADS: usize, D: NibbleDot>(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    qlinear_kernels_core::frame::quads_in_turn::<QUADS>(x, w, acc, tile_q4::<4, 4, D>);
}

/// W4A8 micro-kernel: `Σ x·b` (biased, uncorrected) of `WR` × `XR` rows
/// over whole blocks of 32 columns, the activations split even/odd per block.
fn tile_q4<const WR: usize, const XR: usize, D: NibbleDot>(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    let k = x.first().map_or(0, |r| r.len());
    assert!(x.len() == XR && w.len() == WR && acc.len() == WR * XR && k.is_multiple_of(32));
    assert!(x.iter().all(|r| r.len() == k) && w.iter().all(|r| r.len() == k / 2));
    let mut a = [[i32x4_splat(0); WR]; XR];
    let mut c = 0;
    while c < k {
        q4_block::<WR, XR, D>(&mut a, x, w, c);
        c += 32;
    }
    for i in 0..XR {
        for q in 0..WR {
            acc[i * WR + q] = hsum(a[i][q]);
        }
    }
}

/// W4A8-grouped micro-kernel for groups of a multiple of 32: per group the
/// exact `acc_g` of each output, then `sum += (acc_g − 8·Σx_g) as f32 * s_g`
/// in increasing g from +0. Covers the groups inside the whole blocks; other
/// group sizes cover none.
fn tile_grouped<const WR: usize, const XR: usize, D: NibbleDot>(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) -> usize {
    let kb = x.first().map_or(0, |r| r.len());
    assert!(x.len() == XR && sums.len() == XR && w.len() == WR && out.len() == WR * XR);
    out.fill(0.0);
    if g == 0 || !g.is_multiple_of(32) {
        return 0;
    }
    let groups = kb / g;
    assert!(x.iter().all(|r| r.len() == kb) && w.iter().all(|r| r.len() == kb / 2));
    let all = s.len() / WR;
    assert!(sums.iter().all(|r| r.len() == all) && s.len() == WR * all && groups <= all);
    let mut sum = [[0f32; WR]; XR];
    for gi in 0..groups {
        let mut a = [[i32x4_splat(0); WR]; XR];
        let mut c = gi * g;
        while c < (gi + 1) * g {
            q4_block::<WR, XR, D>(&mut a, x, w, c);
            c += 32;
        }
        for i in 0..XR {
            for q in 0..WR {
                let acc = hsum(a[i][q]) - 8 * sums[i][gi];
                sum[i][q] += acc as f32 * s[q * all + gi];
            }
        }
    }
    for i in 0..XR {
        out[i * WR..(i + 1) * WR].copy_from_slice(&sum[i]);
    }
    groups
}

fn dot_i8_i8(a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len());
    let kb = a.len() / 16 * 16;
    let mut acc = [0];
    tile_i8::<1, 1>(&[&a[..kb]], &[&b[..kb]], &mut acc);
    acc[0] + tail_i8(&a[kb..], &b[kb..])
}

fn dot_i8_q4(x: &[i8], p: &[u8]) -> i32 {
    dot_i8_q4_with::<ExtMul>(x, p)
}

/// `dot_i8_q4` (the scalar tier's contract) on the nibble products of `D`.
pub(crate) fn dot_i8_q4_with<D: NibbleDot>(x: &[i8], p: &[u8]) -> i32 {
    assert_eq!(p.len(), x.len().div_ceil(2));
    let kb = x.len() / 32 * 32;
    let split = qlinear_kernels_core::frame::layout::split_even_odd_i8(&x[..kb], 32);
    let mut acc = [0];
    tile_q4::<1, 1, D>(&[&split], &[&p[..kb / 2]], &mut acc);
    acc[0] + tail_biased(&x[kb..], &p[kb / 2..]) - 8 * x.iter().map(|&v| i32::from(v)).sum::<i32>()
}
