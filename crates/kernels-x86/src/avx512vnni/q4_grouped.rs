//! AVX-512 VNNI grouped W4A8 for groups that are a multiple of 32 columns
//! (Q4_0's 32 among them): four weight rows per 512-bit register, one
//! 128-bit lane each. A 32-column sub-block is 16 packed bytes per row, so one
//! register holds the same sub-block of 4 rows; one `vpdpbusd` per nibble half
//! (against the activations' even or odd columns, broadcast to every lane)
//! leaves each row's partial sums in its own lane. Per group, the 4 rows' exact
//! i32 sums become one `__m128i`, and the spec's per-row float step
//! `sum += (dot − 8·Σx) as f32 · scale` runs on the 4 rows at once: the same
//! operations lane by lane, so the same bits. Other group sizes use AVX2's
//! kernel.

use std::arch::x86_64::*;
use std::ops::Range;

use qlinear_kernels_scalar::layout::split_even_odd_i8;
use qlinear_kernels_scalar::{ActivationsQ8, OutputTile};
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrixQ4};

use super::SweepPrefetch;
use crate::avx2;
use crate::avx2::q4::scales_to_f32;

/// Weight rows per register (one per 128-bit lane).
const QUAD: usize = 4;
/// Columns per sub-block: 16 packed bytes per row.
const SUB: usize = 32;
/// Activation rows per tile when M >= 4.
const TILE_M: usize = 4;

/// Row `r`'s 4 partial sums sit in lane `r`: their total, for the 4 rows.
#[inline]
#[target_feature(enable = "avx512f")]
fn lane_totals(acc: __m512i) -> __m128i {
    // integer addition: any order is exact (wrapping, and the true sum fits)
    let s = _mm512_add_epi32(acc, _mm512_shuffle_epi32::<0b01_00_11_10>(acc));
    let s = _mm512_add_epi32(s, _mm512_shuffle_epi32::<0b10_11_00_01>(s));
    let firsts = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm512_castsi512_si128(_mm512_permutexvar_epi32(firsts, s))
}

