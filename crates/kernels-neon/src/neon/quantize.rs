//! NEON activation quantizer, byte for byte `quantize_row_q8`: `max|x|` on
//! the bits of `|x|` (`abs_max_bits`: exact in any order, and NaN or ±∞ found
//! in the same pass); the same f32 division; `frintn` rounds to nearest even.

use std::arch::aarch64::*;

use qlinear_kernels_core::{abs_max_bits, q8_scale_from_abs_max_bits, SCALAR};
use qlinear_quant_recipe::Q8_MAX_ABS;

#[target_feature(enable = "neon")]
pub(crate) fn quantize_row_q8(x: &[f32], codes: &mut [i8]) -> Option<f32> {
    assert_eq!(x.len(), codes.len());
    let k = x.len();
    let abs_mask = vdupq_n_u32(0x7FFF_FFFF);
    let mut vmax = vdupq_n_u32(0);
    let mut c = 0;
    while c + 4 <= k {
        // SAFETY: c + 4 <= k = x.len().
        let v = unsafe { vld1q_u32(x.as_ptr().add(c).cast()) };
        vmax = vmaxq_u32(vmax, vandq_u32(v, abs_mask));
        c += 4;
    }
    let scale = q8_scale_from_abs_max_bits(abs_max_bits(vmaxvq_u32(vmax), &x[c..]))?;
    if scale == 0.0 {
        codes.fill(0);
        return Some(0.0);
    }
    let lim = f32::from(Q8_MAX_ABS);
    let (vs, hi, lo) = (vdupq_n_f32(scale), vdupq_n_f32(lim), vdupq_n_f32(-lim));
    let q4 = |at: usize| {
        // SAFETY: callers pass at + 4 <= k = x.len().
        let v = unsafe { vld1q_f32(x.as_ptr().add(at)) };
        vcvtq_s32_f32(vminq_f32(vmaxq_f32(vrndnq_f32(vdivq_f32(v, vs)), lo), hi))
    };
    let mut c = 0;
    while c + 8 <= k {
        let w16 = vcombine_s16(vmovn_s32(q4(c)), vmovn_s32(q4(c + 4)));
        // SAFETY: c + 8 <= k = codes.len(); an 8-byte store.
        unsafe { vst1_s8(codes.as_mut_ptr().add(c), vmovn_s16(w16)) };
        c += 8;
    }
    for (o, &v) in codes[c..].iter_mut().zip(&x[c..]) {
        *o = (v / scale).round_ties_even().clamp(-lim, lim) as i8;
    }
    Some(scale)
}

/// The activation codes' sums per `group` columns (`KernelTable::group_sums`,
/// the integers that cancel the Q4 bias), exact, as the scalar sums. Groups
/// of 32 are two 16-byte loads each, added pairwise into 8 i16 lanes
/// (`saddlp`, `sadalp`; a lane holds 4 codes); four groups' lanes are
/// reduced together by three `addp` (a lane then holds 16 codes, at most
/// 2 032) and one widening `saddlp` into 4 i32 sums, stored at once: a
/// 576-code row's 18 groups in about 660 fewer instructions than the
/// scalar sums (a grouped W4A8 decode call at 192 × 576 under qemu, 2 %).
/// Any other group (per channel: the whole row) takes the scalar tier's
/// sums, which LLVM vectorizes for NEON as it is: a loop of these loads
/// widened every 64 was no fewer instructions.
#[target_feature(enable = "neon")]
pub(crate) fn group_sums(codes: &[i8], group: usize, sums: &mut [i32]) {
    assert!(group > 0 && codes.len() == group * sums.len(), "group sums shape");
    if group != 32 {
        return (SCALAR.group_sums)(codes, group, sums);
    }
    // the 8 i16 lanes of a group of 32's codes, two a lane per load
    let pairs32 = |g: &[i8]| {
        assert!(g.len() >= 32);
        // SAFETY: 32 codes lie in `g` (asserted); vld1q has no alignment
        // requirement.
        let (a, b) = unsafe { (vld1q_s8(g.as_ptr()), vld1q_s8(g.as_ptr().add(16))) };
        vpadalq_s8(vpaddlq_s8(a), b)
    };
    let done = 4 * (sums.len() / 4);
    for (four, g) in sums[..done].chunks_exact_mut(4).zip(codes.chunks_exact(128)) {
        let (a, b, c, d) = (pairs32(g), pairs32(&g[32..]), pairs32(&g[64..]), pairs32(&g[96..]));
        // each group's 8 lanes to 4, to 2 (a: 0–1, b: 2–3, c: 4–5, d: 6–7),
        // then widened in pairs: one i32 a group, in order
        let s = vpaddlq_s16(vpaddq_s16(vpaddq_s16(a, b), vpaddq_s16(c, d)));
        // SAFETY: a 16-byte store into `four`'s 4 sums.
        unsafe { vst1q_s32(four.as_mut_ptr(), s) };
    }
    for (s, g) in sums[done..].iter_mut().zip(codes[32 * done..].chunks_exact(32)) {
        *s = i32::from(vaddvq_s16(pairs32(g)));
    }
}

#[cfg(test)]
mod tests {
    use qlinear_kernels_core::SCALAR;

    /// The sums against the scalar tier's at every group the frame asks for
    /// (32, per channel) and others, over rows of extreme and mixed codes
    /// up to 4 097 long, and 1 to 9 groups of 32 (a step of four and its
    /// rest).
    #[test]
    fn group_sums_match_the_scalar_tier() {
        let rows: Vec<Vec<i8>> = [1usize, 15, 16, 17, 31, 32, 33, 127, 1024, 1040, 2063, 4097]
            .iter()
            .flat_map(|&k| {
                [
                    vec![127i8; k],
                    vec![-127i8; k],
                    (0..k).map(|i| ((i * 37 % 255) as i32 - 127) as i8).collect(),
                ]
            })
            .collect();
        for row in &rows {
            let k = row.len();
            let mut groups = vec![k];
            groups.extend([1, 2, 16, 32].iter().filter(|&&g| k.is_multiple_of(g)));
            for g in groups {
                let (mut want, mut got) = (vec![0; k / g], vec![0; k / g]);
                (SCALAR.group_sums)(row, g, &mut want);
                // SAFETY: every aarch64 CPU has ASIMD.
                unsafe { super::group_sums(row, g, &mut got) };
                assert_eq!(got, want, "k = {k}, group {g}");
            }
        }
        for groups in 1..=9 {
            let codes: Vec<i8> = (0..32 * groups).map(|i| ((i * 53 % 255) as i32 - 127) as i8).collect();
            let (mut want, mut got) = (vec![0; groups], vec![0; groups]);
            (SCALAR.group_sums)(&codes, 32, &mut want);
            // SAFETY: every aarch64 CPU has ASIMD.
            unsafe { super::group_sums(&codes, 32, &mut got) };
            assert_eq!(got, want, "{groups} groups of 32");
        }
    }
}
