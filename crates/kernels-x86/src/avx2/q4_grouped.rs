//! AVX2 W4A8 grouped by 32 (q4g32): each group's exact i32 sum (as in
//! `q4.rs`, biased nibbles against even/odd-split activations), less its
//! `−8·Σx`, scaled by the group's f32 scale and added in group order
//! (`docs/NUMERICS.md` §6.1); and the f16 group scales converted with F16C.

use half::f16;
use std::arch::x86_64::*;

use super::hsum_epi32;
use super::q4::{block_madd, block_rows, BLOCK};

/// Converts f16 group scales to f32 with F16C, exactly, into a slice of the
/// same length (the frame's hook). The frame converts a weight-row chunk's
/// scales in one call (the chunk's rows are contiguous), so the same length
/// of scales right after `src` (the next chunk's, in a matrix's row-major
/// scales) is prefetched: a burst of lines the hardware prefetcher had not
/// seen coming otherwise waits on memory once per chunk.
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn scales_into_f32(src: &[f16], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len());
    let ahead = src.as_ptr().wrapping_add(src.len()).cast::<u8>();
    for line in (0..2 * src.len()).step_by(64) {
        // a hint: an address past the scales is harmless
        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line).cast());
    }
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

/// Groups of 32 of one output over its whole 64-column blocks (the decode
/// tile of one row, and of rows longer than [`ROWS8_MAX_GROUPS`] groups):
/// the row's exact corrected group sums ([`group_sums32`], at most 128 at
/// a time), then their products eight at a time,
/// added one by one. Every whole block counts (without the last odd block
/// K = 576 left 2 of its 18 groups to the frame's scalar tail, which cost
/// more than the other 16 on a Zen 3 EPYC at 576 × 576 before `1fe33e4`).
/// Each output's
/// arithmetic is exactly the scalar form's: `acc_g` the exact i32, one
/// conversion, one product, added in increasing `g` from +0. Returns the
/// sum and the first group not yet added.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn grouped32_steps(xs: &[i8], sums: &[i32], w: &[u8], sf: &[f32], groups: usize, full_cols: usize) -> (f32, usize) {
    let done = groups.min(full_cols / 32) / 2 * 2;
    assert!(sf.len() >= done);
    let mut total = 0f32;
    // the exact sums of up to 128 groups (K = 4096; a multiple of 8) at a
    // time, the row still read start to end
    const CHUNK: usize = 128;
    let mut acc = [0i32; CHUNK];
    for c0 in (0..done).step_by(CHUNK) {
        let n = (done - c0).min(CHUNK);
        group_sums32(&xs[c0 * 32..], &sums[c0..], &w[c0 * 16..], n / 2, &mut acc);
        let mut g = 0;
        while g + 8 <= n {
            let mut p = [0f32; 8];
            // SAFETY: g + 8 <= n <= acc.len(), and c0 + g + 8 <= done <= sf.len(); an 8-float store into a local array.
            unsafe {
                let a = _mm256_cvtepi32_ps(_mm256_loadu_si256(acc.as_ptr().add(g).cast()));
                _mm256_storeu_ps(
                    p.as_mut_ptr(),
                    _mm256_mul_ps(a, _mm256_loadu_ps(sf.as_ptr().add(c0 + g))),
                );
            }
            for q in p {
                total += q;
            }
            g += 8;
        }
        for (a, s) in acc[g..n].iter().zip(&sf[c0 + g..c0 + n]) {
            total += *a as f32 * s;
        }
    }
    (total, done)
}

/// The most groups of 32 a row may have (K = 1536) for the grouped decode
/// tile to finish 8 rows at a time ([`grouped32_rows8`]); longer rows go
/// through [`grouped32_steps`] alone.
const ROWS8_MAX_GROUPS: usize = 48;

