//! Activation smoothing (SmoothQuant, Xiao et al. 2023) for W8A8: each
//! input column `c` of a linear layer is divided by a factor `s_c` on the
//! activation side and multiplied by it on the weight side, so that
//! `x · Wᵀ = (x / s) · (W · s)ᵀ` in exact arithmetic while the activation
//! rows, which W8A8 quantizes with one scale a row (`docs/NUMERICS.md`
//! §3.2), lose their outlier columns to the weights, which are quantized
//! a row at a time and absorb them better.
//!
//! The division is folded into whatever produces the activations, so the
//! forward pass and the kernels stay as they are: the RMSNorm weight before
//! the attention and the MLP projections, the rows of `ffn_up` before
//! `ffn_down` (SwiGLU's product is linear in `up`'s output), and the rows
//! of `attn_v` before `attn_output` (attention mixes positions, not
//! columns, so each output column of V reaches exactly the same column of
//! the attention's output). The LM head is not smoothed: it shares its
//! weight with the token embedding.
//!
//! `s_c = max|x_c|^α / max|w_c|^(1−α)`, the activation maximum over every
//! calibration row and the weight maximum over every layer of the group
//! that reads the column; 1 where either is zero.

use crate::{Error, Result};

/// Smoothing factors for one group of linear layers that read the same
/// activations: `act_max[c]` is column `c`'s activation maximum and
/// `weights` are the group's `[n, k]` weights (row major, `k =
/// act_max.len()`).
///
/// Errors: a weight whose length is not a multiple of `k`, an `alpha`
/// outside `[0, 1]`, or a factor that is not finite and positive (an
/// activation or weight maximum of ±∞ or NaN), named by `what`.
pub fn factors(what: &str, act_max: &[f32], weights: &[&[f32]], alpha: f32) -> Result<Vec<f32>> {
    let k = act_max.len();
    if !(0.0..=1.0).contains(&alpha) {
        return Err(Error::Smooth(format!("alpha {alpha} is outside [0, 1]")));
    }
    let mut w_max = vec![0f32; k];
    for w in weights {
        if k == 0 || w.len() % k != 0 {
            return Err(Error::Smooth(format!(
                "{what}: a weight of {} values is not rows of the {k} activation columns",
                w.len()
            )));
        }
        for row in w.chunks_exact(k) {
            for (m, v) in w_max.iter_mut().zip(row) {
                *m = m.max(v.abs());
            }
        }
    }
    act_max
        .iter()
        .zip(&w_max)
        .enumerate()
        .map(|(c, (&a, &w))| {
            // f64 for the powers: the factor is rounded to f32 once
            let s = if a == 0.0 || w == 0.0 {
                1.0
            } else {
                (f64::from(a).powf(f64::from(alpha)) / f64::from(w).powf(1.0 - f64::from(alpha))) as f32
            };
            if s.is_finite() && s > 0.0 {
                Ok(s)
            } else {
                Err(Error::Smooth(format!(
                    "{what}: column {c} has activation maximum {a} and weight maximum {w}, factor {s}"
                )))
            }
        })
        .collect()
}

/// `w[r, c] *= s[c]` for every row of a row-major `[n, s.len()]` weight.
pub fn scale_columns(w: &mut [f32], s: &[f32]) {
    for row in w.chunks_exact_mut(s.len()) {
        for (v, f) in row.iter_mut().zip(s) {
            *v *= f;
        }
    }
}

/// `w[r, c] /= s[r]` for every row of a row-major `[s.len(), k]` weight.
pub fn divide_rows(w: &mut [f32], s: &[f32]) {
    let k = w.len() / s.len().max(1);
    for (row, f) in w.chunks_exact_mut(k.max(1)).zip(s) {
        for v in row {
            *v /= f;
        }
    }
}

/// `v[c] /= s[c]`: a norm weight that produces the smoothed activations.
pub fn divide(v: &mut [f32], s: &[f32]) {
    for (x, f) in v.iter_mut().zip(s) {
        *x /= f;
    }
}

