//! Deliberately wrong SIMD kernels live in this crate's tests (`tests/x86.rs`,
//! `tests/neon.rs`): each is a plausible mistake of a real tier, and each
//! must fail `qlinear_dispatch::prove_kernel_table`. The crate has no code of
//! its own and is never published.
