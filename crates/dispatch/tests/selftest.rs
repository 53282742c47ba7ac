//! The selftest itself: it passes the real tiers, and it fails deliberately
//! wrong kernel tables (the mutants a SIMD tier could plausibly be).

use qlinear_dispatch::{
    default_census, prove_kernel_table, run_selftest, Int8Tier, KernelFamily, KernelPlanV0, Route, TierStatus,
};
use qlinear_kernels_core::{KernelTable, SCALAR};

fn failing_families(table: &KernelTable) -> Vec<KernelFamily> {
    prove_kernel_table(table, &default_census())
        .into_iter()
        .filter(|p| p.mismatch.is_some())
        .map(|p| p.family)
        .collect()
}

#[test]
fn the_scalar_table_proves_itself_against_exact_arithmetic() {
    assert_eq!(failing_families(&SCALAR), vec![]);
    let report = run_selftest(&[4096, 11008]);
    assert!(report.is_proven(Int8Tier::Scalar));
    assert!(report.census.contains(&11008) && report.census.contains(&1) && report.census.contains(&67));
    for t in &report.tiers {
        if let TierStatus::Absent(why) = &t.status {
            assert!(!why.is_empty());
        }
    }
    let text = report.to_string();
    assert!(text.contains("scalar") && text.contains("ok ("), "{text}");
}

/// `maddubs`-style saturation: pairs of products summed in i16 and clamped.
fn saturating_dot(a: &[i8], b: &[i8]) -> i32 {
    a.chunks(2)
        .zip(b.chunks(2))
        .map(|(x, w)| {
            let s: i32 = x.iter().zip(w).map(|(&p, &q)| i32::from(p) * i32::from(q)).sum();
            s.clamp(i16::MIN.into(), i16::MAX.into())
        })
        .fold(0i32, |acc, v| acc.wrapping_add(v))
}

#[test]
fn a_saturating_dot_fails_its_proof() {
    // 2·127·127 = 32258 fits i16: the sign trick is exact. Without it (u8 of a
    // negative code read as 129..255) the pair overflows.
    // pair sums saturate only when both products share a sign and exceed i16,
    // i.e. never for codes in [-127, 127] — so the saturating form itself must
    // pass, and the sign-trick-less form (|x| up to 128) must not.
    let exact_pairs = KernelTable {
        name: "pairs",
        dot_i8_i8: saturating_dot,
        ..SCALAR
    };
    assert_eq!(failing_families(&exact_pairs), vec![]);
    fn unsigned_activation(a: &[i8], b: &[i8]) -> i32 {
        // maddubs reading a negative i8 code as u8 (x + 256) without the sign trick
        a.chunks(2)
            .zip(b.chunks(2))
            .map(|(x, w)| {
                let s: i32 = x.iter().zip(w).map(|(&p, &q)| i32::from(p as u8) * i32::from(q)).sum();
                s.clamp(i16::MIN.into(), i16::MAX.into())
            })
            .sum()
    }
    let mutant = KernelTable {
        name: "mutant",
        dot_i8_i8: unsigned_activation,
        ..SCALAR
    };
    assert_eq!(failing_families(&mutant), vec![KernelFamily::DotI8I8]);
    fn i16_accumulator(a: &[i8], b: &[i8]) -> i32 {
        let s: i32 = a.iter().zip(b).map(|(&p, &q)| i32::from(p) * i32::from(q)).sum();
        s.clamp(i16::MIN.into(), i16::MAX.into())
    }
    let mutant = KernelTable {
        dot_i8_i8: i16_accumulator,
        ..SCALAR
    };
    let proofs = prove_kernel_table(&mutant, &default_census());
    let m = proofs
        .iter()
        .find(|p| p.family == KernelFamily::DotI8I8)
        .unwrap()
        .mismatch
        .clone()
        .unwrap();
    assert_eq!(m.k, 3, "the first K whose extreme sum leaves i16: {m}");
}

