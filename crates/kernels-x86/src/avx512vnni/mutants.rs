//! The AVX-512 VNNI tier's micro-kernels done wrong, each in plain Rust on
//! the frame with the tier's own tiles, block and layout: every mutant must
//! fail the selftest's proof, and the same tile done right must pass (so a
//! failure is the mistake's alone). Plain Rust, so these run on every x86
//! CPU and on every other architecture too: what they prove is that the
//! proof's rows and K reach each tile of the real tier's shapes.

use qlinear_kernels_core::abi::tile::{Family, Layout, Shapes, Tile};
use qlinear_kernels_core::proof::mutants::first_failure;
use qlinear_kernels_core::KernelFamily;
use qlinear_kernels_core::{GemmShapes, KernelTable, SCALAR};

/// `mod $module` with `TABLE`: the scalar tier with its `$family` GEMM on
/// the frame, every one of the `$n` tiles of `$tiles` running `$tile`, over
/// the tier's chunk, block and layout (`$field` the family's `GemmShapes`
/// field, `$gemm` its `KernelTable` entry, `$Tile` its micro-kernel type).
macro_rules! table_on_frame {
    (
        $module:ident: $field:ident, $gemm:ident, $Tile:ident = [$tile:expr; $n:literal],
        $tiles:expr, chunk $chunk:literal, block $block:literal, $layout:ident
    ) => {
        mod $module {
            use super::*;
            use qlinear_kernels_core::abi::tile::$Tile;
            const FAMILY: Family<$Tile> = Family {
                shapes: Shapes {
                    tiles: $tiles,
                    chunk: $chunk,
                },
                kernels: &[$tile as $Tile; $n],
                block: $block,
                layout: Layout::$layout,
                scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
            };
            qlinear_kernels_core::frame_gemms! { $field: FAMILY; ..GemmShapes::SINGLE }
            pub(crate) static TABLE: KernelTable = KernelTable {
                $gemm,
                shapes: SHAPES,
                ..SCALAR
            };
        }
    };
}

/// The tier's tiles: decode 16 × 1, batches 16 × 4 (W8A8), and for W4A8
/// 4 × 4 and 16 × 4 (four 4 × 4 tiles in turn).
const W8A8_TILES: &[Tile] = &[Tile::ONE, Tile::new(16, 1), Tile::new(16, 4), Tile::new(1, 4)];
const W4A8_TILES: &[Tile] = &[
    Tile::ONE,
    Tile::new(16, 1),
    Tile::new(4, 4),
    Tile::new(16, 4),
    Tile::new(1, 4),
];
/// W4A16's: 4 weight rows per register, × 1 or × 4 activation rows.
const W4A16_TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(4, 4), Tile::new(1, 4)];
/// Grouped adds 8 × 16 (and 1 × 16) on `Layout::EvenOddQuads16`.
const GROUPED_TILES: &[Tile] = &[
    Tile::ONE,
    Tile::new(16, 1),
    Tile::new(4, 4),
    Tile::new(1, 4),
    Tile::new(8, 16),
    Tile::new(1, 16),
];

/// `Σ x·w` of one pair of rows, as i32.
fn dot(x: &[i8], w: &[i8]) -> i32 {
    x.iter().zip(w).map(|(&a, &b)| i32::from(a) * i32::from(b)).sum()
}

fn sum(x: &[i8]) -> i32 {
    x.iter().map(|&v| i32::from(v)).sum()
}

/// The W8A8 tiles in plain Rust, with the two slips a `vpdpbusd` kernel can
/// make: in the 16 × 1 decode tile the sign taken from the weight instead of
/// the activation (`Σ |x|·|w|`), and in the 16 × 4 batch tile every row's
/// `Σ (w + 128)·x` corrected by the first activation row's `128·Σx` (a
/// hoisted load).
fn w8a8_with(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32], sign_from_w: bool, hoisted_bias: bool) {
    let wr = w.len();
    for (i, xi) in x.iter().enumerate() {
        for (q, wq) in w.iter().enumerate() {
            acc[i * wr + q] = if sign_from_w && wr == 16 && x.len() == 1 {
                xi.iter()
                    .zip(*wq)
                    .map(|(&a, &b)| i32::from(a).abs() * i32::from(b).abs())
                    .sum()
            } else if hoisted_bias && wr == 16 && x.len() == 4 {
                dot(xi, wq) + 128 * sum(xi) - 128 * sum(x[0])
            } else {
                dot(xi, wq)
            };
        }
    }
}

