//! The panel form ([`PanelsQ4`]) through a route: per channel and grouped by
//! 32, on every proven tier with panel tiles for the family, a call gives
//! the bits of the same call on the natural matrix (M = 1 to 17, on a
//! two-thread pool where there are threads, a bias included); a layer resolved for one family
//! refuses the other family's panel form, and a tier without panel tiles
//! refuses any, each with the error that names it and `y` untouched.

use qlinear_dispatch::{selftest_report, DispatchError, KernelFamily, LayerRoute, PanelsQ4, QuantLinearMode, Route};
use qlinear_quant_recipe::{GroupSize, QuantizedMatrixQ4};

fn values(len: usize, seed: u32) -> Vec<f32> {
    (0..len as u32)
        .map(|i| {
            let h = (i ^ seed.wrapping_mul(0x9E37_79B9)).wrapping_mul(0x85EB_CA6B);
            ((h >> 8) % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn a_panel_call_has_the_natural_calls_bits_on_every_tier_with_panel_tiles() {
    // (no threads on WASI: there the pool cannot be built and rayon runs inline)
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().ok();
    let install = |f: &mut (dyn FnMut() + Send)| match &pool {
        Some(pool) => pool.install(f),
        None => f(),
    };
    let (n, k) = (80, 608);
    let mut ran = 0;
    for (group, family) in [
        (GroupSize::PerChannel, KernelFamily::W4A8),
        (GroupSize::Group(32), KernelFamily::W4A8Grouped),
    ] {
        let w = QuantizedMatrixQ4::quantize(n, k, group, &values(n * k, 3)).unwrap();
        let panels = PanelsQ4::new(&w).expect("a panel shape");
        let bias = values(n, 5);
        for tier in selftest_report().proven_tiers() {
            let route = Route::for_tier(tier).unwrap().with_parallel_threshold(0);
            if !route.has_panels(family) {
                continue;
            }
            let layer = LayerRoute::on(route, QuantLinearMode::W4A8, &w).unwrap();
            assert!(layer.runs_panels(), "{family} on {tier}");
            for m in [1, 2, 5, 9, 17] {
                let x = values(m * k, 11 + m as u32);
                let (mut want, mut got) = (vec![0f32; m * n], vec![f32::NAN; m * n]);
                install(&mut || {
                    route.linear_q4_dynamic(&x, m, &w, &mut want).unwrap();
                    route.linear_q4_panels(&x, m, &panels, &mut got).unwrap();
                });
                assert_eq!(bits(&got), bits(&want), "{family} on {tier}, m = {m}");
                let (mut want, mut got) = (vec![0f32; m * n], vec![f32::NAN; m * n]);
                install(&mut || {
                    layer.forward(&x, m, &w, Some(&bias), &mut want).unwrap();
                    layer.forward_panels(&x, m, &panels, Some(&bias), &mut got).unwrap();
                });
                assert_eq!(bits(&got), bits(&want), "{family} on {tier}, m = {m}, with a bias");
                ran += 1;
            }
        }
    }
    // the scalar tier has both panel entries, and it is always proven
    assert!(ran >= 10, "{ran} calls compared");
}

#[test]
fn a_layer_refuses_the_other_familys_panel_form_and_y_stays() {
    let (n, k) = (32, 64);
    let x = values(k, 1);
    let per_channel = QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &values(n * k, 2)).unwrap();
    let grouped = QuantizedMatrixQ4::quantize(n, k, GroupSize::Group(32), &values(n * k, 2)).unwrap();
    let route = Route::for_tier(qlinear_dispatch::Int8Tier::Scalar).unwrap();
    for (resolved_for, other, resolved, got) in [
        (&per_channel, &grouped, KernelFamily::W4A8, KernelFamily::W4A8Grouped),
        (&grouped, &per_channel, KernelFamily::W4A8Grouped, KernelFamily::W4A8),
    ] {
        let layer = LayerRoute::on(route, QuantLinearMode::W4A8, resolved_for).unwrap();
        let mut y = vec![7f32; n];
        let err = layer
            .forward_panels(&x, 1, &PanelsQ4::new(other).unwrap(), None, &mut y)
            .unwrap_err();
        assert_eq!(err, DispatchError::RouteWeightMismatch { resolved, got });
        assert!(y.iter().all(|&v| v == 7.0), "y untouched");
    }
    // a W4A16 layer reads no panel form
    let layer = LayerRoute::on(route, QuantLinearMode::W4A16, &per_channel).unwrap();
    assert!(!layer.runs_panels());
    let mut y = vec![7f32; n];
    let err = layer
        .forward_panels(&x, 1, &PanelsQ4::new(&per_channel).unwrap(), None, &mut y)
        .unwrap_err();
    assert_eq!(
        err,
        DispatchError::NoPanelTiles {
            tier: qlinear_dispatch::Int8Tier::Scalar,
            family: KernelFamily::W4A16
        }
    );
    assert_eq!(err.to_string(), "tier scalar has no panel tiles for w4a16");
    assert!(y.iter().all(|&v| v == 7.0), "y untouched");
}

/// Per channel at a K long enough for a tile's partial sums to be folded
/// more than once (the VNNI one-row tile folds its high-nibble chains every
/// 1 024 groups of 32) and at the largest sums the codes allow: every
/// activation code 127 against every nibble 15 or 0 (weights all +1 or all
/// −1 in a row), and mixed values. Each proven tier with per-channel panel
/// tiles gives the scalar natural call's bits.
#[test]
fn per_channel_panels_keep_the_bits_at_long_k_and_extreme_sums() {
    let (n, k) = (32, 32 * 2048 + 96);
    let signs: Vec<f32> = (0..n * k).map(|i| if (i / k) % 2 == 0 { 1.0 } else { -1.0 }).collect();
    let scalar = Route::for_tier(qlinear_dispatch::Int8Tier::Scalar).unwrap();
    let mut ran = 0;
    for (weights, x) in [(signs, vec![1.0f32; 2 * k]), (values(n * k, 21), values(2 * k, 22))] {
        let w = QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &weights).unwrap();
        let panels = PanelsQ4::new(&w).expect("a panel shape");
        for m in [1, 2] {
            let mut want = vec![0f32; m * n];
            scalar.linear_q4_dynamic(&x[..m * k], m, &w, &mut want).unwrap();
            for tier in selftest_report().proven_tiers() {
                let route = Route::for_tier(tier).unwrap();
                if !route.has_panels(KernelFamily::W4A8) {
                    continue;
                }
                let mut got = vec![f32::NAN; m * n];
                route.linear_q4_panels(&x[..m * k], m, &panels, &mut got).unwrap();
                assert_eq!(bits(&got), bits(&want), "{tier}, m = {m}");
                ran += 1;
            }
        }
    }
    assert!(ran >= 4, "{ran} calls compared");
}
