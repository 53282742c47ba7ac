//! Deliberately wrong SIMD128 micro-kernels must fail the selftest, and the
//! real table must pass: a W8A8 4 × 4 batch tile that accumulates in
//! saturating i16 lanes across K (`i16x8_add_sat`, a tempting shortcut that
//! clips as soon as three ±127 · ±127 products meet in a lane), registered
//! on the frame with its declared tile so the proof's rows reach it.

use std::arch::wasm32::*;

use qlinear_kernels_core::abi::tile::{Family, Layout, Shapes, Tile, TileI8I8};
use qlinear_kernels_core::proof::mutants::{evenodd_dot, failing};
use qlinear_kernels_core::proof::{default_census, prove_kernel_table};
use qlinear_kernels_core::KernelFamily;
use qlinear_kernels_core::{dot_i8_i8, GemmShapes, KernelTable, SCALAR};

fn portable(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    for (i, xr) in x.iter().enumerate() {
        for (q, wr) in w.iter().enumerate() {
            acc[i * w.len() + q] = dot_i8_i8(xr, wr);
        }
    }
}

/// Products summed in a saturating i16 accumulator across K, widened once
/// at the end.
fn saturating_tile(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    let k = x[0].len();
    for (i, xr) in x.iter().enumerate() {
        for (q, wr) in w.iter().enumerate() {
            let mut s = i16x8_splat(0);
            let mut c = 0;
            while c + 16 <= k {
                // SAFETY: c + 16 <= k = both rows' lengths.
                let (xv, wv) = unsafe {
                    (
                        v128_load(xr.as_ptr().add(c).cast()),
                        v128_load(wr.as_ptr().add(c).cast()),
                    )
                };
                s = i16x8_add_sat(s, i16x8_extmul_low_i8x16(xv, wv));
                s = i16x8_add_sat(s, i16x8_extmul_high_i8x16(xv, wv));
                c += 16;
            }
            let a = i32x4_extadd_pairwise_i16x8(s);
            acc[i * w.len() + q] = i32x4_extract_lane::<0>(a)
                + i32x4_extract_lane::<1>(a)
                + i32x4_extract_lane::<2>(a)
                + i32x4_extract_lane::<3>(a);
        }
    }
}

const TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 4), Tile::new(1, 4)];
const W8A8: Family<TileI8I8> = Family {
    shapes: Shapes { tiles: TILES, chunk: 0 },
    kernels: &{
        const K: [TileI8I8; 3] = [portable, saturating_tile, portable];
        K
    },
    block: 16,
    layout: Layout::Natural,
    scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
};
qlinear_kernels_core::frame_gemms! { w8a8: W8A8; ..GemmShapes::SINGLE }
static MUTANT: KernelTable = KernelTable {
    name: "simd128-mutant",
    gemm_w8a8,
    shapes: SHAPES,
    ..SCALAR
};

#[test]
fn a_saturating_simd128_batch_tile_fails_the_proof() {
    assert_eq!(failing(&MUTANT), vec![KernelFamily::W8A8]);
}

#[test]
fn the_real_simd128_table_passes() {
    let table = crate::simd128_table().expect("built with +simd128");
    let proofs = prove_kernel_table(table, &default_census());
    assert!(proofs.iter().all(|p| p.mismatch.is_none()), "{proofs:?}");
}

/// The 16-row W4A8 decode tile (rows one after another) done wrong: the
/// last row dotted with the row before it (a loop bound one short). Right on
/// the 1- and 4-row tiles, so only a proof whose rows reach the 16-row tile
/// fails it; `repeat_last = false` is the same tile done right.
fn w4a8_seq_rows(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32], repeat_last: bool) {
    for (q, a) in acc.iter_mut().enumerate() {
        let r = if repeat_last && w.len() == 16 && q == 15 { 14 } else { q };
        *a = evenodd_dot(x[0], w[r]);
    }
}

fn seq_repeated(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    w4a8_seq_rows(x, w, acc, true)
}

fn seq_right(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    w4a8_seq_rows(x, w, acc, false)
}

