//! `cargo xtask bench`: the benchmark matrix, the per-call table and ggml beside them.

use super::*;

/// `cargo xtask bench [--quick] [--repeat N] [--compare REV] [--ggml]`: the bandwidth
/// probe and the hot/cold GEMV matrix; prints a table and writes
/// `target/qlinear-bench.json`. `--per-call`: instead, `Linear::forward`
/// against the bare kernel entry at the small models' shapes, hot, and the
/// time outside the kernels split into the activation rows' quantization
/// and the checks and dispatch (`target/qlinear-per-call.json`); with `--callgrind` as well, then the
/// share of each M = 1 call's instructions outside the micro-kernels
/// (`tools/callgrind_share.py`, which needs valgrind). `--candle` builds the bench with the peer
/// comparison (candle-core's `QMatMul`). `--compare REV` builds the same
/// runner from git revision REV (a worktree under `target/compare/`, its own
/// target directory) and alternates the two: after each repeat of this
/// revision's matrix, REV's runs once, and the table gives both medians and
/// their ratio. Every other argument goes to `qlinear-bench`.
pub(crate) fn bench(args: &[String]) -> Result {
    if args.iter().any(|a| a == "--ggml") {
        return ggml_bench(args);
    }
    let candle = args.iter().any(|a| a == "--candle");
    let callgrind = args.iter().any(|a| a == "--callgrind");
    if callgrind && !args.iter().any(|a| a == "--per-call") {
        return Err("--callgrind goes with --per-call".into());
    }
    let features: &[&str] = if candle { &["--features", "candle"] } else { &[] };
    let compare = args
        .iter()
        .position(|a| a == "--compare")
        .map(|i| args.get(i + 1).cloned().ok_or("--compare needs a git revision"))
        .transpose()?;
    let mut passthrough: Vec<String> = vec![];
    let mut skip = false;
    for a in args {
        if std::mem::take(&mut skip) {
            continue;
        }
        match a.as_str() {
            "--candle" | "--callgrind" => {}
            "--compare" => skip = true,
            _ => passthrough.push(a.clone()),
        }
    }
    if let Some(rev) = compare {
        let hash = String::from_utf8(
            Command::new("git")
                .args(["rev-parse", "--verify", &format!("{rev}^{{commit}}")])
                .current_dir(root())
                .output()
                .map_err(|e| format!("git: {e}"))?
                .stdout,
        )
        .map_err(|e| e.to_string())?
        .trim()
        .to_string();
        if hash.is_empty() {
            return Err(format!("--compare {rev}: not a git revision here"));
        }
        let tree = root().join("target/compare").join(&hash[..12]);
        if !tree.join("Cargo.toml").exists() {
            run(Command::new("git")
                .args(["worktree", "add", "--force", "--detach"])
                .arg(&tree)
                .arg(&hash))?;
        }
        run(build_bench_runner()
            .arg("--manifest-path")
            .arg(tree.join("Cargo.toml"))
            .args(features)
            .env("CARGO_TARGET_DIR", tree.join("target")))?;
        let other = tree.join("target/release/qlinear-bench");
        passthrough.push("--compare-with".into());
        passthrough.push(other.display().to_string());
        passthrough.push("--compare-json".into());
        passthrough.push(tree.join("target/qlinear-bench.json").display().to_string());
    }
    run(cargo()
        .args(["run", "--quiet", "--release", "--package", "qlinear-benches"])
        .args(features)
        .args(["--bin", "qlinear-bench", "--"])
        .args(&passthrough))?;
    if callgrind {
        run(Command::new("python3")
            .arg("tools/callgrind_share.py")
            .current_dir(root()))?;
    }
    Ok(())
}

/// `cargo build` of the `qlinear-bench` runner in release (callers add a
/// manifest, features or a target directory).
pub(crate) fn build_bench_runner() -> Command {
    let mut c = cargo();
    c.args([
        "build",
        "--quiet",
        "--release",
        "--package",
        "qlinear-benches",
        "--bin",
        "qlinear-bench",
    ]);
    c
}

/// `cargo xtask bench --ggml [--repeat R] [--shape NxK]`: ggml's own matrix
/// multiply (repacked Q4_0 and Q8_0, from PyPI's `llama-cpp-python` built
/// from source with the native CPU flags, in a virtual environment under
/// `target/`) against qlinear's plan at M = 1, 16 and 256, the two runners
/// alternated R times (`tools/ggml_bench.py --alternate`); the table to
/// stdout, the rows to `target/ggml-bench.json`. Not part of CI: the build
/// takes minutes.
pub(crate) fn ggml_bench(args: &[String]) -> Result {
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let python = llama_cpp_python()?;
    let lib = Command::new(&python)
        .args([
            "-c",
            "import llama_cpp, os; print(os.path.join(os.path.dirname(llama_cpp.__file__), 'lib'))",
        ])
        .output()
        .map_err(|e| format!("{}: {e}", python.display()))?;
    let lib = String::from_utf8_lossy(&lib.stdout).trim().to_string();
    run(&mut build_bench_runner())?;
    run(Command::new(&python)
        .arg(root().join("tools/ggml_bench.py"))
        .args(["--lib", &lib, "--m", "1,16,256"])
        .args(["--shape", &opt("--shape").unwrap_or_else(|| "11008x4096".into())])
        .args(["--repeat", &opt("--repeat").unwrap_or_else(|| "3".into())])
        .arg("--alternate")
        .arg(root().join("target/release/qlinear-bench"))
        .arg("--json")
        .arg(root().join("target/ggml-bench.json")))
}
