//! The x86-64 tiers of qlinear: `Avx2` and `Avx512Vnni`, each a complete
//! [`KernelTable`] bit-identical to the scalar tier.
//!
//! A table is handed out only after run-time feature detection
//! ([`avx2_table`], [`avx512vnni_table`]); the `#[target_feature]` kernels
//! behind it are private, so they cannot be reached on a CPU that lacks the
//! feature. The dispatch crate additionally runs the selftest before use.
//! On other architectures this crate holds only the tiers' declarations
//! ([`AVX2`], [`AVX512_VNNI`]), whose detection says so.

#![warn(missing_docs)]
// every `unsafe` block states why it holds, on the line above it
#![deny(clippy::undocumented_unsafe_blocks)]
// Kernels walk several parallel arrays (rows, accumulators, outputs) by index.
#![allow(clippy::needless_range_loop)]

cfg_if::cfg_if! {
    if #[cfg(target_arch = "x86_64")] {
        mod avx2;
        mod avx512vnni;

        use qlinear_kernels_scalar::KernelTable;

        /// Whether the CPU is an AMD one (CPUID's vendor string), for tuning
        /// that does not change a bit: a prefetch distance.
        fn vendor_is_amd() -> bool {
            // the intrinsic is a safe function from Rust 1.94, unsafe before:
            // the MSRV (1.93) needs the block
            #[allow(unused_unsafe)]
            // SAFETY: every x86-64 CPU has CPUID, and leaf 0 always exists.
            let id = unsafe { std::arch::x86_64::__cpuid(0) };
            [id.ebx, id.edx, id.ecx].iter().flat_map(|r| r.to_le_bytes()).eq(*b"AuthenticAMD")
        }

        /// The AVX2 table, if this CPU reports AVX2 and F16C.
        pub fn avx2_table() -> Option<&'static KernelTable> {
            avx2::detected().then_some(&avx2::TABLE)
        }

        /// The AVX-512 VNNI table, if this CPU reports AVX-512 F, BW, VL, VNNI
        /// (and AVX2 and F16C, which its float kernels share with the AVX2 tier).
        pub fn avx512vnni_table() -> Option<&'static KernelTable> {
            avx512vnni::detected().then_some(&avx512vnni::TABLE)
        }
    }
}

// Each tier's declaration lives in its folder and exists on every
// architecture, where the kernels above do not.
#[path = "avx2/spec.rs"]
mod avx2_spec;
#[path = "avx512vnni/spec.rs"]
mod avx512vnni_spec;
pub use avx2_spec::AVX2;
pub use avx512vnni_spec::AVX512_VNNI;

// The crate README (its crates.io page) runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
