//! The AVX2 tier (with F16C for group scales). Integer kernels use `maddubs`
//! on operands that cannot saturate its i16 pairs; float kernels keep one
//! 8-wide accumulator per row per group — exactly the 8 lanes of the spec.
//! Every GEMM runs on the frame (`qlinear_kernels_core::frame`): this
//! module registers the micro-kernels and their tiles.
#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use qlinear_kernels_core::abi::tile::{
    Family, Layout, Shapes, Tile, TileF32Q4, TileF32Q4Grouped, TileF32Q8, TileGroupedQ4, TileI8I8, TileI8Q4,
};
use qlinear_kernels_core::KernelTable;

pub(crate) mod float;
pub(crate) mod q4;
mod q4_grouped;
mod q4_panels;
pub(crate) mod q8;
pub(crate) mod quantize;

// the plausible mistakes of this tier, which the proof must fail
#[cfg(test)]
mod frame_mutants;
#[cfg(test)]
mod mutants;
#[cfg(test)]
mod panel_mutants;

/// Whether this CPU has the features the tier declares (AVX2, F16C).
pub(crate) fn detected() -> bool {
    crate::AVX2.features_present()
}

/// SAFETY (for every entry): reachable only through `TABLE` (or the VNNI
/// table, which requires more), which `crate::avx2_table` returns only when
/// `detected()` confirmed AVX2 and F16C on this CPU; the kernels assert the
/// lengths and shapes they rely on.
mod entry {
    use super::*;
    qlinear_kernels_core::safe_entries! {
        dot_i8_i8 => q8::dot_i8_i8: dot_i8,
        dot_i8_q4 => q4::dot_i8_q4: dot_q4,
        quantize_row_q8 => quantize::quantize_row_q8: quantize,
        group_sums => quantize::group_sums: group_sums,
        w8a8_1x1 => q8::tile_w8a8::<0, 1>: tile_i8,
        w8a8_4x1 => q8::tile_w8a8::<1, 1>: tile_i8,
        w8a8_16x1 => q8::tile_w8a8_seq::<16>: tile_i8,
        w8a8_16x8 => q8::tile_w8a8::<4, 8>: tile_i8,
        w8a8_1x8 => q8::tile_w8a8::<0, 8>: tile_i8,
        w4a8_1x1 => q4::tile_w4a8_rows::<1>: tile_q4,
        w4a8_4x1 => q4::tile_w4a8_rows::<4>: tile_q4,
        w4a8_16x1 => q4::tile_w4a8_seq::<16>: tile_q4,
        w4a8_2x4 => q4::tile_w4a8_batch::<2, 4>: tile_q4,
        w4a8_16x4 => q4::tile_w4a8_batch_pairs::<8>: tile_q4,
        w4a8_1x4 => q4::tile_w4a8_batch::<1, 4>: tile_q4,
        grouped_1x1 => q4_grouped::tile_w4a8_grouped: tile_grouped,
        grouped_16x1 => q4_grouped::tile_w4a8_grouped_seq::<16>: tile_grouped,
        grouped_1x8 => q4_grouped::tile_w4a8_grouped_rows::<1>: tile_grouped,
        grouped_16x8 => q4_grouped::tile_w4a8_grouped_rows::<16>: tile_grouped,
        panel_16x1 => q4_panels::tile_w4a8_panel_16x1: tile_panel,
        panel_16x4 => q4_panels::tile_w4a8_panel::<4>: tile_panel,
        panel_pc_16x1 => q4_panels::tile_w4a8_panel_per_channel::<1>: tile_panel_per_channel,
        panel_pc_16x4 => q4_panels::tile_w4a8_panel_per_channel::<4>: tile_panel_per_channel,
        w8a16_1x1 => float::tile_w8a16::<1, 1>: tile_f32q8,
        w8a16_4x1 => float::tile_w8a16::<4, 1>: tile_f32q8,
        w8a16_16x1 => float::tile_w8a16_16x1: tile_f32q8,
        w8a16_2x4 => float::tile_w8a16::<2, 4>: tile_f32q8,
        w8a16_1x4 => float::tile_w8a16::<1, 4>: tile_f32q8,
        w4a16_1x1 => float::tile_w4a16::<1, 1>: tile_f32q4,
        w4a16_4x1 => float::tile_w4a16::<4, 1>: tile_f32q4,
        w4a16_16x1 => float::tile_w4a16_16x1: tile_f32q4,
        w4a16_2x4 => float::tile_w4a16::<2, 4>: tile_f32q4,
        w4a16_1x4 => float::tile_w4a16::<1, 4>: tile_f32q4,
        w4a16g_1x1 => float::tile_w4a16_grouped::<1, 1>: tile_f32q4_grouped,
        w4a16g_4x1 => float::tile_w4a16_grouped::<4, 1>: tile_f32q4_grouped,
        w4a16g_16x1 => float::tile_w4a16_grouped_16x1: tile_f32q4_grouped,
        w4a16g_2x4 => float::tile_w4a16_grouped::<2, 4>: tile_f32q4_grouped,
        w4a16g_1x4 => float::tile_w4a16_grouped::<1, 4>: tile_f32q4_grouped,
    }