const DECODE_TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(16, 1)];
qlinear_kernels_core::w4a8_on_frame! {
    tiles: DECODE_TILES,
    chunk: 64,
    block: 32,
    layout: EvenOdd;
    seq_last_row_repeated => &[seq_repeated as TileI8Q4; 3],
    seq_right_table => &[seq_right as TileI8Q4; 3],
}

#[test]
fn a_repeated_row_in_the_sequential_w4a8_decode_tile_fails_the_proof() {
    assert_eq!(failing(&seq_last_row_repeated::TABLE), vec![KernelFamily::W4A8]);
    assert_eq!(failing(&seq_right_table::TABLE), vec![]);
}

/// The W4A8 16 × 4 batch tile (the 4 × 4 tile over each 4 weight rows in
/// turn) in plain Rust, storing each quad's sums as the 4 × 4 tile lays them
/// out (`slip`: a block of 16 at `16·(r / 4)`) instead of at the quad's
/// columns of the 16-wide rows; `slip = false` is the tile done right.
fn w4a8_quads(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32], slip: bool) {
    let wr = w.len();
    for (i, x) in x.iter().enumerate() {
        for (r, w) in w.iter().enumerate() {
            let at = if slip && wr == 16 {
                16 * (r / 4) + 4 * i + r % 4
            } else {
                i * wr + r
            };
            acc[at] = evenodd_dot(x, w);
        }
    }
}

fn quads_as_4x4(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    w4a8_quads(x, w, acc, true)
}

fn quads_right(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    w4a8_quads(x, w, acc, false)
}

const QUAD_TILES: &[Tile] = &[Tile::ONE, Tile::new(16, 4), Tile::new(1, 4)];
qlinear_kernels_core::w4a8_on_frame! {
    tiles: QUAD_TILES,
    chunk: 64,
    block: 32,
    layout: EvenOdd;
    quads_stored_as_4x4 => &[quads_as_4x4 as TileI8Q4; 3],
    quads_right_table => &[quads_right as TileI8Q4; 3],
}

#[test]
fn a_w4a8_16x4_tile_storing_its_quads_as_4x4_tiles_fails_the_proof() {
    assert_eq!(failing(&quads_stored_as_4x4::TABLE), vec![KernelFamily::W4A8]);
    assert_eq!(failing(&quads_right_table::TABLE), vec![]);
}

/// The panel tile's products with the rows' pairs added across rows: after
/// the pairwise widening, lanes 0 and 2 (rows 0 and 1) added where lanes 0
/// and 1 (row 0's two halves) belong, the slip of a shuffle written
/// `[0, 1, 4, 5] + [2, 3, 6, 7]` for `[0, 2, 4, 6] + [1, 3, 5, 7]`.
struct RowsMixed;

impl crate::simd128::panels::PanelDot for RowsMixed {
    fn products(lo: v128, hi: v128, x_lo: v128, x_hi: v128) -> (v128, v128) {
        <crate::simd128::ExtMul as crate::simd128::panels::PanelDot>::products(lo, hi, x_lo, x_hi)
    }
    fn rows(a: v128, b: v128) -> v128 {
        let (a, b) = (i32x4_extadd_pairwise_i16x8(a), i32x4_extadd_pairwise_i16x8(b));
        i32x4_add(i32x4_shuffle::<0, 1, 4, 5>(a, b), i32x4_shuffle::<2, 3, 6, 7>(a, b))
    }
}

crate::simd128::panels::panel_tiles_with!(rows_mixed, RowsMixed);
crate::simd128::panels::panel_tiles_with!(rows_right, crate::simd128::ExtMul);

#[test]
fn a_panel_tile_adding_its_pairs_across_rows_fails_the_proof() {
    assert_eq!(
        failing(&rows_mixed::TABLE),
        vec![KernelFamily::W4A8, KernelFamily::W4A8Grouped]
    );
    assert_eq!(failing(&rows_right::TABLE), vec![]);
}

/// The 16-row W8A8 decode tile (rows one after another) done wrong: the
/// last row left at zero (a loop bound one short). Right on the 1- and
/// 4-row tiles, so only a proof whose rows reach the 16-row tile fails it;
/// `SKIP = false` is the same tile done right.
fn w8a8_seq_rows<const SKIP: bool>(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    for (q, a) in acc.iter_mut().enumerate() {
        *a = if SKIP && w.len() == 16 && q == 15 {
            0
        } else {
            dot_i8_i8(x[0], w[q])
        };
    }
}

