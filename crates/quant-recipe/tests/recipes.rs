//! The named recipes (docs/NUMERICS.md §3.6–§3.8): properties that hold for
//! every row; the exact bytes are checked against numpy in golden.rs.

use half::f16;
use proptest::prelude::*;
use qlinear_quant_recipe::*;

fn sq_err(w: &[f32], deq: &[f32]) -> f64 {
    w.iter()
        .zip(deq)
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
        .sum()
}

fn row() -> impl Strategy<Value = Vec<f32>> {
    (1usize..6, prop::collection::vec(-4.0f32..4.0, 64))
        .prop_map(|(p, v)| v.into_iter().map(|x| x * x.abs().powi(p as i32)).collect())
}

fn weighted_err(w: &[f32], a: &[f32], deq: &[f32]) -> f64 {
    w.iter()
        .zip(deq)
        .zip(a)
        .map(|((&x, &y), &a)| f64::from(a) * (f64::from(x) - f64::from(y)).powi(2))
        .sum()
}

fn importance() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(prop_oneof![Just(0.0f32), 0.0f32..1.0, 1.0f32..1000.0], 64)
}

proptest! {
    /// With every importance 1 the activation-aware search is the search,
    /// byte for byte; scaling the importance by a power of two changes
    /// nothing (every sum scales exactly, the argmin stays).
    #[test]
    fn activation_aware_with_uniform_importance_is_search(w in row(), a in importance(), e in -20i32..20) {
        let ones = vec![1.0f32; 64];
        for scheme in [QScheme::Q8, QScheme::Q4, QScheme::Q4Grouped(32), QScheme::Q4Grouped(8)] {
            prop_assert_eq!(
                QuantizedWeight::quantize_weighted(scheme, 1, 64, &w, &ones).unwrap(),
                QuantizedWeight::quantize_with(Recipe::Search, scheme, 1, 64, &w).unwrap()
            );
            let scaled: Vec<f32> = a.iter().map(|&v| v * 2f32.powi(e)).collect();
            prop_assert_eq!(
                QuantizedWeight::quantize_weighted(scheme, 1, 64, &w, &a).unwrap(),
                QuantizedWeight::quantize_weighted(scheme, 1, 64, &w, &scaled).unwrap()
            );
        }
    }

    /// The activation-aware search's weighted error is never above the
    /// canonical recipe's (the canonical scale is its first candidate; the
    /// sums are f32, so allow their rounding).
    #[test]
    fn activation_aware_weighted_error_is_at_most_canonical(w in row(), a in importance()) {
        for scheme in [QScheme::Q8, QScheme::Q4, QScheme::Q4Grouped(32), QScheme::Q4Grouped(8)] {
            let canon = QuantizedWeight::quantize(scheme, 1, 64, &w).unwrap().dequantize();
            let aware = QuantizedWeight::quantize_weighted(scheme, 1, 64, &w, &a).unwrap().dequantize();
            let (c, s) = (weighted_err(&w, &a, &canon), weighted_err(&w, &a, &aware));
            prop_assert!(s <= c * (1.0 + 1e-4) + 1e-30, "{scheme}: activation-aware {s} > canonical {c}");
        }
    }

    /// The search never reconstructs worse than the canonical recipe (it
    /// evaluates the canonical scale first), grouped and per channel.
    #[test]
    fn search_error_is_at_most_canonical(w in row()) {
        for group in [GroupSize::PerChannel, GroupSize::Group(32), GroupSize::Group(8)] {
            let canon = QuantizedMatrixQ4::quantize_with(Recipe::Canonical, 1, 64, group, &w).unwrap().dequantize();
            let search = QuantizedMatrixQ4::quantize_with(Recipe::Search, 1, 64, group, &w).unwrap().dequantize();
            // the search's error is measured in f32 lanes: allow their rounding
            let (c, s) = (sq_err(&w, &canon), sq_err(&w, &search));
            prop_assert!(s <= c * (1.0 + 1e-4) + 1e-30, "{group:?}: search {s} > canonical {c}");
        }
        let canon = QuantizedMatrix::quantize_with(Recipe::Canonical, 1, 64, &w).unwrap().dequantize();
        let search = QuantizedMatrix::quantize_with(Recipe::Search, 1, 64, &w).unwrap().dequantize();
        prop_assert!(sq_err(&w, &search) <= sq_err(&w, &canon) * (1.0 + 1e-4) + 1e-30);
    }

    /// Full-range Q4's scale is `max(max⁺/7, max⁻/8)`, so the largest value
    /// maps to +7 or the most negative to −8 exactly; for Q8 it is the
    /// canonical recipe.
    #[test]
    fn full_range_codes_and_q8_identity(w in row()) {
        let m = QuantizedMatrixQ4::quantize_with(Recipe::FullRange, 1, 64, GroupSize::PerChannel, &w).unwrap();
        let (pos, neg) = w.iter().fold((0f32, 0f32), |(p, n), &v| (p.max(v), n.max(-v)));
        let Q4Scales::PerChannel(s) = m.scales() else { unreachable!() };
        prop_assert_eq!(s[0], (pos / 7.0).max(neg / 8.0));
        let codes: Vec<i8> = (0..64).map(|c| m.code(0, c)).collect();
        prop_assert!(codes.contains(&7) || codes.contains(&-8) || s[0] == 0.0);
        prop_assert_eq!(
            QuantizedMatrix::quantize_with(Recipe::FullRange, 1, 64, &w).unwrap(),
            QuantizedMatrix::quantize(1, 64, &w).unwrap()
        );
    }
}

