//! AVX-512 W4A16 (per channel and grouped): four weight rows per 512-bit
//! register. Each row owns 4 lanes of two accumulators, its even spec lanes
//! `[l0, l2, l4, l6]` in one and its odd lanes `[l1, l3, l5, l7]` in the other
//! — the order low and high nibbles come out of 4 packed bytes — so one
//! `add` advances 4 rows' lanes by one chunk of 8 columns, in the spec's
//! order. A 16-entry `vpermps` maps each nibble to the float `code − 8`
//! directly (it reads only an index's low 4 bits, so no mask, subtract or
//! convert). `mul` then `add`, never FMA: bit for bit the scalar sum.
//!
//! Activations are laid out by the frame in Q4 order (`Layout::ChunkedQ4`):
//! each chunk's 4 even and 4 odd columns are broadcast to the 4 rows. The
//! micro-kernels run 4 weight rows (or one, in every lane) against 1 or 4
//! activation rows.

use std::arch::x86_64::*;

/// Weight rows per register.
const QUAD: usize = 4;

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

/// The per-group partials of 4 rows × `MI` activation rows; `emit(t, g,
/// partials)` receives each activation row's, groups in increasing order,
/// row `q`'s partial in lane `4q`. Pairs of whole
/// chunks (8 bytes per row) run in a loop with no tail test; a last odd or
/// partial chunk follows.
///
/// Each cache line of the rows `next` bytes on (the next block's, in a
/// matrix) is prefetched as the same line of these rows is loaded.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn q4_quad_tile<const MI: usize>(
    xs: [&[f32]; MI],
    w: [&[u8]; QUAD],
    (k, g): (usize, usize),
    next: usize,
    mut emit: impl FnMut(usize, usize, __m512),
) {
    let chunks_per_group = g.div_ceil(8);
    let groups = k.div_ceil(g);
    assert!(w.iter().all(|w| w.len() >= k.div_ceil(2)) && xs.iter().all(|x| x.len() >= groups * chunks_per_group * 8));
    let (values, spreads) = (code_values(), chunk_spreads());
    // One quad: the 16 bytes at `b` of each of the 4 rows (32 columns)
    // against the activations from float `x_at`, added to `acc`; each cache
    // line of the rows `next` bytes on is prefetched as the same line of
    // these rows is loaded. A closure, so that it is inlined into both
    // loops below (a function was called, not inlined, in the 4-row tiles).
    // Callers guarantee `b + 16 <= w[q].len()` and `x_at + 32 <=
    // xs[i].len()` for every row (checked in debug builds: the closure is
    // safe to call, so its bounds are asserted where the tests run).
    let add_quad = |acc: &mut [[__m512; 2]; MI], b: usize, x_at: usize| {
        debug_assert!(w.iter().all(|r| b + 16 <= r.len()) && xs.iter().all(|x| x_at + 32 <= x.len()));
        if b.is_multiple_of(64) {
            for row in w {
                // A hint: an address past the matrix is harmless.
                _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(next + b).cast());
            }
        }
        // SAFETY: b + 16 <= w[q].len() (the callers' guarantee above).
        let rows4 = unsafe {
            let z = _mm512_castsi128_si512(_mm_loadu_si128(w[0].as_ptr().add(b).cast()));
            let z = _mm512_inserti32x4::<1>(z, _mm_loadu_si128(w[1].as_ptr().add(b).cast()));
            let z = _mm512_inserti32x4::<2>(z, _mm_loadu_si128(w[2].as_ptr().add(b).cast()));
            _mm512_inserti32x4::<3>(z, _mm_loadu_si128(w[3].as_ptr().add(b).cast()))
        };
        for (j, spread) in spreads.iter().enumerate() {
            let eo = dequantize_dwords(_mm512_shuffle_epi8(rows4, *spread), values);
            // SAFETY: x_at + 8j + 8 <= x_at + 32 <= xs[i].len() (the callers' guarantee).
            unsafe { add_products_quad(acc, xs, x_at + j * 8, eo) };
        }
    };
    if g == 32 && k.is_multiple_of(32) {
        // groups of 32 (q4g32): one quad of 16 bytes a row per group, with
        // no run, pair or tail arithmetic between the groups
        for gi in 0..groups {
            let mut acc = [[_mm512_setzero_ps(); 2]; MI];
            // add_quad's bounds: 16(gi + 1) <= k / 2 bytes of every row,
            // and 32(gi + 1) <= 32 · groups floats of every activation row
            // (asserted above).
            add_quad(&mut acc, gi * 16, gi * 32);
            for (t, a) in acc.iter().enumerate() {
                emit(t, gi, lane_trees(a));
            }
        }
        return;
    }
    for gi in 0..groups {
        let (col0, col_end) = (gi * g, ((gi + 1) * g).min(k));
        let x0 = gi * chunks_per_group * 8;
        let quads = (col_end - col0) / 32;
        let mut acc = [[_mm512_setzero_ps(); 2]; MI];
        for qd in 0..quads {
            // add_quad's bounds: col0 is even (g is) and col0 + 32qd + 32 <=
            // col_end <= k, so each row's 16 bytes at col0 / 2 + 16qd lie
            // within its ceil(k / 2); x0 + 32qd + 32 <= x0 + 8 *
            // chunks_per_group, within every activation row (asserted above).
            add_quad(&mut acc, col0 / 2 + qd * 16, x0 + qd * 32);
        }
        // the rest of the group: pairs of whole chunks, then single chunks
        let chunks = (quads, chunks_per_group);
        add_group_tail(
            &mut acc,
            xs,
            w,
            (col0 + quads * 32, col_end),
            (x0, chunks),
            next,
            values,
        );
        for (t, a) in acc.iter().enumerate() {
            emit(t, gi, lane_trees(a));
        }
    }
}