/// `y[t][q] = (Σ_g (dot − 8·Σx_g) as f32 · s_{q,g}) · x_scale[t]` for 4 rows ×
/// `MI` activation rows, in the spec's order per output. `xs[t]` is activation
/// row `t` split even/odd per 32 columns; `sums[t]` its per-group sums;
/// `sf[g]` the 4 rows' f32 scales of group `g`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn quad_tile<const MI: usize>(
    xs: [&[i8]; MI],
    sums: [&[i32]; MI],
    w: [&[u8]; QUAD],
    sf: &[[f32; QUAD]],
    g: usize,
    (next, sweep): (usize, (usize, usize)),
) -> [__m128; MI] {
    let groups = sf.len();
    let k = groups * g;
    assert!(
        g.is_multiple_of(SUB)
            && w.iter().all(|w| w.len() >= k / 2)
            && xs.iter().all(|x| x.len() >= k)
            && sums.iter().all(|s| s.len() >= groups)
    );
    let mut sweep = SweepPrefetch::new(sweep);
    let mask = _mm512_set1_epi8(0x0F);
    let mut total = [_mm_setzero_ps(); MI];
    for gi in 0..groups {
        let mut acc = [_mm512_setzero_si512(); MI];
        for sub in 0..g / SUB {
            let col = gi * g + sub * SUB;
            let b = col / 2;
            if b.is_multiple_of(64) && sweep.take() {
                for row in w {
                    // A hint: an address past the matrix is harmless.
                    _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(next + b).cast());
                }
            }
            // col + 32 <= k (asserted above), so:
            // SAFETY: each row's 16 bytes at b = col / 2 lie within its k / 2,
            // and each activation row's 32 bytes at col within its k.
            unsafe {
                let quad = _mm512_inserti32x4::<3>(
                    _mm512_inserti32x4::<2>(
                        _mm512_inserti32x4::<1>(
                            _mm512_castsi128_si512(_mm_loadu_si128(w[0].as_ptr().add(b).cast())),
                            _mm_loadu_si128(w[1].as_ptr().add(b).cast()),
                        ),
                        _mm_loadu_si128(w[2].as_ptr().add(b).cast()),
                    ),
                    _mm_loadu_si128(w[3].as_ptr().add(b).cast()),
                );
                let lo = _mm512_and_si512(quad, mask);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(quad), mask);
                for t in 0..MI {
                    let xe = _mm512_broadcast_i32x4(_mm_loadu_si128(xs[t].as_ptr().add(col).cast()));
                    let xo = _mm512_broadcast_i32x4(_mm_loadu_si128(xs[t].as_ptr().add(col + 16).cast()));
                    acc[t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[t], lo, xe), hi, xo);
                }
            }
        }
        // SAFETY: gi < groups = sf.len(): a 16-byte load of sf[gi].
        let scale = unsafe { _mm_loadu_ps(sf[gi].as_ptr()) };
        for t in 0..MI {
            let dot = _mm_sub_epi32(lane_totals(acc[t]), _mm_set1_epi32(8i32.wrapping_mul(sums[t][gi])));
            total[t] = _mm_add_ps(total[t], _mm_mul_ps(_mm_cvtepi32_ps(dot), scale));
        }
    }
    total
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,f16c")]
pub(crate) fn gemm_w4a8_grouped(
    x: &ActivationsQ8<'_>,
    w: &QuantizedMatrixQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    let Q4Scales::Grouped { group, scales } = w.scales() else {
        panic!("gemm_w4a8_grouped needs group scales")
    };
    let g = *group;
    if !g.is_multiple_of(SUB) {
        return avx2::gemm::gemm_w4a8_grouped(x, w, rows, y);
    }
    x.check();
    y.check(x.m, rows.len());
    let k = x.k;
    assert!(
        rows.end <= w.n() && w.k() == k && x.sum_group == g,
        "W4A8 grouped shapes"
    );
    let groups = k / g;
    let split: Vec<Vec<i8>> = (0..x.m).map(|i| split_even_odd_i8(x.row(i), SUB)).collect();
    let (mut row_sf, mut sf) = (Vec::with_capacity(groups), vec![[0f32; QUAD]; groups]);
    let tiles = x.m / TILE_M;
    let passes = tiles + x.m % TILE_M;
    let mut r = rows.start;
    while r < rows.end {
        let real = (rows.end - r).min(QUAD);
        // the last block repeats its final row to fill the register
        let wr: [&[u8]; QUAD] = std::array::from_fn(|q| w.row_packed(r + q.min(real - 1)));
        for q in 0..QUAD {
            let rq = r + q.min(real - 1);
            scales_to_f32(&scales[rq * groups..(rq + 1) * groups], &mut row_sf);
            for (dst, &v) in sf.iter_mut().zip(&row_sf) {
                dst[q] = v;
            }
        }
        let next = QUAD * w.row_packed(r).len();
        let mut emit = |i: usize, total: __m128| {
            let mut out = [0f32; QUAD];
            // SAFETY: a 16-byte store into a 4-float local array.
            unsafe { _mm_storeu_ps(out.as_mut_ptr(), total) };
            for (q, &v) in out.iter().enumerate().take(real) {
                y.set(i, r - rows.start + q, v * x.scales[i]);
            }
        };
        for tile in 0..tiles {
            let i0 = tile * TILE_M;
            let xs: [&[i8]; TILE_M] = std::array::from_fn(|t| &split[i0 + t][..]);
            let sums: [&[i32]; TILE_M] = std::array::from_fn(|t| x.row_sums(i0 + t));
            let out = quad_tile::<TILE_M>(xs, sums, wr, &sf, g, (next, (tile, passes)));
            for (t, &total) in out.iter().enumerate() {
                emit(i0 + t, total);
            }
        }
        for i in tiles * TILE_M..x.m {
            let pass = tiles + (i - tiles * TILE_M);
            let out = quad_tile::<1>([&split[i][..]], [x.row_sums(i)], wr, &sf, g, (next, (pass, passes)));
            emit(i, out[0]);
        }
        r += QUAD;
    }
}
