//! Two mistakes a relaxed-SIMD W4A8 tile could make, each registered on
//! the frame as the tier's W4A8 tile:
//!
//! - **Signed nibbles.** `i16x8.relaxed_dot_i8x16_i7x16_s` reads its second
//!   operand's bytes as signed or unsigned, as the engine likes, when their
//!   top bit is set; the real tier only passes biased nibbles (0..15) there.
//!   This mutant passes `b − 8` (negative for half the codes) and adds
//!   `8·Σx` back: right where the engine reads them signed, wrong where it
//!   reads them unsigned (V8 on x86, which lowers the instruction to
//!   `pmaddubsw`). The proof must catch it wherever it is wrong.
//! - **i16 across the row.** The pair sums added in i16 over the whole row
//!   and widened once (one widening per row instead of one per block): a
//!   block adds up to 7620 to a lane, so five extreme blocks wrap. Wrong on
//!   every engine.

use std::arch::wasm32::*;

use qlinear_kernels_core::abi::tile::Tile;
use qlinear_kernels_core::proof::mutants::failing;
use qlinear_kernels_core::KernelFamily;

/// `Σ x·b` of every (activation, weight) row pair of the tile, with
/// nibble `b` passed to the relaxed dot as `b − bias` and `bias·Σx`
/// added back; `wide` widens every block (right), else once per row.
fn relaxed_tile(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32], bias: i8, wide: bool) {
    let k = x[0].len();
    for (i, xr) in x.iter().enumerate() {
        for (q, wr) in w.iter().enumerate() {
            let (mut a, mut a16) = (i32x4_splat(0), i16x8_splat(0));
            let mut c = 0;
            while c + 32 <= k {
                // SAFETY: c + 32 <= k = the split activation row's
                // length, and the packed row holds k / 2 bytes.
                let (even, odd, p) = unsafe {
                    (
                        v128_load(xr.as_ptr().add(c).cast()),
                        v128_load(xr.as_ptr().add(c + 16).cast()),
                        v128_load(wr.as_ptr().add(c / 2).cast()),
                    )
                };
                let lo = i8x16_sub(v128_and(p, u8x16_splat(0x0F)), i8x16_splat(bias));
                let hi = i8x16_sub(u8x16_shr(p, 4), i8x16_splat(bias));
                let pairs = i16x8_add(
                    i16x8_relaxed_dot_i8x16_i7x16(even, lo),
                    i16x8_relaxed_dot_i8x16_i7x16(odd, hi),
                );
                if wide {
                    a = i32x4_add(a, i32x4_extadd_pairwise_i16x8(pairs));
                } else {
                    a16 = i16x8_add(a16, pairs);
                }
                c += 32;
            }
            a = i32x4_add(a, i32x4_extadd_pairwise_i16x8(a16));
            let sum_x: i32 = xr.iter().map(|&v| i32::from(v)).sum();
            acc[i * w.len() + q] = i32x4_extract_lane::<0>(a)
                + i32x4_extract_lane::<1>(a)
                + i32x4_extract_lane::<2>(a)
                + i32x4_extract_lane::<3>(a)
                + i32::from(bias) * sum_x;
        }
    }
}

fn signed_nibbles(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    relaxed_tile(x, w, acc, 8, true)
}

fn i16_across_row(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    relaxed_tile(x, w, acc, 0, false)
}

fn right(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    relaxed_tile(x, w, acc, 0, true)
}

qlinear_kernels_core::w4a8_on_frame! {
    tiles: &[Tile::ONE],
    chunk: 0,
    block: 32,
    layout: EvenOdd;
    signed_nibbles_table => &[signed_nibbles as TileI8Q4],
    i16_across_row_table => &[i16_across_row as TileI8Q4],
    right_table => &[right as TileI8Q4],
}

#[test]
fn signed_nibbles_fail_the_proof_wherever_the_engine_reads_them_unsigned() {
    // 1 · (−1), twice: −2 where the engine reads the second operand signed
    let probe = i16x8_relaxed_dot_i8x16_i7x16(i8x16_splat(1), i8x16_splat(-1));
    let unsigned = i16x8_extract_lane::<0>(probe) != -2;
    let expected = if unsigned { vec![KernelFamily::W4A8] } else { vec![] };
    assert_eq!(
        failing(&signed_nibbles_table::TABLE),
        expected,
        "reads unsigned: {unsigned}"
    );
}

#[test]
fn i16_sums_across_the_row_fail_the_proof() {
    assert_eq!(failing(&i16_across_row_table::TABLE), vec![KernelFamily::W4A8]);
}

#[test]
fn the_same_harness_passes_a_right_relaxed_tile_and_the_real_table() {
    assert_eq!(failing(&right_table::TABLE), vec![]);
    let table = crate::relaxed_simd_table().expect("built with +relaxed-simd");
    assert_eq!(failing(table), vec![]);
}

/// The relaxed panel tile's products with the halves swapped: the codes of
/// the high nibbles against the low ones and the low's against the high.
struct HalvesSwapped;

impl crate::simd128::panels::PanelDot for HalvesSwapped {
    fn products(lo: v128, hi: v128, x_lo: v128, x_hi: v128) -> (v128, v128) {
        <crate::relaxed::RelaxedDot as crate::simd128::panels::PanelDot>::products(lo, hi, x_hi, x_lo)
    }
    fn rows(a: v128, b: v128) -> v128 {
        <crate::relaxed::RelaxedDot as crate::simd128::panels::PanelDot>::rows(a, b)
    }
}

crate::simd128::panels::panel_tiles_with!(halves_swapped, HalvesSwapped);
crate::simd128::panels::panel_tiles_with!(panels_right, crate::relaxed::RelaxedDot);

#[test]
fn a_relaxed_panel_tile_with_its_halves_swapped_fails_the_proof() {
    assert_eq!(
        failing(&halves_swapped::TABLE),
        vec![KernelFamily::W4A8, KernelFamily::W4A8Grouped]
    );
    assert_eq!(failing(&panels_right::TABLE), vec![]);
}
