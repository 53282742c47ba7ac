//! The portable panel tiles: docs/NUMERICS.md §6.1 read from the panel
//! layout (§4), one weight row at a time. The scalar tier registers them.

use std::ops::Range;

use half::f16;

use crate::abi::panel::{PANEL_ROWS, PIECE_COLS};

/// The portable panel tile (1 activation row): §6.1 read from the panel
/// layout, one row at a time. The scalar tier's entry, so that every
/// platform runs the frame above.
pub fn tile_panel_scalar(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[f16], out: &mut [f32]) {
    let (xs, sums) = (x[0], sums[0]);
    let groups = sums.len();
    for (q, o) in out.iter_mut().enumerate() {
        let mut sum = 0f32;
        for (g, &group_sum) in sums.iter().enumerate().take(groups) {
            sum += (panel_dot_biased(xs, panel, q, 4 * g..4 * g + 4) - 8 * group_sum) as f32
                * f32::from(s[PANEL_ROWS * g + q]);
        }
        *o = sum;
    }
}

/// The portable per-channel panel tile (1 activation row): §6.1 read from
/// the panel layout, one weight row at a time.
pub fn tile_panel_per_channel_scalar(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], out: &mut [f32]) {
    let (xs, sum) = (x[0], sums[0][0]);
    for (q, o) in out.iter_mut().enumerate() {
        *o = (panel_dot_biased(xs, panel, q, 0..xs.len() / PIECE_COLS) - 8 * sum) as f32;
    }
}

/// `Σ x·b` (biased, uncorrected) of panel row `q` over the pieces (8
/// columns each) `pieces`, `xs` an activation row: byte `j` of a piece
/// holds column `8c + j` low and `8c + 4 + j` high (§4).
fn panel_dot_biased(xs: &[i8], panel: &[u8], q: usize, pieces: Range<usize>) -> i32 {
    let mut acc = 0i32;
    for c in pieces {
        let (low, high) = (&xs[8 * c..8 * c + 4], &xs[8 * c + 4..8 * c + 8]);
        for (j, &b) in panel[64 * c + 4 * q..64 * c + 4 * q + 4].iter().enumerate() {
            acc += i32::from(low[j]) * i32::from(b & 0x0F) + i32::from(high[j]) * i32::from(b >> 4);
        }
    }
    acc
}
