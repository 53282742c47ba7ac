//! Deliberately wrong SDOT kernels must fail the selftest's proof: a dot
//! with the nibbles zipped in the wrong lane order, a batch tile with a
//! hoisted activation load, a decode step (128 columns, `ld1` of four
//! registers) that consumes its two activation loads in the wrong order,
//! the W4A8 16 × 4 tile storing its quads' sums as 4 × 4 tiles, and the
//! W4A8 grouped panel tile with its activation loads swapped (the last
//! four on the frame, reached through their declared tiles).

use std::arch::aarch64::*;
use std::arch::asm;

use qlinear_kernels_core::abi::tile::{Family, Layout, Shapes, Tile, TileI8Q4};
use qlinear_kernels_core::proof::mutants::{evenodd_dot, failing};
use qlinear_kernels_core::proof::{default_census, prove_kernel_table};
use qlinear_kernels_core::{dot_i8_q4_biased, KernelFamily, KernelTable, SCALAR};

#[target_feature(enable = "neon,dotprod")]
fn swapped_lanes(x: &[i8], p: &[u8]) -> i32 {
    let mut acc = vdupq_n_s32(0);
    let mut c = 0;
    while c + 32 <= x.len() {
        // SAFETY: c + 32 <= x.len() and p holds ceil(len / 2) bytes (asserted by
        // the caller); sdot reads registers only; dotprod is detected first.
        unsafe {
            let b = vld1q_u8(p.as_ptr().add(c / 2));
            let (lo, hi) = (vandq_u8(b, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(b));
            for (half, nib) in [vzip1q_u8(hi, lo), vzip2q_u8(hi, lo)].into_iter().enumerate() {
                let xv = vld1q_s8(x.as_ptr().add(c + 16 * half));
                asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) acc, a = in(vreg) vreinterpretq_s8_u8(nib), b = in(vreg) xv, options(pure, nomem, nostack));
            }
        }
        c += 32;
    }
    vaddvq_s32(acc) + dot_i8_q4_biased(&x[c..], &p[c / 2..]) - 8 * x.iter().map(|&v| i32::from(v)).sum::<i32>()
}

fn call(x: &[i8], p: &[u8]) -> i32 {
    assert_eq!(p.len(), x.len().div_ceil(2));
    // SAFETY: the test runs this only after detecting dotprod.
    unsafe { swapped_lanes(x, p) }
}

#[test]
fn an_sdot_kernel_with_the_wrong_lane_order_fails_the_proof() {
    if !std::arch::is_aarch64_feature_detected!("dotprod") {
        eprintln!("skipped: this CPU has no FEAT_DotProd");
        return;
    }
    let proofs = prove_kernel_table(
        &KernelTable {
            dot_i8_q4: call,
            ..SCALAR
        },
        &default_census(),
    );
    let failing: Vec<KernelFamily> = proofs
        .iter()
        .filter(|p| p.mismatch.is_some())
        .map(|p| p.family)
        .collect();
    assert_eq!(failing, vec![KernelFamily::DotI8Q4]);
}

/// Portable micro-kernels for the tiles a mutant table does not mutate.
mod portable {
    pub(crate) fn tile_q4(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
        for (i, xr) in x.iter().enumerate() {
            for (q, wr) in w.iter().enumerate() {
                acc[i * w.len() + q] = qlinear_kernels_core::dot_i8_q4_biased(xr, wr);
            }
        }
    }
}

/// An SDOT W4A8 4 × 4 batch tile with a hoisted load: the high half of
/// every activation row's 32 columns is taken from the tile's first row.
/// M = 1 never runs it, so only a proof whose rows reach the tile fails it.
#[target_feature(enable = "neon,dotprod")]
fn sdot_tile_hoisted(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    assert!(x.len() == 4 && w.len() == 4 && acc.len() == 16);
    let k = x[0].len();
    let mut a = [[vdupq_n_s32(0); 4]; 4];
    let mut c = 0;
    while c + 32 <= k {
        // SAFETY: c + 32 <= k = every x row's length and 2 · every w row's.
        unsafe {
            let x1_first = vld1q_s8(x[0].as_ptr().add(c + 16));
            for q in 0..4 {
                let b = vld1q_u8(w[q].as_ptr().add(c / 2));
                let (lo, hi) = (vandq_u8(b, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(b));
                let (n0, n1) = (vzip1q_u8(lo, hi), vzip2q_u8(lo, hi));
                for i in 0..4 {
                    let x0 = vld1q_s8(x[i].as_ptr().add(c));
                    asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) a[i][q], a = in(vreg) vreinterpretq_s8_u8(n0), b = in(vreg) x0, options(pure, nomem, nostack));
                    asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) a[i][q], a = in(vreg) vreinterpretq_s8_u8(n1), b = in(vreg) x1_first, options(pure, nomem, nostack));
                }
            }
        }
        c += 32;
    }
    for i in 0..4 {
        for q in 0..4 {
            acc[i * 4 + q] = vaddvq_s32(a[i][q]);
        }
    }
}

