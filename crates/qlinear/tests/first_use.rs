//! The selftest and the plan take one kernel family at a time, when it is
//! first used or named at start-up (`docs/NUMERICS.md` §8). Its own test
//! binary, so that no other test has proven or planned anything first.

use qlinear::tiers::{KernelFamily, TierStatus};
use qlinear::{init_for, selftest_report, Census, Int8Tier, Linear, QScheme};

/// The families each present tier's report lists.
fn proven_families(report: &qlinear::SelftestReport) -> Vec<Vec<KernelFamily>> {
    report
        .tiers
        .iter()
        .filter_map(|t| match &t.status {
            TierStatus::Absent(_) => None,
            TierStatus::Proven(p) | TierStatus::Failed(p) => Some(p.iter().map(|f| f.family).collect()),
        })
        .collect()
}

#[test]
fn a_family_is_proven_and_planned_when_named_or_first_used() {
    let present = Int8Tier::ALL.iter().filter(|t| t.is_available()).count();
    // start-up with a census of one family: it and the activation
    // quantizer it needs are proven on every present tier, nothing else
    let census = Census {
        ks: vec![96],
        families: vec![KernelFamily::W8A8],
    };
    let init = init_for(&census).unwrap();
    let w8a8 = vec![KernelFamily::QuantizeActivations, KernelFamily::W8A8];
    assert_eq!(proven_families(&init.selftest), vec![w8a8.clone(); present], "{init}");
    assert!(init.selftest.all_present_passed(), "{init}");
    assert!(init.selftest.census.contains(&96) && !init.selftest.census.contains(&4096));
    assert!(init.plan.holds(KernelFamily::W8A8) && init.plan.holds(KernelFamily::DotI8I8));
    for family in [KernelFamily::W4A8, KernelFamily::W4A8Grouped, KernelFamily::W8A16] {
        assert!(
            !init.plan.holds(family),
            "{family} was planned before its first use:\n{init}"
        );
    }
    let w8a8_tiers = (
        init.plan.tier_for(KernelFamily::W8A8, 1),
        init.plan.tier_for(KernelFamily::W8A8, 16),
    );
    assert!(init.selftest.is_proven(w8a8_tiers.0) && init.selftest.is_proven(w8a8_tiers.1));
    // the unplanned families print as such
    assert!(init.to_string().contains(" -"), "{init}");

    // a layer of another family proves and plans it when it is built
    let (n, k) = (8, 64);
    let w: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.37).sin()).collect();
    let layer = Linear::from_f32(QScheme::Q4Grouped(32), n, k, &w, None).unwrap();
    let family = layer.route().family();
    let after = init_for(&Census::default()).unwrap();
    for families in proven_families(&after.selftest) {
        assert!(
            families.contains(&family),
            "{family} not proven at its first use:\n{after}"
        );
        assert!(!families.contains(&KernelFamily::W8A16) || family == KernelFamily::W8A16);
    }
    assert!(after.plan.holds(family) && after.plan.holds(KernelFamily::W8A8));
    // the W8A8 decision did not change, nor the census's K values
    assert_eq!(
        (
            after.plan.tier_for(KernelFamily::W8A8, 1),
            after.plan.tier_for(KernelFamily::W8A8, 16)
        ),
        w8a8_tiers
    );
    assert_eq!(after.selftest.census, init.selftest.census);
    let mut y = vec![0f32; n];
    layer.forward(&w[..k], 1, &mut y).unwrap();

    // the whole table on request: every family on every present tier
    let full = selftest_report();
    assert_eq!(
        proven_families(full),
        vec![KernelFamily::ALL.to_vec(); present],
        "{full}"
    );
    assert_eq!(full.census, init.selftest.census);
}
