//! The AVX2 tier's frame tiles done wrong, each in plain Rust on the frame
//! with the tier's own shapes: the grouped W4A8 tiles (corrections, scales,
//! leftover groups, lane order) and the sequential decode tiles (a repeated
//! row); the panel tiles' are in `panel_mutants.rs`. Every mutant must fail the
//! selftest's proof, and the same tile done right must pass.

use qlinear_kernels_core::abi::tile::{Shapes, Tile};
use qlinear_kernels_core::proof::mutants::{evenodd64_dot, first_failure};
use qlinear_kernels_core::proof::Mismatch;
use qlinear_kernels_core::KernelFamily;
use qlinear_kernels_core::{dot_i8_q4_biased, ActivationsQ8, GemmShapes, KernelTable, OutputTile, SCALAR};
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrixQ4};

/// W4A8 grouped with AVX2's 8-row batch tile done wrong: within the tile,
/// each output adds its 8 groups' products as a pairwise tree instead of one
/// by one (what a vectorised reduction does by default). Rows past the tile
/// are right, so only a proof whose random rows reach the tile can fail it.
fn grouped_tile_tree_sum(
    x: &ActivationsQ8<'_>,
    w: &QuantizedMatrixQ4,
    rows: std::ops::Range<usize>,
    y: &mut OutputTile<'_>,
) {
    let Q4Scales::Grouped { group, scales } = w.scales() else {
        panic!("grouped scales")
    };
    let (g, groups) = (*group, w.k() / *group);
    for (j, r) in rows.enumerate() {
        let (wr, sr) = (w.row_packed(r), &scales[r * groups..(r + 1) * groups]);
        for i in 0..x.m {
            let (xr, sums) = (x.row(i), x.row_sums(i));
            let p: Vec<f32> = (0..groups)
                .map(|gi| {
                    let acc =
                        dot_i8_q4_biased(&xr[gi * g..(gi + 1) * g], &wr[gi * g / 2..(gi + 1) * g / 2]) - 8 * sums[gi];
                    acc as f32 * f32::from(sr[gi])
                })
                .collect();
            let mut sum = 0f32;
            let mut gi = 0;
            while i < 8 && g == 32 && gi + 8 <= groups {
                let q = &p[gi..gi + 8];
                sum += ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
                gi += 8;
            }
            for v in &p[gi..] {
                sum += v;
            }
            y.set(i, j, sum * x.scales[i]);
        }
    }
}

/// AVX2's W4A8-grouped tiles: 1 × 1, the 16-row decode tile, 1 × 8, 16 × 8.
const GROUPED_TILES: &[Tile] = &[Tile::ONE, Tile::new(16, 1), Tile::new(1, 8), Tile::new(16, 8)];

#[test]
fn a_tree_sum_in_the_grouped_batch_tile_fails_the_proof() {
    let m = first_failure(
        &KernelTable {
            gemm_w4a8_grouped: grouped_tile_tree_sum,
            // the tile it stands for is declared, so the proof's rows reach it
            shapes: GemmShapes {
                w4a8_grouped: Shapes {
                    tiles: GROUPED_TILES,
                    chunk: 16,
                },
                ..GemmShapes::SINGLE
            },
            ..SCALAR
        },
        KernelFamily::W4A8Grouped,
    )
    .expect("a reassociated sum in the 8-row tile must fail");
    assert!(m.k >= 256, "the tile needs 8 groups of 32: {m}");
}

/// `Σ x·b` (biased, uncorrected) of group `gi` of 32 columns: half of a
/// 64-column block on the even/odd layout.
fn group_dot(x: &[i8], w: &[u8], gi: usize) -> i32 {
    let half = 16 * (gi % 2);
    evenodd64_dot(x, w, gi / 2, half..half + 16)
}

