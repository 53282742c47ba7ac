//! `cargo xtask browser`: the page in headless Chromium, SmolLM2 decoding in
//! it with the native build's bits; `cargo xtask serve`: the page for a
//! person.

use std::sync::mpsc;
use std::time::Duration;

use super::server::{start, Site};
use super::*;

pub(crate) const WEB: &str = "wasm32-unknown-unknown";

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
/// narrower build forced, and has it do the same: with the f32 KV cache in
/// the page's own choice, the bfloat16 one in the forced builds (against a
/// native trace with `--kv bf16`), so both cache types cross the platform
/// boundary with no extra run. Fails unless every proof passed in the page,
/// the plan measured with the page's clock, the page chose the widest build
/// of the thread count and ran that many threads, and in every build the
/// prompt's ids, the tokens and every step's logits digest equal the native
/// ones.
pub(crate) fn browser() -> Result {
    if !have("chromium") {
        apt_install(&["chromium"])?;
    }
    let builds = build_page()?;
    let (model, truncated, natives) = check_files()?;
    let native = &natives[0].1;
    let (tx, rx) = mpsc::channel();
    let port = start(Site {
        web: root().join("web"),
        builds: builds.clone(),
        folders: vec![],
        models: vec![("smollm2-q4g32".into(), model), ("truncated".into(), truncated)],
        results: Some(tx),
    })?;
    println!(
        "native (tier {}): {} prompt tokens, {} generated",
        Int8Tier::Scalar.name(),
        native["prompt_ids"].as_array().map_or(0, Vec::len),
        native["tokens"].as_array().map_or(0, Vec::len)
    );
    println!("| build | threads | KV | decode tier | selftest ms | plan ms | ids, tokens, digests as native | prefill tok/s | decode tok/s | wasm memory / file | page load to first token ms |");
    println!("|---|--:|---|---|--:|--:|---|--:|--:|--:|--:|");
    let mut failures = vec![];
    for (forced, threads, want) in check_runs(&builds) {
        // the forced builds with the bfloat16 cache
        let (kv, native) = &natives[usize::from(forced.is_some())];
        let mut url = format!(
            "http://127.0.0.1:{port}/index.html?check=/model/smollm2-q4g32&tokens={TOKENS}&threads={threads}&kv={kv}&prompt={}",
            percent(PROMPT)
        );
        match forced {
            Some(b) => url.push_str(&format!("&build={b}&gemv=0")),
            // the truncated file first, in the page's own run
            None => url = url.replace("check=/model/", "check=/model/truncated,/model/"),
        }
        let page = open_page(&url, &rx)?;
        match judge(&page, native, want, threads, kv) {
            Ok(row) => println!("{row}"),
            Err(e) => {
                println!("| {want} | {threads} | {kv} | FAILED: {e} |");
                failures.push(format!("{want} at {threads} threads, KV {kv}: {e}"));
            }
        }
        if forced.is_none() && threads == 1 {
            if let Err(e) = report_first_run(&page) {
                failures.push(e);
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

/// The native scalar tier's traces, per KV cache type the check runs
/// (`f32`, then `bf16`).
type Natives = [(&'static str, serde_json::Value); 2];

/// The check's files in `target/browser`: the real SmolLM2 file converted
/// (q4g32, the token table at q8), the same cut to 3/5 of its length, and
/// the native scalar tier's traces of [`TOKENS`] greedy tokens of
/// [`PROMPT`] on it, with an f32 and a bfloat16 KV cache.
fn check_files() -> Result<(PathBuf, PathBuf, Natives)> {
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
    let native = |kv: &'static str| -> Result<(&'static str, serde_json::Value)> {
        let trace = dir.join(format!("native-{kv}.json"));
        run(Command::new(&smollm)
            .arg(&model)
            .args([
                "--prompt",
                PROMPT,
                "--max-tokens",
                &TOKENS.to_string(),
                "--threads",
                "1",
                "--kv",
                kv,
            ])
            .arg("--trace")
            .arg(&trace)
            .env("QLINEAR_INT8_TIER", Int8Tier::Scalar.name())
            .stdout(std::process::Stdio::null()))?;
        Ok((kv, read_json(&trace)?))
    };
    let natives = [native("f32")?, native("bf16")?];
    if natives[0].1["logits_digests"] == natives[1].1["logits_digests"] {
        return Err("the bf16 KV cache gave the f32 cache's logits: --kv did not reach the cache".into());
    }
    Ok((model, truncated, natives))
}

/// The check's page runs as (forced build, threads, the build expected):
/// at each thread count the page's own choice first (it must be the widest
/// build of that kind), then each narrower one forced.
fn check_runs(builds: &[Build]) -> Vec<(Option<&str>, usize, &str)> {
    let mut runs = vec![];
    for threads in [1, 2] {
        let kind: Vec<&str> = builds
            .iter()
            .filter(|b| b.threads == (threads > 1))
            .map(|b| b.name.as_str())
            .collect();
        if let Some((widest, narrower)) = kind.split_last() {
            runs.push((None, threads, *widest));
            runs.extend(narrower.iter().map(|&b| (Some(b), threads, b)));
        }
    }
    runs
}

/// The page's own first run: the truncated file must have been refused
/// with a message that says it is cut short before the whole one loaded;
/// prints that message, the selftest and the GEMV timings.
fn report_first_run(page: &serde_json::Value) -> Result {
    let first = &page["attempts"][0];
    let refused = match first["error"].as_str() {
        Some(e) if first["url"] == "/model/truncated" && e.contains("it is cut short") => {
            println!("the truncated file, then the whole one: the page said \"{e}\" and loaded the next");
            Ok(())
        }
        _ => Err(format!("the truncated file was not refused with a message: {first}")),
    };
    println!("{}", page["loaded"]["selftest"]["text"].as_str().unwrap_or(""));
    for row in page["gemv"].as_array().into_iter().flatten() {
        println!("{}", row.as_str().unwrap_or(""));
    }
    refused
}

/// One row of the table for the page's result, or what is wrong with it.
fn judge(
    page: &serde_json::Value,
    native: &serde_json::Value,
    build: &str,
    threads: usize,
    kv: &str,
) -> Result<String> {
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
    // the selftest and plan that loading the file ran for its census
    let s = &page["loaded"]["selftest"];
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
        "| {build} | {threads} | {kv} | {} | {:.1} | {:.1} | yes ({} tokens, {} digests) | {} | {} | {:.2} | {:.0} |",
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
pub(crate) fn open_page(url: &str, results: &mpsc::Receiver<String>) -> Result<serde_json::Value> {
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
pub(crate) fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value> {
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
