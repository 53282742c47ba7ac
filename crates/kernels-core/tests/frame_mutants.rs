//! Portable tiers on the kernel frame, built from plain-Rust micro-kernels
//! with unusual tiles: the correct one must pass the selftest's proof, and
//! each plausible micro-kernel mistake must fail it. Since the proof derives
//! its shapes from the declared tiles, these also show that a tile is
//! exercised — its leftovers and chunk boundaries too — as soon as it is
//! registered.

use qlinear_kernels_core::abi::tile::{Family, Layout, Shapes, Tile, TileF32Q8, TileGroupedQ4, TileI8I8, TileI8Q4};
use qlinear_kernels_core::proof::mutants::first_failure;
use qlinear_kernels_core::proof::{default_census, prove_kernel_table};
use qlinear_kernels_core::KernelFamily;
use qlinear_kernels_core::{dot_i8_i8, dot_i8_q4_biased, lane_tree, GemmShapes, KernelTable, SCALAR};

/// 3 weight rows × 5 activation rows, 6 × 1 for M = 1, in chunks of 7 rows.
const TILES: &[Tile] = &[Tile::ONE, Tile::new(6, 1), Tile::new(3, 5), Tile::new(1, 5)];
const TILED: Shapes = Shapes { tiles: TILES, chunk: 7 };

fn tile_i8(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    for (i, xr) in x.iter().enumerate() {
        for (q, wr) in w.iter().enumerate() {
            acc[i * w.len() + q] = dot_i8_i8(xr, wr);
        }
    }
}

/// Writes the tile's sums transposed (`acc[q · xr + i]`): right on square
/// and single-row tiles, wrong on 3 × 5.
fn tile_i8_transposed(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    for (i, xr) in x.iter().enumerate() {
        for (q, wr) in w.iter().enumerate() {
            acc[q * x.len() + i] = dot_i8_i8(xr, wr);
        }
    }
}

/// Drops the last activation row of a 5-row tile (a loop bound off by one):
/// only the leftover-weight-row tile 1 × 5 is wrong.
fn tile_i8_short(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    acc.fill(0);
    for (i, xr) in x.iter().enumerate().take(x.len().saturating_sub(1).max(1)) {
        for (q, wr) in w.iter().enumerate() {
            acc[i * w.len() + q] = dot_i8_i8(xr, wr);
        }
    }
}

fn tile_q4(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    for (i, xr) in x.iter().enumerate() {
        for (q, wr) in w.iter().enumerate() {
            acc[i * w.len() + q] = dot_i8_q4_biased(xr, wr);
        }
    }
}

