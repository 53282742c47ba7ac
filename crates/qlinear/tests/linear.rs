//! The runtime API: `Linear`, `Error`, `init` (`ModelFile`: `model_file.rs`).

use qlinear::*;

mod support;
use support::{bits, weights};

/// A layer equals the kernel plus the bias added after it, in every mode and
/// scheme, and its default mode follows the weight.
#[test]
fn forward_is_the_kernel_then_the_bias() {
    let (n, k, m) = (37, 96, 5);
    let w = weights(n, k, 1);
    let b: Vec<f32> = weights(1, n, 2);
    let x = weights(m, k, 3);
    for (scheme, modes) in [
        (QScheme::Q8, [QuantLinearMode::W8A8, QuantLinearMode::W8A16]),
        (QScheme::Q4, [QuantLinearMode::W4A8, QuantLinearMode::W4A16]),
        (QScheme::Q4Grouped(32), [QuantLinearMode::W4A8, QuantLinearMode::W4A16]),
    ] {
        let layer = Linear::from_f32(scheme, n, k, &w, Some(&b)).unwrap();
        assert_eq!(layer.mode(), modes[0], "{scheme}: default mode");
        assert_eq!((layer.in_features(), layer.out_features()), (k, n));
        let qw = QuantizedWeight::quantize(scheme, n, k, &w).unwrap();
        assert_eq!(layer.weight(), &qw);
        for mode in modes {
            let layer = layer.clone().with_mode(mode).unwrap();
            let mut want = vec![0f32; m * n];
            quant_linear(mode, &x, m, &qw, &mut want).unwrap();
            for row in want.chunks_exact_mut(n) {
                row.iter_mut().zip(&b).for_each(|(v, bj)| *v += bj);
            }
            let mut y = vec![f32::NAN; m * n];
            layer.forward(&x, m, &mut y).unwrap();
            assert_eq!(bits(&y), bits(&want), "{scheme} {mode}");
        }
    }
}

/// `forward` runs on the caller's rayon pool, and the bits do not depend on
/// its size (a shape large enough to be split across threads).
#[test]
#[cfg_attr(target_family = "wasm", ignore = "WASI has no threads: rayon runs inline there")]
fn same_bits_on_a_one_and_a_two_thread_pool() {
    let (n, k) = (512, 1024);
    let w = weights(n, k, 4);
    let b = weights(1, n, 6);
    for (scheme, m) in [
        (QScheme::Q8, 3),
        (QScheme::Q4Grouped(32), 3),
        (QScheme::Q4, 1),
        (QScheme::Q4Grouped(32), 1),
    ] {
        let x = weights(m, k, 5);
        let layer = Linear::from_f32(scheme, n, k, &w, Some(&b)).unwrap();
        // the bias is added as each task stores its outputs: the bits of
        // the kernel's output plus the bias afterwards
        let mut want = vec![0f32; m * n];
        quant_linear(layer.mode(), &x, m, layer.weight(), &mut want).unwrap();
        for row in want.chunks_exact_mut(n) {
            row.iter_mut().zip(&b).for_each(|(v, bj)| *v += bj);
        }
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let mut y = vec![0f32; m * n];
            let seen = pool.install(|| {
                layer.forward(&x, m, &mut y).unwrap();
                rayon::current_num_threads()
            });
            assert_eq!(seen, threads);
            y
        };
        assert_eq!(bits(&run(1)), bits(&want), "{scheme} m={m}: one thread");
        assert_eq!(bits(&run(2)), bits(&want), "{scheme} m={m}: two threads");
    }
}

