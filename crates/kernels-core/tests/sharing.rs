//! `KernelTable::same_family_code`: which tables one family's proof serves
//! (the selftest proves a family once for the tiers that hold the same code
//! for it, `docs/NUMERICS.md` §8). Hand-made tables: the scalar one, and
//! copies of it with one entry or one declared shape changed.

use std::ops::Range;

use qlinear_kernels_core::abi::tile::{Shapes, Tile};
use qlinear_kernels_core::{ActivationsQ8, KernelFamily, KernelTable, OutputTile, SCALAR};
use qlinear_quant_recipe::QuantizedMatrix;

/// The scalar W8A8 entry, through another function: the same bits, other code.
fn w8a8_elsewhere(x: &ActivationsQ8<'_>, w: &QuantizedMatrix, rows: Range<usize>, y: &mut OutputTile<'_>) {
    (SCALAR.gemm_w8a8)(x, w, rows, y)
}

/// The scalar quantizer, through another function.
fn quantize_elsewhere(x: &[f32], q: &mut [i8]) -> Option<f32> {
    (SCALAR.quantize_row_q8)(x, q)
}

/// The scalar group sums, through another function.
fn sums_elsewhere(q: &[i8], group: usize, out: &mut [i32]) {
    (SCALAR.group_sums)(q, group, out)
}

/// The families for which `table` holds the scalar table's code.
fn shared_with_scalar(table: &KernelTable) -> Vec<KernelFamily> {
    KernelFamily::ALL
        .into_iter()
        .filter(|&f| table.same_family_code(&SCALAR, f) && SCALAR.same_family_code(table, f))
        .collect()
}

/// Every family but `not`.
fn all_but(not: &[KernelFamily]) -> Vec<KernelFamily> {
    KernelFamily::ALL.into_iter().filter(|f| !not.contains(f)).collect()
}

#[test]
fn a_table_shares_every_familys_code_with_itself_and_a_copy() {
    let copy = SCALAR;
    assert_eq!(shared_with_scalar(&SCALAR), KernelFamily::ALL.to_vec());
    assert_eq!(shared_with_scalar(&copy), KernelFamily::ALL.to_vec());
}

#[test]
fn another_entry_for_a_family_is_not_its_code() {
    let t = KernelTable {
        gemm_w8a8: w8a8_elsewhere,
        ..SCALAR
    };
    assert_eq!(shared_with_scalar(&t), all_but(&[KernelFamily::W8A8]));
    // the quantizer and its group sums are one family: either differing
    let t = KernelTable {
        quantize_row_q8: quantize_elsewhere,
        ..SCALAR
    };
    assert_eq!(shared_with_scalar(&t), all_but(&[KernelFamily::QuantizeActivations]));
    let t = KernelTable {
        group_sums: sums_elsewhere,
        ..SCALAR
    };
    assert_eq!(shared_with_scalar(&t), all_but(&[KernelFamily::QuantizeActivations]));
}

#[test]
fn a_panel_entry_or_the_declared_tiles_differing_is_not_the_same_code() {
    let t = KernelTable {
        gemm_w4a8_grouped_panels: None,
        ..SCALAR
    };
    assert_eq!(shared_with_scalar(&t), all_but(&[KernelFamily::W4A8Grouped]));
    let t = KernelTable {
        gemm_w4a8_panels: None,
        ..SCALAR
    };
    assert_eq!(shared_with_scalar(&t), all_but(&[KernelFamily::W4A8]));
    // the same entries declaring other tiles would be proven on other shapes
    let mut shapes = SCALAR.shapes;
    shapes.w4a16 = Shapes {
        tiles: &[Tile::ONE, Tile { wr: 4, xr: 1 }],
        ..shapes.w4a16
    };
    let t = KernelTable { shapes, ..SCALAR };
    assert_eq!(shared_with_scalar(&t), all_but(&[KernelFamily::W4A16]));
}
