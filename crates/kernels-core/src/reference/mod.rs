//! The reference kernels: docs/NUMERICS.md §6 as plain loops, one output at
//! a time. They *are* the numeric contract: short, obvious, checked against
//! the seeds' hand examples, and what every SIMD tier is proven equal to bit
//! for bit. They import only the ABI (`abi/`).

pub mod dot;
pub mod float;
pub mod group_sums;
pub mod int;
pub mod panel;
