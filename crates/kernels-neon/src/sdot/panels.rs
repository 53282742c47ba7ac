//! SDOT's W4A8 grouped panel tiles (`crate::panels`): one `sdot` of a
//! load's low (high) nibbles against the even (odd) codes adds each row's
//! 4 products into that row's own i32 lane, so a group's sums need no
//! widening.

use std::arch::aarch64::*;

use super::int::dot16;

/// Adds one load's products into the 4 rows' i32 lanes.
#[inline]
#[target_feature(enable = "neon,dotprod")]
fn group_add(acc: int32x4_t, lo: int8x16_t, hi: int8x16_t, even: int8x16_t, odd: int8x16_t) -> int32x4_t {
    dot16(dot16(acc, lo, even), hi, odd)
}

/// The 4 rows' sums: the lanes as they are.
#[inline]
#[target_feature(enable = "neon")]
fn group_rows(acc: int32x4_t) -> int32x4_t {
    acc
}

panel_tile!("neon,dotprod", int32x4_t, vdupq_n_s32(0), group_add, group_rows);
