//! The AVX-512 VNNI tier: integer kernels on `vpdpbusd` (u8 × i8 quads summed
//! straight into i32 lanes, no i16 step), on the frame
//! (`qlinear_kernels_core::frame`) like every other SIMD tier: this module
//! registers the micro-kernels and their tiles. W4A16 keeps four rows' spec
//! lanes per 512-bit register and a `vpermps` nibble lookup (`float`).
//! W8A16 and the activation group sums are the AVX2 tier's (a `vpdpbusd`
//! version summed 576 codes in groups of 32 in 0.021 µs, AVX2's four
//! groups a step in 0.014–0.015; Intel Xeon, family 6 model 167, through
//! the dispatch layer as `qlinear-bench --activations` times them). The activation quantizer multiplies by the
//! scale's reciprocal where that provably gives the division's codes
//! (`quantize`).
#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use qlinear_kernels_core::abi::tile::{
    Family, Layout, Shapes, Tile, TileF32Q4, TileF32Q4Grouped, TileGroupedQ4, TileI8I8, TileI8Q4,
};
use qlinear_kernels_core::KernelTable;

use crate::avx2;

mod float;
mod q4;
mod q4_grouped;
mod q4_panels;
mod q8;
mod quantize;

// the plausible mistakes of this tier, which the proof must fail
#[cfg(test)]
mod mutants;
#[cfg(test)]
mod panel_mutants;

/// Whether this CPU has the features the tier declares (AVX2 and F16C,
/// AVX-512 F, BW, DQ, VL and VNNI).
pub(crate) fn detected() -> bool {
    crate::AVX512_VNNI.features_present()
}

/// SAFETY (for every entry): reachable only through `TABLE` and
/// `TABLE_SINGLE_PANELS`, which `crate::avx512vnni_table` returns only
/// when `detected()` confirmed AVX-512 F/BW/DQ/VL/VNNI, AVX2 and F16C; the
/// kernels assert what they rely on.
mod entry {
    use super::*;
    qlinear_kernels_core::safe_entries! {
        dot_i8_i8 => q8::dot_i8_i8: dot_i8,
        dot_i8_q4 => q4::dot_i8_q4: dot_q4,
        quantize_row_q8 => quantize::quantize_row_q8: quantize,
        w8a8_1x1 => q8::tile_w8a8_seq::<1>: tile_i8,
        w8a8_16x1 => q8::tile_w8a8_seq::<16>: tile_i8,
        w8a8_16x4 => q8::tile_w8a8_batch::<4, 4>: tile_i8,
        w8a8_1x4 => q8::tile_w8a8_column::<4>: tile_i8,
        w4a8_1x1 => q4::tile_w4a8_seq::<1>: tile_q4,
        w4a8_16x1 => q4::tile_w4a8_seq::<16>: tile_q4,
        w4a8_4x4 => q4::tile_w4a8_batch::<4, 4>: tile_q4,
        w4a8_16x4 => q4::tile_w4a8_batch_quads::<4>: tile_q4,
        w4a8_1x4 => q4::tile_w4a8_batch::<1, 4>: tile_q4,
        grouped_1x1 => q4_grouped::tile_w4a8_grouped_seq::<1>: tile_grouped,
        grouped_16x1 => q4_grouped::tile_w4a8_grouped_seq::<16>: tile_grouped,
        grouped_4x4 => q4_grouped::tile_w4a8_grouped_quad::<4, 4>: tile_grouped,
        grouped_1x4 => q4_grouped::tile_w4a8_grouped_quad::<1, 4>: tile_grouped,
        grouped_8x16 => q4_grouped::tile_w4a8_grouped_rows16::<8>: tile_grouped,
        grouped_1x16 => q4_grouped::tile_w4a8_grouped_rows16::<1>: tile_grouped,
        panel_16x1 => q4_panels::tile_w4a8_panel_16x1: tile_panel,
        panel_pair => q4_panels::tile_w4a8_panel_pair: tile_panel,
        panel_16x4 => q4_panels::tile_w4a8_panel::<4>: tile_panel,
        panel_16x8 => q4_panels::tile_w4a8_panel::<8>: tile_panel,
        panel_pc_16x1 => q4_panels::tile_w4a8_panel_per_channel_16x1::<true>: tile_panel_per_channel,
        panel_pc_16x1_unprefetched => q4_panels::tile_w4a8_panel_per_channel_16x1::<false>: tile_panel_per_channel,
        panel_pc_pair => q4_panels::tile_w4a8_panel_per_channel_pair: tile_panel_per_channel,
        panel_pc_16x4 => q4_panels::tile_w4a8_panel_per_channel::<4>: tile_panel_per_channel,
        panel_pc_16x8 => q4_panels::tile_w4a8_panel_per_channel::<8>: tile_panel_per_channel,
        w4a16_1x1 => float::tile_w4a16::<1, 1>: tile_f32q4,
        w4a16_4x1 => float::tile_w4a16::<4, 1>: tile_f32q4,
        w4a16_4x4 => float::tile_w4a16::<4, 4>: tile_f32q4,
        w4a16_1x4 => float::tile_w4a16::<1, 4>: tile_f32q4,
        w4a16g_1x1 => float::tile_w4a16_grouped::<1, 1>: tile_f32q4_grouped,
        w4a16g_4x1 => float::tile_w4a16_grouped::<4, 1>: tile_f32q4_grouped,
        w4a16g_4x4 => float::tile_w4a16_grouped::<4, 4>: tile_f32q4_grouped,
        w4a16g_1x4 => float::tile_w4a16_grouped::<1, 4>: tile_f32q4_grouped,
    }
}

