//! AVX2 W4A8. Biased nibbles are unsigned (0..15), so `maddubs(nibble, x)` is
//! exact (a pair is at most 2·15·127 = 3810) and the bias costs one
//! `−8·Σx` per group. Activations are split even/odd per 64 columns once per
//! call, so 32 packed bytes give the 32 even columns (low nibbles) and the 32
//! odd columns (high nibbles) of a block with one mask and one shift.

use std::arch::x86_64::*;
use std::ops::Range;

use half::f16;
use qlinear_kernels_scalar::{dot_i8_q4_biased as tail_biased, ActivationsQ8, OutputTile};
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrixQ4};

use super::hsum_epi32;
use qlinear_kernels_scalar::layout::split_even_odd_i8;

const ROWS: usize = 4;
/// Columns per block: 32 packed bytes.
pub(crate) const BLOCK: usize = 64;

/// The 8 i32 lanes of `Σ x·b` over one 64-column block for `R` rows: lanes 0-3
/// cover columns 0..32 of the block, lanes 4-7 columns 32..64.
#[inline]
#[target_feature(enable = "avx2")]
fn block_rows<const R: usize>(xs: &[i8], w: [&[u8]; R], blk: usize) -> [__m256i; R] {
    assert!(xs.len() >= (blk + 1) * BLOCK && w.iter().all(|w| w.len() >= (blk + 1) * BLOCK / 2));
    let mask = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    // SAFETY: the assert above bounds every load; unaligned loads.
    unsafe {
        let xe = _mm256_loadu_si256(xs.as_ptr().add(blk * BLOCK).cast());
        let xo = _mm256_loadu_si256(xs.as_ptr().add(blk * BLOCK + 32).cast());
        std::array::from_fn(|r| {
            // prefetch ahead on each row's stream (a hint: past the row is harmless)
            _mm_prefetch::<_MM_HINT_T0>(w[r].as_ptr().wrapping_add(blk * BLOCK / 2 + 768).cast());
            let b = _mm256_loadu_si256(w[r].as_ptr().add(blk * BLOCK / 2).cast());
            let lo = _mm256_and_si256(b, mask);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(b), mask);
            // each maddubs pair <= 3810, their sum <= 7620: no i16 saturation
            let p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
            _mm256_madd_epi16(p, ones)
        })
    }
}

/// `Σ x·b` (biased, uncorrected) of `R` packed rows against one activation row.
#[inline]
#[target_feature(enable = "avx2")]
fn dot_rows_biased<const R: usize>(xs: &[i8], x: &[i8], w: [&[u8]; R]) -> [i32; R] {
    let blocks = x.len() / BLOCK;
    let mut acc = [_mm256_setzero_si256(); R];
    for blk in 0..blocks {
        let v = block_rows::<R>(xs, w, blk);
        for r in 0..R {
            acc[r] = _mm256_add_epi32(acc[r], v[r]);
        }
    }
    let c = blocks * BLOCK;
    std::array::from_fn(|r| hsum_epi32(acc[r]) + tail_biased(&x[c..], &w[r][c / 2..]))
}

#[target_feature(enable = "avx2")]
pub(crate) fn dot_i8_q4(x: &[i8], packed: &[u8]) -> i32 {
    let xs = split_even_odd_i8(x, BLOCK);
    let sum: i32 = x.iter().map(|&v| i32::from(v)).sum();
    dot_rows_biased::<1>(&xs, x, [packed])[0] - 8 * sum
}

#[target_feature(enable = "avx2")]
pub(crate) fn gemm_w4a8(x: &ActivationsQ8<'_>, w: &QuantizedMatrixQ4, rows: Range<usize>, y: &mut OutputTile<'_>) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::PerChannel(s) = w.scales() else {
        panic!("gemm_w4a8 needs per-channel scales")
    };
    assert!(
        rows.end <= w.n() && w.k() == x.k && (x.sum_group == x.k || x.k == 0),
        "W4A8 shapes"
    );
    let split: Vec<Vec<i8>> = (0..x.m).map(|i| split_even_odd_i8(x.row(i), BLOCK)).collect();
    let mut r = rows.start;
    while r < rows.end {
        let j = r - rows.start;
        let n = if r + ROWS <= rows.end { ROWS } else { 1 };
        for i in 0..x.m {
            let correction = 8 * x.row_sums(i)[0];
            if n == ROWS {
                let wr: [&[u8]; ROWS] = std::array::from_fn(|q| w.row_packed(r + q));
                let acc = dot_rows_biased::<ROWS>(&split[i], x.row(i), wr);
                for q in 0..ROWS {
                    y.set(i, j + q, (acc[q] - correction) as f32 * (x.scales[i] * s[r + q]));
                }
            } else {
                let acc = dot_rows_biased::<1>(&split[i], x.row(i), [w.row_packed(r)])[0] - correction;
                y.set(i, j, acc as f32 * (x.scales[i] * s[r]));
            }
        }
        r += n;
    }
}