/// A layer resolves its kernels once, when it is built: the plan's tier for
/// its family at decode and in batches. Pinned to any proven tier, its
/// output is bit for bit that tier's family entry point (`Route::linear_*`)
/// and the planned free function, at M = 1 and M = 16 and on shapes with
/// column and row tails.
#[test]
fn a_layer_resolves_its_route_once_and_runs_the_family_entry() {
    use qlinear::tiers::{KernelFamily, Route};
    let plan = autotuned_plan().unwrap();
    for (n, k) in [(37, 96), (24, 224), (9, 64)] {
        let w = weights(n, k, 11);
        for (scheme, mode) in [
            (QScheme::Q8, QuantLinearMode::W8A8),
            (QScheme::Q8, QuantLinearMode::W8A16),
            (QScheme::Q4, QuantLinearMode::W4A8),
            (QScheme::Q4, QuantLinearMode::W4A16),
            (QScheme::Q4Grouped(32), QuantLinearMode::W4A8),
            (QScheme::Q4Grouped(32), QuantLinearMode::W4A16),
        ] {
            let grouped = matches!(scheme, QScheme::Q4Grouped(_));
            let family = match (mode, grouped) {
                (QuantLinearMode::W8A8, _) => KernelFamily::W8A8,
                (QuantLinearMode::W8A16, _) => KernelFamily::W8A16,
                (QuantLinearMode::W4A8, false) => KernelFamily::W4A8,
                (QuantLinearMode::W4A8, true) => KernelFamily::W4A8Grouped,
                (_, false) => KernelFamily::W4A16,
                (_, true) => KernelFamily::W4A16Grouped,
            };
            let layer = Linear::from_f32(scheme, n, k, &w, None)
                .unwrap()
                .with_mode(mode)
                .unwrap();
            let r = layer.route();
            assert_eq!((r.mode(), r.family()), (mode, family), "{scheme} {mode}");
            assert_eq!(r.route(1).tier(), plan.tier_for(family, 1), "{family} decode");
            assert_eq!(r.route(16).tier(), plan.tier_for(family, 16), "{family} batch");
            let qw = layer.weight().clone();
            for m in [1, 16, 3] {
                let x = weights(m, k, 12 + m as u32);
                let mut planned = vec![f32::NAN; m * n];
                match (&qw, mode) {
                    (QuantizedWeight::Q8(q), QuantLinearMode::W8A8) => linear_q8_dynamic(&x, m, q, &mut planned),
                    (QuantizedWeight::Q8(q), _) => linear_w8a16(&x, m, q, &mut planned),
                    (QuantizedWeight::Q4(q), QuantLinearMode::W4A8) => linear_q4_dynamic(&x, m, q, &mut planned),
                    (QuantizedWeight::Q4(q), _) => linear_w4a16(&x, m, q, &mut planned),
                }
                .unwrap();
                let mut y = vec![f32::NAN; m * n];
                layer.forward(&x, m, &mut y).unwrap();
                assert_eq!(bits(&y), bits(&planned), "{scheme} {mode} m={m} [{n}, {k}]: planned");
                for tier in selftest_report().proven_tiers() {
                    let route = Route::for_tier(tier).unwrap();
                    let mut want = vec![f32::NAN; m * n];
                    match (&qw, mode) {
                        (QuantizedWeight::Q8(q), QuantLinearMode::W8A8) => route.linear_q8_dynamic(&x, m, q, &mut want),
                        (QuantizedWeight::Q8(q), _) => route.linear_w8a16(&x, m, q, &mut want),
                        (QuantizedWeight::Q4(q), QuantLinearMode::W4A8) => route.linear_q4_dynamic(&x, m, q, &mut want),
                        (QuantizedWeight::Q4(q), _) => route.linear_w4a16(&x, m, q, &mut want),
                    }
                    .unwrap();
                    let pinned = layer.clone().on_tier(tier).unwrap();
                    assert_eq!(pinned.route().route(m).tier(), tier);
                    let mut y = vec![f32::NAN; m * n];
                    pinned.forward(&x, m, &mut y).unwrap();
                    assert_eq!(bits(&y), bits(&want), "{scheme} {mode} m={m} [{n}, {k}] on {tier}");
                    // the tier law: every tier gives the scalar bits
                    assert_eq!(
                        bits(&y),
                        bits(&planned),
                        "{scheme} {mode} m={m} on {tier} against the plan"
                    );
                }
            }
        }
    }
}