fn w8a8_sign_from_w(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    w8a8_with(x, w, acc, true, false)
}
fn w8a8_hoisted_bias(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    w8a8_with(x, w, acc, false, true)
}
fn w8a8_right(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    w8a8_with(x, w, acc, false, false)
}

/// The 16 × 1 decode tiles reduce their 16 rows' lanes together
/// (`hsum_rows`, a transposing tree): the tree's slip is a pair of quads
/// of rows in each other's place (rows 4..8 written where 0..4 go).
fn quads_swapped<T: Copy>(acc: &mut [T]) {
    if acc.len() == 16 {
        for q in [0, 8] {
            for j in 0..4 {
                acc.swap(q + j, q + 4 + j);
            }
        }
    }
}
fn w8a8_quads_swapped(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    w8a8_with(x, w, acc, false, false);
    if x.len() == 1 {
        quads_swapped(acc);
    }
}

/// The 16 × 1 decode tile's loop over whole 64-column blocks started one
/// block late (the slip of a loop written `BLOCK..len` for `0..len`).
fn w8a8_first_block_skipped(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    w8a8_with(x, w, acc, false, false);
    if x.len() == 1 && w.len() == 16 {
        for (a, wq) in acc.iter_mut().zip(w) {
            let n = 64.min(wq.len());
            *a -= dot(&x[0][..n], &wq[..n]);
        }
    }
}

table_on_frame!(first_block_skipped: w8a8, gemm_w8a8, TileI8I8 = [w8a8_first_block_skipped; 4], W8A8_TILES, chunk 16, block 64, Aligned);
table_on_frame!(quads_swapped_w8a8: w8a8, gemm_w8a8, TileI8I8 = [w8a8_quads_swapped; 4], W8A8_TILES, chunk 16, block 64, Aligned);
table_on_frame!(sign_from_w: w8a8, gemm_w8a8, TileI8I8 = [w8a8_sign_from_w; 4], W8A8_TILES, chunk 16, block 64, Aligned);
table_on_frame!(hoisted_bias: w8a8, gemm_w8a8, TileI8I8 = [w8a8_hoisted_bias; 4], W8A8_TILES, chunk 16, block 64, Aligned);
table_on_frame!(w8a8_right_tiles: w8a8, gemm_w8a8, TileI8I8 = [w8a8_right; 4], W8A8_TILES, chunk 16, block 64, Aligned);

#[test]
fn the_w8a8_tiles_fail_the_proof_on_their_slips() {
    first_failure(&sign_from_w::TABLE, KernelFamily::W8A8).expect("the sign from the weight must fail");
    first_failure(&hoisted_bias::TABLE, KernelFamily::W8A8).expect("one row's 128·Σx for the tile must fail");
    first_failure(&quads_swapped_w8a8::TABLE, KernelFamily::W8A8)
        .expect("rows out of order in the decode reduction must fail");
    first_failure(&first_block_skipped::TABLE, KernelFamily::W8A8)
        .expect("a decode loop starting a block late must fail");
    let right = first_failure(&w8a8_right_tiles::TABLE, KernelFamily::W8A8);
    assert!(right.is_none(), "{right:?}");
}

/// `Σ x·b` (biased, uncorrected) of the 32-column group `gi` of one packed
/// row against one activation row in the tier's even/odd layout (blocks of
/// 128: 64 even columns, then 64 odd; byte j of the block's 64 packed bytes
/// holds columns 2j and 2j + 1).
fn group_dot(x: &[i8], w: &[u8], gi: usize) -> i32 {
    let (blk, t) = (gi / 4, gi % 4);
    (0..16)
        .map(|j| {
            let b = w[64 * blk + 16 * t + j];
            i32::from(b & 0x0F) * i32::from(x[128 * blk + 16 * t + j])
                + i32::from(b >> 4) * i32::from(x[128 * blk + 64 + 16 * t + j])
        })
        .sum()
}

