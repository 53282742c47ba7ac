//! AVX2 W4A8 grouped tiles on the panel form of a weight
//! (`qlinear_kernels_core::abi::panel`): a 256-bit load at `64c + 32h` is the
//! same 8 columns of the panel's rows `8h .. 8h + 8`, 4 packed bytes a row,
//! so `maddubs` of its low (high) nibbles against an activation row's
//! first (last) 4 codes of those columns, broadcast, leaves each weight row's
//! two pair sums in its own 32-bit lane. The pairs of a group of 32 (4
//! loads, 8 `maddubs`) add up in i16 without saturating: each is at most
//! `2 · 15 · 127 = 3810` in magnitude, 8 of them 30 480 < 32 767 (codes
//! are in [-127, 127], nibbles in [0, 15]). One `madd` with ones then gives
//! the group's exact sums `acc_g` of 8 rows, whose float step of §6.1 runs
//! with the rows in the lanes, as on AVX-512 VNNI, with no reduction across
//! lanes. Each lane's float chain is the spec's, in increasing g from +0.
//!
//! The two halves of a panel are passed over one after the other, so that
//! 4 activation rows' accumulators and totals fit the 16 registers; the
//! second pass finds the panel's lines in L1 or L2.

use std::arch::x86_64::*;

use half::f16;
use qlinear_kernels_core::abi::panel::{
    check_tile, check_tile_per_channel, PanelFamily, TilePanelQ4PerChannel, PANEL_ROWS,
};

/// Bytes ahead of the current load that the first pass prefetches (the
/// VNNI panel tile's distance: a panel is one sequential run).
const PREFETCH: usize = 4096;

/// One group's `maddubs` pair sums of the `XR` activation rows at `$xp`
/// (each row's codes in their natural order) against half `$half` of
/// a panel (rows `8h .. 8h + 8`): its 4 loads of 32 bytes at `64c + 32h`,
/// `c` in `4g .. 4g + 4`, each unpacked once and serving the `XR` rows, the
/// low nibbles against the first 4 codes broadcast and the high against
/// the last 4; the first half's loads prefetch [`PREFETCH`] bytes ahead. Both
/// panel tiles' loop, as a macro: as a `#[target_feature]` function it was
/// not inlined at 4 rows (a call a group), and M = 16 at 576 × 576 ran
/// 10–18 % slower (Intel Xeon, family 6 model 167, alternated);
/// `#[inline(always)]` is refused on such functions. The caller's shape
/// check must hold the panel to `64 · (4g + 4)` bytes and each row to
/// `8 · (4g + 4)` codes.
macro_rules! group_pairs {
    ($xp:expr, $panel:expr, $g:expr, $half:expr) => {{
        let (xp, panel, g, half): (&[*const i8; XR], &[u8], usize, usize) = (&$xp, $panel, $g, $half);
        let mask = _mm256_set1_epi8(0x0F);
        let mut pairs = [_mm256_setzero_si256(); XR];
        for c in 4 * g..4 * g + 4 {
            let at = 64 * c + 32 * half;
            // SAFETY: the 32 bytes at 64c + 32h lie in the panel (the
            // caller's check); the prefetch only hints.
            let v = unsafe {
                if half == 0 {
                    _mm_prefetch::<_MM_HINT_T0>(panel.as_ptr().wrapping_add(at + PREFETCH).cast());
                }
                _mm256_loadu_si256(panel.as_ptr().add(at).cast())
            };
            let lo = _mm256_and_si256(v, mask);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask);
            for t in 0..XR {
                // columns 8c .. 8c + 8 of row t: 4 codes for the low nibbles, 4 for the high
                // SAFETY: 8c + 8 codes lie in row t (the caller's check).
                let (e, o) = unsafe {
                    let q = xp[t].add(8 * c).cast::<i32>();
                    (q.read_unaligned(), q.add(1).read_unaligned())
                };
                let low = _mm256_maddubs_epi16(lo, _mm256_set1_epi32(e));
                let high = _mm256_maddubs_epi16(hi, _mm256_set1_epi32(o));
                pairs[t] = _mm256_add_epi16(pairs[t], _mm256_add_epi16(low, high));
            }
        }
        pairs
    }};
}

