//! `cargo xtask browser`: the page in headless Chromium, SmolLM2 decoding in
//! it with the native build's bits; `cargo xtask serve`: the page for a
//! person.

use std::sync::mpsc;
use std::time::Duration;

use super::server::{start, Site};
use super::*;

const WEB: &str = "wasm32-unknown-unknown";

/// The prompt the page and the native binary both continue greedily.
const PROMPT: &str = "Once upon a time, in a small village by the sea,";

/// Tokens generated in the comparison.
const TOKENS: usize = 16;

/// The version of the `wasm-bindgen` crate in `Cargo.lock` (web/Cargo.toml
/// pins it exactly): the CLI must be the same version.
fn wasm_bindgen_version() -> Result<String> {
    let lock = std::fs::read_to_string(root().join("Cargo.lock")).map_err(|e| format!("Cargo.lock: {e}"))?;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == "name = \"wasm-bindgen\"" {
            if let Some(v) = lines.next().and_then(|l| l.strip_prefix("version = \"")) {
                return Ok(v.trim_end_matches('"').to_string());
            }
        }
    }
    Err("Cargo.lock has no wasm-bindgen package".into())
}

/// Installs the `wasm-bindgen` CLI of the crate's version with `cargo
/// install` when it is missing or another version.
fn ensure_wasm_bindgen() -> Result<String> {
    let version = wasm_bindgen_version()?;
    let have = Command::new("wasm-bindgen")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if have != format!("wasm-bindgen {version}") {
        run(cargo().args([
            "install",
            "--quiet",
            "wasm-bindgen-cli",
            "--version",
            &format!("={version}"),
        ]))?;
    }
    Ok("wasm-bindgen".into())
}

/// The nightly toolchain the threaded builds use: threads in
/// `wasm32-unknown-unknown` need std rebuilt with atomics (`-Z build-std`),
/// which only nightly does. Pinned, so that a build does not change under
/// us; [`ensure_nightly`] installs it with `rust-src` and the target.
pub(crate) const NIGHTLY: &str = "nightly-2026-05-20";

/// Installs [`NIGHTLY`] (minimal profile, `rust-src`, the wasm target) when
/// it is missing.
fn ensure_nightly() -> Result {
    let ok = Command::new("rustup")
        .args(["run", NIGHTLY, "rustc", "--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .is_some_and(|root| {
            root.join("lib/rustlib/src/rust/library/std").exists() && root.join(format!("lib/rustlib/{WEB}")).exists()
        });
    if ok {
        return Ok(());
    }
    run(Command::new("rustup").args([
        "toolchain",
        "install",
        NIGHTLY,
        "--profile",
        "minimal",
        "--component",
        "rust-src",
        "--target",
        WEB,
    ]))
}

/// One build of the page's module: its name (the widest tier it holds, and
/// `-threads` for a build with atomics) and wasm-bindgen's output folder.
#[derive(Clone)]
pub(crate) struct Build {
    pub(crate) name: String,
    pub(crate) threads: bool,
    pub(crate) dir: PathBuf,
}

