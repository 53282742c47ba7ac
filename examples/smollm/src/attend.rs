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

/// `Σ a·b` in eight lanes (lane `i` sums elements `i, i + 8, …` in order),
/// the lanes added pairwise, then the elements past the last 8 in order.
/// The order is part of the definition: [`attend`]'s wide path repeats it.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut l = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
            l[i] += x[i] * y[i];
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
/// of `k` and `v` (`[position, hd]` each, at least that many positions):
/// `o = Σ_t softmax_t(q · k_t / √hd) · v_t`, the weights `exp(s_t − max) /
/// Σ exp(s − max)`. `scores` is the work row. The same bits on every CPU.
pub(crate) fn attend(hd: usize, q: &[f32], k: &[f32], v: &[f32], o: &mut [f32], scores: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        let done = match hd {
            16 => wide::attend::<2>(simd, q, k, v, o, scores),
            32 => wide::attend::<4>(simd, q, k, v, o, scores),
            64 => wide::attend::<8>(simd, q, k, v, o, scores),
            128 => wide::attend::<16>(simd, q, k, v, o, scores),
            _ => false,
        };
        if done {
            return;
        }
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        let done = match hd {
            16 => wasm::attend::<2>(q, k, v, o, scores),
            32 => wasm::attend::<4>(q, k, v, o, scores),
            64 => wasm::attend::<8>(q, k, v, o, scores),
            128 => wasm::attend::<16>(q, k, v, o, scores),
            _ => false,
        };
        if done {
            return;
        }
    }
    attend_portable(hd, q, k, v, o, scores);
}

/// [`attend`] as written: the definition the wide path is tested against.
fn attend_portable(hd: usize, q: &[f32], k: &[f32], v: &[f32], o: &mut [f32], scores: &mut [f32]) {
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
            .for_each(|(o, &v)| *o += w * v);
    }
}

/// `s ← exp(s − max s)` in place; returns `Σ s` (summed in order).
#[inline(always)]
fn exp_shifted(scores: &mut [f32]) -> f32 {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut total = 0f32;
    scores.iter_mut().for_each(|s| {
        *s = crate::math::exp(*s - max);
        total += *s;
    });
    total
}

/// What the wide attention needs of a SIMD type: eight f32 lanes (one
/// AVX2 register, or two SIMD128 ones), a product then a sum (never fused),
/// so that every implementation gives [`dot`]'s bits.
#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
trait Lanes8: Copy {
    /// Eight lanes.
    type V: Copy;
    fn splat(self, v: f32) -> Self::V;
    /// Eight values from the start of `s` (at least 8 long).
    fn load(self, s: &[f32]) -> Self::V;
    /// `a + x·y` lane by lane.
    fn add_mul(self, a: Self::V, x: Self::V, y: Self::V) -> Self::V;
    fn to_array(self, a: Self::V) -> [f32; 8];
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
fn attend_lanes<L: Lanes8, const C: usize>(
    s: L,
    q: &[f32],
    k: &[f32],
    v: &[f32],
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
                *a = s.add_mul(*a, qc, s.load(&rows[j * hd + 8 * c..]));
            }
        }
        for (j, a) in acc.into_iter().enumerate() {
            scores[t + j] = lanes_sum(s.to_array(a), tail) * scale;
        }
        t += 4;
    }
    for (t, sc) in scores.iter_mut().enumerate().skip(t) {
        let row = &k[t * hd..(t + 1) * hd];
        let mut a = zero;
        for (c, &qc) in qv.iter().enumerate() {
            a = s.add_mul(a, qc, s.load(&row[8 * c..]));
        }
        *sc = lanes_sum(s.to_array(a), tail) * scale;
    }
    let total = exp_shifted(scores);
    let mut acc = [zero; C];
    for (t, &p) in scores.iter().enumerate() {
        let w = s.splat(p / total);
        let row = &v[t * hd..(t + 1) * hd];
        for (c, a) in acc.iter_mut().enumerate() {
            *a = s.add_mul(*a, w, s.load(&row[8 * c..]));
        }
    }
    for (c, a) in acc.into_iter().enumerate() {
        o[8 * c..8 * c + 8].copy_from_slice(&s.to_array(a));
    }
    true
}

#[cfg(target_arch = "x86_64")]
mod wide {
    use pulp::{f32x8, x86::V3, Simd, WithSimd};

    use super::{attend_lanes, Lanes8};

    /// [`super::attend_lanes`] on AVX2, eight lanes a register.
    pub(super) fn attend<const C: usize>(
        simd: V3,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        o: &mut [f32],
        scores: &mut [f32],
    ) -> bool {
        // the trait's `vectorize` (V3's own takes a closure, which is not
        // inlined into the AVX2 function)
        Simd::vectorize(
            simd,
            Attend::<C> {
                simd,
                q,
                k,
                v,
                o,
                scores,
            },
        )
    }

