//! W4A8 tiles, grouped and per channel, on the panel form of a weight
//! (`qlinear_kernels_core::abi::panel`), for both WebAssembly tiers: one
//! 16-byte load is the same 8 columns of 4 weight rows, 4 packed bytes a
//! row, so the products of its low (high) nibbles with an activation row's
//! first (last) 4 codes of those columns, broadcast, stay apart by row and
//! add up to each row's sum of the group with no reduction across a row's
//! lanes. In the natural layout the 32 columns of a group lie along one
//! row's lanes and must be reduced per group before its float step, which
//! made grouped decode take 2.7–3.8× per channel's time under Node.js (the Zen 4,
//! `docs/benchmarks/history.md`). The float step of §6.1 then runs on 4
//! rows at a time: `f32x4_mul`, then `f32x4_add`, in increasing g from +0,
//! never a relaxed fused multiply-add, on scales taken 2¹¹² times smaller
//! and undone once at the end ([`tile_panel`]; docs/NUMERICS.md §8).

use std::arch::wasm32::*;

use half::f16;
use qlinear_kernels_core::abi::panel::{
    check_tile, check_tile_per_channel, PanelFamily, TilePanelQ4, TilePanelQ4PerChannel, PANEL_ROWS,
};

use super::{split_nibbles, ExtMul};

/// How a tier multiplies the nibbles of 4 rows' 4 packed bytes (one
/// 16-byte panel load) by 4 activation codes broadcast to every row.
pub(crate) trait PanelDot {
    /// Two i16x8 of exact products for `lo` (the low nibbles) against
    /// `x_lo` and `hi` against `x_hi` (each the same 4 codes in every 4-byte
    /// group), such that [`PanelDot::rows`] of their sums over a group's 4
    /// loads gives the 4 rows' sums. A lane holds at most 4 products of
    /// |15 · 127| per load (SIMD128's 2, relaxed SIMD's 4), so a group's 4
    /// loads add in i16 exactly (at most 16 · 1905 = 30 480 a lane).
    fn products(lo: v128, hi: v128, x_lo: v128, x_hi: v128) -> (v128, v128);
    /// The 4 rows' i32 sums from a group's two i16x8 accumulators.
    fn rows(a: v128, b: v128) -> v128;
}

/// SIMD128's widening multiplies: the low 8 bytes (rows 0 and 1) in `a`,
/// the high 8 (rows 2 and 3) in `b`, one product a lane.
impl PanelDot for ExtMul {
    #[inline]
    fn products(lo: v128, hi: v128, x_lo: v128, x_hi: v128) -> (v128, v128) {
        (
            i16x8_add(i16x8_extmul_low_i8x16(lo, x_lo), i16x8_extmul_low_i8x16(hi, x_hi)),
            i16x8_add(i16x8_extmul_high_i8x16(lo, x_lo), i16x8_extmul_high_i8x16(hi, x_hi)),
        )
    }

    #[inline]
    fn rows(a: v128, b: v128) -> v128 {
        // each row's 4 lanes widened in pairs: [r0, r0, r1, r1] and
        // [r2, r2, r3, r3], then each pair added
        let (a, b) = (i32x4_extadd_pairwise_i16x8(a), i32x4_extadd_pairwise_i16x8(b));
        i32x4_add(i32x4_shuffle::<0, 2, 4, 6>(a, b), i32x4_shuffle::<1, 3, 5, 7>(a, b))
    }
}

/// 2⁻¹¹² times 4 f16 scales, each sign-extended in its i32 lane, as f32,
/// exactly: a shift left by 13 moves the magnitude's bits to an f32's
/// exponent and mantissa, the exponent 112 short (an f16 subnormal becomes
/// an f32 subnormal), with copies of the sign from bit 28 up, and clearing
/// bits 28 to 30 leaves the sign alone in bit 31. The tile multiplies by
/// 2¹¹² once, at its end ([`UNSCALE`]), not once per group. Scales are
/// finite (the matrix refuses others), so no infinity or NaN comes here.
#[inline]
fn f16x4_to_f32_scaled(h: v128) -> v128 {
    v128_and(i32x4_shl(h, 13), i32x4_splat(0x8FFF_E000_u32 as i32))
}

