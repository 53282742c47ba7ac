//! The WebAssembly tiers of qlinear, SIMD128 and relaxed SIMD: complete
//! [`KernelTable`](qlinear_kernels_core::KernelTable)s bit-identical to the
//! scalar tier. WebAssembly has no run-time feature detection: each island is
//! compiled in (`-C target-feature=+simd128`, and `+relaxed-simd` for the
//! second) or not, and the dispatch crate proves it with the selftest at
//! start-up like every other tier. Elsewhere this crate holds only the
//! tiers' declarations ([`WASM_SIMD128`], [`WASM_RELAXED_SIMD`]).

#![warn(missing_docs)]
// every `unsafe` block states why it holds, on the line above it
#![deny(clippy::undocumented_unsafe_blocks)]
// Kernels walk several parallel arrays (rows, accumulators, outputs) by index.
#![allow(clippy::needless_range_loop)]

// Each tier's folder (`src/simd128/`, `src/relaxed/`): its declaration
// (`spec.rs`, in every build) and its kernels (`mod.rs`, in the builds with
// the tier's target features), declared by the build script
// (`qlinear-tier-folders`).
include!(concat!(env!("OUT_DIR"), "/tiers.rs"));

// The crate README (its crates.io page) runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