    pub(crate) fn scales_to_f32(src: &[half::f16], dst: &mut [f32]) {
        // SAFETY: as for the entries above: F16C detected before the table is handed out.
        unsafe { q4_grouped::scales_into_f32(src, dst) }
    }
}

/// Exact f16 → f32 of a row of group scales with F16C (the frame's hook; the
/// VNNI tier's families use it too).
pub(crate) use entry::scales_to_f32;

/// Decode (M = 1), W8A8 and W4A8: 16 weight rows per call, one after
/// another, so that the weights stream as one sequential run: 4 rows read
/// in lockstep (sharing each activation load) left the hardware prefetcher
/// behind: 55–70 % of the bandwidth probe against 58–110 % per repeat for
/// one row at a time on a Zen 3 EPYC (family 25 model 1, `267923e`:
/// docs/benchmarks/history.md). W8A8 batches run each 4-row
/// block over 8 activation rows while it is in L1 (16-row chunks: the
/// matrix streams once); W4A8 batches in 2 × 4 tiles within 64-row chunks
/// (64 rows of K = 4096 are 128 KiB, in L2 while every tile passes over
/// them).
const W8A8: Family<TileI8I8> = Family {
    shapes: Shapes {
        tiles: &[
            Tile::ONE,
            Tile::new(4, 1),
            Tile::new(16, 1),
            Tile::new(16, 8),
            Tile::new(1, 8),
        ],
        chunk: 16,
    },
    kernels: &[
        entry::w8a8_1x1,
        entry::w8a8_4x1,
        entry::w8a8_16x1,
        entry::w8a8_16x8,
        entry::w8a8_1x8,
    ],
    block: 32,
    layout: Layout::Natural,
    scales_to_f32: entry::scales_to_f32,
};
const W4A8: Family<TileI8Q4> = Family {
    shapes: Shapes {
        tiles: &[
            Tile::ONE,
            Tile::new(4, 1),
            Tile::new(16, 1),
            Tile::new(2, 4),
            Tile::new(16, 4),
            Tile::new(1, 4),
        ],
        chunk: 64,
    },
    kernels: &[
        entry::w4a8_1x1,
        entry::w4a8_4x1,
        entry::w4a8_16x1,
        entry::w4a8_2x4,
        entry::w4a8_16x4,
        entry::w4a8_1x4,
    ],
    block: q4::BLOCK,
    layout: Layout::EvenOdd,
    scales_to_f32: entry::scales_to_f32,
};
/// Decode (M = 1): 16 weight rows per call, one after another (as W4A8's
/// decode), so that the frame's per-tile work is paid once per 16 rows: at
/// 576 × 576 one row per call spent about a third of the call in the frame
/// on a Zen 3 EPYC. Batches: 16 weight rows against 8 activation rows, each
/// block's 8 row sums reduced to its two groups with the rows in the lanes,
/// so that one vector addition adds a group to 8 outputs' chains (1 × 8 for
/// the rows left over); weight rows in chunks of 16 (32 KiB at K = 4096,
/// whose scales are converted once).
const W4A8_GROUPED: Family<TileGroupedQ4> = Family {
    shapes: Shapes {
        tiles: &[Tile::ONE, Tile::new(16, 1), Tile::new(1, 8), Tile::new(16, 8)],
        chunk: 16,
    },
    kernels: &[
        entry::grouped_1x1,
        entry::grouped_16x1,
        entry::grouped_1x8,
        entry::grouped_16x8,
    ],
    block: q4::BLOCK,
    layout: Layout::EvenOdd,
    scales_to_f32: entry::scales_to_f32,
};
/// 4 rows × 1 so that 4 independent lane chains are in flight for M = 1
/// (each output's 8 lanes are one dependent `add` chain by the spec's
/// order), and 16 × 1, that tile over 16 rows in turn (`rows_in_turn`: the
/// frame's work paid once per 16 rows); 2 × 4 for batches, each weight
/// chunk dequantized once for 4 activation rows, over 16-row chunks so the
/// matrix streams once (a chunk the 16-row tile fits, so that a decode call
/// sweeps its rows as one range).
const FLOAT_TILES: &[Tile] = &[
    Tile::ONE,
    Tile::new(4, 1),
    Tile::new(16, 1),
    Tile::new(2, 4),
    Tile::new(1, 4),
];
const W8A16: Family<TileF32Q8> = Family {
    shapes: Shapes {
        tiles: FLOAT_TILES,
        chunk: 16,
    },
    kernels: &[
        entry::w8a16_1x1,
        entry::w8a16_4x1,
        entry::w8a16_16x1,
        entry::w8a16_2x4,
        entry::w8a16_1x4,
    ],
    block: 8,
    layout: Layout::Chunked,
    scales_to_f32: entry::scales_to_f32,
};
const W4A16: Family<TileF32Q4> = Family {
    shapes: Shapes {
        tiles: FLOAT_TILES,
        chunk: 16,
    },
    kernels: &[
        entry::w4a16_1x1,
        entry::w4a16_4x1,
        entry::w4a16_16x1,
        entry::w4a16_2x4,
        entry::w4a16_1x4,
    ],
    block: 8,
    layout: Layout::Chunked,
    scales_to_f32: entry::scales_to_f32,
};
const W4A16_GROUPED: Family<TileF32Q4Grouped> = Family {
    shapes: Shapes {
        tiles: FLOAT_TILES,
        chunk: 16,
    },
    kernels: &[
        entry::w4a16g_1x1,
        entry::w4a16g_4x1,
        entry::w4a16g_16x1,
        entry::w4a16g_2x4,
        entry::w4a16g_1x4,
    ],
    block: 8,
    layout: Layout::Chunked,
    scales_to_f32: entry::scales_to_f32,
};