/// Converts one row's f16 group scales to f32 with F16C (exact).
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn scales_to_f32(src: &[f16], dst: &mut Vec<f32>) {
    dst.clear();
    dst.resize(src.len(), 0.0);
    let mut c = 0;
    while c + 8 <= src.len() {
        // SAFETY: c + 8 <= src.len() = dst.len(); f16 is 2 bytes (repr(transparent) u16).
        unsafe {
            let h = _mm_loadu_si128(src.as_ptr().add(c).cast());
            _mm256_storeu_ps(dst.as_mut_ptr().add(c), _mm256_cvtph_ps(h));
        }
        c += 8;
    }
    for (d, s) in dst[c..].iter_mut().zip(&src[c..]) {
        *d = f32::from(*s);
    }
}

/// The exact i32 sums `Σ x·b` (biased, uncorrected) of 8 consecutive groups
/// of 32 columns (4 blocks) of one row, in natural group order: each block's
/// madd vector holds its two groups in lanes 0-3 and 4-7, and three `hadd`s
/// reduce the four blocks to `[g0, g2, g4, g6 | g1, g3, g5, g7]`, which one
/// permute puts in order (integer sums: any order is exact).
#[inline]
#[target_feature(enable = "avx2")]
fn eight_groups_of_32(v: [__m256i; 4]) -> __m256i {
    let h01 = _mm256_hadd_epi32(v[0], v[1]);
    let h23 = _mm256_hadd_epi32(v[2], v[3]);
    let h = _mm256_hadd_epi32(h01, h23);
    _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// One output of W4A8 grouped: `Σ_g (acc_g as f32) * s_g` in increasing g
/// (not yet times `x_scale`). `acc_g = Σ x·b − 8·sums[g]`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn grouped_sum(xs: &[i8], x: &[i8], sums: &[i32], w: &[u8], g: usize, sf: &[f32]) -> f32 {
    let groups = sums.len();
    let mut sum = 0f32;
    let mut gi = 0;
    if g == 32 {
        // 8 groups (256 columns, 4 blocks) per step, all arithmetic per group
        // exactly as the scalar form: one i32, one conversion, one product
        while gi + 8 <= groups && (gi + 8) * 32 <= x.len() / BLOCK * BLOCK {
            let b0 = gi / 2;
            let v: [__m256i; 4] = std::array::from_fn(|j| block_rows::<1>(xs, [w], b0 + j)[0]);
            assert!(gi + 8 <= sums.len() && gi + 8 <= sf.len());
            // SAFETY: bounded by the assert above; unaligned loads.
            let (s8, f8) = unsafe {
                (
                    _mm256_loadu_si256(sums.as_ptr().add(gi).cast()),
                    _mm256_loadu_ps(sf.as_ptr().add(gi)),
                )
            };
            let acc = _mm256_sub_epi32(eight_groups_of_32(v), _mm256_slli_epi32::<3>(s8));
            let mut p = [0f32; 8];
            // SAFETY: an 8-float store into a local array.
            unsafe { _mm256_storeu_ps(p.as_mut_ptr(), _mm256_mul_ps(_mm256_cvtepi32_ps(acc), f8)) };
            for v in p {
                sum += v;
            }
            gi += 8;
        }
    }
    while gi < groups {
        let (c0, c1) = (gi * g, (gi + 1) * g);
        let acc = if g.is_multiple_of(BLOCK) && c1 <= x.len() / BLOCK * BLOCK {
            let mut v = _mm256_setzero_si256();
            for b in c0 / BLOCK..c1 / BLOCK {
                v = _mm256_add_epi32(v, block_rows::<1>(xs, [w], b)[0]);
            }
            hsum_epi32(v)
        } else {
            tail_biased(&x[c0..c1], &w[c0 / 2..c1 / 2])
        };
        sum += (acc - 8 * sums[gi]) as f32 * sf[gi];
        gi += 1;
    }
    sum
}

/// W4A8 grouped. Groups of 32 are reduced eight at a time from 64-column
/// blocks; groups that are whole blocks accumulate a vector per group; other
/// sizes use the per-group scalar form. Either way `acc_g` is the exact i32
/// and the output is `Σ_g (acc_g as f32) * s_g` in increasing g, times `x_scale`.
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn gemm_w4a8_grouped(
    x: &ActivationsQ8<'_>,
    w: &QuantizedMatrixQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::Grouped { group, scales } = w.scales() else {
        panic!("gemm_w4a8_grouped needs group scales")
    };
    let (g, k) = (*group, x.k);
    assert!(
        rows.end <= w.n() && w.k() == k && x.sum_group == g,
        "W4A8 grouped shapes"
    );
    let groups = k / g;
    let split: Vec<Vec<i8>> = (0..x.m).map(|i| split_even_odd_i8(x.row(i), BLOCK)).collect();
    let mut sf = Vec::with_capacity(groups);
    for (j, r) in rows.clone().enumerate() {
        scales_to_f32(&scales[r * groups..(r + 1) * groups], &mut sf);
        let wr = w.row_packed(r);
        for i in 0..x.m {
            let sum = grouped_sum(&split[i], x.row(i), &x.row_sums(i)[..groups], wr, g, &sf);
            y.set(i, j, sum * x.scales[i]);
        }
    }
}
