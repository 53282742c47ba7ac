//! AVX-512 VNNI W8A8: `vpdpbusd` multiplies u8 by i8, so it gets `|x|` and
//! `w · sign(x)` (both within [-127, 127]: -128 is never a code) and adds each
//! quad of exact products straight into an i32 lane.

use std::arch::x86_64::*;
use std::ops::Range;

use qlinear_kernels_scalar::{ActivationsQ8, OutputTile};
use qlinear_quant_recipe::QuantizedMatrix;

use super::hsum_epi32;

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

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn gemm_w8a8(x: &ActivationsQ8<'_>, w: &QuantizedMatrix, rows: Range<usize>, y: &mut OutputTile<'_>) {
    x.check();
    y.check(x.m, rows.len());
    assert!(rows.end <= w.n() && w.k() == x.k, "W8A8 shapes");
    let s = w.scales();
    let mut r = rows.start;
    while r < rows.end {
        let j = r - rows.start;
        if r + ROWS <= rows.end {
            let wr: [&[i8]; ROWS] = std::array::from_fn(|q| w.row(r + q));
            for i in 0..x.m {
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
