//! The tier law: every proven tier equals the scalar tier bit for bit, over
//! random shapes with all tails (M 1..20, N 1..40, K 1..300, groups 2..64),
//! plus batch and thread invariance per tier, and one fixed batch case at
//! K = 4480/4481 for the SIMD tiers' K chunks. Today's proven tiers are
//! whatever this CPU and build have; every new tier is picked up here.

use half::f16;
use proptest::prelude::*;
use qlinear_dispatch::{selftest_report, Int8Tier, Route};
use qlinear_quant_recipe::{GroupSize, Q4Scales, QuantizedMatrix, QuantizedMatrixQ4};

fn proven() -> Vec<Route> {
    selftest_report()
        .proven_tiers()
        .into_iter()
        .map(|t| Route::for_tier(t).unwrap())
        .collect()
}

#[derive(Debug, Clone)]
struct Case {
    m: usize,
    n: usize,
    k: usize,
    group: usize,
    x: Vec<f32>,
    w: Vec<f32>,
    nibbles: Vec<u8>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        1usize..20,
        1usize..40,
        1usize..300,
        prop::sample::select(vec![2usize, 4, 6, 8, 16, 32, 64]),
    )
        .prop_flat_map(|(m, n, k, g)| {
            let x = proptest::collection::vec(-8.0f32..8.0, m * k);
            let w = proptest::collection::vec(-1.0f32..1.0, n * k);
            let nib = proptest::collection::vec(0u8..16, n * k);
            (Just((m, n, k, g)), x, w, nib)
        })
        .prop_map(|((m, n, k, group), x, w, nibbles)| Case {
            m,
            n,
            k,
            group,
            x,
            w,
            nibbles,
        })
}

fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
}