/// The exact i32 `acc_g = Σ x·b − 8·sums[g]` of one packed row's groups of
/// 32 over its first `blocks` whole blocks, into `acc[..2 · blocks]`, the
/// row read start to end (one hint a cache line, 768 bytes on).
#[inline]
#[target_feature(enable = "avx2")]
fn group_sums32(xs: &[i8], sums: &[i32], w: &[u8], blocks: usize, acc: &mut [i32]) {
    assert!(
        w.len() >= blocks * BLOCK / 2
            && xs.len() >= blocks * BLOCK
            && sums.len() >= 2 * blocks
            && acc.len() >= 2 * blocks
    );
    let mut blk = 0;
    while blk + 4 <= blocks {
        _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().wrapping_add(blk * BLOCK / 2 + 768).cast());
        _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().wrapping_add(blk * BLOCK / 2 + 832).cast());
        // SAFETY: blk + 3 < blocks, bounded by the assert above (loads, and
        // the 8 sums and 8 results from 2·blk).
        unsafe {
            let v = [
                block_madd(xs, w, blk),
                block_madd(xs, w, blk + 1),
                block_madd(xs, w, blk + 2),
                block_madd(xs, w, blk + 3),
            ];
            let s8 = _mm256_loadu_si256(sums.as_ptr().add(2 * blk).cast());
            let a = _mm256_sub_epi32(eight_groups_of_32(v), _mm256_slli_epi32::<3>(s8));
            _mm256_storeu_si256(acc.as_mut_ptr().add(2 * blk).cast(), a);
        }
        blk += 4;
    }
    while blk < blocks {
        _mm_prefetch::<_MM_HINT_T0>(w.as_ptr().wrapping_add(blk * BLOCK / 2 + 768).cast());
        // SAFETY: blk < blocks, bounded by the assert above.
        let v = unsafe { block_madd(xs, w, blk) };
        // [g, g, g + 1, g + 1] pairs, then [g, g + 1, …]
        let h = _mm_hadd_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let h = _mm_hadd_epi32(h, h);
        acc[2 * blk] = _mm_cvtsi128_si32(h) - 8 * sums[2 * blk];
        acc[2 * blk + 1] = _mm_extract_epi32::<1>(h) - 8 * sums[2 * blk + 1];
        blk += 1;
    }
}

/// Groups of 32 of 8 weight rows against one split activation row, for
/// rows of at most [`ROWS8_MAX_GROUPS`] groups: each row's exact corrected
/// group sums one row after another ([`group_sums32`]: the weights stream
/// as one sequential run, which the hardware prefetcher follows from DRAM),
/// then the float part with the 8 rows in the lanes: each eight of groups'
/// sums and scales transposed once, and each group converted, scaled and
/// added to the 8 outputs' chains with one vector operation each. One
/// output at a time ([`grouped32_steps`]) spent a third of its 247
/// instructions a row (576 × 576, the Zen 3 EPYC of docs/benchmarks/history.md,
/// `fa0119e`) reducing and adding groups one by one in scalar registers;
/// reading the 8 rows in lockstep instead (the rows in the lanes from the
/// first instruction) ran SmolLM2's decode and cold 576 × 1536 calls at
/// 0.6–0.95× of that. Each output's arithmetic is the scalar form's:
/// `acc_g` exact in i32, one conversion, one product, added in increasing g
/// from +0. Returns lane `r` = row `r`'s sum and the first group not added.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn grouped32_rows8(
    xs: &[i8],
    sums: &[i32],
    w: [&[u8]; 8],
    sf: &[f32],
    groups: usize,
    full_cols: usize,
) -> (__m256, usize) {
    let done = groups.min(full_cols / 32) / 2 * 2;
    assert!(done <= ROWS8_MAX_GROUPS && sf.len() >= 8 * groups);
    let mut acc = [[0i32; ROWS8_MAX_GROUPS]; 8];
    for (a, w) in acc.iter_mut().zip(w) {
        group_sums32(xs, sums, w, done / 2, a);
    }
    let step = |chain: __m256, a: __m256i, s: __m256| _mm256_add_ps(chain, _mm256_mul_ps(_mm256_cvtepi32_ps(a), s));
    let mut chain = _mm256_setzero_ps();
    let mut g = 0;
    while g + 8 <= done {
        let (mut ar, mut sr) = ([_mm256_setzero_ps(); 8], [_mm256_setzero_ps(); 8]);
        for r in 0..8 {
            // SAFETY: g + 8 <= done <= ROWS8_MAX_GROUPS (acc) and <= groups
            // (row r of the scales, r·groups + g + 8 <= 8·groups <= sf.len()).
            unsafe {
                ar[r] = _mm256_castsi256_ps(_mm256_loadu_si256(acc[r].as_ptr().add(g).cast()));
                sr[r] = _mm256_loadu_ps(sf.as_ptr().add(r * groups + g));
            }
        }
        // lane r of a[j] / s[j]: row r's group g + j
        let (a, s) = (transpose8(ar), transpose8(sr));
        for j in 0..8 {
            chain = step(chain, _mm256_castps_si256(a[j]), s[j]);
        }
        g += 8;
    }
    // the groups left after the eights, one at a time
    while g < done {
        let (mut a, mut s) = ([0i32; 8], [0f32; 8]);
        for r in 0..8 {
            a[r] = acc[r][g];
            // SAFETY: g < done <= groups and r < 8: r·groups + g < 8·groups <= sf.len().
            s[r] = unsafe { *sf.get_unchecked(r * groups + g) };
        }
        // SAFETY: 8-element loads from local arrays.
        let (a, s) = unsafe { (_mm256_loadu_si256(a.as_ptr().cast()), _mm256_loadu_ps(s.as_ptr())) };
        chain = step(chain, a, s);
        g += 1;
    }
    (chain, done)
}

