//! `qlinear-bench --per-call` (run by `cargo xtask bench --per-call`): what
//! one `Linear::forward` costs at the shapes of the small models (MiniLM,
//! SmolLM2) and at 4096 × 4096, beside the bare kernel family entry on the
//! same weights, hot (the weights in cache), M = 1 and 16, 1 and 2 threads.
//!
//! The bare entry is the planned tier's table entry called once over every
//! output feature on the calling thread, the layer's bias added in its
//! output store as `forward` adds it, with the activations already
//! quantized and summed: the frame and its micro-kernels and nothing else.
//! `forward` adds the checks, the activation rows' quantization and sums,
//! the row split over the pool and the scratch buffers. At 1 thread, `1 −
//! bare / forward` is the share of a call spent outside the kernels; at 2
//! threads the ratio also holds what the split gains.
//!
//! A third runner quantizes the rows and forms their sums before each bare
//! call, with the route's quantizer and the tier's sums as `forward` does,
//! so the share outside the kernels splits in two: the activation rows'
//! own work, which grows with M · K (at N = 192 it is most of that share),
//! and the rest, checks and dispatch, the call's fixed cost.
//!
//! The weight bytes' rate is set against an L2 read probe taken before
//! and after the table (a hot call's ceiling), and the same run's DRAM
//! probe is printed beside it.
//!
//! The runners are alternated (forward, bare, bare with the rows, …) in
//! rounds, and each figure is the median of its rounds' medians, so a
//! drifting machine moves them alike.

use std::time::Duration;

use qlinear::tiers::PanelsQ4;
use qlinear::{GroupSize, Linear, QScheme, QuantLinearMode, QuantizedWeight};
use qlinear_kernels_core::{activation_group_sums_with, ActivationsF32, ActivationsQ8, Gemm, OutputTile};
use serde_json::json;

use crate::probe::{bandwidth_probe, cache_read_probe};
use crate::{data, median, median_time};

/// The shapes timed, `(N, K)`: MiniLM's (384 and 1536 wide), SmolLM2's (192,
/// 576 and 1536, with K = 576 or 1536) and a 7B-class square.
const SHAPES: [(usize, usize); 7] = [
    (192, 576),
    (384, 384),
    (1536, 384),
    (576, 576),
    (1536, 576),
    (576, 1536),
    (4096, 4096),
];

/// The configurations timed: label, scheme and mode.
const CONFIGS: [(&str, QScheme, QuantLinearMode); 5] = [
    ("w8a8", QScheme::Q8, QuantLinearMode::W8A8),
    ("w4a8", QScheme::Q4, QuantLinearMode::W4A8),
    ("w4a8_g32", QScheme::Q4Grouped(32), QuantLinearMode::W4A8),
    ("w8a16", QScheme::Q8, QuantLinearMode::W8A16),
    ("w4a16_g32", QScheme::Q4Grouped(32), QuantLinearMode::W4A16),
];

/// A timed call writing `[m, n]` outputs.
type Runner = Box<dyn FnMut(&mut [f32])>;

/// The bare entry of `layer`'s route for `m` rows: its table's function over
/// all `n` outputs on this thread, with the layer's bias added in the
/// output store as `forward` adds it; the panel entry on the panel form
/// where the layer holds its weight so (W4A8 on a tier with panel tiles),
/// the entry `forward` itself reaches. The weight is a copy of the
/// layer's.
///
/// With `rows`, each call first quantizes the activation rows and forms
/// their sums with the route's own quantizer and the tier's sums, as
/// `forward` does (the integer families; the float families' entries take
/// the rows as they are): `forward` less this is its checks and dispatch,
/// and this less the bare entry is the activation rows' own work, which
/// grows with M · K. Without, the rows are quantized once, beforehand.
fn bare_runner(layer: &Linear, x: &[f32], m: usize, rows: bool) -> Runner {
    let route = *layer.route().route(m);
    let (n, k) = (layer.out_features(), layer.in_features());
    let table = route.table().expect("a proven tier");
    let gemm = table.gemm(layer.route().family()).expect("a matrix family");
    let w = layer.weight().clone();
    let bias = layer.bias().map(<[f32]>::to_vec).unwrap_or_default();
    let x = x.to_vec();
    let sum_group = match &w {
        QuantizedWeight::Q4(q) => match q.group_size() {
            GroupSize::Group(g) => g,
            GroupSize::PerChannel => k,
        },
        QuantizedWeight::Q8(_) => k,
    };
    let integer = matches!(gemm, Gemm::Q8Q8(_) | Gemm::Q8Q4(_));
    let (mut codes, mut scales, mut sums) = (vec![0i8; m * k], vec![0f32; m], vec![]);
    let xq = x.clone();
    let quantize = move |codes: &mut [i8], scales: &mut [f32], sums: &mut Vec<i32>| {
        route
            .quantize_activations(&xq, m, codes, scales)
            .expect("finite activations");
        activation_group_sums_with(table.group_sums, codes, m, k, sum_group, sums);
    };
    quantize(&mut codes, &mut scales, &mut sums);
    let panels = match (layer.holds_panels(), table.panels(layer.route().family()), &w) {
        (true, Some(f), QuantizedWeight::Q4(q)) => {
            Some((f, PanelsQ4::new(q).expect("a layer that holds panels has a panel form")))
        }
        _ => None,
    };
    Box::new(move |y: &mut [f32]| {
        if rows && integer {
            quantize(&mut codes, &mut scales, &mut sums);
        }
        let aq = ActivationsQ8::new(m, k, &codes, &scales, &sums, sum_group).expect("rows of the shape");
        let t = &mut OutputTile { y, ld: n, bias: &bias };
        if let Some((f, panels)) = &panels {
            return f(&aq, panels, 0..n, t);
        }
        let af = ActivationsF32::new(m, k, &x).expect("rows of the shape");
        match (gemm, &w) {
            (Gemm::Q8Q8(f), QuantizedWeight::Q8(w)) => f(&aq, w, 0..n, t),
            (Gemm::F32Q8(f), QuantizedWeight::Q8(w)) => f(&af, w, 0..n, t),
            (Gemm::Q8Q4(f), QuantizedWeight::Q4(w)) => f(&aq, w, 0..n, t),
            (Gemm::F32Q4(f), QuantizedWeight::Q4(w)) => f(&af, w, 0..n, t),
            _ => unreachable!("the family's entry takes the layer's weight"),
        }
    })
}

