//! AVX-512 VNNI W4A8 grouped tiles on the panel form of a weight
//! (`qlinear_kernels_core::abi::panel`): one 512-bit load is the same 8
//! columns of 16 weight rows, 4 packed bytes a row, so `vpdpbusd` of its low
//! (high) nibbles against an activation row's first (last) 4 codes of those
//! columns, broadcast, leaves each weight row's partial sum in its own lane.
//! A group of 32 is 4 loads; its exact sums `acc_g` then take the float
//! step of §6.1 for the 16 rows at once (one conversion, one product by the
//! 16 scales, converted from f16 in one instruction, one add), with no
//! reduction across lanes. Integer sums in any order are exact; each
//! lane's float chain is the spec's, in increasing g from +0.

use std::arch::x86_64::*;

use half::f16;
use qlinear_kernels_core::abi::panel::{
    check_pair, check_pair_per_channel, check_tile, check_tile_per_channel, PanelFamily, TilePanelQ4PerChannel,
    PANEL_ROWS,
};

/// Bytes ahead of the current load that each step prefetches: a panel is
/// one sequential run. Streaming 16 matrices of 256 × 4096 in turn (8 MiB,
/// each call's weights evicted from L2) on the Intel Xeon (family 6 model
/// 207; docs/benchmarks/history.md), at `c771c4d`'s parent, with a throw-away harness
/// around the table entries (not committed; `qlinear-bench --quick --shape
/// 11008x4096 --only w4a8_g32 --m 1` times the same regime less directly):
/// 4 KiB ahead took 22.9 µs a call, 1 KiB 25.4, 8 KiB 22.8 and 16 KiB 23.7
/// (the natural layout's tile: 35.9).
const PREFETCH: usize = 4096;

/// One load's products: columns `8c .. 8c + 8` of the panel's 16 rows (64
/// bytes at `64c`) against `XR` activation rows (`xp`, each row's codes in
/// their natural order), the low nibbles against the row's first 4 codes
/// broadcast into `low`, the high against its last 4 into `high`; the
/// load prefetches [`PREFETCH`] bytes ahead.
///
/// # Safety
/// The panel holds `64 · (c + 1)` bytes and each row of `xp` `8 · (c + 1)`
/// codes (a tile's `check_tile` or `check_tile_per_channel` proves it for
/// every `c < k / 8`), and the CPU has AVX-512 F/BW and VNNI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn add_piece<const XR: usize>(
    low: &mut [__m512i; XR],
    high: &mut [__m512i; XR],
    xp: &[*const i8; XR],
    panel: &[u8],
    c: usize,
) {
    let mask = _mm512_set1_epi8(0x0F);
    // SAFETY: the 64 bytes at 64c lie in the panel (the caller's promise);
    // the prefetch only hints.
    let v = unsafe {
        _mm_prefetch::<_MM_HINT_T0>(panel.as_ptr().wrapping_add(64 * c + PREFETCH).cast());
        _mm512_loadu_si512(panel.as_ptr().add(64 * c).cast())
    };
    let lo = _mm512_and_si512(v, mask);
    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), mask);
    for t in 0..XR {
        // columns 8c .. 8c + 8 of row t: 4 codes for the low nibbles, 4 for the high
        // SAFETY: 8c + 8 codes lie in row t (the caller's promise).
        let (e, o) = unsafe {
            let q = xp[t].add(8 * c).cast::<i32>();
            (q.read_unaligned(), q.add(1).read_unaligned())
        };
        low[t] = _mm512_dpbusd_epi32(low[t], lo, _mm512_set1_epi32(e));
        high[t] = _mm512_dpbusd_epi32(high[t], hi, _mm512_set1_epi32(o));
    }
}

