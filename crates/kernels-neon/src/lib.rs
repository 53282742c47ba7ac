//! The aarch64 tiers of qlinear: `Neon` (baseline ASIMD: `smull` + `sadalp`),
//! `NeonSdot` (FEAT_DotProd `sdot`) and `NeonI8mm` (FEAT_I8MM `smmla`, for
//! the batch families), each a complete [`KernelTable`](qlinear_kernels_core::KernelTable)
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

// The tiers share their integer entries and families (`int_entries!`,
// `int_families!`), so this module comes first.
#[cfg(target_arch = "aarch64")]
#[macro_use]
mod int;
// Their W4A8 grouped panel tiles (`panel_tile!`), likewise.
#[cfg(target_arch = "aarch64")]
#[macro_use]
mod panels;

// Each tier's folder (`src/neon/`, `src/sdot/`, `src/i8mm/`): its declaration
// (`spec.rs`, on every architecture) and its kernels (`mod.rs`, aarch64
// only), declared by the build script (`qlinear-tier-folders`).
include!(concat!(env!("OUT_DIR"), "/tiers.rs"));

// The crate README (its crates.io page) runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
