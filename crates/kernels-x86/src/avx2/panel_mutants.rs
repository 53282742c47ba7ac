//! The AVX2 tier's panel tiles done wrong (grouped and per channel), each
//! slip in plain Rust or behind the tier's feature check: every mutant must
//! fail the selftest's proof, and the same tile done right must pass.

use std::arch::x86_64::*;

use qlinear_kernels_core::proof::mutants::first_failure;
use qlinear_kernels_core::KernelFamily;

/// The slips a `maddubs` panel tile (`qlinear_kernels_x86`'s AVX2
/// `q4_panels`) can make: the operands of `maddubs` swapped (the codes read
/// as unsigned, the nibbles as signed); the second half of the panel scaled
/// by the first half's scales; the i16 pair sums carried from one group
/// into the next instead of starting each group at zero.
#[derive(Clone, Copy, PartialEq)]
enum Avx2PanelSlip {
    None,
    OperandsSwapped,
    FirstHalfScales,
    PairsCarried,
}

/// `pairs` plus the i16 pair sums of half `half` of group `g` (its 4
/// loads) against the activation row `x`: the loop of every model here;
/// `swapped`: `maddubs`' operands swapped (the codes read as unsigned).
#[target_feature(enable = "avx2")]
fn half_pairs(x: &[i8], panel: &[u8], g: usize, half: usize, mut pairs: __m256i, swapped: bool) -> __m256i {
    let mask = _mm256_set1_epi8(0x0F);
    for c in 4 * g..4 * g + 4 {
        let at = 64 * c + 32 * half;
        assert!(at + 32 <= panel.len() && 8 * c + 8 <= x.len());
        // SAFETY: the 32 bytes at `at` lie in the panel (asserted).
        let v = unsafe { _mm256_loadu_si256(panel.as_ptr().add(at).cast()) };
        let (lo, hi) = (
            _mm256_and_si256(v, mask),
            _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask),
        );
        let q = &x[8 * c..8 * c + 8];
        let e = _mm256_set1_epi32(i32::from_le_bytes([q[0], q[1], q[2], q[3]].map(|b| b as u8)));
        let o = _mm256_set1_epi32(i32::from_le_bytes([q[4], q[5], q[6], q[7]].map(|b| b as u8)));
        let (even, odd) = if swapped {
            (_mm256_maddubs_epi16(e, lo), _mm256_maddubs_epi16(o, hi))
        } else {
            (_mm256_maddubs_epi16(lo, e), _mm256_maddubs_epi16(hi, o))
        };
        pairs = _mm256_add_epi16(pairs, _mm256_add_epi16(even, odd));
    }
    pairs
}

#[target_feature(enable = "avx2,f16c")]
#[allow(clippy::needless_range_loop)] // g also indexes the sums and the scales
fn avx2_panel_with(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[half::f16], out: &mut [f32], slip: Avx2PanelSlip) {
    let groups = sums[0].len();
    assert!(panel.len() == 16 * groups * 16 && s.len() == 16 * groups && out.len() == 16 * x.len());
    let ones = _mm256_set1_epi16(1);
    for (t, row_out) in out.chunks_exact_mut(16).enumerate() {
        for half in 0..2 {
            let mut total = _mm256_setzero_ps();
            let mut pairs = _mm256_setzero_si256();
            for g in 0..groups {
                if slip != Avx2PanelSlip::PairsCarried {
                    pairs = _mm256_setzero_si256();
                }
                pairs = half_pairs(x[t], panel, g, half, pairs, slip == Avx2PanelSlip::OperandsSwapped);
                let at = 16 * g
                    + if slip == Avx2PanelSlip::FirstHalfScales {
                        0
                    } else {
                        8 * half
                    };
                // SAFETY: 8 f16 at 16g (+ 8) lie in s.
                let scale = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(at).cast())) };
                let acc = _mm256_sub_epi32(_mm256_madd_epi16(pairs, ones), _mm256_set1_epi32(8 * sums[t][g]));
                total = _mm256_add_ps(total, _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale));
            }
            // SAFETY: 8 f32 into the half of a chunk of 16.
            unsafe { _mm256_storeu_ps(row_out.as_mut_ptr().add(8 * half), total) };
        }
    }
}

