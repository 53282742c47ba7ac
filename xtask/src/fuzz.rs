//! `cargo xtask fuzz`: the readers and the convert pipeline under cargo-fuzz.

use super::*;

/// `cargo xtask fuzz [SECONDS]`: the fuzz targets (`fuzz/`) under
/// cargo-fuzz, SECONDS each (60 by default): `reader` (the safetensors
/// reader), `convert` (the whole convert pipeline in memory) and `gguf`
/// (the GGUF reader and its decoders), installing
/// cargo-fuzz if missing. libFuzzer's instrumentation needs unstable flags;
/// `RUSTC_BOOTSTRAP=1` lets the one stable toolchain this project has accept them.
pub(crate) fn fuzz(args: &[String]) -> Result {
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
    prune("fuzz/target");
    Ok(())
}
