//! Weight-only kernels: f32 activations, weights dequantized in registers.
//!
//! Why 8 lanes: a single running sum is a chain of dependent additions; 8
//! independent lanes (lane ℓ takes positions ℓ, ℓ+8, … of a group, in order)
//! map onto one 8-wide or two 4-wide vector registers, and a fixed combining
//! tree makes every output depend only on its own row and column — never on M,
//! the thread, or the tier. No fused multiply-add anywhere.

use std::ops::Range;

use half::f16;
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrix, QuantizedMatrixQ4};

use crate::abi::activations::{ActivationsF32, OutputTile};

/// `((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))`.
#[inline]
pub fn lane_tree(l: [f32; 8]) -> f32 {
    ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
}

/// The 8-lane partial sum of `x[c] · code(c)` over one group.
#[inline]
fn lanes_partial(x: &[f32], code: impl Fn(usize) -> f32) -> f32 {
    let mut l = [0f32; 8];
    for (c, &xv) in x.iter().enumerate() {
        l[c % 8] += xv * code(c);
    }
    lane_tree(l)
}

/// W8A16: `y[i, r] = w_scale[r] · partial`, partial the 8-lane sum of `x·q`.
pub fn gemm_w8a16(x: &ActivationsF32<'_>, w: &QuantizedMatrix, rows: Range<usize>, y: &mut OutputTile<'_>) {
    x.check();
    y.check(x.m, rows.len());
    for (j, r) in rows.enumerate() {
        let wr = w.row(r);
        for i in 0..x.m {
            let partial = lanes_partial(x.row(i), |c| f32::from(wr[c]));
            y.set(i, j, w.scales()[r] * partial);
        }
    }
}

fn nibble(packed: &[u8], c: usize) -> f32 {
    let b = packed[c / 2];
    f32::from(if c.is_multiple_of(2) { b & 0x0F } else { b >> 4 } as i8 - 8)
}

/// W4A16 per channel: `y = w_scale[r] · partial` over the whole row.
pub fn gemm_w4a16(x: &ActivationsF32<'_>, w: &QuantizedMatrixQ4, rows: Range<usize>, y: &mut OutputTile<'_>) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::PerChannel(scales) = w.scales() else {
        panic!("gemm_w4a16 needs per-channel scales")
    };
    for (j, r) in rows.enumerate() {
        let wr = w.row_packed(r);
        for i in 0..x.m {
            y.set(i, j, scales[r] * lanes_partial(x.row(i), |c| nibble(wr, c)));
        }
    }
}

/// W4A16 grouped: `y = 0; y += s_g · partial_g` in increasing g.
pub fn gemm_w4a16_grouped(x: &ActivationsF32<'_>, w: &QuantizedMatrixQ4, rows: Range<usize>, y: &mut OutputTile<'_>) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::Grouped { group, scales } = w.scales() else {
        panic!("gemm_w4a16_grouped needs group scales")
    };
    let (g, groups) = (*group, w.k() / *group);
    for (j, r) in rows.enumerate() {
        let (wr, sr) = (w.row_packed(r), &scales[r * groups..(r + 1) * groups]);
        for i in 0..x.m {
            let xr = x.row(i);
            let mut acc = 0f32;
            for gi in 0..groups {
                let partial = lanes_partial(&xr[gi * g..(gi + 1) * g], |c| nibble(wr, gi * g + c));
                acc += f32::from(sr[gi]) * partial;
            }
            y.set(i, j, acc);
        }
    }
}

/// Exact f16 → f32 of a row of group scales, portable.
pub fn scales_to_f32(src: &[f16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f32::from(*s);
    }
}