#[test]
fn a_wrapping_accumulator_fails_at_the_largest_k() {
    // exact up to 2^31 only by the bound; a kernel accumulating in a narrower
    // (here: 29-bit) register breaks only past K = 2^28 / 127² ≈ 16644 — the
    // census must reach that far.
    fn narrow(a: &[i8], b: &[i8]) -> i32 {
        let s: i32 = a.iter().zip(b).map(|(&p, &q)| i32::from(p) * i32::from(q)).sum();
        (s << 3) >> 3
    }
    let proofs = prove_kernel_table(
        &KernelTable {
            dot_i8_i8: narrow,
            ..SCALAR
        },
        &default_census(),
    );
    let m = proofs[0].mismatch.clone().expect("must fail");
    assert!(m.k > 16_644, "{m}");
}

#[test]
fn q4_mutants_fail() {
    // unsigned nibble without the bias correction (seed pitfall s01)
    fn no_bias(x: &[i8], p: &[u8]) -> i32 {
        (SCALAR.dot_i8_q4)(x, p) + 8 * x.iter().map(|&v| i32::from(v)).sum::<i32>()
    }
    // high nibble as the even column (s02)
    fn swapped(x: &[i8], p: &[u8]) -> i32 {
        let q: Vec<u8> = p.iter().map(|b| b.rotate_left(4)).collect();
        (SCALAR.dot_i8_q4)(x, &q)
    }
    for f in [no_bias as fn(&[i8], &[u8]) -> i32, swapped] {
        assert_eq!(
            failing_families(&KernelTable { dot_i8_q4: f, ..SCALAR }),
            vec![KernelFamily::DotI8Q4]
        );
    }
    // a float kernel that ignores the lane order (one running sum)
    use qlinear_kernels_core::{ActivationsF32, OutputTile};
    use qlinear_quant_recipe::QuantizedMatrix;
    fn chained(x: &ActivationsF32<'_>, w: &QuantizedMatrix, rows: std::ops::Range<usize>, y: &mut OutputTile<'_>) {
        for (j, r) in rows.enumerate() {
            for i in 0..x.m {
                let s: f32 = x.row(i).iter().zip(w.row(r)).map(|(a, &b)| a * f32::from(b)).sum();
                y.set(i, j, w.scales()[r] * s);
            }
        }
    }
    assert_eq!(
        failing_families(&KernelTable {
            gemm_w8a16: chained,
            ..SCALAR
        }),
        vec![KernelFamily::W8A16]
    );
}

/// The harness states what it expects of the CPU it runs on (`cargo xtask
/// test` sets these for each qemu CPU model): every tier in
/// `QLINEAR_EXPECT_PROVEN` is proven and every tier in `QLINEAR_EXPECT_ABSENT`
/// is reported absent and never dispatched.
#[test]
fn tiers_are_as_the_harness_expects() {
    let report = qlinear_dispatch::selftest_report();
    let list = |var: &str| -> Vec<Int8Tier> {
        std::env::var(var).ok().map_or(vec![], |v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap())
                .collect()
        })
    };
    for tier in list("QLINEAR_EXPECT_PROVEN") {
        assert!(report.is_proven(tier), "{tier} should be proven here:\n{report}");
        assert!(qlinear_dispatch::Route::for_tier(tier).is_ok());
    }
    for tier in list("QLINEAR_EXPECT_ABSENT") {
        let t = report.tiers.iter().find(|t| t.tier == tier).unwrap();
        assert!(
            matches!(t.status, TierStatus::Absent(_)),
            "{tier} should be absent here:\n{report}"
        );
        assert!(
            qlinear_dispatch::Route::for_tier(tier).is_err(),
            "an absent tier is never dispatched"
        );
        let plan = qlinear_dispatch::autotuned_plan().unwrap();
        for family in KernelFamily::GEMM {
            assert_ne!(plan.tier_for(family, 1), tier);
            assert_ne!(plan.tier_for(family, 16), tier);
        }
    }
    // availability agrees with the report, for every tier
    for tier in list("QLINEAR_EXPECT_PROVEN") {
        assert!(tier.is_available(), "{tier} expected proven but unavailable");
    }
    for tier in list("QLINEAR_EXPECT_ABSENT") {
        assert!(!tier.is_available(), "{tier} expected absent but available");
    }
}