fn call_tile(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    // SAFETY: the test runs this only after detecting dotprod.
    unsafe { sdot_tile_hoisted(x, w, acc) }
}

const TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 4), Tile::new(1, 4)];
const SDOT_W4A8: Family<TileI8Q4> = Family {
    shapes: Shapes { tiles: TILES, chunk: 0 },
    kernels: &{
        const K: [TileI8Q4; 3] = [portable::tile_q4, call_tile, portable::tile_q4];
        K
    },
    block: 32,
    layout: Layout::Natural,
    scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
};
mod hoisted {
    use qlinear_kernels_core::GemmShapes;
    qlinear_kernels_core::frame_gemms! { w4a8: super::SDOT_W4A8; ..GemmShapes::SINGLE }
}
static HOISTED: KernelTable = KernelTable {
    name: "sdot-mutant",
    gemm_w4a8: hoisted::gemm_w4a8,
    shapes: hoisted::SHAPES,
    ..SCALAR
};

#[test]
fn an_sdot_batch_tile_with_a_hoisted_load_fails_the_proof() {
    if !std::arch::is_aarch64_feature_detected!("dotprod") {
        eprintln!("skipped: this CPU has no FEAT_DotProd");
        return;
    }
    assert_eq!(failing(&HOISTED), vec![KernelFamily::W4A8]);
}

/// The SDOT W4A8 decode tile's 128-column step (`ld1` of four registers
/// with post-index, the activations in two loads), with the two activation
/// loads consumed in the wrong order when `swap`: the first 64 columns'
/// nibbles meet the second 64 columns' codes. The columns past the last
/// whole step go through [`evenodd_dot`].
#[target_feature(enable = "neon,dotprod")]
fn sdot_decode_128(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32], swap: bool) {
    let k = x[0].len();
    assert!(x.len() == 1 && w.len() == acc.len() && w.iter().all(|r| r.len() == k / 2));
    let steps = k / 128;
    for (q, a) in acc.iter_mut().enumerate() {
        let (mut xp, mut wp) = (x[0].as_ptr().cast::<u8>(), w[q].as_ptr());
        let mut s = vdupq_n_s32(0);
        for _ in 0..steps {
            let (xa, xb, b): ([uint8x16_t; 4], [uint8x16_t; 4], [uint8x16_t; 4]);
            // `steps` whole steps of 128 codes and 64 packed bytes lie
            // inside the rows (asserted); the asm reads only them and writes
            // the named registers and the pointers.
            // SAFETY: so every load stays inside its row; dotprod is detected before this runs.
            unsafe {
                let (a0, a1, a2, a3, b0, b1, b2, b3, w0, w1, w2, w3);
                asm!(
                    "ld1 {{v24.16b, v25.16b, v26.16b, v27.16b}}, [{x}], #64",
                    "ld1 {{v28.16b, v29.16b, v30.16b, v31.16b}}, [{x}], #64",
                    "ld1 {{v16.16b, v17.16b, v18.16b, v19.16b}}, [{w}], #64",
                    x = inout(reg) xp, w = inout(reg) wp,
                    out("v24") a0, out("v25") a1, out("v26") a2, out("v27") a3,
                    out("v28") b0, out("v29") b1, out("v30") b2, out("v31") b3,
                    out("v16") w0, out("v17") w1, out("v18") w2, out("v19") w3,
                    options(nostack, readonly, preserves_flags)
                );
                (xa, xb, b) = ([a0, a1, a2, a3], [b0, b1, b2, b3], [w0, w1, w2, w3]);
            }
            let (first, second) = if swap { (xb, xa) } else { (xa, xb) };
            let xs = [
                first[0], first[1], first[2], first[3], second[0], second[1], second[2], second[3],
            ];
            for (j, bj) in b.into_iter().enumerate() {
                let (lo, hi) = (vandq_u8(bj, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(bj));
                // SAFETY: sdot reads registers only; dotprod is detected first.
                unsafe {
                    asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) s, a = in(vreg) lo, b = in(vreg) xs[2 * j], options(pure, nomem, nostack));
                    asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) s, a = in(vreg) hi, b = in(vreg) xs[2 * j + 1], options(pure, nomem, nostack));
                }
            }
        }
        *a = vaddvq_s32(s) + evenodd_dot(&x[0][steps * 128..], &w[q][steps * 64..]);
    }
}

fn decode_128_swapped(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    // SAFETY: the test runs this only after detecting dotprod.
    unsafe { sdot_decode_128(x, w, acc, true) }
}

fn decode_128_right(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    // SAFETY: the test runs this only after detecting dotprod.
    unsafe { sdot_decode_128(x, w, acc, false) }
}