/// 2¹¹², what [`f16x4_to_f32_scaled`] leaves out.
const UNSCALE: f32 = f32::from_bits((127 + 112) << 23);

/// 2⁻¹¹² times the 16 rows' scales of one group, `s[at..at + 16]`, as 4 ×
/// f32x4 ([`f16x4_to_f32_scaled`]): each 4 halves sign-extended as they
/// load (`v128.load16x4_s`, one `vpmovsxwd` on x86), which leaves no lanes
/// to interleave and needs no zero register.
#[inline]
fn scales16(s: &[f16], at: usize) -> [v128; 4] {
    assert!(at + 16 <= s.len());
    // SAFETY: the 16 f16 (32 bytes) at `at` lie inside `s` (asserted);
    // i32x4_load_extend_i16x4 reads 8 bytes with no alignment requirement.
    std::array::from_fn(|j| f16x4_to_f32_scaled(unsafe { i32x4_load_extend_i16x4(s.as_ptr().add(at + 4 * j).cast()) }))
}

/// One group's i16 sums of `XR` activation rows (`xp`, each row's codes in
/// their natural order) against a panel's 4 rows of each 16-byte
/// load, as `D` adds them: the group's 4 pieces of 8 columns, 4 loads each
/// (`[t][j]`: activation row `t`, panel rows `4j .. 4j + 4`). Both panel
/// tiles' loop.
///
/// # Safety
/// The panel holds `64 · (4g + 4)` bytes and each row of `xp` `8 · (4g +
/// 4)` codes (the tiles' `check_tile` or `check_tile_per_channel` proves it
/// for every `g < groups`).
#[inline(always)]
unsafe fn group_sums<const XR: usize, D: PanelDot>(
    xp: &[*const i8; XR],
    panel: &[u8],
    g: usize,
) -> [[(v128, v128); 4]; XR] {
    let mut acc = [[(i16x8_splat(0), i16x8_splat(0)); 4]; XR];
    // Each 4 codes are broadcast from memory (`v128.load32_splat`, one
    // `vbroadcastss` under V8 on x86). Relaxed SIMD's grouped decode once
    // took its row's 32 codes in two whole loads and broadcast each 4 by a
    // shuffle, 5–8 % faster than these loads then; since its scales load as
    // `v128.load16x4_s` (`scales16`) it is 2–3 % slower than these loads
    // (Node.js 20, Intel Xeon, family 6 model 167).
    for p in 0..4 {
        let c = 4 * g + p;
        // columns 8c .. 8c + 8 of each activation row: 4 codes for the
        // low nibbles, then 4 for the high, each 4 repeated in every
        // 4-byte group
        let codes: [(v128, v128); XR] = std::array::from_fn(|t| {
            // SAFETY: 8c + 8 codes lie in every row (the caller's promise);
            // v128_load32_splat reads 4 bytes with no alignment requirement.
            unsafe {
                (
                    v128_load32_splat(xp[t].add(8 * c).cast()),
                    v128_load32_splat(xp[t].add(8 * c + 4).cast()),
                )
            }
        });
        for j in 0..4 {
            // SAFETY: 64c + 16j + 16 bytes lie in the panel (the caller's
            // promise); v128_load has no alignment requirement.
            let quad = unsafe { v128_load(panel.as_ptr().add(64 * c + 16 * j).cast()) };
            let (lo, hi) = split_nibbles(quad);
            for t in 0..XR {
                let (a, b) = D::products(lo, hi, codes[t].0, codes[t].1);
                acc[t][j] = (i16x8_add(acc[t][j].0, a), i16x8_add(acc[t][j].1, b));
            }
        }
    }
    acc
}

