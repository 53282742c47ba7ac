//! The AVX-512 VNNI tier's panel tiles done wrong (`mutants.rs` has the
//! tiles on the frame): each slip in plain Rust must fail the selftest's
//! proof, and the same tile done right must pass.

use qlinear_kernels_core::proof::mutants::first_failure;
use qlinear_kernels_core::KernelFamily;

/// The panel tiles (`qlinear_kernels_core::abi::panel`) in plain Rust on the
/// tier's tiles (4 activation rows, then 1), with the slips a `vpdpbusd`
/// panel kernel can make: the scales read row after row (the natural
/// order) instead of group after group; the high nibbles' codes against
/// the low nibbles; in the 4-row tile every row's bias taken from the first
/// activation row's sums (a hoisted broadcast); and the bias read one
/// group ahead (the tiles read the sums through a row pointer, unchecked).
#[derive(Clone, Copy, PartialEq)]
enum PanelSlip {
    None,
    ScalesRowMajor,
    HalvesSwapped,
    HoistedSums,
    SumsOfNextGroup,
}

fn panel_with(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[half::f16], out: &mut [f32], slip: PanelSlip) {
    let groups = sums[0].len();
    for (t, row) in out.chunks_exact_mut(16).enumerate() {
        for (q, o) in row.iter_mut().enumerate() {
            let mut total = 0f32;
            for g in 0..groups {
                let mut acc = 0i32;
                for c in 4 * g..4 * g + 4 {
                    let (low, high) = (&x[t][8 * c..8 * c + 4], &x[t][8 * c + 4..8 * c + 8]);
                    for (j, &b) in panel[64 * c + 4 * q..64 * c + 4 * q + 4].iter().enumerate() {
                        let (lo, hi) = (i32::from(b & 0x0F), i32::from(b >> 4));
                        let (lo, hi) = if slip == PanelSlip::HalvesSwapped {
                            (hi, lo)
                        } else {
                            (lo, hi)
                        };
                        acc += i32::from(low[j]) * lo + i32::from(high[j]) * hi;
                    }
                }
                let bias_row = if slip == PanelSlip::HoistedSums { 0 } else { t };
                let scale = if slip == PanelSlip::ScalesRowMajor {
                    s[q * groups + g]
                } else {
                    s[16 * g + q]
                };
                let bias_group = if slip == PanelSlip::SumsOfNextGroup {
                    (g + 1) % groups
                } else {
                    g
                };
                total += (acc - 8 * sums[bias_row][bias_group]) as f32 * f32::from(scale);
            }
            *o = total;
        }
    }
}

/// The pair tile (two panels, one activation row) in plain Rust from
/// [`panel_with`], with the slips a two-panel kernel can make: the second
/// panel scaled by the first panel's scales, and the two panels' outputs
/// stored in each other's place.
fn pair_with(x: &[&[i8]], sums: &[&[i32]], panels: &[u8], s: &[half::f16], out: &mut [f32], slip: PairSlip) {
    let (bytes, per) = (panels.len() / 2, s.len() / 2);
    for h in 0..2 {
        let hs = if slip == PairSlip::FirstScalesTwice { 0 } else { h };
        let ho = if slip == PairSlip::OutputsSwapped { 1 - h } else { h };
        let panel = &panels[h * bytes..(h + 1) * bytes];
        panel_with(
            x,
            sums,
            panel,
            &s[hs * per..(hs + 1) * per],
            &mut out[16 * ho..16 * ho + 16],
            PanelSlip::None,
        );
    }
}

/// A pair tile's slips ([`pair_with`], [`pair_per_channel_with`]).
#[derive(Clone, Copy, PartialEq)]
enum PairSlip {
    None,
    FirstScalesTwice,
    FirstPanelTwice,
    OutputsSwapped,
}

qlinear_kernels_core::panel_table!(
    pair_first_scales,
    panel_with,
    PanelSlip::None,
    [8, 4, 1],
    pair = pair_first_scales_with
);
qlinear_kernels_core::panel_table!(
    pair_swapped,
    panel_with,
    PanelSlip::None,
    [8, 4, 1],
    pair = pair_swapped_with
);
qlinear_kernels_core::panel_table!(
    pair_right,
    panel_with,
    PanelSlip::None,
    [8, 4, 1],
    pair = pair_right_with
);

