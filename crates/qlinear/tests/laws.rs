//! docs/NUMERICS.md §7 laws through the facade: agreement with dequantize-then-f32,
//! batch and thread invariance, errors, empty shapes, exactness near the bound.

use half::f16;
use proptest::prelude::*;
use qlinear::tiers::*;
use qlinear::*;

fn lcg(seed: u64) -> impl FnMut() -> f32 {
    let mut s = seed;
    move || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn matmul_f32(x: &[f32], m: usize, w: &[f32], n: usize, k: usize) -> Vec<f64> {
    let mut y = vec![0f64; m * n];
    for i in 0..m {
        for r in 0..n {
            y[i * n + r] = (0..k).map(|c| f64::from(x[i * k + c]) * f64::from(w[r * k + c])).sum();
        }
    }
    y
}

/// The fused kernels equal dequantize-then-matmul (to f32 rounding): groups 2,
/// 32, 64 at K = 384 and int8 at K = 200 (not a multiple of any chunk).
#[test]
fn matches_dequantize_then_matmul() {
    let mut rnd = lcg(1);
    let (m, n) = (3, 7);
    for (k, group) in [
        (384, GroupSize::Group(2)),
        (384, GroupSize::Group(32)),
        (384, GroupSize::Group(64)),
        (384, GroupSize::PerChannel),
        (200, GroupSize::PerChannel),
    ] {
        let w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
        let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
        let q4 = QuantizedMatrixQ4::quantize(n, k, group, &w).unwrap();
        let want = matmul_f32(&x, m, &q4.dequantize(), n, k);
        let mut y = vec![0f32; m * n];
        linear_w4a16(&x, m, &q4, &mut y).unwrap();
        for (a, b) in y.iter().zip(&want) {
            assert!(
                (f64::from(*a) - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "{group:?} K={k}: {a} vs {b}"
            );
        }
        let q8 = QuantizedMatrix::quantize(n, k, &w).unwrap();
        let want = matmul_f32(&x, m, &q8.dequantize(), n, k);
        linear_w8a16(&x, m, &q8, &mut y).unwrap();
        for (a, b) in y.iter().zip(&want) {
            assert!(
                (f64::from(*a) - b).abs() <= 1e-4 * (1.0 + b.abs()),
                "q8 K={k}: {a} vs {b}"
            );
        }
    }
}

/// W8A8 dynamic equals quantize-activations-then-exact-integer-matmul.
#[test]
fn dynamic_integer_paths_equal_their_definition() {
    let mut rnd = lcg(2);
    let (m, n, k) = (4, 9, 67);
    let w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
    let x: Vec<f32> = (0..m * k).map(|_| rnd() * 3.0).collect();
    let q8 = QuantizedMatrix::quantize(n, k, &w).unwrap();
    let xq = QuantizedMatrix::quantize(m, k, &x).unwrap();
    let mut y = vec![0f32; m * n];
    linear_q8_dynamic(&x, m, &q8, &mut y).unwrap();
    for i in 0..m {
        for r in 0..n {
            let acc: i32 = xq
                .row(i)
                .iter()
                .zip(q8.row(r))
                .map(|(&a, &b)| i32::from(a) * i32::from(b))
                .sum();
            assert_eq!(
                y[i * n + r].to_bits(),
                (acc as f32 * (xq.scales()[i] * q8.scales()[r])).to_bits()
            );
        }
    }
    let q4 = QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).unwrap();
    let Q4Scales::PerChannel(ws) = q4.scales() else {
        unreachable!()
    };
    linear_q4_dynamic(&x, m, &q4, &mut y).unwrap();
    for i in 0..m {
        for r in 0..n {
            let acc: i32 = (0..k).map(|c| i32::from(xq.row(i)[c]) * i32::from(q4.code(r, c))).sum();
            assert_eq!(
                y[i * n + r].to_bits(),
                (acc as f32 * (xq.scales()[i] * ws[r])).to_bits()
            );
        }
    }
}

fn all_modes(
    x: &[f32],
    m: usize,
    q8: &QuantizedMatrix,
    q4: &QuantizedMatrixQ4,
    q4g: &QuantizedMatrixQ4,
) -> Vec<Vec<u32>> {
    let n = q8.n();
    let mut out = vec![];
    for (mode, w) in [
        (QuantLinearMode::W8A8, QuantizedWeightRef::Q8(q8)),
        (QuantLinearMode::W8A16, QuantizedWeightRef::Q8(q8)),
        (QuantLinearMode::W4A8, QuantizedWeightRef::Q4(q4)),
        (QuantLinearMode::W4A16, QuantizedWeightRef::Q4(q4)),
        (QuantLinearMode::W4A8, QuantizedWeightRef::Q4(q4g)),
        (QuantLinearMode::W4A16, QuantizedWeightRef::Q4(q4g)),
    ] {
        let mut y = vec![f32::NAN; m * n];
        quant_linear(mode, x, m, w, &mut y).unwrap();
        out.push(y.iter().map(|v| v.to_bits()).collect());
    }
    out
}

/// Rows alone vs in batches, bitwise, in every mode (pitfall s09): 12 rows
/// of K = 96, and 37 rows of K = 672, where the SIMD tiers' widest batch
/// tiles (16 activation rows tall), their leftovers, whole blocks of 64 and
/// 128 columns and a K tail all run.
#[test]
fn batch_invariant_rows() {
    for (seed, (m, n, k)) in [(3, (12, 37, 96)), (5, (37, 37, 672))] {
        let mut rnd = lcg(seed);
        let w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
        let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
        let q8 = QuantizedMatrix::quantize(n, k, &w).unwrap();
        let q4 = QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).unwrap();
        let q4g = QuantizedMatrixQ4::quantize(n, k, GroupSize::Group(32), &w).unwrap();
        let batch = all_modes(&x, m, &q8, &q4, &q4g);
        for i in 0..m {
            let alone = all_modes(&x[i * k..(i + 1) * k], 1, &q8, &q4, &q4g);
            for (mode, (b, a)) in batch.iter().zip(&alone).enumerate() {
                assert_eq!(&b[i * n..(i + 1) * n], &a[..], "K {k}, mode {mode}, row {i}");
            }
        }
        for split in [5usize, 7, 16, 17] {
            if split > m {
                continue;
            }
            let part = all_modes(&x[..split * k], split, &q8, &q4, &q4g);
            for (b, p) in batch.iter().zip(&part) {
                assert_eq!(&b[..split * n], &p[..], "K {k}, first {split} rows");
            }
        }
    }
}

