//! `cargo xtask browser`: the wasm32 selftest and GEMVs in headless Chromium.

use super::server::{base64, serve};
use super::*;

/// `cargo xtask browser`: builds the `wasm32-unknown-unknown` page module
/// once per wasm tier of the registry, with its target features
/// (`+simd128`, `+simd128,+relaxed-simd`),
/// serves `web/` on 127.0.0.1, loads it in headless Chromium (Debian's
/// `chromium`, installed when missing) and reads the proof table and GEMV
/// timings back from the DOM; fails unless every proof passed and the page
/// chose the relaxed-SIMD build (Chromium has had relaxed SIMD since 114).
pub(crate) fn browser() -> Result {
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
        prune(&dir);
    }
    // the builds in the registry's order, each named for its last tier
    let builds: Vec<String> = Int8Tier::of_arch("wasm32")
        .iter()
        .zip(&modules)
        .map(|(tier, module)| format!("[\"{tier}\", \"{}\"]", base64(module)))
        .collect();
    let script = format!("const QLINEAR_WASM_BUILDS = [{}];\n", builds.join(", ")).into_bytes();
    let widest = Int8Tier::of_arch("wasm32").last().map_or("none", |t| t.name());
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
    if result.starts_with(&format!("RESULT: PASS build {widest} ")) {
        Ok(())
    } else {
        Err(format!(
            "browser selftest did not pass: {result}\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