/// W4A8 grouped over one panel for `XR` activation rows (the
/// `TilePanelQ4` contract) with the products of `D`: each load of 4 rows'
/// 8 columns is unpacked once and serves the `XR` rows. Writes
/// `out[i · 16 + q]`.
///
/// The chain runs 2¹¹² times smaller than §6.1's, `sum' += (acc_g as f32)
/// · (s_g · 2⁻¹¹²)`, and each output is `sum' · 2¹¹²`: WebAssembly has no
/// f16 conversion, and a scale's bits become `s_g · 2⁻¹¹²` with a shift and
/// a mask where `s_g` takes one product more a group (the grouped decode
/// 2–3 % faster under Node.js). The bits are §6.1's (docs/NUMERICS.md §8,
/// "WebAssembly's scaled group chain"): every value of the unscaled chain
/// is a multiple of 2⁻³⁷, so the scaled one is exact wherever it is
/// subnormal and rounds as the unscaled one elsewhere.
pub(crate) fn tile_panel<const XR: usize, D: PanelDot>(
    x: &[&[i8]],
    sums: &[&[i32]],
    panel: &[u8],
    s: &[f16],
    out: &mut [f32],
) {
    let groups = check_tile(XR, x, sums, panel, s, out);
    // The activations and the panel are read through pointers, with no
    // bounds check at each load (`check_tile` holds each activation row to
    // `32 · groups` codes and the panel to `16 · 32 · groups / 2` bytes):
    // checked loads and a 4-byte gather per broadcast ran the tile 1.5–2×
    // slower under Node.js.
    let xp: [*const i8; XR] = std::array::from_fn(|t| x[t].as_ptr());
    let mut total = [[f32x4_splat(0.0); 4]; XR];
    for g in 0..groups {
        // SAFETY: g < groups, and `check_tile` holds the panel to
        // 16 · 32 · groups / 2 bytes and each row to 32 · groups codes.
        let acc = unsafe { group_sums::<XR, D>(&xp, panel, g) };
        let scale = scales16(s, PANEL_ROWS * g);
        for t in 0..XR {
            let correction = i32x4_splat(sums[t][g].wrapping_mul(8));
            for j in 0..4 {
                let exact = i32x4_sub(D::rows(acc[t][j].0, acc[t][j].1), correction);
                total[t][j] = f32x4_add(total[t][j], f32x4_mul(f32x4_convert_i32x4(exact), scale[j]));
            }
        }
    }
    for (t, rows) in total.iter().enumerate() {
        for (j, &four) in rows.iter().enumerate() {
            let at = PANEL_ROWS * t + 4 * j;
            assert!(at + 4 <= out.len());
            let four = f32x4_mul(four, f32x4_splat(UNSCALE));
            // SAFETY: the 4 f32 at `at` lie inside `out` (asserted);
            // v128_store has no alignment requirement.
            unsafe { v128_store(out.as_mut_ptr().add(at).cast(), four) };
        }
    }
}

/// W4A8 per channel over one panel for `XR` activation rows (the
/// `TilePanelQ4PerChannel` contract) with the products of `D`: the grouped
/// tile's loads and i16 sums per group, each group's 4 rows' exact sums
/// added into i32 lanes, the row's `8·Σx` subtracted and one conversion at
/// the end. Writes `out[i · 16 + q] = acc as f32`.
pub(crate) fn tile_panel_per_channel<const XR: usize, D: PanelDot>(
    x: &[&[i8]],
    sums: &[&[i32]],
    panel: &[u8],
    out: &mut [f32],
) {
    let groups = check_tile_per_channel(XR, x, sums, panel, out);
    // pointer loads as in the grouped tile (`check_tile_per_channel` holds
    // each row to `32 · groups` codes and the panel to `16 · 32 · groups /
    // 2` bytes)
    let xp: [*const i8; XR] = std::array::from_fn(|t| x[t].as_ptr());
    let mut exact = [[i32x4_splat(0); 4]; XR];
    for g in 0..groups {
        // SAFETY: g < groups, and `check_tile_per_channel` holds the panel
        // to 16 · 32 · groups / 2 bytes and each row to 32 · groups codes.
        let acc = unsafe { group_sums::<XR, D>(&xp, panel, g) };
        for t in 0..XR {
            for j in 0..4 {
                exact[t][j] = i32x4_add(exact[t][j], D::rows(acc[t][j].0, acc[t][j].1));
            }
        }
    }
    for (t, rows) in exact.iter().enumerate() {
        let correction = i32x4_splat(sums[t][0].wrapping_mul(8));
        for (j, &four) in rows.iter().enumerate() {
            let at = PANEL_ROWS * t + 4 * j;
            assert!(at + 4 <= out.len());
            let four = f32x4_convert_i32x4(i32x4_sub(four, correction));
            // SAFETY: the 4 f32 at `at` lie inside `out` (asserted);
            // v128_store has no alignment requirement.
            unsafe { v128_store(out.as_mut_ptr().add(at).cast(), four) };
        }
    }
}

