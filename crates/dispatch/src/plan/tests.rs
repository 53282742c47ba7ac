//! The plan's unit tests (`#[cfg(test)]` only): an `unwrap` or a `panic!` here is
//! a failed assertion, never a path of the library.

use super::timing::*;
use super::*;
use qlinear_kernels_core::SCALAR;
use qlinear_quant_recipe::QuantizedMatrix;

/// A W8A8 entry of its own (the scalar one, through another function).
fn own_w8a8(x: &ActivationsQ8<'_>, w: &QuantizedMatrix, rows: std::ops::Range<usize>, y: &mut OutputTile<'_>) {
    (SCALAR.gemm_w8a8)(x, w, rows, y)
}
static WIDE: KernelTable = KernelTable {
    name: "wide",
    gemm_w8a8: own_w8a8,
    ..SCALAR
};
static TWIN: KernelTable = KernelTable { name: "twin", ..SCALAR };

#[test]
fn the_widest_tier_within_the_tie_is_picked_and_of_twins_the_narrowest() {
    let tables = [
        (Int8Tier::Avx512Vnni, &WIDE),
        (Int8Tier::Avx2, &TWIN),
        (Int8Tier::Scalar, &SCALAR),
    ];
    let f = KernelFamily::W8A8;
    let timed = |t: [f64; 3]| {
        [
            (Int8Tier::Avx512Vnni, t[0]),
            (Int8Tier::Avx2, t[1]),
            (Int8Tier::Scalar, t[2]),
        ]
    };
    let (batch, decode) = (PLAN_BATCH_TIE, PLAN_DECODE_TIE);
    let (vnni, scalar) = (Int8Tier::Avx512Vnni, Int8Tier::Scalar);
    for (times, family, tie, want, why) in [
        (
            [100.0, 98.0, 98.0],
            f,
            batch,
            vnni,
            "2 % slower than the best: still the pick",
        ),
        // of the two tables running one kernel (AVX2's twin is the
        // scalar entry) the narrower
        ([103.0, 98.0, 98.0], f, batch, scalar, "5 % slower: the best"),
        ([50.0, 98.0, 98.0], f, batch, vnni, "the fastest"),
        ([106.8, 98.0, 98.0], f, decode, vnni, "at decode 9 % is a tie"),
        ([109.8, 98.0, 98.0], f, decode, scalar, "at decode 12 % is not"),
        (
            [98.0, 98.0, 98.0],
            KernelFamily::W4A8,
            batch,
            scalar,
            "all three run one kernel: the narrowest",
        ),
    ] {
        assert_eq!(pick(&tables, &timed(times), family, tie), want, "{why}");
    }
    assert_eq!(pick(&[], &[], f, decode), Int8Tier::Scalar);
}

#[test]
fn probes_read_the_last_matrix_and_full_calls_take_the_others_in_turn() {
    let cursor = Cell::new(0);
    let read: Vec<usize> = (0..16).map(|i| pool_copy(&cursor, 8, i % 4 == 0)).collect();
    assert_eq!(read, [7, 0, 1, 2, 7, 3, 4, 5, 7, 6, 0, 1, 7, 2, 3, 4]);
    // the batch regime's one matrix
    assert!((0..4).all(|i| pool_copy(&cursor, 1, i % 2 == 0) == 0));
    assert_eq!(cursor.get(), 12, "the batch matrix leaves the cursor alone");
}

#[test]
fn every_family_goes_on_from_the_matrix_the_last_one_left() {
    let w = Matrices::Q8(
        (0..8)
            .filter_map(|_| q8_matrix(8, 64, Codes::owned(vec![1; 8 * 64])))
            .collect(),
    );
    let inputs = PlanInputs::new(KernelFamily::W8A8, 1, &w, false);
    let cursor = Cell::new(0);
    // one tier: its probes, a warm-up call and the rounds a clear call
    // stops after (the gap to no second tier is infinite)
    let calls = 1 + PLAN_CLEAR_AFTER;
    inputs.time(&[(Int8Tier::Scalar, &SCALAR)], &cursor);
    assert_eq!(cursor.get(), calls);
    inputs.time(&[(Int8Tier::Scalar, &SCALAR)], &cursor);
    assert_eq!(cursor.get(), 2 * calls, "a family starting at the first matrix again");
}

