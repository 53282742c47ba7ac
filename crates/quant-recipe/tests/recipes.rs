//! The named recipes (docs/NUMERICS.md §3.6–§3.7): properties that hold for
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

proptest! {
    /// The search never reconstructs worse than the canonical recipe (it
    /// evaluates the canonical scale first), grouped and per channel.
    #[test]
    fn search_error_is_at_most_canonical(w in row()) {
        for group in [GroupSize::PerChannel, GroupSize::Group(32), GroupSize::Group(8)] {
            let canon = QuantizedMatrixQ4::quantize_with(Recipe::Canonical, 1, 64, group, &w).unwrap().dequantize();
            let search = QuantizedMatrixQ4::quantize_with(Recipe::Search, 1, 64, group, &w).unwrap().dequantize();
            // the search's error is measured in f32 lanes: allow their rounding
            let (c, s) = (sq_err(&w, &canon), sq_err(&w, &search));
            prop_assert!(s <= c * (1.0 + 1e-5) + 1e-30, "{group:?}: search {s} > canonical {c}");
        }
        let canon = QuantizedMatrix::quantize_with(Recipe::Canonical, 1, 64, &w).unwrap().dequantize();
        let search = QuantizedMatrix::quantize_with(Recipe::Search, 1, 64, &w).unwrap().dequantize();
        prop_assert!(sq_err(&w, &search) <= sq_err(&w, &canon) * (1.0 + 1e-5) + 1e-30);
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
