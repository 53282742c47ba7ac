//! The integer families (W8A8, W4A8 per channel and grouped) as plain
//! loops over output features: exact i32 sums, then the float step of
//! docs/NUMERICS.md §6.1 in its stated order.

use std::ops::Range;

use qlinear_quant_recipe::{Q4Scales, QuantizedMatrix, QuantizedMatrixQ4};

use crate::abi::activations::{ActivationsQ8, OutputTile};
use crate::reference::dot::{dot_i8_i8, dot_i8_q4_biased};

/// W8A8: `y[i, r] = (Σ x·w as f32) * (x_scale[i] * w_scale[r])`.
pub fn gemm_w8a8(x: &ActivationsQ8<'_>, w: &QuantizedMatrix, rows: Range<usize>, y: &mut OutputTile<'_>) {
    x.check();
    y.check(x.m, rows.len());
    for (j, r) in rows.enumerate() {
        let (wr, ws) = (w.row(r), w.scales()[r]);
        for i in 0..x.m {
            let acc = dot_i8_i8(x.row(i), wr);
            y.set(i, j, acc as f32 * (x.scales[i] * ws));
        }
    }
}

/// W4A8 per channel: `acc = Σ x·b − 8·Σ x`, `y = (acc as f32) * (x_scale * w_scale)`.
pub fn gemm_w4a8(x: &ActivationsQ8<'_>, w: &QuantizedMatrixQ4, rows: Range<usize>, y: &mut OutputTile<'_>) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::PerChannel(scales) = w.scales() else {
        panic!("gemm_w4a8 needs per-channel scales")
    };
    assert!(
        x.sum_group == x.k || x.k == 0,
        "per-channel W4A8 needs one activation sum per row"
    );
    for (j, r) in rows.enumerate() {
        let wr = w.row_packed(r);
        for i in 0..x.m {
            let acc = dot_i8_q4_biased(x.row(i), wr) - 8 * x.row_sums(i)[0];
            y.set(i, j, acc as f32 * (x.scales[i] * scales[r]));
        }
    }
}

/// W4A8 grouped: `sum += (acc_g as f32) * f32(s[r, g])` in increasing g, then
/// `y = sum * x_scale`. `x.sum_group` must equal the weight's group.
pub fn gemm_w4a8_grouped(x: &ActivationsQ8<'_>, w: &QuantizedMatrixQ4, rows: Range<usize>, y: &mut OutputTile<'_>) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::Grouped { group, scales } = w.scales() else {
        panic!("gemm_w4a8_grouped needs group scales")
    };
    let (g, groups) = (*group, w.k() / *group);
    assert_eq!(x.sum_group, g, "activation sums per weight group");
    for (j, r) in rows.enumerate() {
        let (wr, sr) = (w.row_packed(r), &scales[r * groups..(r + 1) * groups]);
        for i in 0..x.m {
            let (xr, sums) = (x.row(i), x.row_sums(i));
            let mut sum = 0f32;
            for gi in 0..groups {
                let acc = dot_i8_q4_biased(&xr[gi * g..(gi + 1) * g], &wr[gi * g / 2..(gi + 1) * g / 2]) - 8 * sums[gi];
                sum += acc as f32 * f32::from(sr[gi]);
            }
            y.set(i, j, sum * x.scales[i]);
        }
    }
}
