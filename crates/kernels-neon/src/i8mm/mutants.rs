//! Deliberately wrong I8MM kernels must fail the selftest's proof: a tile
//! whose 2 × 2 blocks are read transposed, and a tile on the even/odd pair
//! layout with its nibble operands exchanged (both on the frame, reached
//! through their declared tiles).

use std::arch::aarch64::*;
use std::arch::asm;

use qlinear_kernels_core::abi::tile::{Family, Layout, Shapes, Tile, TileI8Q4};
use qlinear_kernels_core::proof::mutants::failing;
use qlinear_kernels_core::{dot_i8_q4_biased, KernelFamily, KernelTable, SCALAR};

/// An I8MM W4A8 tile whose 2 × 2 result blocks are read transposed (lane
/// `2i + j` taken as weight row i, activation row j — the operands swapped
/// in the mind, not in the instruction).
#[target_feature(enable = "neon,i8mm")]
fn i8mm_tile_transposed(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    assert!(x.len() == 2 && w.len() == 2 && acc.len() == 4);
    let k = 2 * w[0].len();
    let mut a = vdupq_n_s32(0);
    let mut c = 0;
    while c + 32 <= k {
        // SAFETY: c + 32 <= k: 16 packed bytes per row and 64 pair bytes lie inside.
        unsafe {
            let (b0, b1) = (
                vreinterpretq_u32_u8(vld1q_u8(w[0].as_ptr().add(c / 2))),
                vreinterpretq_u32_u8(vld1q_u8(w[1].as_ptr().add(c / 2))),
            );
            for (h, t) in [vzip1q_u32(b0, b1), vzip2q_u32(b0, b1)].into_iter().enumerate() {
                let t = vreinterpretq_u8_u32(t);
                let (lo, hi) = (vandq_u8(t, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(t));
                for (s, nib) in [vzip1q_u8(lo, hi), vzip2q_u8(lo, hi)].into_iter().enumerate() {
                    let xv = vld1q_s8(x[0].as_ptr().add(2 * c + 16 * (2 * h + s)));
                    asm!("smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) a, a = in(vreg) vreinterpretq_s8_u8(nib), b = in(vreg) xv, options(pure, nomem, nostack));
                }
            }
        }
        c += 32;
    }
    let mut lanes = [0i32; 4];
    // SAFETY: a 16-byte store into a local array.
    unsafe { vst1q_s32(lanes.as_mut_ptr(), a) };
    // right: acc[i * 2 + q] = lanes[2q + i]; the mutant swaps q and i
    for i in 0..2 {
        for q in 0..2 {
            acc[i * 2 + q] = lanes[2 * i + q];
        }
    }
}

fn call_i8mm(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    // SAFETY: the test runs this only after detecting i8mm.
    unsafe { i8mm_tile_transposed(x, w, acc) }
}

const PAIR_TILES: &[Tile] = &[Tile::ONE, Tile::new(2, 2), Tile::new(1, 2)];
/// The pair tiles' leftovers on the pair layout: the first row of each pair.
fn pairs_tile(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    for (i, xr) in x.iter().enumerate() {
        let row: Vec<i8> = xr.chunks(16).flat_map(|c| c[..8].to_vec()).collect();
        for (q, wr) in w.iter().enumerate() {
            acc[i * w.len() + q] = dot_i8_q4_biased(&row, wr);
        }
    }
}
const I8MM_W4A8: Family<TileI8Q4> = Family {
    shapes: Shapes {
        tiles: PAIR_TILES,
        chunk: 0,
    },
    kernels: &{
        const K: [TileI8Q4; 3] = [pairs_tile, call_i8mm, pairs_tile];
        K
    },
    block: 32,
    layout: Layout::Pairs8,
    scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
};
mod transposed {
    use qlinear_kernels_core::GemmShapes;
    qlinear_kernels_core::frame_gemms! { w4a8: super::I8MM_W4A8; ..GemmShapes::SINGLE }
}
static TRANSPOSED: KernelTable = KernelTable {
    name: "i8mm-mutant",
    gemm_w4a8: transposed::gemm_w4a8,
    shapes: transposed::SHAPES,
    ..SCALAR
};

#[test]
fn an_i8mm_tile_read_transposed_fails_the_proof() {
    if !std::arch::is_aarch64_feature_detected!("i8mm") {
        eprintln!("skipped: this CPU has no FEAT_I8MM");
        return;
    }
    assert_eq!(failing(&TRANSPOSED), vec![KernelFamily::W4A8]);
}

/// The I8MM W4A8 2 × 2 tile on `Pairs8EvenOdd` (two weight rows' packed
/// bytes zipped 8 at a time; the mask is the even columns' operand, the
/// shift the odd ones'), with the two operands exchanged when `swap`: the
/// high nibbles meet the even columns.
#[target_feature(enable = "neon,i8mm")]
fn i8mm_evenodd_tile(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32], swap: bool) {
    assert!(x.len() <= 2 && w.len() <= 2 && acc.len() == x.len() * w.len());
    let k = 2 * w[0].len();
    let (w0, w1) = (w[0], w[w.len() - 1]);
    let mut a = vdupq_n_s32(0);
    let mut c = 0;
    while c + 32 <= k {
        // SAFETY: c + 32 <= k: 16 packed bytes per row and 64 pair bytes lie
        // inside; smmla reads registers only; i8mm is detected first.
        unsafe {
            let (b0, b1) = (
                vreinterpretq_u64_u8(vld1q_u8(w0.as_ptr().add(c / 2))),
                vreinterpretq_u64_u8(vld1q_u8(w1.as_ptr().add(c / 2))),
            );
            for (h, t) in [vzip1q_u64(b0, b1), vzip2q_u64(b0, b1)].into_iter().enumerate() {
                let t = vreinterpretq_u8_u64(t);
                let (lo, hi) = (vandq_u8(t, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(t));
                let (first, second) = if swap { (hi, lo) } else { (lo, hi) };
                for (s, nib) in [first, second].into_iter().enumerate() {
                    let xv = vld1q_s8(x[0].as_ptr().add(2 * c + 16 * (2 * h + s)));
                    asm!("smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) a, a = in(vreg) vreinterpretq_s8_u8(nib), b = in(vreg) xv, options(pure, nomem, nostack));
                }
            }
        }
        c += 32;
    }
    let mut lanes = [0i32; 4];
    // SAFETY: a 16-byte store into a local array.
    unsafe { vst1q_s32(lanes.as_mut_ptr(), a) };
    // lane 2q + i: weight row q, activation row i
    for i in 0..x.len() {
        for q in 0..w.len() {
            acc[i * w.len() + q] = lanes[2 * q + i];
        }
    }
}

fn i8mm_evenodd_swapped(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    // SAFETY: the test runs this only after detecting i8mm.
    unsafe { i8mm_evenodd_tile(x, w, acc, true) }
}

fn i8mm_evenodd_right(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    // SAFETY: the test runs this only after detecting i8mm.
    unsafe { i8mm_evenodd_tile(x, w, acc, false) }
}

qlinear_kernels_core::w4a8_on_frame! {
    tiles: PAIR_TILES,
    chunk: 0,
    block: 32,
    layout: Pairs8EvenOdd;
    i8mm_swapped => &[i8mm_evenodd_swapped as TileI8Q4; 3],
    i8mm_right => &[i8mm_evenodd_right as TileI8Q4; 3],
}

#[test]
fn an_i8mm_tile_with_its_nibble_operands_exchanged_fails_the_proof() {
    if !std::arch::is_aarch64_feature_detected!("i8mm") {
        eprintln!("skipped: this CPU has no FEAT_I8MM");
        return;
    }
    assert_eq!(failing(&i8mm_swapped::TABLE), vec![KernelFamily::W4A8]);
    assert_eq!(failing(&i8mm_right::TABLE), vec![]);
}

// The I8MM tier's W8A8 16 × 1 decode tile (8 row pairs) with an
// accumulator reused, and done right (`crate::int::w8a8_16x1_mutant_tables`).
w8a8_16x1_mutant_tables!(
    crate::i8mm::W8A8,
    crate::i8mm::w8a8_kernels,
    crate::i8mm::entry::w8a8_16x1,
    i8mm_w8a8_16x1_reused,
    i8mm_w8a8_16x1_right
);

#[test]
fn an_i8mm_w8a8_16x1_tile_reusing_an_accumulator_fails_the_proof() {
    if !std::arch::is_aarch64_feature_detected!("i8mm") {
        eprintln!("skipped: this CPU has no FEAT_I8MM");
        return;
    }
    assert_eq!(failing(&i8mm_w8a8_16x1_reused::TABLE), vec![KernelFamily::W8A8]);
    assert_eq!(failing(&i8mm_w8a8_16x1_right::TABLE), vec![]);
}
