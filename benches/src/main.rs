//! `qlinear-bench` (run by `cargo xtask bench [--quick]`): the memory-bandwidth
//! probe, then every kernel family × tier × M × shape × threads × cache mode,
//! beside an f32 GEMM from the `gemm` crate and the scalar tier in the same
//! run. Prints one table and writes `target/qlinear-bench.json`.
//!
//! Cache modes: `hot` reuses one weight matrix (it may sit in L3: the kernel's
//! ceiling); `cold` cycles through distinct copies totalling at least 256 MiB
//! and at least twice the last-level cache, so every call streams its weights
//! from DRAM, as decoding through successive layers does.
// every `unsafe` block states why it holds, on the line above it
#![deny(clippy::undocumented_unsafe_blocks)]

use std::time::{Duration, Instant};

mod activations;
#[cfg(feature = "candle")]
mod candle;
mod load;
mod matrix;
mod per_call;
mod plan_check;
mod probe;
mod report;

use matrix::{matrix, measure};
use plan_check::{confirm_losses, plan_pairs};
use probe::cold_bytes;
use report::print_and_write;

use qlinear::tiers::{KernelFamily, Route, Weights};
use qlinear::{
    selftest_report, GroupSize, QScheme, QuantLinearMode, QuantizedMatrix, QuantizedMatrixQ4, QuantizedWeight,
};

struct Config {
    quick: bool,
    shapes: Vec<(usize, usize)>,
    budget: Duration,
}

/// Median wall time of `f` over repeated calls (after a warm-up), stopping at
/// the time budget (at least 5, at most 400 calls).
fn median_time(budget: Duration, mut f: impl FnMut(usize)) -> f64 {
    f(0);
    f(1);
    let start = Instant::now();
    let mut times = vec![];
    let mut i = 2;
    while (times.len() < 5 || start.elapsed() < budget) && times.len() < 400 {
        let t = Instant::now();
        f(i);
        times.push(t.elapsed().as_secs_f64());
        i += 1;
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2] * 1e6
}

fn data(len: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        })
        .collect()
}

fn copies(bytes: usize, cold: bool) -> usize {
    if cold {
        cold_bytes().div_ceil(bytes).max(2)
    } else {
        1
    }
}

/// The mode that runs a family's weights (the one whose
/// `QuantLinearMode::family_for` gives it).
fn mode_of(family: KernelFamily) -> QuantLinearMode {
    let schemes = [QScheme::Q8, QScheme::Q4, QScheme::Q4Grouped(32)];
    QuantLinearMode::ALL
        .into_iter()
        .find(|mode| schemes.iter().any(|&s| mode.family_for(s).ok() == Some(family)))
        .expect("every matrix family runs in a mode")
}

fn run_family(
    route: &Route,
    family: KernelFamily,
    w: &[QuantizedWeight],
    x: &[f32],
    m: usize,
    y: &mut [f32],
    i: usize,
) {
    route
        .quant_linear(mode_of(family), x, m, &w[i % w.len()], y)
        .expect("benchmark shapes are valid");
}

const FAMILIES: [(KernelFamily, &str); 6] = [
    (KernelFamily::W8A8, "w8a8"),
    (KernelFamily::W4A8, "w4a8"),
    (KernelFamily::W4A8Grouped, "w4a8_g32"),
    (KernelFamily::W8A16, "w8a16"),
    (KernelFamily::W4A16, "w4a16"),
    (KernelFamily::W4A16Grouped, "w4a16_g32"),
];

/// Quantized weights of one family (per channel, or groups of 32), in as
/// many copies as the cache mode needs (see [`copies`]), and the bytes of one.
fn weights(family: KernelFamily, n: usize, k: usize, wf: &[f32], cold: bool) -> (Vec<QuantizedWeight>, usize) {
    match family.weights() {
        Some(Weights::Q8) => {
            let q = QuantizedMatrix::quantize(n, k, wf).unwrap();
            let b = n * k + 4 * n;
            (vec![QuantizedWeight::Q8(q); copies(b, cold)], b)
        }
        _ => {
            let grouped = family.weights() == Some(Weights::Q4Grouped);
            let g = if grouped {
                GroupSize::Group(32)
            } else {
                GroupSize::PerChannel
            };
            let q = QuantizedMatrixQ4::quantize(n, k, g, wf).unwrap();
            let b = n * k / 2 + if grouped { 2 * n * k / 32 } else { 4 * n };
            (vec![QuantizedWeight::Q4(q); copies(b, cold)], b)
        }
    }
}