/// A route resolved for one family refuses a weight of another, naming
/// both, and leaves `y` alone; a tier that is not here is refused when the
/// layer is pinned to it.
#[test]
fn a_route_refuses_a_weight_of_another_family() {
    use qlinear::tiers::{KernelFamily, LayerRoute};
    let w = weights(8, 64, 13);
    let per_channel = QuantizedWeight::quantize(QScheme::Q4, 8, 64, &w).unwrap();
    let grouped = QuantizedWeight::quantize(QScheme::Q4Grouped(32), 8, 64, &w).unwrap();
    let route = LayerRoute::planned(QuantLinearMode::W4A8, &per_channel).unwrap();
    let mut y = vec![7f32; 8];
    let e = route.forward(&[0.5; 64], 1, &grouped, None, &mut y).unwrap_err();
    assert_eq!(
        e,
        DispatchError::RouteWeightMismatch {
            resolved: KernelFamily::W4A8,
            got: KernelFamily::W4A8Grouped
        }
    );
    assert!(
        e.to_string().contains("w4a8") && e.to_string().contains("grouped"),
        "{e}"
    );
    let q8 = QuantizedWeight::quantize(QScheme::Q8, 8, 64, &w).unwrap();
    let e = route.forward(&[0.5; 64], 1, &q8, None, &mut y).unwrap_err();
    assert!(matches!(e, DispatchError::ModeWeightMismatch { .. }), "{e}");
    for short in [&[1.0f32; 7][..], &[]] {
        let e = route
            .forward(&[0.5; 64], 1, &per_channel, Some(short), &mut y)
            .unwrap_err();
        assert_eq!(
            e,
            DispatchError::Shape {
                what: "bias [n]",
                expected: 8,
                actual: short.len()
            }
        );
    }
    assert!(y.iter().all(|&v| v == 7.0), "y was written on error");
    let e = LayerRoute::planned(QuantLinearMode::W8A8, &grouped).unwrap_err();
    assert!(
        matches!(e, DispatchError::ModeWeightMismatch { needs: "Q8", .. }),
        "{e}"
    );
    let absent = Int8Tier::ALL.iter().find(|t| !selftest_report().is_proven(**t));
    if let Some(&tier) = absent {
        let layer = Linear::new("absent", grouped.clone(), None).unwrap();
        let e = layer.on_tier(tier).unwrap_err();
        assert!(
            matches!(e, Error::Dispatch(DispatchError::TierUnavailable { .. })),
            "{e}"
        );
    }
}

/// The activation buffers a thread keeps between calls never leak one
/// call's values into the next: calls of growing and shrinking shapes, and
/// calls nested inside a parallel loop over layers (where a worker may run a
/// second layer's call while the first waits), give the bits of a lone call.
#[test]
fn reused_activation_buffers_change_no_bits() {
    use rayon::prelude::*;
    let shapes = [(64, 512, 16), (8, 64, 1), (40, 96, 3), (64, 512, 1), (8, 32, 16)];
    let layers: Vec<(Linear, Vec<f32>, usize)> = shapes
        .iter()
        .enumerate()
        .flat_map(|(i, &(n, k, m))| {
            [QScheme::Q8, QScheme::Q4, QScheme::Q4Grouped(32)].map(|scheme| {
                let layer = Linear::from_f32(scheme, n, k, &weights(n, k, 20 + i as u32), None).unwrap();
                (layer, weights(m, k, 40 + i as u32), m)
            })
        })
        .collect();
    let call = |l: &Linear, x: &[f32], m: usize| {
        let mut y = vec![0f32; m * l.out_features()];
        l.forward(x, m, &mut y).unwrap();
        bits(&y)
    };
    let lone: Vec<Vec<u32>> = layers
        .iter()
        .map(|(l, x, m)| {
            if cfg!(target_family = "wasm") {
                // WASI has no threads: the first pass over the shapes, in order
                call(l, x, *m)
            } else {
                // a fresh thread: its buffers are new
                std::thread::scope(|s| s.spawn(|| call(l, x, *m)).join().unwrap())
            }
        })
        .collect();
    for _ in 0..2 {
        for ((l, x, m), want) in layers.iter().zip(&lone) {
            let mut y = vec![f32::NAN; m * l.out_features()];
            l.forward(x, *m, &mut y).unwrap();
            assert_eq!(&bits(&y), want, "{} after other shapes", l.weight().scheme());
        }
    }
    let nested: Vec<Vec<u32>> = layers
        .par_iter()
        .map(|(l, x, m)| {
            let mut y = vec![f32::NAN; m * l.out_features()];
            l.forward(x, *m, &mut y).unwrap();
            bits(&y)
        })
        .collect();
    assert_eq!(nested, lone, "calls nested in a parallel loop");
}

