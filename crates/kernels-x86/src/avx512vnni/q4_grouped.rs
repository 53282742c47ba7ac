//! AVX-512 VNNI grouped W4A8 micro-kernels (groups of a multiple of 32
//! columns; Q4_0's 32 among them). Activations are split even/odd per 128
//! columns, as for W4A8 per channel. Each output's arithmetic is the scalar
//! form's (NUMERICS.md §6.1): `acc_g` the exact i32 `Σ x·b − 8·Σx_g`, one
//! conversion, one product by the group's f32 scale, added in increasing g
//! from +0. Integer sums may be formed in any order; the float chain may not.
//!
//! Decode reads each weight row start to end, so a tile's rows stream as
//! one sequential run, in two steps:
//! 1. per row, the 16 lanes of `vpdpbusd` over 4 consecutive blocks (16
//!    groups of 32) are reduced to the 16 group sums in natural order by
//!    one transpose-and-add tree shared by the 4 blocks (6 shuffles, 3 adds
//!    and a permute: about 2.5 operations per 64 packed bytes), and the 16
//!    products `(acc_g as f32) · s_g` formed in one vector;
//! 2. per 16 rows, the products are transposed (rows in the lanes) and each
//!    group added to the 16 outputs' chains with one vector `add`, so no
//!    output waits on a chain of one scalar `add` per group.
//!
//! Batches of 4 to 15 activation rows keep 4 weight rows per register (one
//! 128-bit lane each) against broadcast activations, so each unpacked weight
//! load serves the tile's activation rows. From 16 rows the 8 × 16 tile puts
//! the activation rows in the lanes instead (`Layout::EvenOddQuads16`), so
//! a group's sums need no reduction at all.

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use super::q4::{BLOCK, PREFETCH};

/// Columns per sub-block: one group of 32, 16 packed bytes per row.
const SUB: usize = 32;
/// Groups of 32 per product buffer row: the decode tile's rows are read in
/// pieces of `PIECE · 32` columns (8192: one piece for every real layer),
/// whose products wait in an `R × PIECE` stack buffer (16 KiB at R = 16).
const PIECE: usize = 256;

/// The 16 sums `Σ x·b` (biased, uncorrected) of the 32-column sub-blocks of
/// blocks `blk .. blk + n` (`n <= 4`) of one packed row against one split
/// activation row, in natural order (entries past `4n` zero).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn sub_sums(xs: &[i8], w: &[u8], blk: usize, n: usize) -> __m512i {
    assert!(n <= 4 && xs.len() >= (blk + n) * BLOCK && w.len() >= (blk + n) * BLOCK / 2);
    let mask = _mm512_set1_epi8(0x0F);
    let block = |b: usize| {
        // SAFETY: b < blk + n: the assert above bounds every 64-byte load.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().wrapping_add(b * BLOCK / 2 + PREFETCH).cast());
            let p = _mm512_loadu_si512(w.as_ptr().add(b * BLOCK / 2).cast());
            let lo = _mm512_and_si512(p, mask);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(p), mask);
            let xe = _mm512_loadu_si512(xs.as_ptr().add(b * BLOCK).cast());
            let xo = _mm512_loadu_si512(xs.as_ptr().add(b * BLOCK + 64).cast());
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xe), hi, xo)
        }
    };
    // lane l of v[j] holds 8 columns of sub-block 4j + l / 4
    let v: [__m512i; 4] = if n == 4 {
        [block(blk), block(blk + 1), block(blk + 2), block(blk + 3)]
    } else {
        std::array::from_fn(|j| if j < n { block(blk + j) } else { _mm512_setzero_si512() })
    };
    // per 128-bit lane t: [v0, v1, v2, v3] totals, i.e. sub-block 4j + t at 4t + j
    let s01 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
    let s23 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
    let r = _mm512_add_epi32(_mm512_unpacklo_epi64(s01, s23), _mm512_unpackhi_epi64(s01, s23));
    let natural = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_permutexvar_epi32(natural, r)
}

