//! The real model and the Python reference, as every test that needs them
//! finds them (included by path from the formats, cli and smollm tests):
//! SmolLM2-135M-Instruct's Q4_1 GGUF, which `cargo xtask test` fetches and
//! names in `QLINEAR_SMOLLM2_GGUF`, and `python3` with the `gguf` package,
//! which it installs and promises with `QLINEAR_REQUIRE_GGUF`. Missing, each
//! is a skip with a message; promised and missing, a failure.
#![allow(dead_code)]

use std::path::PathBuf;

/// The model file, or `None` (after saying why) when it is absent.
pub fn smollm2_gguf() -> Option<PathBuf> {
    let path = std::env::var_os("QLINEAR_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../target/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
            ))
        });
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("QLINEAR_SMOLLM2_GGUF").is_none(),
        "QLINEAR_SMOLLM2_GGUF names {}, which does not exist",
        path.display()
    );
    eprintln!("skipped: {} is missing (cargo xtask test fetches it)", path.display());
    None
}

/// Whether `python3` imports `gguf` and `numpy` (else a skip, after saying
/// why, unless `QLINEAR_REQUIRE_GGUF` is set).
pub fn python_gguf() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import gguf, numpy"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok || std::env::var_os("QLINEAR_REQUIRE_GGUF").is_none(),
        "QLINEAR_REQUIRE_GGUF is set but python3 cannot import gguf and numpy"
    );
    if !ok {
        eprintln!("skipped: python3 with the gguf package is not installed (pip install gguf)");
    }
    ok
}

/// `Σ bits_i · (2i + 1)` over f32 bit patterns, wrapping in u64: how a
/// tensor's decoded bits are compared with numpy's without moving them.
pub fn weighted_bits(v: &[f32]) -> u64 {
    v.iter().enumerate().fold(0u64, |h, (i, x)| {
        h.wrapping_add(u64::from(x.to_bits()).wrapping_mul(2 * i as u64 + 1))
    })
}