/// Decode (M = 1): 16 weight rows per call, one after another, so that the
/// weights stream as one sequential run (the AVX2 tier's 16 × 1 tiles, for
/// the same reason: 4 rows in lockstep left the hardware prefetcher behind).
/// W8A8 batches: 16 weight rows × 4 activation rows per call, in blocks of
/// 4 weight rows biased once per load, over 16-row chunks (64 KiB at K =
/// 4096, in L2 while each activation tile passes). Activation rows are
/// copied 64-byte aligned (`Layout::Aligned`).
const W8A8: Family<TileI8I8> = Family {
    shapes: Shapes {
        tiles: &[Tile::ONE, Tile::new(16, 1), Tile::new(16, 4), Tile::new(1, 4)],
        chunk: 16,
    },
    kernels: &[entry::w8a8_1x1, entry::w8a8_16x1, entry::w8a8_16x4, entry::w8a8_1x4],
    block: q8::BLOCK,
    layout: Layout::Aligned,
    scales_to_f32: avx2::scales_to_f32,
};
/// W4A8 batches in 16 × 4 tiles (four 4 × 4 tiles in turn, the frame's
/// work paid once per 16 weight rows) within 64-row chunks (128 KiB at K =
/// 4096).
const W4A8: Family<TileI8Q4> = Family {
    shapes: Shapes {
        tiles: &[
            Tile::ONE,
            Tile::new(16, 1),
            Tile::new(4, 4),
            Tile::new(16, 4),
            Tile::new(1, 4),
        ],
        chunk: 64,
    },
    kernels: &[
        entry::w4a8_1x1,
        entry::w4a8_16x1,
        entry::w4a8_4x4,
        entry::w4a8_16x4,
        entry::w4a8_1x4,
    ],
    block: q4::BLOCK,
    layout: Layout::EvenOdd,
    scales_to_f32: avx2::scales_to_f32,
};
/// Grouped: decode in 16 × 1 tiles (rows in the lanes for the float chain),
/// batches in 4 × 4 quad tiles, over 16-row chunks whose scales the frame
/// converts once.
const W4A8_GROUPED: Family<TileGroupedQ4> = Family {
    shapes: Shapes {
        tiles: &[
            Tile::ONE,
            Tile::new(16, 1),
            Tile::new(4, 4),
            Tile::new(1, 4),
            Tile::new(8, 16),
            Tile::new(1, 16),
        ],
        chunk: 16,
    },
    kernels: &[
        entry::grouped_1x1,
        entry::grouped_16x1,
        entry::grouped_4x4,
        entry::grouped_1x4,
        entry::grouped_8x16,
        entry::grouped_1x16,
    ],
    block: q4::BLOCK,
    layout: Layout::EvenOddQuads16,
    scales_to_f32: avx2::scales_to_f32,
};

