//! AVX-512 VNNI W8A8: `vpdpbusd` multiplies u8 by i8, so it gets `|x|` and
//! `w · sign(x)` (both within [-127, 127]: -128 is never a code) and adds each
//! quad of exact products straight into an i32 lane.

use std::arch::x86_64::*;

use super::{hsum_epi32, AlignedRows, SweepPrefetch};

const ROWS: usize = 4;

/// Loads up to 64 bytes at `c`, zero past the end of `v` (masked load: the
/// masked-off bytes are never touched).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn load64(v: &[i8], c: usize) -> __m512i {
    let rem = v.len() - c;
    let mask: u64 = if rem >= 64 { u64::MAX } else { (1u64 << rem) - 1 };
    // SAFETY: only the `rem` bytes from c, all inside `v`, are read.
    unsafe { _mm512_maskz_loadu_epi8(mask, v.as_ptr().add(c)) }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_rows<const R: usize>(x: &[i8], w: [&[i8]; R]) -> [i32; R] {
    assert!(w.iter().all(|w| w.len() == x.len()));
    let mut acc = [_mm512_setzero_si512(); R];
    let zero = _mm512_setzero_si512();
    let mut c = 0;
    while c < x.len() {
        let xv = load64(x, c);
        let ax = _mm512_abs_epi8(xv);
        let neg = _mm512_movepi8_mask(xv);
        for r in 0..R {
            // prefetch ahead on each row's stream (a hint: past the row is harmless)
            _mm_prefetch::<_MM_HINT_T0>(w[r].as_ptr().wrapping_add(c + 1024).cast());
            let wv = load64(w[r], c);
            acc[r] = _mm512_dpbusd_epi32(acc[r], ax, _mm512_mask_sub_epi8(wv, neg, zero, wv));
        }
        c += 64;
    }
    std::array::from_fn(|r| hsum_epi32(acc[r]))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn dot_i8_i8(a: &[i8], b: &[i8]) -> i32 {
    dot_rows::<1>(a, [b])[0]
}

/// Activation rows per tile when M >= 4.
const TILE_M: usize = 4;

/// `Σ (w + 128)·x` (wrapping i32) for `R` rows × `MI` activation rows: the
/// batch micro-kernel. Biasing the weights to u8 once per load (`xor 0x80`)
/// lets every activation row use them as `vpdpbusd`'s unsigned operand, where
/// the M = 1 kernel's sign trick would redo `w · sign(x)` per activation row.
/// The caller subtracts `128·Σx`; wrapping is exact because the true sum fits
/// in i32 (`k <= MAX_K_W8A8`). Prefetching by sweep (`phase` of `passes`) as
/// in the W4A8 tile ([`SweepPrefetch`]): each sweep fetches its share of the
/// next block, `next` bytes on.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn dot_tile_biased<const R: usize, const MI: usize>(
    x: [&[i8]; MI],
    w: [&[i8]; R],
    next: usize,
    sweep: (usize, usize),
) -> [[i32; R]; MI] {
    let mut sweep = SweepPrefetch::new(sweep);
    let k = x[0].len();
    assert!(w.iter().all(|w| w.len() == k) && x.iter().all(|x| x.len() == k));
    let bias = _mm512_set1_epi8(-128);
    let mut acc = [[_mm512_setzero_si512(); R]; MI];
    let mut c = 0;
    while c < k {
        let mine = sweep.take();
        let mut wv = [_mm512_setzero_si512(); R];
        for r in 0..R {
            if mine {
                // A hint: an address past the matrix is harmless.
                _mm_prefetch::<_MM_HINT_T1>(w[r].as_ptr().wrapping_add(next + c).cast());
            }
            // zero bytes past the row's end bias to 128, against zero activations
            wv[r] = _mm512_xor_si512(load64(w[r], c), bias);
        }
        for i in 0..MI {
            let xv = load64(x[i], c);
            for r in 0..R {
                acc[i][r] = _mm512_dpbusd_epi32(acc[i][r], wv[r], xv);
            }
        }
        c += 64;
    }
    std::array::from_fn(|i| std::array::from_fn(|r| hsum_epi32(acc[i][r])))
}

/// W8A8 over output rows: 4 × 4 tiles of weight rows × activation rows while
/// M allows (the batch regime), then the M = 1 kernel's 4-row dot per
/// remaining activation row; single rows at the end.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn gemm_w8a8(
    x: &qlinear_kernels_scalar::ActivationsQ8<'_>,
    w: &qlinear_quant_recipe::QuantizedMatrix,
    rows: std::ops::Range<usize>,
    y: &mut qlinear_kernels_scalar::OutputTile<'_>,
) {
    x.check();
    y.check(x.m, rows.len());
    assert!(rows.end <= w.n() && w.k() == x.k, "W8A8 shapes");
    let s = w.scales();
    let tiled = x.m / TILE_M * TILE_M;
    let aligned = AlignedRows::new(tiled, x.k, |i, dst| dst.copy_from_slice(x.row(i)));
    // 128·Σx per tiled activation row (wrapping: the product can pass i32)
    let bias_sums: Vec<i32> = (0..tiled)
        .map(|i| x.row(i).iter().map(|&v| i32::from(v)).sum::<i32>().wrapping_mul(128))
        .collect();
    let mut r = rows.start;
    while r < rows.end {
        let j = r - rows.start;
        if r + ROWS <= rows.end {
            let wr: [&[i8]; ROWS] = std::array::from_fn(|q| w.row(r + q));
            for i0 in (0..tiled).step_by(TILE_M) {
                let xr: [&[i8]; TILE_M] = std::array::from_fn(|t| aligned.row(i0 + t));
                let phase = (i0 / TILE_M, tiled / TILE_M);
                let acc = dot_tile_biased::<ROWS, TILE_M>(xr, wr, ROWS * x.k, phase);
                for t in 0..TILE_M {
                    for q in 0..ROWS {
                        let dot = acc[t][q].wrapping_sub(bias_sums[i0 + t]);
                        y.set(i0 + t, j + q, dot as f32 * (x.scales[i0 + t] * s[r + q]));
                    }
                }
            }
            for i in tiled..x.m {
                let acc = dot_rows::<ROWS>(x.row(i), wr);
                for q in 0..ROWS {
                    y.set(i, j + q, acc[q] as f32 * (x.scales[i] * s[r + q]));
                }
            }
            r += ROWS;
        } else {
            for i in 0..x.m {
                let acc = dot_rows::<1>(x.row(i), [w.row(r)])[0];
                y.set(i, j, acc as f32 * (x.scales[i] * s[r]));
            }
            r += 1;
        }
    }
}