/// Groups of a multiple of 8 inside the whole blocks, summed in increasing g.
fn grouped(x: &[&[i8]], sums: &[&[i32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) -> usize {
    grouped_with(x, sums, w, s, g, out, false)
}

/// The same, but each pair of groups is added as `(a + b)` before joining
/// the running sum: a tree, not the spec's order.
fn grouped_paired(x: &[&[i8]], sums: &[&[i32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) -> usize {
    grouped_with(x, sums, w, s, g, out, true)
}

fn grouped_with(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
    paired: bool,
) -> usize {
    out.fill(0.0);
    if !g.is_multiple_of(8) {
        return 0;
    }
    let groups = x[0].len() / g;
    for (i, xr) in x.iter().enumerate() {
        for (q, wr) in w.iter().enumerate() {
            let term = |gi: usize| {
                let acc =
                    dot_i8_q4_biased(&xr[gi * g..(gi + 1) * g], &wr[gi * g / 2..(gi + 1) * g / 2]) - 8 * sums[i][gi];
                acc as f32 * s[q * (s.len() / w.len()) + gi]
            };
            let mut sum = 0f32;
            let mut gi = 0;
            while gi < groups {
                if paired && gi + 1 < groups {
                    sum += term(gi) + term(gi + 1);
                    gi += 2;
                } else {
                    sum += term(gi);
                    gi += 1;
                }
            }
            out[i * w.len() + q] = sum;
        }
    }
    groups
}

fn w8a16(x: &[&[f32]], w: &[&[i8]], k: usize, out: &mut [f32]) {
    w8a16_with(x, w, k, out, false)
}

/// Fuses the multiply and add (`mul_add`), which the spec forbids.
fn w8a16_fused(x: &[&[f32]], w: &[&[i8]], k: usize, out: &mut [f32]) {
    w8a16_with(x, w, k, out, true)
}

fn w8a16_with(x: &[&[f32]], w: &[&[i8]], k: usize, out: &mut [f32], fused: bool) {
    for (i, xr) in x.iter().enumerate() {
        for (q, wr) in w.iter().enumerate() {
            let mut l = [0f32; 8];
            for c in 0..k {
                let code = f32::from(wr[c]);
                l[c % 8] = if fused {
                    xr[c].mul_add(code, l[c % 8])
                } else {
                    l[c % 8] + xr[c] * code
                };
            }
            out[i * w.len() + q] = lane_tree(l);
        }
    }
}

macro_rules! table {
    ($name:ident: w8a8 $w8a8:expr, w4a8_grouped $grouped:expr, w8a16 $w8a16:expr) => {
        mod $name {
            use super::*;
            pub(crate) const W8A8: Family<TileI8I8> = Family {
                shapes: TILED,
                kernels: &{
                    const K: [TileI8I8; 4] = $w8a8;
                    K
                },
                block: 16,
                layout: Layout::Natural,
                scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
            };
            pub(crate) const W4A8: Family<TileI8Q4> = Family {
                shapes: TILED,
                kernels: &{
                    const K: [TileI8Q4; 4] = [tile_q4; 4];
                    K
                },
                block: 32,
                layout: Layout::Natural,
                scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
            };
            pub(crate) const W4A8_GROUPED: Family<TileGroupedQ4> = Family {
                shapes: TILED,
                kernels: &{
                    const K: [TileGroupedQ4; 4] = $grouped;
                    K
                },
                block: 32,
                layout: Layout::Natural,
                scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
            };
            pub(crate) const W8A16: Family<TileF32Q8> = Family {
                shapes: TILED,
                kernels: &{
                    const K: [TileF32Q8; 4] = $w8a16;
                    K
                },
                block: 8,
                layout: Layout::Chunked,
                scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
            };
            qlinear_kernels_core::frame_gemms! {
                w8a8: W8A8, w4a8: W4A8, w4a8_grouped: W4A8_GROUPED, w8a16: W8A16; ..GemmShapes::SINGLE
            }
            pub(crate) static TABLE: KernelTable = KernelTable {
                name: stringify!($name),
                gemm_w8a8,
                gemm_w4a8,
                gemm_w4a8_grouped,
                gemm_w8a16,
                shapes: SHAPES,
                ..SCALAR
            };
        }
    };
}

table!(correct: w8a8 [tile_i8; 4], w4a8_grouped [grouped; 4], w8a16 [w8a16; 4]);
table!(transposed: w8a8 [tile_i8, tile_i8, tile_i8_transposed, tile_i8], w4a8_grouped [grouped; 4], w8a16 [w8a16; 4]);
table!(short_leftover: w8a8 [tile_i8, tile_i8, tile_i8, tile_i8_short], w4a8_grouped [grouped; 4], w8a16 [w8a16; 4]);
table!(paired_groups: w8a8 [tile_i8; 4], w4a8_grouped [grouped, grouped, grouped_paired, grouped], w8a16 [w8a16; 4]);
table!(fused: w8a8 [tile_i8; 4], w4a8_grouped [grouped; 4], w8a16 [w8a16, w8a16_fused, w8a16, w8a16]);

#[test]
fn the_declared_tiles_are_valid() {
    TILED.validate().unwrap();
}

#[test]
fn a_correct_tier_on_the_frame_passes_with_any_tiles() {
    let proofs = prove_kernel_table(&correct::TABLE, &default_census());
    assert!(proofs.iter().all(|p| p.mismatch.is_none()), "{proofs:?}");
}

#[test]
fn a_transposed_batch_tile_fails_the_proof() {
    assert!(first_failure(&transposed::TABLE, KernelFamily::W8A8).is_some());
}

#[test]
fn a_wrong_leftover_tile_fails_the_proof() {
    assert!(first_failure(&short_leftover::TABLE, KernelFamily::W8A8).is_some());
}

#[test]
fn groups_added_in_pairs_fail_the_proof() {
    assert!(first_failure(&paired_groups::TABLE, KernelFamily::W4A8Grouped).is_some());
}

#[test]
fn a_fused_multiply_add_in_the_decode_tile_fails_the_proof() {
    assert!(first_failure(&fused::TABLE, KernelFamily::W8A16).is_some());
}

/// A wide tile (12 activation rows, more than any fixed proof shape used to
/// have) registered with a transposed-output mistake: the proof reaches it
/// because its shapes come from the declaration.
mod wide {
    use super::*;
    const WIDE: Shapes = Shapes {
        tiles: &[Tile::ONE, Tile::new(2, 12), Tile::new(1, 12)],
        chunk: 0,
    };
    const W8A8: Family<TileI8I8> = Family {
        shapes: WIDE,
        kernels: &{
            const K: [TileI8I8; 3] = [tile_i8, tile_i8_transposed, tile_i8];
            K
        },
        block: 16,
        layout: Layout::Natural,
        scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
    };
    qlinear_kernels_core::frame_gemms! { w8a8: W8A8; ..GemmShapes::SINGLE }
    pub(crate) static TABLE: KernelTable = KernelTable {
        name: "wide",
        gemm_w8a8,
        shapes: SHAPES,
        ..SCALAR
    };
}

#[test]
fn a_wrong_wide_tile_is_reached_and_fails_the_proof() {
    assert!(first_failure(&wide::TABLE, KernelFamily::W8A8).is_some());
}