const W8A8_SEQ_TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(16, 1)];

mod w8a8_seq_short {
    use super::*;
    const W8A8: Family<TileI8I8> = Family {
        shapes: Shapes {
            tiles: W8A8_SEQ_TILES,
            chunk: 16,
        },
        kernels: &[w8a8_seq_rows::<true> as TileI8I8; 3],
        block: 16,
        layout: Layout::Natural,
        scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
    };
    qlinear_kernels_core::frame_gemms! { w8a8: W8A8; ..GemmShapes::SINGLE }
    pub(super) static TABLE: KernelTable = KernelTable {
        name: "simd128-w8a8-seq-short",
        gemm_w8a8,
        shapes: SHAPES,
        ..SCALAR
    };
}

mod w8a8_seq_right {
    use super::*;
    const W8A8: Family<TileI8I8> = Family {
        shapes: Shapes {
            tiles: W8A8_SEQ_TILES,
            chunk: 16,
        },
        kernels: &[w8a8_seq_rows::<false> as TileI8I8; 3],
        block: 16,
        layout: Layout::Natural,
        scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
    };
    qlinear_kernels_core::frame_gemms! { w8a8: W8A8; ..GemmShapes::SINGLE }
    pub(super) static TABLE: KernelTable = KernelTable {
        name: "simd128-w8a8-seq-right",
        gemm_w8a8,
        shapes: SHAPES,
        ..SCALAR
    };
}

#[test]
fn a_short_sequential_w8a8_decode_tile_fails_the_proof() {
    assert_eq!(failing(&w8a8_seq_short::TABLE), vec![KernelFamily::W8A8]);
    assert_eq!(failing(&w8a8_seq_right::TABLE), vec![]);
}

/// The W8A8 tile on i16-widened halves (`super::tile_i8`) done wrong: each
/// activation half multiplied by the weights' other half (`xl·wh + xh·wl`,
/// the halves' names swapped). Registered as the 4 × 4 batch tile, so only
/// the proof's batch rows reach it; `CROSS = false` is the same tile done
/// right.
fn widened<const CROSS: bool>(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    let k = x[0].len();
    for (i, xr) in x.iter().enumerate() {
        for (q, wr) in w.iter().enumerate() {
            let mut a = i32x4_splat(0);
            let mut c = 0;
            while c + 16 <= k {
                let (xl, xh) = super::widen(super::load16(xr, c));
                let (wl, wh) = super::widen(super::load16(wr, c));
                let (wl, wh) = if CROSS { (wh, wl) } else { (wl, wh) };
                a = i32x4_add(a, i32x4_add(i32x4_dot_i16x8(xl, wl), i32x4_dot_i16x8(xh, wh)));
                c += 16;
            }
            acc[i * w.len() + q] = super::hsum(a);
        }
    }
}

mod w8a8_widened {
    use super::*;
    macro_rules! table {
        ($module:ident, $cross:literal, $name:literal) => {
            pub(super) mod $module {
                use super::*;
                const W8A8: Family<TileI8I8> = Family {
                    shapes: Shapes {
                        tiles: TILES,
                        chunk: 0,
                    },
                    kernels: &[portable, widened::<$cross>, portable],
                    block: 16,
                    layout: Layout::Natural,
                    scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
                };
                qlinear_kernels_core::frame_gemms! { w8a8: W8A8; ..GemmShapes::SINGLE }
                pub(crate) static TABLE: KernelTable = KernelTable {
                    name: $name,
                    gemm_w8a8,
                    shapes: SHAPES,
                    ..SCALAR
                };
            }
        };
    }
    table!(crossed, true, "simd128-w8a8-widened-crossed");
    table!(right, false, "simd128-w8a8-widened-right");
}

#[test]
fn a_widened_w8a8_tile_crossing_its_halves_fails_the_proof() {
    assert_eq!(failing(&w8a8_widened::crossed::TABLE), vec![KernelFamily::W8A8]);
    assert_eq!(failing(&w8a8_widened::right::TABLE), vec![]);
}