fn pair_first_scales_with(x: &[&[i8]], sums: &[&[i32]], p: &[u8], s: &[half::f16], out: &mut [f32], _: PanelSlip) {
    pair_with(x, sums, p, s, out, PairSlip::FirstScalesTwice)
}
fn pair_swapped_with(x: &[&[i8]], sums: &[&[i32]], p: &[u8], s: &[half::f16], out: &mut [f32], _: PanelSlip) {
    pair_with(x, sums, p, s, out, PairSlip::OutputsSwapped)
}
fn pair_right_with(x: &[&[i8]], sums: &[&[i32]], p: &[u8], s: &[half::f16], out: &mut [f32], _: PanelSlip) {
    pair_with(x, sums, p, s, out, PairSlip::None)
}

#[test]
fn the_pair_tiles_fail_the_proof_on_their_slips() {
    for (table, family, why) in [
        (
            &pair_first_scales::TABLE,
            KernelFamily::W4A8Grouped,
            "the first panel's scales twice must fail",
        ),
        (
            &pair_swapped::TABLE,
            KernelFamily::W4A8Grouped,
            "swapped outputs must fail",
        ),
        (
            &pc_pair_first_panel::TABLE,
            KernelFamily::W4A8,
            "the first panel's bytes twice must fail",
        ),
        (&pc_pair_swapped::TABLE, KernelFamily::W4A8, "swapped outputs must fail"),
    ] {
        first_failure(table, family).expect(why);
    }
    for (table, family) in [
        (&pair_right::TABLE, KernelFamily::W4A8Grouped),
        (&pc_pair_right::TABLE, KernelFamily::W4A8),
    ] {
        let right = first_failure(table, family);
        assert!(right.is_none(), "{right:?}");
    }
}

qlinear_kernels_core::panel_table!(panel_scales_row_major, panel_with, PanelSlip::ScalesRowMajor, [8, 4, 1]);
qlinear_kernels_core::panel_table!(panel_halves_swapped, panel_with, PanelSlip::HalvesSwapped, [8, 4, 1]);
qlinear_kernels_core::panel_table!(panel_hoisted_sums, panel_with, PanelSlip::HoistedSums, [8, 4, 1]);
qlinear_kernels_core::panel_table!(panel_next_group_sums, panel_with, PanelSlip::SumsOfNextGroup, [8, 4, 1]);
qlinear_kernels_core::panel_table!(panel_right, panel_with, PanelSlip::None, [8, 4, 1]);

#[test]
fn the_panel_tiles_fail_the_proof_on_their_slips() {
    for (table, why) in [
        (&panel_scales_row_major::TABLE, "scales in the natural order must fail"),
        (&panel_halves_swapped::TABLE, "odd codes against low nibbles must fail"),
        (
            &panel_hoisted_sums::TABLE,
            "the first row's sums for every row must fail",
        ),
        (&panel_next_group_sums::TABLE, "the next group's sums must fail"),
    ] {
        first_failure(table, KernelFamily::W4A8Grouped).expect(why);
    }
    let right = first_failure(&panel_right::TABLE, KernelFamily::W4A8Grouped);
    assert!(right.is_none(), "{right:?}");
}

/// The per-channel panel tiles in plain Rust on the tier's tiles (8 and 4
/// activation rows, then 1), with the slips a `vpdpbusd` per-channel panel
/// kernel can make: the odd codes against the low nibbles; every row's
/// bias from the first activation row's sum (a hoisted broadcast); the
/// bias not cancelled at all (the correction's start value lost); and in
/// the one-row tile, one of its 4 chains (every fourth load) left out of
/// the final sum. The one-row tile of AMD's table
/// (`tile_w4a8_panel_per_channel_16x1::<false>`) is the same arithmetic
/// without the prefetch hint, so the same slips model it; that last slip
/// made in it alone fails `the_real_x86_tables_pass`, which proves both
/// tables.
#[derive(Clone, Copy, PartialEq)]
enum PerChannelSlip {
    None,
    HalvesSwapped,
    HoistedSums,
    NoCorrection,
    ChainDropped,
}

