//! The NEON SDOT tier (FEAT_DotProd): integer micro-kernels on `sdot`, four
//! exact i8·i8 products summed straight into each i32 lane; the float
//! kernels and the activation quantizer are the NEON tier's.
#![cfg(target_arch = "aarch64")]

use qlinear_kernels_core::KernelTable;

mod int;
mod panels;

// the plausible mistakes of this tier, which the proof must fail
#[cfg(test)]
mod mutants;

/// SAFETY (for every entry): reachable only through `TABLE`, which
/// `crate::sdot_table` returns only after detecting ASIMD and FEAT_DotProd;
/// the kernels assert what they rely on.
mod entry {
    use super::*;
    int_entries!();
    qlinear_kernels_core::safe_entries! {
        panel_16x4 => panels::tile_panel::<4>: tile_panel,
        panel_16x1 => panels::tile_panel::<1>: tile_panel,
        panel_pc_16x4 => panels::tile_panel_per_channel::<4>: tile_panel_per_channel,
        panel_pc_16x1 => panels::tile_panel_per_channel::<1>: tile_panel_per_channel,
    }
}

panel_family!();

int_families!();

mod gemm {
    use super::{W4A8, W4A8_GROUPED, W8A8};
    qlinear_kernels_core::frame_gemms! {
        w8a8: W8A8, w4a8: W4A8, w4a8_grouped: W4A8_GROUPED; ..crate::neon::TABLE.shapes
    }
}

pub(crate) static TABLE: KernelTable = KernelTable {
    name: "neon-sdot",
    dot_i8_i8: entry::dot_i8_i8,
    dot_i8_q4: entry::dot_i8_q4,
    gemm_w8a8: gemm::gemm_w8a8,
    gemm_w4a8: gemm::gemm_w4a8,
    gemm_w4a8_grouped: gemm::gemm_w4a8_grouped,
    gemm_w4a8_grouped_panels: Some(gemm_w4a8_grouped_panels),
    gemm_w4a8_panels: Some(gemm_w4a8_panels),
    shapes: gemm::SHAPES,
    ..crate::neon::TABLE
};
