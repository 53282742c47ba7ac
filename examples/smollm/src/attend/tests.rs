//! The attention's tests: the portable definition by hand, and every wide
//! path against it bit for bit, with f32 and bf16 caches.

use half::bf16;

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
            same_bits(hd, &q, &k, &v, &format!("f32, hd {hd}, {n} positions"));
            let held = |x: &[f32]| x.iter().map(|&x| <bf16 as KvValue>::narrow(x)).collect::<Vec<bf16>>();
            same_bits(hd, &q, &held(&k), &held(&v), &format!("bf16, hd {hd}, {n} positions"));
        }
    }
}

/// [`attend`] (the wide path where the target has one) and
/// [`attend_portable`] give the same bits.
fn same_bits<E: KvValue>(hd: usize, q: &[f32], k: &[E], v: &[E], what: &str) {
    let n = k.len() / hd;
    let (mut o1, mut o2, mut s1, mut s2) = (vec![0f32; hd], vec![0f32; hd], vec![0f32; n], vec![0f32; n]);
    attend(hd, q, k, v, &mut o1, &mut s1);
    attend_portable(hd, q, k, v, &mut o2, &mut s2);
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&o1), bits(&o2), "{what}");
    assert_eq!(bits(&s1), bits(&s2), "{what}");
}

#[test]
fn bf16_keys_and_values_attend_as_their_widened_f32() {
    // held values are exact in bf16, so the two caches give one answer
    let (hd, n) = (64, 37);
    let held = |seed| -> Vec<f32> {
        values(seed, n * hd)
            .iter()
            .map(|&x| (x * 64.0).round() / 64.0)
            .collect()
    };
    let (q, k, v) = (values(1, hd), held(2), held(3));
    let narrow = |x: &[f32]| x.iter().map(|&x| <bf16 as KvValue>::narrow(x)).collect::<Vec<bf16>>();
    let (mut o1, mut o2, mut s1, mut s2) = (vec![0f32; hd], vec![0f32; hd], vec![0f32; n], vec![0f32; n]);
    attend(hd, &q, &k, &v, &mut o1, &mut s1);
    attend(hd, &q, &narrow(&k), &narrow(&v), &mut o2, &mut s2);
    assert_eq!(o1, o2);
    assert_eq!(s1, s2);
    // and a value that bf16 rounds changes the answer: the cache is read
    let mut k2 = narrow(&k);
    k2[5] = <bf16 as KvValue>::narrow(k[5] + 0.5);
    attend(hd, &q, &k2, &narrow(&v), &mut o2, &mut s2);
    assert_ne!(o1, o2);
}

/// Arguments for the wide exps' tests: the special cases, the range's
/// ends, and every 4099th f32 bit pattern (all magnitudes and signs).
#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
fn exp_arguments() -> Vec<f32> {
    let mut xs = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        88.722_84,
        88.722_85,
        -103.972_08,
        -103.972_09,
        -87.0,
        -100.0,
        -149.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        1e-30,
    ];
    xs.extend((0..u32::MAX / 4099).map(|i| f32::from_bits(i * 4099)));
    xs
}

#[test]
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn four_lane_exp_has_the_bits_of_the_scalar_one() {
    use std::arch::wasm32::*;
    let xs = exp_arguments();
    for q in xs.chunks(4) {
        let mut v = [0f32; 4];
        v[..q.len()].copy_from_slice(q);
        let e = wasm::exp4(f32x4(v[0], v[1], v[2], v[3]));
        let got = [
            f32x4_extract_lane::<0>(e),
            f32x4_extract_lane::<1>(e),
            f32x4_extract_lane::<2>(e),
            f32x4_extract_lane::<3>(e),
        ];
        for (g, x) in got.iter().zip(v) {
            assert_eq!(
                g.to_bits(),
                crate::math::exp(x).to_bits(),
                "exp({x:e}) [{:#010x}]",
                x.to_bits()
            );
        }
    }
}

/// A wide path (`f32_path` and `bf16_path`, at `hd` 64) runs: equal keys
/// average equal values, with either cache; short slices are refused,
/// never read past.
#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
fn runs_and_refuses_short_slices(
    f32_path: impl Fn(&[f32], &[f32], &[f32], &mut [f32], &mut [f32]) -> bool,
    bf16_path: impl Fn(&[f32], &[bf16], &[bf16], &mut [f32], &mut [f32]) -> bool,
) {
    let (mut o, mut s) = (vec![0f32; 64], vec![0f32; 3]);
    assert!(f32_path(&[1.0; 64], &[0.5; 192], &[2.0; 192], &mut o, &mut s));
    assert_eq!(o, vec![2.0; 64]);
    let (half, two) = ([bf16::from_f32(0.5); 192], [bf16::from_f32(2.0); 192]);
    o.fill(0.0);
    assert!(bf16_path(&[1.0; 64], &half, &two, &mut o, &mut s));
    assert_eq!(o, vec![2.0; 64]);
    assert!(!f32_path(&[1.0; 64], &[0.5; 191], &[2.0; 192], &mut o, &mut s));
    assert!(!bf16_path(&[1.0; 64], &half, &two[..191], &mut o, &mut s));
}

#[test]
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn the_wasm_path_runs_and_refuses_short_slices() {
    runs_and_refuses_short_slices(wasm::attend::<f32, 8>, wasm::attend::<bf16, 8>);
}

#[test]
#[cfg(target_arch = "x86_64")]
fn the_wide_path_runs_where_the_cpu_has_avx2() {
    // the bit-for-bit test above compares the portable code with itself
    // where the wide path cannot run: say so instead of passing quietly
    if let Some(simd) = pulp::x86::V3::try_new() {
        runs_and_refuses_short_slices(
            |q, k, v, o, s| wide::attend::<f32, 8>(simd, q, k, v, o, s),
            |q, k, v, o, s| wide::attend::<bf16, 8>(simd, q, k, v, o, s),
        );
    } else {
        eprintln!("no AVX2 here: the wide attention path is not exercised");
    }
}

#[test]
#[cfg(target_arch = "x86_64")]
fn eight_lane_exp_has_the_bits_of_the_scalar_one() {
    let Some(simd) = pulp::x86::V3::try_new() else {
        eprintln!("no AVX2 here: the eight-lane exp is not exercised");
        return;
    };
    let xs = exp_arguments();
    for chunk in xs.chunks(8) {
        let mut v = [0f32; 8];
        v[..chunk.len()].copy_from_slice(chunk);
        // inlined into pulp's AVX2 function
        struct Exp8([f32; 8]);
        impl pulp::WithSimd for Exp8 {
            type Output = [f32; 8];
            #[inline(always)]
            fn with_simd<S: pulp::Simd>(self, _: S) -> [f32; 8] {
                let simd = pulp::x86::V3::try_new().unwrap();
                bytemuck::cast(wide::exp8(simd, bytemuck::cast(self.0)))
            }
        }
        let got = pulp::Simd::vectorize(simd, Exp8(v));
        for (g, x) in got.iter().zip(v) {
            assert_eq!(
                g.to_bits(),
                crate::math::exp(x).to_bits(),
                "exp({x:e}) [{:#010x}]",
                x.to_bits()
            );
        }
    }
}
