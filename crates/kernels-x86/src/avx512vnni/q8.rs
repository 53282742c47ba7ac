//! AVX-512 VNNI W8A8: `vpdpbusd` multiplies u8 by i8, so it gets `|x|` and
//! `w · sign(x)` (both within [-127, 127]: -128 is never a code) and adds each
//! quad of exact products straight into an i32 lane.

use std::arch::x86_64::*;

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

gemm_w8a8_over_rows!("avx512f,avx512bw,avx512vnni");
