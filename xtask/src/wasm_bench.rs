//! `cargo xtask wasm-bench`: the wasm32 tiers' GEMVs under Node.js beside the native tiers.

use super::*;

/// Runs `cmd` with its output in `out_file` and returns the output. Node 20
/// here sometimes dies with SIGSEGV while exiting after the module has
/// written all its lines (one run in five with this module's few hundred
/// MiB of linear memory on `7b45e49`, three in four on `0bcca8e`, both on
/// the AMD EPYC Zen 4; the test binaries are not affected). A run whose
/// output ends with the example's closing `done` is complete and kept
/// whatever its exit; another failed run is repeated, up to three times.
fn capture_complete(cmd: &mut Command, out_file: &std::path::Path) -> Result<String> {
    let mut last = String::new();
    for _ in 0..3 {
        eprintln!("xtask> {cmd:?}");
        let file = std::fs::File::create(out_file).map_err(|e| format!("{}: {e}", out_file.display()))?;
        let status = cmd
            .current_dir(root())
            .stdout(file)
            .status()
            .map_err(|e| e.to_string())?;
        let out = std::fs::read_to_string(out_file).map_err(|e| format!("{}: {e}", out_file.display()))?;
        if status.success() {
            return Ok(out);
        }
        if out.lines().last() == Some("done") {
            eprintln!("xtask: {cmd:?} exited with {status} after its last line: its output is complete");
            return Ok(out);
        }
        last = format!("{cmd:?} failed: {status}");
        eprintln!("xtask: {last}; once more");
    }
    Err(last)
}

/// `cargo xtask wasm-bench`: the one-thread GEMV timings of
/// `crates/qlinear/examples/gemv_timing.rs`, built natively and for
/// `wasm32-wasip1` with every wasm tier (`+simd128,+relaxed-simd`: the
/// scalar, SIMD128 and relaxed-SIMD tiers, run under Node.js), alternated three
/// times in one sitting; prints the medians and the ratio of each wasm tier
/// to the fastest native tier on the same case.
pub(crate) fn wasm_bench() -> Result {
    ensure_target(WASI)?;
    if !have("node") {
        return Err("the wasm timings run under Node.js: install node (>= 20)".into());
    }
    let example = ["-p", "qlinear", "--example", "gemv_timing"];
    run(cargo().args(["build", "--release"]).args(example))?;
    // the build with every wasm tier (each contains the ones before it)
    let top = *Int8Tier::of_arch("wasm32").last().ok_or("no wasm tier")?;
    let wasm_dir = root().join(format!("target/{top}"));
    run(cargo()
        .args(["build", "--release", "--target", WASI, "--target-dir"])
        .arg(&wasm_dir)
        .args(example)
        .env(
            "CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS",
            format!("-C target-feature={}", top.build_features()),
        ))?;
    let native = root().join("target/release/examples/gemv_timing");
    let wasm = wasm_dir.join(WASI).join("release/examples/gemv_timing.wasm");
    let out_file = root().join("target/wasm-bench.out");
    let capture = |cmd: &mut Command| capture_complete(cmd, &out_file);
    // (family, tier, n, k) -> the median of each round
    type Case = (String, String, String, String);
    let mut rows: Vec<(Case, Vec<f64>)> = Vec::new();
    for _ in 0..3 {
        let a = capture(&mut Command::new(&native))?;
        let b = capture(
            Command::new("node")
                .args(["--no-warnings", "tools/wasi-runner.mjs"])
                .arg(&wasm),
        )?;
        for line in a.lines().map(|l| (l, "")).chain(b.lines().map(|l| (l, " (node)"))) {
            let f: Vec<&str> = line.0.split_whitespace().collect();
            let [family, tier, n, k, median, ..] = f[..] else {
                continue;
            };
            let key = (
                family.to_string(),
                format!("{tier}{}", line.1),
                n.to_string(),
                k.to_string(),
            );
            let v: f64 = median.parse().map_err(|_| format!("bad timing line: {}", line.0))?;
            match rows.iter_mut().find(|(k2, _)| *k2 == key) {
                Some((_, vs)) => vs.push(v),
                None => rows.push((key, vec![v])),
            }
        }
    }
    println!("CPU: {}", qlinear_dispatch::cpu_model());
    println!("| family | tier | n × k | median µs of 3 rounds (range) | vs best native |");
    println!("|---|---|---|---|---|");
    let med = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for ((family, tier, n, k), vs) in &rows {
        let best_native = rows
            .iter()
            .filter(|((f, t, n2, k2), _)| f == family && n2 == n && k2 == k && !t.ends_with("(node)"))
            .map(|(_, v)| med(v))
            .fold(f64::INFINITY, f64::min);
        let (lo, hi) = (
            vs.iter().copied().fold(f64::INFINITY, f64::min),
            vs.iter().copied().fold(0.0, f64::max),
        );
        println!(
            "| {family} | {tier} | {n} × {k} | {:.0} ({lo:.0}–{hi:.0}) | {:.2}× |",
            med(vs),
            med(vs) / best_native
        );
    }
    Ok(())
}
