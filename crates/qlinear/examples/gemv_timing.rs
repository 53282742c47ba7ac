//! One-thread W8A8 and W4A8 GEMV timings (M = 1, hot weights, activations
//! quantized per call), W4A8 per channel and grouped by 32 at M = 1 on
//! SmolLM2's layer shapes (grouped also in the panel form where the tier
//! has panel tiles), and W4A8 per channel and grouped at M = 16 on a small
//! layer, on every proven tier, for comparing a WebAssembly
//! build under Node.js with the native build on the same machine
//! (`cargo xtask wasm-bench`, `docs/benchmarks/history.md`). The weights and inputs
//! are the browser page's (`web/src/lib.rs`), so the three agree.
//!
//! Prints one line per case: `family tier n k median_us min_us max_us`,
//! then `done` (so that a runner can tell a complete output from a cut one).

use std::time::Instant;

use qlinear::tiers::{KernelFamily, PanelsQ4, Route};
use qlinear::{selftest_report, GroupSize, QuantizedMatrix, QuantizedMatrixQ4};

fn main() {
    let calls = 31;
    gemvs(calls);
    small_gemvs(calls * 4);
    batches(calls);
    println!("done");
}

/// Times `run` `calls` times after one warm-up and prints its line.
fn time(calls: usize, label: &str, mut run: impl FnMut()) {
    run();
    let mut times: Vec<f64> = (0..calls)
        .map(|_| {
            let t = Instant::now();
            run();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    println!(
        "{label} {:.1} {:.1} {:.1}",
        times[calls / 2],
        times[0],
        times[calls - 1]
    );
}

/// W4A8 per channel and grouped by 32 at M = 1 on SmolLM2's layer shapes
/// (issue 21: grouped within 1.3× of per channel on every tier), printed
/// as families `w4a8_m1` and `w4a8_g32_m1`; and W8A8 there and at its LM
/// head's 49152 × 576 (`w8a8_m1`), which the page's profile found slow.
fn small_gemvs(calls: usize) {
    for (n, k) in [(576usize, 576usize), (1536, 576), (576, 1536), (49152, 576)] {
        let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 2001) as f32 - 1000.0) * 1e-3).collect();
        let x: Vec<f32> = (0..k).map(|i| ((i * 31 % 101) as f32 - 50.0) * 0.01).collect();
        let per_channel = QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).expect("finite weights");
        let grouped = QuantizedMatrixQ4::quantize(n, k, GroupSize::Group(32), &w).expect("finite weights");
        let q8 = QuantizedMatrix::quantize(n, k, &w).expect("finite weights");
        let mut y = vec![0f32; n];
        for tier in selftest_report().proven_tiers() {
            let route = Route::for_tier(tier)
                .expect("proven")
                .with_parallel_threshold(usize::MAX);
            time(calls, &format!("w8a8_m1 {tier} {n} {k}"), || {
                route.linear_q8_dynamic(&x, 1, &q8, &mut y).expect("valid shapes")
            });
            for (family, q4) in [("w4a8_m1", &per_channel), ("w4a8_g32_m1", &grouped)] {
                time(calls, &format!("{family} {tier} {n} {k}"), || {
                    route.linear_q4_dynamic(&x, 1, q4, &mut y).expect("valid shapes")
                });
            }
            // the panel forms, which `Linear` holds where the tier has panel
            // tiles (`w4a8p_m1`, `w4a8_g32p_m1`)
            for (family, name, q4) in [
                (KernelFamily::W4A8, "w4a8p_m1", &per_channel),
                (KernelFamily::W4A8Grouped, "w4a8_g32p_m1", &grouped),
            ] {
                if route.has_panels(family) {
                    let panels = PanelsQ4::new(q4).expect("a panel shape");
                    time(calls, &format!("{name} {tier} {n} {k}"), || {
                        route.linear_q4_panels(&x, 1, &panels, &mut y).expect("valid shapes")
                    });
                }
            }
        }
    }
}

/// W4A8 at M = 16 on a small model's layer (SmolLM2's 576 × 576), where
/// the frame's work per tile call shows: printed as family `w4a8_m16`.
fn batches(calls: usize) {
    let (m, n, k) = (16usize, 576usize, 576usize);
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 2001) as f32 - 1000.0) * 1e-3).collect();
    let x: Vec<f32> = (0..m * k).map(|i| ((i * 31 % 101) as f32 - 50.0) * 0.01).collect();
    let q4 = QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).expect("finite weights");
    let grouped = QuantizedMatrixQ4::quantize(n, k, GroupSize::Group(32), &w).expect("finite weights");
    let panels = PanelsQ4::new(&grouped).expect("a panel shape");
    let mut y = vec![0f32; m * n];
    for tier in selftest_report().proven_tiers() {
        let route = Route::for_tier(tier)
            .expect("proven")
            .with_parallel_threshold(usize::MAX);
        time(calls, &format!("w4a8_m16 {tier} {n} {k}"), || {
            route.linear_q4_dynamic(&x, m, &q4, &mut y).expect("valid shapes")
        });
        // grouped by 32, natural and (where the tier has panel tiles) panels
        time(calls, &format!("w4a8_g32_m16 {tier} {n} {k}"), || {
            route.linear_q4_dynamic(&x, m, &grouped, &mut y).expect("valid shapes")
        });
        if route.has_panels(KernelFamily::W4A8Grouped) {
            time(calls, &format!("w4a8_g32p_m16 {tier} {n} {k}"), || {
                route.linear_q4_panels(&x, m, &panels, &mut y).expect("valid shapes")
            });
        }
        if route.has_panels(KernelFamily::W4A8) {
            let panels = PanelsQ4::new(&q4).expect("a panel shape");
            time(calls, &format!("w4a8p_m16 {tier} {n} {k}"), || {
                route.linear_q4_panels(&x, m, &panels, &mut y).expect("valid shapes")
            });
        }
    }
}

fn gemvs(calls: usize) {
    for (n, k) in [(4096usize, 4096usize), (11008, 4096)] {
        let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 2001) as f32 - 1000.0) * 1e-3).collect();
        let x: Vec<f32> = (0..k).map(|i| ((i * 31 % 101) as f32 - 50.0) * 0.01).collect();
        let q8 = QuantizedMatrix::quantize(n, k, &w).expect("finite weights");
        let q4 = QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).expect("finite weights");
        drop(w);
        let mut y = vec![0f32; n];
        for tier in selftest_report().proven_tiers() {
            // one thread: the browser and WASI have no others
            let route = Route::for_tier(tier)
                .expect("proven")
                .with_parallel_threshold(usize::MAX);
            for family in ["w8a8", "w4a8"] {
                time(calls, &format!("{family} {tier} {n} {k}"), || {
                    match family {
                        "w8a8" => route.linear_q8_dynamic(&x, 1, &q8, &mut y),
                        _ => route.linear_q4_dynamic(&x, 1, &q4, &mut y),
                    }
                    .expect("valid shapes")
                });
            }
        }
    }
}
