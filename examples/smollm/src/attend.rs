//! One query head's attention over its KV head's cached positions:
//! `o = softmax(q · K / √hd) · V`.
//!
//! The portable code is the definition. On x86-64 CPUs with AVX2 the same
//! arithmetic runs eight lanes to a register (through `pulp`'s safe
//! wrappers, so this crate keeps `forbid(unsafe_code)`): the same products,
//! summed in the same order, with no fused multiply-add, so both give the
//! same bits (tested below). It matters for prefill: at 128 tokens the
//! portable code's attention (baseline SSE2, whose 8-lane sums LLVM spreads
//! over shuffles) took 14 % of the samples of SmolLM2's one-thread prefill
//! bench beside `expf`'s 3 %, and this path 5 % (docs/benchmarks/history.md).
//! A WebAssembly build with SIMD128 (the page's) runs it four lanes to a
//! register, two registers for the eight lanes, again with the same bits:
//! the portable code took 2.1 ms of a 9.1 ms SmolLM2 q4g32 token there
//! (Node.js's WASI on an AMD EPYC Zen 4, family 25 model 17).
//!
//! Both wide paths sum four positions' lanes at once: the four accumulators
//! transposed, each position's pairwise additions run in its own lane, in
//! [`lanes_sum`]'s order (instead of taking every lane out one by one), and
//! both compute the softmax's exponentials several at a time, with
//! [`crate::math::exp`]'s operations lane by lane (`wasm::exp4`, `wide::exp8`,
//! each tested bit for bit against it). Under Node's WASI (relaxed-SIMD
//! build, one thread, the same Zen 4) attention went from 1.96–2.31 to
//! 1.22–1.34 ms of a q4g32 token; natively (AVX2) from 0.99–1.18 to
//! 0.88–1.04 ms. Eight-lane exponentials gained nothing measurable there (128
//! prompt and 128 generated tokens), but at 1024 + 256 tokens on an AMD EPYC
//! Zen 5 (family 26 model 2), where the scores are ten times as many, decode
//! went from 167.7 (149.8–177.2) to 179.1 (150.4–202.4) tok/s at two threads
//! and stayed level at one (116.5 against 116.2), six alternated runs each
//! (docs/benchmarks/runs/zen5-kv-bf16/ab-exp8-1024.txt).

#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
use half::bf16;

use crate::kv::KvValue;

/// `Σ a·b` in eight lanes (lane `i` sums elements `i, i + 8, …` in order),
/// the lanes added pairwise, then the elements past the last 8 in order;
/// `b` widened to f32 first ([`KvValue::widen`]: exact). The order is part
/// of the definition: [`attend`]'s wide path repeats it.
pub(crate) fn dot<E: KvValue>(a: &[f32], b: &[E]) -> f32 {
    let mut l = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y.widen())
        .sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
            l[i] += x[i] * y[i].widen();
        }
    }
    lanes_sum(l, tail)
}

/// The lanes of [`dot`] added pairwise, then `tail`.
#[inline(always)]
fn lanes_sum(l: [f32; 8], tail: f32) -> f32 {
    ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])) + tail
}

/// Query head `q` (`hd` values) attending over the `scores.len()` positions
/// of `k` and `v` (`[position, hd]` each, at least that many positions, as
/// the cache holds them: widened to f32 as read):
/// `o = Σ_t softmax_t(q · k_t / √hd) · v_t`, the weights `exp(s_t − max) /
/// Σ exp(s − max)`. `scores` is the work row. The same bits on every CPU.
pub(crate) fn attend<E: KvValue>(hd: usize, q: &[f32], k: &[E], v: &[E], o: &mut [f32], scores: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        let done = match hd {
            16 => wide::attend::<E, 2>(simd, q, k, v, o, scores),
            32 => wide::attend::<E, 4>(simd, q, k, v, o, scores),
            64 => wide::attend::<E, 8>(simd, q, k, v, o, scores),
            128 => wide::attend::<E, 16>(simd, q, k, v, o, scores),
            _ => false,
        };
        if done {
            return;
        }
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        let done = match hd {
            16 => wasm::attend::<E, 2>(q, k, v, o, scores),
            32 => wasm::attend::<E, 4>(q, k, v, o, scores),
            64 => wasm::attend::<E, 8>(q, k, v, o, scores),
            128 => wasm::attend::<E, 16>(q, k, v, o, scores),
            _ => false,
        };
        if done {
            return;
        }
    }
    attend_portable(hd, q, k, v, o, scores);
}