/// 1, 2 and 4 threads (rows forced across workers) give the same bits, N = 37 (s12).
#[test]
#[cfg_attr(target_family = "wasm", ignore = "WASI has no threads: rayon runs inline there")]
fn pool_result_equals_serial_bitwise() {
    // K = 672: whole blocks of 64 and 128 columns and a tail, groups of 32
    for (seed, (n, k, g)) in [(4, (37, 64, 16)), (6, (37, 672, 32))] {
        let mut rnd = lcg(seed);
        let w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
        let q8 = QuantizedMatrix::quantize(n, k, &w).unwrap();
        let q4g = QuantizedMatrixQ4::quantize(n, k, GroupSize::Group(g), &w).unwrap();
        let q4 = QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).unwrap();
        for m in [1usize, 3, 17] {
            let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let run = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                pool.install(|| {
                    let route = Route::planned(KernelFamily::W8A8, m)
                        .unwrap()
                        .with_parallel_threshold(0);
                    let mut ys = vec![vec![f32::NAN; m * n]; 6];
                    route.linear_q8_dynamic(&x, m, &q8, &mut ys[0]).unwrap();
                    route.linear_w8a16(&x, m, &q8, &mut ys[1]).unwrap();
                    route.linear_q4_dynamic(&x, m, &q4g, &mut ys[2]).unwrap();
                    route.linear_w4a16(&x, m, &q4g, &mut ys[3]).unwrap();
                    route.linear_q4_dynamic(&x, m, &q4, &mut ys[4]).unwrap();
                    route.linear_w4a16(&x, m, &q4, &mut ys[5]).unwrap();
                    ys.iter()
                        .map(|y| y.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
                        .collect::<Vec<_>>()
                })
            };
            let serial = run(1);
            assert!(
                serial.iter().all(|y| y.iter().all(|b| !f32::from_bits(*b).is_nan())),
                "every output written"
            );
            assert_eq!(serial, run(2), "K = {k}, m = {m}");
            assert_eq!(serial, run(4), "K = {k}, m = {m}");
        }
    }
}