/// The panel tiles of a tier whose products are `D`'s: 4 activation rows
/// (each unpacked load serves 4), then 1; grouped and per channel.
pub(crate) struct Panels<D>(std::marker::PhantomData<D>);

impl<D: PanelDot> Panels<D> {
    pub(crate) const FAMILY: PanelFamily = PanelFamily {
        tiles: &[
            (4, tile_panel::<4, D> as TilePanelQ4),
            (1, tile_panel::<1, D> as TilePanelQ4),
        ],
        pairs: None,
    };
    pub(crate) const PER_CHANNEL: PanelFamily<TilePanelQ4PerChannel> = PanelFamily {
        tiles: &[
            (4, tile_panel_per_channel::<4, D> as TilePanelQ4PerChannel),
            (1, tile_panel_per_channel::<1, D> as TilePanelQ4PerChannel),
        ],
        pairs: None,
    };
}

qlinear_kernels_core::panel_entry!(
    /// The SIMD128 tier's panel entry (the frame's sweep over its panel tiles).
    pub(crate) fn gemm_w4a8_grouped_panels = Panels::<ExtMul>::FAMILY
);

qlinear_kernels_core::panel_entry!(
    /// The SIMD128 tier's per-channel panel entry.
    per_channel pub(crate) fn gemm_w4a8_panels = Panels::<ExtMul>::PER_CHANNEL
);