/// [`attend`] as written: the definition the wide path is tested against.
fn attend_portable<E: KvValue>(hd: usize, q: &[f32], k: &[E], v: &[E], o: &mut [f32], scores: &mut [f32]) {
    let scale = 1.0 / (hd as f32).sqrt();
    for (t, sc) in scores.iter_mut().enumerate() {
        *sc = dot(q, &k[t * hd..(t + 1) * hd]) * scale;
    }
    let total = exp_shifted(scores);
    o.fill(0.0);
    for (t, &p) in scores.iter().enumerate() {
        let w = p / total;
        o.iter_mut()
            .zip(&v[t * hd..(t + 1) * hd])
            .for_each(|(o, &v)| *o += w * v.widen());
    }
}

/// `s ← exp(s − max s)` in place; returns `Σ s` (summed in order).
#[inline(always)]
fn exp_shifted(scores: &mut [f32]) -> f32 {
    let max = max_of(scores);
    scores.iter_mut().for_each(|s| *s = crate::math::exp(*s - max));
    sum_in_order(scores)
}

/// The largest score (`−∞` for none).
#[inline(always)]
fn max_of(scores: &[f32]) -> f32 {
    scores.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// `Σ s`, added in order from 0.
#[inline(always)]
fn sum_in_order(scores: &[f32]) -> f32 {
    scores.iter().fold(0f32, |total, &s| total + s)
}

/// What the wide attention needs of a SIMD type: eight f32 lanes (one
/// AVX2 register, or two SIMD128 ones), a product then a sum (never fused),
/// so that every implementation gives [`dot`]'s bits.
#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
pub(crate) trait Lanes8: Copy {
    /// Eight lanes.
    type V: Copy;
    fn splat(self, v: f32) -> Self::V;
    /// Eight values from the start of `s` (at least 8 long).
    fn load(self, s: &[f32]) -> Self::V;
    /// Eight bfloat16 values from the start of `s` (at least 8 long), each
    /// widened as [`KvValue::widen`] widens it.
    fn load_bf16(self, s: &[bf16]) -> Self::V;
    /// `a + x·y` lane by lane.
    fn add_mul(self, a: Self::V, x: Self::V, y: Self::V) -> Self::V;
    fn to_array(self, a: Self::V) -> [f32; 8];
    /// Four positions' scores from their accumulators: each one's lanes
    /// added as [`lanes_sum`] adds them, then `tail`, times `scale`.
    #[inline(always)]
    fn scores4(self, acc: [Self::V; 4], tail: f32, scale: f32) -> [f32; 4] {
        acc.map(|a| lanes_sum(self.to_array(a), tail) * scale)
    }
    /// [`exp_shifted`]: `s ← exp(s − max s)`, returning `Σ s` in order.
    #[inline(always)]
    fn exp_shifted(self, scores: &mut [f32]) -> f32 {
        exp_shifted(scores)
    }
}

/// [`attend_portable`] for `hd = 8 · C`, eight lanes at a time: the
/// query's `C` lane groups stay loaded, four positions' dot products run at
/// once (four independent sums; each one's order is [`dot`]'s), and the
/// output's `C` groups accumulate over the positions as the portable loop
/// does. Returns false (nothing written) when the slices are shorter than
/// the contract asks. Inlined into each ISA's caller, so that it is
/// compiled with that ISA's features.
#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
#[inline(always)]
fn attend_lanes<L: Lanes8, E: KvValue, const C: usize>(
    s: L,
    q: &[f32],
    k: &[E],
    v: &[E],
    o: &mut [f32],
    scores: &mut [f32],
) -> bool {
    let (hd, n) = (8 * C, scores.len());
    if q.len() < hd || o.len() < hd || k.len() < n * hd || v.len() < n * hd {
        return false;
    }
    let scale = 1.0 / (hd as f32).sqrt();
    // `dot`'s tail: the sum of no elements
    let tail: f32 = std::iter::empty::<f32>().sum();
    let qv: [L::V; C] = std::array::from_fn(|c| s.load(&q[8 * c..]));
    let zero = s.splat(0.0);
    let mut t = 0;
    while t + 4 <= n {
        let rows = &k[t * hd..(t + 4) * hd];
        let mut acc = [zero; 4];
        for (c, &qc) in qv.iter().enumerate() {
            for (j, a) in acc.iter_mut().enumerate() {
                *a = s.add_mul(*a, qc, E::load8(s, &rows[j * hd + 8 * c..]));
            }
        }
        scores[t..t + 4].copy_from_slice(&s.scores4(acc, tail, scale));
        t += 4;
    }
    for (t, sc) in scores.iter_mut().enumerate().skip(t) {
        let row = &k[t * hd..(t + 1) * hd];
        let mut a = zero;
        for (c, &qc) in qv.iter().enumerate() {
            a = s.add_mul(a, qc, E::load8(s, &row[8 * c..]));
        }
        *sc = lanes_sum(s.to_array(a), tail) * scale;
    }
    let total = s.exp_shifted(scores);
    let mut acc = [zero; C];
    for (t, &p) in scores.iter().enumerate() {
        let w = s.splat(p / total);
        let row = &v[t * hd..(t + 1) * hd];
        for (c, a) in acc.iter_mut().enumerate() {
            *a = s.add_mul(*a, w, E::load8(s, &row[8 * c..]));
        }
    }
    for (c, a) in acc.into_iter().enumerate() {
        o[8 * c..8 * c + 8].copy_from_slice(&s.to_array(a));
    }
    true
}

#[cfg(target_arch = "x86_64")]
mod wide {
    use half::bf16;
    use pulp::{f32x8, x86::V3, Simd, WithSimd};

    use super::{attend_lanes, KvValue, Lanes8};

    /// [`super::attend_lanes`] on AVX2, eight lanes a register.
    pub(super) fn attend<E: KvValue, const C: usize>(
        simd: V3,
        q: &[f32],
        k: &[E],
        v: &[E],
        o: &mut [f32],
        scores: &mut [f32],
    ) -> bool {
        // the trait's `vectorize` (V3's own takes a closure, which is not
        // inlined into the AVX2 function)
        Simd::vectorize(
            simd,
            Attend::<E, C> {
                simd,
                q,
                k,
                v,
                o,
                scores,
            },
        )
    }

    struct Attend<'a, E, const C: usize> {
        simd: V3,
        q: &'a [f32],
        k: &'a [E],
        v: &'a [E],
        o: &'a mut [f32],
        scores: &'a mut [f32],
    }

    impl Lanes8 for V3 {
        type V = f32x8;
        /// [`super::exp_shifted`] with the exponentials eight at a time
        /// ([`exp8`]); the maximum and the sum as the portable code takes
        /// them.
        #[inline(always)]
        fn exp_shifted(self, scores: &mut [f32]) -> f32 {
            let max = super::max_of(scores);
            let mut octets = scores.chunks_exact_mut(8);
            for o in &mut octets {
                let mut a = [0f32; 8];
                a.copy_from_slice(o);
                let x = self.avx._mm256_sub_ps(bytemuck::cast(a), self.avx._mm256_set1_ps(max));
                let e: [f32; 8] = bytemuck::cast(exp8(self, x));
                o.copy_from_slice(&e);
            }
            octets
                .into_remainder()
                .iter_mut()
                .for_each(|s| *s = crate::math::exp(*s - max));
            super::sum_in_order(scores)
        }
        #[inline(always)]
        fn splat(self, v: f32) -> f32x8 {
            self.splat_f32s(v)
        }
        #[inline(always)]
        fn load(self, s: &[f32]) -> f32x8 {
            let mut a = [0f32; 8];
            a.copy_from_slice(&s[..8]);
            bytemuck::cast(a)
        }
        /// Zero-extended to 32 bits, then shifted into the top half.
        #[inline(always)]
        fn load_bf16(self, s: &[bf16]) -> f32x8 {
            let mut a = [bf16::ZERO; 8];
            a.copy_from_slice(&s[..8]);
            let wide = self.avx2._mm256_cvtepu16_epi32(bytemuck::cast(a));
            bytemuck::cast(self.avx2._mm256_slli_epi32::<16>(wide))
        }
        #[inline(always)]
        fn add_mul(self, a: f32x8, x: f32x8, y: f32x8) -> f32x8 {
            self.add_f32s(a, self.mul_f32s(x, y))
        }
        #[inline(always)]
        fn to_array(self, a: f32x8) -> [f32; 8] {
            bytemuck::cast(a)
        }
        /// The four accumulators transposed within each 128-bit half
        /// (lane `i` and `i + 4` of every position in one register), so
        /// that each position's pairwise sum of [`super::lanes_sum`] runs
        /// in its own lane: the same additions in the same order, four
        /// positions at once.
        #[inline(always)]
        fn scores4(self, acc: [f32x8; 4], tail: f32, scale: f32) -> [f32; 4] {
            use std::arch::x86_64::__m256;
            let (avx, sse) = (self.avx, self.sse);
            let [a, b, c, d]: [__m256; 4] = acc.map(bytemuck::cast);
            let (t0, t1) = (avx._mm256_unpacklo_ps(a, b), avx._mm256_unpackhi_ps(a, b));
            let (t2, t3) = (avx._mm256_unpacklo_ps(c, d), avx._mm256_unpackhi_ps(c, d));
            // lanes 0 and 4, 1 and 5, 2 and 6, 3 and 7 of a, b, c, d
            let l0 = avx._mm256_shuffle_ps::<0x44>(t0, t2);
            let l1 = avx._mm256_shuffle_ps::<0xEE>(t0, t2);
            let l2 = avx._mm256_shuffle_ps::<0x44>(t1, t3);
            let l3 = avx._mm256_shuffle_ps::<0xEE>(t1, t3);
            let halves = avx._mm256_add_ps(avx._mm256_add_ps(l0, l1), avx._mm256_add_ps(l2, l3));
            let sums = sse._mm_add_ps(
                avx._mm256_castps256_ps128(halves),
                avx._mm256_extractf128_ps::<1>(halves),
            );
            let v = sse._mm_mul_ps(sse._mm_add_ps(sums, sse._mm_set1_ps(tail)), sse._mm_set1_ps(scale));
            bytemuck::cast(v)
        }
    }

    /// [`crate::math::exp`] in eight lanes: the same operations in the
    /// same order lane by lane (no fused multiply-add; `n / 2` truncated
    /// toward zero as Rust's `/` does), the special cases selected last, so
    /// each lane has the scalar function's bits (as `wasm::exp4`).
    #[inline(always)]
    pub(super) fn exp8(simd: V3, x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::__m256i;
        let (avx, avx2) = (simd.avx, simd.avx2);
        let c = |v: f32| avx._mm256_set1_ps(v);
        let (add, sub, mul) = (
            |a, b| avx._mm256_add_ps(a, b),
            |a, b| avx._mm256_sub_ps(a, b),
            |a, b| avx._mm256_mul_ps(a, b),
        );
        let n = sub(
            add(mul(x, c(std::f32::consts::LOG2_E)), c(12_582_912.0)),
            c(12_582_912.0),
        );
        let r = sub(sub(x, mul(n, c(0.693_359_4))), mul(n, c(-2.121_944_4e-4)));
        let z = mul(r, r);
        let mut p = c(1.987_569_1e-4);
        for k in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5] {
            p = add(mul(p, r), c(k));
        }
        let y = add(add(mul(p, z), r), c(1.0));
        // exact for every lane not replaced below (n in [-150, 128])
        let n = avx._mm256_cvttps_epi32(n);
        // n / 2 toward zero: add 1 to a negative n before the shift
        let a = avx2._mm256_srai_epi32::<1>(avx2._mm256_add_epi32(n, avx2._mm256_srli_epi32::<31>(n)));
        let b = avx2._mm256_sub_epi32(n, a);
        let pow2 = |e: __m256i| {
            avx._mm256_castsi256_ps(avx2._mm256_slli_epi32::<23>(avx2._mm256_add_epi32(e, avx._mm256_set1_epi32(127))))
        };
        let e = mul(mul(y, pow2(a)), pow2(b));
        // _CMP_LT_OQ, _CMP_GT_OQ (false for NaN), _CMP_UNORD_Q
        let e = avx._mm256_blendv_ps(e, c(0.0), avx._mm256_cmp_ps::<1>(x, c(-103.972_08)));
        let e = avx._mm256_blendv_ps(e, c(f32::INFINITY), avx._mm256_cmp_ps::<30>(x, c(88.722_84)));
        avx._mm256_blendv_ps(e, x, avx._mm256_cmp_ps::<3>(x, x))
    }

    impl<E: KvValue, const C: usize> WithSimd for Attend<'_, E, C> {
        type Output = bool;

        // inlined into pulp's AVX2 function, so that everything here is
        // compiled with AVX2 enabled
        #[inline(always)]
        fn with_simd<S: Simd>(self, _: S) -> bool {
            let Attend {
                simd,
                q,
                k,
                v,
                o,
                scores,
            } = self;
            attend_lanes::<V3, E, C>(simd, q, k, v, o, scores)
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use std::arch::wasm32::*;

    use half::bf16;

    use super::{attend_lanes, KvValue, Lanes8};

    /// SIMD128, the build's own features: eight lanes in two registers,
    /// lanes 0–3 and 4–7.
    #[derive(Clone, Copy)]
    struct Simd128;

    impl Lanes8 for Simd128 {
        type V = (v128, v128);
        /// The four accumulators transposed (lane `i` of every position in
        /// one register), so that each position's pairwise sum of
        /// [`super::lanes_sum`] runs in its own lane: the same additions in
        /// the same order, four positions at once, instead of 32 lane
        /// extractions.
        #[inline(always)]
        fn scores4(self, acc: [(v128, v128); 4], tail: f32, scale: f32) -> [f32; 4] {
            let half = |a: v128, b: v128, c: v128, d: v128| {
                let (ab_lo, cd_lo) = (i32x4_shuffle::<0, 4, 1, 5>(a, b), i32x4_shuffle::<0, 4, 1, 5>(c, d));
                let (ab_hi, cd_hi) = (i32x4_shuffle::<2, 6, 3, 7>(a, b), i32x4_shuffle::<2, 6, 3, 7>(c, d));
                let l0 = i32x4_shuffle::<0, 1, 4, 5>(ab_lo, cd_lo);
                let l1 = i32x4_shuffle::<2, 3, 6, 7>(ab_lo, cd_lo);
                let l2 = i32x4_shuffle::<0, 1, 4, 5>(ab_hi, cd_hi);
                let l3 = i32x4_shuffle::<2, 3, 6, 7>(ab_hi, cd_hi);
                f32x4_add(f32x4_add(l0, l1), f32x4_add(l2, l3))
            };
            let low = half(acc[0].0, acc[1].0, acc[2].0, acc[3].0);
            let high = half(acc[0].1, acc[1].1, acc[2].1, acc[3].1);
            let sums = f32x4_add(f32x4_add(low, high), f32x4_splat(tail));
            let v = f32x4_mul(sums, f32x4_splat(scale));
            [
                f32x4_extract_lane::<0>(v),
                f32x4_extract_lane::<1>(v),
                f32x4_extract_lane::<2>(v),
                f32x4_extract_lane::<3>(v),
            ]
        }
        /// [`super::exp_shifted`] with the exponentials four at a time
        /// ([`exp4`]); the maximum and the sum as the portable code takes
        /// them.
        #[inline(always)]
        fn exp_shifted(self, scores: &mut [f32]) -> f32 {
            let max = super::max_of(scores);
            let mut quads = scores.chunks_exact_mut(4);
            for q in &mut quads {
                let x = f32x4_sub(f32x4(q[0], q[1], q[2], q[3]), f32x4_splat(max));
                let e = exp4(x);
                q[0] = f32x4_extract_lane::<0>(e);
                q[1] = f32x4_extract_lane::<1>(e);
                q[2] = f32x4_extract_lane::<2>(e);
                q[3] = f32x4_extract_lane::<3>(e);
            }
            quads
                .into_remainder()
                .iter_mut()
                .for_each(|s| *s = crate::math::exp(*s - max));
            super::sum_in_order(scores)
        }
        #[inline(always)]
        fn splat(self, v: f32) -> (v128, v128) {
            (f32x4_splat(v), f32x4_splat(v))
        }
        #[inline(always)]
        fn load(self, s: &[f32]) -> (v128, v128) {
            let s = &s[..8];
            (f32x4(s[0], s[1], s[2], s[3]), f32x4(s[4], s[5], s[6], s[7]))
        }
        /// Zero-extended to 32 bits, then shifted into the top half.
        #[inline(always)]
        fn load_bf16(self, s: &[bf16]) -> (v128, v128) {
            let b = |i: usize| s[i].to_bits();
            let h = u16x8(b(0), b(1), b(2), b(3), b(4), b(5), b(6), b(7));
            (
                i32x4_shl(u32x4_extend_low_u16x8(h), 16),
                i32x4_shl(u32x4_extend_high_u16x8(h), 16),
            )
        }
        #[inline(always)]
        fn add_mul(self, a: (v128, v128), x: (v128, v128), y: (v128, v128)) -> (v128, v128) {
            (f32x4_add(a.0, f32x4_mul(x.0, y.0)), f32x4_add(a.1, f32x4_mul(x.1, y.1)))
        }
        #[inline(always)]
        fn to_array(self, a: (v128, v128)) -> [f32; 8] {
            [
                f32x4_extract_lane::<0>(a.0),
                f32x4_extract_lane::<1>(a.0),
                f32x4_extract_lane::<2>(a.0),
                f32x4_extract_lane::<3>(a.0),
                f32x4_extract_lane::<0>(a.1),
                f32x4_extract_lane::<1>(a.1),
                f32x4_extract_lane::<2>(a.1),
                f32x4_extract_lane::<3>(a.1),
            ]
        }
    }

    /// [`crate::math::exp`] in four lanes: the same operations in the same
    /// order lane by lane (no fused multiply-add; `n / 2` truncated toward
    /// zero as Rust's `/` does), the special cases selected last, so each
    /// lane has the scalar function's bits.
    #[inline(always)]
    pub(super) fn exp4(x: v128) -> v128 {
        let c = f32x4_splat;
        let n = f32x4_sub(
            f32x4_add(f32x4_mul(x, c(std::f32::consts::LOG2_E)), c(12_582_912.0)),
            c(12_582_912.0),
        );
        let r = f32x4_sub(
            f32x4_sub(x, f32x4_mul(n, c(0.693_359_4))),
            f32x4_mul(n, c(-2.121_944_4e-4)),
        );
        let z = f32x4_mul(r, r);
        let mut p = c(1.987_569_1e-4);
        for k in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5] {
            p = f32x4_add(f32x4_mul(p, r), c(k));
        }
        let y = f32x4_add(f32x4_add(f32x4_mul(p, z), r), c(1.0));
        let n = i32x4_trunc_sat_f32x4(n);
        // n / 2 toward zero: add 1 to a negative n before the shift
        let a = i32x4_shr(i32x4_add(n, u32x4_shr(n, 31)), 1);
        let b = i32x4_sub(n, a);
        let pow2 = |e: v128| i32x4_shl(i32x4_add(e, i32x4_splat(127)), 23);
        let e = f32x4_mul(f32x4_mul(y, pow2(a)), pow2(b));
        let e = v128_bitselect(c(0.0), e, f32x4_lt(x, c(-103.972_08)));
        let e = v128_bitselect(c(f32::INFINITY), e, f32x4_gt(x, c(88.722_84)));
        v128_bitselect(x, e, f32x4_ne(x, x))
    }

    /// [`super::attend_lanes`] on SIMD128.
    pub(super) fn attend<E: KvValue, const C: usize>(
        q: &[f32],
        k: &[E],
        v: &[E],
        o: &mut [f32],
        scores: &mut [f32],
    ) -> bool {
        attend_lanes::<Simd128, E, C>(Simd128, q, k, v, o, scores)
    }
}

#[cfg(test)]
mod tests;