#[test]
fn empty_shapes() {
    let q8 = QuantizedMatrix::quantize(3, 4, &[1.0; 12]).unwrap();
    let q4 = QuantizedMatrixQ4::quantize(3, 4, GroupSize::Group(2), &[1.0; 12]).unwrap();
    // M = 0 and N = 0 are no-ops
    linear_q8_dynamic(&[], 0, &q8, &mut []).unwrap();
    linear_w4a16(&[], 0, &q4, &mut []).unwrap();
    let empty = QuantizedMatrix::quantize(0, 4, &[]).unwrap();
    linear_w8a16(&[1.0; 8], 2, &empty, &mut []).unwrap();
    // K = 0 gives zeros in every mode
    let q8k0 = QuantizedMatrix::quantize(3, 0, &[]).unwrap();
    let q4k0 = QuantizedMatrixQ4::quantize(3, 0, GroupSize::PerChannel, &[]).unwrap();
    let q4gk0 = QuantizedMatrixQ4::quantize(3, 0, GroupSize::Group(2), &[]).unwrap();
    for y in all_modes(&[], 2, &q8k0, &q4k0, &q4gk0) {
        assert_eq!(y, vec![0u32; 6]);
    }
}

/// Errors are reported before any read and leave y untouched (s10, s11).
#[test]
fn shape_and_argument_errors_leave_y_untouched() {
    let q8 = QuantizedMatrix::quantize(2, 4, &[1.0; 8]).unwrap();
    let q4 = QuantizedMatrixQ4::quantize(2, 4, GroupSize::Group(2), &[1.0; 8]).unwrap();
    let mut y = [7.0f32; 2];
    let e = linear_q8_dynamic(&[1.0; 3], 1, &q8, &mut y).unwrap_err();
    assert_eq!(
        e,
        DispatchError::Shape {
            what: "x [m, k]",
            expected: 4,
            actual: 3
        }
    );
    assert!(
        linear_q8(&[1; 4], &[1.0; 2], 1, &q8, &mut y).is_err(),
        "x scales length"
    );
    assert!(linear_w4a16(&[1.0; 4], 1, &q4, &mut [0.0; 3]).is_err(), "y length");
    let e = linear_q8(&[1, -128, 3, 4], &[1.0], 1, &q8, &mut y).unwrap_err();
    assert_eq!(e, DispatchError::ActivationCodeOutOfRange { row: 0, col: 1 });
    assert_eq!(
        e.to_string(),
        "activation code -128 at row 0, column 1: int8 codes must be in [-127, 127]"
    );
    assert!(matches!(
        linear_q4(&[1; 4], &[-1.0], 1, &q4, &mut y),
        Err(DispatchError::InvalidActivationScale { .. })
    ));
    let e = linear_w8a16(&[1.0, f32::NAN, 0.0, 0.0], 1, &q8, &mut y).unwrap_err();
    assert!(
        matches!(e, DispatchError::NonFiniteActivation { row: 0, col: 1, .. }),
        "{e}"
    );
    assert!(matches!(
        linear_q4_dynamic(&[f32::INFINITY; 4], 1, &q4, &mut y),
        Err(DispatchError::NonFiniteActivation { .. })
    ));
    let e = quant_linear(QuantLinearMode::W4A8, &[1.0; 4], 1, QuantizedWeightRef::Q8(&q8), &mut y).unwrap_err();
    assert_eq!(e.to_string(), "quant mode w4a8 needs Q4 weights, got Q8");
    assert!(quant_linear(
        QuantLinearMode::W8A16,
        &[1.0; 4],
        1,
        QuantizedWeightRef::Q4(&q4),
        &mut y
    )
    .is_err());
    assert!(matches!(dot_i32(&[1, 2], &[1]), Err(DispatchError::Shape { .. })));
    assert!(matches!(
        dot_i32_q4(&[1, 2, 3], &[0x88]),
        Err(DispatchError::Shape { .. })
    ));
    assert_eq!(
        dot_i32_q4(&[1, 2, 3], &[0x88, 0x08]),
        Err(DispatchError::BadPadNibble { k: 3, nibble: 0 })
    );
    assert_eq!(y, [7.0, 7.0], "y untouched by every refused call");
    // the recipe refuses bad groups before a matrix can exist (K odd, G odd or 0, K % G != 0)
    assert!(QuantizedMatrixQ4::quantize(1, 5, GroupSize::Group(2), &[1.0; 5]).is_err());
    assert!(QuantizedMatrixQ4::quantize(1, 6, GroupSize::Group(3), &[1.0; 6]).is_err());
    assert!(QuantizedMatrixQ4::quantize(1, 6, GroupSize::Group(0), &[1.0; 6]).is_err());
    assert!(QuantizedMatrixQ4::quantize(1, 6, GroupSize::Group(4), &[1.0; 6]).is_err());
}