/// W4A8 grouped over one panel for `XR` activation rows (the
/// `TilePanelQ4` contract): each load of 16 rows' 8 columns is unpacked once
/// and serves the `XR` rows. Writes `out[i · 16 + q]`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w4a8_panel<const XR: usize>(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[f16], out: &mut [f32]) {
    let groups = check_tile(XR, x, sums, panel, s, out);
    // The rows are read through pointers, with no bounds check at each
    // load: `check_tile` holds each row to `32 · groups` codes and `groups`
    // sums, and the per-load checks were a compare and a branch beside
    // every two `vpdpbusd`s, on the port they need.
    let (xp, sp): ([*const i8; XR], [*const i32; XR]) = (
        std::array::from_fn(|t| x[t].as_ptr()),
        std::array::from_fn(|t| sums[t].as_ptr()),
    );
    let mut total = [_mm512_setzero_ps(); XR];
    for g in 0..groups {
        // the low sums start at the group's `−8·Σx` (NUMERICS §6.1's
        // correction of the biased nibbles): one add fewer a row than
        // subtracting it after (i32 sums wrap exactly in any order)
        // SAFETY: g < groups = sums[t].len() (`check_tile`).
        let mut low: [__m512i; XR] =
            std::array::from_fn(|t| unsafe { _mm512_set1_epi32(sp[t].add(g).read().wrapping_mul(-8)) });
        let mut high = [_mm512_setzero_si512(); XR];
        for c in 4 * g..4 * g + 4 {
            // SAFETY: c < k / 8 = 4 · groups: `check_tile` holds the panel
            // to 16 · k / 2 bytes and each row to k codes.
            unsafe { add_piece(&mut low, &mut high, &xp, panel, c) };
        }
        // SAFETY: 16 f16 at 16g lie in the panel's 16 · groups scales.
        let scale = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(s.as_ptr().add(PANEL_ROWS * g).cast())) };
        for t in 0..XR {
            let acc = _mm512_add_epi32(low[t], high[t]);
            total[t] = _mm512_add_ps(total[t], _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale));
        }
    }
    for (t, o) in out.chunks_exact_mut(PANEL_ROWS).enumerate() {
        // SAFETY: a 64-byte store into a chunk of 16 f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), total[t]) };
    }
}

/// [`tile_w4a8_panel`] for one activation row (decode), with the high
/// nibbles multiplied in place as in [`tile_w4a8_panel_per_channel_16x1`]: a
/// group's high chain is `16 · Σ b·x` over its 16 high-nibble columns (at most
/// `240 · 127 · 16` = 487 680 in magnitude), shifted down once before the
/// group's float step. A load then costs two `vpdpbusd`s and no shift on
/// the port they share, and a group one shift.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w4a8_panel_16x1(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[f16], out: &mut [f32]) {
    let groups = check_tile(1, x, sums, panel, s, out);
    let (xp, sp) = (x[0].as_ptr(), sums[0].as_ptr());
    let mask = _mm512_set1_epi8(0x0F);
    let mut total = _mm512_setzero_ps();
    for g in 0..groups {
        // SAFETY: g < groups = sums[0].len() (`check_tile`).
        let mut low = _mm512_set1_epi32(unsafe { sp.add(g).read() }.wrapping_mul(-8));
        let mut high = _mm512_setzero_si512();
        for c in 4 * g..4 * g + 4 {
            // (c < k / 8, the prefetch only hints)
            // SAFETY: 64c + 64 <= 16 · k / 2 panel bytes, 8c + 8 <= k codes (`check_tile`).
            let (v, e, o) = unsafe {
                _mm_prefetch::<_MM_HINT_T0>(panel.as_ptr().wrapping_add(64 * c + PREFETCH).cast());
                let q = xp.add(8 * c).cast::<i32>();
                (
                    _mm512_loadu_si512(panel.as_ptr().add(64 * c).cast()),
                    q.read_unaligned(),
                    q.add(1).read_unaligned(),
                )
            };
            low = _mm512_dpbusd_epi32(low, _mm512_and_si512(v, mask), _mm512_set1_epi32(e));
            high = _mm512_dpbusd_epi32(high, _mm512_andnot_si512(mask, v), _mm512_set1_epi32(o));
        }
        let acc = _mm512_add_epi32(low, _mm512_srai_epi32::<4>(high));
        // SAFETY: 16 f16 at 16g lie in the panel's 16 · groups scales.
        let scale = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(s.as_ptr().add(PANEL_ROWS * g).cast())) };
        total = _mm512_add_ps(total, _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale));
    }
    // SAFETY: a 64-byte store into 16 f32 (`check_tile`).
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), total) };
}