/// The factors of the attention output's input columns made equal across
/// the query heads that share one KV head, because they are divided out of
/// that KV head's V rows: `s` is `[heads · head_dim]`; returns the factors
/// of the V rows (`[kv_heads · head_dim]`, the largest of each column over
/// its query heads) and of the output projection's columns (the same,
/// repeated for each query head).
pub fn shared_over_heads(s: &[f32], heads: usize, kv_heads: usize, head_dim: usize) -> (Vec<f32>, Vec<f32>) {
    let rep = heads / kv_heads.max(1);
    let mut v = vec![0f32; kv_heads * head_dim];
    for h in 0..heads {
        let g = h / rep.max(1);
        for d in 0..head_dim {
            let x = &mut v[g * head_dim + d];
            *x = x.max(s[h * head_dim + d]);
        }
    }
    let o = (0..heads)
        .flat_map(|h| v[(h / rep.max(1)) * head_dim..][..head_dim].to_vec())
        .collect();
    (v, o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matmul(x: &[f32], w: &[f32], k: usize) -> Vec<f64> {
        x.chunks_exact(k)
            .flat_map(|xr| {
                w.chunks_exact(k)
                    .map(|wr| xr.iter().zip(wr).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum())
                    .collect::<Vec<f64>>()
            })
            .collect()
    }

    #[test]
    fn factors_follow_the_formula_and_leave_dead_columns_alone() {
        // columns: act 4 / weight 1, act 1 / weight 4, act 0, weight 0
        let act = [4.0, 1.0, 0.0, 2.0];
        let w = [1.0, -4.0, 3.0, 0.0, -0.5, 2.0, 1.0, 0.0];
        let s = factors("t", &act, &[&w], 0.5).unwrap();
        assert_eq!(s, vec![2.0, 0.5, 1.0, 1.0]);
        // alpha 1 moves everything to the weights, alpha 0 nothing but 1/w
        assert_eq!(factors("t", &act, &[&w], 1.0).unwrap()[..2], [4.0, 1.0]);
        assert_eq!(factors("t", &act, &[&w], 0.0).unwrap()[..2], [1.0, 0.25]);
        // the maximum is over every weight of the group
        let w2 = [8.0, 0.0, 0.0, 0.0];
        assert_eq!(factors("t", &act, &[&w, &w2], 0.5).unwrap()[0], (4.0f32 / 8.0).sqrt());
    }

    #[test]
    fn bad_inputs_are_errors_that_name_the_group() {
        let e = factors("blk.3.attn", &[1.0, 2.0], &[&[1.0, 2.0, 3.0]], 0.5).unwrap_err();
        assert!(
            e.to_string().contains("blk.3.attn") && e.to_string().contains("3 values"),
            "{e}"
        );
        let e = factors("g", &[1.0], &[&[1.0]], 1.5).unwrap_err();
        assert!(e.to_string().contains("alpha 1.5"), "{e}");
        let e = factors("g", &[f32::INFINITY, 1.0], &[&[1.0, 1.0]], 0.5).unwrap_err();
        assert!(e.to_string().contains("column 0"), "{e}");
        let e = factors("g", &[1.0, f32::NAN], &[&[1.0, 1.0]], 0.5).unwrap_err();
        assert!(e.to_string().contains("column 1"), "{e}");
        assert!(factors("g", &[], &[&[1.0]], 0.5).is_err());
    }

    #[test]
    fn a_smoothed_pair_computes_the_same_product() {
        // x · Wᵀ against (x / s) · (W · s)ᵀ, the division folded into a
        // norm weight g (x = h ⊙ g)
        let k = 6;
        let h: Vec<f32> = (0..3 * k).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.3).collect();
        let mut g: Vec<f32> = (0..k).map(|c| 1.0 + c as f32 * 0.5).collect();
        let mut w: Vec<f32> = (0..4 * k).map(|i| ((i * 5 % 13) as f32 - 6.0) * 0.1).collect();
        let x = |g: &[f32]| -> Vec<f32> {
            h.chunks_exact(k)
                .flat_map(|r| r.iter().zip(g).map(|(a, b)| a * b))
                .collect()
        };
        let want = matmul(&x(&g), &w, k);
        let act: Vec<f32> = (0..k)
            .map(|c| x(&g).iter().skip(c).step_by(k).fold(0f32, |m, v| m.max(v.abs())))
            .collect();
        let s = factors("t", &act, &[&w], 0.5).unwrap();
        assert!(
            s.iter().any(|f| (f - 1.0).abs() > 0.1),
            "the test should move something: {s:?}"
        );
        divide(&mut g, &s);
        scale_columns(&mut w, &s);
        for (a, b) in want.iter().zip(matmul(&x(&g), &w, k)) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "{a} against {b}");
        }
    }

    #[test]
    fn rows_divided_before_a_product_cancel_the_columns_scaled_after_it() {
        // up's output row c feeds down's column c (SwiGLU: silu(gate) ⊙ up)
        let (k, f) = (4, 5);
        let x: Vec<f32> = (0..2 * k).map(|i| i as f32 * 0.25 - 1.0).collect();
        let gate: Vec<f32> = (0..2 * f).map(|i| 0.5 + i as f32 * 0.1).collect();
        let mut up: Vec<f32> = (0..f * k).map(|i| ((i * 3 % 7) as f32 - 3.0) * 0.2).collect();
        let mut down: Vec<f32> = (0..3 * f).map(|i| ((i * 5 % 9) as f32 - 4.0) * 0.3).collect();
        let mlp = |up: &[f32], down: &[f32]| {
            let u = matmul(&x, up, k);
            let a: Vec<f32> = u.iter().zip(&gate).map(|(u, g)| (*u as f32) * g).collect();
            matmul(&a, down, f)
        };
        let want = mlp(&up, &down);
        let s = [2.0, 0.5, 4.0, 1.0, 0.25];
        divide_rows(&mut up, &s);
        scale_columns(&mut down, &s);
        for (a, b) in want.iter().zip(mlp(&up, &down)) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "{a} against {b}");
        }
    }

    #[test]
    fn factors_shared_over_heads_take_each_kv_heads_largest() {
        // 4 query heads of 2 over 2 KV heads: heads 0, 1 read KV head 0
        let s = [1.0, 5.0, 3.0, 2.0, 0.5, 0.5, 7.0, 0.25];
        let (v, o) = shared_over_heads(&s, 4, 2, 2);
        assert_eq!(v, vec![3.0, 5.0, 7.0, 0.5]);
        assert_eq!(o, vec![3.0, 5.0, 3.0, 5.0, 7.0, 0.5, 7.0, 0.5]);
    }
}
