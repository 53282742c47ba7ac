//! `cargo xtask fmt [--check]`: `cargo fmt`, and the tier folders it cannot reach.

use super::*;

/// `cargo fmt --all`, then `rustfmt` on each tier folder's `spec.rs` and
/// `mod.rs` (and the modules they declare): the kernel crates' build
/// scripts declare those modules (`qlinear-tier-folders`), and `cargo fmt`
/// follows only the modules written in the source. With `check`, nothing is
/// rewritten and a file out of format fails.
pub(crate) fn fmt(check: bool) -> Result {
    let check_flag: &[&str] = if check { &["--check"] } else { &[] };
    run(cargo().args(["fmt", "--all"]).args(check_flag))?;
    let mut files = Vec::new();
    for tier in Int8Tier::ALL.into_iter().filter(|t| *t != Int8Tier::Scalar) {
        for file in ["spec.rs", "mod.rs"] {
            files.push(root().join(tier.spec().folder).join(file));
        }
    }
    // rustfmt.toml (found from each file upwards) sets the edition and width
    run(Command::new("rustfmt").args(check_flag).args(&files))
}