/// One step of a pair tile: columns `8c .. 8c + 8` of the activation row
/// at `xp` (its 4 codes for the low nibbles and its 4 for the high, each
/// broadcast) and the same columns' 64-byte loads of both panels (`panels`
/// holding two panels of equal size, one after the other); each panel's
/// stream prefetches [`PREFETCH`] bytes ahead into L2 (`T1`), as the
/// one-row tile's does, and past its panel's end into the same panel of the
/// next pair: the first panel's stream ran into the second, which this
/// pair is reading already, so with K = 576 (4 608-byte panels) 7 of 8 of
/// its prefetches were wasted. Skipping it, SmolLM2-135M's q4g32 Q K V and
/// gate up projections streamed at 17.2–21.2 and 20.5–24.2 GB/s at one
/// thread instead of 13.3–16.4 and 14.6–17.6, its decode 168.6–179.9
/// tok/s against 134.6–165.6, the per-channel q4 file 186.3–197.6 against
/// 164.2–181.0 (AMD EPYC Zen 4, family 25 model 17, two rounds of old new
/// new old; `docs/benchmarks/history.md`); 11008 × 4096 from memory moved
/// within its noise. Prefetching the next pair instead (two lines a
/// step, as fast as this pair is read) left a call's first pair without
/// any: the plan's decode timing (256 × 4096 from L3, 16 panels a call) then
/// had per-channel VNNI at 18.7–20.3 µs against 15.6–16.7, behind AVX2 in
/// most plans, and 11008 × 4096 from memory ran 5–6 % slower (Intel Xeon,
/// family 6 model 167, alternated).
///
/// # Safety
/// The row holds `8c + 8` codes and each panel `64c + 64` bytes (a pair
/// tile's `check_pair` or `check_pair_per_channel` proves it for every
/// `c < k / 8`), and the CPU has AVX-512 F/BW and VNNI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn pair_step(xp: *const i8, panels: &[u8], c: usize) -> (__m512i, __m512i, [__m512i; 2]) {
    let bytes = panels.len() / 2;
    // SAFETY: the caller's promise (8c + 8 codes, 64c + 64 bytes a panel);
    // the prefetch only hints.
    unsafe {
        let q = xp.add(8 * c).cast::<i32>();
        let codes = (
            _mm512_set1_epi32(q.read_unaligned()),
            _mm512_set1_epi32(q.add(1).read_unaligned()),
        );
        let ahead = 64 * c + PREFETCH;
        // each panel's own stream: past its end, the same panel of the next pair
        let skip = if ahead >= bytes { bytes } else { 0 };
        let v = std::array::from_fn(|h| {
            _mm_prefetch::<_MM_HINT_T1>(panels.as_ptr().wrapping_add(h * bytes + ahead + skip).cast());
            _mm512_loadu_si512(panels.as_ptr().add(h * bytes + 64 * c).cast())
        });
        (codes.0, codes.1, v)
    }
}

