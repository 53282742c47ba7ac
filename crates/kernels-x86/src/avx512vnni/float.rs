//! AVX-512 W4A16 (per channel and grouped): four weight rows per 512-bit
//! register. Each row owns 4 lanes of two accumulators, its even spec lanes
//! `[l0, l2, l4, l6]` in one and its odd lanes `[l1, l3, l5, l7]` in the other
//! — the order low and high nibbles come out of 4 packed bytes — so one
//! `add` advances 4 rows' lanes by one chunk of 8 columns, in the spec's
//! order. A 16-entry `vpermps` maps each nibble to the float `code − 8`
//! directly (it reads only an index's low 4 bits, so no mask, subtract or
//! convert). `mul` then `add`, never FMA: bit for bit the scalar sum.
//!
//! Activations are laid out by [`chunked_f32`] in Q4 order: each chunk's 4
//! even and 4 odd columns are broadcast to the 4 rows.

use std::arch::x86_64::*;
use std::ops::Range;

use qlinear_kernels_scalar::layout::chunked_f32;
use qlinear_kernels_scalar::{ActivationsF32, OutputTile};
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrixQ4};

use super::SweepPrefetch;
use crate::avx2::q4::scales_to_f32;

/// Weight rows per register.
const QUAD: usize = 4;

/// Which sweep over a block of rows starts at activation row `i` (tiles of 4
/// rows, then single rows), and how many sweeps there are for `m` rows.
fn pass_of(i: usize, m: usize) -> (usize, usize) {
    let (tiles, singles) = (m / 4, m % 4);
    let phase = if i < 4 * tiles { i / 4 } else { tiles + (i - 4 * tiles) };
    (phase, tiles + singles)
}

/// `table[n] = n − 8`: the value of every biased code.
#[inline]
#[target_feature(enable = "avx512f")]
fn code_values() -> __m512 {
    _mm512_setr_ps(
        -8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0,
    )
}

/// 16 bytes holding one chunk (4 packed bytes) of each of 4 rows, as the
/// rows' even-lane and odd-lane code values.
#[inline]
#[target_feature(enable = "avx512f")]
fn dequantize_quad(chunk: __m128i, values: __m512) -> [__m512; 2] {
    dequantize_dwords(_mm512_cvtepu8_epi32(chunk), values)
}

/// One packed byte per 32-bit lane (lane `4q + p`: row `q`'s byte `p` of a
/// chunk), as the even-lane and odd-lane code values.
#[inline]
#[target_feature(enable = "avx512f")]
fn dequantize_dwords(bytes: __m512i, values: __m512) -> [__m512; 2] {
    [
        _mm512_permutexvar_ps(bytes, values),
        _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(bytes), values),
    ]
}

/// `vpshufb` patterns taking chunk `j` of the 16 bytes in each 128-bit lane
/// (one row per lane) to one byte per 32-bit lane, the rest zero: within a
/// lane, byte `4p` gets byte `4j + p`.
#[inline]
#[target_feature(enable = "avx512f")]
fn chunk_spreads() -> [__m512i; 4] {
    std::array::from_fn(|j| {
        let b = 4 * j as i8;
        let z = -128; // a set high bit: vpshufb writes zero
        _mm512_broadcast_i32x4(_mm_setr_epi8(
            b,
            z,
            z,
            z,
            b + 1,
            z,
            z,
            z,
            b + 2,
            z,
            z,
            z,
            b + 3,
            z,
            z,
            z,
        ))
    })
}

/// Four rows' 4 packed bytes at `b` (biased code 8, value 0, past `end`).
#[inline]
#[target_feature(enable = "avx512f")]
fn padded_quad(w: [&[u8]; QUAD], b: usize, end: usize) -> __m128i {
    let word = |p: &[u8]| {
        let byte = |j: usize| if b + j < end { p[b + j] } else { 0x88 };
        i32::from_le_bytes([byte(0), byte(1), byte(2), byte(3)])
    };
    _mm_setr_epi32(word(w[0]), word(w[1]), word(w[2]), word(w[3]))
}