/// [`avx2_panel_with`] behind the feature check a safe tile needs.
fn avx2_panel_checked(
    x: &[&[i8]],
    sums: &[&[i32]],
    panel: &[u8],
    s: &[half::f16],
    out: &mut [f32],
    slip: Avx2PanelSlip,
) {
    assert!(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c"));
    // SAFETY: AVX2 and F16C are present (asserted above).
    unsafe { avx2_panel_with(x, sums, panel, s, out, slip) }
}

qlinear_kernels_core::panel_table!(
    avx2_panel_operands_swapped,
    avx2_panel_checked,
    Avx2PanelSlip::OperandsSwapped,
    [4, 1]
);
qlinear_kernels_core::panel_table!(
    avx2_panel_first_half_scales,
    avx2_panel_checked,
    Avx2PanelSlip::FirstHalfScales,
    [4, 1]
);
qlinear_kernels_core::panel_table!(
    avx2_panel_pairs_carried,
    avx2_panel_checked,
    Avx2PanelSlip::PairsCarried,
    [4, 1]
);
qlinear_kernels_core::panel_table!(avx2_panel_right, avx2_panel_checked, Avx2PanelSlip::None, [4, 1]);

#[test]
fn the_avx2_panel_tiles_fail_the_proof_on_their_slips() {
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c")) {
        eprintln!("skipped: this CPU has no AVX2 and F16C");
        return;
    }
    for (table, why) in [
        (&avx2_panel_operands_swapped::TABLE, "codes read as unsigned must fail"),
        (
            &avx2_panel_first_half_scales::TABLE,
            "rows 8..16 on rows 0..8's scales must fail",
        ),
        (
            &avx2_panel_pairs_carried::TABLE,
            "pair sums carried across groups must fail",
        ),
    ] {
        first_failure(table, KernelFamily::W4A8Grouped).expect(why);
    }
    let right = first_failure(&avx2_panel_right::TABLE, KernelFamily::W4A8Grouped);
    assert!(right.is_none(), "{right:?}");
}

/// The slips of the one-row tile that passes over both halves of a panel
/// group by group (`tile_w4a8_panel_16x1`): the second half's pair sums
/// started from the first half's instead of zero (one register for both),
/// and the group's `8·Σx` taken off the first half only.
#[derive(Clone, Copy, PartialEq)]
enum OnePassSlip {
    None,
    HalvesShared,
    CorrectionOnce,
}

#[target_feature(enable = "avx2,f16c")]
fn one_pass_with(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[half::f16], out: &mut [f32], slip: OnePassSlip) {
    let groups = sums[0].len();
    assert!(panel.len() == 16 * groups * 16 && s.len() == 16 * groups && out.len() == 16 * x.len());
    let ones = _mm256_set1_epi16(1);
    for (t, row_out) in out.chunks_exact_mut(16).enumerate() {
        let mut total = [_mm256_setzero_ps(); 2];
        for g in 0..groups {
            let mut pairs = _mm256_setzero_si256();
            for (half, total) in total.iter_mut().enumerate() {
                if slip != OnePassSlip::HalvesShared {
                    pairs = _mm256_setzero_si256();
                }
                pairs = half_pairs(x[t], panel, g, half, pairs, false);
                let correction = if slip == OnePassSlip::CorrectionOnce && half == 1 {
                    0
                } else {
                    8 * sums[t][g]
                };
                // SAFETY: 8 f16 at 16g + 8h lie in s.
                let scale = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(s.as_ptr().add(16 * g + 8 * half).cast())) };
                let acc = _mm256_sub_epi32(_mm256_madd_epi16(pairs, ones), _mm256_set1_epi32(correction));
                *total = _mm256_add_ps(*total, _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale));
            }
        }
        for (half, total) in total.into_iter().enumerate() {
            // SAFETY: 8 f32 into the half of a chunk of 16.
            unsafe { _mm256_storeu_ps(row_out.as_mut_ptr().add(8 * half), total) };
        }
    }
}

