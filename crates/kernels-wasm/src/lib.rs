//! The WebAssembly tiers of qlinear, SIMD128 and relaxed SIMD: complete
//! [`KernelTable`](qlinear_kernels_scalar::KernelTable)s bit-identical to the
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

cfg_if::cfg_if! {
    if #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))] {
        mod simd128;

        /// The SIMD128 table (this build has `+simd128`).
        pub fn simd128_table() -> Option<&'static qlinear_kernels_scalar::KernelTable> {
            Some(&simd128::TABLE)
        }
    }
}

cfg_if::cfg_if! {
    if #[cfg(all(target_arch = "wasm32", target_feature = "simd128", target_feature = "relaxed-simd"))] {
        mod relaxed;

        /// The relaxed-SIMD table (this build has `+simd128,+relaxed-simd`):
        /// SIMD128 with W4A8's nibble products on
        /// `i16x8.relaxed_dot_i8x16_i7x16_s`, exact for qlinear's operands
        /// (`docs/NUMERICS.md`).
        pub fn relaxed_simd_table() -> Option<&'static qlinear_kernels_scalar::KernelTable> {
            Some(&relaxed::TABLE)
        }
    }
}

// Each tier's declaration lives in its folder and exists in every build,
// where the kernels above do not.
#[path = "relaxed/spec.rs"]
mod relaxed_spec;
#[path = "simd128/spec.rs"]
mod simd128_spec;
pub use relaxed_spec::WASM_RELAXED_SIMD;
pub use simd128_spec::WASM_SIMD128;

// The crate README (its crates.io page) runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
