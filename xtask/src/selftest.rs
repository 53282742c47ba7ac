//! `cargo xtask selftest`: the CLI's selftest, natively or under qemu.

use super::*;

/// `cargo xtask selftest [--target aarch64] [ARGS…]`: the release CLI's
/// `selftest` on this CPU, or built for aarch64 and run under qemu (`-cpu max`).
pub(crate) fn selftest(args: &[String]) -> Result {
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
