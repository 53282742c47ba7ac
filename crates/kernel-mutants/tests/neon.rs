//! A deliberately wrong SDOT kernel — the nibbles zipped in the wrong lane
//! order, so each pair of columns swaps its weights — must fail the selftest.
#![cfg(target_arch = "aarch64")]

use std::arch::aarch64::*;
use std::arch::asm;

use qlinear_dispatch::{default_census, prove_kernel_table, KernelFamily};
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

#[test]
fn the_real_neon_tables_pass() {
    let tables = [qlinear_kernels_neon::neon_table(), qlinear_kernels_neon::sdot_table()];
    for table in tables.into_iter().flatten() {
        let proofs = prove_kernel_table(table, &default_census());
        assert!(
            proofs.iter().all(|p| p.mismatch.is_none()),
            "{}: {proofs:?}",
            table.name
        );
    }
}