/// [`one_pass_with`] behind the feature check a safe tile needs.
fn one_pass_checked(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[half::f16], out: &mut [f32], slip: OnePassSlip) {
    assert!(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c"));
    // SAFETY: AVX2 and F16C are present (asserted above).
    unsafe { one_pass_with(x, sums, panel, s, out, slip) }
}

qlinear_kernels_core::panel_table!(one_pass_halves_shared, one_pass_checked, OnePassSlip::HalvesShared, [1]);
qlinear_kernels_core::panel_table!(
    one_pass_correction_once,
    one_pass_checked,
    OnePassSlip::CorrectionOnce,
    [1]
);
qlinear_kernels_core::panel_table!(one_pass_right, one_pass_checked, OnePassSlip::None, [1]);

#[test]
fn the_avx2_one_pass_panel_tile_fails_the_proof_on_its_slips() {
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("f16c")) {
        eprintln!("skipped: this CPU has no AVX2 and F16C");
        return;
    }
    first_failure(&one_pass_halves_shared::TABLE, KernelFamily::W4A8Grouped)
        .expect("rows 8..16's pair sums on top of rows 0..8's must fail");
    first_failure(&one_pass_correction_once::TABLE, KernelFamily::W4A8Grouped)
        .expect("rows 8..16 without the group's 8·Σx must fail");
    let right = first_failure(&one_pass_right::TABLE, KernelFamily::W4A8Grouped);
    assert!(right.is_none(), "{right:?}");
}

/// The slips an AVX2 per-channel panel tile (`maddubs` pair sums in i16)
/// can make, modelled in plain Rust with the i16 lanes' wrapping: the pair
/// sums carried over two groups before `madd` widens them (64 columns of
/// +127 against nibble 15 pass 32 767 and wrap); and rows 8..16 stored
/// over rows 0..8 (the second half's store at the first half's place).
#[derive(Clone, Copy, PartialEq)]
enum Avx2PerChannelSlip {
    None,
    PairsCarried,
    HalvesOverlaid,
}

fn avx2_per_channel_with(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], out: &mut [f32], slip: Avx2PerChannelSlip) {
    let pieces = x[0].len() / 8;
    let flush = if slip == Avx2PerChannelSlip::PairsCarried { 8 } else { 4 };
    for (t, row) in out.chunks_exact_mut(16).enumerate() {
        for q in 0..16 {
            let (mut acc, mut pairs) = (0i32, [0i16; 2]);
            for c in 0..pieces {
                let (even, odd) = (&x[t][8 * c..8 * c + 4], &x[t][8 * c + 4..8 * c + 8]);
                let b = &panel[64 * c + 4 * q..64 * c + 4 * q + 4];
                for (h, pair) in pairs.iter_mut().enumerate() {
                    // one i16 lane: two bytes' low nibbles against the even
                    // codes, their high nibbles against the odd ones
                    let sum: i32 = (2 * h..2 * h + 2)
                        .map(|j| i32::from(b[j] & 0x0F) * i32::from(even[j]) + i32::from(b[j] >> 4) * i32::from(odd[j]))
                        .sum();
                    *pair = pair.wrapping_add(sum as i16);
                }
                if (c + 1) % flush == 0 || c + 1 == pieces {
                    acc += i32::from(pairs[0]) + i32::from(pairs[1]);
                    pairs = [0; 2];
                }
            }
            let at = if slip == Avx2PerChannelSlip::HalvesOverlaid {
                q % 8
            } else {
                q
            };
            row[at] = (acc - 8 * sums[t][0]) as f32;
        }
    }
}

qlinear_kernels_core::panel_table!(
    per_channel avx2_pc_pairs_carried,
    avx2_per_channel_with,
    Avx2PerChannelSlip::PairsCarried,
    [4, 1]
);
qlinear_kernels_core::panel_table!(
    per_channel avx2_pc_halves_overlaid,
    avx2_per_channel_with,
    Avx2PerChannelSlip::HalvesOverlaid,
    [4, 1]
);
qlinear_kernels_core::panel_table!(
    per_channel avx2_pc_right,
    avx2_per_channel_with,
    Avx2PerChannelSlip::None,
    [4, 1]
);

#[test]
fn the_avx2_per_channel_panel_tiles_fail_the_proof_on_their_slips() {
    first_failure(&avx2_pc_pairs_carried::TABLE, KernelFamily::W4A8)
        .expect("pair sums carried across two groups must fail");
    first_failure(&avx2_pc_halves_overlaid::TABLE, KernelFamily::W4A8)
        .expect("rows 8..16 stored over rows 0..8 must fail");
    let right = first_failure(&avx2_pc_right::TABLE, KernelFamily::W4A8);
    assert!(right.is_none(), "{right:?}");
}