/// A mode that cannot run the weight is refused when the layer is built.
#[test]
fn a_mismatched_mode_is_refused_at_build() {
    let w = weights(4, 8, 6);
    let q8 = Linear::from_f32(QScheme::Q8, 4, 8, &w, None).unwrap();
    let e = q8.with_mode(QuantLinearMode::W4A8).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ModeMismatch {
                needs: "Q4",
                scheme: QScheme::Q8,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("w4a8") && e.to_string().contains("q8"), "{e}");
    let q4 = Linear::from_f32(QScheme::Q4, 4, 8, &w, None).unwrap();
    let e = q4.with_mode(QuantLinearMode::W8A16).unwrap_err();
    assert!(matches!(e, Error::ModeMismatch { needs: "Q8", .. }), "{e}");
}

/// Every error names the layer and leaves the output untouched.
#[test]
fn errors_name_the_layer_and_leave_y_alone() {
    let w = weights(4, 8, 7);
    let e = Linear::from_f32(QScheme::Q8, 4, 8, &w, Some(&[1.0; 3])).unwrap_err();
    assert!(
        matches!(
            e,
            Error::BiasLength {
                expected: 4,
                found: 3,
                ..
            }
        ),
        "{e}"
    );
    let e = Linear::from_f32(QScheme::Q8, 4, 8, &w, Some(&[1.0, f32::NAN, 0.0, 0.0])).unwrap_err();
    assert!(matches!(e, Error::NonFiniteBias { index: 1, .. }), "{e}");
    let e = Linear::from_f32(QScheme::Q8, 4, 8, &w[..31], None).unwrap_err();
    assert!(
        matches!(
            e,
            Error::WeightLength {
                n: 4,
                k: 8,
                found: 31,
                ..
            }
        ),
        "{e}"
    );
    let e = Linear::from_f32(QScheme::Q4Grouped(3), 4, 8, &w, None).unwrap_err();
    assert!(matches!(e, Error::Recipe(_)), "{e}");
    let mut bad = w.clone();
    bad[13] = f32::INFINITY;
    let e = Linear::from_f32(QScheme::Q8, 4, 8, &bad, None).unwrap_err();
    assert!(e.to_string().contains("row 1, column 5"), "{e}");

    let layer = Linear::from_f32(QScheme::Q8, 4, 8, &w, None)
        .unwrap()
        .with_name("blocks.3.mlp");
    let mut y = vec![7f32; 8];
    let e = layer.forward(&[0.0; 15], 2, &mut y).unwrap_err();
    assert!(
        matches!(e, Error::Forward { .. }) && e.to_string().starts_with("blocks.3.mlp: "),
        "{e}"
    );
    let mut x = vec![0.5f32; 16];
    x[9] = f32::NAN;
    let e = layer.forward(&x, 2, &mut y).unwrap_err();
    assert!(e.to_string().contains("row 1, column 1"), "{e}");
    assert!(y.iter().all(|&v| v == 7.0), "y was written on error");
}

/// `init` proves and plans on purpose, and returns the same reports the
/// first kernel call would have made.
#[test]
fn init_returns_the_process_reports() {
    let report = init().unwrap();
    assert_eq!(&report.selftest, selftest_report());
    assert_eq!(&report.plan, autotuned_plan().unwrap());
    assert!(report.selftest.is_proven(Int8Tier::Scalar));
    assert!(report.to_string().contains("selftest:"));
}

