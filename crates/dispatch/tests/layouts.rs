//! A call lays its activation rows out once, in a `LayoutCache` that every
//! task of the call reads (the frame's tiles want the rows split even/odd,
//! aligned or chunked; each task used to write its own copy). Sharing them
//! changes no bits: a call split over a two-thread pool gives the bits of
//! the bare table entry run over all outputs on one thread with no cache,
//! on every proven tier, for every matrix family, at batch sizes with row
//! tails. A cache filled from other rows, or for another family's layout,
//! is recognised and not read.

use qlinear_dispatch::{selftest_report, KernelFamily, Route};
use qlinear_kernels_core::{activation_group_sums, ActivationsF32, ActivationsQ8, Gemm, LayoutCache, OutputTile};
use qlinear_quant_recipe::{GroupSize, QuantizedMatrix, QuantizedMatrixQ4};

const FAMILIES: [KernelFamily; 6] = [
    KernelFamily::W8A8,
    KernelFamily::W4A8,
    KernelFamily::W4A8Grouped,
    KernelFamily::W8A16,
    KernelFamily::W4A16,
    KernelFamily::W4A16Grouped,
];

fn values(len: usize, seed: u32) -> Vec<f32> {
    (0..len as u32)
        .map(|i| {
            let h = (i ^ seed.wrapping_mul(0x9E37_79B9)).wrapping_mul(0x85EB_CA6B);
            ((h >> 8) % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
}

/// The weight a family reads, per channel or in groups of 32.
enum Weight {
    Q8(QuantizedMatrix),
    Q4(QuantizedMatrixQ4),
}

fn weight(family: KernelFamily, n: usize, k: usize) -> Weight {
    let w = values(n * k, 7);
    match family {
        KernelFamily::W8A8 | KernelFamily::W8A16 => Weight::Q8(QuantizedMatrix::quantize(n, k, &w).unwrap()),
        KernelFamily::W4A8Grouped | KernelFamily::W4A16Grouped => {
            Weight::Q4(QuantizedMatrixQ4::quantize(n, k, GroupSize::Group(32), &w).unwrap())
        }
        _ => Weight::Q4(QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).unwrap()),
    }
}

/// Activation rows of `x` (`[m, k]`) for `family`: quantized, with the sums
/// its Q4 kernels read.
struct Rows {
    codes: Vec<i8>,
    scales: Vec<f32>,
    sums: Vec<i32>,
    sum_group: usize,
    x: Vec<f32>,
}

fn rows(route: &Route, family: KernelFamily, x: Vec<f32>, m: usize, k: usize) -> Rows {
    let mut codes = vec![0i8; m * k];
    let mut scales = vec![0f32; m];
    route.quantize_activations(&x, m, &mut codes, &mut scales).unwrap();
    let sum_group = if matches!(family, KernelFamily::W4A8Grouped) {
        32
    } else {
        k
    };
    let sums = activation_group_sums(&codes, m, k, sum_group);
    Rows {
        codes,
        scales,
        sums,
        sum_group,
        x,
    }
}

/// The table entry of `family` over outputs `0..n` of `y` on this thread,
/// reading `layouts` when given.
fn bare(
    route: &Route,
    family: KernelFamily,
    r: &Rows,
    m: usize,
    w: &Weight,
    layouts: Option<&LayoutCache>,
) -> Vec<f32> {
    let (n, k) = match w {
        Weight::Q8(q) => (q.n(), q.k()),
        Weight::Q4(q) => (q.n(), q.k()),
    };
    let mut aq = ActivationsQ8::new(m, k, &r.codes, &r.scales, &r.sums, r.sum_group).unwrap();
    let mut af = ActivationsF32::new(m, k, &r.x).unwrap();
    if let Some(cache) = layouts {
        aq = aq.with_layouts(cache);
        af = af.with_layouts(cache);
    }
    let mut y = vec![f32::NAN; m * n];
    let t = &mut OutputTile::new(&mut y, n);
    match (route.table().unwrap().gemm(family).unwrap(), w) {
        (Gemm::Q8Q8(f), Weight::Q8(w)) => f(&aq, w, 0..n, t),
        (Gemm::F32Q8(f), Weight::Q8(w)) => f(&af, w, 0..n, t),
        (Gemm::Q8Q4(f), Weight::Q4(w)) => f(&aq, w, 0..n, t),
        (Gemm::F32Q4(f), Weight::Q4(w)) => f(&af, w, 0..n, t),
        _ => panic!("{family}: the entry does not take this weight"),
    }
    y
}

/// The checked entry point for `family`, split over the current pool (the
/// threshold 0 splits every call), on f32 activations.
fn checked(route: &Route, family: KernelFamily, x: &[f32], m: usize, w: &Weight) -> Vec<f32> {
    let route = route.with_parallel_threshold(0);
    let n = match w {
        Weight::Q8(q) => q.n(),
        Weight::Q4(q) => q.n(),
    };
    let mut y = vec![f32::NAN; m * n];
    match (family, w) {
        (KernelFamily::W8A8, Weight::Q8(q)) => route.linear_q8_dynamic(x, m, q, &mut y),
        (_, Weight::Q8(q)) => route.linear_w8a16(x, m, q, &mut y),
        (KernelFamily::W4A8 | KernelFamily::W4A8Grouped, Weight::Q4(q)) => route.linear_q4_dynamic(x, m, q, &mut y),
        (_, Weight::Q4(q)) => route.linear_w4a16(x, m, q, &mut y),
    }
    .unwrap();
    y
}

#[test]
#[cfg_attr(target_family = "wasm", ignore = "WASI has no threads: rayon runs inline there")]
fn a_call_split_over_tasks_shares_one_layout_and_keeps_the_bits() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let (n, k) = (136, 288);
    for tier in selftest_report().proven_tiers() {
        let route = Route::for_tier(tier).unwrap();
        for family in FAMILIES {
            let w = weight(family, n, k);
            for m in [1, 5, 16, 17, 33] {
                let x = values(m * k, 100 + m as u32);
                let split = pool.install(|| checked(&route, family, &x, m, &w));
                let r = rows(&route, family, x, m, k);
                let want = bare(&route, family, &r, m, &w, None);
                assert_eq!(bits(&split), bits(&want), "{tier} {family} m={m}: split call");
                // the cache, filled by the first use, read by the second
                let cache = LayoutCache::default();
                for pass in ["fills", "reads"] {
                    let got = bare(&route, family, &r, m, &w, Some(&cache));
                    assert_eq!(bits(&got), bits(&want), "{tier} {family} m={m}: cache {pass}");
                }
            }
        }
    }
}

#[test]
fn a_cache_of_other_rows_or_another_layout_is_not_read() {
    let (n, k, m) = (24, 288, 17);
    for tier in selftest_report().proven_tiers() {
        let route = Route::for_tier(tier).unwrap();
        for family in FAMILIES {
            let w = weight(family, n, k);
            let first = rows(&route, family, values(m * k, 1), m, k);
            let other = rows(&route, family, values(m * k, 2), m, k);
            let cache = LayoutCache::default();
            bare(&route, family, &first, m, &w, Some(&cache));
            let got = bare(&route, family, &other, m, &w, Some(&cache));
            let want = bare(&route, family, &other, m, &w, None);
            assert_eq!(bits(&got), bits(&want), "{tier} {family}: other rows");
            // the same rows filled for another family's layout (per channel
            // against grouped, integer against float): each reads its own
            for second in FAMILIES {
                let w2 = weight(second, n, k);
                let r2 = rows(&route, second, first.x.clone(), m, k);
                let shared = LayoutCache::default();
                bare(
                    &route,
                    family,
                    &rows(&route, family, first.x.clone(), m, k),
                    m,
                    &w,
                    Some(&shared),
                );
                let got = bare(&route, second, &r2, m, &w2, Some(&shared));
                let want = bare(&route, second, &r2, m, &w2, None);
                assert_eq!(bits(&got), bits(&want), "{tier} {family} then {second}");
            }
        }
    }
}

#[test]
fn the_builders_refuse_rows_that_do_not_fit_the_shape() {
    use qlinear_kernels_core::KernelError;
    let codes = [0i8; 12];
    let scales = [1f32; 3];
    assert!(ActivationsQ8::new(3, 4, &codes, &scales, &[], 4).is_ok());
    assert!(ActivationsQ8::new(3, 4, &codes, &scales, &[0; 6], 2).is_ok());
    let shape = |r: Result<ActivationsQ8<'_>, KernelError>| match r {
        Err(KernelError::Shape { what, expected, actual }) => (what, expected, actual),
        other => panic!("expected a shape error, got {other:?}"),
    };
    assert_eq!(
        shape(ActivationsQ8::new(3, 5, &codes, &scales, &[], 5)),
        ("activation codes [m, k]", 15, 12)
    );
    assert_eq!(
        shape(ActivationsQ8::new(3, 4, &codes, &scales[..2], &[], 4)),
        ("activation scales [m]", 3, 2)
    );
    assert_eq!(
        shape(ActivationsQ8::new(3, 4, &codes, &scales, &[0; 5], 2)),
        ("activation sums [m, k / sum_group]", 6, 5)
    );
    assert_eq!(
        shape(ActivationsQ8::new(usize::MAX, 2, &codes, &scales, &[], 2)),
        ("activation codes [m, k]", usize::MAX, 12)
    );
    for group in [0, 3] {
        assert_eq!(
            ActivationsQ8::new(3, 4, &codes, &scales, &[], group).unwrap_err(),
            KernelError::SumGroup { group, k: 4 }
        );
    }
    let x = [0f32; 6];
    assert!(ActivationsF32::new(2, 3, &x).is_ok());
    assert_eq!(
        ActivationsF32::new(4, 2, &x).unwrap_err(),
        KernelError::Shape {
            what: "activations [m, k]",
            expected: 8,
            actual: 6
        }
    );
    let message = ActivationsF32::new(4, 2, &x).unwrap_err().to_string();
    assert_eq!(message, "activations [m, k]: expected 8 elements, got 6");
}