/// W4A16: 4 weight rows per register (one chunk of 8 columns each: the
/// 4 rows' even lanes in one accumulator, their odd lanes in another), × 1
/// activation row for decode, × 4 for batches, each 4-row block swept by
/// every activation tile while it is in L1 (chunks of 4 rows).
const W4A16_TILES: Shapes = Shapes {
    tiles: &[Tile::ONE, Tile::new(4, 1), Tile::new(4, 4), Tile::new(1, 4)],
    chunk: 4,
};
const W4A16: Family<TileF32Q4> = Family {
    shapes: W4A16_TILES,
    kernels: &[entry::w4a16_1x1, entry::w4a16_4x1, entry::w4a16_4x4, entry::w4a16_1x4],
    block: 8,
    layout: Layout::ChunkedQ4,
    scales_to_f32: avx2::scales_to_f32,
};
const W4A16_GROUPED: Family<TileF32Q4Grouped> = Family {
    shapes: W4A16_TILES,
    kernels: &[
        entry::w4a16g_1x1,
        entry::w4a16g_4x1,
        entry::w4a16g_4x4,
        entry::w4a16g_1x4,
    ],
    block: 8,
    layout: Layout::ChunkedQ4,
    scales_to_f32: avx2::scales_to_f32,
};

mod gemm {
    use super::*;
    qlinear_kernels_core::frame_gemms! {
        w8a8: W8A8, w4a8: W4A8, w4a8_grouped: W4A8_GROUPED,
        w4a16: W4A16, w4a16_grouped: W4A16_GROUPED;
        ..avx2::TABLE.shapes
    }
}

pub(crate) static TABLE: KernelTable = KernelTable {
    name: "avx512-vnni",
    dot_i8_i8: entry::dot_i8_i8,
    dot_i8_q4: entry::dot_i8_q4,
    quantize_row_q8: entry::quantize_row_q8,
    gemm_w8a8: gemm::gemm_w8a8,
    gemm_w4a8: gemm::gemm_w4a8,
    gemm_w4a8_grouped: gemm::gemm_w4a8_grouped,
    gemm_w4a8_grouped_panels: Some(q4_panels::gemm_w4a8_grouped_panels),
    gemm_w4a8_panels: Some(q4_panels::gemm_w4a8_panels),
    gemm_w4a16: gemm::gemm_w4a16,
    gemm_w4a16_grouped: gemm::gemm_w4a16_grouped,
    shapes: gemm::SHAPES,
    ..avx2::TABLE
};

/// [`TABLE`] as AMD CPUs get it ([`panel_pairs`]): W4A8 on the panel form,
/// grouped and per channel, decodes one panel at a time
/// (`q4_panels::PANELS_SINGLE`, `q4_panels::PANELS_PER_CHANNEL_SINGLE`).
pub(crate) static TABLE_SINGLE_PANELS: KernelTable = KernelTable {
    gemm_w4a8_grouped_panels: Some(q4_panels::gemm_w4a8_grouped_panels_single),
    gemm_w4a8_panels: Some(q4_panels::gemm_w4a8_panels_single),
    ..TABLE
};

/// The table this CPU gets: [`TABLE`], or on AMD CPUs
/// [`TABLE_SINGLE_PANELS`], whose panel decode streams one panel's codes
/// (and scales) at a time instead of a pair's (measured in
/// `q4_panels::PANELS_SINGLE` and `q4_panels::PANELS_PER_CHANNEL_SINGLE`).
/// Chosen once, when the tier is detected; either way the sums are the
/// same bits (the proof runs on the table handed out, and the tests prove
/// both).
pub(crate) fn table() -> &'static KernelTable {
    if panel_pairs() {
        &TABLE
    } else {
        &TABLE_SINGLE_PANELS
    }
}

/// Whether W4A8 decode on the panel form takes the pair tiles: not on AMD
/// CPUs (`q4_panels::PANELS_SINGLE` and `PANELS_PER_CHANNEL_SINGLE` have the
/// figures).
fn panel_pairs() -> bool {
    // asked at every detection of the tier: CPUID once (in a VM it traps)
    static PAIRS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PAIRS.get_or_init(|| !crate::vendor_is_amd())
}

