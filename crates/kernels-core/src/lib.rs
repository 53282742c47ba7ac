//! The core of qlinear's kernels: the ABI every tier fills in, the
//! reference kernels that are the numeric contract, the frame SIMD tiers
//! run their micro-kernels on, the scalar tier, and the proof.
//!
//! Layered, each layer importing only from the ones before it (checked by
//! `tests/layers.rs`):
//! 1. [`abi`]: the kernel table, the activation and output structs, tiles
//!    and their shapes, the activation layouts, the weight's panel form, a
//!    tier's declaration.
//! 2. [`reference`](mod@reference): docs/NUMERICS.md §6 as short, obvious scalar loops,
//!    checked against the seeds' hand examples; every SIMD tier is tested
//!    bit for bit against them.
//! 3. [`frame`]: what every SIMD tier's GEMMs share, written once (the O(1)
//!    shape checks, the activation layouts, the sweeps of the natural and
//!    the panel form, the K tail, the output expressions).
//! 4. [`scalar`]: the scalar tier's table and declaration; [`proof`]: the
//!    selftest's prover and the mutants' helpers.
//!
//! Kernels run single-threaded over a range of output rows; shapes are
//! validated by the dispatch layer before any call, and each kernel re-checks
//! its O(1) preconditions with `assert!` (cheap, and what keeps a SIMD tier's
//! pointer arithmetic sound even when called directly).
//!
//! The names most users want are re-exported here; the modules hold the
//! rest, and the crate's own files import by module path.

#![warn(missing_docs)]
// every `unsafe` block states why it holds, on the line above it
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod abi;
pub mod frame;
pub mod proof;
pub mod reference;
pub mod scalar;

pub use abi::activations::{ActivationsF32, ActivationsQ8, KernelError, OutputTile, MAX_K_W4A8, MAX_K_W8A8};
pub use abi::family::{Activations, FamilySpec, Gemm, KernelFamily, Weights, FAMILIES};
pub use abi::panel::{arrange_in_place, arrange_scales_in_place, GemmQ8Panels, PanelsQ4};
pub use abi::rows::LayoutCache;
pub use abi::spec::TierSpec;
pub use abi::table::{
    DotI8I8, DotI8Q4, GemmF32Q4, GemmF32Q8, GemmQ8Q4, GemmQ8Q8, GemmShapes, GroupSums, KernelTable, QuantizeRow,
};
pub use reference::dot::{
    abs_max_bits, dot_i8_i8, dot_i8_q4, dot_i8_q4_biased, q8_reciprocal, q8_scale_from_abs_max_bits,
    quantize_row_q8_finite, Q8_NEAR_HALF,
};
pub use reference::float::{gemm_w4a16, gemm_w4a16_grouped, gemm_w8a16, lane_tree};
pub use reference::group_sums::{activation_group_sums, activation_group_sums_into, activation_group_sums_with};
pub use reference::int::{gemm_w4a8, gemm_w4a8_grouped, gemm_w8a8};
pub use scalar::{SCALAR, SCALAR_TIER};

// The crate README (its crates.io page) runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