/// Writes `p[j] = ((dot_j − 8·sums_j) as f32) · s_j` for the `n` groups of
/// 32 from group `g0` of one row (`g0` a multiple of 4), and zeros on to the
/// next multiple of 16, so that every entry [`add_chains16`] reads is
/// written (the buffer is left uninitialised: zeroing 16 KiB per tile call
/// cost more than the products at K = 576).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn row_products(xs: &[i8], w: &[u8], sums: &[i32], s: &[f32], g0: usize, n: usize, p: &mut [MaybeUninit<f32>]) {
    assert!(g0.is_multiple_of(4) && sums.len() >= g0 + n && s.len() >= g0 + n && p.len() >= n.div_ceil(16) * 16);
    let mut j = 0;
    while j < n {
        let m = (n - j).min(16);
        let mask: u16 = if m == 16 { u16::MAX } else { (1u16 << m) - 1 };
        let dot = sub_sums(xs, w, (g0 + j) / 4, m.div_ceil(4));
        // SAFETY: the masks keep the loads inside sums[g0 + j ..][..m] and
        // s[g0 + j ..][..m], and j + 16 <= p.len() (asserted above).
        unsafe {
            let corr = _mm512_slli_epi32::<3>(_mm512_maskz_loadu_epi32(mask, sums.as_ptr().add(g0 + j)));
            let scale = _mm512_maskz_loadu_ps(mask, s.as_ptr().add(g0 + j));
            let prod = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(dot, corr)), scale);
            _mm512_storeu_ps(p.as_mut_ptr().add(j).cast(), _mm512_maskz_mov_ps(mask, prod));
        }
        j += 16;
    }
}

/// The 16 × 16 transpose of `r` (row q, element j): element q of the j-th
/// vector is `r[q][j]`. Four shuffle stages of 16.
#[inline]
#[target_feature(enable = "avx512f")]
fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
    // within 128-bit lanes: t[2i], t[2i + 1] interleave rows 2i and 2i + 1
    let t: [__m512; 16] = std::array::from_fn(|a| {
        let (x, y) = (r[a / 2 * 2], r[a / 2 * 2 + 1]);
        if a % 2 == 0 {
            _mm512_unpacklo_ps(x, y)
        } else {
            _mm512_unpackhi_ps(x, y)
        }
    });
    // u[4i + c], 128-bit lane L: rows 4i .. 4i + 4 of column 4L + c
    let u: [__m512; 16] = std::array::from_fn(|a| {
        let (i, c) = (a / 4, a % 4);
        let (x, y) = (t[4 * i + c / 2], t[4 * i + 2 + c / 2]);
        if c % 2 == 0 {
            _mm512_shuffle_ps::<0x44>(x, y)
        } else {
            _mm512_shuffle_ps::<0xEE>(x, y)
        }
    });
    // column 4L + c gathers lane L of u[c], u[4 + c], u[8 + c], u[12 + c]
    std::array::from_fn(|j| {
        let (l, c) = (j / 4, j % 4);
        let (a, b) = (u[c], u[4 + c]);
        let (e, f) = (u[8 + c], u[12 + c]);
        // lanes L = 0, 2 (0x88) or 1, 3 (0xDD) of each pair, then of those the first or second
        let (ab, ef) = if l % 2 == 0 {
            (_mm512_shuffle_f32x4::<0x88>(a, b), _mm512_shuffle_f32x4::<0x88>(e, f))
        } else {
            (_mm512_shuffle_f32x4::<0xDD>(a, b), _mm512_shuffle_f32x4::<0xDD>(e, f))
        };
        if l < 2 {
            _mm512_shuffle_f32x4::<0x88>(ab, ef)
        } else {
            _mm512_shuffle_f32x4::<0xDD>(ab, ef)
        }
    })
}