/// Whether the W4A8 per-channel decode tiles prefetch each weight row 4 KiB
/// ahead of their loads (the W8A8 decode tile always does: on an AMD EPYC
/// Zen 5, family 26 model 2, it made SmolLM2's q8 decode 1.36× faster at
/// one thread; `avx512vnni/q8.rs`): on an Intel Xeon (family 6 model 207) it
/// lifted cold W4A8 decode from 0.78 of the bandwidth probe at 1 KiB; on an
/// AMD EPYC Zen 4 (family 25 model 17), where the hardware prefetcher keeps
/// up with one sequential stream, the same hint made cold W4A8 decode
/// 15–30 % slower than none, and slower than the AVX2 tier's (768 bytes
/// ahead for W4A8, none for W8A8; `b2a821e`, docs/benchmarks/history.md).
/// A prefetch is a hint: the sums are the same either way.
fn far_prefetch() -> bool {
    static FAR: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FAR.get_or_init(|| !crate::vendor_is_amd())
}

/// Sum of the 16 i32 lanes.
#[inline]
#[target_feature(enable = "avx512f")]
fn hsum_epi32(v: __m512i) -> i32 {
    _mm512_reduce_add_epi32(v)
}

/// `out[r] = Σ lanes of v[r]` (wrapping i32, exact where the true sums fit),
/// 16 rows at a time as one transposing tree: a decode tile's 16 rows are
/// reduced by 15 unpack-and-add steps instead of 16 reductions of 4 steps
/// each, whose latency chains ended every row (45 % of W8A8's decode tile
/// at 384 × 384 on the Intel Xeon, family 6 model 207, `624df7b`:
/// docs/benchmarks/history.md).
#[inline]
#[target_feature(enable = "avx512f")]
fn hsum_rows(v: &[__m512i], out: &mut [i32]) {
    assert_eq!(v.len(), out.len());
    let mut rows = v.chunks_exact(16);
    let mut outs = out.chunks_exact_mut(16);
    for (v, out) in (&mut rows).zip(&mut outs) {
        // pairs of rows: in each 128-bit lane, [a0+a2, b0+b2, a1+a3, b1+b3]
        let s1: [__m512i; 8] = std::array::from_fn(|j| {
            let (a, b) = (v[2 * j], v[2 * j + 1]);
            _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b))
        });
        // quads: in each 128-bit lane, rows 4j..4j+4's sums of that lane
        let s2: [__m512i; 4] = std::array::from_fn(|j| {
            let (a, b) = (s1[2 * j], s1[2 * j + 1]);
            _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b))
        });
        // the 128-bit lanes added: first lanes 0+1 and 2+3 of two quads
        // side by side, then the two halves, leaving rows 0..16 in order
        let pair = |a: __m512i, b: __m512i| {
            _mm512_add_epi32(
                _mm512_shuffle_i32x4::<0b10_00_10_00>(a, b),
                _mm512_shuffle_i32x4::<0b11_01_11_01>(a, b),
            )
        };
        let sums = pair(pair(s2[0], s2[1]), pair(s2[2], s2[3]));
        // SAFETY: `out` is a chunk of 16 i32: one 64-byte store.
        unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), sums) };
    }
    for (v, o) in rows.remainder().iter().zip(outs.into_remainder()) {
        *o = hsum_epi32(*v);
    }
}

#[cfg(test)]
mod tests {
    /// The table is chosen by vendor, once; which one this CPU gets is
    /// proven by the selftest, and both by `the_real_x86_tables_pass`.
    #[test]
    fn amd_cpus_get_the_panel_decode_without_pairs() {
        let single = std::ptr::eq(super::table(), &super::TABLE_SINGLE_PANELS);
        assert_eq!(single, crate::vendor_is_amd());
        let (amd, other) = (&super::TABLE_SINGLE_PANELS, &super::TABLE);
        assert_eq!(amd.name, other.name);
        // both W4A8 panel entries differ; the natural layout's are the same
        let entry = |t: &qlinear_kernels_core::KernelTable| {
            (
                t.gemm_w4a8_grouped_panels.map(|f| f as usize),
                t.gemm_w4a8_panels.map(|f| f as usize),
            )
        };
        let ((ag, ap), (og, op)) = (entry(amd), entry(other));
        assert!(ag.is_some() && ap.is_some() && ag != og && ap != op);
        assert_eq!(amd.gemm_w4a8 as usize, other.gemm_w4a8 as usize);
        assert_eq!(amd.gemm_w4a8_grouped as usize, other.gemm_w4a8_grouped as usize);
    }
}
