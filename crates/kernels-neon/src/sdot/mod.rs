//! The NEON SDOT tier (FEAT_DotProd): integer kernels on `sdot`, four exact
//! i8·i8 products summed straight into each i32 lane; the float kernels and
//! the activation quantizer are the NEON tier's.

use qlinear_kernels_scalar::KernelTable;

mod int;

/// SAFETY (for every entry): reachable only through `TABLE`, which
/// `crate::sdot_table` returns only after detecting ASIMD and FEAT_DotProd;
/// the kernels assert what they rely on.
mod entry {
    use super::*;
    qlinear_kernels_scalar::safe_entries! {
        dot_i8_i8 => int::dot_i8_i8: dot_i8,
        dot_i8_q4 => int::dot_i8_q4: dot_q4,
        gemm_w8a8 => int::gemm_w8a8: q8q8,
        gemm_w4a8 => int::gemm_w4a8: q8q4,
        gemm_w4a8_grouped => int::gemm_w4a8_grouped: q8q4,
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
