//! The NEON tier (baseline ASIMD): integer micro-kernels on `smull`/`sadalp`
//! (each i8·i8 product is exact in i16, pairs widen into i32), float
//! micro-kernels on two `float32x4_t` per 8 lanes with `vmulq` + `vaddq`,
//! never `vfmaq`. The frame owns the loops; this module registers the tiles.
#![cfg(target_arch = "aarch64")]

use qlinear_kernels_core::KernelTable;

pub(crate) mod float;
pub(crate) mod int;
// `neon_panel_tile!` serves the mutants too
#[macro_use]
pub(crate) mod panels;
mod quantize;

// the plausible mistakes of this tier, which the proof must fail
#[cfg(test)]
mod mutants;

/// SAFETY (for every entry): reachable only through `TABLE`, which
/// `crate::neon_table` returns only after detecting ASIMD; the kernels
/// assert what they rely on.
mod entry {
    use super::*;
    int_entries!();
    qlinear_kernels_core::safe_entries! {
        quantize_row_q8 => quantize::quantize_row_q8: quantize,
        group_sums => quantize::group_sums: group_sums,
        panel_16x4 => panels::tile_panel::<4>: tile_panel,
        panel_16x1 => panels::tile_panel::<1>: tile_panel,
        panel_pc_16x4 => panels::tile_panel_per_channel::<4>: tile_panel_per_channel,
        panel_pc_16x1 => panels::tile_panel_per_channel::<1>: tile_panel_per_channel,
    }
}

panel_family!();

int_families!();

mod gemm {
    use super::float::{W4A16, W4A16_GROUPED, W8A16};
    use super::{W4A8, W4A8_GROUPED, W8A8};
    qlinear_kernels_core::frame_gemms! {
        w8a8: W8A8, w4a8: W4A8, w4a8_grouped: W4A8_GROUPED,
        w8a16: W8A16, w4a16: W4A16, w4a16_grouped: W4A16_GROUPED,
    }
}

pub(crate) static TABLE: KernelTable = KernelTable {
    name: "neon",
    dot_i8_i8: entry::dot_i8_i8,
    dot_i8_q4: entry::dot_i8_q4,
    quantize_row_q8: entry::quantize_row_q8,
    group_sums: entry::group_sums,
    gemm_w8a8: gemm::gemm_w8a8,
    gemm_w4a8: gemm::gemm_w4a8,
    gemm_w4a8_grouped: gemm::gemm_w4a8_grouped,
    gemm_w4a8_grouped_panels: Some(gemm_w4a8_grouped_panels),
    gemm_w4a8_panels: Some(gemm_w4a8_panels),
    gemm_w8a16: gemm::gemm_w8a16,
    gemm_w4a16: gemm::gemm_w4a16,
    gemm_w4a16_grouped: gemm::gemm_w4a16_grouped,
    shapes: gemm::SHAPES,
};
