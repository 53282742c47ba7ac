//! Project automation: `cargo xtask <command>`.
//!
//! * `test`: everything CI checks — format, clippy `-D warnings`, docs, the
//!   workspace tests (once more with each x86 tier forced), the independent
//!   numpy golden-vector check, and the Python safetensors interop tests.
//! * `selftest`: builds the CLI in release mode and runs `qlinear selftest`.
//! * `bench [--quick]`: the benchmark matrix (see `docs/BENCHMARKS.md`).
//! * `ci`: what `.ci/run` calls (currently `test`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

type Result<T = ()> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") | Some("ci") => test(),
        Some("selftest") => selftest(&args[1..]),
        Some("bench") => bench(&args[1..]),
        _ => Err("usage: cargo xtask <test|selftest|bench [--quick]|ci>".to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Result {
    eprintln!("xtask> {cmd:?}");
    let status = cmd
        .current_dir(root())
        .status()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed with {status}"))
    }
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Makes sure `python3` can import the modules the interop checks need,
/// installing them with pip when missing.
fn ensure_python(modules: &[&str]) -> Result {
    let probe = format!("import {}", modules.join(", "));
    let ok = Command::new("python3")
        .args(["-c", &probe])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        return Ok(());
    }
    run(Command::new("python3")
        .args(["-m", "pip", "install", "--quiet"])
        .args(modules))
}

fn test() -> Result {
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    run(cargo()
        .args(["doc", "--workspace", "--no-deps"])
        .env("RUSTDOCFLAGS", "-D warnings"))?;
    run(cargo().args(["test", "--workspace"]))?;
    // The whole kernel-facing suite again on each forced tier this CPU has, so
    // a tier the plan does not pick here is still tested on every run.
    for tier in forced_tiers() {
        run(cargo()
            .args(["test", "-p", "qlinear", "-p", "qlinear-dispatch"])
            .env("QLINEAR_INT8_TIER", tier))?;
    }
    aarch64_tests()?;
    ensure_python(&["numpy", "safetensors"])?;
    run(Command::new("python3").args([
        "tools/gen_recipe_golden.py",
        "--check",
        "crates/quant-recipe/tests/data/recipe_golden.txt",
    ]))?;
    python_interop()
}

/// Python's safetensors + numpy against ours, both directions: the committed
/// numpy-written fixture is still what the script writes, and the files
/// `qlinear convert` writes from a Python-written model are read by Python
/// with the exact dtypes, shapes, metadata and bytes of SPEC section 5.
fn python_interop() -> Result {
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

/// `cargo xtask bench [--quick]`: the bandwidth probe and the hot/cold GEMV
/// matrix; prints a table and writes `target/qlinear-bench.json`.
fn bench(args: &[String]) -> Result {
    run(cargo()
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "qlinear-benches",
            "--bin",
            "qlinear-bench",
            "--",
        ])
        .args(args))
}

/// `cargo xtask selftest [--target aarch64] [ARGS…]`: the release CLI's
/// `selftest` on this CPU, or built for aarch64 and run under qemu (`-cpu max`).
fn selftest(args: &[String]) -> Result {
    if let [flag, target, rest @ ..] = args {
        if flag == "--target" {
            if target != "aarch64" {
                return Err(format!("unknown --target {target}: this xtask cross-runs aarch64"));
            }
            ensure_aarch64()?;
            run(cargo().args([
                "build",
                "--quiet",
                "--release",
                "--target",
                AARCH64,
                "--package",
                "qlinear-cli",
            ]))?;
            let bin = root().join(format!("target/{AARCH64}/release/qlinear"));
            let qemu: Vec<&str> = QEMU.split(' ').collect();
            return run(Command::new(qemu[0])
                .args(&qemu[1..])
                .args(["-cpu", "max"])
                .arg(bin)
                .arg("selftest")
                .args(rest));
        }
    }
    run(cargo()
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "qlinear-cli",
            "--bin",
            "qlinear",
            "--",
            "selftest",
        ])
        .args(args))
}