/// `acc[i] += (x_i even, x_i odd) · (e, o)` for the chunk of activations at `at`.
///
/// # Safety
/// `at + 8 <= xs[i].len()` for every `i` (the caller asserts it once per
/// tile rather than per chunk: a test per load showed in the hot loop).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn add_products_quad<const MI: usize>(
    acc: &mut [[__m512; 2]; MI],
    xs: [&[f32]; MI],
    at: usize,
    eo: [__m512; 2],
) {
    for i in 0..MI {
        // SAFETY: at + 8 <= xs[i].len() (this function's contract): two
        // 16-byte loads inside the slice.
        let (xe, xo) = unsafe {
            (
                _mm512_broadcast_f32x4(_mm_loadu_ps(xs[i].as_ptr().add(at))),
                _mm512_broadcast_f32x4(_mm_loadu_ps(xs[i].as_ptr().add(at + 4))),
            )
        };
        acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_mul_ps(xe, eo[0]));
        acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_mul_ps(xo, eo[1]));
    }
}

/// The per-group partials of 4 rows × `MI` activation rows; `emit(t, q, g,
/// partial)` receives each, groups in increasing order. Pairs of whole
/// chunks (8 bytes per row) run in a loop with no tail test; a last odd or
/// partial chunk follows.
///
/// The 4 rows are swept once per tile of activation rows, `passes` times in
/// all. Sweep `phase` prefetches every `passes`-th cache line of the next
/// block's rows (`next` bytes on), so the next block arrives while this one
/// computes, its DRAM traffic spread evenly over this block's sweeps.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn q4_quad_tile<const MI: usize>(
    xs: [&[f32]; MI],
    w: [&[u8]; QUAD],
    (k, g): (usize, usize),
    (next, sweep): (usize, (usize, usize)),
    mut emit: impl FnMut(usize, usize, usize, f32),
) {
    let mut sweep = SweepPrefetch::new(sweep);
    let chunks_per_group = g.div_ceil(8);
    let groups = k.div_ceil(g);
    assert!(w.iter().all(|w| w.len() >= k.div_ceil(2)) && xs.iter().all(|x| x.len() >= groups * chunks_per_group * 8));
    let (values, spreads) = (code_values(), chunk_spreads());
    for gi in 0..groups {
        let (col0, col_end) = (gi * g, ((gi + 1) * g).min(k));
        let end = col_end.div_ceil(2);
        let x0 = gi * chunks_per_group * 8;
        let quads = (col_end - col0) / 32;
        let mut acc = [[_mm512_setzero_ps(); 2]; MI];
        for qd in 0..quads {
            let b = col0 / 2 + qd * 16;
            if b.is_multiple_of(64) && sweep.take() {
                for row in w {
                    // A hint: an address past the matrix is harmless.
                    _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(next + b).cast());
                }
            }
            // SAFETY: col0 is even (g is) and col0 + 32qd + 32 <= col_end <= k,
            // so each row's 16 bytes at b lie within its ceil(k / 2).
            let rows4 = unsafe {
                let z = _mm512_castsi128_si512(_mm_loadu_si128(w[0].as_ptr().add(b).cast()));
                let z = _mm512_inserti32x4::<1>(z, _mm_loadu_si128(w[1].as_ptr().add(b).cast()));
                let z = _mm512_inserti32x4::<2>(z, _mm_loadu_si128(w[2].as_ptr().add(b).cast()));
                _mm512_inserti32x4::<3>(z, _mm_loadu_si128(w[3].as_ptr().add(b).cast()))
            };
            for (j, spread) in spreads.iter().enumerate() {
                let eo = dequantize_dwords(_mm512_shuffle_epi8(rows4, *spread), values);
                // SAFETY: x0 + 32qd + 8j + 8 <= x0 + 8 * chunks_per_group,
                // within every activation row (asserted above).
                unsafe { add_products_quad(&mut acc, xs, x0 + qd * 32 + j * 8, eo) };
            }
        }
        // a last pair of whole chunks (8 bytes per row), then single chunks
        let (col1, xq) = (col0 + quads * 32, x0 + quads * 32);
        let pairs = (col_end - col1) / 16;
        for p in 0..pairs {
            let b = col1 / 2 + p * 8;
            if b.is_multiple_of(64) && sweep.take() {
                for row in w {
                    // A hint: an address past the matrix is harmless.
                    _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(next + b).cast());
                }
            }
            // SAFETY: col1 is even (g is) and col1 + 16p + 16 <= col_end <= k,
            // so each row's 8 bytes at b lie within its ceil(k / 2).
            let r: [__m128i; QUAD] = unsafe {
                [
                    _mm_loadl_epi64(w[0].as_ptr().add(b).cast()),
                    _mm_loadl_epi64(w[1].as_ptr().add(b).cast()),
                    _mm_loadl_epi64(w[2].as_ptr().add(b).cast()),
                    _mm_loadl_epi64(w[3].as_ptr().add(b).cast()),
                ]
            };
            // [a0-3 b0-3 a4-7 b4-7], [c0-3 d0-3 c4-7 d4-7] -> one chunk of every row
            let (ab, cd) = (_mm_unpacklo_epi32(r[0], r[1]), _mm_unpacklo_epi32(r[2], r[3]));
            let (first, second) = (_mm_unpacklo_epi64(ab, cd), _mm_unpackhi_epi64(ab, cd));
            // SAFETY: xq + 16p + 16 <= x0 + 8 * chunks_per_group, within every
            // activation row (asserted above).
            unsafe {
                add_products_quad(&mut acc, xs, xq + p * 16, dequantize_quad(first, values));
                add_products_quad(&mut acc, xs, xq + p * 16 + 8, dequantize_quad(second, values));
            }
        }
        for c in 4 * quads + 2 * pairs..chunks_per_group {
            let chunk = padded_quad(w, (col0 + c * 8) / 2, end);
            // SAFETY: c < chunks_per_group: the chunk's 8 floats lie within
            // every activation row (asserted above).
            unsafe { add_products_quad(&mut acc, xs, x0 + c * 8, dequantize_quad(chunk, values)) };
        }
        for (t, a) in acc.iter().enumerate() {
            // per row: [l0+l1, l2+l3, l4+l5, l6+l7], then the tree's upper levels
            let mut pairs = [0f32; 16];
            // SAFETY: a 64-byte store into a 16-float local array.
            unsafe { _mm512_storeu_ps(pairs.as_mut_ptr(), _mm512_add_ps(a[0], a[1])) };
            for (q, p) in pairs.chunks_exact(4).enumerate() {
                emit(t, q, gi, (p[0] + p[1]) + (p[2] + p[3]));
            }
        }
    }
}

