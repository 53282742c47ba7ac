//! GPTQ (docs/NUMERICS.md §3.9): what holds for every row and hessian; the
//! exact bytes are checked against Python in golden.rs.

use proptest::prelude::*;
use qlinear_quant_recipe::*;

/// A uniform stream in [−1, 1) from a seed (an LCG: the tests need no
/// statistics, only variety).
fn stream(seed: u64) -> impl FnMut() -> f32 {
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    move || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// `t` input rows of `k` columns that correlate: each column is the one
/// before it times 0.9 plus fresh noise, and column 5 is twice as loud.
fn correlated_inputs(t: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut next = stream(seed);
    let mut x = vec![0f32; t * k];
    for row in x.chunks_exact_mut(k) {
        let mut prev = 0f32;
        for (j, v) in row.iter_mut().enumerate() {
            prev = 0.9 * prev + next();
            *v = if j == 5 { 2.0 * prev } else { prev };
        }
    }
    x
}

/// `mean x xᵀ` of `t` rows, in f64, stored f32.
fn hessian(x: &[f32], k: usize) -> Vec<f32> {
    let t = x.len() / k;
    let mut h = vec![0f64; k * k];
    for row in x.chunks_exact(k) {
        for i in 0..k {
            for j in 0..k {
                h[i * k + j] += f64::from(row[i]) * f64::from(row[j]);
            }
        }
    }
    h.iter().map(|v| (v / t as f64) as f32).collect()
}

fn weights(n: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut next = stream(seed);
    (0..n * k).map(|_| next() * 0.5).collect()
}

/// `Σ_rows ‖(w − ŵ) X‖²`: the layer's output error on its inputs.
fn output_error(w: &[f32], q: &QuantizedWeight, x: &[f32], k: usize) -> f64 {
    let deq = q.dequantize();
    let mut e = 0f64;
    for (wr, dr) in w.chunks_exact(k).zip(deq.chunks_exact(k)) {
        for xr in x.chunks_exact(k) {
            let d: f64 = wr
                .iter()
                .zip(dr)
                .zip(xr)
                .map(|((&a, &b), &v)| (f64::from(a) - f64::from(b)) * f64::from(v))
                .sum();
            e += d * d;
        }
    }
    e
}

const SCHEMES: [QScheme; 4] = [QScheme::Q8, QScheme::Q4, QScheme::Q4Grouped(32), QScheme::Q4Grouped(8)];

#[test]
fn the_factor_inverts_the_damped_hessian() {
    let k = 48;
    let h = hessian(&correlated_inputs(300, k, 1), k);
    let f = GptqFactor::from_hessian(&h, k).unwrap();
    let u = f.u();
    let mean = (0..k).map(|j| f64::from(h[j * k + j])).sum::<f64>() / k as f64;
    let a = |i: usize, j: usize| f64::from(h[i.min(j) * k + i.max(j)]) + if i == j { GPTQ_DAMPING * mean } else { 0.0 };
    for i in 0..k {
        for j in 0..k {
            assert!(j >= i || u[i * k + j] == 0.0, "U is upper triangular");
            // (A · Uᵀ U)[i][j] = δ_ij
            let e: f64 = (0..k)
                .map(|m| a(i, m) * (0..k).map(|p| u[p * k + m] * u[p * k + j]).sum::<f64>())
                .sum();
            let want = if i == j { 1.0 } else { 0.0 };
            assert!((e - want).abs() < 1e-9, "({i}, {j}): {e}");
        }
        assert!(u[i * k + i] > 0.0);
    }
}

#[test]
fn a_diagonal_hessian_spreads_nothing_so_gptq_is_the_activation_aware_search() {
    let (n, k) = (6, 64);
    let mut next = stream(2);
    let d: Vec<f32> = (0..k).map(|_| next().abs() * 4.0 + 0.01).collect();
    let mut h = vec![0f32; k * k];
    for j in 0..k {
        h[j * k + j] = d[j];
    }
    let f = GptqFactor::from_hessian(&h, k).unwrap();
    let w = weights(n, k, 3);
    for scheme in SCHEMES {
        assert_eq!(
            QuantizedWeight::quantize_gptq(scheme, n, k, &w, &f).unwrap(),
            QuantizedWeight::quantize_weighted(scheme, n, k, &w, &d).unwrap(),
            "{scheme}"
        );
    }
}

#[test]
fn gptq_moves_the_outputs_less_than_the_activation_aware_search() {
    let (n, k) = (32, 64);
    let x = correlated_inputs(256, k, 4);
    let h = hessian(&x, k);
    let f = GptqFactor::from_hessian(&h, k).unwrap();
    let d: Vec<f32> = (0..k).map(|j| h[j * k + j]).collect();
    let w = weights(n, k, 5);
    for scheme in SCHEMES {
        let g = output_error(
            &w,
            &QuantizedWeight::quantize_gptq(scheme, n, k, &w, &f).unwrap(),
            &x,
            k,
        );
        let a = output_error(
            &w,
            &QuantizedWeight::quantize_weighted(scheme, n, k, &w, &d).unwrap(),
            &x,
            k,
        );
        assert!(g < 0.8 * a, "{scheme}: GPTQ {g} against activation-aware {a}");
    }
}

#[test]
fn dead_inputs_get_zero_weights_and_the_rest_is_unchanged_by_their_values() {
    let (n, k) = (4, 32);
    let x: Vec<f32> = correlated_inputs(100, k, 6)
        .chunks_exact(k)
        .flat_map(|r| {
            r.iter()
                .enumerate()
                .map(|(j, &v)| if j == 3 || j == 17 { 0.0 } else { v })
        })
        .collect();
    let f = GptqFactor::from_hessian(&hessian(&x, k), k).unwrap();
    let mut w = weights(n, k, 7);
    let q = QuantizedWeight::quantize_gptq(QScheme::Q8, n, k, &w, &f).unwrap();
    let QuantizedWeight::Q8(m) = &q else { unreachable!() };
    for r in 0..n {
        assert_eq!((m.codes()[r * k + 3], m.codes()[r * k + 17]), (0, 0), "row {r}");
    }
    // what a dead column held does not matter
    for r in 0..n {
        w[r * k + 3] = 1e3;
    }
    assert_eq!(QuantizedWeight::quantize_gptq(QScheme::Q8, n, k, &w, &f).unwrap(), q);
}

#[test]
fn scaling_the_hessian_by_a_power_of_two_changes_no_byte() {
    let (n, k) = (5, 64);
    let h = hessian(&correlated_inputs(200, k, 8), k);
    let w = weights(n, k, 9);
    let f = GptqFactor::from_hessian(&h, k).unwrap();
    for e in [-7, 3] {
        let scaled: Vec<f32> = h.iter().map(|v| v * 2f32.powi(e)).collect();
        let g = GptqFactor::from_hessian(&scaled, k).unwrap();
        for scheme in SCHEMES {
            assert_eq!(
                QuantizedWeight::quantize_gptq(scheme, n, k, &w, &g).unwrap(),
                QuantizedWeight::quantize_gptq(scheme, n, k, &w, &f).unwrap(),
                "{scheme}, 2^{e}"
            );
        }
    }
}

#[test]
fn only_the_upper_triangle_is_read() {
    let k = 16;
    let h = hessian(&correlated_inputs(64, k, 10), k);
    let mut lower = h.clone();
    for i in 0..k {
        for j in 0..i {
            lower[i * k + j] = if (i + j) % 2 == 0 { f32::NAN } else { 7.0 };
        }
    }
    assert_eq!(
        GptqFactor::from_hessian(&lower, k).unwrap(),
        GptqFactor::from_hessian(&h, k).unwrap()
    );
}

#[test]
fn every_refusal_names_what_is_wrong() {
    let k = 4;
    let h = hessian(&correlated_inputs(32, k, 11), k);
    let refused = |h: &[f32], k: usize| GptqFactor::from_hessian(h, k).unwrap_err();
    assert!(matches!(
        refused(&h[1..], k),
        RecipeError::LengthMismatch {
            what: "hessian",
            expected: 16,
            actual: 15
        }
    ));
    let mut bad = h.clone();
    bad[6] = f32::INFINITY; // row 1, column 2
    assert_eq!(
        refused(&bad, k),
        RecipeError::BadHessian {
            row: 1,
            col: 2,
            value: f32::INFINITY
        }
    );
    let mut neg = h.clone();
    neg[2 * k + 2] = -1.0;
    let e = refused(&neg, k);
    assert_eq!(
        e,
        RecipeError::BadHessian {
            row: 2,
            col: 2,
            value: -1.0
        }
    );
    assert!(e.to_string().contains("row 2, column 2"), "{e}");
    // indefinite: [[1, 2], [2, 1]] has the eigenvalue −1
    let e = refused(&[1.0, 2.0, 2.0, 1.0], 2);
    assert_eq!(e, RecipeError::HessianNotPositiveDefinite { col: 0 });
    assert!(e.to_string().contains("column 0"), "{e}");

    let f = GptqFactor::from_hessian(&h, k).unwrap();
    let (w, mut codes) = ([0.5f32, f32::NAN, 0.1, 0.2], [0i8; 4]);
    assert!(matches!(
        quantize_row_q8_gptq(&w, &f, &mut codes),
        Err(RecipeError::NonFinite { col: 1, .. })
    ));
    let e = QuantizedWeight::quantize_gptq(QScheme::Q8, 2, 4, &[0.1, 0.2, 0.3, 0.4, 0.5, f32::NAN, 0.0, 0.0], &f)
        .unwrap_err();
    assert!(matches!(e, RecipeError::NonFinite { row: 1, col: 1, .. }), "{e}");
    assert!(matches!(
        quantize_row_q8_gptq(&[0.0; 5], &f, &mut [0i8; 5]),
        Err(RecipeError::LengthMismatch {
            expected: 4,
            actual: 5,
            ..
        })
    ));
    assert!(matches!(
        QuantizedWeight::quantize_gptq(QScheme::Q4Grouped(3), 1, 4, &[0.0; 4], &f),
        Err(RecipeError::GroupOdd { group: 3 })
    ));
    // a huge row overflows a group's f16 scale, named with its columns
    let e = quantize_row_q4_grouped_gptq(&[1e6, 0.0, 0.0, 0.0], &f, 2, &mut [0u8; 2], &mut [half::f16::ZERO; 2])
        .unwrap_err();
    assert!(
        matches!(
            e,
            RecipeError::ScaleOverflow {
                group: 0,
                col_start: 0,
                col_end: 2,
                ..
            }
        ),
        "{e}"
    );
    // the recipe by name, without a hessian
    assert_eq!("gptq".parse::<Recipe>().unwrap(), Recipe::Gptq);
    assert_eq!(
        QuantizedWeight::quantize_with(Recipe::Gptq, QScheme::Q8, 1, 4, &[0.0; 4]).unwrap_err(),
        RecipeError::HessianRequired
    );
}

#[test]
fn a_hand_example_of_two_correlated_columns() {
    // H = [[1, 0.5], [0.5, 1]], λ = GPTQ_DAMPING · 1 = d: A = [[1 + d, 0.5], [0.5, 1 + d]].
    // R (upper, A = R Rᵀ): R11 = √(1 + d), R01 = 0.5 / √(1 + d),
    // R00 = √(1 + d − R01²). U = R⁻¹: U00 = 1 / R00, U01 = −R01 / (R00·R11).
    let f = GptqFactor::from_hessian(&[1.0, 0.5, 0.5, 1.0], 2).unwrap();
    let a = 1.0 + GPTQ_DAMPING;
    let (r11, r01) = (a.sqrt(), 0.5 / a.sqrt());
    let r00 = (a - r01 * r01).sqrt();
    let u = f.u();
    assert!((u[0] - 1.0 / r00).abs() < 1e-15 && (u[1] + r01 / (r00 * r11)).abs() < 1e-15 && u[2] == 0.0);
    // Q8, w = [1.27, 0.3]: the search keeps the scale 0.01 (1.27 / 127 is
    // exact enough that no candidate beats it), so column 0 rounds exactly
    // (e = 0) only if 1.27 / 0.01 is an integer in f32; whatever its error
    // e, column 1 becomes 0.3 − e · U01 before it is rounded.
    let w = [1.27f32, 0.3];
    let mut codes = [0i8; 2];
    let s = quantize_row_q8_gptq(&w, &f, &mut codes).unwrap();
    let q0 = (w[0] / s).round_ties_even().clamp(-127.0, 127.0);
    assert_eq!(codes[0], q0 as i8);
    let e = (f64::from(w[0]) - f64::from(s) * f64::from(q0)) / u[0];
    let v1 = f64::from(w[1]) - e * u[1];
    assert_eq!(codes[1], ((v1 as f32) / s).round_ties_even().clamp(-127.0, 127.0) as i8);
}

proptest! {
    /// Any row against the hessian of any inputs: a valid matrix whose
    /// codes lie in the scheme's range (from_parts checks them), the same
    /// bytes for a row alone as within a matrix.
    #[test]
    fn any_row_and_inputs_give_a_valid_matrix(seed in 0u64..1000, t in 1usize..40, scale in -3i32..3) {
        let (n, k) = (3, 32);
        let x = correlated_inputs(t, k, seed);
        let f = GptqFactor::from_hessian(&hessian(&x, k), k).unwrap();
        let w: Vec<f32> = weights(n, k, seed + 1).iter().map(|v| v * 10f32.powi(scale)).collect();
        for scheme in SCHEMES {
            let all = QuantizedWeight::quantize_gptq(scheme, n, k, &w, &f).unwrap();
            let first = QuantizedWeight::quantize_gptq(scheme, 1, k, &w[..k], &f).unwrap();
            prop_assert_eq!(&all.dequantize()[..k], &first.dequantize()[..]);
        }
    }
}
