//! The NEON SDOT tier (FEAT_DotProd): integer kernels on `sdot`, four exact
//! i8·i8 products summed straight into each i32 lane; the float kernels and
//! the activation quantizer are the NEON tier's.

use qlinear_kernels_scalar::{ActivationsQ8, KernelTable, OutputTile};
use qlinear_quant_recipe::{QuantizedMatrix, QuantizedMatrixQ4};

mod int;

/// SAFETY (for every `unsafe` call below): reachable only through `TABLE`,
/// which `crate::sdot_table` returns only after detecting ASIMD and
/// FEAT_DotProd; shapes are checked by the kernels.
mod entry {
    use super::*;

    pub(super) fn dot_i8_i8(a: &[i8], b: &[i8]) -> i32 {
        // SAFETY: dotprod detected (see module comment); the kernel checks lengths.
        unsafe { int::dot_i8_i8(a, b) }
    }
    pub(super) fn dot_i8_q4(x: &[i8], p: &[u8]) -> i32 {
        // SAFETY: dotprod detected (see module comment); the kernel checks lengths.
        unsafe { int::dot_i8_q4(x, p) }
    }
    pub(super) fn gemm_w8a8(
        x: &ActivationsQ8<'_>,
        w: &QuantizedMatrix,
        r: std::ops::Range<usize>,
        y: &mut OutputTile<'_>,
    ) {
        // SAFETY: dotprod detected (see module comment); the kernel checks shapes.
        unsafe { int::gemm_w8a8(x, w, r, y) }
    }
    pub(super) fn gemm_w4a8(
        x: &ActivationsQ8<'_>,
        w: &QuantizedMatrixQ4,
        r: std::ops::Range<usize>,
        y: &mut OutputTile<'_>,
    ) {
        // SAFETY: dotprod detected (see module comment); the kernel checks shapes.
        unsafe { int::gemm_w4a8(x, w, r, y) }
    }
    pub(super) fn gemm_w4a8_grouped(
        x: &ActivationsQ8<'_>,
        w: &QuantizedMatrixQ4,
        r: std::ops::Range<usize>,
        y: &mut OutputTile<'_>,
    ) {
        // SAFETY: dotprod detected (see module comment); the kernel checks shapes.
        unsafe { int::gemm_w4a8_grouped(x, w, r, y) }
    }
}

pub(crate) static TABLE: KernelTable = KernelTable {
    name: "neon-sdot",
    dot_i8_i8: entry::dot_i8_i8,
    dot_i8_q4: entry::dot_i8_q4,
    gemm_w8a8: entry::gemm_w8a8,
    gemm_w4a8: entry::gemm_w4a8,
    gemm_w4a8_grouped: entry::gemm_w4a8_grouped,
    ..crate::neon::TABLE
};
