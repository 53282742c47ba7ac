//! The scalar tier: the reference kernels (`reference/`) in a
//! [`KernelTable`], the spec every other tier equals bit for bit, and its
//! declaration (`spec.rs`), laid out as every tier's folder is.

mod spec;
pub use spec::SCALAR_TIER;

use crate::abi::panel::{PanelFamily, TilePanelQ4PerChannel};
use crate::abi::table::{GemmShapes, KernelTable};
use crate::reference;
use crate::reference::panel::{tile_panel_per_channel_scalar, tile_panel_scalar};

/// The scalar tier: the reference every other tier must equal bit for bit.
pub static SCALAR: KernelTable = KernelTable {
    name: "scalar",
    dot_i8_i8: reference::dot::dot_i8_i8,
    dot_i8_q4: reference::dot::dot_i8_q4,
    quantize_row_q8: reference::dot::quantize_row_q8_finite,
    group_sums: reference::group_sums::group_sums_scalar,
    gemm_w8a8: reference::int::gemm_w8a8,
    gemm_w4a8: reference::int::gemm_w4a8,
    gemm_w4a8_grouped: reference::int::gemm_w4a8_grouped,
    gemm_w4a8_grouped_panels: Some(gemm_w4a8_grouped_panels_scalar),
    gemm_w4a8_panels: Some(gemm_w4a8_panels_scalar),
    gemm_w8a16: reference::float::gemm_w8a16,
    gemm_w4a16: reference::float::gemm_w4a16,
    gemm_w4a16_grouped: reference::float::gemm_w4a16_grouped,
    shapes: GemmShapes::SINGLE,
};

/// The scalar tier's panel family.
static SCALAR_PANELS: PanelFamily = PanelFamily {
    tiles: &[(1, tile_panel_scalar)],
    pairs: None,
};

/// The scalar tier's per-channel panel family.
static SCALAR_PANELS_PER_CHANNEL: PanelFamily<TilePanelQ4PerChannel> = PanelFamily {
    tiles: &[(1, tile_panel_per_channel_scalar)],
    pairs: None,
};

crate::panel_entry!(
    /// The scalar tier's panel entry: [`gemm_w4a8_grouped_panels`](crate::frame::panels::gemm_w4a8_grouped_panels) on the
    /// portable tile.
    pub fn gemm_w4a8_grouped_panels_scalar = SCALAR_PANELS
);

crate::panel_entry!(
    /// The scalar tier's per-channel panel entry: [`gemm_w4a8_panels`](crate::frame::panels::gemm_w4a8_panels) on
    /// the portable tile.
    per_channel pub fn gemm_w4a8_panels_scalar = SCALAR_PANELS_PER_CHANNEL
);