/// Runs `body(r, rows, i, MI)` over blocks of 4 weight rows (the last block
/// repeats its final row to fill the register; `rows` says how many are real)
/// and tiles of 4 activation rows when M >= 4 (each weight chunk dequantized
/// once per tile), then single activation rows.
macro_rules! sweep_quads {
    ($rows:expr, $m:expr, |$r:ident, $real:ident, $w:ident, $i:ident, $MI:ident| $body:block, $row:expr) => {{
        let rows: Range<usize> = $rows;
        let mut $r = rows.start;
        while $r < rows.end {
            let $real = (rows.end - $r).min(QUAD);
            let $w: [&[u8]; QUAD] = std::array::from_fn(|q| $row($r + q.min($real - 1)));
            let mut $i = 0;
            while $m - $i >= 4 {
                const $MI: usize = 4;
                $body
                $i += 4;
            }
            while $i < $m {
                const $MI: usize = 1;
                $body
                $i += 1;
            }
            $r += QUAD;
        }
    }};
}

#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) fn gemm_w4a16(x: &ActivationsF32<'_>, w: &QuantizedMatrixQ4, rows: Range<usize>, y: &mut OutputTile<'_>) {
    let Some((s, xc, per_row)) = w4a16_prologue(x, w, &rows, y) else {
        return;
    };
    let (k, r0) = (x.k, rows.start);
    sweep_quads!(
        rows,
        x.m,
        |r, real, wr, i, MI| {
            let xs: [&[f32]; MI] = std::array::from_fn(|t| &xc[(i + t) * per_row..(i + t + 1) * per_row]);
            let prefetch = (QUAD * w.row_packed(r).len(), pass_of(i, x.m));
            q4_quad_tile::<MI>(xs, wr, (k, k), prefetch, |t, q, _, p| {
                if q < real {
                    y.set(i + t, r + q - r0, s[r + q] * p)
                }
            });
        },
        |row| w.row_packed(row)
    );
}