fn per_channel_with(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], out: &mut [f32], slip: PerChannelSlip) {
    let pieces = x[0].len() / 8;
    for (t, row) in out.chunks_exact_mut(16).enumerate() {
        for (q, o) in row.iter_mut().enumerate() {
            let mut acc = 0i32;
            for c in 0..pieces {
                if slip == PerChannelSlip::ChainDropped && x.len() == 1 && c % 4 == 3 {
                    continue;
                }
                let (low, high) = (&x[t][8 * c..8 * c + 4], &x[t][8 * c + 4..8 * c + 8]);
                for (j, &b) in panel[64 * c + 4 * q..64 * c + 4 * q + 4].iter().enumerate() {
                    let (lo, hi) = (i32::from(b & 0x0F), i32::from(b >> 4));
                    let (lo, hi) = if slip == PerChannelSlip::HalvesSwapped {
                        (hi, lo)
                    } else {
                        (lo, hi)
                    };
                    acc += i32::from(low[j]) * lo + i32::from(high[j]) * hi;
                }
            }
            let bias = match slip {
                PerChannelSlip::NoCorrection => 0,
                PerChannelSlip::HoistedSums => 8 * sums[0][0],
                _ => 8 * sums[t][0],
            };
            *o = (acc - bias) as f32;
        }
    }
}

/// The per-channel pair tile in plain Rust from [`per_channel_with`].
fn pair_per_channel_with(x: &[&[i8]], sums: &[&[i32]], panels: &[u8], out: &mut [f32], slip: PairSlip) {
    let bytes = panels.len() / 2;
    for h in 0..2 {
        let hp = if slip == PairSlip::FirstPanelTwice { 0 } else { h };
        let ho = if slip == PairSlip::OutputsSwapped { 1 - h } else { h };
        let panel = &panels[hp * bytes..(hp + 1) * bytes];
        per_channel_with(x, sums, panel, &mut out[16 * ho..16 * ho + 16], PerChannelSlip::None);
    }
}

fn pc_pair_first_panel_with(x: &[&[i8]], sums: &[&[i32]], p: &[u8], out: &mut [f32], _: PerChannelSlip) {
    pair_per_channel_with(x, sums, p, out, PairSlip::FirstPanelTwice)
}
fn pc_pair_swapped_with(x: &[&[i8]], sums: &[&[i32]], p: &[u8], out: &mut [f32], _: PerChannelSlip) {
    pair_per_channel_with(x, sums, p, out, PairSlip::OutputsSwapped)
}
fn pc_pair_right_with(x: &[&[i8]], sums: &[&[i32]], p: &[u8], out: &mut [f32], _: PerChannelSlip) {
    pair_per_channel_with(x, sums, p, out, PairSlip::None)
}

qlinear_kernels_core::panel_table!(per_channel pc_pair_first_panel, per_channel_with, PerChannelSlip::None, [8, 4, 1], pair = pc_pair_first_panel_with);
qlinear_kernels_core::panel_table!(per_channel pc_pair_swapped, per_channel_with, PerChannelSlip::None, [8, 4, 1], pair = pc_pair_swapped_with);
qlinear_kernels_core::panel_table!(per_channel pc_pair_right, per_channel_with, PerChannelSlip::None, [8, 4, 1], pair = pc_pair_right_with);

qlinear_kernels_core::panel_table!(per_channel pc_halves_swapped, per_channel_with, PerChannelSlip::HalvesSwapped, [8, 4, 1]);
qlinear_kernels_core::panel_table!(per_channel pc_hoisted_sums, per_channel_with, PerChannelSlip::HoistedSums, [8, 4, 1]);
qlinear_kernels_core::panel_table!(per_channel pc_no_correction, per_channel_with, PerChannelSlip::NoCorrection, [8, 4, 1]);
qlinear_kernels_core::panel_table!(per_channel pc_chain_dropped, per_channel_with, PerChannelSlip::ChainDropped, [8, 4, 1]);
qlinear_kernels_core::panel_table!(per_channel pc_right, per_channel_with, PerChannelSlip::None, [8, 4, 1]);

#[test]
fn the_per_channel_panel_tiles_fail_the_proof_on_their_slips() {
    for (table, why) in [
        (&pc_halves_swapped::TABLE, "odd codes against low nibbles must fail"),
        (&pc_hoisted_sums::TABLE, "the first row's sum for every row must fail"),
        (&pc_no_correction::TABLE, "a bias left in must fail"),
        (
            &pc_chain_dropped::TABLE,
            "a chain left out of the one-row tile must fail",
        ),
    ] {
        first_failure(table, KernelFamily::W4A8).expect(why);
    }
    let right = first_failure(&pc_right::TABLE, KernelFamily::W4A8);
    assert!(right.is_none(), "{right:?}");
}
