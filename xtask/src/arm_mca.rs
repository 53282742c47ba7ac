//! `cargo xtask arm-mca`: the aarch64 micro-kernels' hot loops under llvm-mca.

use super::*;

/// `cargo xtask arm-mca`: builds the aarch64 kernel crate's release assembly
/// and prints `tools/arm_mca.py`'s table (instructions per weight of each
/// micro-kernel's hot loop, llvm-mca's cycles per iteration per core).
pub(crate) fn arm_mca() -> Result {
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