/// [`tile_w4a8_panel_16x1`] on two consecutive panels at once (the
/// frame's pair tile, `PanelFamily::pairs`): each activation code is read
/// once for both panels' loads, and the two panels' chains run side by
/// side. A load of codes served 16 weight rows; the broadcasts were a third
/// of a one-row tile's loads, beside the panel's and its prefetch (on this
/// tier's Intel cores two loads a cycle). Each panel's stream prefetches
/// into L2 (`T1`, [`pair_step`]): with the next pair prefetched, streaming
/// 11008 × 4096 from memory on one thread took 1 915–2 025 µs a call with
/// `T0` and 1 776–1 834 with `T1` (Intel Xeon, family 6 model 167,
/// alternated; hot, the same).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w4a8_panel_pair(x: &[&[i8]], sums: &[&[i32]], panels: &[u8], s: &[f16], out: &mut [f32]) {
    let groups = check_pair(x, sums, panels, s, out);
    let (xp, sp) = (x[0].as_ptr(), sums[0].as_ptr());
    let mask = _mm512_set1_epi8(0x0F);
    let mut total = [_mm512_setzero_ps(); 2];
    for g in 0..groups {
        // SAFETY: g < groups = sums[0].len() (`check_pair`).
        let start = _mm512_set1_epi32(unsafe { sp.add(g).read() }.wrapping_mul(-8));
        let mut low = [start; 2];
        let mut high = [_mm512_setzero_si512(); 2];
        for c in 4 * g..4 * g + 4 {
            // SAFETY: c < k / 8 = 4 · groups (`check_pair`).
            let (e, o, v) = unsafe { pair_step(xp, panels, c) };
            for (h, v) in v.into_iter().enumerate() {
                low[h] = _mm512_dpbusd_epi32(low[h], _mm512_and_si512(v, mask), e);
                high[h] = _mm512_dpbusd_epi32(high[h], _mm512_andnot_si512(mask, v), o);
            }
        }
        for h in 0..2 {
            let acc = _mm512_add_epi32(low[h], _mm512_srai_epi32::<4>(high[h]));
            // SAFETY: panel h's 16 f16 of group g lie in the pair's 2 · 16 · groups scales.
            let scale = unsafe {
                _mm512_cvtph_ps(_mm256_loadu_si256(
                    s.as_ptr().add(h * PANEL_ROWS * groups + PANEL_ROWS * g).cast(),
                ))
            };
            total[h] = _mm512_add_ps(total[h], _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale));
        }
    }
    for (h, o) in out.chunks_exact_mut(PANEL_ROWS).enumerate() {
        // SAFETY: a 64-byte store into a chunk of 16 f32 (`check_pair`: 32 outputs).
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), total[h]) };
    }
}

/// The panel tiles: 8 activation rows (each unpacked load serves 8; 16
/// accumulators and 8 totals in the 32 registers), then 4, then 1.
pub(super) const PANELS: PanelFamily = PanelFamily {
    tiles: &[
        (8, super::entry::panel_16x8),
        (4, super::entry::panel_16x4),
        (1, super::entry::panel_16x1),
    ],
    pairs: Some(super::entry::panel_pair),
};

qlinear_kernels_core::panel_entry!(
    /// The tier's panel entry (the frame's sweep over `PANELS`).
    pub(crate) fn gemm_w4a8_grouped_panels = PANELS
);

/// [`PANELS`] without the pair tile: decode runs each panel through the
/// one-row tile, one panel's codes and scales streaming at a time, where
/// the pair tile streams two of each. On an AMD EPYC Zen 4 (family 25
/// model 17) that is the faster decode from memory: SmolLM2-1.7B-shaped
/// q4g32 decoded 22.3–23.4 tok/s at one thread against the pair tile's
/// 17.1–18.3, SmolLM2-135M's q4g32 176.1–199.4 against 148.0–183.7 (two
/// rounds of four alternated runs; two threads level; `docs/benchmarks/history.md`,
/// "W4A8 grouped decode without the pair tile on AMD"). Per channel, whose
/// pair tile streams no scales, held its own there with its one-row
/// tile's prefetch hint (SmolLM2-135M's per-channel file 176–190 tok/s at
/// one thread without the pair tiles, 183–202 with them); without the hint
/// as well it is faster ([`PANELS_PER_CHANNEL_SINGLE`]).
/// On Intel the grouped pair tile was level from memory and a few percent
/// faster hot (`9391259`), so only AMD CPUs get this entry
/// ([`super::panel_pairs`]).
pub(super) const PANELS_SINGLE: PanelFamily = PanelFamily { pairs: None, ..PANELS };

