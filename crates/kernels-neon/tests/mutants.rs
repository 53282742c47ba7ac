//! Deliberately wrong aarch64 kernels must fail the selftest: a baseline
//! NEON dot that sums four products in an i16 lane before widening, an SDOT dot
//! with the nibbles zipped in the wrong lane order, an SDOT batch tile with a
//! hoisted activation load, an SDOT decode step (128 columns, `ld1` of four
//! registers) that consumes its two activation loads in the wrong order, an
//! I8MM tile whose 2 × 2 blocks are read transposed, and an I8MM tile on the
//! even/odd pair layout with its nibble operands exchanged (the last four on
//! the frame, reached through their declared tiles).
#![cfg(target_arch = "aarch64")]

use std::arch::aarch64::*;
use std::arch::asm;

use qlinear_kernels_scalar::frame::Tile;
use qlinear_kernels_scalar::proof::mutants::{evenodd_dot, failing};
use qlinear_kernels_scalar::proof::{default_census, prove_kernel_table};
use qlinear_kernels_scalar::KernelFamily;
use qlinear_kernels_scalar::{dot_i8_q4_biased, KernelTable, SCALAR};

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

/// The baseline NEON dot with four `smull`/`smlal` products summed in each
/// i16 lane before `sadalp` widens them (the tier adds at most one product
/// per lane before widening: 4 · 127 · 127 overflows i16).
#[target_feature(enable = "neon")]
fn four_products_per_i16_lane(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = vdupq_n_s32(0);
    let mut c = 0;
    while c + 32 <= a.len() {
        // SAFETY: c + 32 <= a.len() = b.len() (asserted by the caller).
        unsafe {
            let (a0, b0) = (vld1q_s8(a.as_ptr().add(c)), vld1q_s8(b.as_ptr().add(c)));
            let (a1, b1) = (vld1q_s8(a.as_ptr().add(c + 16)), vld1q_s8(b.as_ptr().add(c + 16)));
            let mut p = vmull_s8(vget_low_s8(a0), vget_low_s8(b0));
            p = vmlal_high_s8(p, a0, b0);
            p = vmlal_s8(p, vget_low_s8(a1), vget_low_s8(b1));
            p = vmlal_high_s8(p, a1, b1);
            acc = vpadalq_s16(acc, p);
        }
        c += 32;
    }
    vaddvq_s32(acc) + (SCALAR.dot_i8_i8)(&a[c..], &b[c..])
}

fn call_four_products(a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len());
    // SAFETY: every aarch64 CPU has ASIMD (the baseline tier's feature).
    unsafe { four_products_per_i16_lane(a, b) }
}

#[test]
fn a_neon_dot_summing_four_products_in_i16_fails_the_proof() {
    let m = qlinear_kernels_scalar::proof::mutants::first_failure(
        &KernelTable {
            dot_i8_i8: call_four_products,
            ..SCALAR
        },
        KernelFamily::DotI8I8,
    );
    assert!(
        m.is_some(),
        "an i16 lane holding four products of ±127 must overflow in the proof"
    );
}

#[test]
fn the_real_neon_tables_pass() {
    let tables = [
        qlinear_kernels_neon::neon_table(),
        qlinear_kernels_neon::sdot_table(),
        qlinear_kernels_neon::i8mm_table(),
    ];
    for table in tables.into_iter().flatten() {
        let proofs = prove_kernel_table(table, &default_census());
        assert!(
            proofs.iter().all(|p| p.mismatch.is_none()),
            "{}: {proofs:?}",
            table.name
        );
    }
}

/// Portable micro-kernels for the tiles a mutant table does not mutate.
mod portable {
    pub(crate) fn tile_q4(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
        for (i, xr) in x.iter().enumerate() {
            for (q, wr) in w.iter().enumerate() {
                acc[i * w.len() + q] = qlinear_kernels_scalar::dot_i8_q4_biased(xr, wr);
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

mod mutants {
    use qlinear_kernels_scalar::frame::{Family, Layout, Shapes, Tile, TileI8Q4};
    use qlinear_kernels_scalar::{KernelTable, SCALAR};

    pub(crate) const TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 4), Tile::new(1, 4)];
    const SDOT_W4A8: Family<TileI8Q4> = Family {
        shapes: Shapes { tiles: TILES, chunk: 0 },
        kernels: &{
            const K: [TileI8Q4; 3] = [super::portable::tile_q4, super::call_tile, super::portable::tile_q4];
            K
        },
        block: 32,
        layout: Layout::Natural,
        scales_to_f32: qlinear_kernels_scalar::frame::scales_to_f32,
    };
    pub(crate) const PAIR_TILES: &[Tile] = &[Tile::ONE, Tile::new(2, 2), Tile::new(1, 2)];
    /// The pair tiles' leftovers on the pair layout: the first row of each pair.
    fn pairs_tile(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
        for (i, xr) in x.iter().enumerate() {
            let row: Vec<i8> = xr.chunks(16).flat_map(|c| c[..8].to_vec()).collect();
            for (q, wr) in w.iter().enumerate() {
                acc[i * w.len() + q] = qlinear_kernels_scalar::dot_i8_q4_biased(&row, wr);
            }
        }
    }
    const I8MM_W4A8: Family<TileI8Q4> = Family {
        shapes: Shapes {
            tiles: PAIR_TILES,
            chunk: 0,
        },
        kernels: &{
            const K: [TileI8Q4; 3] = [pairs_tile, super::call_i8mm, pairs_tile];
            K
        },
        block: 32,
        layout: Layout::Pairs8,
        scales_to_f32: qlinear_kernels_scalar::frame::scales_to_f32,
    };
    mod sdot {
        use qlinear_kernels_scalar::GemmShapes;
        qlinear_kernels_scalar::frame_gemms! { w4a8: super::SDOT_W4A8; ..GemmShapes::SINGLE }
    }
    mod i8mm {
        use qlinear_kernels_scalar::GemmShapes;
        qlinear_kernels_scalar::frame_gemms! { w4a8: super::I8MM_W4A8; ..GemmShapes::SINGLE }
    }
    pub(crate) static SDOT: KernelTable = KernelTable {
        name: "sdot-mutant",
        gemm_w4a8: sdot::gemm_w4a8,
        shapes: sdot::SHAPES,
        ..SCALAR
    };
    pub(crate) static I8MM: KernelTable = KernelTable {
        name: "i8mm-mutant",
        gemm_w4a8: i8mm::gemm_w4a8,
        shapes: i8mm::SHAPES,
        ..SCALAR
    };
}

#[test]
fn an_sdot_batch_tile_with_a_hoisted_load_fails_the_proof() {
    if !std::arch::is_aarch64_feature_detected!("dotprod") {
        eprintln!("skipped: this CPU has no FEAT_DotProd");
        return;
    }
    assert_eq!(failing(&mutants::SDOT), vec![KernelFamily::W4A8]);
}

#[test]
fn an_i8mm_tile_read_transposed_fails_the_proof() {
    if !std::arch::is_aarch64_feature_detected!("i8mm") {
        eprintln!("skipped: this CPU has no FEAT_I8MM");
        return;
    }
    assert_eq!(failing(&mutants::I8MM), vec![KernelFamily::W4A8]);
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

qlinear_kernels_scalar::w4a8_on_frame! {
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

qlinear_kernels_scalar::w4a8_on_frame! {
    tiles: mutants::PAIR_TILES,
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
