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

#[cfg(feature = "candle")]
mod candle;
mod load;
mod per_call;

use qlinear::tiers::{KernelFamily, PanelsQ4, Route};
use qlinear::{
    selftest_report, GroupSize, Int8Tier, QuantLinearMode, QuantizedMatrix, QuantizedMatrixQ4, QuantizedWeight,
};
use serde_json::json;

/// At least 256 MiB of distinct weights for the cold mode, and at least twice
/// the last-level cache where the OS reports it (a 480 MiB L3 would hold a
/// 256 MiB set and make "cold" warm).
fn cold_bytes() -> usize {
    let l3 = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size")
        .ok()
        .and_then(|s| {
            let s = s.trim();
            let (num, mult) = match s.strip_suffix('K') {
                Some(n) => (n, 1usize << 10),
                None => (s.strip_suffix('M').unwrap_or(s), 1 << 20),
            };
            num.parse::<usize>().ok().map(|n| n * mult)
        });
    (256usize << 20).max(2 * l3.unwrap_or(0))
}

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

/// Reads `part` as 4 interleaved streams (its quarters, side by side) and
/// returns their wrapping sum, so that no read can be skipped.
fn read_four_streams(part: &[u64]) -> u64 {
    let q = part.len() / 4;
    let (a, rest) = part.split_at(q);
    let (b, rest) = rest.split_at(q);
    let (c, d) = rest.split_at(q);
    let mut s = [0u64; 4];
    for i in 0..q {
        s[0] = s[0].wrapping_add(a[i]);
        s[1] = s[1].wrapping_add(b[i]);
        s[2] = s[2].wrapping_add(c[i]);
        s[3] = s[3].wrapping_add(d[i]);
    }
    s.iter().fold(0u64, |x, y| x.wrapping_add(*y))
}