qlinear_kernels_core::panel_entry!(
    /// The tier's panel entry for AMD CPUs (the frame's sweep over
    /// `PANELS_SINGLE`).
    pub(crate) fn gemm_w4a8_grouped_panels_single = PANELS_SINGLE
);

/// W4A8 per channel over one panel for `XR` activation rows (the
/// `TilePanelQ4PerChannel` contract): the grouped tile's loads and
/// `vpdpbusd`s with no float step, each row's low sums starting at its
/// `−8·Σx` and its exact i32 sums converted once at the end. Writes
/// `out[i · 16 + q] = acc as f32`. For one row, [`tile_w4a8_panel_per_channel_16x1`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
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
    let mut low: [__m512i; XR] = std::array::from_fn(|t| _mm512_set1_epi32(sums[t][0].wrapping_mul(-8)));
    let mut high = [_mm512_setzero_si512(); XR];
    for c in 0..4 * groups {
        // SAFETY: c < k / 8 = 4 · groups: `check_tile_per_channel` holds
        // the panel to 16 · k / 2 bytes and each row to k codes.
        unsafe { add_piece(&mut low, &mut high, &xp, panel, c) };
    }
    for (t, o) in out.chunks_exact_mut(PANEL_ROWS).enumerate() {
        let acc = _mm512_add_epi32(low[t], high[t]);
        // SAFETY: a 64-byte store into a chunk of 16 f32.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), _mm512_cvtepi32_ps(acc)) };
    }
}

/// [`tile_w4a8_panel_per_channel`] for one activation row (decode): each of
/// a group's 4 loads accumulates apart (8 chains of `vpdpbusd`), since with
/// one row the general tile's two chains leave each `vpdpbusd` waiting on
/// the one before (integer sums are exact in any order, §6.1); and the
/// stream is prefetched into L2 only (`T1`), 4 KiB ahead.
///
/// Why both, measured on the Intel Xeon (family 6 model 167), µs, the
/// tile's variants alternated in two or three rounds: with 2 chains a call
/// at 576 × 576 (hot, `qlinear-bench --per-call`) took 4.2–4.4 µs, with 8
/// chains 2.9; but 4 or 8 chains with the `T0` prefetch of the other tiles
/// (4, 8, 16 or 32 KiB ahead, or none) streamed 11008 × 4096 from memory
/// (`qlinear-bench --only w4a8 --m 1`, cold, one thread) in 1 776–2 183 µs
/// (in 17 of 18 runs; one 1 535) against 1 480–1 760 with 2 chains; with
/// `T1`, 1 459–1 535 µs, and 3.2–3.6 µs hot.
///
/// The high nibbles are multiplied where they lie (`b & 0xF0`, which is
/// `16 · b`), not shifted down first: on this tier's Intel cores a 512-bit
/// shift and `vpdpbusd` share one port, so a load's shift, two `vpdpbusd`s
/// and two masks cost 3 cycles there; with `andnot` in place of the shift
/// the port has 2. Each high chain is shifted down once per
/// [`FOLD_GROUPS`] groups, exactly (integer sums, §6.1). Alternated on the
/// Intel Xeon (family 6 model 167), the bare entry at 576 × 576 went from
/// 3.7 to 3.5 µs, at 1536 × 576 from 9.6 to 8.9.
///
/// `AHEAD`: whether the stream is prefetched (Intel) or left to the
/// hardware prefetcher (AMD's table, [`PANELS_PER_CHANNEL_SINGLE`]); the
/// sums are the same bits either way.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w4a8_panel_per_channel_16x1<const AHEAD: bool>(
    x: &[&[i8]],
    sums: &[&[i32]],
    panel: &[u8],
    out: &mut [f32],
) {
    let groups = check_tile_per_channel(1, x, sums, panel, out);
    let xp = x[0].as_ptr();
    let mask = _mm512_set1_epi8(0x0F);
    let mut acc = _mm512_set1_epi32(sums[0][0].wrapping_mul(-8));
    let mut g0 = 0;
    while g0 < groups {
        let g1 = groups.min(g0 + FOLD_GROUPS);
        let mut low = [_mm512_setzero_si512(); 4];
        let mut high = [_mm512_setzero_si512(); 4];
        for g in g0..g1 {
            for j in 0..4 {
                let c = 4 * g + j;
                // (c < k / 8, the prefetch only hints)
                // SAFETY: 64c + 64 <= 16 · k / 2 panel bytes, 8c + 8 <= k codes (`check_tile_per_channel`).
                let (v, e, o) = unsafe {
                    if AHEAD {
                        _mm_prefetch::<_MM_HINT_T1>(panel.as_ptr().wrapping_add(64 * c + PREFETCH).cast());
                    }
                    let q = xp.add(8 * c).cast::<i32>();
                    (
                        _mm512_loadu_si512(panel.as_ptr().add(64 * c).cast()),
                        q.read_unaligned(),
                        q.add(1).read_unaligned(),
                    )
                };
                low[j] = _mm512_dpbusd_epi32(low[j], _mm512_and_si512(v, mask), _mm512_set1_epi32(e));
                high[j] = _mm512_dpbusd_epi32(high[j], _mm512_andnot_si512(mask, v), _mm512_set1_epi32(o));
            }
        }
        acc = _mm512_add_epi32(acc, fold(&low, &high));
        g0 = g1;
    }
    // SAFETY: a 64-byte store into 16 f32 (`check_tile_per_channel`).
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), _mm512_cvtepi32_ps(acc)) };
}