/// Builds the page's module once per wasm tier of the registry, each with
/// its target features (`+simd128`, `+simd128,+relaxed-simd`) and the tiers
/// before it, and each twice: on stable without threads, and on
/// [`NIGHTLY`] with atomics (std rebuilt, shared memory of up to 4 GiB,
/// rayon's pool on Web Workers: `wasm-bindgen-rayon`). Binds each with
/// `wasm-bindgen --target web` into `target/web-pkg/NAME/`; returns them in
/// the registry's order, the threaded build after the plain one.
pub(crate) fn build_page() -> Result<Vec<Build>> {
    ensure_target(WEB)?;
    ensure_nightly()?;
    let bindgen = ensure_wasm_bindgen()?;
    let mut builds = Vec::new();
    for tier in Int8Tier::of_arch("wasm32") {
        for threads in [false, true] {
            let name = if threads {
                format!("{tier}-threads")
            } else {
                tier.to_string()
            };
            let dir = format!("target/web-{name}");
            // getrandom (the tokenizer's hash maps) reaches the browser's
            // crypto through wasm-bindgen with this cfg
            let mut flags = format!(
                "--cfg getrandom_backend=\"wasm_js\" -C target-feature={}",
                tier.build_features()
            );
            let mut build = if threads {
                flags.push_str(",+atomics,+bulk-memory,+mutable-globals");
                // a memory the workers share, of up to 4 GiB, and the
                // thread-local storage each worker sets up (this nightly's
                // rustc no longer passes these for `+atomics` itself)
                for arg in [
                    "--shared-memory",
                    "--import-memory",
                    "--max-memory=4294967296",
                    "--export=__wasm_init_tls",
                    "--export=__tls_size",
                    "--export=__tls_align",
                    "--export=__tls_base",
                ] {
                    flags.push_str(&format!(" -C link-arg={arg}"));
                }
                let mut c = Command::new("rustup");
                c.args(["run", NIGHTLY, "cargo", "build", "-Z", "build-std=panic_abort,std"]);
                // the outer cargo's own toolchain must not leak in
                for var in ["RUSTUP_TOOLCHAIN", "RUSTC", "CARGO", "RUSTDOC"] {
                    c.env_remove(var);
                }
                c
            } else {
                let mut c = cargo();
                c.arg("build");
                c
            };
            run(build
                .args(["--quiet", "--release", "--target", WEB, "--target-dir"])
                .arg(&dir)
                .args(["-p", "qlinear-web"])
                .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS", flags))?;
            let module = root().join(format!("{dir}/{WEB}/release/qlinear_web.wasm"));
            let out = root().join(format!("target/web-pkg/{name}"));
            let _ = std::fs::remove_dir_all(&out);
            run(Command::new(&bindgen)
                .args(["--target", "web", "--no-typescript", "--out-dir"])
                .arg(&out)
                .arg(&module))?;
            prune(&dir);
            builds.push(Build {
                name,
                threads,
                dir: out,
            });
        }
    }
    Ok(builds)
}

/// The native `qlinear` and `qlinear-smollm` binaries, built in release.
pub(crate) fn native_binaries() -> Result<(PathBuf, PathBuf)> {
    run(cargo().args([
        "build",
        "--quiet",
        "--release",
        "-p",
        "qlinear-cli",
        "-p",
        "qlinear-smollm",
    ]))?;
    Ok((
        root().join("target/release/qlinear"),
        root().join("target/release/qlinear-smollm"),
    ))
}

/// `cargo xtask browser`: builds the page ([`build_page`]), converts the
/// real SmolLM2-135M file (the wheel's Q4_1 GGUF, to q4g32 with the token
/// table at q8: W4A8 projections, a W8A8 head), runs the native
/// `qlinear-smollm` on it on the scalar tier (greedy, [`TOKENS`] tokens of
/// [`PROMPT`], the logits of every step fingerprinted), then opens the page
/// in headless Chromium (Debian's `chromium`, installed when missing) at 1
/// and at 2 threads, each once with the build it chooses and once per
/// narrower build forced, and has it do the same. Fails unless every proof
/// passed in the page, the plan measured with the page's clock, the page
/// chose the widest build of the thread count and ran that many threads,
/// and in every build the prompt's ids, the tokens and every step's logits
/// digest equal the native ones.
pub(crate) fn browser() -> Result {
    if !have("chromium") {
        apt_install(&["chromium"])?;
    }
    let builds = build_page()?;
    let (cli, smollm) = native_binaries()?;
    let gguf = smollm2_gguf()?;
    let dir = root().join("target/browser");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let model = dir.join("smollm2-q4g32.safetensors");
    run(Command::new(&cli)
        .arg("convert")
        .arg(&gguf)
        .arg(&model)
        .args(["--scheme", "q4g32", "--tensor-scheme", "token_embd=q8", "--force"])
        .stdout(std::process::Stdio::null()))?;
    // a file cut short: the page must say so and then load the whole one
    let truncated = dir.join("truncated.safetensors");
    let bytes = std::fs::read(&model).map_err(|e| format!("{}: {e}", model.display()))?;
    std::fs::write(&truncated, &bytes[..bytes.len() * 3 / 5]).map_err(|e| format!("{}: {e}", truncated.display()))?;
    let trace = dir.join("native.json");
    let scalar = Int8Tier::Scalar.name();
    run(Command::new(&smollm)
        .arg(&model)
        .args([
            "--prompt",
            PROMPT,
            "--max-tokens",
            &TOKENS.to_string(),
            "--threads",
            "1",
        ])
        .arg("--trace")
        .arg(&trace)
        .env("QLINEAR_INT8_TIER", scalar)
        .stdout(std::process::Stdio::null()))?;
    let native: serde_json::Value = read_json(&trace)?;
    let (tx, rx) = mpsc::channel();
    let port = start(Site {
        web: root().join("web"),
        builds: builds.clone(),
        folders: vec![],
        models: vec![
            ("smollm2-q4g32".into(), model.clone()),
            ("truncated".into(), truncated.clone()),
        ],
        results: Some(tx),
    })?;
    // at each thread count, the page's own choice first (it must be the
    // widest build of that kind), then each narrower one forced
    let mut runs: Vec<(Option<&str>, usize, &str)> = vec![];
    for threads in [1, 2] {
        let kind: Vec<&str> = builds
            .iter()
            .filter(|b| b.threads == (threads > 1))
            .map(|b| b.name.as_str())
            .collect();
        if let Some((widest, narrower)) = kind.split_last() {
            runs.push((None, threads, widest));
            runs.extend(narrower.iter().map(|&b| (Some(b), threads, b)));
        }
    }
    let mut failures = vec![];
    println!(
        "native (tier {scalar}): {} prompt tokens, {} generated",
        native["prompt_ids"].as_array().map_or(0, Vec::len),
        native["tokens"].as_array().map_or(0, Vec::len)
    );
    println!("| build | threads | decode tier | selftest ms | plan ms | ids, tokens, digests as native | prefill tok/s | decode tok/s | wasm memory / file | page load to first token ms |");
    println!("|---|--:|---|--:|--:|---|--:|--:|--:|--:|");
    for (forced, threads, want) in runs {
        let mut url = format!(
            "http://127.0.0.1:{port}/index.html?check=/model/smollm2-q4g32&tokens={TOKENS}&threads={threads}&prompt={}",
            percent(PROMPT)
        );
        match forced {
            Some(b) => url.push_str(&format!("&build={b}&gemv=0")),
            // the truncated file first, in the page's own run
            None => url = url.replace("check=/model/", "check=/model/truncated,/model/"),
        }
        let page = open_page(&url, &rx)?;
        match judge(&page, &native, want, threads) {
            Ok(row) => println!("{row}"),
            Err(e) => {
                println!("| {want} | {threads} | FAILED: {e} |");
                failures.push(format!("{want} at {threads} threads: {e}"));
            }
        }
        if forced.is_none() && threads == 1 {
            let first = &page["attempts"][0];
            match first["error"].as_str() {
                Some(e) if first["url"] == "/model/truncated" && e.contains("it is cut short") => {
                    println!("the truncated file, then the whole one: the page said \"{e}\" and loaded the next")
                }
                _ => failures.push(format!("the truncated file was not refused with a message: {first}")),
            }
            let s = &page["ready"]["selftest"]["text"];
            println!("{}", s.as_str().unwrap_or(""));
            for row in page["gemv"].as_array().into_iter().flatten() {
                println!("{}", row.as_str().unwrap_or(""));
            }
        }
    }
    if pruning() {
        // the stage's own builds and files (the model wheel stays for the
        // next stage that reads it)
        prune("target/browser");
        prune("target/release");
    }
    if failures.is_empty() {
        println!("RESULT: PASS every build decodes SmolLM2 with the native scalar tier's tokens and logits bits");
        Ok(())
    } else {
        Err(format!("the page did not pass: {}", failures.join("; ")))
    }
}

/// One row of the table for the page's result, or what is wrong with it.
fn judge(page: &serde_json::Value, native: &serde_json::Value, build: &str, threads: usize) -> Result<String> {
    if let Some(e) = page["error"].as_str() {
        return Err(format!("the page failed: {e}"));
    }
    let ready = &page["ready"];
    if ready["build"].as_str() != Some(build) {
        return Err(format!("ran the {} build", ready["build"]));
    }
    if ready["threads"].as_u64() != Some(threads as u64) {
        return Err(format!("ran {} threads", ready["threads"]));
    }
    let s = &ready["selftest"];
    let text = s["text"].as_str().unwrap_or("");
    if s["passed"].as_bool() != Some(true) {
        return Err(format!("a compiled-in tier failed its proof:\n{text}"));
    }
    // every wasm tier of this build, and none narrower is missing, is
    // proven: the build named for tier T holds the tiers before it
    let tiers = Int8Tier::of_arch("wasm32");
    let tier = build.strip_suffix("-threads").unwrap_or(build);
    let upto = tiers.iter().position(|t| t.name() == tier).unwrap_or(0);
    for t in &tiers[..=upto] {
        let line = text.lines().find(|l| l.split_whitespace().next() == Some(t.name()));
        if !line.is_some_and(|l| l.contains(" ok")) {
            return Err(format!("tier {t} is not proven in the page:\n{text}"));
        }
    }
    if !text.contains("plan: measured in") {
        return Err(format!("the plan did not measure with the page's clock:\n{text}"));
    }
    let generated = &page["generated"];
    for key in ["prompt_ids", "tokens"] {
        if generated[key] != native[key] {
            return Err(format!(
                "{key}: the page's {} against native {}",
                generated[key], native[key]
            ));
        }
    }
    let (got, want) = (&generated["digests"], &native["logits_digests"]);
    if got != want {
        let (g, w) = (
            got.as_array().cloned().unwrap_or_default(),
            want.as_array().cloned().unwrap_or_default(),
        );
        let step = g
            .iter()
            .zip(&w)
            .position(|(a, b)| a != b)
            .unwrap_or(g.len().min(w.len()));
        return Err(format!(
            "the logits of step {step} differ in their bits ({} steps in the page, {} native)",
            g.len(),
            w.len()
        ));
    }
    let rate = |n: &serde_json::Value, ms: &serde_json::Value| {
        let (n, ms) = (n.as_f64().unwrap_or(0.0), ms.as_f64().unwrap_or(0.0));
        if ms > 0.0 {
            format!("{:.1}", n * 1e3 / ms)
        } else {
            "-".into()
        }
    };
    let loaded = &page["loaded"];
    Ok(format!(
        "| {build} | {threads} | {} | {:.1} | {:.1} | yes ({} tokens, {} digests) | {} | {} | {:.2} | {:.0} |",
        loaded["tier"].as_str().unwrap_or("?"),
        s["selftest_ms"].as_f64().unwrap_or(0.0),
        s["plan_ms"].as_f64().unwrap_or(0.0),
        generated["tokens"].as_array().map_or(0, Vec::len),
        got.as_array().map_or(0, Vec::len),
        rate(&generated["prompt_tokens"], &generated["prefill_ms"]),
        rate(&generated["decode_steps"], &generated["decode_ms"]),
        generated["memory_bytes"].as_f64().unwrap_or(0.0) / loaded["bytes"].as_f64().unwrap_or(1.0),
        page["first_token_ms"].as_f64().unwrap_or(f64::NAN),
    ))
}

/// Opens `url` in headless Chromium and waits (at most 10 minutes) for
/// the page's `POST /result`; returns it parsed.
fn open_page(url: &str, results: &mpsc::Receiver<String>) -> Result<serde_json::Value> {
    let profile = std::env::temp_dir().join(format!("qlinear-chromium-{}", std::process::id()));
    eprintln!("xtask> chromium --headless {url}");
    let mut child = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        .args([
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start chromium: {e}"))?;
    let got = results.recv_timeout(Duration::from_secs(600));
    let _ = child.kill();
    let out = child.wait_with_output().ok();
    let _ = std::fs::remove_dir_all(&profile);
    match got {
        Ok(body) => serde_json::from_str(&body).map_err(|e| format!("the page's result is not JSON ({e}): {body}")),
        Err(_) => Err(format!(
            "the page sent no result in 10 minutes; chromium said: {}",
            out.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                .unwrap_or_default()
        )),
    }
}

/// `s` for a URL's query: every byte but the unreserved ones as `%XX`.
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// `cargo xtask serve [FILE…]`: builds the page and serves it on
/// 127.0.0.1 (cross-origin isolated) until stopped; each FILE is offered
/// at `model/NAME` beside the page's file picker.
pub(crate) fn serve_page(args: &[String]) -> Result {
    let builds = build_page()?;
    let models = args
        .iter()
        .map(|a| {
            let p = PathBuf::from(a);
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, p)
        })
        .collect::<Vec<_>>();
    let port = start(Site {
        web: root().join("web"),
        builds,
        models: models.clone(),
        folders: vec![],
        results: None,
    })?;
    println!("the page: http://127.0.0.1:{port}/index.html (Ctrl-C stops the server)");
    for (name, _) in &models {
        println!(
            "  {name}: http://127.0.0.1:{port}/index.html?check=/model/{}&tokens=64&prompt=Hello",
            percent(name)
        );
    }
    loop {
        std::thread::park();
    }
}

/// The configurations `browser --bench` times, as `cargo xtask smollm`
/// converts them into `target/smollm` (file stem, mode), each with the GGUF
/// file of llama.cpp's type it is compared with at matched accuracy: the q8
/// rotated W8A8 file with Q8_0, the q4g32 GPTQ-rotated W4A8 file with Q4_0
/// (both GGUFs made from the shipped one by `tools/gguf_fixtures.py`).
const BENCHED: [(&str, &str, &str); 2] = [
    ("q8-rotated", "W8A8", "SmolLM2-135M-Instruct.Q8_0.gguf"),
    ("q4g32-gptq", "W4A8", "SmolLM2-135M-Instruct.Q4_0.gguf"),
];

/// The browser peer, pinned: npm's `@wllama/wllama` (llama.cpp compiled to
/// WebAssembly with SIMD128 and pthreads).
const WLLAMA: &str = "3.8.1";

/// Installs [`WLLAMA`] with npm into `target/wllama` when it is missing or
/// another version; returns the folder of its ES module build.
fn ensure_wllama() -> Result<PathBuf> {
    let dir = root().join("target/wllama");
    let package = dir.join("node_modules/@wllama/wllama");
    let installed = read_json(&package.join("package.json")).unwrap_or_default();
    if installed["version"].as_str() != Some(WLLAMA) {
        if !have("npm") {
            apt_install(&["npm"])?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        run(Command::new("npm")
            .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(format!("@wllama/wllama@{WLLAMA}")))?;
    }
    Ok(package.join("esm"))
}

/// What one round measured of one configuration at one thread count:
/// prefill and decode tok/s in the page, natively, and of wllama (zeros
/// where not measured).
#[derive(Clone, Copy, Default)]
struct Round {
    page: (f64, f64),
    native: (f64, f64),
    wllama: (f64, f64),
}

/// `cargo xtask browser --bench [--wllama] [--repeat R]`: SmolLM2's prefill
/// of 128 tokens of GPL-3 and 128 greedy decode steps in the page (the
/// widest build at 1 thread, its threaded build at 2) and in the native
/// `qlinear-smollm --bench` on the same tokens, and with `--wllama` in
/// wllama (pinned [`WLLAMA`], its thread mode checked every row) on the
/// GGUF each file is compared with; R rounds (default 3) in which qlinear
/// (native, then the page) and wllama alternate (qlinear first in even
/// rounds), each page run after an untimed warm-up. Prints medians, ranges
/// and the ratios per round; the round files are kept in
/// `target/browser-bench/`, the rows in `target/browser-bench.json`. Needs
/// the files `cargo xtask smollm` makes. Not in CI.
pub(crate) fn browser_bench(args: &[String]) -> Result {
    let repeat = repeat_arg(args);
    let with_wllama = args.iter().any(|a| a == "--wllama");
    let dir = root().join("target/smollm");
    let file = |f: &str| dir.join(format!("{f}.safetensors"));
    if with_wllama && dir.join("SmolLM2-135M-Instruct.Q4_0.gguf").exists() {
        // `cargo xtask smollm` makes the Q4_0 file; the Q8_0 one only for
        // llama.cpp's rows, so here when missing
        q8_0_gguf(&smollm2_gguf()?)?;
    }
    for (f, _, gguf) in BENCHED {
        for path in [file(f), dir.join(gguf)] {
            if !path.exists() && (with_wllama || path.extension().is_some_and(|e| e == "safetensors")) {
                return Err(format!(
                    "{}: missing; run cargo xtask smollm first: it makes the files timed here",
                    path.display()
                ));
            }
        }
    }
    if !have("chromium") {
        apt_install(&["chromium"])?;
    }
    let builds = build_page()?;
    let (_, smollm) = native_binaries()?;
    let folders = if with_wllama {
        vec![("wllama".to_string(), ensure_wllama()?)]
    } else {
        vec![]
    };
    let out = root().join("target/browser-bench");
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let gpl = "/usr/share/common-licenses/GPL-3";
    let (tx, rx) = mpsc::channel();
    let plain = builds
        .iter()
        .rfind(|b| !b.threads)
        .map(|b| b.name.clone())
        .unwrap_or_default();
    let threaded = builds
        .iter()
        .rfind(|b| b.threads)
        .map(|b| b.name.clone())
        .unwrap_or_default();
    let mut models: Vec<(String, PathBuf)> = BENCHED.iter().map(|(f, _, _)| (f.to_string(), file(f))).collect();
    models.extend(BENCHED.iter().map(|(_, _, g)| (g.to_string(), dir.join(g))));
    let port = start(Site {
        web: root().join("web"),
        builds,
        models,
        folders,
        results: Some(tx),
    })?;
    let mut rounds: Vec<Vec<Round>> = vec![vec![]; BENCHED.len() * 2];
    let mut memory = vec![0f64; BENCHED.len()];
    let mut wllama_mode = String::new();
    let (mut ids, mut text) = (String::new(), String::new());
    for r in 0..repeat {
        let native_json = out.join(format!("native-{r}.json"));
        let mut kept = vec![];
        for slot in &mut rounds {
            slot.push(Round::default());
        }
        // qlinear first in even rounds (round 0 also gives the prompt's ids)
        let order: &[bool] = if r % 2 == 0 { &[true, false] } else { &[false, true] };
        for &qlinear in order {
            if qlinear {
                run(Command::new(&smollm)
                    .args(BENCHED.iter().map(|(f, m, _)| format!("{}@{m}", file(f).display())))
                    .args(["--bench", gpl, "--bench-threads", "1,2", "--repeat", "1", "--json"])
                    .arg(&native_json)
                    .stdout(std::process::Stdio::null()))?;
                if ids.is_empty() {
                    let read =
                        |ext: &str| std::fs::read_to_string(native_json.with_extension(ext)).map_err(|e| e.to_string());
                    (ids, text) = (read("prompt")?, read("prompt.txt")?);
                }
                for row in read_json(&native_json)?.as_array().into_iter().flatten() {
                    let model = row["model"].as_str().unwrap_or("");
                    let Some(c) = BENCHED
                        .iter()
                        .position(|(f, m, _)| model.ends_with(&format!("{f}.safetensors@{m}")))
                    else {
                        continue;
                    };
                    let t = usize::from(row["threads"].as_u64() == Some(2));
                    if let Some(last) = rounds[2 * c + t].last_mut() {
                        last.native = (
                            row["prefill_tok_s"]["median"].as_f64().unwrap_or(0.0),
                            row["decode_tok_s"]["median"].as_f64().unwrap_or(0.0),
                        );
                    }
                }
            }
            for (c, (f, mode, gguf)) in BENCHED.iter().enumerate() {
                for (t, threads) in [1usize, 2].into_iter().enumerate() {
                    let url = if qlinear {
                        let build = if threads == 1 { &plain } else { &threaded };
                        format!(
                            "http://127.0.0.1:{port}/index.html?bench=/model/{f}&modes={mode}&ids={ids}&tokens=128&threads={threads}&build={build}"
                        )
                    } else if with_wllama {
                        format!(
                            "http://127.0.0.1:{port}/wllama.html?model=/model/{gguf}&text={}&tokens=128&threads={threads}",
                            percent(&text)
                        )
                    } else {
                        continue;
                    };
                    let page = open_page(&url, &rx)?;
                    let who = if qlinear {
                        format!("{f}@{mode}")
                    } else {
                        format!("wllama {gguf}")
                    };
                    if let Some(e) = page["error"].as_str() {
                        let stack = page["stack"].as_str().unwrap_or("");
                        return Err(format!("{who} at {threads} threads in the page: {e}\n{stack}"));
                    }
                    let last = rounds[2 * c + t].last_mut().expect("a round was pushed");
                    if qlinear {
                        let run = &page["runs"][0];
                        let bytes = std::fs::metadata(file(f)).map(|m| m.len() as f64).unwrap_or(1.0);
                        memory[c] = memory[c].max(page["memory_bytes"].as_f64().unwrap_or(0.0) / bytes);
                        last.page = (
                            run["prefill_tok_s"].as_f64().unwrap_or(0.0),
                            run["decode_tok_s"].as_f64().unwrap_or(0.0),
                        );
                    } else {
                        // the peer's thread mode, checked on every row
                        let (mt, n) = (page["multithread"].as_bool(), page["threads"].as_u64());
                        if n != Some(threads as u64) || (threads > 1 && mt != Some(true)) {
                            return Err(format!(
                                "{who} ran {n:?} threads (multi-thread build: {mt:?}) where {threads} were asked"
                            ));
                        }
                        let tm = &page["timings"];
                        if tm["prompt_n"].as_u64() != Some(128) || tm["predicted_n"].as_u64() != Some(128) {
                            return Err(format!(
                                "{who}: timed {} prompt and {} generated tokens, not 128 and 128",
                                tm["prompt_n"], tm["predicted_n"]
                            ));
                        }
                        wllama_mode = format!(
                            "wllama {WLLAMA} (libllama {})",
                            page["libllama"].as_str().unwrap_or("?")
                        );
                        last.wllama = (
                            tm["prompt_per_second"].as_f64().unwrap_or(0.0),
                            tm["predicted_per_second"].as_f64().unwrap_or(0.0),
                        );
                    }
                    kept.push(serde_json::json!({"who": who, "threads": threads, "result": page}));
                }
            }
        }
        let path = out.join(format!("round-{r}.json"));
        std::fs::write(&path, serde_json::Value::from(kept).to_string())
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    report_bench(&rounds, &memory, repeat, &wllama_mode)
}

/// `browser --bench`'s table and `target/browser-bench.json`.
fn report_bench(rounds: &[Vec<Round>], memory: &[f64], repeat: usize, wllama: &str) -> Result {
    let chromium = Command::new("chromium")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cpu = qlinear_dispatch::cpu_model();
    println!(
        "{cpu}; {chromium}; {}; {repeat} rounds alternated; prompt 128 tokens of GPL-3, 128 decoded",
        if wllama.is_empty() { "no wllama" } else { wllama }
    );
    // each file's perplexity, where `cargo xtask smollm` scored it
    let eval = read_json(&root().join("target/smollm-eval.json")).unwrap_or_default();
    let perplexity = |f: &str, mode: &str| {
        eval.as_array()
            .into_iter()
            .flatten()
            .find(|r| {
                r["model"]
                    .as_str()
                    .is_some_and(|m| m.ends_with(&format!("{f}.safetensors@{mode}")))
            })
            .and_then(|r| r["perplexity"].as_f64())
    };
    println!(
        "| model (perplexity) | threads | page prefill tok/s | page decode tok/s | native decode tok/s | page ÷ native decode | \
         wllama file | wllama prefill tok/s | wllama decode tok/s | page ÷ wllama decode | page ÷ wllama prefill | wasm memory ÷ file |"
    );
    println!("|---|--:|--:|--:|--:|---|---|--:|--:|---|---|--:|");
    let mut json = vec![];
    let fmt = |s: (f64, f64, f64)| format!("{:.1} ({:.1}–{:.1})", s.0, s.1, s.2);
    let per_round = |rs: &[Round], f: &dyn Fn(&Round) -> f64| {
        rs.iter().map(|r| format!("{:.2}", f(r))).collect::<Vec<_>>().join(", ")
    };
    for (c, (f, mode, gguf)) in BENCHED.iter().enumerate() {
        for (t, threads) in [1usize, 2].into_iter().enumerate() {
            let rs = &rounds[2 * c + t];
            let col = |g: &dyn Fn(&Round) -> f64| spread(rs.iter().map(g).collect());
            let (pp, pd) = (col(&|r| r.page.0), col(&|r| r.page.1));
            let (nd, wp, wd) = (col(&|r| r.native.1), col(&|r| r.wllama.0), col(&|r| r.wllama.1));
            let ppl = perplexity(f, mode);
            println!(
                "| {f}@{mode} ({}) | {threads} | {} | {} | {} | {} | {gguf} | {} | {} | {} | {} | {:.2} |",
                ppl.map_or("not scored".into(), |p| format!("{p:.4}")),
                fmt(pp),
                fmt(pd),
                fmt(nd),
                per_round(rs, &|r| r.page.1 / r.native.1),
                fmt(wp),
                fmt(wd),
                per_round(rs, &|r| r.page.1 / r.wllama.1),
                per_round(rs, &|r| r.page.0 / r.wllama.0),
                memory[c]
            );
            let round_rows: Vec<serde_json::Value> = rs
                .iter()
                .map(|r| serde_json::json!({"page": [r.page.0, r.page.1], "native": [r.native.0, r.native.1], "wllama": [r.wllama.0, r.wllama.1]}))
                .collect();
            json.push(serde_json::json!({
                "model": format!("{f}@{mode}"), "perplexity": ppl, "threads": threads, "cpu": cpu,
                "chromium": chromium, "peer": wllama, "peer_file": gguf, "rounds": round_rows,
                "page_prefill_tok_s": pp, "page_decode_tok_s": pd, "native_decode_tok_s": nd,
                "wllama_prefill_tok_s": wp, "wllama_decode_tok_s": wd, "wasm_memory_over_file": memory[c],
            }));
        }
    }
    let path = root().join("target/browser-bench.json");
    std::fs::write(&path, serde_json::Value::from(json).to_string()).map_err(|e| format!("{}: {e}", path.display()))
}

/// The median, least and greatest of `v` (zeros when empty).
fn spread(mut v: Vec<f64>) -> (f64, f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}
