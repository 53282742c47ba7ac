//! `qlinear-bench` (run by `cargo xtask bench [--quick]`): the memory-bandwidth
//! probe, then every kernel family × tier × M × shape × threads × cache mode,
//! beside an f32 GEMM from the `gemm` crate and the scalar tier in the same
//! run. Prints one table and writes `target/qlinear-bench.json`.
//!
//! Cache modes: `hot` reuses one weight matrix (it may sit in L3: the kernel's
//! ceiling); `cold` cycles through distinct copies totalling at least 256 MiB
//! and at least twice the last-level cache, so every call streams its weights
//! from DRAM, as decoding through successive layers does.

use std::time::{Duration, Instant};

#[cfg(feature = "candle")]
mod candle;

use qlinear::tiers::{KernelFamily, Route};
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

#[derive(Clone)]
struct Row {
    family: String,
    tier: String,
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
    cache: &'static str,
    median_us: f64,
    weight_bytes: usize,
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

/// Sustained read bandwidth of a 1 GiB buffer with `threads` threads, each
/// reading its share as 4 interleaved streams. Median of 5, GB/s.
fn bandwidth_probe(threads: usize) -> f64 {
    let buf = vec![1u64; (1 << 30) / 8];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let read = || -> u64 {
        pool.install(|| {
            use rayon::prelude::*;
            buf.par_chunks(buf.len() / threads)
                .map(|part| {
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
                })
                .sum()
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
    for i in 0..calls {
        run_family(&route, family, &w, &x, m, &mut y, i);
    }
    println!("checksum {}", y.iter().sum::<f32>());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
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
    let bw: Vec<f64> = [1, 2].iter().map(|&t| bandwidth_probe(t)).collect();
    println!(
        "memory bandwidth probe (1 GiB read): 1 thread {:.2} GB/s, 2 threads {:.2} GB/s",
        bw[0], bw[1]
    );
    println!(
        "cold mode cycles through at least {} MiB of distinct weights",
        cold_bytes() >> 20
    );

    let mut rows: Vec<Row> = vec![];
    let families = FAMILIES;
    for &(n, k) in &cfg.shapes {
        let wf = data(n * k, 1);
        for cache in ["hot", "cold"] {
            // the f32 baseline: gemm's f32 GEMM on the same shapes
            let want_f32 = only.as_ref().is_none_or(|o| o.iter().any(|f| f == "f32"));
            let fcopies: Vec<Vec<f32>> = (0..if want_f32 {
                copies(n * k * 4, cache == "cold")
            } else {
                0
            })
                .map(|_| wf.clone())
                .collect();
            for m in [1usize, 16]
                .into_iter()
                .filter(|&m| want_f32 && only_m.is_none_or(|o| o == m))
            {
                let x = data(m * k, 2);
                let mut y = vec![0f32; m * n];
                for threads in [1usize, 2] {
                    let par = if threads == 1 {
                        gemm::Parallelism::None
                    } else {
                        gemm::Parallelism::Rayon(threads)
                    };
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                    let t = pool.install(|| {
                        median_time(cfg.budget, |i| {
                            let w = &fcopies[i % fcopies.len()];
                            // SAFETY: y is [m, n] (row stride n), x is [m, k] (row stride k), and
                            // w is [n, k] read as Wᵀ [k, n] (column stride k); all three are
                            // live, correctly sized buffers and y does not alias them.
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
                    });
                    rows.push(Row {
                        family: "f32".into(),
                        tier: "gemm".into(),
                        m,
                        n,
                        k,
                        threads,
                        cache,
                        median_us: t,
                        weight_bytes: n * k * 4,
                    });
                }
            }
            drop(fcopies);
            for &(family, fname) in &families {
                if only.as_ref().is_some_and(|o| !o.iter().any(|f| f == fname)) {
                    continue;
                }
                let (weights, bytes) = weights(family, n, k, &wf, cache == "cold");
                for m in [1usize, 16].into_iter().filter(|&m| only_m.is_none_or(|o| o == m)) {
                    let x = data(m * k, 3);
                    let mut y = vec![0f32; m * n];
                    let mut routes: Vec<(String, Route)> = tiers
                        .iter()
                        .map(|&t| (t.to_string(), Route::for_tier(t).unwrap()))
                        .collect();
                    if let Ok(r) = Route::planned(family, m) {
                        routes.push((format!("plan:{}", r.tier()), r));
                    }
                    for (name, route) in routes {
                        // the scalar tier is the slow reference: M = 1 always, M = 16 outside --quick
                        if route.tier() == Int8Tier::Scalar && (m > 1 && cfg.quick) {
                            continue;
                        }
                        for threads in [1usize, 2] {
                            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                            let t = pool.install(|| {
                                median_time(cfg.budget, |i| run_family(&route, family, &weights, &x, m, &mut y, i))
                            });
                            rows.push(Row {
                                family: fname.into(),
                                tier: name.clone(),
                                m,
                                n,
                                k,
                                threads,
                                cache,
                                median_us: t,
                                weight_bytes: bytes,
                            });
                            eprintln!("{fname:<10} {name:<18} M={m:<2} {n}x{k} t={threads} {cache}: {t:.1} µs");
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
                for m in [1usize, 16].into_iter().filter(|&m| only_m.is_none_or(|o| o == m)) {
                    let x = data(m * k, 3);
                    let copies = copies(bytes, cache == "cold");
                    let t = candle::median_us(&wf, (n, k), &x, m, dtype, copies, cfg.budget)
                        .expect("candle QMatMul on a valid shape");
                    let threads = candle::threads();
                    rows.push(Row {
                        family: fname.into(),
                        tier: tier.into(),
                        m,
                        n,
                        k,
                        threads,
                        cache,
                        median_us: t,
                        weight_bytes: bytes,
                    });
                    eprintln!("{fname:<10} {tier:<18} M={m:<2} {n}x{k} t={threads} {cache}: {t:.1} µs");
                }
            }
        }
    }

    let find = |fam: &str, tier_prefix: &str, r: &Row| {
        rows.iter()
            .find(|o| {
                o.family == fam
                    && o.tier.starts_with(tier_prefix)
                    && o.m == r.m
                    && o.n == r.n
                    && o.k == r.k
                    && o.threads == r.threads
                    && o.cache == r.cache
            })
            .map(|o| o.median_us)
    };
    let mut json_rows = vec![];
    println!(
        "{:<10} {:<18} {:>3} {:>6} {:>5} {:>2} {:<5} {:>10} {:>7} {:>6} {:>8} {:>7} {:>8}",
        "family", "tier", "m", "n", "k", "t", "cache", "median_us", "GB/s", "%bw", "GFLOP/s", "vs_f32", "vs_scalar"
    );
    for r in &rows {
        let gbps = r.weight_bytes as f64 / r.median_us / 1e3;
        let pct = 100.0 * gbps / bw[r.threads - 1];
        let gflops = 2.0 * (r.m * r.n * r.k) as f64 / r.median_us / 1e3;
        let vs_f32 = find("f32", "gemm", r).map(|f| f / r.median_us);
        let vs_scalar = find(&r.family, "scalar", r).map(|s| s / r.median_us);
        let fmt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        println!(
            "{:<10} {:<18} {:>3} {:>6} {:>5} {:>2} {:<5} {:>10.1} {:>7.2} {:>6.1} {:>8.1} {:>7} {:>8}",
            r.family,
            r.tier,
            r.m,
            r.n,
            r.k,
            r.threads,
            r.cache,
            r.median_us,
            gbps,
            pct,
            gflops,
            fmt(vs_f32),
            fmt(vs_scalar)
        );
        json_rows.push(json!({
            "family": r.family, "tier": r.tier, "m": r.m, "n": r.n, "k": r.k, "threads": r.threads,
            "cache": r.cache, "median_us": r.median_us, "gbps": gbps, "pct_bw": pct, "gflops": gflops,
            "ratio_f32": vs_f32, "ratio_scalar": vs_scalar,
        }));
    }
    let out = json!({
        "bandwidth_gbps": { "1": bw[0], "2": bw[1] },
        "cold_bytes": cold_bytes(),
        "quick": cfg.quick,
        "rows": json_rows,
    });
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/qlinear-bench.json");
    std::fs::write(&path, serde_json::to_string_pretty(&out).unwrap()).unwrap();
    println!("wrote {}", path.display());
}