/// Law 4: the all-extreme reduction is exact at the largest K, and one past it is refused.
/// NaN or ±∞ in a later row is refused with its own row, column and value
/// on every proven tier, and `y` is left as it was: the float families find
/// it in their check, the quantized ones in their tier's quantizer (the
/// maximum's pass), a SIMD step's lanes or its scalar tail alike.
#[test]
fn a_non_finite_activation_is_named_by_row_column_and_value_on_every_tier() {
    let (n, k) = (2usize, 19usize);
    let q8 = QuantizedMatrix::quantize(n, k, &vec![0.25; n * k]).unwrap();
    let q4 = QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &vec![0.25; n * k]).unwrap();
    for tier in selftest_report().proven_tiers() {
        let route = Route::for_tier(tier).unwrap();
        // column 3 is in a SIMD step, column 18 in every tier's scalar tail
        for (col, bad) in [(3usize, f32::NAN), (18, f32::NEG_INFINITY), (18, f32::INFINITY)] {
            let mut x = vec![0.5f32; 3 * k];
            x[2 * k + col] = bad;
            let mut y = vec![7.0f32; 3 * n];
            for e in [
                route.linear_w8a16(&x, 3, &q8, &mut y).unwrap_err(),
                route.linear_q8_dynamic(&x, 3, &q8, &mut y).unwrap_err(),
                route.linear_q4_dynamic(&x, 3, &q4, &mut y).unwrap_err(),
            ] {
                match e {
                    DispatchError::NonFiniteActivation { row: 2, col: c, value }
                        if c == col && value.to_bits() == bad.to_bits() => {}
                    other => panic!("tier {tier}, column {col}: {other}"),
                }
            }
            assert!(y.iter().all(|&v| v == 7.0), "tier {tier}: y touched");
        }
    }
}

