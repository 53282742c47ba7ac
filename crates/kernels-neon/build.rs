//! Declares the modules of each tier folder of `src/` (`qlinear-tier-folders`),
//! which `lib.rs` includes: a tier is its folder plus one registry line.

fn main() {
    if let Err(e) = qlinear_tier_folders::declare_tiers() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