/// W4A8 per channel in the tier's layout, with three slips: the 16 × 1
/// tile's nibble halves swapped (low nibbles against the odd columns), the
/// 4 × 4 tile writing its accumulators transposed (`acc[q · xr + i]`), and
/// the 16 × 4 tile storing each of its four 4 × 4 tiles as that tile lays
/// them out (`quads_as_4x4`: a block of 16 at `16·(q / 4)`).
fn w4a8_with(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32], halves_swapped: bool, transposed: bool, quads_as_4x4: bool) {
    let (wr, xr) = (w.len(), x.len());
    for (i, xi) in x.iter().enumerate() {
        for (q, wq) in w.iter().enumerate() {
            let groups = xi.len() / 32;
            let v = if halves_swapped && wr == 16 {
                (0..groups)
                    .map(|gi| {
                        let (blk, t) = (gi / 4, gi % 4);
                        (0..16)
                            .map(|j| {
                                let b = wq[64 * blk + 16 * t + j];
                                i32::from(b >> 4) * i32::from(xi[128 * blk + 16 * t + j])
                                    + i32::from(b & 0x0F) * i32::from(xi[128 * blk + 64 + 16 * t + j])
                            })
                            .sum::<i32>()
                    })
                    .sum()
            } else {
                (0..groups).map(|gi| group_dot(xi, wq, gi)).sum()
            };
            let at = if transposed && wr == 4 && xr == 4 {
                q * xr + i
            } else if quads_as_4x4 && wr == 16 && xr == 4 {
                16 * (q / 4) + 4 * i + q % 4
            } else {
                i * wr + q
            };
            acc[at] = v;
        }
    }
}

fn w4a8_halves_swapped(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    w4a8_with(x, w, acc, true, false, false)
}
fn w4a8_transposed(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    w4a8_with(x, w, acc, false, true, false)
}
fn w4a8_quads_as_4x4(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    w4a8_with(x, w, acc, false, false, true)
}
fn w4a8_right(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    w4a8_with(x, w, acc, false, false, false)
}
fn w4a8_quads_swapped(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    w4a8_with(x, w, acc, false, false, false);
    if x.len() == 1 {
        quads_swapped(acc);
    }
}

qlinear_kernels_core::w4a8_on_frame! {
    tiles: W4A8_TILES,
    chunk: 64,
    block: 128,
    layout: EvenOdd;
    halves_swapped => &[w4a8_halves_swapped as TileI8Q4; 5],
    transposed => &[w4a8_transposed as TileI8Q4; 5],
    quads_swapped_w4a8 => &[w4a8_quads_swapped as TileI8Q4; 5],
    quads_as_4x4 => &[w4a8_quads_as_4x4 as TileI8Q4; 5],
    w4a8_right_tiles => &[w4a8_right as TileI8Q4; 5],
}

#[test]
fn the_w4a8_tiles_fail_the_proof_on_their_slips() {
    first_failure(&halves_swapped::TABLE, KernelFamily::W4A8).expect("swapped nibble halves must fail");
    first_failure(&transposed::TABLE, KernelFamily::W4A8).expect("transposed accumulators must fail");
    first_failure(&quads_swapped_w4a8::TABLE, KernelFamily::W4A8)
        .expect("rows out of order in the decode reduction must fail");
    first_failure(&quads_as_4x4::TABLE, KernelFamily::W4A8)
        .expect("the 16 x 4 tile's quads stored as 4 x 4 blocks must fail");
    let right = first_failure(&w4a8_right_tiles::TABLE, KernelFamily::W4A8);
    assert!(right.is_none(), "{right:?}");
}

