//! Deliberately wrong AVX2 kernels — the plausible mistakes of a `maddubs`
//! implementation — must fail the selftest's proof function.
#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use qlinear_dispatch::{default_census, prove_kernel_table, KernelFamily, Mismatch};
use qlinear_kernels_scalar::{KernelTable, SCALAR};

fn first_failure(table: &KernelTable, family: KernelFamily) -> Option<Mismatch> {
    let proofs = prove_kernel_table(table, &default_census());
    for p in &proofs {
        if p.family != family {
            assert!(p.mismatch.is_none(), "only {family} was mutated, {} failed", p.family);
        }
    }
    proofs.into_iter().find(|p| p.family == family).and_then(|p| p.mismatch)
}

/// Keeps the i16 pair sums in a saturating i16 accumulator instead of widening
/// to i32 every block.
#[target_feature(enable = "avx2")]
fn saturating_i16_accumulator(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = _mm256_setzero_si256();
    let mut c = 0;
    while c + 32 <= a.len() {
        // SAFETY: c + 32 <= a.len() = b.len() (asserted by the caller).
        unsafe {
            let x = _mm256_loadu_si256(a.as_ptr().add(c).cast());
            let w = _mm256_loadu_si256(b.as_ptr().add(c).cast());
            acc = _mm256_adds_epi16(acc, _mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(w, x)));
        }
        c += 32;
    }
    let wide = _mm256_madd_epi16(acc, _mm256_set1_epi16(1));
    let mut lanes = [0i32; 8];
    // SAFETY: a 32-byte store into a local [i32; 8].
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), wide) };
    lanes.iter().sum::<i32>() + (SCALAR.dot_i8_i8)(&a[c..], &b[c..])
}

/// Feeds the signed activation to `maddubs`'s unsigned operand (no sign trick).
#[target_feature(enable = "avx2")]
fn no_sign_trick(a: &[i8], b: &[i8]) -> i32 {
    let mut acc = _mm256_setzero_si256();
    let mut c = 0;
    while c + 32 <= a.len() {
        // SAFETY: c + 32 <= a.len() = b.len() (asserted by the caller).
        unsafe {
            let x = _mm256_loadu_si256(a.as_ptr().add(c).cast());
            let w = _mm256_loadu_si256(b.as_ptr().add(c).cast());
            let p = _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), _mm256_set1_epi16(1));
            acc = _mm256_add_epi32(acc, p);
        }
        c += 32;
    }
    let mut lanes = [0i32; 8];
    // SAFETY: a 32-byte store into a local [i32; 8].
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc) };
    lanes.iter().sum::<i32>() + (SCALAR.dot_i8_i8)(&a[c..], &b[c..])
}

fn call_saturating(a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len());
    // SAFETY: the test runs this only after detecting AVX2.
    unsafe { saturating_i16_accumulator(a, b) }
}

fn call_no_sign(a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len());
    // SAFETY: the test runs this only after detecting AVX2.
    unsafe { no_sign_trick(a, b) }
}

#[test]
fn saturating_and_unsigned_avx2_variants_fail_the_proof() {
    if !is_x86_feature_detected!("avx2") {
        eprintln!("skipped: this CPU has no AVX2");
        return;
    }
    let m = first_failure(
        &KernelTable {
            dot_i8_i8: call_saturating,
            ..SCALAR
        },
        KernelFamily::DotI8I8,
    )
    .expect("a saturating i16 accumulator must fail");
    assert_eq!(m.k, 64, "two full blocks of ±127 overflow i16 first: {m}");
    let m = first_failure(
        &KernelTable {
            dot_i8_i8: call_no_sign,
            ..SCALAR
        },
        KernelFamily::DotI8I8,
    )
    .expect("maddubs without the sign trick must fail");
    assert_eq!(m.k, 32, "{m}");
}

#[test]
fn the_real_x86_tables_pass() {
    for table in [
        qlinear_kernels_x86::avx2_table(),
        qlinear_kernels_x86::avx512vnni_table(),
    ]
    .into_iter()
    .flatten()
    {
        let proofs = prove_kernel_table(table, &default_census());
        assert!(
            proofs.iter().all(|p| p.mismatch.is_none()),
            "{}: {proofs:?}",
            table.name
        );
    }
}