/// Adds `p[q · PIECE + j]` for `j < n` to `total[q]` in increasing j, for
/// 16 rows at once (rows in the lanes, one vector `add` per group).
#[inline]
#[target_feature(enable = "avx512f")]
fn add_chains16(p: &[MaybeUninit<f32>], n: usize, total: &mut __m512) {
    assert!(p.len() >= 15 * PIECE + n.div_ceil(16) * 16 && n <= PIECE);
    let mut j0 = 0;
    while j0 < n {
        let rows: [__m512; 16] = std::array::from_fn(|q| {
            // SAFETY: q · PIECE + j0 + 16 <= p.len() for q < 16 (asserted
            // above), and row_products wrote those 16 entries of each row.
            unsafe { _mm512_loadu_ps(p.as_ptr().add(q * PIECE + j0).cast()) }
        });
        let cols = transpose16(rows);
        for c in cols.iter().take((n - j0).min(16)) {
            *total = _mm512_add_ps(*total, *c);
        }
        j0 += 16;
    }
}

/// W4A8-grouped decode micro-kernel (frame tile `R` × 1): `R` packed rows
/// against one split activation row, each row read start to end. Groups of
/// 32 in the two steps of the module doc (rows in the lanes when R = 16);
/// other multiples of 32 add their sub-block sums per group. Writes
/// `out[q]` and returns the first group not added (the frame adds the rest
/// in the same order); a group size that is no multiple of 32 is left to
/// the frame whole.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w4a8_grouped_seq<const R: usize>(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) -> usize {
    assert!(x.len() == 1 && sums.len() == 1 && w.len() == R && out.len() == R);
    let (xs, sums, kb, groups) = (x[0], sums[0], x[0].len(), sums[0].len());
    assert!(kb.is_multiple_of(BLOCK) && w.iter().all(|r| r.len() == kb / 2) && s.len() == R * groups);
    out.fill(0.0);
    if g == 0 || !g.is_multiple_of(SUB) {
        return 0;
    }
    if g != SUB {
        return other_groups(xs, sums, w, s, g, out);
    }
    let done = (kb / SUB).min(groups);
    let mut p = [MaybeUninit::<f32>::uninit(); 16 * PIECE];
    let mut total = _mm512_setzero_ps();
    let mut g0 = 0;
    while g0 < done {
        let n = (done - g0).min(PIECE);
        for q in 0..R {
            let row = &s[q * groups..(q + 1) * groups];
            row_products(xs, w[q], sums, row, g0, n, &mut p[q * PIECE..(q + 1) * PIECE]);
        }
        if R == 16 {
            add_chains16(&p, n, &mut total);
        } else {
            for (q, o) in out.iter_mut().enumerate() {
                for v in &p[q * PIECE..q * PIECE + n] {
                    // SAFETY: row_products wrote the row's first n entries.
                    *o += unsafe { v.assume_init() };
                }
            }
        }
        g0 += n;
    }
    if R == 16 {
        // SAFETY: out holds R = 16 floats.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), total) };
    }
    done
}

/// Groups of `g` (a multiple of 32 above 32) for each row of `w`: the
/// sub-block sums of 16 groups of 32 at a time, added per group in i32,
/// then the row's float chain. Returns the groups added.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn other_groups(xs: &[i8], sums: &[i32], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) -> usize {
    let (kb, groups) = (xs.len(), sums.len());
    let done = (kb / g).min(groups);
    let per = g / SUB;
    let mut subs = [0i32; 16];
    for (q, o) in out.iter_mut().enumerate() {
        let (row, sr) = (w[q], &s[q * groups..(q + 1) * groups]);
        let mut total = 0f32;
        let (mut acc, mut filled, mut gi) = (0i32, 0, 0);
        let mut sub = 0;
        while gi < done {
            let n = (done * per - sub).min(16);
            // SAFETY: a 64-byte store into a local [i32; 16].
            unsafe { _mm512_storeu_si512(subs.as_mut_ptr().cast(), sub_sums(xs, row, sub / 4, n.div_ceil(4))) };
            for &v in &subs[..n] {
                acc += v;
                filled += 1;
                if filled == per {
                    total += (acc - 8 * sums[gi]) as f32 * sr[gi];
                    (acc, filled, gi) = (0, 0, gi + 1);
                }
            }
            sub += n;
        }
        *o = total;
    }
    done
}