/// The 8 × 8 transpose of `r` (row i, element g) into columns: element i of
/// column g is `r[i][g]`.
#[inline]
#[target_feature(enable = "avx2")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// The `Σ x·b` of 8 activation rows over one 64-column block, reduced to
/// the block's two groups of 32 with the rows in the lanes: `(first group,
/// second group)`, lane i for row i. `p[i]` is row i's i16 pair sums (the
/// low 128 bits the first group's 8, the high the second's, each at most
/// 7620 in magnitude). Integer sums: any order is exact.
///
/// Each level of the tree is `packs` (two rows side by side; the sums it
/// packs are at most 30480, so it never saturates) then `madd` with ones
/// (adjacent pairs): one shuffle and one multiply-pipe µop per two rows.
/// `vphaddd` would be 3 µops with a 2-cycle throughput on Zen 3, and
/// shuffle-and-add pairs were turned into `vphaddd` by LLVM.
#[inline]
#[target_feature(enable = "avx2")]
fn groups_of_8_rows(p: [__m256i; 8]) -> (__m256i, __m256i) {
    let ones = _mm256_set1_epi16(1);
    let pair = |a, b| _mm256_madd_epi16(_mm256_packs_epi32(a, b), ones);
    // row sums of 8 columns, at most 15240
    // a loop, not `array::from_fn`: a generic helper's closure is not
    // always inlined into a `target_feature` caller, and then calls per row
    let mut v = p;
    for v in &mut v {
        *v = _mm256_madd_epi16(*v, ones);
    }
    // [r0 (0+1), r0 (2+3), r1 (0+1), r1 (2+3) | r0 (4+5), r0 (6+7), r1 …], at most 30480
    let (t01, t23, t45, t67) = (pair(v[0], v[1]), pair(v[2], v[3]), pair(v[4], v[5]), pair(v[6], v[7]));
    // [r0 A, r1 A, r2 A, r3 A | r0 B, r1 B, r2 B, r3 B]
    let (t03, t47) = (pair(t01, t23), pair(t45, t67));
    (
        _mm256_permute2x128_si256::<0x20>(t03, t47),
        _mm256_permute2x128_si256::<0x31>(t03, t47),
    )
}