static NO_PANELS: KernelTable = KernelTable {
    name: "no panels",
    gemm_w4a8_grouped_panels: None,
    gemm_w4a8_panels: None,
    ..SCALAR
};

#[test]
fn the_pool_turns_into_panel_forms_and_back_without_a_copy() {
    let w = q4_matrix(16, 64, Codes::owned(vec![0x5A; 16 * 32]), Some(vec![f16::ONE; 32])).unwrap();
    let bytes = w.packed().as_ptr();
    let panels = Matrices::Q4(vec![w]).into_panels();
    let Matrices::Panels(v) = &panels else {
        panic!("a grouped-32 matrix has a panel form")
    };
    assert_eq!(v[0].panel(0).as_ptr(), bytes);
    let Matrices::Q4(v) = panels.into_natural() else {
        panic!("panel forms turn back into matrices")
    };
    assert_eq!(v[0].packed().as_ptr(), bytes);
    // per channel: a panel form too, of the same bytes and scales
    let w = q4_matrix(16, 64, Codes::owned(vec![0x5A; 16 * 32]), None).unwrap();
    let (bytes, scales) = (w.packed().as_ptr(), w.scales().clone());
    let Matrices::Panels(v) = Matrices::Q4(vec![w]).into_panels() else {
        panic!("a per-channel matrix has a panel form")
    };
    assert_eq!((v[0].panel(0).as_ptr(), v[0].to_scales()), (bytes, scales));
    // a shape with none (N not a multiple of 16): the matrices stay
    let w = q4_matrix(8, 64, Codes::owned(vec![0x5A; 8 * 32]), None).unwrap();
    assert!(matches!(Matrices::Q4(vec![w]).into_panels(), Matrices::Panels(v) if v.is_empty()));
}

#[test]
fn a_table_without_a_panel_entry_never_wins_on_lent_panel_forms() {
    let w = q4_matrix(16, 64, Codes::owned(vec![0x5A; 16 * 32]), Some(vec![f16::ONE; 32])).unwrap();
    let lent = Matrices::Q4(vec![w]).into_panels();
    let inputs = PlanInputs::new(KernelFamily::W4A8Grouped, 1, &lent, true);
    let mut y = vec![0f32; 16];
    assert_eq!(inputs.run(&NO_PANELS, &mut y, 0, 16), f64::INFINITY);
    assert!(inputs.run(&SCALAR, &mut y, 0, 16).is_finite());
}

#[test]
fn panel_copies_are_built_only_for_a_simd_tier_with_panel_tiles() {
    // the scalar table has a panel entry (its portable tile): alone, or
    // beside SIMD tiers without panel tiles, no copies
    assert!(SCALAR.gemm_w4a8_grouped_panels.is_some());
    for family in [KernelFamily::W4A8Grouped, KernelFamily::W4A8] {
        assert!(SCALAR.panels(family).is_some());
        assert!(!builds_panels(&[(Int8Tier::Scalar, &SCALAR)], family));
        assert!(!builds_panels(
            &[(Int8Tier::Neon, &NO_PANELS), (Int8Tier::Scalar, &SCALAR)],
            family
        ));
        assert!(!builds_panels(&[], family));
        // a SIMD tier with panel tiles (here the scalar entry under AVX2's name)
        assert!(builds_panels(
            &[(Int8Tier::Avx2, &TWIN), (Int8Tier::Scalar, &SCALAR)],
            family
        ));
    }
    // no other family reads a panel form
    assert!(!builds_panels(&[(Int8Tier::Avx2, &TWIN)], KernelFamily::W4A16));
}