/// The part of one group of [`q4_quad_tile`] after its whole quads: pairs
/// of whole chunks (8 bytes per row) from column `col1`, then single chunks
/// (the last padded, up to the group's `chunks_per_group` of 8 columns) to
/// `col_end`, added to `acc` in column order. `x0` is the group's first
/// activation float and `quads` the quads already added.
/// Called once per group, so its call costs nothing per column.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn add_group_tail<const MI: usize>(
    acc: &mut [[__m512; 2]; MI],
    xs: [&[f32]; MI],
    w: [&[u8]; QUAD],
    (col1, col_end): (usize, usize),
    (x0, (quads, chunks_per_group)): (usize, (usize, usize)),
    next: usize,
    values: __m512,
) {
    let (col0, xq) = (col1 - quads * 32, x0 + quads * 32);
    let end = col_end.div_ceil(2);
    assert!(w.iter().all(|r| r.len() >= end) && xs.iter().all(|x| x.len() >= x0 + chunks_per_group * 8));
    let pairs = (col_end - col1) / 16;
    for p in 0..pairs {
        let b = col1 / 2 + p * 8;
        if b.is_multiple_of(64) {
            for row in w {
                // A hint: an address past the matrix is harmless.
                _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().wrapping_add(next + b).cast());
            }
        }
        // b + 8 <= (col1 + 16p + 16) / 2 <= end (col1 even, as the group size).
        // SAFETY: each row's 8 bytes at b lie within its `end` bytes (asserted above).
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
            add_products_quad(acc, xs, xq + p * 16, dequantize_quad(first, values));
            add_products_quad(acc, xs, xq + p * 16 + 8, dequantize_quad(second, values));
        }
    }
    for c in 4 * quads + 2 * pairs..chunks_per_group {
        let chunk = padded_quad(w, (col0 + c * 8) / 2, end);
        // SAFETY: c < chunks_per_group: the chunk's 8 floats lie within
        // every activation row (asserted above).
        unsafe { add_products_quad(acc, xs, x0 + c * 8, dequantize_quad(chunk, values)) };
    }
}