/// W4A8 grouped over one panel for `XR` activation rows (the
/// `TilePanelQ4` contract): each load of 8 rows' 8 columns is unpacked once
/// and serves the `XR` rows. Writes `out[i · 16 + q]`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn tile_w4a8_panel<const XR: usize>(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[f16], out: &mut [f32]) {
    let groups = check_tile(XR, x, sums, panel, s, out);
    // The rows are read through pointers, with no bounds check at each
    // load (`check_tile` holds each row to `32 · groups` codes and `groups`
    // sums): the per-load checks put a compare and a branch beside every
    // two `maddubs`.
    let (xp, sp): ([*const i8; XR], [*const i32; XR]) = (
        std::array::from_fn(|t| x[t].as_ptr()),
        std::array::from_fn(|t| sums[t].as_ptr()),
    );
    let ones = _mm256_set1_epi16(1);
    for half in 0..2 {
        let mut total = [_mm256_setzero_ps(); XR];
        for g in 0..groups {
            // `check_tile` holds the panel to 16 · 32 · groups / 2 bytes
            // and each row to 32 · groups codes, and g < groups
            let pairs = group_pairs!(xp, panel, g, half);
            // SAFETY: 8 f16 at 16g + 8h lie in the panel's 16 · groups scales.
            let scale = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(PANEL_ROWS * g + 8 * half).cast())) };
            for t in 0..XR {
                // SAFETY: g < groups = sums[t].len() (`check_tile`).
                let correction = unsafe { sp[t].add(g).read() }.wrapping_mul(8);
                let acc = _mm256_sub_epi32(_mm256_madd_epi16(pairs[t], ones), _mm256_set1_epi32(correction));
                total[t] = _mm256_add_ps(total[t], _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale));
            }
        }
        for (t, o) in out.chunks_exact_mut(PANEL_ROWS).enumerate() {
            // SAFETY: a 32-byte store into the half's 8 f32 of a chunk of 16.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr().add(8 * half), total[t]) };
        }
    }
}

/// [`tile_w4a8_panel`] for one activation row (decode), both halves of the
/// panel in one pass, group by group: a 64-byte line's two 32-byte loads
/// one after the other, where the general tile passes over the panel once
/// a half (for 4 rows' registers) and reads every line twice, the second
/// time from L2 once a panel outgrows L1 (32 KiB at K = 4096). Each half's
/// float chain is the same as there (rows in the lanes, increasing g), so
/// the bits are too.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn tile_w4a8_panel_16x1(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[f16], out: &mut [f32]) {
    const XR: usize = 1;
    let groups = check_tile(XR, x, sums, panel, s, out);
    // pointer loads as in the general tile (`check_tile`)
    let (xp, sp) = ([x[0].as_ptr()], sums[0].as_ptr());
    let ones = _mm256_set1_epi16(1);
    let mut total = [_mm256_setzero_ps(); 2];
    for g in 0..groups {
        // SAFETY: g < groups = sums[0].len() (`check_tile`).
        let correction = _mm256_set1_epi32(unsafe { sp.add(g).read() }.wrapping_mul(8));
        for (half, total) in total.iter_mut().enumerate() {
            // `check_tile` holds the panel to 16 · 32 · groups / 2 bytes
            // and the row to 32 · groups codes, and g < groups
            let [pairs] = group_pairs!(xp, panel, g, half);
            // SAFETY: 8 f16 at 16g + 8h lie in the panel's 16 · groups scales.
            let scale = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(PANEL_ROWS * g + 8 * half).cast())) };
            let acc = _mm256_sub_epi32(_mm256_madd_epi16(pairs, ones), correction);
            *total = _mm256_add_ps(*total, _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale));
        }
    }
    for (half, total) in total.into_iter().enumerate() {
        // SAFETY: a 32-byte store into half h's 8 f32 of the 16 (`check_tile`).
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * half), total) };
    }
}