#[test]
fn recipes_parse_and_print() {
    for r in Recipe::ALL {
        assert_eq!(r.to_string().parse::<Recipe>().unwrap(), r);
    }
    assert_eq!(Recipe::default(), Recipe::Canonical);
    let e = "best".parse::<Recipe>().unwrap_err();
    assert!(e.to_string().contains("unknown recipe \"best\""), "{e}");
}

#[test]
fn a_negative_dominated_group_uses_minus_8() {
    // max⁺ = 7, max⁻ = 8: canonical maps 8 to -7 with scale 8/7; full-range
    // keeps every value exact with scale 1
    let w = [-8.0f32, 7.0, 3.0, -1.0];
    let mut packed = [0u8; 2];
    let mut scales = [f16::ZERO; 1];
    quantize_row_q4_grouped_with(Recipe::FullRange, &w, 4, &mut packed, &mut scales).unwrap();
    assert_eq!(scales[0], f16::ONE);
    assert_eq!(packed, [0xF0, 0x7B]); // biased nibbles 0, 15 | 11, 7
    quantize_row_q4_grouped_with(Recipe::Search, &w, 4, &mut packed, &mut scales).unwrap();
    assert_eq!(scales[0], f16::ONE, "the exact scale has zero error");
}

#[test]
fn activation_aware_refuses_bad_importance_naming_the_column() {
    let w = [1.0f32, -2.0, 3.0, 0.5];
    let mut codes = [0i8; 4];
    let e = quantize_row_q8_with(Recipe::ActivationAware, &w, &mut codes).unwrap_err();
    assert_eq!(e, RecipeError::ImportanceRequired);
    assert!(e.to_string().contains("needs an importance vector"), "{e}");
    for (bad, col) in [(f32::NAN, 2), (-1.0, 1), (f32::INFINITY, 3)] {
        let mut a = [1.0f32; 4];
        a[col] = bad;
        let e = quantize_row_q8_weighted(&w, &a, &mut codes).unwrap_err();
        assert!(
            matches!(e, RecipeError::BadImportance { col: c, .. } if c == col),
            "{e}"
        );
        assert!(e.to_string().contains(&format!("importance at column {col}")), "{e}");
        let mut packed = [0u8; 2];
        assert!(quantize_row_q4_weighted(&w, &a, &mut packed).is_err());
        let mut scales = [f16::ZERO; 2];
        assert!(quantize_row_q4_grouped_weighted(&w, &a, 2, &mut packed, &mut scales).is_err());
    }
    let e = quantize_row_q8_weighted(&w, &[1.0; 3], &mut codes).unwrap_err();
    assert!(e.to_string().contains("importance: expected 4 elements, got 3"), "{e}");
    let e = QuantizedWeight::quantize_weighted(QScheme::Q4, 2, 4, &[0.0; 8], &[1.0; 5]).unwrap_err();
    assert!(e.to_string().contains("importance: expected 4 elements, got 5"), "{e}");
    // a bad row is named by the matrix constructor
    let e = QuantizedWeight::quantize_weighted(
        QScheme::Q4Grouped(2),
        2,
        4,
        &[0.0, 1.0, 2.0, 3.0, 1.0, f32::NAN, 0.0, 0.0],
        &[1.0; 4],
    )
    .unwrap_err();
    assert!(e.to_string().contains("row 1, column 1"), "{e}");
}

#[test]
fn importance_moves_the_scale_toward_the_important_columns() {
    // one outlier and moderate values: weighted toward the moderate ones the
    // scale shrinks below canonical's 8/7 (the outlier clips); weighted
    // toward the outlier alone, the outlier is reconstructed exactly
    let w = [8.0f32, 0.5, -0.9, 0.33, 0.71, -0.26, 0.6, -0.45];
    let mut packed = [0u8; 4];
    let small = [0.0f32, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
    let s_small = quantize_row_q4_weighted(&w, &small, &mut packed).unwrap();
    assert!(s_small < 8.0 / 7.0 * 0.9, "{s_small}");
    let big = [1.0f32, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    let s_big = quantize_row_q4_weighted(&w, &big, &mut packed).unwrap();
    let q0 = i32::from(packed[0] & 0x0F) - 8;
    assert_eq!(s_big * q0 as f32, 8.0, "scale {s_big}, code {q0}");
}
