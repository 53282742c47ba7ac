//! The NEON I8MM tier (FEAT_I8MM): the batch families W8A8 and W4A8 on
//! `smmla`, which multiplies a 2 × 8 int8 matrix by an 8 × 2 one into a
//! 2 × 2 block of i32 lanes: 32 exact products per instruction, twice
//! `sdot`'s 16. Activations come from the frame in row pairs interleaved per
//! 8 columns (`Layout::Pairs8`; W4A8's with each 16 columns' even columns
//! first, `Layout::Pairs8EvenOdd`), so each 16-byte load is an operand;
//! weight rows are paired in registers (one 64-bit zip per 16 columns and
//! pair; for W4A8 the zipped packed bytes' mask and shift are then the even
//! and odd columns' operands).
//!
//! Everything else (the dot entries, grouped W4A8, the float families, the
//! quantizer) is the SDOT tier's; the plan picks per family and M which
//! tier runs (at M = 1 half of each `smmla` is wasted, so SDOT usually wins).
#![cfg(target_arch = "aarch64")]

use qlinear_kernels_core::abi::tile::{Family, Layout, Shapes, Tile, TileI8I8, TileI8Q4};
use qlinear_kernels_core::KernelTable;

mod int;

// the plausible mistakes of this tier, which the proof must fail
#[cfg(test)]
mod mutants;

/// SAFETY (for every entry): reachable only through `TABLE`, which
/// `crate::i8mm_table` returns only after detecting ASIMD, FEAT_DotProd and
/// FEAT_I8MM; the kernels assert what they rely on.
mod entry {
    qlinear_kernels_core::safe_entries! {
        w8a8_1x1 => super::int::tile_w8a8::<1, 1>: tile_i8,
        w8a8_4x1 => super::int::tile_w8a8::<2, 1>: tile_i8,
        w8a8_16x1 => super::int::tile_w8a8::<8, 1>: tile_i8,
        w8a8_4x8 => super::int::tile_w8a8::<2, 4>: tile_i8,
        w8a8_1x8 => super::int::tile_w8a8::<1, 4>: tile_i8,
        w4a8_1x1 => super::int::tile_w4a8::<1, 1>: tile_q4,
        w4a8_4x1 => super::int::tile_w4a8::<2, 1>: tile_q4,
        w4a8_4x8 => super::int::tile_w4a8::<2, 4>: tile_q4,
        w4a8_1x8 => super::int::tile_w4a8::<1, 4>: tile_q4,
    }
}

/// 4 weight rows × 8 activation rows (2 × 4 `smmla` blocks, 8 accumulators),
/// with the narrower tiles for leftovers.
const TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(4, 8), Tile::new(1, 8)];

/// W8A8's kernels in its tiles' order, with `tile16` its 16 × 1 decode
/// tile (the tier's, or a mutant's).
pub(crate) const fn w8a8_kernels(tile16: TileI8I8) -> [TileI8I8; 5] {
    [
        entry::w8a8_1x1,
        entry::w8a8_4x1,
        tile16,
        entry::w8a8_4x8,
        entry::w8a8_1x8,
    ]
}

/// W8A8 also decodes in 16 × 1 tiles (8 row pairs), so that the frame's
/// work a decode tile is paid per 16 weight rows.
pub(crate) const W8A8: Family<TileI8I8> = Family {
    shapes: Shapes {
        tiles: &[
            Tile::ONE,
            Tile::new(4, 1),
            Tile::new(16, 1),
            Tile::new(4, 8),
            Tile::new(1, 8),
        ],
        chunk: 64,
    },
    kernels: &w8a8_kernels(entry::w8a8_16x1),
    block: 16,
    layout: Layout::Pairs8,
    scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
};
const W4A8: Family<TileI8Q4> = Family {
    shapes: Shapes {
        tiles: TILES,
        chunk: 64,
    },
    kernels: &[entry::w4a8_1x1, entry::w4a8_4x1, entry::w4a8_4x8, entry::w4a8_1x8],
    block: 32,
    layout: Layout::Pairs8EvenOdd,
    scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
};

mod gemm {
    use super::{W4A8, W8A8};
    qlinear_kernels_core::frame_gemms! { w8a8: W8A8, w4a8: W4A8; ..crate::sdot::TABLE.shapes }
}

pub(crate) static TABLE: KernelTable = KernelTable {
    name: "neon-i8mm",
    gemm_w8a8: gemm::gemm_w8a8,
    gemm_w4a8: gemm::gemm_w4a8,
    shapes: gemm::SHAPES,
    ..crate::sdot::TABLE
};