/// Each row's 8-lane tree of one group's even and odd accumulators: per
/// row `[l0+l1, l2+l3, l4+l5, l6+l7]`, then the tree's upper levels in the
/// lanes, `(l0+l1)+(l2+l3)` and `(l4+l5)+(l6+l7)` at 4q and 4q + 2, their
/// sum at 4q.
#[inline]
#[target_feature(enable = "avx512f")]
fn lane_trees(a: &[__m512; 2]) -> __m512 {
    let p = _mm512_add_ps(a[0], a[1]);
    let p = _mm512_add_ps(p, _mm512_permute_ps::<0b10_11_00_01>(p));
    _mm512_add_ps(p, _mm512_permute_ps::<0b01_00_11_10>(p))
}

/// Lane `4q` of each 4-lane quarter: the partial of row `q`, as
/// [`q4_quad_tile`] emits it.
#[inline]
#[target_feature(enable = "avx512f")]
fn row_partials(v: __m512) -> [f32; QUAD] {
    let mut lanes = [0f32; 16];
    // SAFETY: a 64-byte store into a 16-float local array.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), v) };
    std::array::from_fn(|q| lanes[4 * q])
}

/// W4A16 micro-kernel (frame tile `WR` × `XR`, `WR` 4 or 1): the spec's
/// 8-lane partial of whole rows of `k` columns, `out[i · WR + q]` (the frame
/// multiplies by the row's scale). With `WR = 1` the row fills every lane.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) fn tile_w4a16<const WR: usize, const XR: usize>(x: &[&[f32]], w: &[&[u8]], k: usize, out: &mut [f32]) {
    assert!(x.len() == XR && w.len() == WR && out.len() == WR * XR && (WR == QUAD || WR == 1));
    if k == 0 {
        // the lanes of an empty row: +0
        out.fill(0.0);
        return;
    }
    let rows: [&[u8]; QUAD] = std::array::from_fn(|q| w[q % WR]);
    let next = WR * w[0].len();
    q4_quad_tile::<XR>(std::array::from_fn(|i| x[i]), rows, (k, k), next, |t, _, p| {
        out[t * WR..(t + 1) * WR].copy_from_slice(&row_partials(p)[..WR]);
    });
}

/// W4A16 grouped micro-kernel (frame tile `WR` × `XR`, `WR` 4 or 1):
/// `out[i · WR + q] = Σ_g s[q · groups + g] · partial_g`, added in
/// increasing g from +0.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(crate) fn tile_w4a16_grouped<const WR: usize, const XR: usize>(
    x: &[&[f32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) {
    assert!(x.len() == XR && w.len() == WR && out.len() == WR * XR && (WR == QUAD || WR == 1));
    out.fill(0.0);
    let groups = s.len() / WR;
    if groups == 0 {
        return;
    }
    let rows: [&[u8]; QUAD] = std::array::from_fn(|q| w[q % WR]);
    let next = WR * w[0].len();
    // each output's chain in lane 4q of its activation row's vector:
    // total += s · partial, group by group, the scalar form lane by lane
    let mut total = [_mm512_setzero_ps(); XR];
    let spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    let (mut scales, mut scales_of) = (_mm512_setzero_ps(), usize::MAX);
    q4_quad_tile::<XR>(
        std::array::from_fn(|i| x[i]),
        rows,
        (groups * g, g),
        next,
        |t, gi, p| {
            if scales_of != gi {
                let of = |q: usize| s[(q % WR) * groups + gi];
                let four = _mm_setr_ps(of(0), of(1), of(2), of(3));
                scales = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(four));
                scales_of = gi;
            }
            total[t] = _mm512_add_ps(total[t], _mm512_mul_ps(scales, p));
        },
    );
    for (t, v) in total.iter().enumerate() {
        out[t * WR..(t + 1) * WR].copy_from_slice(&row_partials(*v)[..WR]);
    }
}
