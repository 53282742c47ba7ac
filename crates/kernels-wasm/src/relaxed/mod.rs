//! The relaxed-SIMD tier: the SIMD128 tier with W4A8's nibble products on
//! `i16x8.relaxed_dot_i8x16_i7x16_s`, one instruction where SIMD128 spends
//! two widening multiplies and an add (V8 on x86 lowers it to `pmaddubsw`).
//!
//! Relaxed instructions may differ between engines, and this one is
//! deterministic only on part of its domain (`docs/NUMERICS.md`, "Relaxed
//! SIMD"): the second operand's bytes may be read as signed or unsigned,
//! and a pair sum may saturate or wrap in i16. Here the second operand is
//! always a biased nibble (0..15, top bit clear: the same value either way)
//! and the first an activation code (|x| <= 127), so a pair sum is at most
//! 2·15·127 = 3810: no engine can saturate, wrap or reinterpret anything,
//! and every lane is the exact sum of its two products. Which two products
//! share a lane does differ from [`ExtMul`](crate::simd128::ExtMul)'s, and
//! the tiles add all lanes, so the result is the same exact integer. The
//! selftest proves it on the running engine like every tier.
//!
//! The build needs `-C target-feature=+simd128,+relaxed-simd` and an
//! engine that has relaxed SIMD (Chromium 114 on; Node.js 20 with
//! `--experimental-wasm-relaxed-simd`, which `tools/wasi-runner.mjs` sets);
//! an engine without it refuses the whole module, which is why this is a
//! second build and not a run-time choice.
#![cfg(all(target_arch = "wasm32", target_feature = "simd128", target_feature = "relaxed-simd"))]

use std::arch::wasm32::*;

use qlinear_kernels_core::abi::tile::{Family, TileGroupedQ4, TileI8Q4};
use qlinear_kernels_core::KernelTable;

use crate::simd128::panels::{PanelDot, Panels};
use crate::simd128::{dot_i8_q4_with, Int4, NibbleDot};

// the plausible mistakes of this tier, which the proof must fail
#[cfg(test)]
mod mutants;

/// `i16x8.relaxed_dot_i8x16_i7x16_s` with the codes as the signed operand
/// and the nibbles as the 7-bit one: lane j holds the products at bytes 2j
/// and 2j + 1, exactly (see the module's argument).
pub(crate) struct RelaxedDot;

impl NibbleDot for RelaxedDot {
    #[inline]
    fn pairs(nibbles: v128, x: v128) -> v128 {
        i16x8_relaxed_dot_i8x16_i7x16(x, nibbles)
    }
}

/// The panel tiles' products (`crate::simd128::panels`): the codes as the
/// signed operand and the nibbles as the 7-bit one, as above; lane j holds
/// bytes 2j and 2j + 1, both of row j / 2, so `a` alone carries every
/// product: a lane adds two such pairs a load (low and high nibbles), at
/// most 4 · 1905 = 7620, and 30 480 over a group's 4 loads, so no engine can
/// saturate or wrap; one pairwise widening leaves each row's sum in its
/// own i32 lane.
impl PanelDot for RelaxedDot {
    #[inline]
    fn products(lo: v128, hi: v128, x_lo: v128, x_hi: v128) -> (v128, v128) {
        (
            i16x8_add(
                i16x8_relaxed_dot_i8x16_i7x16(x_lo, lo),
                i16x8_relaxed_dot_i8x16_i7x16(x_hi, hi),
            ),
            i16x8_splat(0),
        )
    }

    #[inline]
    fn rows(a: v128, _: v128) -> v128 {
        i32x4_extadd_pairwise_i16x8(a)
    }
}

qlinear_kernels_core::panel_entry!(
    /// The relaxed-SIMD tier's panel entry (the frame's sweep over its
    /// panel tiles).
    fn gemm_w4a8_grouped_panels = Panels::<RelaxedDot>::FAMILY
);

qlinear_kernels_core::panel_entry!(
    /// The relaxed-SIMD tier's per-channel panel entry.
    per_channel fn gemm_w4a8_panels = Panels::<RelaxedDot>::PER_CHANNEL
);

const W4A8: Family<TileI8Q4> = Int4::<RelaxedDot>::W4A8;
const W4A8_GROUPED: Family<TileGroupedQ4> = Int4::<RelaxedDot>::W4A8_GROUPED;

mod gemm {
    use super::{W4A8, W4A8_GROUPED};
    qlinear_kernels_core::frame_gemms! {
        w4a8: W4A8, w4a8_grouped: W4A8_GROUPED; ..crate::simd128::TABLE.shapes
    }
}

fn dot_i8_q4(x: &[i8], p: &[u8]) -> i32 {
    dot_i8_q4_with::<RelaxedDot>(x, p)
}

pub(crate) static TABLE: KernelTable = KernelTable {
    name: "wasm-relaxed-simd",
    dot_i8_q4,
    gemm_w4a8: gemm::gemm_w4a8,
    gemm_w4a8_grouped: gemm::gemm_w4a8_grouped,
    gemm_w4a8_grouped_panels: Some(gemm_w4a8_grouped_panels),
    gemm_w4a8_panels: Some(gemm_w4a8_panels),
    shapes: gemm::SHAPES,
    ..crate::simd128::TABLE
};
