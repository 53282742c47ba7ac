//! Deliberately wrong baseline NEON kernels must fail the selftest's proof:
//! a dot that sums four products in an i16 lane before widening, and a
//! W4A8 16 × 4 tile that stores its quads' sums as 4 × 4 tiles. Beside
//! them, every aarch64 table this CPU has passes.

use std::arch::aarch64::*;

use qlinear_kernels_scalar::frame::Tile;
use qlinear_kernels_scalar::proof::mutants::{failing, first_failure};
use qlinear_kernels_scalar::proof::{default_census, prove_kernel_table};
use qlinear_kernels_scalar::{KernelFamily, KernelTable, SCALAR};

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