#[test]
fn i32_exact_near_the_bound_and_refused_past_it() {
    let k = MAX_K_W8A8;
    let a = vec![127i8; k];
    let b = vec![-127i8; k];
    assert_eq!(i64::from(dot_i32(&a, &b).unwrap()), -(127 * 127 * k as i64));
    let e = dot_i32(&vec![1; k + 1], &vec![1; k + 1]).unwrap_err();
    assert!(
        matches!(e, DispatchError::KTooLarge { k: kk, max, .. } if kk == k + 1 && max == MAX_K_W8A8),
        "{e}"
    );
    let kq = MAX_K_W4A8 - 1; // odd: exercises the pad too
    let mut packed = vec![0xFFu8; kq.div_ceil(2)];
    *packed.last_mut().unwrap() = 0x8F;
    assert_eq!(
        i64::from(dot_i32_q4(&vec![-127; kq], &packed).unwrap()),
        -(127 * 7 * kq as i64)
    );
    assert!(matches!(
        dot_i32_q4(&vec![0; MAX_K_W4A8 + 2], &vec![0x88; MAX_K_W4A8 / 2 + 1]),
        Err(DispatchError::KTooLarge { .. })
    ));
    let w = QuantizedMatrix::from_parts(1, k + 1, vec![0; k + 1], vec![1.0]).unwrap();
    assert!(matches!(
        linear_q8_dynamic(&vec![0.0; k + 1], 1, &w, &mut [0.0]),
        Err(DispatchError::KTooLarge { .. })
    ));
    let w = QuantizedMatrix::from_parts(1, k, vec![127; k], vec![1.0]).unwrap();
    let mut y = [0f32];
    linear_q8(&a, &[1.0], 1, &w, &mut y).unwrap();
    assert_eq!(y[0], (127 * 127 * k as i64) as f32);
}

#[test]
fn selftest_proves_scalar_and_plan_uses_proven_tiers() {
    let report = selftest_report();
    assert!(report.is_proven(Int8Tier::Scalar), "{report}");
    assert!(report.all_present_passed(), "{report}");
    let plan = autotuned_plan().unwrap();
    for family in KernelFamily::GEMM {
        for m in [1, 16] {
            assert!(report.is_proven(plan.tier_for(family, m)));
        }
    }
    for tier in Int8Tier::ALL {
        assert_eq!(tier.to_string().parse::<Int8Tier>().unwrap(), tier);
    }
    let e = "sse9".parse::<Int8Tier>().unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "unknown int8 tier \"sse9\"; valid tiers: {}",
            Int8Tier::ALL.map(|t| t.name()).join(", ")
        )
    );
    for tier in Int8Tier::of_arch("wasm32") {
        assert!(Route::for_tier(tier).is_err() || tier.is_available());
    }
    assert_eq!("W4A16".parse::<QuantLinearMode>().unwrap(), QuantLinearMode::W4A16);
    assert!("w2a2".parse::<QuantLinearMode>().is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// Negating the weights negates every output exactly (the recipe never emits -128 / -8).
    #[test]
    fn negation_symmetry(m in 1usize..4, n in 1usize..12, half_k in 0usize..40, seed in any::<u64>()) {
        let k = 2 * half_k;
        let mut rnd = lcg(seed);
        let w: Vec<f32> = (0..n * k).map(|_| rnd()).collect();
        let neg: Vec<f32> = w.iter().map(|v| -v).collect();
        let x: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
        let g = if k % 4 == 0 && k > 0 { GroupSize::Group(4) } else { GroupSize::PerChannel };
        let pos = all_modes(&x, m, &QuantizedMatrix::quantize(n, k, &w).unwrap(), &QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).unwrap(), &QuantizedMatrixQ4::quantize(n, k, g, &w).unwrap());
        let negd = all_modes(&x, m, &QuantizedMatrix::quantize(n, k, &neg).unwrap(), &QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &neg).unwrap(), &QuantizedMatrixQ4::quantize(n, k, g, &neg).unwrap());
        for (p, q) in pos.iter().zip(&negd) {
            for (a, b) in p.iter().zip(q) {
                prop_assert_eq!(f32::from_bits(*a), -f32::from_bits(*b));
            }
        }
    }
}

#[test]
fn grouped_f16_scale_is_applied_once_per_group() {
    // Two groups with very different scales: a kernel that multiplies every earlier
    // group's sum by the later scale (not resetting the partial) gets 2·(3+4) + …
    let scales = Q4Scales::Grouped {
        group: 2,
        scales: vec![f16::from_f32(1.0), f16::from_f32(100.0)],
    };
    let w = QuantizedMatrixQ4::from_parts_twos_complement(1, 4, vec![0x11, 0x11], scales).unwrap();
    let mut y = [0f32];
    linear_w4a16(&[1.0, 2.0, 3.0, 4.0], 1, &w, &mut y).unwrap();
    assert_eq!(y[0], 3.0 + 700.0);
}