/// Row `q`'s 4 partial sums sit in 128-bit lane `q`: their totals, for the
/// 4 rows (integer addition: any order is exact).
#[inline]
#[target_feature(enable = "avx512f")]
fn lane_totals(acc: __m512i) -> __m128i {
    let s = _mm512_add_epi32(acc, _mm512_shuffle_epi32::<0b01_00_11_10>(acc));
    let s = _mm512_add_epi32(s, _mm512_shuffle_epi32::<0b10_11_00_01>(s));
    let firsts = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm512_castsi512_si128(_mm512_permutexvar_epi32(firsts, s))
}

/// W4A8-grouped batch micro-kernel (frame tile `WR` × `XR`, `WR` 4 or 1):
/// 4 weight rows per register, one 128-bit lane each (with `WR = 1` the
/// row fills every lane); one `vpdpbusd` per nibble half against an
/// activation row's even or odd columns of the sub-block, broadcast to
/// every lane, leaves each row's partial sums in its own lane. Per group,
/// the 4 rows' exact sums become one `__m128i` and the spec's float step
/// runs on the 4 rows at once: the same operations lane by lane, so the
/// same bits. Writes `out[i · WR + q]`; returns the first group not added.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w4a8_grouped_quad<const WR: usize, const XR: usize>(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) -> usize {
    assert!(x.len() == XR && sums.len() == XR && w.len() == WR && out.len() == WR * XR && (WR == 4 || WR == 1));
    let (kb, groups) = (x[0].len(), sums[0].len());
    assert!(
        kb.is_multiple_of(BLOCK)
            && x.iter().all(|r| r.len() == kb)
            && sums.iter().all(|r| r.len() == groups)
            && w.iter().all(|r| r.len() == kb / 2)
            && s.len() == WR * groups
    );
    out.fill(0.0);
    if g == 0 || !g.is_multiple_of(SUB) {
        return 0;
    }
    let done = (kb / g).min(groups);
    let rows: [&[u8]; 4] = std::array::from_fn(|q| w[q % WR]);
    let scale_of = |q: usize, gi: usize| s[(q % WR) * groups + gi];
    let mask = _mm512_set1_epi8(0x0F);
    let mut total = [_mm_setzero_ps(); XR];
    for gi in 0..done {
        let mut acc = [_mm512_setzero_si512(); XR];
        for sub in 0..g / SUB {
            let col = gi * g + sub * SUB;
            let (b, blk, o) = (col / 2, col / BLOCK, col % BLOCK / 2);
            // SAFETY: col + 32 <= kb: each row's 16 bytes at b lie in its kb / 2, each
            // activation row's even and odd 16 (blk · 128 + o, +64) in its kb.
            unsafe {
                let quad = _mm512_inserti32x4::<3>(
                    _mm512_inserti32x4::<2>(
                        _mm512_inserti32x4::<1>(
                            _mm512_castsi128_si512(_mm_loadu_si128(rows[0].as_ptr().add(b).cast())),
                            _mm_loadu_si128(rows[1].as_ptr().add(b).cast()),
                        ),
                        _mm_loadu_si128(rows[2].as_ptr().add(b).cast()),
                    ),
                    _mm_loadu_si128(rows[3].as_ptr().add(b).cast()),
                );
                let lo = _mm512_and_si512(quad, mask);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(quad), mask);
                for t in 0..XR {
                    let at = x[t].as_ptr().add(blk * BLOCK + o);
                    let xe = _mm512_broadcast_i32x4(_mm_loadu_si128(at.cast()));
                    let xo = _mm512_broadcast_i32x4(_mm_loadu_si128(at.add(64).cast()));
                    acc[t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[t], lo, xe), hi, xo);
                }
            }
        }
        let scale = _mm_setr_ps(scale_of(0, gi), scale_of(1, gi), scale_of(2, gi), scale_of(3, gi));
        for t in 0..XR {
            let dot = _mm_sub_epi32(lane_totals(acc[t]), _mm_set1_epi32(8i32.wrapping_mul(sums[t][gi])));
            total[t] = _mm_add_ps(total[t], _mm_mul_ps(_mm_cvtepi32_ps(dot), scale));
        }
    }
    for t in 0..XR {
        let mut lanes = [0f32; 4];
        // SAFETY: a 16-byte store into a local [f32; 4].
        unsafe { _mm_storeu_ps(lanes.as_mut_ptr(), total[t]) };
        out[t * WR..(t + 1) * WR].copy_from_slice(&lanes[..WR]);
    }
    done
}