/// Every family's output on one route for one case.
fn outputs(route: &Route, c: &Case) -> Vec<Vec<u32>> {
    let (m, n, k) = (c.m, c.n, c.k);
    let q8 = QuantizedMatrix::quantize(n, k, &c.w).unwrap();
    let q4 = QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &c.w).unwrap();
    // random raw nibbles (including code -8) with odd-K pad 8
    let stride = k.div_ceil(2);
    let mut raw = vec![0x88u8; n * stride];
    for r in 0..n {
        for col in 0..k {
            let b = &mut raw[r * stride + col / 2];
            let v = c.nibbles[r * k + col];
            *b = if col % 2 == 0 {
                (*b & 0xF0) | v
            } else {
                (*b & 0x0F) | (v << 4)
            };
        }
    }
    let q4raw = QuantizedMatrixQ4::from_parts_biased(n, k, raw, Q4Scales::PerChannel(q8.scales().to_vec())).unwrap();
    let mut out = vec![];
    let mut y = vec![f32::NAN; m * n];
    route.linear_q8_dynamic(&c.x, m, &q8, &mut y).unwrap();
    out.push(bits(&y));
    route.linear_w8a16(&c.x, m, &q8, &mut y).unwrap();
    out.push(bits(&y));
    for w in [&q4, &q4raw] {
        route.linear_q4_dynamic(&c.x, m, w, &mut y).unwrap();
        out.push(bits(&y));
        route.linear_w4a16(&c.x, m, w, &mut y).unwrap();
        out.push(bits(&y));
    }
    let mut codes = vec![0i8; m * k];
    let mut scales = vec![0f32; m];
    route.quantize_activations(&c.x, m, &mut codes, &mut scales).unwrap();
    out.push(codes.iter().map(|&c| c as u32).chain(bits(&scales)).collect());
    out.push(vec![route.dot_i32(&codes[..k], &q8.codes()[..k]).unwrap() as u32]);
    out.push(vec![route.dot_i32_q4(&codes[..k], q4raw.row_packed(0)).unwrap() as u32]);
    if k % c.group == 0 {
        let q4g = QuantizedMatrixQ4::quantize(n, k, GroupSize::Group(c.group), &c.w).unwrap();
        route.linear_q4_dynamic(&c.x, m, &q4g, &mut y).unwrap();
        out.push(bits(&y));
        route.linear_w4a16(&c.x, m, &q4g, &mut y).unwrap();
        out.push(bits(&y));
        // raw nibbles with random f16 scales of both signs (an imported
        // GGUF Q4_0 block's may be negative, NUMERICS §4), including code -8
        let (packed, _) = q4raw.clone().into_parts();
        let gs: Vec<f16> = c.w.iter().step_by(c.group).map(|&v| f16::from_f32(v)).collect();
        if k % 2 == 0 {
            let w = QuantizedMatrixQ4::from_parts_biased(
                n,
                k,
                packed,
                Q4Scales::Grouped {
                    group: c.group,
                    scales: gs,
                },
            )
            .unwrap();
            route.linear_q4_dynamic(&c.x, m, &w, &mut y).unwrap();
            out.push(bits(&y));
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_proven_tier_equals_scalar(c in case()) {
        let scalar = outputs(&Route::for_tier(Int8Tier::Scalar).unwrap(), &c);
        for route in proven() {
            prop_assert_eq!(&outputs(&route, &c), &scalar, "tier {}", route.tier());
        }
    }

    #[test]
    fn every_proven_tier_is_batch_and_thread_invariant(c in case()) {
        for route in proven() {
            let all = outputs(&route.with_parallel_threshold(0), &c);
            // (no threads on WASI: there the pool cannot be built and rayon runs inline)
            if let Ok(pool) = rayon::ThreadPoolBuilder::new().num_threads(3).build() {
                let threaded = pool.install(|| outputs(&route.with_parallel_threshold(0), &c));
                prop_assert_eq!(&all, &threaded, "tier {} threads", route.tier());
            }
            // the last activation row alone equals its row of the batch (matrix families)
            let last = Case { m: 1, x: c.x[(c.m - 1) * c.k..].to_vec(), ..c.clone() };
            let alone = outputs(&route, &last);
            for f in [0usize, 1, 2, 3, 4, 5] {
                prop_assert_eq!(&all[f][(c.m - 1) * c.n..], &alone[f][..], "tier {} family {}", route.tier(), f);
            }
        }
    }
}

/// A deterministic case of the given shape (an LCG; nibbles include code -8).
fn fixed_case(m: usize, n: usize, k: usize, group: usize) -> Case {
    let mut s = (m * 31 + n * 7 + k) as u32;
    let mut next = move || {
        s = s.wrapping_mul(1664525).wrapping_add(1013904223);
        s >> 8
    };
    Case {
        m,
        n,
        k,
        group,
        x: (0..m * k).map(|_| next() as f32 / (1 << 21) as f32 - 4.0).collect(),
        w: (0..n * k).map(|_| next() as f32 / (1 << 23) as f32 - 1.0).collect(),
        nibbles: (0..n * k).map(|_| (next() % 16) as u8).collect(),
    }
}

/// The batch paths beyond the proptest's K < 300: M = 9 is two 4-row
/// activation tiles and a single row (or one 8-row tile, AVX2's W4A8
/// grouped, and a single row); K = 4480 and 4481 cross the SIMD tiers' K
/// chunks (2048 columns) with and without a column tail; N = 9 is two 4-row
/// weight blocks and a leftover row. M = 17, K = 544 is two 8-row tiles and a
/// row, with 17 groups of 32: two 8-group steps and one group after them.
#[test]
fn batch_tiles_across_k_chunks_equal_scalar() {
    for (m, n, k) in [(9usize, 9usize, 4480usize), (9, 9, 4481), (17, 5, 544)] {
        let c = fixed_case(m, n, k, 32);
        let scalar = outputs(&Route::for_tier(Int8Tier::Scalar).unwrap(), &c);
        for route in proven() {
            assert_eq!(outputs(&route, &c), scalar, "tier {} at K = {k}", route.tier());
        }
    }
}

/// Groups whose packed bytes start mid-line (g / 2 odd): W4A16's whole-chunk
/// runs end at a 64-byte line, and a group starting 61–63 bytes into a line
/// must still make progress. g = 10 reaches byte 61 at group 25 (K = 640),
/// g = 42 and 26 cross lines inside a group.
#[test]
fn groups_starting_mid_line_equal_scalar() {
    for (m, n, k, g) in [(1usize, 9usize, 640usize, 10usize), (5, 9, 1344, 42), (9, 5, 650, 26)] {
        let c = fixed_case(m, n, k, g);
        let scalar = outputs(&Route::for_tier(Int8Tier::Scalar).unwrap(), &c);
        for route in proven() {
            assert_eq!(outputs(&route, &c), scalar, "tier {} at K = {k}, g = {g}", route.tier());
        }
    }
}

/// `m` rows of `k` activations whose quotients `x / s` sit on and up to 3
/// ulps beside half-integers, at the scale `s` of `max |x| = mantissa ·
/// 2^exp` (subnormal scales included), from an LCG seeded with `seed`; with
/// `bad`, one value (index mod `m k`) replaced by NaN, +∞ or −∞.
fn near_tie_rows(
    m: usize,
    k: usize,
    (mantissa, exp): (f32, i32),
    every: u32,
    seed: u32,
    bad: Option<(usize, u8)>,
) -> Vec<f32> {
    let amax = mantissa * 2f32.powi(exp);
    let s = amax / 127.0;
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_mul(1664525).wrapping_add(1013904223);
        state >> 8
    };
    let mut x: Vec<f32> = (0..m * k)
        .map(|i| {
            if i % k == 0 {
                return if next() % 2 == 0 { amax } else { -amax };
            }
            let n = (next() % 253) as f32 - 126.0;
            // one value in `every` near a half-integer, the others a quarter
            // from the integers: a quantizer that tests a block of values at
            // once must still divide for the one
            if next() % every != 0 {
                return (n + 0.25) * s;
            }
            let v = (n + 0.5) * s;
            // the magnitude nudged, stopping at 0: by the first of up to 7
            // nudges (from a random one) whose product by `1 / s` rounds to
            // the other integer than its quotient, where one does
            let nudged = |u: u32| {
                let mag = (v.to_bits() & 0x7FFF_FFFF).saturating_add_signed((u % 7) as i32 - 3);
                f32::from_bits(mag | (v.to_bits() & 0x8000_0000))
            };
            let start = next();
            (start..start + 7)
                .map(nudged)
                .find(|&x| (x * (1.0 / s)).round_ties_even() != (x / s).round_ties_even())
                .unwrap_or(nudged(start))
        })
        .collect();
    if let Some((at, kind)) = bad {
        x[at % (m * k)] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][usize::from(kind % 3)];
    }
    x
}