/// A negative group scale (an imported GGUF `Q4_0` block, NUMERICS §4)
/// multiplies its group's sum with its sign, in both grouped families: by
/// hand, codes `[-8, 1 | 7, -8]` with scales `[-0.5 | 2]`, so the weights are
/// `[4, -0.5 | 14, -16]`.
#[test]
fn negative_group_scale_by_hand() {
    let scales = Q4Scales::Grouped {
        group: 2,
        scales: vec![f16::from_f32(-0.5), f16::from_f32(2.0)],
    };
    // two's complement: byte 0 = 0x18 (col 0 = -8, col 1 = 1), byte 1 = 0x87
    let w = QuantizedMatrixQ4::from_parts_twos_complement(1, 4, vec![0x18, 0x87], scales).unwrap();
    assert_eq!(w.dequantize(), vec![4.0, -0.5, 14.0, -16.0]);
    let x = [1.0f32, 2.0, 3.0, 4.0];
    let mut y = [0f32];
    linear_w4a16(&x, 1, &w, &mut y).unwrap();
    assert_eq!(y[0], 4.0 - 1.0 + 42.0 - 64.0);
    // W4A8: x quantizes to codes [32, 64, 95, 127] (scale 4/127), exactly
    // (-0.5·(−8·32 + 64) + 2·(7·95 − 8·127)) · 4/127
    let mut y8 = [0f32];
    quant_linear(QuantLinearMode::W4A8, &x, 1, QuantizedWeightRef::Q4(&w), &mut y8).unwrap();
    let xs = 4.0f32 / 127.0;
    let sum = 0f32 + (-256.0f32 + 64.0) * -0.5 + (665.0f32 - 1016.0) * 2.0;
    assert_eq!(y8[0], sum * xs);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Negating every group scale negates every output exactly, in both
    /// grouped families, on the tier the plan picks (the codes are the same,
    /// only the scale's sign differs: NUMERICS §4, §6.1); a zero stays +0.
    #[test]
    fn negated_group_scales_negate_the_output(
        seed in any::<u64>(), m in 1usize..6, n in 1usize..20, groups in 1usize..5,
    ) {
        let (g, k) = (32, 32 * groups);
        let mut s = seed | 1;
        let mut next = || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s };
        let packed: Vec<u8> = (0..n * k / 2).map(|_| next() as u8).collect();
        let scales: Vec<f16> = (0..n * groups).map(|_| f16::from_f32(((next() >> 40) as f32 / 16777216.0) * 2.0 - 1.0)).collect();
        let x: Vec<f32> = (0..m * k).map(|_| ((next() >> 40) as f32 / 16777216.0) * 2.0 - 1.0).collect();
        let make = |sc: Vec<f16>| QuantizedMatrixQ4::from_parts_biased(n, k, packed.clone(), Q4Scales::Grouped { group: g, scales: sc }).unwrap();
        let pos = make(scales.clone());
        let neg = make(scales.iter().map(|s| -*s).collect());
        for mode in [QuantLinearMode::W4A8, QuantLinearMode::W4A16] {
            let (mut a, mut b) = (vec![0f32; m * n], vec![0f32; m * n]);
            quant_linear(mode, &x, m, QuantizedWeightRef::Q4(&pos), &mut a).unwrap();
            quant_linear(mode, &x, m, QuantizedWeightRef::Q4(&neg), &mut b).unwrap();
            // as values: a zero output is +0 either way (0 + 0·s), so only
            // the sign of a non-zero output flips
            for (p, q) in a.iter().zip(&b) {
                prop_assert_eq!(*p, -*q);
            }
        }
    }
}