/// `qlinear-bench --profile-forward CONFIG --shape NxK --m M --calls C`:
/// `C` calls of `Linear::forward` (with a bias) of one configuration
/// ([`CONFIGS`]' labels) on the calling thread and nothing else, for
/// `tools/callgrind_share.py`, which runs it under callgrind at two call
/// counts and splits the difference between the micro-kernels and the rest.
pub fn profile_forward(label: &str, n: usize, k: usize, m: usize, calls: usize) -> Result<(), String> {
    let (_, scheme, mode) = CONFIGS.iter().find(|(l, _, _)| *l == label).ok_or_else(|| {
        format!("--profile-forward: unknown configuration {label} (one of w8a8, w4a8, w4a8_g32, w8a16, w4a16_g32)")
    })?;
    let layer = Linear::from_f32(*scheme, n, k, &data(n * k, 1), Some(&data(n, 4)))
        .and_then(|l| l.with_mode(*mode))
        .map_err(|e| e.to_string())?;
    let x = data(m * k, 2);
    let mut y = vec![0f32; m * n];
    eprintln!(
        "profiling forward {label} on {} ({calls} calls, M={m}, {n}x{k})",
        layer.route().route(m).tier()
    );
    let mut us = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = std::time::Instant::now();
        layer.forward(&x, m, &mut y).map_err(|e| e.to_string())?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    println!("checksum {}", y.iter().sum::<f32>());
    // as `--profile`: the fastest call is the least disturbed by a noisy
    // machine, so an A/B of two binaries compares alternated minima
    us.sort_by(f64::total_cmp);
    if let (Some(min), Some(max)) = (us.first(), us.last()) {
        println!("µs per call: min {min:.1} median {:.1} max {max:.1}", us[us.len() / 2]);
    }
    Ok(())
}

/// The bytes of a quantized weight: codes and scales.
fn weight_bytes(w: &QuantizedWeight) -> usize {
    match w {
        QuantizedWeight::Q8(q) => q.codes().len() + 4 * q.scales().len(),
        QuantizedWeight::Q4(q) => {
            q.packed().len()
                + match q.scales() {
                    qlinear::Q4Scales::PerChannel(s) => 4 * s.len(),
                    qlinear::Q4Scales::Grouped { scales, .. } => 2 * scales.len(),
                }
        }
    }
}

/// Runs the per-call table: prints it and writes the workspace's
/// `target/qlinear-per-call.json`.
pub fn run(rounds: usize, budget: Duration, only_shape: Option<(usize, usize)>) {
    let cpu = qlinear::tiers::cpu_model();
    println!("CPU: {cpu}");
    // the ceiling of a hot call: one thread reading 256 KiB from L2, taken
    // before and after the table so a drifting machine shows
    let probe_before = cache_read_probe(256 << 10);
    // and beside it the same run's DRAM probe (one thread, 1 GiB): how far
    // a hot call's ceiling is above a cold one's on this machine
    let dram = bandwidth_probe(1);
    println!(
        "Linear::forward against the bare kernel entry, hot, median µs of {rounds} alternated rounds (min–max of the rounds)"
    );
    // printed once the closing probe is in, against the higher of the two
    let mut lines: Vec<(String, Option<f64>)> = vec![];
    let pools: Vec<rayon::ThreadPool> = [1, 2]
        .iter()
        .map(|&t| rayon::ThreadPoolBuilder::new().num_threads(t).build().expect("a pool"))
        .collect();
    let mut rows = vec![];
    let shapes: Vec<(usize, usize)> = match only_shape {
        Some(s) => vec![s],
        None => SHAPES.to_vec(),
    };
    for (n, k) in shapes {
        let wf = data(n * k, 1);
        let bias = data(n, 4);
        for (label, scheme, mode) in CONFIGS {
            let layer = Linear::from_f32(scheme, n, k, &wf, Some(&bias))
                .and_then(|l| l.with_mode(mode))
                .expect("benchmark shapes are valid");
            for m in [1usize, 16] {
                let call = Call {
                    layer: &layer,
                    label,
                    n,
                    k,
                    m,
                    rounds,
                    budget,
                    pools: &pools,
                };
                time_call(&call, &mut lines, &mut rows);
            }
        }
    }
    let probe_after = cache_read_probe(256 << 10);
    print_table(&lines, probe_before, probe_after, dram);
    let out = json!({
        "cpu": cpu,
        "l2_probe_gbps": [probe_before, probe_after],
        "dram_probe_gbps": dram,
        "rounds": rounds,
        "budget_ms": budget.as_millis() as u64,
        "rows": rows,
    });
    crate::report::write_json("qlinear-per-call.json", &out);
}

