//! The reference kernels of qlinear and the [`KernelTable`] every tier fills in.
//!
//! These kernels *are* the numeric contract of docs/NUMERICS.md §6: short, obvious,
//! and checked against the seeds' hand examples. Every SIMD tier is tested
//! bit for bit against them.
//!
//! Kernels run single-threaded over a range of output rows; shapes are
//! validated by the dispatch layer before any call, and each kernel re-checks
//! its O(1) preconditions with `assert!` (cheap, and what keeps a SIMD tier's
//! pointer arithmetic sound even when called directly).

#![warn(missing_docs)]
// every `unsafe` block states why it holds, on the line above it
#![deny(clippy::undocumented_unsafe_blocks)]

mod dot;
mod entries;
mod family;
mod float;
pub mod frame;
mod int;
pub mod layout;
pub mod panels;
pub mod proof;
mod spec;
mod table;

pub use dot::{
    abs_max_bits, dot_i8_i8, dot_i8_q4, dot_i8_q4_biased, q8_reciprocal, q8_scale_from_abs_max_bits,
    quantize_row_q8_finite, Q8_NEAR_HALF,
};
pub use family::{Gemm, KernelFamily};
pub use float::{gemm_w4a16, gemm_w4a16_grouped, gemm_w8a16, lane_tree};
pub use frame::LayoutCache;
pub use int::{gemm_w4a8, gemm_w4a8_grouped, gemm_w8a8};
pub use panels::{GemmQ8Panels, PanelsQ4};
pub use spec::{TierSpec, SCALAR_TIER};
pub use table::{
    activation_group_sums, activation_group_sums_into, activation_group_sums_with, ActivationsF32, ActivationsQ8,
    DotI8I8, DotI8Q4, GemmF32Q4, GemmF32Q8, GemmQ8Q4, GemmQ8Q8, GemmShapes, GroupSums, KernelError, KernelTable,
    OutputTile, QuantizeRow, MAX_K_W4A8, MAX_K_W8A8, SCALAR,
};

// The crate README (its crates.io page) runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