#[target_feature(enable = "avx512f,avx512bw,avx2,f16c")]
pub(crate) fn gemm_w4a16_grouped(
    x: &ActivationsF32<'_>,
    w: &QuantizedMatrixQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    let GroupedW4A16 {
        g,
        groups,
        scales,
        xc,
        per_row,
    } = w4a16_grouped_prologue(x, w, &rows, y);
    let (k, r0) = (x.k, rows.start);
    let mut sf: [Vec<f32>; QUAD] = Default::default();
    sweep_quads!(
        rows,
        x.m,
        |r, real, wr, i, MI| {
            if i == 0 {
                for (q, dst) in sf.iter_mut().enumerate().take(real) {
                    scales_to_f32(&scales[(r + q) * groups..(r + q + 1) * groups], dst);
                }
            }
            let xs: [&[f32]; MI] = std::array::from_fn(|t| &xc[(i + t) * per_row..(i + t + 1) * per_row]);
            let mut acc = [[0f32; QUAD]; MI];
            let prefetch = (QUAD * w.row_packed(r).len(), pass_of(i, x.m));
            q4_quad_tile::<MI>(xs, wr, (k, g), prefetch, |t, q, gi, p| {
                if q < real {
                    acc[t][q] += sf[q][gi] * p
                }
            });
            for (t, a) in acc.iter().enumerate() {
                for (q, &v) in a.iter().enumerate().take(real) {
                    y.set(i + t, r + q - r0, v);
                }
            }
        },
        |row| w.row_packed(row)
    );
}

/// What the per-channel W4A16 kernel does first: checks the shapes, and
/// returns the row scales with the activations laid out by [`chunked_f32`] in
/// Q4 order (`per_row` floats per activation row) — or `None` when K = 0,
/// after writing the outputs (`scale · 0`).
pub(crate) fn w4a16_prologue<'w>(
    x: &ActivationsF32<'_>,
    w: &'w QuantizedMatrixQ4,
    rows: &Range<usize>,
    y: &mut OutputTile<'_>,
) -> Option<(&'w [f32], Vec<f32>, usize)> {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::PerChannel(s) = w.scales() else {
        panic!("gemm_w4a16 needs per-channel scales")
    };
    assert!(rows.end <= w.n() && w.k() == x.k, "W4A16 shapes");
    let k = x.k;
    if k == 0 {
        for i in 0..x.m {
            for r in rows.clone() {
                y.set(i, r - rows.start, s[r] * 0.0);
            }
        }
        return None;
    }
    let xc: Vec<f32> = (0..x.m).flat_map(|i| chunked_f32(x.row(i), k, true)).collect();
    Some((s, xc, k.div_ceil(8) * 8))
}

/// What the grouped W4A16 kernel starts from: the group size, the f16
/// scales (`groups` per row) and the activations chunked per group in Q4
/// order, `per_row` floats per activation row.
pub(crate) struct GroupedW4A16<'w> {
    pub(crate) g: usize,
    pub(crate) groups: usize,
    pub(crate) scales: &'w [half::f16],
    pub(crate) xc: Vec<f32>,
    pub(crate) per_row: usize,
}

/// The grouped counterpart of [`w4a16_prologue`]: checks the shapes and lays
/// out the activations.
pub(crate) fn w4a16_grouped_prologue<'w>(
    x: &ActivationsF32<'_>,
    w: &'w QuantizedMatrixQ4,
    rows: &Range<usize>,
    y: &mut OutputTile<'_>,
) -> GroupedW4A16<'w> {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::Grouped { group, scales } = w.scales() else {
        panic!("gemm_w4a16_grouped needs group scales")
    };
    let (g, k) = (*group, x.k);
    assert!(rows.end <= w.n() && w.k() == k, "W4A16 grouped shapes");
    let groups = k / g;
    GroupedW4A16 {
        g,
        groups,
        scales,
        xc: (0..x.m).flat_map(|i| chunked_f32(x.row(i), g, true)).collect(),
        per_row: groups * g.div_ceil(8) * 8,
    }
}