fn profile(fname: &str, n: usize, k: usize, m: usize, calls: usize) {
    let Some(&(family, _)) = FAMILIES.iter().find(|(_, f)| *f == fname) else {
        eprintln!("--profile: unknown family {fname}");
        std::process::exit(2);
    };
    let (w, _) = weights(family, n, k, &data(n * k, 1), false);
    let x = data(m * k, 3);
    let mut y = vec![0f32; m * n];
    let route = Route::planned(family, m).unwrap();
    eprintln!("profiling {fname} on {} ({calls} calls, M={m}, {n}x{k})", route.tier());
    let mut us: Vec<f64> = (0..calls)
        .map(|i| {
            let t = Instant::now();
            run_family(&route, family, &w, &x, m, &mut y, i);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    println!("checksum {}", y.iter().sum::<f32>());
    // the fastest call is the least disturbed by a noisy machine: a
    // same-binary-pair A/B compares minima of alternated runs
    us.sort_by(f64::total_cmp);
    if let (Some(min), Some(max)) = (us.first(), us.last()) {
        println!("µs per call: min {min:.1} median {:.1} max {max:.1}", us[us.len() / 2]);
    }
}

/// One measured configuration: its labels and a runner that returns the
/// median µs of one measurement within a time budget.
struct Case {
    family: String,
    tier: String,
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
    cache: &'static str,
    weight_bytes: usize,
    run: Box<dyn FnMut(Duration) -> f64>,
}

/// One measurement of a case in one repeat, with that repeat's probe.
#[derive(Clone)]
struct Sample {
    case: usize,
    repeat: usize,
    median_us: f64,
    probe_gbps: f64,
}

/// The M values of a family: decode (1), a batch (16), and prefill (64,
/// 256) for the integer families and the f32 baseline.
fn ms_of(fname: &str) -> &'static [usize] {
    match fname {
        "f32" | "w8a8" | "w4a8" | "w4a8_g32" => &[1, 16, 64, 256],
        _ => &[1, 16],
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The runner's flags: those followed by a value, then the switches.
const VALUED: [&str; 10] = [
    "--only",
    "--m",
    "--shape",
    "--repeat",
    "--compare-with",
    "--compare-json",
    "--load",
    "--profile-forward",
    "--profile",
    "--calls",
];
const SWITCHES: [&str; 4] = ["--quick", "--in-place", "--per-call", "--activations"];

/// Why `args` (without the program) cannot run: an unknown argument, or a
/// flag without its value. A typo must not start a run of many minutes.
fn bad_argument(args: &[String]) -> Option<String> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if VALUED.contains(&a) {
            if args.get(i + 1).is_none() {
                return Some(format!("{a} needs a value"));
            }
            i += 2;
        } else if SWITCHES.contains(&a) {
            i += 1;
        } else {
            return Some(format!("unknown argument {a:?}"));
        }
    }
    None
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(why) = bad_argument(&args[1..]) {
        usage(&args, &why);
    }
    let quick = args.iter().any(|a| a == "--quick");
    // --only FAMILY[,FAMILY] --shape NxK --m M: a slice of the matrix, for iterating on one kernel
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let only: Option<Vec<String>> = opt("--only").map(|v| v.split(',').map(String::from).collect());
    let only_m: Option<usize> = opt("--m").and_then(|v| v.parse().ok());
    let only_shape: Option<(usize, usize)> = opt("--shape").and_then(|v| {
        v.split_once('x')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
    });
    let repeat: usize = opt("--repeat").and_then(|v| v.parse().ok()).unwrap_or(1).max(1);
    // --compare-with BIN --compare-json FILE: after each repeat of this
    // runner, run BIN (another revision's qlinear-bench, built by `cargo
    // xtask bench --compare REV`) once with the same slice, and read FILE
    let compare: Option<(String, String)> = opt("--compare-with").zip(opt("--compare-json"));
    if let Some(path) = opt("--load") {
        // `--load FILE [--in-place]`: the time and peak RSS of loading a
        // converted model, copied or read in place (load.rs)
        if let Err(e) = load::run(&path, args.iter().any(|a| a == "--in-place")) {
            eprintln!("qlinear-bench: {e}");
            std::process::exit(1);
        }
        return;
    }
    if args.iter().any(|a| a == "--activations") {
        // `--activations`: the activation side of a call, piece by piece,
        // on every proven tier (activations.rs)
        activations::run();
        return;
    }
    if args.iter().any(|a| a == "--per-call") {
        // `--per-call [--shape NxK] [--repeat R]`: Linear::forward against
        // the bare kernel entry at the small models' shapes (per_call.rs)
        let budget = Duration::from_millis(if quick { 60 } else { 200 });
        return per_call::run(repeat.max(3), budget, only_shape);
    }
    if let Some(label) = opt("--profile-forward") {
        let (n, k) = only_shape.unwrap_or((576, 576));
        let calls: usize = opt("--calls").and_then(|v| v.parse().ok()).unwrap_or(10);
        if let Err(e) = per_call::profile_forward(&label, n, k, only_m.unwrap_or(1), calls) {
            eprintln!("qlinear-bench: {e}");
            std::process::exit(2);
        }
        return;
    }
    if let Some(fname) = opt("--profile") {
        // `--profile FAMILY [--shape NxK] [--m M] [--calls C]`: C calls of the
        // plan's kernel on one weight matrix and nothing else, for
        // `valgrind --tool=callgrind` (instruction counts per call).
        let (n, k) = only_shape.unwrap_or((4096, 4096));
        let m = only_m.unwrap_or(1);
        let calls: usize = opt("--calls").and_then(|v| v.parse().ok()).unwrap_or(10);
        return profile(&fname, n, k, m, calls);
    }
    let cfg = Config {
        quick,
        shapes: match only_shape {
            Some(s) => vec![s],
            None if quick => vec![(4096, 4096), (11008, 4096)],
            None => vec![(2048, 2048), (4096, 4096), (11008, 4096)],
        },
        budget: Duration::from_millis(if quick { 120 } else { 400 }),
    };
    let report = selftest_report();
    let tiers = report.proven_tiers();
    eprintln!("{report}");
    let cpu = qlinear::tiers::cpu_model();
    println!("CPU: {cpu}");
    println!(
        "cold mode cycles through at least {} MiB of distinct weights",
        cold_bytes() >> 20
    );
    let wanted = |fname: &str| only.as_ref().is_none_or(|o| o.iter().any(|f| f == fname));
    let m_wanted = |m: usize| only_m.is_none_or(|o| o == m);

    let mut cases = matrix(&cfg, &tiers, &wanted, &m_wanted);
    let (samples, other) = measure(&mut cases, &cfg, repeat, compare.as_ref(), &args);
    let med = |c: usize| case_median(&samples, c);
    let mut pairs = plan_pairs(&cases, &med);
    confirm_losses(&mut cases, &mut pairs, cfg.budget);
    print_and_write(&cpu, &cases, &samples, &pairs, repeat, cfg.quick, &other);
}

/// Prints the usage (after `why`, unless `--help` was asked) and exits:
/// 0 for `--help`, 2 for a bad argument.
fn usage(args: &[String], why: &str) -> ! {
    let help = args.iter().any(|a| a == "--help" || a == "-h");
    if !help {
        eprintln!("qlinear-bench: {why}");
    }
    eprintln!(
        "usage: qlinear-bench [--quick] [--repeat N] [--only FAMILY,…] [--m M] [--shape NxK] \
         [--compare-with BIN --compare-json FILE] | --per-call [--shape NxK] [--repeat N] | --activations | \
         --load FILE [--in-place] | --profile FAMILY|--profile-forward CONFIG [--shape NxK] [--m M] [--calls N] \
         (the module documentation of benches/src/main.rs says what each does)"
    );
    std::process::exit(if help { 0 } else { 2 });
}

/// Case `c`'s median over the repeats of the matrix.
fn case_median(samples: &[Sample], c: usize) -> f64 {
    median(
        &mut samples
            .iter()
            .filter(|s| s.case == c)
            .map(|s| s.median_us)
            .collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::bad_argument;

    #[test]
    fn unknown_arguments_and_missing_values_are_refused() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(bad_argument(&v(&["--quick", "--repeat", "3", "--m", "1"])), None);
        assert_eq!(
            bad_argument(&v(&["--help"])),
            Some("unknown argument \"--help\"".into())
        );
        assert_eq!(
            bad_argument(&v(&["--quick", "--reapeat", "3"])),
            Some("unknown argument \"--reapeat\"".into())
        );
        assert_eq!(bad_argument(&v(&["--shape"])), Some("--shape needs a value".into()));
    }
}