/// What the activation quantizer of `route` gives: the codes and scales'
/// bits, or its refusal's message.
fn quantized(route: &Route, x: &[f32], m: usize) -> Result<(Vec<i8>, Vec<u32>), String> {
    let (mut codes, mut scales) = (vec![0i8; x.len()], vec![0f32; m]);
    route
        .quantize_activations(x, m, &mut codes, &mut scales)
        .map(|()| (codes, bits(&scales)))
        .map_err(|e| e.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A SIMD quantizer may multiply by `1 / s` only where that provably
    /// rounds as `x / s` does: rows of near-ties (all of a row's values, or
    /// one in `every`) at scales from subnormal to 2^100 give the scalar tier's codes and scales, and a NaN or ±∞
    /// anywhere the same refusal, naming the same row and column.
    #[test]
    fn every_proven_quantizer_equals_scalar_at_near_ties(
        m in 1usize..4,
        k in 1usize..200,
        mantissa in 1.0f32..2.0,
        exp in -149i32..100,
        every in 1u32..40,
        seed in any::<u32>(),
        bad in proptest::option::of((any::<usize>(), any::<u8>())),
    ) {
        let x = near_tie_rows(m, k, (mantissa, exp), every, seed, bad);
        let scalar = quantized(&Route::for_tier(Int8Tier::Scalar).unwrap(), &x, m);
        prop_assert_eq!(scalar.is_err(), bad.is_some());
        for route in proven() {
            prop_assert_eq!(&quantized(&route, &x, m), &scalar, "tier {}", route.tier());
        }
    }
}