/// Groups of 32 for `WR` weight rows against 8 activation rows, one weight
/// row after another: each block's 8 row sums are reduced to its two
/// groups with the rows in the lanes ([`groups_of_8_rows`]), corrected by
/// the rows' `8·Σx` (transposed once per call for all `WR` weight rows),
/// converted, scaled by the weight row's group scale and added to
/// that weight row's running sums, one vector for the 8 outputs; then the
/// whole blocks left after the eights the same way, their corrections
/// gathered once per call. Each
/// output's arithmetic is the scalar form's: `acc_g` exact in i32, one
/// conversion, one product, added in increasing g from +0. Writes
/// `out[i · WR + q]` and returns the first group not added.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn grouped32_rows<const WR: usize>(
    xs: [&[i8]; 8],
    sums: [&[i32]; 8],
    w: [&[u8]; WR],
    sf: &[f32],
    groups: usize,
    full_cols: usize,
    out: &mut [f32],
) -> usize {
    assert!(out.len() == 8 * WR && sf.len() == WR * groups);
    let mask = _mm256_set1_epi8(0x0F);
    let mut chains = [_mm256_setzero_ps(); WR];
    // whole eights of groups inside the whole blocks
    let eights = groups.min(full_cols / 32) / 8;
    assert!(
        w.iter().all(|w| w.len() >= eights * 4 * BLOCK / 2)
            && xs.iter().all(|x| x.len() >= eights * 4 * BLOCK)
            && sums.iter().all(|s| s.len() >= 8 * eights)
    );
    // lane i of corr[e][j]: 8·sums[i][8e + j], for the whole row at once, so
    // that each weight row is read start to end in one visit: the tile's 16
    // rows then stream as one sequential run of memory, which the hardware
    // prefetcher follows (16 rows read in lockstep, 128 bytes each per
    // step, ran at 0.63–0.96× of this at 11008 × 4096 on the Zen 3 EPYC,
    // family 25 model 1, in issue 17 before `1d8e7c0`:
    // docs/benchmarks/history.md)
    let corr: Vec<[__m256i; 8]> = (0..eights)
        .map(|e| {
            transpose8(std::array::from_fn(|i| {
                // SAFETY: e < eights, bounded by the assert above; unaligned load.
                let s8 = unsafe { _mm256_loadu_si256(sums[i].as_ptr().add(8 * e).cast()) };
                _mm256_castsi256_ps(_mm256_slli_epi32::<3>(s8))
            }))
            .map(|c| _mm256_castps_si256(c))
        })
        .collect();
    for (q, chain) in chains.iter_mut().enumerate() {
        let s = &sf[q * groups..q * groups + 8 * eights];
        for (e, corr) in corr.iter().enumerate() {
            for j in 0..4 {
                let blk = 4 * e + j;
                // one hint per cache line of weights (two blocks)
                if j % 2 == 0 {
                    _mm_prefetch::<_MM_HINT_T0>(w[q].as_ptr().wrapping_add(blk * BLOCK / 2 + 768).cast());
                }
                // SAFETY: the assert above bounds the block's loads.
                let v = unsafe { block_8_rows(w[q], xs, blk, mask) };
                let scales = (s[8 * e + 2 * j], s[8 * e + 2 * j + 1]);
                add_block_groups(chain, v, (corr[2 * j], corr[2 * j + 1]), scales);
            }
        }
    }
    // the whole blocks left after the eights, one block (two groups) at a
    // time, their corrections gathered once per call with the rows in the
    // lanes; still in increasing g on every chain
    let (first, blocks) = (4 * eights, groups.min(full_cols / 32) / 2 - 4 * eights);
    if blocks > 0 {
        assert!(
            w.iter().all(|w| w.len() >= (first + blocks) * BLOCK / 2)
                && xs.iter().all(|x| x.len() >= (first + blocks) * BLOCK)
                && sums.iter().all(|s| s.len() >= 2 * (first + blocks))
        );
        let corr: Vec<[__m256i; 2]> = (first..first + blocks)
            .map(|blk| {
                std::array::from_fn(|h| {
                    let c: [i32; 8] = std::array::from_fn(|i| 8 * sums[i][2 * blk + h]);
                    // SAFETY: an 8-int load from a local array.
                    unsafe { _mm256_loadu_si256(c.as_ptr().cast()) }
                })
            })
            .collect();
        for (q, chain) in chains.iter_mut().enumerate() {
            let s = &sf[q * groups..(q + 1) * groups];
            for (blk, corr) in (first..).zip(&corr) {
                // SAFETY: the assert above bounds the block's loads.
                let v = unsafe { block_8_rows(w[q], xs, blk, mask) };
                add_block_groups(chain, v, (corr[0], corr[1]), (s[2 * blk], s[2 * blk + 1]));
            }
        }
    }
    let gi = 2 * (first + blocks);
    for (q, chain) in chains.iter().enumerate() {
        let mut t = [0f32; 8];
        // SAFETY: an 8-float store into a local array.
        unsafe { _mm256_storeu_ps(t.as_mut_ptr(), *chain) };
        for (i, v) in t.iter().enumerate() {
            out[i * WR + q] = *v;
        }
    }
    gi
}

