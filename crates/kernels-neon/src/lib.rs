//! The aarch64 tiers of qlinear: `Neon` (baseline ASIMD: `smull` + `sadalp`),
//! `NeonSdot` (FEAT_DotProd `sdot`) and `NeonI8mm` (FEAT_I8MM `smmla`, for
//! the batch families), each a complete [`KernelTable`](qlinear_kernels_scalar::KernelTable)
//! bit-identical to the scalar tier. Tables are handed out only after
//! run-time feature detection; the dispatch crate runs the selftest before use.
//! On other architectures this crate holds only the tiers' declarations
//! ([`NEON`], [`NEON_SDOT`], [`NEON_I8MM`]), whose detection says so.
//!
//! `sdot` and `smmla` are written with `core::arch::asm!` inside
//! `#[target_feature(enable = "dotprod")]` / `"i8mm"` functions because the
//! `vdotq_s32` and `vmmlaq_s32` intrinsics are not stable on the pinned
//! toolchain.

#![warn(missing_docs)]
// every `unsafe` block states why it holds, on the line above it
#![deny(clippy::undocumented_unsafe_blocks)]
// Kernels walk several parallel arrays (rows, accumulators, outputs) by index.
#![allow(clippy::needless_range_loop)]

cfg_if::cfg_if! {
    if #[cfg(target_arch = "aarch64")] {
        #[macro_use]
        mod int;
        mod i8mm;
        mod neon;
        mod sdot;

        use qlinear_kernels_scalar::KernelTable;

        /// The NEON table, if this CPU reports ASIMD (every aarch64 CPU does).
        pub fn neon_table() -> Option<&'static KernelTable> {
            std::arch::is_aarch64_feature_detected!("neon").then_some(&neon::TABLE)
        }

        /// The NEON SDOT table, if this CPU reports FEAT_DotProd.
        pub fn sdot_table() -> Option<&'static KernelTable> {
            (std::arch::is_aarch64_feature_detected!("neon") && std::arch::is_aarch64_feature_detected!("dotprod"))
                .then_some(&sdot::TABLE)
        }

        /// The NEON I8MM table, if this CPU reports FEAT_I8MM (and the
        /// FEAT_DotProd whose entries it shares).
        pub fn i8mm_table() -> Option<&'static KernelTable> {
            (std::arch::is_aarch64_feature_detected!("neon")
                && std::arch::is_aarch64_feature_detected!("dotprod")
                && std::arch::is_aarch64_feature_detected!("i8mm"))
            .then_some(&i8mm::TABLE)
        }
    }
}

// Each tier's declaration lives in its folder and exists on every
// architecture, where the kernels above do not.
#[path = "i8mm/spec.rs"]
mod i8mm_spec;
#[path = "neon/spec.rs"]
mod neon_spec;
#[path = "sdot/spec.rs"]
mod sdot_spec;
pub use i8mm_spec::NEON_I8MM;
pub use neon_spec::NEON;
pub use sdot_spec::NEON_SDOT;

// The crate README (its crates.io page) runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