/// A W4A8 layer grouped by 32 or per channel holds its weight in the panel
/// form exactly where its routes' tiers have panel tiles for its family and
/// the shape has one (N a multiple of 16, K of 32), on the plan's tiers and
/// pinned to each proven
/// tier; either way its outputs are bit for bit the natural matrix's through
/// the family entry point (`quant_linear` on `weight()`), at M = 1 to 20 (the
/// panel tiles take 8 or 4 activation rows, then 1) and at 64, 65 and 131
/// (the panel entry holds its rows' views 64 rows at a time, so blocks that
/// end on a block's bound, past it and one row into a third). Its natural weight is the one
/// it was built from, and another mode takes the natural layout back.
#[test]
fn a_layer_in_the_panel_form_has_the_natural_layouts_bits() {
    let shapes = [(48, 96), (576, 576), (40, 96), (32, 100)];
    let grouped = shapes.map(|(n, k)| (n, k, QScheme::Q4Grouped(if k % 32 == 0 { 32 } else { 4 })));
    let per_channel = shapes.map(|(n, k)| (n, k, QScheme::Q4));
    for (n, k, scheme) in grouped.into_iter().chain(per_channel) {
        let w = weights(n, k, 7);
        let natural = QuantizedWeight::quantize(scheme, n, k, &w).unwrap();
        let planned = Linear::new("p", natural.clone(), None).unwrap();
        let pinned = selftest_report()
            .proven_tiers()
            .into_iter()
            .map(|t| planned.clone().on_tier(t).unwrap());
        let has_form = n % 16 == 0 && k % 32 == 0;
        for layer in std::iter::once(planned.clone()).chain(pinned) {
            let tier = layer.route().route(1).tier();
            assert_eq!(
                layer.holds_panels(),
                has_form && layer.route().runs_panels(),
                "{n}x{k} on {tier}"
            );
            assert_eq!(layer.scheme(), scheme);
            assert_eq!((layer.out_features(), layer.in_features()), (n, k));
            for m in [1, 2, 3, 4, 5, 8, 9, 20, 64, 65, 131] {
                let x = weights(m, k, 9 + m as u32);
                let mut want = vec![0f32; m * n];
                quant_linear(QuantLinearMode::W4A8, &x, m, &natural, &mut want).unwrap();
                let mut got = vec![f32::NAN; m * n];
                layer.forward(&x, m, &mut got).unwrap();
                assert_eq!(bits(&got), bits(&want), "{n}x{k} m={m} on {tier}");
            }
            assert_eq!(layer.weight(), &natural, "{n}x{k} on {tier}");
        }
        let w16 = planned.with_mode(QuantLinearMode::W4A16).unwrap();
        assert!(!w16.holds_panels() && w16.weight() == &natural, "{n}x{k} in W4A16");
    }
}

/// Where some proven tier has panel tiles (the scalar tier always has), a
/// 576-wide q4g32 or q4 layer pinned to it holds the panel form: the test
/// above cannot pass by never preparing one.
#[test]
fn a_tier_with_panel_tiles_prepares_the_layer() {
    let (n, k) = (576, 576);
    for scheme in [QScheme::Q4Grouped(32), QScheme::Q4] {
        let layer = Linear::from_f32(scheme, n, k, &weights(n, k, 3), None)
            .unwrap()
            .on_tier(Int8Tier::Scalar)
            .unwrap();
        assert!(layer.route().runs_panels() && layer.holds_panels(), "{scheme:?}");
        assert_eq!(layer.scheme(), scheme);
    }
}