/// `acc + Σ_4 a·b` per 32-bit lane with `b`'s 4 bytes the i8 quad at `quad`,
/// broadcast to every lane as `vpdpbusd`'s memory operand (`{1to16}`):
/// written out because LLVM otherwise forwards the quads from the vector
/// they were stored from and broadcasts each with a shuffle, which ran out
/// of registers in the 8 × 16 tile and spilled the broadcasts.
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
fn dpbusd_broadcast(acc: __m512i, a: __m512i, quad: &i32) -> __m512i {
    let mut acc = acc;
    // SAFETY: reads the 4 bytes of `quad` and nothing else; the target
    // features this instruction needs are enabled on this function.
    unsafe {
        std::arch::asm!(
            "vpdpbusd {acc}, {a}, dword ptr [{p}]{{1to16}}",
            acc = inout(zmm_reg) acc,
            a = in(zmm_reg) a,
            p = in(reg) quad as *const i32,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    acc
}

/// The 8 × 16 tile's step for one 32-column sub-block: `acc[q] += Σ` of the
/// 16 activation rows' 8 quads `x` against row `q`'s 8 code quads, which
/// sit at byte offsets `q · 128 + {0, 4, 8, 12, 64, 68, 72, 76}` from
/// `quads` (rows' codes 128 bytes apart, each the low nibbles' 16 dwords,
/// then the high nibbles'), each broadcast as `vpdpbusd`'s memory operand.
/// Written out with immediate offsets: LLVM otherwise forwards the quads
/// from the vector they were stored from and broadcasts each with a
/// shuffle (which spilled), and computed an address per instruction.
///
/// # Safety
/// `quads` must point at 8 · 128 readable bytes less the 48 bytes past the
/// last quad (the caller passes `codes[0]` advanced by `4t` dwords, t < 4).
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn dpbusd_8x8(acc: &mut [__m512i; 8], x: &[__m512i; 8], quads: *const i32) {
    let [mut a0, mut a1, mut a2, mut a3, mut a4, mut a5, mut a6, mut a7] = *acc;
    // SAFETY: reads 64 dwords inside the 8 rows' codes (this function's
    // contract); the target features this instruction needs are enabled.
    unsafe {
        std::arch::asm!(
            "vpdpbusd {a0}, {x0}, dword ptr [{p} + 0]{{1to16}}",
            "vpdpbusd {a1}, {x0}, dword ptr [{p} + 128]{{1to16}}",
            "vpdpbusd {a2}, {x0}, dword ptr [{p} + 256]{{1to16}}",
            "vpdpbusd {a3}, {x0}, dword ptr [{p} + 384]{{1to16}}",
            "vpdpbusd {a4}, {x0}, dword ptr [{p} + 512]{{1to16}}",
            "vpdpbusd {a5}, {x0}, dword ptr [{p} + 640]{{1to16}}",
            "vpdpbusd {a6}, {x0}, dword ptr [{p} + 768]{{1to16}}",
            "vpdpbusd {a7}, {x0}, dword ptr [{p} + 896]{{1to16}}",
            "vpdpbusd {a0}, {x1}, dword ptr [{p} + 4]{{1to16}}",
            "vpdpbusd {a1}, {x1}, dword ptr [{p} + 132]{{1to16}}",
            "vpdpbusd {a2}, {x1}, dword ptr [{p} + 260]{{1to16}}",
            "vpdpbusd {a3}, {x1}, dword ptr [{p} + 388]{{1to16}}",
            "vpdpbusd {a4}, {x1}, dword ptr [{p} + 516]{{1to16}}",
            "vpdpbusd {a5}, {x1}, dword ptr [{p} + 644]{{1to16}}",
            "vpdpbusd {a6}, {x1}, dword ptr [{p} + 772]{{1to16}}",
            "vpdpbusd {a7}, {x1}, dword ptr [{p} + 900]{{1to16}}",
            "vpdpbusd {a0}, {x2}, dword ptr [{p} + 8]{{1to16}}",
            "vpdpbusd {a1}, {x2}, dword ptr [{p} + 136]{{1to16}}",
            "vpdpbusd {a2}, {x2}, dword ptr [{p} + 264]{{1to16}}",
            "vpdpbusd {a3}, {x2}, dword ptr [{p} + 392]{{1to16}}",
            "vpdpbusd {a4}, {x2}, dword ptr [{p} + 520]{{1to16}}",
            "vpdpbusd {a5}, {x2}, dword ptr [{p} + 648]{{1to16}}",
            "vpdpbusd {a6}, {x2}, dword ptr [{p} + 776]{{1to16}}",
            "vpdpbusd {a7}, {x2}, dword ptr [{p} + 904]{{1to16}}",
            "vpdpbusd {a0}, {x3}, dword ptr [{p} + 12]{{1to16}}",
            "vpdpbusd {a1}, {x3}, dword ptr [{p} + 140]{{1to16}}",
            "vpdpbusd {a2}, {x3}, dword ptr [{p} + 268]{{1to16}}",
            "vpdpbusd {a3}, {x3}, dword ptr [{p} + 396]{{1to16}}",
            "vpdpbusd {a4}, {x3}, dword ptr [{p} + 524]{{1to16}}",
            "vpdpbusd {a5}, {x3}, dword ptr [{p} + 652]{{1to16}}",
            "vpdpbusd {a6}, {x3}, dword ptr [{p} + 780]{{1to16}}",
            "vpdpbusd {a7}, {x3}, dword ptr [{p} + 908]{{1to16}}",
            "vpdpbusd {a0}, {x4}, dword ptr [{p} + 64]{{1to16}}",
            "vpdpbusd {a1}, {x4}, dword ptr [{p} + 192]{{1to16}}",
            "vpdpbusd {a2}, {x4}, dword ptr [{p} + 320]{{1to16}}",
            "vpdpbusd {a3}, {x4}, dword ptr [{p} + 448]{{1to16}}",
            "vpdpbusd {a4}, {x4}, dword ptr [{p} + 576]{{1to16}}",
            "vpdpbusd {a5}, {x4}, dword ptr [{p} + 704]{{1to16}}",
            "vpdpbusd {a6}, {x4}, dword ptr [{p} + 832]{{1to16}}",
            "vpdpbusd {a7}, {x4}, dword ptr [{p} + 960]{{1to16}}",
            "vpdpbusd {a0}, {x5}, dword ptr [{p} + 68]{{1to16}}",
            "vpdpbusd {a1}, {x5}, dword ptr [{p} + 196]{{1to16}}",
            "vpdpbusd {a2}, {x5}, dword ptr [{p} + 324]{{1to16}}",
            "vpdpbusd {a3}, {x5}, dword ptr [{p} + 452]{{1to16}}",
            "vpdpbusd {a4}, {x5}, dword ptr [{p} + 580]{{1to16}}",
            "vpdpbusd {a5}, {x5}, dword ptr [{p} + 708]{{1to16}}",
            "vpdpbusd {a6}, {x5}, dword ptr [{p} + 836]{{1to16}}",
            "vpdpbusd {a7}, {x5}, dword ptr [{p} + 964]{{1to16}}",
            "vpdpbusd {a0}, {x6}, dword ptr [{p} + 72]{{1to16}}",
            "vpdpbusd {a1}, {x6}, dword ptr [{p} + 200]{{1to16}}",
            "vpdpbusd {a2}, {x6}, dword ptr [{p} + 328]{{1to16}}",
            "vpdpbusd {a3}, {x6}, dword ptr [{p} + 456]{{1to16}}",
            "vpdpbusd {a4}, {x6}, dword ptr [{p} + 584]{{1to16}}",
            "vpdpbusd {a5}, {x6}, dword ptr [{p} + 712]{{1to16}}",
            "vpdpbusd {a6}, {x6}, dword ptr [{p} + 840]{{1to16}}",
            "vpdpbusd {a7}, {x6}, dword ptr [{p} + 968]{{1to16}}",
            "vpdpbusd {a0}, {x7}, dword ptr [{p} + 76]{{1to16}}",
            "vpdpbusd {a1}, {x7}, dword ptr [{p} + 204]{{1to16}}",
            "vpdpbusd {a2}, {x7}, dword ptr [{p} + 332]{{1to16}}",
            "vpdpbusd {a3}, {x7}, dword ptr [{p} + 460]{{1to16}}",
            "vpdpbusd {a4}, {x7}, dword ptr [{p} + 588]{{1to16}}",
            "vpdpbusd {a5}, {x7}, dword ptr [{p} + 716]{{1to16}}",
            "vpdpbusd {a6}, {x7}, dword ptr [{p} + 844]{{1to16}}",
            "vpdpbusd {a7}, {x7}, dword ptr [{p} + 972]{{1to16}}",
            a0 = inout(zmm_reg) a0,
            a1 = inout(zmm_reg) a1,
            a2 = inout(zmm_reg) a2,
            a3 = inout(zmm_reg) a3,
            a4 = inout(zmm_reg) a4,
            a5 = inout(zmm_reg) a5,
            a6 = inout(zmm_reg) a6,
            a7 = inout(zmm_reg) a7,
            x0 = in(zmm_reg) x[0],
            x1 = in(zmm_reg) x[1],
            x2 = in(zmm_reg) x[2],
            x3 = in(zmm_reg) x[3],
            x4 = in(zmm_reg) x[4],
            x5 = in(zmm_reg) x[5],
            x6 = in(zmm_reg) x[6],
            x7 = in(zmm_reg) x[7],
            p = in(reg) quads,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    *acc = [a0, a1, a2, a3, a4, a5, a6, a7];
}

/// W4A8-grouped batch micro-kernel (frame tile `WR` × 16) on the
/// activations' interleaved blocks (`Layout::EvenOddQuads16`: activation row
/// `l`'s 4 bytes `x + 128` in lane `l`): each `vpdpbusd` multiplies one
/// register of 16 rows' 4 columns by one weight quad broadcast from memory
/// (the codes `nibble − 8`, unpacked once per 64 packed bytes of a row), so
/// 8 of them leave a group of 32's exact sums for 16 activation rows in
/// their own lanes: no reduction across lanes, and each activation register
/// serves the `WR` weight rows. `Σ (x + 128)·(b − 8) = acc_g + 128·Σ(b − 8)`,
/// so `acc_g` is the wrapping difference (exact: the true value fits in
/// i32). The float step runs with the 16 outputs of a weight row in one
/// register: the spec's operations lane by lane. Groups that are a multiple
/// of 32 add their sub-blocks before the float step; others are left to the
/// frame. Writes `out[i · WR + q]`; returns the first group not added.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) fn tile_w4a8_grouped_rows16<const WR: usize>(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) -> usize {
    assert!(x.len() == 16 && sums.len() == 16 && w.len() == WR && out.len() == 16 * WR);
    let (quads, groups) = (x[0], sums[0].len());
    let kb = quads.len() / 16;
    assert!(kb.is_multiple_of(BLOCK) && w.iter().all(|r| r.len() == kb / 2) && s.len() == WR * groups);
    out.fill(0.0);
    if g == 0 || !g.is_multiple_of(SUB) {
        return 0;
    }
    let (done, per) = ((kb / g).min(groups), g / SUB);
    let mask = _mm512_set1_epi8(0x0F);
    let eight = _mm512_set1_epi8(8);
    // row q's codes of the current block: 16 dwords of low nibbles, then 16 of high
    let mut codes = [[0i32; 32]; WR];
    // Σ nibble of each 32-column sub-block of the current block, per row
    let mut nibs = [[0i32; 4]; WR];
    let mut acc = [_mm512_setzero_si512(); WR];
    let mut corr = [0i32; WR];
    let mut total = [_mm512_setzero_ps(); WR];
    // sub-blocks added to the current group, and that group
    let (mut filled, mut gi) = (0, 0);
    for blk in 0..kb / BLOCK {
        for q in 0..WR {
            // SAFETY: blk < kb / 128: 64 bytes at blk · 64 lie in the row's kb / 2;
            // the stores write the 128 bytes of codes[q].
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(w[q].as_ptr().wrapping_add(blk * BLOCK / 2 + PREFETCH).cast());
                let p = _mm512_loadu_si512(w[q].as_ptr().add(blk * BLOCK / 2).cast());
                let lo = _mm512_and_si512(p, mask);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(p), mask);
                _mm512_storeu_si512(codes[q].as_mut_ptr().cast(), _mm512_sub_epi8(lo, eight));
                _mm512_storeu_si512(codes[q].as_mut_ptr().add(16).cast(), _mm512_sub_epi8(hi, eight));
                // sums of 8 bytes of lo + hi (at most 30 each): sub-block t is qwords 2t, 2t + 1
                let mut q8 = [0i64; 8];
                let sad = _mm512_sad_epu8(_mm512_add_epi8(lo, hi), _mm512_setzero_si512());
                _mm512_storeu_si512(q8.as_mut_ptr().cast(), sad);
                nibs[q] = std::array::from_fn(|t| (q8[2 * t] + q8[2 * t + 1]) as i32);
            }
        }
        for t in 0..4 {
            // the 16 rows' 4 even columns d of sub-block t, then the 4 odd ones
            // SAFETY: vector index blk · 32 + 16 + 4t + 3 < kb / 4, so every
            // 64-byte load lies in the block of 16 · kb bytes.
            let xv: [__m512i; 8] = std::array::from_fn(|k| unsafe {
                let v = blk * 32 + 16 * (k / 4) + 4 * t + k % 4;
                _mm512_loadu_si512(quads.as_ptr().add(64 * v).cast())
            });
            if WR == 8 {
                let acc8: &mut [__m512i; 8] = (&mut acc[..]).try_into().expect("WR = 8");
                // SAFETY: codes holds 8 rows of 32 dwords (128 bytes each, one
                // array) and 4t + 19 < 32, so every quad read lies inside it.
                unsafe { dpbusd_8x8(acc8, &xv, codes.as_ptr().cast::<i32>().add(4 * t)) };
            } else {
                // the WR rows' chains advance together: 8 dependent vpdpbusd
                // on one row at a time waited on their latency
                for (k, &xk) in xv.iter().enumerate() {
                    let at = 16 * (k / 4) + 4 * t + k % 4;
                    for q in 0..WR {
                        acc[q] = dpbusd_broadcast(acc[q], xk, &codes[q][at]);
                    }
                }
            }
            for q in 0..WR {
                corr[q] += nibs[q][t];
            }
            filled += 1;
            if filled == per {
                filled = 0;
                if gi < done {
                    for q in 0..WR {
                        // 128 · Σ(b − 8) over the group, wrapping like the sums
                        let bias = corr[q].wrapping_sub(8 * g as i32).wrapping_mul(128);
                        let dot = _mm512_sub_epi32(acc[q], _mm512_set1_epi32(bias));
                        let p = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(s[q * groups + gi]));
                        total[q] = _mm512_add_ps(total[q], p);
                        (acc[q], corr[q]) = (_mm512_setzero_si512(), 0);
                    }
                }
                gi += 1;
            }
        }
    }
    for (q, t) in total.iter().enumerate() {
        let mut lanes = [0f32; 16];
        // SAFETY: a 64-byte store into a local [f32; 16].
        unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), *t) };
        for (i, v) in lanes.iter().enumerate() {
            out[i * WR + q] = *v;
        }
    }
    done
}