    struct Attend<'a, const C: usize> {
        simd: V3,
        q: &'a [f32],
        k: &'a [f32],
        v: &'a [f32],
        o: &'a mut [f32],
        scores: &'a mut [f32],
    }

    impl Lanes8 for V3 {
        type V = f32x8;
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
        #[inline(always)]
        fn add_mul(self, a: f32x8, x: f32x8, y: f32x8) -> f32x8 {
            self.add_f32s(a, self.mul_f32s(x, y))
        }
        #[inline(always)]
        fn to_array(self, a: f32x8) -> [f32; 8] {
            bytemuck::cast(a)
        }
    }

    impl<const C: usize> WithSimd for Attend<'_, C> {
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
            attend_lanes::<V3, C>(simd, q, k, v, o, scores)
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use std::arch::wasm32::*;

    use super::{attend_lanes, Lanes8};

    /// SIMD128, the build's own features: eight lanes in two registers,
    /// lanes 0–3 and 4–7.
    #[derive(Clone, Copy)]
    struct Simd128;

    impl Lanes8 for Simd128 {
        type V = (v128, v128);
        #[inline(always)]
        fn splat(self, v: f32) -> (v128, v128) {
            (f32x4_splat(v), f32x4_splat(v))
        }
        #[inline(always)]
        fn load(self, s: &[f32]) -> (v128, v128) {
            let s = &s[..8];
            (f32x4(s[0], s[1], s[2], s[3]), f32x4(s[4], s[5], s[6], s[7]))
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

    /// [`super::attend_lanes`] on SIMD128.
    pub(super) fn attend<const C: usize>(q: &[f32], k: &[f32], v: &[f32], o: &mut [f32], scores: &mut [f32]) -> bool {
        attend_lanes::<Simd128, C>(Simd128, q, k, v, o, scores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values in [−2, 2) from a seed, some of them far apart so that the
    /// softmax is not flat.
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 22) as f32 - 2.0
            })
            .collect()
    }

    #[test]
    fn one_position_returns_its_value_and_equal_scores_average() {
        let (hd, q) = (16, vec![0.5f32; 16]);
        let v: Vec<f32> = (0..32).map(|i| i as f32).collect();
        let (mut o, mut s) = (vec![9f32; hd], vec![0f32; 2]);
        attend(hd, &q, &[0.25; 16], &v, &mut o, &mut s[..1]);
        assert_eq!(o, v[..16]);
        // two equal keys: each weight 1/2, so o is the mean of the two rows
        attend(hd, &q, &[0.25; 32], &v, &mut o, &mut s);
        let mean: Vec<f32> = (0..16).map(|i| (i as f32 + (i + 16) as f32) / 2.0).collect();
        assert_eq!(o, mean);
    }

    #[test]
    fn the_wide_path_has_the_bits_of_the_portable_one() {
        for hd in [8, 16, 24, 32, 64, 128] {
            for n in [1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 16, 31, 64, 130, 203] {
                let seed = (hd * 1000 + n) as u64;
                let (q, k, v) = (values(seed, hd), values(seed + 1, n * hd), values(seed + 2, n * hd));
                let (mut o1, mut o2, mut s1, mut s2) = (vec![0f32; hd], vec![0f32; hd], vec![0f32; n], vec![0f32; n]);
                attend(hd, &q, &k, &v, &mut o1, &mut s1);
                attend_portable(hd, &q, &k, &v, &mut o2, &mut s2);
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&o1), bits(&o2), "hd {hd}, {n} positions");
                assert_eq!(bits(&s1), bits(&s2), "hd {hd}, {n} positions");
            }
        }
    }

    #[test]
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    fn the_wasm_path_runs_and_refuses_short_slices() {
        let (mut o, mut s) = (vec![0f32; 64], vec![0f32; 3]);
        assert!(wasm::attend::<8>(&[1.0; 64], &[0.5; 192], &[2.0; 192], &mut o, &mut s));
        assert_eq!(o, vec![2.0; 64]);
        assert!(!wasm::attend::<8>(&[1.0; 64], &[0.5; 191], &[2.0; 192], &mut o, &mut s));
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_wide_path_runs_where_the_cpu_has_avx2() {
        // the test above compares the portable code with itself where
        // the wide path cannot run: say so instead of passing quietly
        if let Some(simd) = pulp::x86::V3::try_new() {
            let (mut o, mut s) = (vec![0f32; 64], vec![0f32; 3]);
            assert!(wide::attend::<8>(
                simd,
                &[1.0; 64],
                &[0.5; 192],
                &[2.0; 192],
                &mut o,
                &mut s
            ));
            assert_eq!(o, vec![2.0; 64]);
            // short slices are refused, never read past
            assert!(!wide::attend::<8>(
                simd,
                &[1.0; 64],
                &[0.5; 191],
                &[2.0; 192],
                &mut o,
                &mut s
            ));
        } else {
            eprintln!("no AVX2 here: the wide attention path is not exercised");
        }
    }
}
