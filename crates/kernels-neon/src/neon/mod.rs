//! The NEON tier (baseline ASIMD): integer kernels on `smull`/`sadalp`
//! (each i8·i8 product is exact in i16, pairs widen into i32), float kernels
//! on two `float32x4_t` per 8 lanes with `vmulq` + `vaddq`, never `vfmaq`.

use qlinear_kernels_scalar::KernelTable;

mod float;
pub(crate) mod int;
mod quantize;

/// SAFETY (for every entry): reachable only through `TABLE`, which
/// `crate::neon_table` (or `crate::sdot_table`, which shares the float
/// entries) returns only after detecting ASIMD; the kernels assert what they rely on.
mod entry {
    use super::*;
    qlinear_kernels_scalar::safe_entries! {
        dot_i8_i8 => int::dot_i8_i8: dot_i8,
        dot_i8_q4 => int::dot_i8_q4: dot_q4,
        quantize_row_q8 => quantize::quantize_row_q8: quantize,
        gemm_w8a8 => int::gemm_w8a8: q8q8,
        gemm_w4a8 => int::gemm_w4a8: q8q4,
        gemm_w4a8_grouped => int::gemm_w4a8_grouped: q8q4,
        gemm_w8a16 => float::gemm_w8a16: f32q8,
        gemm_w4a16 => float::gemm_w4a16: f32q4,
        gemm_w4a16_grouped => float::gemm_w4a16_grouped: f32q4,
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