/// The grouped tiles' slips.
#[derive(Clone, Copy, PartialEq)]
enum Slip {
    None,
    /// 16 × 1: the group sums used in the transpose-and-add tree's order
    /// (group `4j + t` at `4t + j` of each 16) without the final permute.
    Unpermuted,
    /// 16 × 1: each 16 groups' products added as a pairwise tree, then to
    /// the chain (what a vector reduction does by default).
    Tree,
    /// 4 × 4: the 4 rows' scales put in the lanes in reverse (`_mm_set_ps`
    /// for `_mm_setr_ps`).
    ScalesReversed,
    /// 8 × 16: `Σ (x + 128)·(b − 8)` corrected by `128·Σb` alone (the
    /// codes' `−8` left out of the bias), `1024·g` off.
    BiasWithoutEight,
}

/// Activation row `l` (even/odd) of an interleaved 16-row block of
/// `Layout::EvenOddQuads16`: byte `j` at `64·(j / 4) + 4·l + j % 4`, less
/// the 128 the layout adds.
fn row_of_block(block: &[i8], l: usize) -> Vec<i8> {
    (0..block.len() / 16)
        .map(|j| block[64 * (j / 4) + 4 * l + j % 4] ^ i8::MIN)
        .collect()
}

/// W4A8 grouped (groups of 32) in the tier's layout with `slip`; other group
/// sizes are left to the frame.
fn grouped_with(x: &[&[i8]], sums: &[&[i32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32], slip: Slip) -> usize {
    out.fill(0.0);
    if g != 32 {
        return 0;
    }
    let (wr, xr, groups) = (w.len(), x.len(), sums[0].len());
    // a 16-row tile receives the interleaved block as every view
    let rows: Vec<Vec<i8>> = if xr == 16 {
        (0..16).map(|l| row_of_block(x[0], l)).collect()
    } else {
        x.iter().map(|r| r.to_vec()).collect()
    };
    let done = (rows[0].len() / 32).min(groups);
    for (i, xi) in rows.iter().enumerate() {
        for (q, wq) in w.iter().enumerate() {
            let decode = wr == 16 && xr == 1;
            let scale_row = if slip == Slip::ScalesReversed && wr == 4 && xr == 4 {
                3 - q
            } else {
                q
            };
            let p: Vec<f32> = (0..done)
                .map(|gi| {
                    let (base, at) = (gi / 16 * 16, gi % 16);
                    let src = base + 4 * (at % 4) + at / 4;
                    let src = if slip == Slip::Unpermuted && decode && src < done {
                        src
                    } else {
                        gi
                    };
                    let off = if slip == Slip::BiasWithoutEight && xr == 16 {
                        1024 * 32
                    } else {
                        0
                    };
                    (group_dot(xi, wq, src) - 8 * sums[i][gi] - off) as f32 * s[scale_row * groups + gi]
                })
                .collect();
            let mut total = 0f32;
            for chunk in p.chunks(16) {
                if slip == Slip::Tree && decode && chunk.len() == 16 {
                    let pairs: Vec<f32> = chunk.chunks(2).map(|c| c[0] + c[1]).collect();
                    let quads: Vec<f32> = pairs.chunks(2).map(|c| c[0] + c[1]).collect();
                    total += (quads[0] + quads[1]) + (quads[2] + quads[3]);
                } else {
                    for v in chunk {
                        total += v;
                    }
                }
            }
            out[i * wr + q] = total;
        }
    }
    done
}

/// [`grouped_with`] with each slip, as a micro-kernel.
macro_rules! grouped_tiles {
    ($($name:ident: $slip:expr),+ $(,)?) => {
        $(
            fn $name(x: &[&[i8]], sums: &[&[i32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) -> usize {
                grouped_with(x, sums, w, s, g, out, $slip)
            }
        )+
    };
}

grouped_tiles! {
    grouped_unpermuted: Slip::Unpermuted,
    grouped_tree: Slip::Tree,
    grouped_scales_reversed: Slip::ScalesReversed,
    grouped_bias_without_eight: Slip::BiasWithoutEight,
    grouped_right: Slip::None,
}

table_on_frame!(unpermuted: w4a8_grouped, gemm_w4a8_grouped, TileGroupedQ4 = [grouped_unpermuted; 6], GROUPED_TILES, chunk 16, block 128, EvenOddQuads16);
table_on_frame!(tree: w4a8_grouped, gemm_w4a8_grouped, TileGroupedQ4 = [grouped_tree; 6], GROUPED_TILES, chunk 16, block 128, EvenOddQuads16);
table_on_frame!(scales_reversed: w4a8_grouped, gemm_w4a8_grouped, TileGroupedQ4 = [grouped_scales_reversed; 6], GROUPED_TILES, chunk 16, block 128, EvenOddQuads16);
table_on_frame!(bias_without_eight: w4a8_grouped, gemm_w4a8_grouped, TileGroupedQ4 = [grouped_bias_without_eight; 6], GROUPED_TILES, chunk 16, block 128, EvenOddQuads16);
table_on_frame!(grouped_right_tiles: w4a8_grouped, gemm_w4a8_grouped, TileGroupedQ4 = [grouped_right; 6], GROUPED_TILES, chunk 16, block 128, EvenOddQuads16);

#[test]
fn the_w4a8_grouped_tiles_fail_the_proof_on_their_slips() {
    for (table, why) in [
        (&unpermuted::TABLE, "group sums in the tree's order must fail"),
        (&tree::TABLE, "a tree over 16 groups' products must fail"),
        (&scales_reversed::TABLE, "the 4 rows' scales in reverse must fail"),
        (&bias_without_eight::TABLE, "the bias without the codes' −8 must fail"),
    ] {
        first_failure(table, KernelFamily::W4A8Grouped).expect(why);
    }
    let right = first_failure(&grouped_right_tiles::TABLE, KernelFamily::W4A8Grouped);
    assert!(right.is_none(), "{right:?}");
}

/// W4A16 per channel in plain Rust on the tier's tiles and `ChunkedQ4`
/// layout (each chunk's columns stored `[0, 2, 4, 6, 1, 3, 5, 7]`): the
/// spec's 8 lanes, lane `j` of each chunk its column `j`, then the lane
/// tree. The slip: in the 4-row tiles the odd lanes' codes looked up from
/// the low nibble too (the `vpermps` index not shifted), `code(col − 1)`.
fn w4a16_with(x: &[&[f32]], w: &[&[u8]], k: usize, out: &mut [f32], odd_from_low: bool) {
    const POS: [usize; 8] = [0, 4, 1, 5, 2, 6, 3, 7];
    let wr = w.len();
    for (i, xi) in x.iter().enumerate() {
        for (q, wq) in w.iter().enumerate() {
            let mut lanes = [0f32; 8];
            for col in 0..k {
                let (c, j) = (col / 8, col % 8);
                let from = if odd_from_low && wr == 4 && col % 2 == 1 {
                    col - 1
                } else {
                    col
                };
                let nibble = (wq[from / 2] >> (4 * (from % 2))) & 0x0F;
                lanes[j] += xi[c * 8 + POS[j]] * (f32::from(nibble) - 8.0);
            }
            out[i * wr + q] = qlinear_kernels_core::lane_tree(lanes);
        }
    }
}

fn w4a16_odd_from_low(x: &[&[f32]], w: &[&[u8]], k: usize, out: &mut [f32]) {
    w4a16_with(x, w, k, out, true)
}
fn w4a16_right(x: &[&[f32]], w: &[&[u8]], k: usize, out: &mut [f32]) {
    w4a16_with(x, w, k, out, false)
}

table_on_frame!(odd_from_low: w4a16, gemm_w4a16, TileF32Q4 = [w4a16_odd_from_low; 4], W4A16_TILES, chunk 4, block 8, ChunkedQ4);
table_on_frame!(w4a16_right_tiles: w4a16, gemm_w4a16, TileF32Q4 = [w4a16_right; 4], W4A16_TILES, chunk 4, block 8, ChunkedQ4);

#[test]
fn the_w4a16_tiles_fail_the_proof_on_their_slip() {
    first_failure(&odd_from_low::TABLE, KernelFamily::W4A16).expect("odd lanes from the low nibble must fail");
    let right = first_failure(&w4a16_right_tiles::TABLE, KernelFamily::W4A16);
    assert!(right.is_none(), "{right:?}");
}

/// W4A16 grouped in plain Rust on the tier's tiles and layout (chunks of 8
/// per group, Q4 order): `Σ_g s · partial_g` from +0 in increasing g. The
/// slips: in the 4-row tiles the scales indexed as `s[g · 4 + q]` (group
/// major) instead of `s[q · groups + g]`; and in groups of 32 (the tile's
/// own loop for them) each chunk's weights against the activations of its
/// pair neighbour.
#[derive(Clone, Copy, PartialEq)]
enum W4A16GroupedSlip {
    None,
    GroupMajor,
    ChunksPaired32,
}

fn w4a16_grouped_with(x: &[&[f32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32], slip: W4A16GroupedSlip) {
    const POS: [usize; 8] = [0, 4, 1, 5, 2, 6, 3, 7];
    let (wr, groups) = (w.len(), s.len() / w.len());
    let per_group = g.div_ceil(8) * 8;
    for (i, xi) in x.iter().enumerate() {
        for (q, wq) in w.iter().enumerate() {
            let mut total = 0f32;
            for gi in 0..groups {
                let mut lanes = [0f32; 8];
                for c in 0..g {
                    let col = gi * g + c;
                    let nibble = (wq[col / 2] >> (4 * (col % 2))) & 0x0F;
                    let chunk = if slip == W4A16GroupedSlip::ChunksPaired32 && g == 32 {
                        (c / 8) ^ 1
                    } else {
                        c / 8
                    };
                    lanes[c % 8] += xi[gi * per_group + chunk * 8 + POS[c % 8]] * (f32::from(nibble) - 8.0);
                }
                let at = if slip == W4A16GroupedSlip::GroupMajor && wr == 4 {
                    gi * wr + q
                } else {
                    q * groups + gi
                };
                total += s[at] * qlinear_kernels_core::lane_tree(lanes);
            }
            out[i * wr + q] = total;
        }
    }
}

fn w4a16_grouped_group_major(x: &[&[f32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) {
    w4a16_grouped_with(x, w, s, g, out, W4A16GroupedSlip::GroupMajor)
}
fn w4a16_grouped_chunks_paired(x: &[&[f32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) {
    w4a16_grouped_with(x, w, s, g, out, W4A16GroupedSlip::ChunksPaired32)
}
fn w4a16_grouped_right(x: &[&[f32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) {
    w4a16_grouped_with(x, w, s, g, out, W4A16GroupedSlip::None)
}

table_on_frame!(group_major: w4a16_grouped, gemm_w4a16_grouped, TileF32Q4Grouped = [w4a16_grouped_group_major; 4], W4A16_TILES, chunk 4, block 8, ChunkedQ4);
table_on_frame!(chunks_paired: w4a16_grouped, gemm_w4a16_grouped, TileF32Q4Grouped = [w4a16_grouped_chunks_paired; 4], W4A16_TILES, chunk 4, block 8, ChunkedQ4);
table_on_frame!(w4a16_grouped_right_tiles: w4a16_grouped, gemm_w4a16_grouped, TileF32Q4Grouped = [w4a16_grouped_right; 4], W4A16_TILES, chunk 4, block 8, ChunkedQ4);

#[test]
fn the_w4a16_grouped_tiles_fail_the_proof_on_their_slip() {
    first_failure(&group_major::TABLE, KernelFamily::W4A16Grouped).expect("group-major scales must fail");
    first_failure(&chunks_paired::TABLE, KernelFamily::W4A16Grouped)
        .expect("a neighbour chunk's activations must fail");
    let right = first_failure(&w4a16_grouped_right_tiles::TABLE, KernelFamily::W4A16Grouped);
    assert!(right.is_none(), "{right:?}");
}

/// The quantizer's slips (`proof::mutants::quantizer_slips`) fail the
/// proof, and the same plan done right passes.
#[test]
fn the_quantizer_fails_the_proof_on_its_slips() {
    qlinear_kernels_core::proof::mutants::assert_quantizer_slips_fail();
}