/// One configuration of [`run`]'s table: a layer at M rows, timed in
/// `rounds` alternated rounds on each of `pools`.
struct Call<'a> {
    layer: &'a Linear,
    label: &'a str,
    n: usize,
    k: usize,
    m: usize,
    rounds: usize,
    budget: Duration,
    pools: &'a [rayon::ThreadPool],
}

/// Times `call`: per round `Linear::forward` at 1 and 2 threads, the bare
/// entry, then the bare entry quantizing the rows each call; one table
/// line and one JSON row per thread count.
fn time_call(call: &Call<'_>, lines: &mut Vec<(String, Option<f64>)>, rows: &mut Vec<serde_json::Value>) {
    let Call {
        layer,
        label,
        n,
        k,
        m,
        rounds,
        budget,
        pools,
    } = *call;
    let x = data(m * k, 2);
    let mut y = vec![0f32; m * n];
    let mut bare = bare_runner(layer, &x, m, false);
    let mut bare_rows = bare_runner(layer, &x, m, true);
    let (mut f1, mut f2, mut b, mut r) = (vec![], vec![], vec![], vec![]);
    for _ in 0..rounds {
        for (pool, out) in pools.iter().zip([&mut f1, &mut f2]) {
            out.push(pool.install(|| median_time(budget, |_| layer.forward(&x, m, &mut y).expect("valid shapes"))));
        }
        b.push(median_time(budget, |_| bare(&mut y)));
        r.push(median_time(budget, |_| bare_rows(&mut y)));
    }
    let tier = layer.route().route(m).tier();
    let range = |v: &[f64]| {
        let (lo, hi) = v.iter().fold((f64::MAX, 0f64), |(a, c), &t| (a.min(t), c.max(t)));
        format!("{lo:.1}–{hi:.1}")
    };
    let bm = median(&mut b.clone());
    let rm = median(&mut r.clone());
    for (threads, f) in [(1usize, &f1), (2, &f2)] {
        let fm = median(&mut f.clone());
        // the split of the time outside the kernels: the rows'
        // quantization (`bare_rows` less `bare`), and the rest
        let outside = if threads == 1 {
            format!(
                "{:.0} % (rows {:.0} %, checks and dispatch {:.0} %)",
                100.0 * (1.0 - bm / fm),
                100.0 * (rm - bm) / fm,
                100.0 * (fm - rm) / fm
            )
        } else {
            format!("bare / forward {:.2}×", bm / fm)
        };
        // the weight bytes one call reads over its time (at M = 1,
        // where the weights are all a call reads)
        let gbps = weight_bytes(layer.weight()) as f64 / fm / 1e3;
        lines.push((
            format!(
                "| {n} × {k} | {label} | {m} | {tier} | {threads} | {fm:.1} ({}) | {bm:.1} ({}) | {outside} |",
                range(f),
                range(&b),
            ),
            (m == 1).then_some(gbps),
        ));
        rows.push(json!({
            "n": n, "k": k, "config": label, "m": m, "tier": tier.name(),
            "threads": threads, "forward_us": fm, "forward_rounds_us": f,
            "bare_us": bm, "bare_rounds_us": b, "bare_rows_us": rm, "bare_rows_rounds_us": r,
            "weight_gbps": gbps,
        }));
    }
}

/// The table's rows (each line's last column, the weight GB/s at M = 1, as a
/// share of the higher of the two L2 probes), after the probes.
fn print_table(lines: &[(String, Option<f64>)], probe_before: f64, probe_after: f64, dram: f64) {
    let probe = probe_before.max(probe_after);
    println!(
        "L2 read probe (one thread, 256 KiB, before and after the table): {probe_before:.1} and {probe_after:.1} GB/s; \
         DRAM probe (one thread, 1 GiB, before the table): {dram:.1} GB/s"
    );
    println!(
        "| shape N × K | config | M | tier | threads | forward µs | bare kernel µs (1 t) | outside the kernel (the activation rows' quantization; the rest) | weight GB/s (% of the higher probe) |"
    );
    println!("|---|---|--:|---|--:|--:|--:|--:|--:|");
    for (line, gbps) in lines {
        match gbps {
            Some(g) => println!("{line} {g:.1} ({:.0} %) |", 100.0 * g / probe),
            None => println!("{line} — |"),
        }
    }
}