pub(crate) mod gemm {
    use super::*;
    qlinear_kernels_core::frame_gemms! {
        w8a8: W8A8, w4a8: W4A8, w4a8_grouped: W4A8_GROUPED,
        w8a16: W8A16, w4a16: W4A16, w4a16_grouped: W4A16_GROUPED,
    }
}

pub(crate) static TABLE: KernelTable = KernelTable {
    name: "avx2",
    dot_i8_i8: entry::dot_i8_i8,
    dot_i8_q4: entry::dot_i8_q4,
    quantize_row_q8: entry::quantize_row_q8,
    group_sums: entry::group_sums,
    gemm_w8a8: gemm::gemm_w8a8,
    gemm_w4a8: gemm::gemm_w4a8,
    gemm_w4a8_grouped: gemm::gemm_w4a8_grouped,
    gemm_w4a8_grouped_panels: Some(q4_panels::gemm_w4a8_grouped_panels),
    gemm_w4a8_panels: Some(q4_panels::gemm_w4a8_panels),
    gemm_w8a16: gemm::gemm_w8a16,
    gemm_w4a16: gemm::gemm_w4a16,
    gemm_w4a16_grouped: gemm::gemm_w4a16_grouped,
    shapes: gemm::SHAPES,
};

/// Sum of the 8 i32 lanes (integer addition: any order is exact).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    hsum_epi32_128(s)
}

/// Sum of the 4 i32 lanes of a 128-bit vector.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn hsum_epi32_128(s: __m128i) -> i32 {
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
    _mm_cvtsi128_si32(s)
}

/// The spec's lane tree `((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))` for an
/// accumulator holding lane ℓ in element ℓ.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn lane_tree(v: __m256) -> f32 {
    let h = _mm256_hadd_ps(v, v); // [l0+l1, l2+l3, ·, · | l4+l5, l6+l7, ·, ·]
    let h = _mm256_hadd_ps(h, h); // [(l0+l1)+(l2+l3), · | (l4+l5)+(l6+l7), ·]
    _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h)))
}

/// [`lane_tree`] of each of at most 8 accumulators, in the lanes of one
/// vector (`lane j = lane_tree(v[j])` bit for bit, lanes past `v.len()`
/// zero): 4 or 8 accumulators share their `hadd`s (one `hadd` adds pairs of
/// two vectors; the last level adds the two 128-bit halves), 9 instructions
/// for 8 trees where one at a time takes 40. Other counts go one at a time.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn lane_trees_vec(v: &[__m256]) -> __m256 {
    match v.len() {
        8 => {
            // [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7], …
            let (ab, cd) = (_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
            let (ef, gh) = (_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
            // [(a0+a1)+(a2+a3), b…, c…, d… | (a4+a5)+(a6+a7), b…, c…, d…]
            let (abcd, efgh) = (_mm256_hadd_ps(ab, cd), _mm256_hadd_ps(ef, gh));
            let lo = _mm256_permute2f128_ps::<0x20>(abcd, efgh);
            let hi = _mm256_permute2f128_ps::<0x31>(abcd, efgh);
            _mm256_add_ps(lo, hi)
        }
        4 => {
            let abcd = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
            let trees = _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps::<1>(abcd));
            _mm256_zextps128_ps256(trees)
        }
        n => {
            assert!(n <= 8, "at most 8 accumulators");
            let mut lanes = [0f32; 8];
            for (l, &a) in lanes.iter_mut().zip(v) {
                *l = lane_tree(a);
            }
            // SAFETY: a 32-byte load of a local [f32; 8].
            unsafe { _mm256_loadu_ps(lanes.as_ptr()) }
        }
    }
}

/// [`lane_trees_vec`] written to `out` (`out.len() == v.len() <= 8`).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn lane_trees(v: &[__m256], out: &mut [f32]) {
    assert_eq!(v.len(), out.len());
    let mut lanes = [0f32; 8];
    // SAFETY: a 32-byte store into a local [f32; 8].
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), lane_trees_vec(v)) };
    out.copy_from_slice(&lanes[..out.len()]);
}