/// [`tile_w4a8_panel_per_channel_16x1`] on two consecutive panels at once
/// (the frame's pair tile): each activation code is read once for both
/// panels' loads, 16 chains; each panel's stream prefetched into L2 as the
/// one-row tile's is ([`pair_step`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w4a8_panel_per_channel_pair(x: &[&[i8]], sums: &[&[i32]], panels: &[u8], out: &mut [f32]) {
    let groups = check_pair_per_channel(x, sums, panels, out);
    let xp = x[0].as_ptr();
    let mask = _mm512_set1_epi8(0x0F);
    let mut acc = [_mm512_set1_epi32(sums[0][0].wrapping_mul(-8)); 2];
    let mut g0 = 0;
    while g0 < groups {
        let g1 = groups.min(g0 + FOLD_GROUPS);
        let mut low = [[_mm512_setzero_si512(); 4]; 2];
        let mut high = [[_mm512_setzero_si512(); 4]; 2];
        for g in g0..g1 {
            for j in 0..4 {
                // SAFETY: c = 4g + j < k / 8 = 4 · groups (`check_pair_per_channel`).
                let (e, o, v) = unsafe { pair_step(xp, panels, 4 * g + j) };
                for (h, v) in v.into_iter().enumerate() {
                    low[h][j] = _mm512_dpbusd_epi32(low[h][j], _mm512_and_si512(v, mask), e);
                    high[h][j] = _mm512_dpbusd_epi32(high[h][j], _mm512_andnot_si512(mask, v), o);
                }
            }
        }
        for h in 0..2 {
            acc[h] = _mm512_add_epi32(acc[h], fold(&low[h], &high[h]));
        }
        g0 = g1;
    }
    for (h, o) in out.chunks_exact_mut(PANEL_ROWS).enumerate() {
        // SAFETY: a 64-byte store into a chunk of 16 f32 (`check_pair_per_channel`: 32 outputs).
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), _mm512_cvtepi32_ps(acc[h])) };
    }
}

