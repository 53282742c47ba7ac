//! Deliberately wrong baseline NEON kernels must fail the selftest's proof:
//! a dot that sums four products in an i16 lane before widening, a W4A8
//! 16 × 4 tile that stores its quads' sums as 4 × 4 tiles, and a W4A8
//! grouped panel tile that pairs its rows crosswise. Beside them, every
//! aarch64 table this CPU has passes.

use std::arch::aarch64::*;

use qlinear_kernels_core::abi::tile::Tile;
use qlinear_kernels_core::proof::mutants::{failing, first_failure};
use qlinear_kernels_core::proof::{default_census, prove_kernel_table};
use qlinear_kernels_core::{KernelFamily, KernelTable, SCALAR};

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
    let m = first_failure(
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
    let tables = [crate::neon_table(), crate::sdot_table(), crate::i8mm_table()];
    for table in tables.into_iter().flatten() {
        let proofs = prove_kernel_table(table, &default_census());
        assert!(
            proofs.iter().all(|p| p.mismatch.is_none()),
            "{}: {proofs:?}",
            table.name
        );
    }
}

// the W4A8 16 × 4 tile with its quads stored as 4 × 4 tiles, and the
// tier's own 16 × 4 tile (`crate::int::quads_mutant_tables`)
quads_mutant_tables!(neon, quads_stored_as_4x4, quads_in_turn);

#[test]
fn a_w4a8_16x4_tile_storing_its_quads_as_4x4_tiles_fails_the_proof() {
    assert_eq!(failing(&quads_stored_as_4x4::TABLE), vec![KernelFamily::W4A8]);
    assert_eq!(failing(&quads_in_turn::TABLE), vec![]);
}

// the W8A8 16 × 1 decode tile with an accumulator reused, and the tier's
// own (`crate::int::w8a8_16x1_mutant_tables`)
w8a8_16x1_mutant_tables!(
    crate::neon::W8A8,
    crate::neon::w8a8_kernels,
    crate::neon::entry::w8a8_16x1,
    w8a8_16x1_reused,
    w8a8_16x1_right
);

#[test]
fn a_w8a8_16x1_tile_reusing_an_accumulator_fails_the_proof() {
    assert_eq!(failing(&w8a8_16x1_reused::TABLE), vec![KernelFamily::W8A8]);
    assert_eq!(failing(&w8a8_16x1_right::TABLE), vec![]);
}

/// The tier's panel tile with each group's widened pairs added lane by
/// lane (`add` where `addp` goes): lane 0 then holds half of row 0's sum
/// and half of row 2's.
mod rows_crossed {
    use std::arch::aarch64::*;

    use crate::neon::panels::{group_add, GroupSums};

    #[inline]
    #[target_feature(enable = "neon")]
    fn group_rows(acc: GroupSums) -> int32x4_t {
        vaddq_s32(vpaddlq_s16(acc.0), vpaddlq_s16(acc.1))
    }

    neon_panel_tile!(group_rows);
}

fn rows_crossed_x4(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[half::f16], out: &mut [f32]) {
    // SAFETY: every aarch64 CPU has ASIMD (the baseline tier's feature).
    unsafe { rows_crossed::tile_panel::<4>(x, sums, panel, s, out) }
}

fn rows_crossed_x1(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[half::f16], out: &mut [f32]) {
    // SAFETY: as for `rows_crossed_x4`.
    unsafe { rows_crossed::tile_panel::<1>(x, sums, panel, s, out) }
}

fn rows_crossed_pc_x4(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], out: &mut [f32]) {
    // SAFETY: as for `rows_crossed_x4`.
    unsafe { rows_crossed::tile_panel_per_channel::<4>(x, sums, panel, out) }
}

fn rows_crossed_pc_x1(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], out: &mut [f32]) {
    // SAFETY: as for `rows_crossed_x4`.
    unsafe { rows_crossed::tile_panel_per_channel::<1>(x, sums, panel, out) }
}

panel_tiles!(
    panels_crossed,
    super::rows_crossed_x4,
    super::rows_crossed_x1,
    super::rows_crossed_pc_x4,
    super::rows_crossed_pc_x1
);
panel_tiles!(
    panels_right,
    crate::neon::entry::panel_16x4,
    crate::neon::entry::panel_16x1,
    crate::neon::entry::panel_pc_16x4,
    crate::neon::entry::panel_pc_16x1
);

#[test]
fn a_neon_panel_tile_pairing_its_rows_crosswise_fails_the_proof() {
    assert_eq!(
        failing(&panels_crossed::TABLE),
        vec![KernelFamily::W4A8, KernelFamily::W4A8Grouped]
    );
    assert_eq!(failing(&panels_right::TABLE), vec![]);
}

/// The group sums' slips on this tier's plan (four groups of 32 reduced
/// together; other groups the scalar tier's) fail the proof.
#[test]
fn the_group_sums_fail_the_proof_on_their_slips() {
    qlinear_kernels_core::proof::mutants::assert_group_sums_slips_fail::<4, 0>();
}
