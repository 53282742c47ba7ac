//! The kernel table: one entry per kernel family, the ABI every tier fills
//! in and the dispatch layer proves before it hands a table out.

use std::ops::Range;

use qlinear_quant_recipe::{QuantizedMatrix, QuantizedMatrixQ4};

use crate::abi::activations::{ActivationsF32, ActivationsQ8, OutputTile};
use crate::abi::panel::GemmQ8Panels;
use crate::abi::tile::Shapes;

/// `Σ a·b` of two equal-length code rows, exact in i32 (`len <= MAX_K_W8A8`).
pub type DotI8I8 = fn(&[i8], &[i8]) -> i32;
/// `Σ x·q` of codes `x` against a packed biased Q4 row (`ceil(len/2)` bytes,
/// odd pad 8), exact in i32 (`len <= MAX_K_W4A8`).
pub type DotI8Q4 = fn(&[i8], &[u8]) -> i32;
/// The Q8 activation quantizer: on a finite row, `Some(scale)` with the codes
/// byte for byte `quantize_row_q8`'s; on a row holding NaN or ±∞, `None`
/// (the codes are then unspecified). The finiteness check rides on the
/// maximum's pass, so a caller reads the row twice, not three times.
pub type QuantizeRow = fn(&[f32], &mut [i8]) -> Option<f32>;
/// The activation codes' sums per group: `sums[i] = Σ codes[i·group ..
/// (i + 1)·group]`, exact in i32, for `group > 0`, `codes.len()` a multiple
/// of `group` and `sums.len() == codes.len() / group`. A group never spans
/// two activation rows when `group` divides K, so one call serves `[m, k]`.
pub type GroupSums = fn(&[i8], usize, &mut [i32]);
/// W8A8 over output features `rows`.
pub type GemmQ8Q8 = fn(&ActivationsQ8<'_>, &QuantizedMatrix, Range<usize>, &mut OutputTile<'_>);
/// W4A8 (per channel or grouped) over output features `rows`.
pub type GemmQ8Q4 = fn(&ActivationsQ8<'_>, &QuantizedMatrixQ4, Range<usize>, &mut OutputTile<'_>);
/// W8A16 over output features `rows`.
pub type GemmF32Q8 = fn(&ActivationsF32<'_>, &QuantizedMatrix, Range<usize>, &mut OutputTile<'_>);
/// W4A16 (per channel or grouped) over output features `rows`.
pub type GemmF32Q4 = fn(&ActivationsF32<'_>, &QuantizedMatrixQ4, Range<usize>, &mut OutputTile<'_>);

/// One tier: a kernel for every family. A tier is one value of this type; the
/// dispatch layer proves it with the selftest before handing it out.
#[derive(Debug, Clone, Copy)]
pub struct KernelTable {
    /// The tier's name, as `Int8Tier` displays it.
    pub name: &'static str,
    /// `Σ a·b` of two int8 code rows, exact in i32 for `len <= MAX_K_W8A8`
    /// (`docs/NUMERICS.md` §6.1).
    pub dot_i8_i8: DotI8I8,
    /// `Σ x·q` of int8 codes against one packed biased Q4 row, as
    /// `Σ x·b − 8·Σ x`, exact in i32 for `len <= MAX_K_W4A8`; any of the 16
    /// nibbles (§6.1).
    pub dot_i8_q4: DotI8Q4,
    /// The activation quantizer: byte for byte `quantize_row_q8` (§3.2) on a
    /// finite row, returning `Some(scale)`; `None` for a row holding NaN or
    /// ±∞ ([`QuantizeRow`]).
    pub quantize_row_q8: QuantizeRow,
    /// The activation codes' sums per group that cancel the nibble bias of
    /// the Q4 families (`8 · sum`, §6.1), exact ([`GroupSums`]); proven with
    /// the quantizer.
    pub group_sums: GroupSums,
    /// W8A8: `y = (acc as f32) * (x_scale · w_scale)` with `acc` exact in i32 (§6.1).
    pub gemm_w8a8: GemmQ8Q8,
    /// W4A8 per channel: `y = (acc as f32) * (x_scale · w_scale)`, `acc`
    /// exact in i32 with the bias cancelled by `sums` (§6.1).
    pub gemm_w4a8: GemmQ8Q4,
    /// W4A8 grouped: per group `acc_g` exact in i32; `sum += (acc_g as f32) *
    /// f32(s_g)` in increasing g; `y = sum * x_scale` (§6.1).
    pub gemm_w4a8_grouped: GemmQ8Q4,
    /// W4A8 grouped by 32 on the weight's panel form
    /// ([`PanelsQ4`](crate::abi::panel::PanelsQ4)): the
    /// same bits as `gemm_w4a8_grouped` on the natural matrix; `None` for a
    /// tier with no panel tiles (a layer then keeps the natural layout).
    pub gemm_w4a8_grouped_panels: Option<GemmQ8Panels>,
    /// W4A8 per channel on the weight's panel form
    /// ([`PanelsQ4`](crate::abi::panel::PanelsQ4)): the same bits as `gemm_w4a8` on the
    /// natural matrix; `None` for a tier with no per-channel panel tiles (a
    /// layer then keeps the natural layout).
    pub gemm_w4a8_panels: Option<GemmQ8Panels>,
    /// W8A16: 8 lanes of f32 products in increasing position, the fixed
    /// lane tree, times the row scale; no FMA (§6.2).
    pub gemm_w8a16: GemmF32Q8,
    /// W4A16 per channel: as W8A16 with Q4 codes (§6.2).
    pub gemm_w4a16: GemmF32Q4,
    /// W4A16 grouped: the 8-lane tree per group, `y += f32(s_g) · partial_g`
    /// in increasing g; no FMA (§6.2).
    pub gemm_w4a16_grouped: GemmF32Q4,
    /// The tiles each GEMM entry computes (its micro-kernels on the
    /// [`frame`](crate::frame), or its own sweep's), from which the selftest
    /// derives shapes that run every tile and every leftover row.
    pub shapes: GemmShapes,
}

/// The declared [`Shapes`] of a table's six GEMM entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShapes {
    /// W8A8.
    pub w8a8: Shapes,
    /// W4A8 per channel.
    pub w4a8: Shapes,
    /// W4A8 grouped.
    pub w4a8_grouped: Shapes,
    /// W8A16.
    pub w8a16: Shapes,
    /// W4A16 per channel.
    pub w4a16: Shapes,
    /// W4A16 grouped.
    pub w4a16_grouped: Shapes,
}

impl GemmShapes {
    /// One row at a time for every family: the scalar tier's shapes.
    pub const SINGLE: GemmShapes = GemmShapes {
        w8a8: Shapes::SINGLE,
        w4a8: Shapes::SINGLE,
        w4a8_grouped: Shapes::SINGLE,
        w8a16: Shapes::SINGLE,
        w4a16: Shapes::SINGLE,
        w4a16_grouped: Shapes::SINGLE,
    };
}