/// The plan times every proven tier (on WebAssembly, the SIMD tiers where
/// one is proven) at both regimes in the documented shapes (decode on K = 4096, streamed past L2; batch at M = 16), and each
/// pick is the fastest of its own timings unless a wider tier is within the
/// regime's tie (`KernelPlanV0::tie`: 10 % at decode, 3 % for batches).
#[test]
fn the_plan_picks_its_fastest_timing_in_each_regime() {
    let plan = qlinear_dispatch::autotuned_plan().unwrap();
    if plan.forced.is_some() || plan.timings.is_empty() {
        eprintln!("skipped: the plan was forced or this platform has no clock");
        return;
    }
    let proven = qlinear_dispatch::selftest_report().proven_tiers();
    // W4A8 decode (grouped or per channel) is timed on the panel form
    // wherever a SIMD tier has the family's panel tiles; a tier without
    // them cannot run that form, so its time may be infinite, and then it
    // is never picked
    let has_panels = |t: Int8Tier, f: KernelFamily| Route::for_tier(t).is_ok_and(|r| r.has_panels(f));
    let panel_form = |f: KernelFamily| proven.iter().any(|&t| t != Int8Tier::Scalar && has_panels(t, f));
    for family in KernelFamily::GEMM {
        for m in [1, 16] {
            let timed: Vec<_> = plan.timings.iter().filter(|t| t.family == family && t.m == m).collect();
            // on WebAssembly the scalar tier is timed only where no SIMD
            // tier is proven (its code is optimized first: docs/NUMERICS.md §8)
            let simd = proven.iter().any(|&t| t != Int8Tier::Scalar);
            let expected: Vec<Int8Tier> = proven
                .iter()
                .copied()
                .filter(|&t| !(cfg!(target_arch = "wasm32") && simd && t == Int8Tier::Scalar))
                .collect();
            let mut tiers: Vec<Int8Tier> = timed.iter().map(|t| t.tier).collect();
            tiers.reverse();
            assert_eq!(tiers, expected, "{family} M={m}: one timing per timed tier");
            for t in &timed {
                let cannot_run = panel_form(family) && !has_panels(t.tier, family);
                assert!(
                    t.best_ns > 0.0 && (t.best_ns.is_finite() || cannot_run && plan.tier_for(family, m) != t.tier),
                    "{t:?}"
                );
                // decode: one 512 KiB buffer of the pool a call, 128 Q8 or 256 Q4 rows of 4096;
                // the float families on a quarter of the rows
                let q8 = matches!(family, KernelFamily::W8A8 | KernelFamily::W8A16);
                let (n, k) = match m {
                    1 if q8 => (128, 4096),
                    1 => (256, 4096),
                    _ => (64, 1024),
                };
                let n = if family.float_activations() { n / 4 } else { n };
                assert_eq!((t.n, t.k), (n, k), "{t:?}");
            }
            let pick = plan.tier_for(family, m);
            let picked = timed.iter().find(|t| t.tier == pick).expect("the pick was timed");
            let best = timed.iter().map(|t| t.best_ns).fold(f64::INFINITY, f64::min);
            let (tie, within) = (KernelPlanV0::tie(m), best * (1.0 + KernelPlanV0::tie(m)));
            // the widest tier within the tie of the best, or a narrower one
            // running the same kernel (the same time), and no wider tier
            // with a kernel of its own (a tier running another's kernel
            // carries that tier's very time) was within the tie
            let rank = |t: Int8Tier| Int8Tier::ALL.iter().position(|&a| a == t);
            for t in &timed {
                assert!(
                    !(rank(t.tier) > rank(pick) && t.best_ns <= within && t.best_ns != picked.best_ns),
                    "{family} M={m}: picked {pick}, but the wider {} was within {tie} of the best",
                    t.tier
                );
            }
            assert!(
                picked.best_ns <= within,
                "{family} M={m}: picked {pick} at {} ns, best {best} ns, tie {tie}",
                picked.best_ns
            );
        }
    }
}
