//! W4A8 tiles, grouped and per channel, on the panel form of a weight
//! (`qlinear_kernels_core::abi::panel`), for every aarch64 tier, generated
//! from one body over the tier's way of adding a load's products into its
//! 4 rows' lanes (`panel_tile!`): `smull` pairs added in i16 and widened
//! per group for NEON, `sdot` straight into i32 for NEON SDOT (and I8MM,
//! which inherits it).
//!
//! A 16-byte load is the same 8 columns of 4 weight rows, 4 packed bytes a
//! row, so the products of its low (high) nibbles with an activation row's
//! first (last) 4 codes of those columns, repeated in every 4-byte group, stay apart by row: a
//! group's sums need no reduction across a row's lanes. In the natural
//! layout a group of 32 lies along one row's lanes and is reduced before
//! its float step; on WebAssembly, whose tiles are alike, that cost
//! 2.7–3.8× per channel's decode time (`docs/benchmarks/history.md`). The
//! float step of §6.1 runs on 4 rows at a time, `vmulq_f32` then
//! `vaddq_f32` (never a fused `fmla`), in increasing g from +0.

use std::arch::aarch64::*;

use half::f16;

/// The 16 rows' scales of one group, `s[at..at + 16]`, as 4 × f32x4, by
/// `fcvtl` and `fcvtl2`: Advanced SIMD's widening of half to single
/// precision, which every AArch64 CPU has, exact for every finite half
/// (each is a normal single; the conversion reads halves without
/// FPCR.FZ16's flush to zero, and FPCR.AHP's alternative format agrees with
/// IEEE on every exponent but 31, which no finite scale has: Arm ARM,
/// `FPUnpackCV`). Rust's intrinsic for it, `vcvt_f32_f16`, is not stable,
/// hence `asm!`. Two instructions for 8 scales where building each single
/// from the half's bits took 13: grouped decode ran 1.39–1.44× per
/// channel's instructions on SDOT and I8MM (qemu, `tools/qemu_insn_share.py`).
#[inline]
#[target_feature(enable = "neon")]
pub(crate) fn scales16(s: &[f16], at: usize) -> [float32x4_t; 4] {
    assert!(at + 16 <= s.len());
    // SAFETY: the 16 f16 (two loads of 8 u16) at `at` lie inside `s`
    // (asserted); `vld1q_u16` needs only 2-byte alignment, which `f16` has.
    let (lo, hi) = unsafe {
        (
            vld1q_u16(s.as_ptr().add(at).cast()),
            vld1q_u16(s.as_ptr().add(at + 8).cast()),
        )
    };
    let widen = |h: uint16x8_t| -> [float32x4_t; 2] {
        let (low, high): (float32x4_t, float32x4_t);
        // the outputs are `out`, so never the input's register, which the
        // second instruction still reads
        // SAFETY: two Advanced SIMD instructions on registers only.
        unsafe {
            std::arch::asm!(
                "fcvtl {low:v}.4s, {h:v}.4h",
                "fcvtl2 {high:v}.4s, {h:v}.8h",
                h = in(vreg) h,
                low = out(vreg) low,
                high = out(vreg) high,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        [low, high]
    };
    let ([a, b], [c, d]) = (widen(lo), widen(hi));
    [a, b, c, d]
}

/// One group's sums of the `XR` activation rows at `$xp` (each row's codes
/// in their natural order) against a panel: its 4 pieces of 8
/// columns, 4 loads of 4 rows each, added by `$add` into `[[$acc; 4]; XR]`
/// from `$zero` (`[t][j]`: activation row `t`, panel rows `4j .. 4j + 4`).
/// Both panel tiles' loop, as a macro rather than a `#[target_feature]`
/// function, which may not be inlined (the AVX2 tier's was not, at 4 rows)
/// and cannot be marked `#[inline(always)]`. The caller's shape check must
/// hold the panel to `64 · (4g + 4)` bytes and each row to `8 · (4g + 4)`
/// codes.
macro_rules! panel_group {
    ($acc:ty, $zero:expr, $add:ident, $xp:expr, $panel:expr, $g:expr) => {{
        let (xp, panel, g): (&[*const i8; XR], &[u8], usize) = (&$xp, $panel, $g);
        let mask = vdupq_n_u8(0x0F);
        let mut acc: [[$acc; 4]; XR] = [[$zero; 4]; XR];
        for c in 4 * g..4 * g + 4 {
            // columns 8c .. 8c + 8 of each activation row: 4 codes for
            // the low nibbles, then 4 for the high, each 4 repeated in
            // every 4-byte group
            let codes: [(int8x16_t, int8x16_t); XR] = std::array::from_fn(|t| {
                // SAFETY: 8c + 8 codes lie in every row (the caller's
                // check), unaligned reads.
                let (e, o) = unsafe {
                    (
                        xp[t].add(8 * c).cast::<u32>().read_unaligned(),
                        xp[t].add(8 * c + 4).cast::<u32>().read_unaligned(),
                    )
                };
                (
                    vreinterpretq_s8_u32(vdupq_n_u32(e)),
                    vreinterpretq_s8_u32(vdupq_n_u32(o)),
                )
            });
            for j in 0..4 {
                // SAFETY: the 16 bytes at 64c + 16j lie in the panel (the
                // caller's check); an unaligned 16-byte load.
                let quad = unsafe { vld1q_u8(panel.as_ptr().add(64 * c + 16 * j)) };
                let lo = vreinterpretq_s8_u8(vandq_u8(quad, mask));
                let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(quad));
                for t in 0..XR {
                    acc[t][j] = $add(acc[t][j], lo, hi, codes[t].0, codes[t].1);
                }
            }
        }
        acc
    }};
}

/// Defines `tile_panel::<XR>`, W4A8 grouped over one panel for `XR`
/// activation rows (the `TilePanelQ4` contract) with the tier's target
/// features `$feature`: each load of 4 rows' 8 columns is unpacked once and
/// serves the `XR` rows. A group's sums of 4 rows are kept in a `$acc`,
/// starting at `$zero`; `$add(acc, lo, hi, x_lo, x_hi)` adds one load's
/// products (its low nibbles against the codes `x_lo`, its high against
/// `x_hi`) and `$rows(acc)` gives the 4 rows' exact i32 sums. Writes
/// `out[i · 16 + q]`.
macro_rules! panel_tile {
    ($feature:literal, $acc:ty, $zero:expr, $add:ident, $rows:ident) => {
        /// W4A8 grouped over one panel for `XR` activation rows (see
        /// `crate::panels::panel_tile!`).
        #[inline]
        #[target_feature(enable = $feature)]
        pub(crate) fn tile_panel<const XR: usize>(
            x: &[&[i8]],
            sums: &[&[i32]],
            panel: &[u8],
            s: &[half::f16],
            out: &mut [f32],
        ) {
            use qlinear_kernels_core::abi::panel::{check_tile, PANEL_ROWS};
            let groups = check_tile(XR, x, sums, panel, s, out);
            // The activations and the panel are read through pointers, with
            // no bounds check at each load: `check_tile` holds each
            // activation row to `32 · groups` codes and the panel to
            // `16 · 32 · groups / 2` bytes.
            let xp: [*const i8; XR] = std::array::from_fn(|t| x[t].as_ptr());
            let mut total = [[vdupq_n_f32(0.0); 4]; XR];
            for g in 0..groups {
                // `check_tile` holds each row to 32 · groups codes and the
                // panel to 16 · 32 · groups / 2 bytes, and g < groups
                let acc = panel_group!($acc, $zero, $add, xp, panel, g);
                let scale = $crate::panels::scales16(s, PANEL_ROWS * g);
                for t in 0..XR {
                    let correction = vdupq_n_s32(sums[t][g].wrapping_mul(8));
                    for j in 0..4 {
                        let exact = vsubq_s32($rows(acc[t][j]), correction);
                        total[t][j] = vaddq_f32(total[t][j], vmulq_f32(vcvtq_f32_s32(exact), scale[j]));
                    }
                }
            }
            for (t, rows) in total.iter().enumerate() {
                for (j, &four) in rows.iter().enumerate() {
                    let at = PANEL_ROWS * t + 4 * j;
                    assert!(at + 4 <= out.len());
                    // SAFETY: the 4 f32 at `at` lie inside `out` (asserted).
                    unsafe { vst1q_f32(out.as_mut_ptr().add(at), four) };
                }
            }
        }

        /// W4A8 per channel over one panel for `XR` activation rows (the
        /// `TilePanelQ4PerChannel` contract): `tile_panel`'s loads and
        /// group sums, each group's 4 rows' exact sums added into i32
        /// lanes, the row's `8·Σx` subtracted and one conversion at the
        /// end. Writes `out[i · 16 + q] = acc as f32`.
        #[inline]
        #[target_feature(enable = $feature)]
        pub(crate) fn tile_panel_per_channel<const XR: usize>(
            x: &[&[i8]],
            sums: &[&[i32]],
            panel: &[u8],
            out: &mut [f32],
        ) {
            use qlinear_kernels_core::abi::panel::{check_tile_per_channel, PANEL_ROWS};
            let groups = check_tile_per_channel(XR, x, sums, panel, out);
            // pointer loads as in `tile_panel` (`check_tile_per_channel`
            // holds each row to `32 · groups` codes and the panel to
            // `16 · 32 · groups / 2` bytes)
            let xp: [*const i8; XR] = std::array::from_fn(|t| x[t].as_ptr());
            let mut exact = [[vdupq_n_s32(0); 4]; XR];
            for g in 0..groups {
                // `check_tile_per_channel` holds each row to 32 · groups
                // codes and the panel to 16 · 32 · groups / 2 bytes, and
                // g < groups
                let acc = panel_group!($acc, $zero, $add, xp, panel, g);
                for t in 0..XR {
                    for j in 0..4 {
                        exact[t][j] = vaddq_s32(exact[t][j], $rows(acc[t][j]));
                    }
                }
            }
            for (t, rows) in exact.iter().enumerate() {
                let correction = vdupq_n_s32(sums[t][0].wrapping_mul(8));
                for (j, &four) in rows.iter().enumerate() {
                    let at = PANEL_ROWS * t + 4 * j;
                    assert!(at + 4 <= out.len());
                    let four = vcvtq_f32_s32(vsubq_s32(four, correction));
                    // SAFETY: the 4 f32 at `at` lie inside `out` (asserted).
                    unsafe { vst1q_f32(out.as_mut_ptr().add(at), four) };
                }
            }
        }
    };
}

/// A tier's `PANELS` (its `entry::panel_16x4` and `entry::panel_16x1`, the
/// safe entries of its `tile_panel::<4>` and `tile_panel::<1>`) and its
/// `gemm_w4a8_grouped_panels`, the frame's sweep over them; likewise
/// `PANELS_PER_CHANNEL` (`entry::panel_pc_16x4`, `entry::panel_pc_16x1`) and
/// `gemm_w4a8_panels`.
macro_rules! panel_family {
    () => {
        /// W4A8 grouped's panel tiles (`panels`): 4 activation rows (each
        /// unpacked load serves 4), then 1.
        const PANELS: qlinear_kernels_core::abi::panel::PanelFamily = qlinear_kernels_core::abi::panel::PanelFamily {
            tiles: &[(4, entry::panel_16x4), (1, entry::panel_16x1)],
            pairs: None,
        };

        qlinear_kernels_core::panel_entry!(
            /// The tier's panel entry (the frame's sweep over `PANELS`).
            fn gemm_w4a8_grouped_panels = PANELS
        );

        /// W4A8 per channel's panel tiles: 4 activation rows, then 1.
        const PANELS_PER_CHANNEL: qlinear_kernels_core::abi::panel::PanelFamily<
            qlinear_kernels_core::abi::panel::TilePanelQ4PerChannel,
        > = qlinear_kernels_core::abi::panel::PanelFamily {
            tiles: &[(4, entry::panel_pc_16x4), (1, entry::panel_pc_16x1)],
            pairs: None,
        };

        qlinear_kernels_core::panel_entry!(
            /// The tier's per-channel panel entry.
            per_channel fn gemm_w4a8_panels = PANELS_PER_CHANNEL
        );
    };
}

/// Test code of the tiers' mutants: `mod $module` with `TABLE`, the scalar
/// tier with the panel tiles `$four` and `$one` (4 and 1 activation rows,
/// safe `TilePanelQ4`s) and the per-channel ones `$pc_four` and `$pc_one`
/// (safe `TilePanelQ4PerChannel`s).
#[cfg(test)]
macro_rules! panel_tiles {
    ($module:ident, $four:path, $one:path, $pc_four:path, $pc_one:path) => {
        mod $module {
            use qlinear_kernels_core::abi::panel::{PanelFamily, TilePanelQ4, TilePanelQ4PerChannel};
            use qlinear_kernels_core::{KernelTable, SCALAR};
            const FAMILY: PanelFamily = PanelFamily {
                tiles: &[(4, $four as TilePanelQ4), (1, $one as TilePanelQ4)],
                pairs: None,
            };
            const PER_CHANNEL: PanelFamily<TilePanelQ4PerChannel> = PanelFamily {
                tiles: &[
                    (4, $pc_four as TilePanelQ4PerChannel),
                    (1, $pc_one as TilePanelQ4PerChannel),
                ],
                pairs: None,
            };
            qlinear_kernels_core::panel_entry!(fn entry = FAMILY);
            qlinear_kernels_core::panel_entry!(per_channel fn per_channel = PER_CHANNEL);
            pub(crate) static TABLE: KernelTable = KernelTable {
                gemm_w4a8_grouped_panels: Some(entry),
                gemm_w4a8_panels: Some(per_channel),
                ..SCALAR
            };
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every finite f16, both signs, subnormals and zeros included, in each
    /// of the 16 places of a group's scales: the bits of `half`'s `to_f32`.
    #[test]
    fn scales16_converts_every_finite_half_exactly() {
        let finite: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).filter(|h| h.is_finite()).collect();
        for (n, chunk) in finite.chunks(16).enumerate() {
            // each chunk in another rotation, so that every half meets
            // every place
            let mut s = chunk.to_vec();
            s.resize(16, f16::ZERO);
            s.rotate_left(n % 16);
            // SAFETY: NEON is part of every aarch64 target this crate builds
            // for (the test binary runs only there).
            let got = unsafe { scales16(&s, 0) };
            let mut lanes = [0f32; 16];
            for (q, v) in got.iter().enumerate() {
                // SAFETY: a 16-byte store into 4 of a local array's f32s.
                unsafe { vst1q_f32(lanes.as_mut_ptr().add(4 * q), *v) };
            }
            for (h, f) in s.iter().zip(lanes) {
                assert_eq!(f.to_bits(), h.to_f32().to_bits(), "f16 bits {:#06x}", h.to_bits());
            }
        }
    }
}