qlinear_kernels_core::w4a8_on_frame! {
    tiles: &[Tile::ONE, Tile::new(4, 1)],
    chunk: 64,
    block: 32,
    layout: EvenOdd;
    decode_swapped => &[decode_128_swapped as TileI8Q4; 2],
    decode_right => &[decode_128_right as TileI8Q4; 2],
}

#[test]
fn an_sdot_decode_step_with_its_activation_loads_swapped_fails_the_proof() {
    if !std::arch::is_aarch64_feature_detected!("dotprod") {
        eprintln!("skipped: this CPU has no FEAT_DotProd");
        return;
    }
    assert_eq!(failing(&decode_swapped::TABLE), vec![KernelFamily::W4A8]);
    assert_eq!(failing(&decode_right::TABLE), vec![]);
}

// The SDOT tier's own W4A8 16 × 4 tile with its quads stored as 4 × 4
// tiles, and done right (`crate::int::quads_mutant_tables`). NEON's mutant
// of the same kind covers the loop the tiers share
// (`frame::quads_in_turn`); this one reaches the tier's own `sdot` tile.
quads_mutant_tables!(sdot, sdot_quads_stored_as_4x4, sdot_quads_in_turn);

#[test]
fn an_sdot_w4a8_16x4_tile_storing_its_quads_as_4x4_tiles_fails_the_proof() {
    if !std::arch::is_aarch64_feature_detected!("dotprod") {
        eprintln!("skipped: this CPU has no FEAT_DotProd");
        return;
    }
    assert_eq!(failing(&sdot_quads_stored_as_4x4::TABLE), vec![KernelFamily::W4A8]);
    assert_eq!(failing(&sdot_quads_in_turn::TABLE), vec![]);
}

// The SDOT tier's own W8A8 16 × 1 decode tile with an accumulator reused,
// and done right (`crate::int::w8a8_16x1_mutant_tables`).
w8a8_16x1_mutant_tables!(
    crate::sdot::W8A8,
    crate::sdot::w8a8_kernels,
    crate::sdot::entry::w8a8_16x1,
    sdot_w8a8_16x1_reused,
    sdot_w8a8_16x1_right
);

#[test]
fn an_sdot_w8a8_16x1_tile_reusing_an_accumulator_fails_the_proof() {
    if !std::arch::is_aarch64_feature_detected!("dotprod") {
        eprintln!("skipped: this CPU has no FEAT_DotProd");
        return;
    }
    assert_eq!(failing(&sdot_w8a8_16x1_reused::TABLE), vec![KernelFamily::W8A8]);
    assert_eq!(failing(&sdot_w8a8_16x1_right::TABLE), vec![]);
}

/// The SDOT panel tile consuming its two activation loads in the wrong
/// order: each 8 columns' odd codes where the even ones go (the tier's own
/// tile, handed each activation row with the halves of every 8 columns
/// exchanged).
fn panel_codes_swapped(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[half::f16], out: &mut [f32]) {
    let swapped = halves_swapped(x);
    let views: Vec<&[i8]> = swapped.iter().map(Vec::as_slice).collect();
    match x.len() {
        4 => super::entry::panel_16x4(&views, sums, panel, s, out),
        _ => super::entry::panel_16x1(&views, sums, panel, s, out),
    }
}

/// The per-channel panel tile with the same slip.
fn panel_pc_codes_swapped(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], out: &mut [f32]) {
    let swapped = halves_swapped(x);
    let views: Vec<&[i8]> = swapped.iter().map(Vec::as_slice).collect();
    match x.len() {
        4 => super::entry::panel_pc_16x4(&views, sums, panel, out),
        _ => super::entry::panel_pc_16x1(&views, sums, panel, out),
    }
}

/// Each activation row with the halves of every 8 columns exchanged.
fn halves_swapped(x: &[&[i8]]) -> Vec<Vec<i8>> {
    x.iter()
        .map(|r| {
            r.chunks_exact(8)
                .flat_map(|p| p[4..].iter().chain(&p[..4]).copied())
                .collect()
        })
        .collect()
}

panel_tiles!(
    codes_swapped,
    super::panel_codes_swapped,
    super::panel_codes_swapped,
    super::panel_pc_codes_swapped,
    super::panel_pc_codes_swapped
);
panel_tiles!(
    panels_right,
    crate::sdot::entry::panel_16x4,
    crate::sdot::entry::panel_16x1,
    crate::sdot::entry::panel_pc_16x4,
    crate::sdot::entry::panel_pc_16x1
);

#[test]
fn an_sdot_panel_tile_with_its_activation_loads_swapped_fails_the_proof() {
    if !std::arch::is_aarch64_feature_detected!("dotprod") {
        eprintln!("skipped: this CPU has no FEAT_DotProd");
        return;
    }
    assert_eq!(
        failing(&codes_swapped::TABLE),
        vec![KernelFamily::W4A8, KernelFamily::W4A8Grouped]
    );
    assert_eq!(failing(&panels_right::TABLE), vec![]);
}
