//! Properties of the recipes over random rows.
#![allow(clippy::needless_range_loop)] // columns index several parallel buffers

use half::f16;
use proptest::prelude::*;
use qlinear_quant_recipe::*;

fn row(max_len: usize) -> impl Strategy<Value = Vec<f32>> {
    (
        prop_oneof![Just(1e-30f32), Just(1e-3), Just(1.0), Just(1e3), Just(1e30)],
        0..max_len,
    )
        .prop_flat_map(|(mag, k)| proptest::collection::vec((-1.0f32..1.0).prop_map(move |v| v * mag), k))
}

fn grouped_row() -> impl Strategy<Value = (usize, Vec<f32>)> {
    (prop::sample::select(vec![2usize, 4, 6, 8, 16, 32, 64]), 0usize..6)
        .prop_flat_map(|(g, groups)| (Just(g), proptest::collection::vec(-1000.0f32..1000.0, g * groups)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn q8_codes_in_range_and_error_bounded(w in row(300)) {
        let mut c = vec![0i8; w.len()];
        let s = quantize_row_q8(&w, &mut c).unwrap();
        for (&q, &v) in c.iter().zip(&w) {
            prop_assert!((-127..=127).contains(&q));
            // |deq - w| <= scale / 2, up to the rounding of w / scale (which
            // can move a near-tie by |q| ulps of the quotient) and of q · s
            let err = (f32::from(q) * s - v).abs();
            let slack = s * 128.0 * f32::EPSILON;
            prop_assert!(err <= s * 0.5 + slack + f32::MIN_POSITIVE, "{err} vs {s}");
        }
    }

    #[test]
    fn q8_negation_is_exact(w in row(300)) {
        let neg: Vec<f32> = w.iter().map(|v| -v).collect();
        let (mut a, mut b) = (vec![0i8; w.len()], vec![0i8; w.len()]);
        let sa = quantize_row_q8(&w, &mut a).unwrap();
        let sb = quantize_row_q8(&neg, &mut b).unwrap();
        prop_assert_eq!(sa.to_bits(), sb.to_bits());
        prop_assert_eq!(a.iter().map(|c| -c).collect::<Vec<_>>(), b);
    }

    #[test]
    fn q4_codes_in_range_negation_and_pad(w in row(300)) {
        let k = w.len();
        let neg: Vec<f32> = w.iter().map(|v| -v).collect();
        let (mut a, mut b) = (vec![0u8; k.div_ceil(2)], vec![0u8; k.div_ceil(2)]);
        let s = quantize_row_q4(&w, &mut a).unwrap();
        prop_assert_eq!(s.to_bits(), quantize_row_q4(&neg, &mut b).unwrap().to_bits());
        for c in 0..k {
            let q = unpack_code_biased(&a, c);
            prop_assert!((-7..=7).contains(&q));
            prop_assert_eq!(-q, unpack_code_biased(&b, c));
            prop_assert!((f32::from(q) * s - w[c]).abs() <= s * 0.5 * (1.0 + 1e-5) + f32::MIN_POSITIVE);
        }
        if k % 2 == 1 {
            prop_assert_eq!(a[k / 2] >> 4, Q4_PAD_BIASED);
        }
    }

    #[test]
    fn q4_grouped_codes_negation_and_error_per_group((g, w) in grouped_row()) {
        let k = w.len();
        let neg: Vec<f32> = w.iter().map(|v| -v).collect();
        let (mut a, mut b) = (vec![0u8; k / 2], vec![0u8; k / 2]);
        let (mut sa, mut sb) = (vec![f16::ZERO; k / g], vec![f16::ZERO; k / g]);
        quantize_row_q4_grouped(&w, g, &mut a, &mut sa).unwrap();
        quantize_row_q4_grouped(&neg, g, &mut b, &mut sb).unwrap();
        prop_assert_eq!(&sa, &sb);
        for c in 0..k {
            let q = unpack_code_biased(&a, c);
            prop_assert!((-7..=7).contains(&q));
            prop_assert_eq!(-q, unpack_code_biased(&b, c));
            let s = f32::from(sa[c / g]);
            // the f16 scale is rounded, so the clamp may cost up to 7·|s − amax/7|
            let amax = w[c / g * g..(c / g + 1) * g].iter().fold(0f32, |m, v| m.max(v.abs()));
            let bound = s * 0.5 + (7.0 * s - amax).abs() + 1e-3 * s;
            prop_assert!((f32::from(q) * s - w[c]).abs() <= bound);
        }
    }

    #[test]
    fn pack_unpack_and_xor_round_trip(codes in proptest::collection::vec(-8i8..=7, 0..100)) {
        let mut p = vec![0u8; codes.len().div_ceil(2)];
        pack_codes_biased(&codes, &mut p);
        let back: Vec<i8> = (0..codes.len()).map(|c| unpack_code_biased(&p, c)).collect();
        prop_assert_eq!(&back, &codes);
        let mut t = p.clone();
        biased_to_twos_complement(&mut t);
        for (c, &code) in codes.iter().enumerate() {
            let nib = if c % 2 == 0 { t[c / 2] & 0xF } else { t[c / 2] >> 4 };
            prop_assert_eq!(if nib < 8 { nib as i8 } else { nib as i8 - 16 }, code);
        }
        if codes.len() % 2 == 1 {
            prop_assert_eq!(t[codes.len() / 2] >> 4, 0, "pad 8 maps to two's-complement 0");
        }
        twos_complement_to_biased(&mut t);
        prop_assert_eq!(t, p);
    }

    #[test]
    fn matrix_round_trips_through_parts(n in 0usize..5, k in 0usize..40, seed in any::<u64>()) {
        let w: Vec<f32> = (0..n * k).map(|i| ((i as u64).wrapping_mul(seed | 1) % 1000) as f32 - 500.0).collect();
        let m = QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).unwrap();
        let back = QuantizedMatrixQ4::from_parts_twos_complement(n, k, m.to_twos_complement(), m.scales().clone()).unwrap();
        prop_assert_eq!(&back, &m);
        let q = QuantizedMatrix::quantize(n, k, &w).unwrap();
        let (c, s) = q.clone().into_parts();
        prop_assert_eq!(QuantizedMatrix::from_parts(n, k, c, s).unwrap(), q);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// No recipe ever writes a negative group scale: only an import (GGUF
    /// Q4_0) does, and that is what format version 2 says
    /// (docs/FORMAT.md, "Versions"). −0.0 is not negative there.
    #[test]
    fn no_recipe_writes_a_negative_group_scale((g, w) in grouped_row()) {
        let k = w.len();
        for recipe in [Recipe::Canonical, Recipe::FullRange, Recipe::Search] {
            let m = QuantizedMatrixQ4::quantize_with(recipe, 1, k, GroupSize::Group(g), &w).unwrap();
            prop_assert_eq!(m.negative_group_scale(), None, "{}", recipe);
        }
        let importance = vec![0.5f32; k];
        let m = QuantizedWeight::quantize_weighted(QScheme::Q4Grouped(g), 1, k, &w, &importance).unwrap();
        let QuantizedWeight::Q4(m) = m else { panic!("q4") };
        prop_assert_eq!(m.negative_group_scale(), None);
    }
}