/// Block `blk` (64 columns, even/odd) of one weight row against 8
/// activation rows: per row the 16 i16 sums of adjacent nibble products
/// (each `maddubs` pair <= 3810, their sum <= 7620: no i16 saturation).
///
/// # Safety
/// AVX2 is present, and `w` holds `(blk + 1) · 32` bytes and every `xs[i]`
/// `(blk + 1) · 64` codes.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn block_8_rows(w: &[u8], xs: [&[i8]; 8], blk: usize, mask: __m256i) -> [__m256i; 8] {
    // SAFETY: the caller's bounds; unaligned loads.
    unsafe {
        let b = _mm256_loadu_si256(w.as_ptr().add(blk * BLOCK / 2).cast());
        let lo = _mm256_and_si256(b, mask);
        let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(b), mask);
        std::array::from_fn(|i| {
            let xe = _mm256_loadu_si256(xs[i].as_ptr().add(blk * BLOCK).cast());
            let xo = _mm256_loadu_si256(xs[i].as_ptr().add(blk * BLOCK + 32).cast());
            _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo))
        })
    }
}

/// A block's two groups added to the 8 outputs' chain (the rows in the
/// lanes): each group's sums reduced ([`groups_of_8_rows`]), less its
/// `8·Σx` correction, converted, times its scale, added, first group first.
#[inline]
#[target_feature(enable = "avx2")]
fn add_block_groups(chain: &mut __m256, v: [__m256i; 8], corr: (__m256i, __m256i), scales: (f32, f32)) {
    let (a, b) = groups_of_8_rows(v);
    let a = _mm256_sub_epi32(a, corr.0);
    let b = _mm256_sub_epi32(b, corr.1);
    *chain = _mm256_add_ps(*chain, _mm256_mul_ps(_mm256_cvtepi32_ps(a), _mm256_set1_ps(scales.0)));
    *chain = _mm256_add_ps(*chain, _mm256_mul_ps(_mm256_cvtepi32_ps(b), _mm256_set1_ps(scales.1)));
}

/// W4A8-grouped batch micro-kernel (frame tile `WR` × 8): groups of 32
/// through [`grouped32_rows`], other group sizes one weight row at a time
/// through [`grouped_whole_blocks`]. Same contract as
/// [`tile_w4a8_grouped`].
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn tile_w4a8_grouped_rows<const WR: usize>(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) -> usize {
    assert!(x.len() == 8 && sums.len() == 8 && w.len() == WR && out.len() == 8 * WR);
    let (kb, groups) = (x[0].len(), sums[0].len());
    assert!(
        x.iter().all(|r| r.len() == kb)
            && w.iter().all(|r| r.len() == kb / 2)
            && sums.iter().all(|r| r.len() == groups)
            && s.len() == WR * groups
    );
    if g == 32 {
        return grouped32_rows::<WR>(
            std::array::from_fn(|i| x[i]),
            std::array::from_fn(|i| sums[i]),
            std::array::from_fn(|q| w[q]),
            s,
            groups,
            kb,
            out,
        );
    }
    let mut done = 0;
    let mut row = [0f32; 8];
    for q in 0..WR {
        done = grouped_whole_blocks(x, sums, w[q], &s[q * groups..(q + 1) * groups], g, &mut row);
        for (i, v) in row.iter().enumerate() {
            out[i * WR + q] = *v;
        }
    }
    done
}

