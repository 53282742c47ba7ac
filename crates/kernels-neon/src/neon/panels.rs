//! NEON's W4A8 grouped panel tiles (`crate::panels`), with no dot
//! instruction: `smull` of a load's low 8 bytes (rows 0 and 1) and
//! `smull2` of its high 8 (rows 2 and 3) give each byte's product in its
//! own i16 lane, the even and odd nibbles' products of a byte side by side.
//! A lane holds at most 2 products of |15 · 127| a load, so a group's 4
//! loads add in i16 exactly (at most 8 · 1905 = 15 240), and once a group
//! `saddlp` widens adjacent pairs and `addp` adds each row's two pairs:
//! `[r0, r1, r2, r3]`. (The tier's `dot16`, `smull` then `sadalp`, sums
//! bytes 0, 1, 8 and 9 into lane 0: rows 0 and 2 together, right for a
//! row's dot product, wrong here.)

use std::arch::aarch64::*;

/// A group's products: rows 0 and 1 in the first i16x8, rows 2 and 3 in
/// the second, 4 lanes a row.
pub(crate) type GroupSums = (int16x8_t, int16x8_t);

/// Adds one load's products into a group's i16 lanes.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn group_add(acc: GroupSums, lo: int8x16_t, hi: int8x16_t, even: int8x16_t, odd: int8x16_t) -> GroupSums {
    let low = vaddq_s16(
        vmull_s8(vget_low_s8(lo), vget_low_s8(even)),
        vmull_s8(vget_low_s8(hi), vget_low_s8(odd)),
    );
    let high = vaddq_s16(vmull_high_s8(lo, even), vmull_high_s8(hi, odd));
    (vaddq_s16(acc.0, low), vaddq_s16(acc.1, high))
}

/// The 4 rows' i32 sums of a group: each row's 4 lanes widened in pairs,
/// `[r0, r0, r1, r1]` and `[r2, r2, r3, r3]`, then each pair added.
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn group_rows(acc: GroupSums) -> int32x4_t {
    vpaddq_s32(vpaddlq_s16(acc.0), vpaddlq_s16(acc.1))
}

/// `panel_tile!` on NEON's group sums and `group_add`, with `$rows` for
/// the rows' sums: the tier's `group_rows`, or a mutant's (`mutants.rs`).
macro_rules! neon_panel_tile {
    ($rows:ident) => {
        panel_tile!(
            "neon",
            GroupSums,
            (vdupq_n_s16(0), vdupq_n_s16(0)),
            group_add,
            $rows
        );
    };
}

neon_panel_tile!(group_rows);
