//! The WebAssembly SIMD128 tier of qlinear, a complete
//! [`KernelTable`](qlinear_kernels_scalar::KernelTable) bit-identical to the
//! scalar tier. WebAssembly has no run-time feature detection: the island is
//! compiled in (`-C target-feature=+simd128`) or not, and the dispatch crate
//! proves it with the selftest at start-up like every other tier. Elsewhere
//! this crate is empty.

#![warn(missing_docs)]
// Kernels walk several parallel arrays (rows, accumulators, outputs) by index.
#![allow(clippy::needless_range_loop)]

cfg_if::cfg_if! {
    if #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))] {
        mod simd128;

        /// The SIMD128 table (this build has `+simd128`).
        pub fn simd128_table() -> Option<&'static qlinear_kernels_scalar::KernelTable> {
            Some(&simd128::TABLE)
        }
    }
}

// The crate README (its crates.io page) runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