/// W4A8-grouped decode micro-kernel (frame tile 1 × 1): groups of 32 eight
/// at a time, then the whole blocks left two at a time, through
/// [`grouped32_steps`], groups that are whole 64-column
/// blocks through [`grouped_whole_blocks`]; either way `acc_g` is the exact
/// i32 and the sum is `Σ_g (acc_g as f32) * s_g` from +0 in increasing g.
/// Returns the first group not added (the frame adds the rest in the same
/// order).
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn tile_w4a8_grouped(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) -> usize {
    assert!(x.len() == 1 && sums.len() == 1 && w.len() == 1 && out.len() == 1);
    let (kb, groups) = (x[0].len(), s.len());
    assert!(w[0].len() == kb / 2 && sums[0].len() == groups);
    if g == 32 {
        let (t, gi) = grouped32_steps(x[0], sums[0], w[0], s, groups, kb);
        out[0] = t;
        return gi;
    }
    grouped_whole_blocks(x, sums, w[0], s, g, out)
}

/// W4A8-grouped decode micro-kernel over `WR` weight rows (frame tile `WR`
/// × 1), one row after another, each exactly as [`tile_w4a8_grouped`]
/// computes it: one call per `WR` rows, and the rows read as one
/// sequential run. Returns the first group not added (the same for every
/// row).
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn tile_w4a8_grouped_seq<const WR: usize>(
    x: &[&[i8]],
    sums: &[&[i32]],
    w: &[&[u8]],
    s: &[f32],
    g: usize,
    out: &mut [f32],
) -> usize {
    assert!(x.len() == 1 && sums.len() == 1 && w.len() == WR && out.len() == WR);
    let (kb, groups) = (x[0].len(), sums[0].len());
    assert!(w.iter().all(|r| r.len() == kb / 2) && s.len() == WR * groups);
    if groups == 0 {
        out.fill(0.0);
        return 0;
    }
    let mut done = 0;
    // groups of 32 in rows of at most ROWS8_MAX_GROUPS groups: eight rows at
    // a time, the rows left (and longer rows) one by one
    let rows8 = if g == 32 && kb <= 32 * ROWS8_MAX_GROUPS {
        WR / 8 * 8
    } else {
        0
    };
    for r0 in (0..rows8).step_by(8) {
        let mut rows: [&[u8]; 8] = [&[]; 8];
        rows.copy_from_slice(&w[r0..r0 + 8]);
        let (t, gi) = grouped32_rows8(x[0], sums[0], rows, &s[r0 * groups..(r0 + 8) * groups], groups, kb);
        let mut o = [0f32; 8];
        // SAFETY: an 8-float store into a local array.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), t) };
        out[r0..r0 + 8].copy_from_slice(&o);
        done = gi;
    }
    for (q, (o, sq)) in out.iter_mut().zip(s.chunks_exact(groups)).enumerate().skip(rows8) {
        if g == 32 {
            let (t, gi) = grouped32_steps(x[0], sums[0], w[q], sq, groups, kb);
            (*o, done) = (t, gi);
        } else {
            done = grouped_whole_blocks(x, sums, w[q], sq, g, std::slice::from_mut(o));
        }
    }
    done
}

/// Groups that are whole 64-column blocks (`g` a multiple of 64) of one
/// weight row against each row of `x`: one vector per group, `out[i] =
/// Σ_g (acc_g as f32) * s[g]` from +0 in increasing g. Returns the groups
/// added: none for other `g` (the frame adds them all).
#[inline]
#[target_feature(enable = "avx2")]
fn grouped_whole_blocks(x: &[&[i8]], sums: &[&[i32]], w: &[u8], s: &[f32], g: usize, out: &mut [f32]) -> usize {
    out.fill(0.0);
    if g == 0 || !g.is_multiple_of(BLOCK) {
        return 0;
    }
    let whole = x[0].len() / g;
    for (i, o) in out.iter_mut().enumerate() {
        let mut sum = 0f32;
        for gi in 0..whole {
            let mut v = _mm256_setzero_si256();
            for b in gi * g / BLOCK..(gi + 1) * g / BLOCK {
                v = _mm256_add_epi32(v, block_rows::<1>(x[i], [w], b)[0]);
            }
            sum += (hsum_epi32(v) - 8 * sums[i][gi]) as f32 * s[gi];
        }
        *o = sum;
    }
    whole
}