/// The AVX2 W4A8-grouped tiles (1 × 1 and 16 × 8, groups of 32) in plain
/// Rust on the frame's even/odd layout: the whole eights of groups with
/// output (activation row `i`, weight row `q`, group `gi`) corrected by `8 ·
/// sums[ci][cg]` where `(ci, cg) = corr(i, gi)` and scaled by weight row
/// `scale_row(q)`'s scale, then the whole 64-column blocks left, two groups
/// each, in increasing g (or, with `leftover_swapped`, each block's second
/// group before its first). Other group sizes are left to the frame.
#[allow(clippy::too_many_arguments)]
fn grouped32_tile_with(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
    corr: impl Fn(usize, usize) -> (usize, usize),
    scale_row: impl Fn(usize) -> usize,
    leftover_swapped: bool,
) -> usize {
    out.fill(0.0);
    if g != 32 {
        return 0;
    }
    let (wr, groups) = (w.len(), sums[0].len());
    // every group inside the whole blocks (pairs of them: the frame's
    // padded block may hold more groups than the row), the first `eights`
    // eight at a time
    let whole = (x[0].len() / 32).min(groups) / 2 * 2;
    let eights = whole / 8 * 8;
    for (i, xr) in x.iter().enumerate() {
        for (q, wq) in w.iter().enumerate() {
            let term = |gi: usize, (ci, cg): (usize, usize)| {
                (group_dot(xr, wq, gi) - 8 * sums[ci][cg]) as f32 * s[scale_row(q) * groups + gi]
            };
            let mut sum = 0f32;
            for gi in 0..eights {
                sum += term(gi, corr(i, gi));
            }
            for pair in (eights..whole).step_by(2) {
                let order = if leftover_swapped {
                    [pair + 1, pair]
                } else {
                    [pair, pair + 1]
                };
                for gi in order {
                    sum += term(gi, (i, gi));
                }
            }
            out[i * wr + q] = sum;
        }
    }
    whole
}

/// Corrections read from the untransposed block of sums: output row `i`,
/// group `8c + j` corrected by row `j`'s sum of group `8c + i` (the 8 × 8
/// transpose left out). Right on the decode tile, wrong on 8-row tiles.
fn grouped32_untransposed_corrections(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) -> usize {
    let xr = x.len();
    let corr = |i: usize, gi: usize| {
        if xr == 8 {
            (gi % 8, gi / 8 * 8 + i)
        } else {
            (i, gi)
        }
    };
    grouped32_tile_with(x, sums, w, s, g, out, corr, |q| q, false)
}

/// Every weight row of the tile scaled by the first row's group scales (a
/// scale pointer not advanced per weight row): right on 1-row tiles only.
fn grouped32_first_row_scales(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) -> usize {
    grouped32_tile_with(x, sums, w, s, g, out, |i, gi| (i, gi), |_| 0, false)
}

/// The blocks left after the eights (K = 576: 18 groups, the last 2 in one
/// block) with each block's second group added before its first: exact
/// integer sums, but the f32 chain adds the two products in the wrong
/// order. Right wherever the groups come in whole eights.
fn grouped32_leftover_swapped(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) -> usize {
    grouped32_tile_with(x, sums, w, s, g, out, |i, gi| (i, gi), |q| q, true)
}

/// A W4A8-grouped family on the frame whose every tile is `$tile`, over
/// AVX2's grouped tiles (so the proof's rows reach the 16 × 8 tile), in
/// module `$module`.
macro_rules! grouped_w4a8_on_frame {
    ($module:ident, $tile:ident) => {
        mod $module {
            use super::*;
            use qlinear_kernels_core::abi::tile::{Family, Layout, TileGroupedQ4};
            const W4A8_GROUPED: Family<TileGroupedQ4> = Family {
                shapes: Shapes {
                    tiles: GROUPED_TILES,
                    chunk: 16,
                },
                kernels: &[$tile, $tile, $tile, $tile],
                block: 64,
                layout: Layout::EvenOdd,
                scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
            };
            qlinear_kernels_core::frame_gemms! { w4a8_grouped: W4A8_GROUPED; ..GemmShapes::SINGLE }

            /// The first mismatch of the proof of W4A8 grouped on this family.
            pub(crate) fn first_mismatch() -> Option<Mismatch> {
                first_failure(
                    &KernelTable {
                        gemm_w4a8_grouped,
                        shapes: SHAPES,
                        ..SCALAR
                    },
                    KernelFamily::W4A8Grouped,
                )
            }
        }
    };
}

grouped_w4a8_on_frame!(untransposed, grouped32_untransposed_corrections);
grouped_w4a8_on_frame!(first_row_scales, grouped32_first_row_scales);
grouped_w4a8_on_frame!(right_grouped, grouped32_right);
grouped_w4a8_on_frame!(leftover_swapped, grouped32_leftover_swapped);
grouped_w4a8_on_frame!(grouped_seq_repeated, grouped32_seq_last_row_repeated);
grouped_w4a8_on_frame!(grouped_seq_tree, grouped32_seq_tree);

