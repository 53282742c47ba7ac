//! `cargo xtask package` and `cargo xtask msrv`: the publish dry run and the minimum Rust version.

use super::*;

/// `cargo xtask package`: every published crate packages and builds against
/// the others as packaged (`cargo publish --dry-run --workspace`).
pub(crate) fn package() -> Result {
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
        .arg(&dir))?;
    prune("target/package-verify");
    Ok(())
}

/// Removes what earlier `cargo publish --dry-run` runs unpacked from their
/// temporary local registries (`$CARGO_HOME/registry/{src,cache}/-HASH/qlinear-*`).
/// Cargo reuses an unpacked `name-version` directory (and its build) without
/// checking its contents, and our version stays 0.1.0 while the code
/// changes, so a stale copy would be verified instead of the tree at hand. crates.io's own
/// caches (not named `-HASH`) are left alone.
pub(crate) fn clear_packaged_sources() {
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
pub(crate) fn msrv() -> Result {
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
    let missing = !String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l.starts_with(&format!("{version}-")));
    if missing {
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
        "qlinear-kernels-core",
        "qlinear-tier-folders",
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
    run(&mut c)?;
    prune("target/msrv");
    // a toolchain this run installed goes too (about 0.5 GB), under the same rule
    if missing && pruning() {
        run(Command::new("rustup").args(["toolchain", "uninstall", &version]))?;
    }
    Ok(())
}
