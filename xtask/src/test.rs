//! `cargo xtask test`: everything CI checks, and the aarch64 and wasm32 runs of the tests.

use super::*;

pub(crate) fn test() -> Result {
    setup_test()?;
    fmt(true)?;
    run(cargo().args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    house()?;
    // the ISA crates that only compile their kernels on another target
    ensure_aarch64()?;
    run(cargo()
        .args([
            "clippy",
            "--target",
            AARCH64,
            "-p",
            "qlinear-kernels-neon",
            "-p",
            "qlinear-dispatch",
            "--all-targets",
        ])
        .args(["--", "-D", "warnings"]))?;
    for tier in Int8Tier::of_arch("wasm32") {
        run(cargo()
            .args(["clippy", "--target", WASI, "--target-dir"])
            .arg(format!("target/{tier}"))
            .args(["-p", "qlinear-kernels-wasm", "-p", "qlinear-dispatch"])
            .args(["--all-targets", "--", "-D", "warnings"])
            .env(
                "CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS",
                format!("-C target-feature={}", tier.build_features()),
            ))?;
    }
    run(cargo()
        .args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings"))?;
    // a runtime with its own loader drops the file stack
    run(cargo().args([
        "clippy",
        "-p",
        "qlinear",
        "--no-default-features",
        "--",
        "-D",
        "warnings",
    ]))?;
    // the selftest must prove every tier this CPU supports, and report the
    // other architectures' tiers absent (dispatch/tests/selftest.rs checks it)
    let smollm2 = smollm2_gguf()?;
    let here = forced_tiers();
    let elsewhere = names(Int8Tier::ALL.into_iter().filter(|t| !t.is_available()));
    run(cargo()
        .args(["test", "--workspace"])
        .env("QLINEAR_EXPECT_PROVEN", here.join(","))
        .env("QLINEAR_EXPECT_ABSENT", elsewhere.join(","))
        // setup_test installed it: a missing gguf package fails, not skips
        .env("QLINEAR_REQUIRE_GGUF", "1")
        .env("QLINEAR_SMOLLM2_GGUF", &smollm2))?;
    // The whole kernel-facing suite again on each forced tier this CPU has, so
    // a tier the plan does not pick here is still tested on every run.
    for tier in forced_tiers() {
        run(cargo()
            .args(["test", "-p", "qlinear", "-p", "qlinear-dispatch"])
            .env("QLINEAR_INT8_TIER", tier))?;
    }
    aarch64_tests()?;
    prune(&format!("target/{AARCH64}"));
    wasm_tests()?;
    ensure_python(&["numpy", "safetensors"])?;
    minilm(&["--short".to_string()])?;
    prune("target/minilm");
    // the decoder's accuracy floors run a 135M-parameter model: release only
    run(cargo()
        .args([
            "test",
            "--release",
            "-p",
            "qlinear-smollm",
            "--test",
            "accuracy",
            "--",
            "--ignored",
        ])
        .env("QLINEAR_SMOLLM2_GGUF", &smollm2))?;
    // nothing after this point builds in release or reads the model
    prune("target/release");
    prune("target/smollm2");
    package()?;
    msrv()?;
    kept_ratios()?;
    run(Command::new("python3").args([
        "tools/gen_recipe_golden.py",
        "--check",
        "crates/quant-recipe/tests/data/recipe_golden.txt",
    ]))?;
    run(Command::new("python3").args([
        "tools/gen_recipe_golden.py",
        "--check-gptq",
        "crates/quant-recipe/tests/data/gptq_golden.txt",
    ]))?;
    python_interop()
}

/// Python's safetensors + numpy against ours, both directions: the committed
/// numpy-written fixture is still what the script writes, and the files
/// `qlinear convert` writes from a Python-written model are read by Python
/// with the exact dtypes, shapes, metadata and bytes of docs/FORMAT.md.
pub(crate) fn python_interop() -> Result {
    let fixture = "crates/formats/tests/data/py_quantized.safetensors";
    run(Command::new("python3").args(["tools/interop.py", "fixture", "--check", fixture]))?;
    run(cargo().args(["build", "--quiet", "--package", "qlinear-cli"]))?;
    let cli = root().join("target/debug/qlinear");
    let dir = std::env::temp_dir().join(format!("qlinear-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let d = dir.to_string_lossy().into_owned();
    let result = (|| {
        run(Command::new("python3").args(["tools/interop.py", "model", &d]))?;
        for scheme in ["q8", "q4", "q4g32"] {
            let input = format!("{d}/py_model.safetensors");
            let output = format!("{d}/ours_{scheme}.safetensors");
            run(Command::new(&cli).args(["convert", &input, &output, "--scheme", scheme]))?;
            run(Command::new(&cli).args(["inspect", &output]))?;
        }
        run(Command::new(&cli).args(["inspect", fixture]))?;
        run(Command::new("python3").args(["tools/interop.py", "check-ours", &d]))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The kernel, dispatch and facade suites for aarch64 under qemu, on the
/// emulated CPUs the registry's declarations name: each tier forced on the
/// CPU that proves it (`TierSpec::emulated_with`, `max`), then the suites on
/// every CPU named, where the tiers that CPU lacks
/// (`Int8Tier::emulated_without`, e.g. `cortex-a72` without dotprod) must be
/// reported absent and never used and the rest proven.
pub(crate) fn aarch64_tests() -> Result {
    ensure_aarch64()?;
    // the recipe crate too: its search runs on `wide` vectors, which are
    // NEON here, and must give the numpy golden bytes on every target
    let packages = [
        "-p",
        "qlinear-quant-recipe",
        "-p",
        "qlinear-kernels-core",
        "-p",
        "qlinear-kernels-neon",
        "-p",
        "qlinear-dispatch",
        "-p",
        "qlinear",
    ];
    let runner = "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER";
    let test = || {
        let mut c = cargo();
        c.args(["test", "--release", "--target", AARCH64]);
        c
    };
    let arm = Int8Tier::of_arch("aarch64");
    // each tier forced on the emulated CPU its declaration proves it on
    for tier in &arm {
        run(test()
            .args(["-p", "qlinear-dispatch", "-p", "qlinear"])
            .env(runner, format!("{QEMU} -cpu {}", tier.spec().emulated_with))
            .env("QLINEAR_INT8_TIER", tier.name()))?;
    }
    // every emulated CPU a declaration names: the tiers that name it as
    // lacking them reported absent, the rest proven
    let mut cpus: Vec<&str> = arm
        .iter()
        .flat_map(|t| std::iter::once(t.spec().emulated_with).chain(t.emulated_without().iter().copied()))
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    for cpu in cpus {
        let (absent, present): (Vec<Int8Tier>, Vec<Int8Tier>) =
            arm.iter().partition(|t| t.emulated_without().contains(&cpu));
        let mut proven = vec!["scalar"];
        proven.extend(names(present));
        run(test()
            .args(packages)
            .env(runner, format!("{QEMU} -cpu {cpu}"))
            .env("QLINEAR_EXPECT_PROVEN", proven.join(","))
            .env("QLINEAR_EXPECT_ABSENT", names(absent).join(",")))?;
    }
    Ok(())
}

/// The kernel, dispatch and facade suites for `wasm32-wasip1` under Node.js
/// (the runner in `.cargo/config.toml`), once per WebAssembly build: with
/// each wasm tier's target features ([`Int8Tier::build_features`]: `+simd128`,
/// then `+simd128,+relaxed-simd`), where that tier and the ones before it are
/// proven and the rest reported absent, and once without `+simd128` (every
/// wasm tier absent, the scalar fallback carrying everything). The last
/// build also runs the dispatch and facade suites with each wasm tier forced.
/// Each build has its own target directory so none rebuilds another.
pub(crate) fn wasm_tests() -> Result {
    ensure_target(WASI)?;
    if !have("node") {
        return Err("the wasm tests run under Node.js: install node (>= 20)".into());
    }
    // the recipe crate's search runs on SIMD128 or scalar `wide` vectors
    let packages = [
        "-p",
        "qlinear-quant-recipe",
        "-p",
        "qlinear-kernels-core",
        "-p",
        "qlinear-kernels-wasm",
        "-p",
        "qlinear-dispatch",
        "-p",
        "qlinear",
    ];
    let test = |dir: &str, features: &str| {
        let mut c = cargo();
        c.args(["test", "--release", "--target", WASI, "--target-dir"])
            .arg(root().join(dir));
        c.env(
            "CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS",
            format!("-C target-feature={features}"),
        );
        c
    };
    let wasm = Int8Tier::of_arch("wasm32");
    for (i, tier) in wasm.iter().enumerate() {
        let dir = format!("target/{tier}");
        let mut proven = vec!["scalar"];
        proven.extend(names(wasm[..=i].iter().copied()));
        run(test(&dir, tier.build_features())
            .args(packages)
            .env("QLINEAR_EXPECT_PROVEN", proven.join(","))
            .env("QLINEAR_EXPECT_ABSENT", names(wasm[i + 1..].iter().copied()).join(",")))?;
        if i + 1 == wasm.len() {
            // the decoder's own SIMD128 paths (attention) and its portable
            // exp, whose bits the page must share with native builds; its
            // other tests start threads, which WASI has not
            run(test(&dir, tier.build_features()).args([
                "-p",
                "qlinear-smollm",
                "--lib",
                "--",
                "attend::",
                "kv::",
                "math::",
            ]))?;
            for forced in &wasm {
                run(test(&dir, tier.build_features())
                    .args(["-p", "qlinear-dispatch", "-p", "qlinear"])
                    .env("QLINEAR_INT8_TIER", forced.name()))?;
            }
        }
        prune(&dir);
    }
    run(test("target/wasm-scalar", "-simd128")
        .args(packages)
        .env("QLINEAR_EXPECT_PROVEN", "scalar")
        .env("QLINEAR_EXPECT_ABSENT", names(wasm.iter().copied()).join(",")))?;
    prune("target/wasm-scalar");
    Ok(())
}

/// The tiers to force for the repeated test runs: those this CPU has
/// (dispatch's tier registry, `Int8Tier`, is the one list of tiers).
pub(crate) fn forced_tiers() -> Vec<&'static str> {
    names(Int8Tier::ALL.into_iter().filter(|t| t.is_available()))
}

pub(crate) fn names(tiers: impl IntoIterator<Item = Int8Tier>) -> Vec<&'static str> {
    tiers.into_iter().map(Int8Tier::name).collect()
}

/// The longest a hand-written Rust file may be, in lines.
const MAX_FILE_LINES: usize = 600;

/// The house's size rules (issue 60): no hand-written Rust file over
/// [`MAX_FILE_LINES`], and no function over clippy's `too_many_lines`
/// threshold (100 lines of code) outside tests: a test walks through a
/// case, a library function that long does several things.
fn house() -> Result {
    let mut long = Vec::new();
    for dir in ["crates", "examples", "web", "xtask", "benches", "fuzz"] {
        rust_files(&root().join(dir), &mut long)?;
    }
    long.retain(|(_, lines)| *lines > MAX_FILE_LINES);
    if !long.is_empty() {
        let list: Vec<String> = long
            .iter()
            .map(|(p, n)| format!("{} ({n} lines)", p.display()))
            .collect();
        return Err(format!(
            "over {MAX_FILE_LINES} lines, split by what they do: {}",
            list.join(", ")
        ));
    }
    run(cargo().args([
        "clippy",
        "--workspace",
        "--",
        "-D",
        "warnings",
        "-D",
        "clippy::too_many_lines",
    ]))
}

/// Every `.rs` file under `dir` (build output skipped) with its line count.
fn rust_files(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, usize)>) -> Result {
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = entry.map_err(|e| format!("{}: {e}", dir.display()))?.path();
        if path.is_dir() {
            if !path.ends_with("target") {
                rust_files(&path, out)?;
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let rel = path.strip_prefix(root()).unwrap_or(&path).to_path_buf();
            out.push((rel, text.lines().count()));
        }
    }
    Ok(())
}

/// Every `ratios.md` kept beside round files under `docs/benchmarks/runs/`
/// is what `tools/smollm_ratios.py` prints from them today, and every
/// `table.md` what `tools/accuracy_table.py` prints from the run's
/// `*.json` (side files of tokens aside, by name), and every
/// `browser-table.md` the page's bench table of its `browser-bench.json`: the figures
/// docs/BENCHMARKS.md quotes stay reproducible by the command it names.
fn kept_ratios() -> Result {
    let runs = root().join("docs/benchmarks/runs");
    let entries = std::fs::read_dir(&runs).map_err(|e| format!("{}: {e}", runs.display()))?;
    for dir in entries.filter_map(|e| Some(e.ok()?.path())).filter(|p| p.is_dir()) {
        kept_output(
            &dir.join("ratios.md"),
            "tools/smollm_ratios.py",
            std::slice::from_ref(&dir),
        )?;
        let mut evals: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| {
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                name.ends_with(".json") && !name.ends_with(".tokens.json")
            })
            .collect();
        evals.sort();
        kept_output(&dir.join("table.md"), "tools/accuracy_table.py", &evals)?;
        kept_browser_table(&dir)?;
    }
    Ok(())
}

/// A kept `browser-table.md` is what `cargo xtask browser --table` prints
/// from the `browser-bench.json` beside it.
fn kept_browser_table(dir: &std::path::Path) -> Result {
    let kept = dir.join("browser-table.md");
    let Ok(want) = std::fs::read_to_string(&kept) else {
        return Ok(());
    };
    let rows = crate::browser::read_json(&dir.join("browser-bench.json"))?;
    let got = crate::browser_bench::bench_table(rows.as_array().map_or(&[][..], Vec::as_slice))?;
    if got != want {
        return Err(format!(
            "{}: cargo xtask browser --table {} no longer prints it",
            kept.display(),
            dir.join("browser-bench.json").display()
        ));
    }
    eprintln!("xtask> {} reproduced", kept.display());
    Ok(())
}

/// `kept`, if it exists, equals what `python3 script args` prints now.
fn kept_output(kept: &std::path::Path, script: &str, args: &[std::path::PathBuf]) -> Result {
    let Ok(want) = std::fs::read_to_string(kept) else {
        return Ok(());
    };
    let out = Command::new("python3")
        .arg(script)
        .args(args)
        .current_dir(root())
        .output()
        .map_err(|e| format!("{script}: {e}"))?;
    let got = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || got != want {
        return Err(format!(
            "{}: {script} no longer prints it ({})",
            kept.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    eprintln!("xtask> {} reproduced", kept.display());
    Ok(())
}
