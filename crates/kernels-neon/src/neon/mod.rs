//! The NEON tier (baseline ASIMD): integer kernels on `smull`/`sadalp`
//! (each i8·i8 product is exact in i16, pairs widen into i32), float kernels
//! on two `float32x4_t` per 8 lanes with `vmulq` + `vaddq`, never `vfmaq`.

use qlinear_kernels_scalar::{ActivationsF32, ActivationsQ8, KernelTable, OutputTile};
use qlinear_quant_recipe::{QuantizedMatrix, QuantizedMatrixQ4};

mod float;
pub(crate) mod int;
mod quantize;

/// SAFETY (for every `unsafe` call below): reachable only through `TABLE`,
/// which `crate::neon_table` (or `crate::sdot_table`, which shares the float
/// entries) returns only after detecting ASIMD; shapes are checked by the kernels.
mod entry {
    use super::*;

    pub(super) fn dot_i8_i8(a: &[i8], b: &[i8]) -> i32 {
        // SAFETY: ASIMD detected (see module comment); the kernel checks lengths.
        unsafe { int::dot_i8_i8(a, b) }
    }
    pub(super) fn dot_i8_q4(x: &[i8], p: &[u8]) -> i32 {
        // SAFETY: ASIMD detected (see module comment); the kernel checks lengths.
        unsafe { int::dot_i8_q4(x, p) }
    }
    pub(super) fn quantize_row_q8(x: &[f32], codes: &mut [i8]) -> f32 {
        // SAFETY: ASIMD detected (see module comment); the kernel checks lengths.
        unsafe { quantize::quantize_row_q8(x, codes) }
    }
    pub(super) fn gemm_w8a8(
        x: &ActivationsQ8<'_>,
        w: &QuantizedMatrix,
        r: std::ops::Range<usize>,
        y: &mut OutputTile<'_>,
    ) {
        // SAFETY: ASIMD detected (see module comment); the kernel checks shapes.
        unsafe { int::gemm_w8a8(x, w, r, y) }
    }
    pub(super) fn gemm_w4a8(
        x: &ActivationsQ8<'_>,
        w: &QuantizedMatrixQ4,
        r: std::ops::Range<usize>,
        y: &mut OutputTile<'_>,
    ) {
        // SAFETY: ASIMD detected (see module comment); the kernel checks shapes.
        unsafe { int::gemm_w4a8(x, w, r, y) }
    }
    pub(super) fn gemm_w4a8_grouped(
        x: &ActivationsQ8<'_>,
        w: &QuantizedMatrixQ4,
        r: std::ops::Range<usize>,
        y: &mut OutputTile<'_>,
    ) {
        // SAFETY: ASIMD detected (see module comment); the kernel checks shapes.
        unsafe { int::gemm_w4a8_grouped(x, w, r, y) }
    }
    pub(super) fn gemm_w8a16(
        x: &ActivationsF32<'_>,
        w: &QuantizedMatrix,
        r: std::ops::Range<usize>,
        y: &mut OutputTile<'_>,
    ) {
        // SAFETY: ASIMD detected (see module comment); the kernel checks shapes.
        unsafe { float::gemm_w8a16(x, w, r, y) }
    }
    pub(super) fn gemm_w4a16(
        x: &ActivationsF32<'_>,
        w: &QuantizedMatrixQ4,
        r: std::ops::Range<usize>,
        y: &mut OutputTile<'_>,
    ) {
        // SAFETY: ASIMD detected (see module comment); the kernel checks shapes.
        unsafe { float::gemm_w4a16(x, w, r, y) }
    }
    pub(super) fn gemm_w4a16_grouped(
        x: &ActivationsF32<'_>,
        w: &QuantizedMatrixQ4,
        r: std::ops::Range<usize>,
        y: &mut OutputTile<'_>,
    ) {
        // SAFETY: ASIMD detected (see module comment); the kernel checks shapes.
        unsafe { float::gemm_w4a16_grouped(x, w, r, y) }
    }
}

pub(crate) static TABLE: KernelTable = KernelTable {
    name: "neon",
    dot_i8_i8: entry::dot_i8_i8,
    dot_i8_q4: entry::dot_i8_q4,
    quantize_row_q8: entry::quantize_row_q8,
    gemm_w8a8: entry::gemm_w8a8,
    gemm_w4a8: entry::gemm_w4a8,
    gemm_w4a8_grouped: entry::gemm_w4a8_grouped,
    gemm_w8a16: entry::gemm_w8a16,
    gemm_w4a16: entry::gemm_w4a16,
    gemm_w4a16_grouped: entry::gemm_w4a16_grouped,
};
