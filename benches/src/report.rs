//! The table, the plan's rows, the comparison with another revision, and
//! `target/qlinear-bench.json`.

use serde_json::json;

use crate::plan_check::{plan_against_best, PlanPair};
use crate::probe::cold_bytes;
use crate::{case_median, median, Case, Sample};

/// A case's columns before its figures, as the table headers align them.
pub(crate) fn label(c: &Case) -> String {
    format!(
        "{:<10} {:<18} {:>3} {:>6} {:>5} {:>2} {:<5}",
        c.family, c.tier, c.m, c.n, c.k, c.threads, c.cache
    )
}

/// The table (per case: median over repeats of the per-repeat medians, with
/// the min–max range; throughput and share of the probe per repeat, then
/// their median) and `target/qlinear-bench.json` (every sample, with its
/// repeat's probe, the CPU model and the thread count).
pub(crate) fn print_and_write(
    cpu: &str,
    cases: &[Case],
    samples: &[Sample],
    pairs: &[PlanPair],
    repeat: usize,
    quick: bool,
    other: &[serde_json::Value],
) {
    let rows = table(cpu, cases, samples);
    let plan_rows = plan_against_best(cases, pairs, &|c| case_median(samples, c));
    let mut out = json!({
        "cpu": cpu,
        "plan_against_best": plan_rows,
        "cold_bytes": cold_bytes(),
        "quick": quick,
        "repeat": repeat,
        "rows": rows,
    });
    if !other.is_empty() {
        out["compare"] = json!(compare(cases, samples, repeat, other));
    }
    write_json("qlinear-bench.json", &out);
}

/// Writes `value` to `name` in this workspace's `target` folder (made if
/// missing), where `cargo xtask` reads it whatever the working directory,
/// and says where; on failure says why in one line and exits with 2.
pub(crate) fn write_json(name: &str, value: &serde_json::Value) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target")
        .join(name);
    let written = std::fs::create_dir_all(path.parent().unwrap_or(std::path::Path::new(".")))
        .and_then(|()| std::fs::write(&path, serde_json::to_string_pretty(value).unwrap_or_default()));
    match written {
        Ok(()) => println!("wrote {}", path.display()),
        Err(e) => {
            eprintln!("qlinear-bench: {}: {e}", path.display());
            std::process::exit(2);
        }
    }
}

/// The medians of case `c`'s repeats, sorted.
fn repeats_of(samples: &[Sample], c: usize) -> Vec<f64> {
    let mut ts: Vec<f64> = samples.iter().filter(|s| s.case == c).map(|s| s.median_us).collect();
    ts.sort_by(f64::total_cmp);
    ts
}

/// Prints the main table and returns its rows as JSON.
fn table(cpu: &str, cases: &[Case], samples: &[Sample]) -> Vec<serde_json::Value> {
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
        let mut ts = repeats_of(samples, c);
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
    rows
}

/// A (this revision) against B (`other`, the other revision's rows), per
/// row both have: printed, and returned as JSON rows.
fn compare(cases: &[Case], samples: &[Sample], repeat: usize, other: &[serde_json::Value]) -> Vec<serde_json::Value> {
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
        let mut a = repeats_of(samples, c);
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
    cmp
}