/// Sustained read bandwidth of a 1 GiB buffer with `threads` threads, each
/// reading its share as 4 interleaved streams. Median of 5, GB/s.
fn bandwidth_probe(threads: usize) -> f64 {
    let buf = vec![1u64; (1 << 30) / 8];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let read = || -> u64 {
        pool.install(|| {
            use rayon::prelude::*;
            buf.par_chunks(buf.len() / threads).map(read_four_streams).sum()
        })
    };
    let mut times = vec![];
    for _ in 0..5 {
        let t = Instant::now();
        std::hint::black_box(read());
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    (1u64 << 30) as f64 / times[2] / 1e9
}

/// Read bandwidth of one thread from a buffer of `bytes` that stays in cache
/// (256 KiB sits in the L2 of every CPU measured here), read over and over
/// as 4 interleaved streams, as [`bandwidth_probe`] reads DRAM: the ceiling
/// for a hot call's weight bytes. Median of 5 runs of about 20 ms, GB/s.
fn cache_read_probe(bytes: usize) -> f64 {
    let buf = vec![1u64; bytes / 8];
    let q = buf.len() / 4;
    let pass = || {
        std::hint::black_box(read_four_streams(std::hint::black_box(&buf)));
    };
    let passes = ((20 << 20) / bytes.max(1)).max(1);
    let mut rates = vec![];
    for _ in 0..5 {
        pass();
        let t = Instant::now();
        for _ in 0..passes {
            pass();
        }
        rates.push((passes * 4 * q * 8) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    median(&mut rates)
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

/// The mode that runs a family's weights.
fn mode_of(family: KernelFamily) -> QuantLinearMode {
    match family {
        KernelFamily::W8A8 => QuantLinearMode::W8A8,
        KernelFamily::W8A16 => QuantLinearMode::W8A16,
        KernelFamily::W4A16 | KernelFamily::W4A16Grouped => QuantLinearMode::W4A16,
        _ => QuantLinearMode::W4A8,
    }
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
    match family {
        KernelFamily::W8A8 | KernelFamily::W8A16 => {
            let q = QuantizedMatrix::quantize(n, k, wf).unwrap();
            let b = n * k + 4 * n;
            (vec![QuantizedWeight::Q8(q); copies(b, cold)], b)
        }
        _ => {
            let grouped = matches!(family, KernelFamily::W4A8Grouped | KernelFamily::W4A16Grouped);
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
const SWITCHES: [&str; 3] = ["--quick", "--in-place", "--per-call"];

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
        let help = args.iter().any(|a| a == "--help" || a == "-h");
        if !help {
            eprintln!("qlinear-bench: {why}");
        }
        eprintln!(
            "usage: qlinear-bench [--quick] [--repeat N] [--only FAMILY,…] [--m M] [--shape NxK] \
             [--compare-with BIN --compare-json FILE] | --per-call [--shape NxK] [--repeat N] | \
             --load FILE [--in-place] | --profile FAMILY|--profile-forward CONFIG [--shape NxK] [--m M] [--calls N] \
             (the module documentation of benches/src/main.rs says what each does)"
        );
        std::process::exit(if help { 0 } else { 2 });
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

/// The benchmark matrix: every configuration of `cfg`'s shapes (both cache
/// modes, every family, M, tier and thread count the filters keep), each
/// prepared once so that the repeats measure the same bytes.
fn matrix(
    cfg: &Config,
    tiers: &[Int8Tier],
    wanted: &dyn Fn(&str) -> bool,
    m_wanted: &dyn Fn(usize) -> bool,
) -> Vec<Case> {
    // Every case is prepared once (weights for both cache modes stay in
    // memory), so the repeats measure the same bytes and alternate cleanly.
    let mut cases: Vec<Case> = vec![];
    for &(n, k) in &cfg.shapes {
        let wf = std::sync::Arc::new(data(n * k, 1));
        for cache in ["hot", "cold"] {
            // prefill (M >= 64) is compute-bound: hot only
            let ms = |fname: &str| -> Vec<usize> {
                ms_of(fname)
                    .iter()
                    .copied()
                    .filter(|&m| m_wanted(m) && (m < 64 || cache == "hot"))
                    .collect()
            };
            if wanted("f32") {
                let fcopies = std::sync::Arc::new(
                    (0..copies(n * k * 4, cache == "cold"))
                        .map(|_| (*wf).clone())
                        .collect::<Vec<Vec<f32>>>(),
                );
                for m in ms("f32") {
                    for threads in [1usize, 2] {
                        let (fcopies, x) = (fcopies.clone(), data(m * k, 2));
                        let mut y = vec![0f32; m * n];
                        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                        let par = if threads == 1 {
                            gemm::Parallelism::None
                        } else {
                            gemm::Parallelism::Rayon(threads)
                        };
                        cases.push(Case {
                            family: "f32".into(),
                            tier: "gemm".into(),
                            m,
                            n,
                            k,
                            threads,
                            cache,
                            weight_bytes: n * k * 4,
                            run: Box::new(move |budget| {
                                pool.install(|| {
                                    median_time(budget, |i| {
                                        let w = &fcopies[i % fcopies.len()];
                                        // SAFETY: y is [m, n] (row stride n), x is [m, k] (row stride
                                        // k), and w is [n, k] read as Wᵀ [k, n] (column stride k);
                                        // all three are live, correctly sized buffers and y does not
                                        // alias them.
                                        unsafe {
                                            gemm::gemm(
                                                m,
                                                n,
                                                k,
                                                y.as_mut_ptr(),
                                                1,
                                                n as isize,
                                                false,
                                                x.as_ptr(),
                                                1,
                                                k as isize,
                                                w.as_ptr(),
                                                k as isize,
                                                1,
                                                0.0f32,
                                                1.0f32,
                                                false,
                                                false,
                                                false,
                                                par,
                                            )
                                        }
                                    })
                                })
                            }),
                        });
                    }
                }
            }
            for &(family, fname) in &FAMILIES {
                if !wanted(fname) {
                    continue;
                }
                let (weights, bytes) = weights(family, n, k, &wf, cache == "cold");
                // a tier with panel tiles runs W4A8 grouped on the panel
                // form, as a layer on it does (the same bytes, permuted)
                let panels: Vec<PanelsQ4> = match family {
                    KernelFamily::W4A8Grouped => weights
                        .iter()
                        .filter_map(|w| match w {
                            QuantizedWeight::Q4(q) => PanelsQ4::new(q),
                            QuantizedWeight::Q8(_) => None,
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                let (weights, panels) = (std::sync::Arc::new(weights), std::sync::Arc::new(panels));
                for m in ms(fname) {
                    let mut routes: Vec<(String, Route)> = tiers
                        .iter()
                        .map(|&t| (t.to_string(), Route::for_tier(t).unwrap()))
                        .collect();
                    if let Ok(r) = Route::planned(family, m) {
                        routes.push((format!("plan:{}", r.tier()), r));
                    }
                    for (name, route) in routes {
                        // the scalar tier is the slow reference: M = 1 always, M = 16 outside
                        // --quick, never prefill
                        if route.tier() == Int8Tier::Scalar && (m > 16 || (m > 1 && cfg.quick)) {
                            continue;
                        }
                        for threads in [1usize, 2] {
                            let (weights, x) = (weights.clone(), data(m * k, 3));
                            let panels = if route.has_panels() {
                                panels.clone()
                            } else {
                                Default::default()
                            };
                            let mut y = vec![0f32; m * n];
                            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                            cases.push(Case {
                                family: fname.into(),
                                tier: name.clone(),
                                m,
                                n,
                                k,
                                threads,
                                cache,
                                weight_bytes: bytes,
                                run: Box::new(move |budget| {
                                    pool.install(|| {
                                        median_time(budget, |i| match panels.get(i % panels.len().max(1)) {
                                            Some(p) => route
                                                .linear_q4_panels(&x, m, p, &mut y)
                                                .expect("benchmark shapes are valid"),
                                            None => run_family(&route, family, &weights, &x, m, &mut y, i),
                                        })
                                    })
                                }),
                            });
                        }
                    }
                }
            }
            #[cfg(feature = "candle")]
            for (fname, tier, dtype, block_bytes) in candle::TYPES {
                if only
                    .as_ref()
                    .is_some_and(|o| !o.iter().any(|f| f == fname || f == "candle"))
                {
                    continue;
                }
                let bytes = n * k / 32 * block_bytes;
                for m in ms(fname) {
                    let (wf, x) = (wf.clone(), data(m * k, 3));
                    let copies = copies(bytes, cache == "cold");
                    cases.push(Case {
                        family: fname.into(),
                        tier: tier.into(),
                        m,
                        n,
                        k,
                        threads: candle::threads(),
                        cache,
                        weight_bytes: bytes,
                        run: Box::new(move |budget| {
                            candle::median_us(&wf, (n, k), &x, m, dtype, copies, budget)
                                .expect("candle QMatMul on a valid shape")
                        }),
                    });
                }
            }
        }
    }

    cases
}

/// Runs the matrix `repeat` times, each repeat after the bandwidth probe
/// (and, with `compare`, followed by the other revision's runner on the same
/// slice): every case's samples, and the other revision's JSON rows.
fn measure(
    cases: &mut [Case],
    cfg: &Config,
    repeat: usize,
    compare: Option<&(String, String)>,
    args: &[String],
) -> (Vec<Sample>, Vec<serde_json::Value>) {
    // The whole matrix `repeat` times: each repeat measures the probe, then
    // every case once, so a case's repeats alternate with every other case
    // (and with the other revision's run, under --compare-with).
    let mut samples: Vec<Sample> = vec![];
    let mut other: Vec<serde_json::Value> = vec![];
    for rep in 0..repeat {
        let bw: Vec<f64> = [1, 2].iter().map(|&t| bandwidth_probe(t)).collect();
        println!(
            "repeat {}/{repeat}: memory bandwidth probe (1 GiB read): 1 thread {:.2} GB/s, 2 threads {:.2} GB/s",
            rep + 1,
            bw[0],
            bw[1]
        );
        for (c, case) in cases.iter_mut().enumerate() {
            let t = (case.run)(cfg.budget);
            eprintln!(
                "[{}/{repeat}] {:<10} {:<18} M={:<3} {}x{} t={} {}: {t:.1} µs",
                rep + 1,
                case.family,
                case.tier,
                case.m,
                case.n,
                case.k,
                case.threads,
                case.cache
            );
            samples.push(Sample {
                case: c,
                repeat: rep,
                median_us: t,
                probe_gbps: bw[(case.threads - 1).min(1)],
            });
        }
        if let Some((bin, json)) = &compare {
            let passthrough: Vec<&String> = args
                .iter()
                .skip(1)
                .enumerate()
                .filter(|(i, a)| {
                    let prev = if *i == 0 { None } else { args.get(*i) };
                    !matches!(a.as_str(), "--repeat" | "--compare-with" | "--compare-json")
                        && !prev.is_some_and(|p| matches!(p.as_str(), "--repeat" | "--compare-with" | "--compare-json"))
                })
                .map(|(_, a)| a)
                .collect();
            eprintln!("[{}/{repeat}] the other revision: {bin} {passthrough:?}", rep + 1);
            let status = std::process::Command::new(bin)
                .args(&passthrough)
                .stdout(std::process::Stdio::null())
                .status()
                .expect("the other revision's runner starts");
            assert!(status.success(), "the other revision's runner failed: {status}");
            let text = std::fs::read_to_string(json).expect("the other revision wrote its JSON");
            let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
            for r in v["rows"].as_array().cloned().unwrap_or_default() {
                other.push(r);
            }
        }
    }
    (samples, other)
}

/// The plan's choice against the fastest proven tier of one configuration
/// (family, M, shape, thread count, cache mode) in this run.
struct PlanPair {
    /// The `plan:` case.
    plan: usize,
    /// The chosen tier's own case (the plan case where the run has none).
    chosen: usize,
    /// The fastest tier's case by the matrix's medians.
    fastest: usize,
    /// The two tiers run one kernel for the family: their rows differ by
    /// noise alone, and the ratio is 1.
    same_kernel: bool,
    /// `chosen` over `fastest`, medians over the matrix's repeats.
    ratio: f64,
    /// The re-measurement of a suspected loss ([`confirm_losses`]).
    confirm: Option<Confirmation>,
}

/// A suspected loss measured again: the chosen and the fastest tier's cases
/// alternated for [`CONFIRM_ROUNDS`] rounds, right after the matrix.
struct Confirmation {
    chosen_us: Vec<f64>,
    fastest_us: Vec<f64>,
}

impl Confirmation {
    /// Median over median: the figure that decides `LOSES`.
    fn ratio(&self) -> f64 {
        median(&mut self.chosen_us.clone()) / median(&mut self.fastest_us.clone())
    }
}

impl PlanPair {
    /// The plan loses this configuration: over 5 % slower than the fastest
    /// tier, by the confirmation where there is one.
    fn loses(&self) -> bool {
        self.confirm.as_ref().map_or(self.ratio, Confirmation::ratio) > 1.05
    }
}

/// Rounds of a suspected loss's re-measurement. The fastest of two or
/// three tiers, picked by medians over three repeats, is the one whose
/// noise fell lowest (identical runs here differ by ±30 %, and a forced
/// tier's row and the plan row running the same kernel came out a third
/// apart in one run on the Zen 4 of issue 20): a loss is called only when
/// it holds up in a fresh, alternated A/B of the two tiers.
const CONFIRM_ROUNDS: usize = 7;

/// For every `plan:` case, its chosen tier's and the fastest tier's cases
/// of the same configuration, by the medians `med` of the matrix.
fn plan_pairs(cases: &[Case], med: &dyn Fn(usize) -> f64) -> Vec<PlanPair> {
    let mut out = vec![];
    for (c, case) in cases.iter().enumerate() {
        let Some(plan_tier) = case.tier.strip_prefix("plan:") else {
            continue;
        };
        let same = |o: &Case| {
            (o.family.as_str(), o.m, o.n, o.k, o.threads, o.cache)
                == (case.family.as_str(), case.m, case.n, case.k, case.threads, case.cache)
        };
        let Some(fastest) = (0..cases.len())
            .filter(|&i| same(&cases[i]) && !cases[i].tier.contains(':') && cases[i].tier != "gemm")
            .min_by(|&a, &b| med(a).total_cmp(&med(b)))
        else {
            continue;
        };
        // the chosen tier's own row: the plan row times the same code again,
        // and a choice is judged against the run's fastest, not against noise
        let chosen = cases.iter().position(|o| same(o) && o.tier == plan_tier).unwrap_or(c);
        // a tier running another's kernel for this family ties with it: the
        // difference between their rows is noise
        let family = FAMILIES.iter().find(|(_, f)| *f == case.family).map(|(k, _)| *k);
        let route = |t: &str| t.parse::<Int8Tier>().ok().and_then(|t| Route::for_tier(t).ok());
        let best = &cases[fastest].tier;
        let same_kernel = plan_tier != best
            && match (family, route(plan_tier), route(best)) {
                (Some(f), Some(a), Some(b)) => a.runs_same_kernel(&b, f),
                _ => false,
            };
        out.push(PlanPair {
            plan: c,
            chosen,
            fastest,
            same_kernel,
            ratio: if same_kernel { 1.0 } else { med(chosen) / med(fastest) },
            confirm: None,
        });
    }
    out
}

/// Measures every suspected loss of `pairs` (over 5 % by the matrix's
/// medians) again: the chosen and the fastest tier's cases alternated for
/// [`CONFIRM_ROUNDS`] rounds, each round in the other order.
fn confirm_losses(cases: &mut [Case], pairs: &mut [PlanPair], budget: Duration) {
    for p in pairs.iter_mut().filter(|p| p.ratio > 1.05) {
        let (mut chosen_us, mut fastest_us) = (vec![], vec![]);
        for round in 0..CONFIRM_ROUNDS {
            let order = if round % 2 == 0 {
                [p.chosen, p.fastest]
            } else {
                [p.fastest, p.chosen]
            };
            for c in order {
                let t = (cases[c].run)(budget);
                if c == p.chosen { &mut chosen_us } else { &mut fastest_us }.push(t);
            }
        }
        let c = Confirmation { chosen_us, fastest_us };
        eprintln!(
            "confirming {} against {} ({} M={} {}x{} t={} {}): {:.3} by the matrix, {:.3} alternated",
            cases[p.chosen].tier,
            cases[p.fastest].tier,
            cases[p.plan].family,
            cases[p.plan].m,
            cases[p.plan].n,
            cases[p.plan].k,
            cases[p.plan].threads,
            cases[p.plan].cache,
            p.ratio,
            c.ratio()
        );
        p.confirm = Some(c);
    }
}

/// Prints `pairs` (a configuration the plan loses, [`PlanPair::loses`], is
/// marked `LOSES`) and returns them as JSON rows.
fn plan_against_best(cases: &[Case], pairs: &[PlanPair], med: &dyn Fn(usize) -> f64) -> Vec<serde_json::Value> {
    println!(
        "\nthe plan's tier against the fastest tier of this run (medians; a row over 5 % is measured again, \
         {CONFIRM_ROUNDS} alternated rounds, and LOSES when the plan is still over 5 % slower)"
    );
    println!(
        "{:<10} {:>3} {:>6} {:>5} {:>2} {:<5} {:<18} {:>10} {:<18} {:>10} {:>6} {:>9}",
        "family", "m", "n", "k", "t", "cache", "plan", "us", "fastest", "us", "ratio", "again"
    );
    let mut out = vec![];
    for p in pairs {
        let case = &cases[p.plan];
        let plan_tier = case.tier.trim_start_matches("plan:");
        let best = &cases[p.fastest].tier;
        let (plan_us, best_us) = (med(p.chosen), med(p.fastest));
        let again = p.confirm.as_ref().map(Confirmation::ratio);
        println!(
            "{:<10} {:>3} {:>6} {:>5} {:>2} {:<5} {:<18} {:>10.1} {:<18} {:>10.1} {:>6.3} {:>9}{}",
            case.family,
            case.m,
            case.n,
            case.k,
            case.threads,
            case.cache,
            plan_tier,
            plan_us,
            best,
            best_us,
            p.ratio,
            again.map_or("-".to_string(), |r| format!("{r:.3}")),
            if p.same_kernel {
                "  (the same kernel)"
            } else if p.loses() {
                "  LOSES"
            } else {
                ""
            }
        );
        let confirm = p.confirm.as_ref().map(|c| {
            json!({ "rounds": CONFIRM_ROUNDS, "plan_us": c.chosen_us, "fastest_us": c.fastest_us, "ratio": c.ratio() })
        });
        out.push(json!({
            "family": case.family, "m": case.m, "n": case.n, "k": case.k, "threads": case.threads,
            "cache": case.cache, "plan_tier": plan_tier, "plan_us": plan_us, "fastest_tier": best,
            "fastest_us": best_us, "ratio": p.ratio, "same_kernel": p.same_kernel, "confirm": confirm,
            "loses": p.loses(),
        }));
    }
    out
}

/// A case's columns before its figures, as the table headers align them.
fn label(c: &Case) -> String {
    format!(
        "{:<10} {:<18} {:>3} {:>6} {:>5} {:>2} {:<5}",
        c.family, c.tier, c.m, c.n, c.k, c.threads, c.cache
    )
}

/// The table (per case: median over repeats of the per-repeat medians, with
/// the min–max range; throughput and share of the probe per repeat, then
/// their median) and `target/qlinear-bench.json` (every sample, with its
/// repeat's probe, the CPU model and the thread count).
fn print_and_write(
    cpu: &str,
    cases: &[Case],
    samples: &[Sample],
    pairs: &[PlanPair],
    repeat: usize,
    quick: bool,
    other: &[serde_json::Value],
) {
    let key = |c: &Case| (c.family.clone(), c.m, c.n, c.k, c.threads, c.cache);
    let of = |c: usize| samples.iter().filter(move |s| s.case == c);
    let med = |c: usize| case_median(samples, c);
    let find = |family: &str, tier: &str, c: &Case| {
        cases
            .iter()
            .position(|o| o.tier.starts_with(tier) && key(o) == (family.to_string(), c.m, c.n, c.k, c.threads, c.cache))
            .map(med)
    };
    println!(
        "{:<10} {:<18} {:>3} {:>6} {:>5} {:>2} {:<5} {:>10} {:>19} {:>7} {:>6} {:>8} {:>7} {:>8}",
        "family",
        "tier",
        "m",
        "n",
        "k",
        "t",
        "cache",
        "median_us",
        "range",
        "GB/s",
        "%bw",
        "GFLOP/s",
        "vs_f32",
        "vs_scalar"
    );
    let mut rows = vec![];
    for (c, case) in cases.iter().enumerate() {
        let mut ts: Vec<f64> = of(c).map(|s| s.median_us).collect();
        let t = median(&mut ts);
        let (lo, hi) = (ts[0], ts[ts.len() - 1]);
        let gbps = case.weight_bytes as f64 / t / 1e3;
        let pct = median(
            &mut of(c)
                .map(|s| 100.0 * case.weight_bytes as f64 / s.median_us / 1e3 / s.probe_gbps)
                .collect::<Vec<_>>(),
        );
        let gflops = 2.0 * (case.m * case.n * case.k) as f64 / t / 1e3;
        let vs_f32 = find("f32", "gemm", case).map(|f| f / t);
        let vs_scalar = find(&case.family, "scalar", case).map(|s| s / t);
        let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        println!(
            "{} {:>10.1} {:>19} {:>7.2} {:>6.1} {:>8.1} {:>7} {:>8}",
            label(case),
            t,
            format!("{lo:.1}–{hi:.1}"),
            gbps,
            pct,
            gflops,
            fmt(vs_f32),
            fmt(vs_scalar)
        );
        let reps: Vec<serde_json::Value> = of(c)
            .map(|s| json!({ "repeat": s.repeat, "median_us": s.median_us, "probe_gbps": s.probe_gbps }))
            .collect();
        rows.push(json!({
            "cpu": cpu, "family": case.family, "tier": case.tier, "m": case.m, "n": case.n, "k": case.k,
            "threads": case.threads, "cache": case.cache, "median_us": t, "min_us": lo, "max_us": hi,
            "gbps": gbps, "pct_bw": pct, "gflops": gflops, "ratio_f32": vs_f32, "ratio_scalar": vs_scalar,
            "repeats": reps,
        }));
    }
    let plan_rows = plan_against_best(cases, pairs, &med);
    let mut out = json!({
        "cpu": cpu,
        "plan_against_best": plan_rows,
        "cold_bytes": cold_bytes(),
        "quick": quick,
        "repeat": repeat,
        "rows": rows,
    });
    if !other.is_empty() {
        // A (this revision) against B (the other), per row both have
        println!("\nA = this revision, B = the other revision; medians over {repeat} alternated runs each");
        println!(
            "{:<10} {:<18} {:>3} {:>6} {:>5} {:>2} {:<5} {:>24} {:>24} {:>6}",
            "family", "tier", "m", "n", "k", "t", "cache", "A median_us (range)", "B median_us (range)", "B/A"
        );
        let mut cmp = vec![];
        for (c, case) in cases.iter().enumerate() {
            let same = |r: &serde_json::Value| {
                r["family"] == case.family.as_str()
                    && r["tier"] == case.tier.as_str()
                    && r["m"] == case.m
                    && r["n"] == case.n
                    && r["k"] == case.k
                    && r["threads"] == case.threads
                    && r["cache"] == case.cache
            };
            let mut b: Vec<f64> = other
                .iter()
                .filter(|r| same(r))
                .filter_map(|r| r["median_us"].as_f64())
                .collect();
            if b.is_empty() {
                continue;
            }
            let mut a: Vec<f64> = of(c).map(|s| s.median_us).collect();
            let (am, bm) = (median(&mut a), median(&mut b));
            println!(
                "{} {:>24} {:>24} {:>6.2}",
                label(case),
                format!("{am:.1} ({:.1}–{:.1})", a[0], a[a.len() - 1]),
                format!("{bm:.1} ({:.1}–{:.1})", b[0], b[b.len() - 1]),
                bm / am
            );
            cmp.push(json!({
                "family": case.family, "tier": case.tier, "m": case.m, "n": case.n, "k": case.k,
                "threads": case.threads, "cache": case.cache, "a_us": a, "b_us": b, "b_over_a": bm / am,
            }));
        }
        out["compare"] = json!(cmp);
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/qlinear-bench.json");
    std::fs::write(&path, serde_json::to_string_pretty(&out).unwrap()).unwrap();
    println!("wrote {}", path.display());
}

#[cfg(test)]
mod tests {
    use super::{bad_argument, Confirmation, PlanPair};

    #[test]
    fn a_loss_is_called_by_the_alternated_rounds_where_there_are_some() {
        let pair = |ratio: f64, confirm: Option<(Vec<f64>, Vec<f64>)>| PlanPair {
            plan: 0,
            chosen: 1,
            fastest: 2,
            same_kernel: false,
            ratio,
            confirm: confirm.map(|(chosen_us, fastest_us)| Confirmation { chosen_us, fastest_us }),
        };
        assert!(pair(1.06, None).loses());
        assert!(!pair(1.05, None).loses());
        // the matrix's 1.3 was noise: the rounds' medians are 63 against 84
        assert!(!pair(1.3, Some((vec![63.0, 90.0, 62.0], vec![84.0, 83.0, 60.0]))).loses());
        // and a real loss holds up: medians 110 against 100
        let real = pair(1.3, Some((vec![110.0, 200.0, 105.0], vec![100.0, 99.0, 150.0])));
        assert!((real.confirm.as_ref().unwrap().ratio() - 1.1).abs() < 1e-12);
        assert!(real.loses());
    }

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
