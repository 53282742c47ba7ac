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

/// Builds the page's module once per wasm tier of the registry, each with
/// its target features (`+simd128`, `+simd128,+relaxed-simd`) and the tiers
/// before it, and binds each with `wasm-bindgen --target web` into
/// `target/web-pkg/TIER/`; returns (tier, folder) in the registry's order.
pub(crate) fn build_page() -> Result<Vec<(String, PathBuf)>> {
    ensure_target(WEB)?;
    let bindgen = ensure_wasm_bindgen()?;
    let mut builds = Vec::new();
    for tier in Int8Tier::of_arch("wasm32") {
        let dir = format!("target/web-{tier}");
        run(cargo()
            .args(["build", "--quiet", "--release", "--target", WEB, "--target-dir"])
            .arg(&dir)
            .args(["-p", "qlinear-web"])
            .env(
                "CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS",
                // getrandom (the tokenizer's hash maps) reaches the browser's
                // crypto through wasm-bindgen with this cfg
                format!(
                    "-C target-feature={} --cfg getrandom_backend=\"wasm_js\"",
                    tier.build_features()
                ),
            ))?;
        let module = root().join(format!("{dir}/{WEB}/release/qlinear_web.wasm"));
        let out = root().join(format!("target/web-pkg/{tier}"));
        run(Command::new(&bindgen)
            .args(["--target", "web", "--no-typescript", "--out-dir"])
            .arg(&out)
            .arg(&module))?;
        prune(&dir);
        builds.push((tier.to_string(), out));
    }
    Ok(builds)
}

/// The native `qlinear` and `qlinear-smollm` binaries, built in release.
fn native_binaries() -> Result<(PathBuf, PathBuf)> {
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
/// in headless Chromium (Debian's `chromium`, installed when missing) once
/// with the build it chooses and once per narrower build forced, and has it
/// do the same. Fails unless every proof passed in the page, the plan
/// measured with the page's clock, the page chose the widest build, and in
/// every build the prompt's ids, the tokens and every step's logits digest
/// equal the native ones.
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
        models: vec![
            ("smollm2-q4g32".into(), model.clone()),
            ("truncated".into(), truncated.clone()),
        ],
        results: Some(tx),
    })?;
    let widest = builds.last().map(|b| b.0.clone()).unwrap_or_default();
    // the page's own choice first (it must be the widest), then each
    // narrower build forced
    let runs: Vec<Option<&str>> = std::iter::once(None)
        .chain(
            builds[..builds.len().saturating_sub(1)]
                .iter()
                .map(|b| Some(b.0.as_str())),
        )
        .collect();
    let mut failures = vec![];
    println!(
        "native (tier {scalar}): {} prompt tokens, {} generated",
        native["prompt_ids"].as_array().map_or(0, Vec::len),
        native["tokens"].as_array().map_or(0, Vec::len)
    );
    println!("| build | decode tier | selftest ms | plan ms | ids, tokens, digests as native | prefill tok/s | decode tok/s | wasm memory / file |");
    println!("|---|---|--:|--:|---|--:|--:|--:|");
    for forced in runs {
        let mut url = format!(
            "http://127.0.0.1:{port}/index.html?check=/model/smollm2-q4g32&tokens={TOKENS}&prompt={}",
            percent(PROMPT)
        );
        match forced {
            Some(b) => url.push_str(&format!("&build={b}&gemv=0")),
            // the truncated file first, in the page's own run
            None => url = url.replace("check=/model/", "check=/model/truncated,/model/"),
        }
        let page = open_page(&url, &rx)?;
        let want = forced.unwrap_or(&widest);
        match judge(&page, &native, want) {
            Ok(row) => println!("{row}"),
            Err(e) => {
                println!("| {want} | FAILED: {e} |");
                failures.push(format!("{want}: {e}"));
            }
        }
        if forced.is_none() {
            let first = &page["attempts"][0];
            match first["error"].as_str() {
                Some(e) if first["url"] == "/model/truncated" && !e.is_empty() => {
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
fn judge(page: &serde_json::Value, native: &serde_json::Value, build: &str) -> Result<String> {
    if let Some(e) = page["error"].as_str() {
        return Err(format!("the page failed: {e}"));
    }
    let ready = &page["ready"];
    if ready["build"].as_str() != Some(build) {
        return Err(format!("ran the {} build", ready["build"]));
    }
    let s = &ready["selftest"];
    let text = s["text"].as_str().unwrap_or("");
    if s["passed"].as_bool() != Some(true) {
        return Err(format!("a compiled-in tier failed its proof:\n{text}"));
    }
    // every wasm tier of this build, and none narrower is missing, is
    // proven: the build named for tier T holds the tiers before it
    let tiers = Int8Tier::of_arch("wasm32");
    let upto = tiers.iter().position(|t| t.name() == build).unwrap_or(0);
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
        "| {build} | {} | {:.1} | {:.1} | yes ({} tokens, {} digests) | {} | {} | {:.2} |",
        loaded["tier"].as_str().unwrap_or("?"),
        s["selftest_ms"].as_f64().unwrap_or(0.0),
        s["plan_ms"].as_f64().unwrap_or(0.0),
        generated["tokens"].as_array().map_or(0, Vec::len),
        got.as_array().map_or(0, Vec::len),
        rate(&generated["prompt_tokens"], &generated["prefill_ms"]),
        rate(&generated["decode_steps"], &generated["decode_ms"]),
        generated["memory_bytes"].as_f64().unwrap_or(0.0) / loaded["bytes"].as_f64().unwrap_or(1.0),
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
