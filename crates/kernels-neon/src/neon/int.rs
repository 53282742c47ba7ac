//! NEON integer kernels: `smull` forms exact i16 products of int8 codes
//! (|x·w| <= 127·127 < 2^15; nibbles 0..15 times |x| <= 127 likewise) and
//! `sadalp` adds adjacent pairs into the i32 lanes.

use std::arch::aarch64::*;

#[inline]
#[target_feature(enable = "neon")]
fn dot16(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    let hi = vmull_high_s8(a, b);
    vpadalq_s16(vpadalq_s16(acc, lo), hi)
}

int_kernels!("neon", dot16);