/// The exact `Σ b·x` of a one-row tile's 4 low chains and 4 high chains
/// (the high nibbles in place, `16 · b`, each chain shifted down first).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn fold(low: &[__m512i; 4], high: &[__m512i; 4]) -> __m512i {
    let l = _mm512_add_epi32(_mm512_add_epi32(low[0], low[1]), _mm512_add_epi32(low[2], low[3]));
    let h = _mm512_add_epi32(
        _mm512_add_epi32(_mm512_srai_epi32::<4>(high[0]), _mm512_srai_epi32::<4>(high[1])),
        _mm512_add_epi32(_mm512_srai_epi32::<4>(high[2]), _mm512_srai_epi32::<4>(high[3])),
    );
    _mm512_add_epi32(l, h)
}

/// Groups of 32 columns a chain of high nibbles in place (`16 · b`) spans
/// before it is shifted down: each of the 4 chains takes 4 of a group's
/// 16 high-nibble columns, so its exact sum is at most `240 · 127 · 4 · FOLD_GROUPS`
/// = 124 846 080 in magnitude, far inside i32, so the chain is exactly
/// `16 · Σ b·x` and `>> 4` recovers `Σ b·x`, for any K.
const FOLD_GROUPS: usize = 1024;

/// The per-channel panel tiles: 8 activation rows, then 4, then 1.
pub(super) const PANELS_PER_CHANNEL: PanelFamily<TilePanelQ4PerChannel> = PanelFamily {
    tiles: &[
        (8, super::entry::panel_pc_16x8),
        (4, super::entry::panel_pc_16x4),
        (1, super::entry::panel_pc_16x1),
    ],
    pairs: Some(super::entry::panel_pc_pair),
};

qlinear_kernels_core::panel_entry!(
    /// The tier's per-channel panel entry (the frame's sweep over
    /// `PANELS_PER_CHANNEL`).
    per_channel pub(crate) fn gemm_w4a8_panels = PANELS_PER_CHANNEL
);

/// [`PANELS_PER_CHANNEL`] as AMD CPUs take it: decode one panel at a time
/// (no pair tile) and the one-row tile's stream left to the hardware
/// prefetcher. On an AMD EPYC Zen 4 (family 25 model 17) the pair tile and
/// the `T1` hint, both tuned on an Intel Xeon, made per-channel VNNI decode
/// from memory slower than AVX2's, and the plan, which times decode from
/// L3, chose it anyway: 8192 × 2048 at one thread took 383–413 µs a call
/// against 255–305 without either (AVX2: 266–343), 11008 × 4096 1 035–1 358
/// against 742–902; at two threads level (11008 × 4096: 679–1 010 µs with
/// them, 700–807 without); `T0` in place of no hint, 799–840 against
/// 742–757 in the same rounds. `qlinear-bench --quick --only w4a8 --m
/// 1 --shape S`, variants alternated in two and three rounds
/// (`docs/benchmarks/history.md`, "Per-channel W4A8 decode on AMD").
/// The grouped one-row tile keeps its `T0` hint there: without it the same
/// runs were slower (11008 × 4096: 930–1 033 against 874–898 µs).
pub(super) const PANELS_PER_CHANNEL_SINGLE: PanelFamily<TilePanelQ4PerChannel> = PanelFamily {
    tiles: &[
        (8, super::entry::panel_pc_16x8),
        (4, super::entry::panel_pc_16x4),
        (1, super::entry::panel_pc_16x1_unprefetched),
    ],
    pairs: None,
};

qlinear_kernels_core::panel_entry!(
    /// The tier's per-channel panel entry for AMD CPUs (the frame's sweep
    /// over `PANELS_PER_CHANNEL_SINGLE`).
    per_channel pub(crate) fn gemm_w4a8_panels_single = PANELS_PER_CHANNEL_SINGLE
);
