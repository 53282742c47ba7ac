//! NEON SDOT integer kernels.

use std::arch::aarch64::*;
use std::arch::asm;

/// `acc[l] += Σ_{j<4} a[4l + j] · b[4l + j]`: one `sdot` (exact: each product
/// fits i16 and four fit i32 trivially).
#[inline]
#[target_feature(enable = "neon,dotprod")]
pub(super) fn dot16(mut acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    // SAFETY: `sdot` only reads the two vector registers and updates `acc`;
    // FEAT_DotProd is enabled for this function and detected before dispatch.
    unsafe {
        asm!("sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b", acc = inout(vreg) acc, a = in(vreg) a, b = in(vreg) b,
             options(pure, nomem, nostack));
    }
    acc
}

int_kernels!("neon,dotprod", dot16);