/// The 16-row grouped decode tile with each eight of groups added to its
/// chain as a pairwise tree (what a horizontal reduction of the eight
/// products does) instead of one by one. Right on every other tile.
fn grouped32_seq_tree(x: &[&[i8]], sums: &[&[i32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) -> usize {
    let done = grouped32_right(x, sums, w, s, g, out);
    if g == 32 && x.len() == 1 && w.len() == 16 {
        let groups = sums[0].len();
        for (q, wq) in w.iter().enumerate() {
            let p: Vec<f32> = (0..done)
                .map(|gi| (group_dot(x[0], wq, gi) - 8 * sums[0][gi]) as f32 * s[q * groups + gi])
                .collect();
            let mut sum = 0f32;
            let mut gi = 0;
            while gi + 8 <= done {
                let e = &p[gi..gi + 8];
                sum += ((e[0] + e[1]) + (e[2] + e[3])) + ((e[4] + e[5]) + (e[6] + e[7]));
                gi += 8;
            }
            for v in &p[gi..] {
                sum += v;
            }
            out[q] = sum;
        }
    }
    done
}

#[test]
fn a_tree_sum_in_the_grouped_decode_tile_fails_the_proof() {
    let m = grouped_seq_tree::first_mismatch().expect("eights added as a tree in the 16-row decode tile must fail");
    assert!(m.k >= 256, "the tree needs 8 groups of 32: {m}");
}

#[test]
fn a_repeated_row_in_the_grouped_decode_tile_fails_the_proof() {
    let m =
        grouped_seq_repeated::first_mismatch().expect("the 16-row grouped decode tile's last row repeated must fail");
    assert!(m.k >= 64, "the tile needs a whole block: {m}");
}

#[test]
fn swapped_leftover_groups_in_the_w4a8_grouped_tiles_fail_the_proof() {
    let m = leftover_swapped::first_mismatch().expect("the leftover blocks' groups out of order must fail");
    assert!(
        m.k % 256 >= 64,
        "only a K whose whole blocks leave groups past the eights can fail it: {m}"
    );
}

#[test]
fn untransposed_corrections_in_the_w4a8_grouped_tile_fail_the_proof() {
    let m = untransposed::first_mismatch().expect("corrections from the untransposed sums must fail");
    assert!(m.k >= 256, "the tile needs 8 groups of 32: {m}");
}

#[test]
fn first_row_scales_in_the_w4a8_grouped_tile_fail_the_proof() {
    let m = first_row_scales::first_mismatch().expect("one weight row's scales for the whole tile must fail");
    assert!(m.k >= 64, "the tile needs a whole block of two groups: {m}");
}

/// The harness itself is right: the same plain-Rust tile with the right
/// corrections and scales passes the proof, so the two mutants above fail
/// for their mistake alone.
fn grouped32_right(x: &[&[i8]], sums: &[&[i32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) -> usize {
    grouped32_tile_with(x, sums, w, s, g, out, |i, gi| (i, gi), |q| q, false)
}

/// The 16-row grouped decode tile with its last row computed from the row
/// before it (weights and scales: a loop one short, the last slot filled
/// from the previous pointer). Right on every other tile.
fn grouped32_seq_last_row_repeated(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) -> usize {
    let done = grouped32_right(x, sums, w, s, g, out);
    if x.len() == 1 && w.len() == 16 {
        let mut last = [0f32; 1];
        let groups = sums[0].len();
        grouped32_right(x, sums, &w[14..15], &s[14 * groups..15 * groups], g, &mut last);
        out[15] = last[0];
    }
    done
}

/// The 16-row grouped decode tile as the AVX2 tier computes it at K <=
/// 1536 (the float part of 8 weight rows at a time in the lanes, each eight
/// of groups' scales transposed so that lane r holds row r's) with the
/// scales' transpose left out:
/// output row q (lane r = q mod 8 of its eight rows from b = q − r) scaled,
/// for group e + j of an eight starting at e, by row b + j's scale of group
/// e + r. Right wherever the groups do not come in whole eights, and on
/// every other tile.
fn grouped32_lanes_untransposed_scales(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) -> usize {
    let done = grouped32_right(x, sums, w, s, g, out);
    let (kb, groups) = (x[0].len(), sums[0].len());
    if g == 32 && x.len() == 1 && w.len() == 16 && kb <= 1536 {
        let eights = done / 8 * 8;
        for (q, o) in out.iter_mut().enumerate() {
            let (b, r) = (q / 8 * 8, q % 8);
            let mut sum = 0f32;
            for gi in 0..done {
                let acc = group_dot(x[0], w[q], gi) - 8 * sums[0][gi];
                let scale = if gi < eights {
                    let (e, j) = (gi / 8 * 8, gi % 8);
                    s[(b + j) * groups + e + r]
                } else {
                    s[q * groups + gi]
                };
                sum += acc as f32 * scale;
            }
            *o = sum;
        }
    }
    done
}

grouped_w4a8_on_frame!(lanes_untransposed, grouped32_lanes_untransposed_scales);

#[test]
fn untransposed_scales_in_the_grouped_decode_lanes_fail_the_proof() {
    let m = lanes_untransposed::first_mismatch().expect("the lanes' scales left untransposed must fail");
    assert!(
        m.k >= 256 && m.k <= 1536,
        "only a K with an eight of groups, in the lanes' rows, can fail it: {m}"
    );
}

#[test]
fn the_plain_rust_grouped_tile_passes_the_proof() {
    let m = right_grouped::first_mismatch();
    assert!(m.is_none(), "{m:?}");
}

/// The 16-row decode tiles (W8A8 and W4A8, rows one after another) done
/// wrong: the last row of the tile is dotted with the row before it (a loop
/// bound one short, the last slot filled from the previous pointer). Right
/// on 1- and 4-row tiles, so only a proof whose rows reach the 16-row tile
/// can fail it.
fn w8a8_seq_last_row_repeated(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    for (q, a) in acc.iter_mut().enumerate() {
        let r = if w.len() == 16 && q == 15 { 14 } else { q };
        *a = (SCALAR.dot_i8_i8)(x[0], w[r]);
    }
}

/// As [`w8a8_seq_last_row_repeated`], for W4A8 on the even/odd layout.
fn w4a8_seq_last_row_repeated(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    w4a8_seq_rows(x, w, acc, true)
}

/// The same tile done right (the harness check).
fn w4a8_seq_right(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    w4a8_seq_rows(x, w, acc, false)
}

fn w4a8_seq_rows(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32], repeat_last: bool) {
    for (q, a) in acc.iter_mut().enumerate() {
        let r = if repeat_last && w.len() == 16 && q == 15 { 14 } else { q };
        *a = (0..x[0].len() / 64)
            .map(|blk| evenodd64_dot(x[0], w[r], blk, 0..32))
            .sum();
    }
}

const DECODE_TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(16, 1)];

mod seq_w8a8 {
    use super::*;
    use qlinear_kernels_core::abi::tile::{Family, Layout, TileI8I8};
    pub(crate) const W8A8: Family<TileI8I8> = Family {
        shapes: Shapes {
            tiles: DECODE_TILES,
            chunk: 16,
        },
        kernels: &[w8a8_seq_last_row_repeated as TileI8I8; 3],
        block: 32,
        layout: Layout::Natural,
        scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
    };
    qlinear_kernels_core::frame_gemms! { w8a8: W8A8; ..GemmShapes::SINGLE }
}

qlinear_kernels_core::w4a8_on_frame! {
    tiles: DECODE_TILES,
    chunk: 64,
    block: 64,
    layout: EvenOdd;
    seq_w4a8 => &[w4a8_seq_last_row_repeated as TileI8Q4; 3],
    seq_w4a8_right => &[w4a8_seq_right as TileI8Q4; 3],
}

#[test]
fn a_repeated_row_in_the_sequential_decode_tiles_fails_the_proof() {
    first_failure(
        &KernelTable {
            gemm_w8a8: seq_w8a8::gemm_w8a8,
            shapes: seq_w8a8::SHAPES,
            ..SCALAR
        },
        KernelFamily::W8A8,
    )
    .expect("the W8A8 16-row tile with its last row repeated must fail");
    first_failure(&seq_w4a8::TABLE, KernelFamily::W4A8)
        .expect("the W4A8 16-row tile with its last row repeated must fail");
    // and the harness is right: the same plain-Rust tile without the slip passes
    let right = first_failure(&seq_w4a8_right::TABLE, KernelFamily::W4A8);
    assert!(right.is_none(), "{right:?}");
}
