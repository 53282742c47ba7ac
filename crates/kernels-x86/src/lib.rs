//! The x86-64 tiers of qlinear: `Avx2` and `Avx512Vnni`, each a complete
//! [`KernelTable`](qlinear_kernels_core::KernelTable) bit-identical to the scalar tier.
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

/// Whether the CPU is an AMD one (CPUID's vendor string), for tuning that
/// does not change a bit: a prefetch distance.
#[cfg(target_arch = "x86_64")]
fn vendor_is_amd() -> bool {
    // the intrinsic is a safe function from Rust 1.94, unsafe before: the
    // MSRV (1.93) needs the block
    #[allow(unused_unsafe)]
    // SAFETY: every x86-64 CPU has CPUID, and leaf 0 always exists.
    let id = unsafe { std::arch::x86_64::__cpuid(0) };
    [id.ebx, id.edx, id.ecx]
        .iter()
        .flat_map(|r| r.to_le_bytes())
        .eq(*b"AuthenticAMD")
}

// Each tier's folder (`src/avx2/`, `src/avx512vnni/`): its declaration
// (`spec.rs`, on every architecture) and its kernels (`mod.rs`, x86-64
// only), declared by the build script (`qlinear-tier-folders`).
include!(concat!(env!("OUT_DIR"), "/tiers.rs"));

// The crate README (its crates.io page) runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