/// `forward_rows` computes a range of output features on the calling thread
/// with the bits of the same outputs of `forward`, in every scheme and mode,
/// on the plan's tiers and pinned to each proven tier (the panel form
/// included), at M = 1 to 17, over ranges that start and end inside a panel
/// of 16 rows, empty ones, and a split of every row into three parts. A
/// range past `n` and a `y` of the whole width are errors naming the layer,
/// with `y` untouched.
#[test]
fn a_range_of_rows_has_the_bits_of_the_whole_call() {
    let (n, k) = (80, 96);
    let w = weights(n, k, 21);
    let b = weights(1, n, 22);
    for (scheme, modes) in [
        (QScheme::Q8, [QuantLinearMode::W8A8, QuantLinearMode::W8A16]),
        (QScheme::Q4, [QuantLinearMode::W4A8, QuantLinearMode::W4A16]),
        (QScheme::Q4Grouped(32), [QuantLinearMode::W4A8, QuantLinearMode::W4A16]),
    ] {
        let built = Linear::from_f32(scheme, n, k, &w, Some(&b)).unwrap();
        for mode in modes {
            let planned = built.clone().with_mode(mode).unwrap().with_name("blk.2.ffn_up");
            let pinned = selftest_report()
                .proven_tiers()
                .into_iter()
                .map(|t| planned.clone().on_tier(t).unwrap());
            for layer in std::iter::once(planned.clone()).chain(pinned) {
                let tier = layer.route().route(1).tier();
                for m in [1, 2, 5, 17] {
                    let x = weights(m, k, 23 + m as u32);
                    let mut whole = vec![0f32; m * n];
                    layer.forward(&x, m, &mut whole).unwrap();
                    let thirds = [0..32, 32..48, 48..n];
                    for rows in [0..n, 0..16, 5..23, 16..80, 73..80, 40..40, 0..0, n..n]
                        .into_iter()
                        .chain(thirds)
                    {
                        let width = rows.len();
                        let mut got = vec![f32::NAN; m * width];
                        layer.forward_rows(&x, m, rows.clone(), &mut got).unwrap();
                        let want: Vec<f32> = whole.chunks_exact(n).flat_map(|r| r[rows.clone()].to_vec()).collect();
                        assert_eq!(
                            bits(&got),
                            bits(&want),
                            "{scheme} {mode} on {tier}, m={m}, rows {rows:?} (panels: {})",
                            layer.holds_panels()
                        );
                    }
                }
                let x = weights(1, k, 30);
                let mut y = vec![7f32; 9];
                #[allow(clippy::reversed_empty_ranges)]
                for rows in [72..81, 90..99, 9..0] {
                    let e = layer
                        .forward_rows(&x, 1, rows.clone(), &mut y[..rows.len()])
                        .unwrap_err();
                    assert!(
                        e.to_string().starts_with("blk.2.ffn_up: ")
                            && e.to_string().contains(&format!("{}..{}", rows.start, rows.end))
                            && e.to_string().contains("80 output features"),
                        "{e}"
                    );
                }
                let e = layer.forward_rows(&x, 1, 0..8, &mut y).unwrap_err();
                assert!(e.to_string().contains("y [m, rows]: expected 8 elements, got 9"), "{e}");
                assert!(y.iter().all(|&v| v == 7.0), "y was written on error");
            }
        }
    }
}

/// An `m` whose `[m, k]` overflows is a shape error that names the buffer
/// and the slice's true length, in every mode and for both entry points (it
/// said "expected `usize::MAX` elements, got 0"), and `y` is left alone.
#[test]
fn an_overflowing_batch_is_refused_with_the_true_length() {
    let w = weights(4, 64, 5);
    // usize::MAX: 2⁶⁴ − 1 here, 2³² − 1 on wasm32
    let want = format!("expected {} elements, got 64", usize::MAX);
    for (scheme, mode) in [
        (QScheme::Q8, QuantLinearMode::W8A8),
        (QScheme::Q8, QuantLinearMode::W8A16),
        (QScheme::Q4, QuantLinearMode::W4A8),
        (QScheme::Q4Grouped(32), QuantLinearMode::W4A8),
        (QScheme::Q4Grouped(32), QuantLinearMode::W4A16),
    ] {
        let layer = Linear::from_f32(scheme, 4, 64, &w, None)
            .unwrap()
            .with_mode(mode)
            .unwrap();
        let mut y = vec![7f32; 4];
        for m in [usize::MAX, usize::MAX / 64 + 1] {
            let e = layer.forward(&[0.5; 64], m, &mut y).unwrap_err().to_string();
            assert!(e.contains(&want), "{scheme} {mode}: {e}");
            let e = layer.forward_rows(&[0.5; 64], m, 0..4, &mut y).unwrap_err().to_string();
            assert!(e.contains(&want), "{scheme} {mode}: {e}");
        }
        assert!(y.iter().all(|&v| v == 7.0), "y was written on error");
    }
}
