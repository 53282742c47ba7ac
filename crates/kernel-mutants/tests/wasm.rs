//! Deliberately wrong SIMD128 micro-kernels must fail the selftest, and the
//! real table must pass: a W8A8 4 × 4 batch tile that accumulates in
//! saturating i16 lanes across K (`i16x8_add_sat`, a tempting shortcut that
//! clips as soon as three ±127 · ±127 products meet in a lane), registered
//! on the frame with its declared tile so the proof's rows reach it.
#![cfg(all(target_arch = "wasm32", target_feature = "simd128"))]

use std::arch::wasm32::*;

use qlinear_dispatch::{default_census, prove_kernel_table, KernelFamily};
use qlinear_kernels_scalar::frame::{Family, Layout, Shapes, Tile, TileI8I8};
use qlinear_kernels_scalar::{dot_i8_i8, GemmShapes, KernelTable, SCALAR};

fn portable(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    for (i, xr) in x.iter().enumerate() {
        for (q, wr) in w.iter().enumerate() {
            acc[i * w.len() + q] = dot_i8_i8(xr, wr);
        }
    }
}

/// Products summed in a saturating i16 accumulator across K, widened once
/// at the end.
fn saturating_tile(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]) {
    let k = x[0].len();
    for (i, xr) in x.iter().enumerate() {
        for (q, wr) in w.iter().enumerate() {
            let mut s = i16x8_splat(0);
            let mut c = 0;
            while c + 16 <= k {
                // SAFETY: c + 16 <= k = both rows' lengths.
                let (xv, wv) = unsafe {
                    (
                        v128_load(xr.as_ptr().add(c).cast()),
                        v128_load(wr.as_ptr().add(c).cast()),
                    )
                };
                s = i16x8_add_sat(s, i16x8_extmul_low_i8x16(xv, wv));
                s = i16x8_add_sat(s, i16x8_extmul_high_i8x16(xv, wv));
                c += 16;
            }
            let a = i32x4_extadd_pairwise_i16x8(s);
            acc[i * w.len() + q] = i32x4_extract_lane::<0>(a)
                + i32x4_extract_lane::<1>(a)
                + i32x4_extract_lane::<2>(a)
                + i32x4_extract_lane::<3>(a);
        }
    }
}

const TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 4), Tile::new(1, 4)];
const W8A8: Family<TileI8I8> = Family {
    shapes: Shapes { tiles: TILES, chunk: 0 },
    kernels: &{
        const K: [TileI8I8; 3] = [portable, saturating_tile, portable];
        K
    },
    block: 16,
    layout: Layout::Natural,
    scales_to_f32: qlinear_kernels_scalar::frame::scales_to_f32,
};
qlinear_kernels_scalar::frame_gemms! { w8a8: W8A8 }
static MUTANT: KernelTable = KernelTable {
    name: "simd128-mutant",
    gemm_w8a8,
    shapes: GemmShapes {
        w8a8: W8A8.shapes,
        ..GemmShapes::SINGLE
    },
    ..SCALAR
};

#[test]
fn a_saturating_simd128_batch_tile_fails_the_proof() {
    let failing: Vec<KernelFamily> = prove_kernel_table(&MUTANT, &default_census())
        .iter()
        .filter(|p| p.mismatch.is_some())
        .map(|p| p.family)
        .collect();
    assert_eq!(failing, vec![KernelFamily::W8A8]);
}

#[test]
fn the_real_simd128_table_passes() {
    let table = qlinear_kernels_wasm::simd128_table().expect("built with +simd128");
    let proofs = prove_kernel_table(table, &default_census());
    assert!(proofs.iter().all(|p| p.mismatch.is_none()), "{proofs:?}");
}