/// The panel tiles: 4 activation rows (each unpacked load serves 4; 4
/// accumulators and 4 totals beside the loads in the 16 registers), then 1.
pub(super) const PANELS: PanelFamily = PanelFamily {
    tiles: &[(4, super::entry::panel_16x4), (1, super::entry::panel_16x1)],
    pairs: None,
};

qlinear_kernels_core::panel_entry!(
    /// The tier's panel entry (the frame's sweep over `PANELS`).
    pub(crate) fn gemm_w4a8_grouped_panels = PANELS
);

/// W4A8 per channel over one panel for `XR` activation rows (the
/// `TilePanelQ4PerChannel` contract): the grouped tile's loads, `maddubs`
/// and i16 pair sums per group of 32 (which cannot saturate, as there),
/// each group's exact sums added into i32 lanes, the row's `8·Σx`
/// subtracted and one conversion at the end. Writes `out[i · 16 + q] = acc
/// as f32`.
///
/// The panel's two halves (rows 0..8 and 8..16) are passed over group by
/// group, the second half's 4 loads straight after the first's (the same
/// 256 bytes), not panel by panel as in the grouped tile: there the second
/// pass re-reads a whole panel (32 KiB at K = 4096), and with both
/// hyperthreads of a core doing so an M = 16–256 call at 11008 × 4096 ran
/// 0.77–0.86× the natural layout's speed on two threads (Intel Xeon, family
/// 6 model 167); the eight i32 totals this needs live past the registers
/// but are touched once a group.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn tile_w4a8_panel_per_channel<const XR: usize>(
    x: &[&[i8]],
    sums: &[&[i32]],
    panel: &[u8],
    out: &mut [f32],
) {
    let groups = check_tile_per_channel(XR, x, sums, panel, out);
    // pointer loads as in the grouped tile (`check_tile_per_channel` holds
    // each row to `32 · groups` codes)
    let xp: [*const i8; XR] = std::array::from_fn(|t| x[t].as_ptr());
    let corrections: [i32; XR] = std::array::from_fn(|t| sums[t][0].wrapping_mul(8));
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_si256(); XR]; 2];
    for g in 0..groups {
        for (half, acc) in acc.iter_mut().enumerate() {
            // `check_tile_per_channel` holds the panel to 16 · 32 ·
            // groups / 2 bytes and each row to 32 · groups codes, and
            // g < groups
            let pairs = group_pairs!(xp, panel, g, half);
            for t in 0..XR {
                acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(pairs[t], ones));
            }
        }
    }
    for (t, o) in out.chunks_exact_mut(PANEL_ROWS).enumerate() {
        for (half, acc) in acc.iter().enumerate() {
            let acc = _mm256_sub_epi32(acc[t], _mm256_set1_epi32(corrections[t]));
            // SAFETY: a 32-byte store into the half's 8 f32 of a chunk of 16.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr().add(8 * half), _mm256_cvtepi32_ps(acc)) };
        }
    }
}

/// The per-channel panel tiles: 4 activation rows, then 1.
pub(super) const PANELS_PER_CHANNEL: PanelFamily<TilePanelQ4PerChannel> = PanelFamily {
    tiles: &[(4, super::entry::panel_pc_16x4), (1, super::entry::panel_pc_16x1)],
    pairs: None,
};

qlinear_kernels_core::panel_entry!(
    /// The tier's per-channel panel entry (the frame's sweep over
    /// `PANELS_PER_CHANNEL`).
    per_channel pub(crate) fn gemm_w4a8_panels = PANELS_PER_CHANNEL
);