/// Test code of the tiers' mutants: `mod $module` with `TABLE`, the scalar
/// tier with the panel tiles, grouped and per channel (4 and 1 activation
/// rows), on the products of `$dot`, a [`PanelDot`] done right or wrong.
#[cfg(test)]
macro_rules! panel_tiles_with {
    ($module:ident, $dot:ty) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            qlinear_kernels_core::panel_entry!(
                fn entry = crate::simd128::panels::Panels::<$dot>::FAMILY
            );
            qlinear_kernels_core::panel_entry!(
                per_channel fn per_channel = crate::simd128::panels::Panels::<$dot>::PER_CHANNEL
            );
            pub(crate) static TABLE: qlinear_kernels_core::KernelTable = qlinear_kernels_core::KernelTable {
                gemm_w4a8_grouped_panels: Some(entry),
                gemm_w4a8_panels: Some(per_channel),
                ..qlinear_kernels_core::SCALAR
            };
        }
    };
}
#[cfg(test)]
pub(crate) use panel_tiles_with;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every finite f16, both signs, subnormals and zeros included, in each
    /// of the 16 places of a group's scales: the bits of `half`'s `to_f32`
    /// times 2⁻¹¹².
    /// The grouped tile's chain against §6.1's, written out here from the
    /// natural matrix, bit for bit: scales that are subnormal, the least
    /// normal, zero of either sign, the largest, and random, with groups
    /// that cancel so that the running sum passes through zero and the
    /// subnormal range of the scaled chain (below 2⁻¹⁴ unscaled).
    #[test]
    fn the_scaled_group_chain_gives_the_bits_of_the_spec() {
        use qlinear_kernels_core::abi::panel::PanelsQ4;
        use qlinear_quant_recipe::{Q4Scales, QuantizedMatrixQ4};
        let (n, groups) = (16, 9);
        let k = 32 * groups;
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let special = [
            0x0001, 0x0003, 0x03ff, 0x0400, 0x0401, 0x0000, 0x8000, 0x7bff, 0xfbff, 0x8001, 0x3c00,
        ];
        for trial in 0..200 {
            let mut packed: Vec<u8> = (0..n * k / 2).map(|_| next() as u8).collect();
            let mut scales: Vec<f16> = (0..n * groups)
                .map(|_| match next() % 3 {
                    0 => f16::from_bits(special[next() as usize % special.len()]),
                    1 => f16::from_bits((next() as u16) & 0x83ff),
                    _ => f16::from_f32((next() % 2001) as f32 / 1000.0 - 1.0),
                })
                .collect();
            // groups 2g and 2g + 1 of row r cancel: the same nibbles
            // (below), opposite scales
            for r in 0..n {
                for g in (0..groups - 1).step_by(2) {
                    scales[r * groups + g + 1] = -scales[r * groups + g];
                }
            }
            for r in 0..n {
                for g in (0..groups - 1).step_by(2) {
                    let at = r * k / 2 + 16 * g;
                    let (a, b) = packed.split_at_mut(at + 16);
                    b[..16].copy_from_slice(&a[at..at + 16]);
                }
            }
            let w = QuantizedMatrixQ4::from_parts_biased(
                n,
                k,
                packed.clone(),
                Q4Scales::Grouped {
                    group: 32,
                    scales: scales.clone(),
                },
            )
            .expect("a valid matrix");
            let panels = PanelsQ4::new(&w).expect("one whole panel");
            let panel_scales = panels.grouped_scales();
            // codes random, all ±127 or all in −1..=1, by trial; the same in
            // each pair of groups, so that the pair cancels
            let mut x: Vec<i8> = (0..k)
                .map(|_| match trial % 3 {
                    0 => ((next() % 255) as i32 - 127) as i8,
                    1 => [127, -127][(next() % 2) as usize],
                    _ => ((next() % 3) as i32 - 1) as i8,
                })
                .collect();
            for g in (0..groups - 1).step_by(2) {
                let (a, b) = x.split_at_mut(32 * g + 32);
                b[..32].copy_from_slice(&a[32 * g..32 * g + 32]);
            }
            let sums: Vec<i32> = x.chunks(32).map(|c| c.iter().map(|&v| i32::from(v)).sum()).collect();
            let spec: Vec<f32> = (0..n)
                .map(|r| {
                    let mut sum = 0f32;
                    for g in 0..groups {
                        let exact: i32 = (32 * g..32 * g + 32)
                            .map(|c| {
                                let byte = packed[r * k / 2 + c / 2];
                                let nibble = if c % 2 == 0 { byte & 0x0F } else { byte >> 4 };
                                i32::from(x[c]) * (i32::from(nibble) - 8)
                            })
                            .sum();
                        sum += exact as f32 * f32::from(scales[r * groups + g]);
                    }
                    sum
                })
                .collect();
            let mut one = [0f32; 16];
            tile_panel::<1, ExtMul>(&[&x], &[&sums], panels.codes(), panel_scales, &mut one);
            let rows = [&x[..], &x[..], &x[..], &x[..]];
            let row_sums = [&sums[..], &sums[..], &sums[..], &sums[..]];
            let mut four = [0f32; 64];
            tile_panel::<4, ExtMul>(&rows, &row_sums, panels.codes(), panel_scales, &mut four);
            #[allow(unused_mut)]
            let mut got = vec![one.to_vec(), four[..16].to_vec(), four[48..].to_vec()];
            #[cfg(target_feature = "relaxed-simd")]
            {
                use crate::relaxed::RelaxedDot;
                tile_panel::<1, RelaxedDot>(&[&x], &[&sums], panels.codes(), panel_scales, &mut one);
                tile_panel::<4, RelaxedDot>(&rows, &row_sums, panels.codes(), panel_scales, &mut four);
                got.extend([one.to_vec(), four[..16].to_vec(), four[48..].to_vec()]);
            }
            for out in got {
                for (q, (a, b)) in out.iter().zip(&spec).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "trial {trial}, row {q}: {a:e} against {b:e}");
                }
            }
        }
    }

    #[test]
    fn scales16_converts_every_finite_half_exactly() {
        let finite: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).filter(|h| h.is_finite()).collect();
        for chunk in finite.chunks(16) {
            let mut s = chunk.to_vec();
            s.resize(16, f16::ZERO);
            let got = scales16(&s, 0);
            let mut lanes = [0f32; 16];
            for (q, v) in got.iter().enumerate() {
                // SAFETY: a 16-byte store into 4 of a local array's f32s.
                unsafe { v128_store(lanes.as_mut_ptr().add(4 * q).cast(), *v) };
            }
            for (h, f) in s.iter().zip(lanes) {
                // 2⁻¹¹² times the value, exactly: the f64 product is exact
                // and fits an f32 (a subnormal one for the smallest halves)
                let scaled = (f64::from(h.to_f32()) * 2f64.powi(-112)) as f32;
                assert_eq!(f.to_bits(), scaled.to_bits(), "f16 bits {:#06x}", h.to_bits());
            }
        }
    }
}
