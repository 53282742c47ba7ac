//! The benchmark matrix: every case prepared once, then measured in
//! repeats that alternate every case (and another revision's runner).

use qlinear::tiers::{KernelFamily, PanelsQ4, Route, Weights};
use qlinear::{Int8Tier, QuantizedWeight};

use crate::probe::bandwidth_probe;
use crate::{copies, data, median_time, ms_of, run_family, weights, Case, Config, Sample, FAMILIES};

/// The benchmark matrix: every configuration of `cfg`'s shapes (both cache
/// modes, every family, M, tier and thread count the filters keep), each
/// prepared once so that the repeats measure the same bytes.
pub(crate) fn matrix(
    cfg: &Config,
    tiers: &[Int8Tier],
    wanted: &dyn Fn(&str) -> bool,
    m_wanted: &dyn Fn(usize) -> bool,
) -> Vec<Case> {
    // Every case is prepared once (weights for both cache modes stay in
    // memory), so the repeats measure the same bytes and alternate cleanly.
    let mut cases: Vec<Case> = vec![];
    for &(n, k) in &cfg.shapes {
        let wf = std::sync::Arc::new(data(n * k, 1));
        for cache in ["hot", "cold"] {
            // prefill (M >= 64) is compute-bound: hot only
            let ms = |fname: &str| -> Vec<usize> {
                ms_of(fname)
                    .iter()
                    .copied()
                    .filter(|&m| m_wanted(m) && (m < 64 || cache == "hot"))
                    .collect()
            };
            let at = Shape {
                n,
                k,
                cache,
                wf: &wf,
                prepared: Default::default(),
            };
            if wanted("f32") {
                f32_cases(&at, &ms("f32"), &mut cases);
            }
            for &(family, fname) in &FAMILIES {
                if wanted(fname) {
                    family_cases(cfg, tiers, &at, family, fname, &ms(fname), &mut cases);
                }
            }
            #[cfg(feature = "candle")]
            for (fname, tier, dtype, block_bytes) in crate::candle::TYPES {
                if wanted(fname) || wanted("candle") {
                    candle_cases(&at, (fname, tier, dtype, block_bytes), &ms(fname), &mut cases);
                }
            }
        }
    }
    cases
}

/// One shape and cache mode of the matrix, with the f32 weights every
/// family quantizes.
pub(crate) struct Shape<'a> {
    n: usize,
    k: usize,
    cache: &'static str,
    wf: &'a std::sync::Arc<Vec<f32>>,
    /// The quantized copies made so far at this shape and cache mode, by
    /// the weight they hold (`KernelFamily::weights`): families that read the same
    /// weight (W8A8 and W8A16; W4A8 and W4A16, per channel or grouped) run
    /// on the same copies. Cold, each kind's copies are twice the last-level
    /// cache: with a copy per family the full matrix held 23 GB on an Intel
    /// Xeon with a 480 MiB L3, more than its 24 GiB machine could give.
    prepared: std::cell::RefCell<Vec<(Option<Weights>, Prepared)>>,
}

/// One weight kind's copies at a shape: the weights, their panel forms
/// where they have one (W4A8's, grouped by 32 or per channel), and the
/// bytes of one copy.
#[derive(Clone)]
struct Prepared {
    weights: std::sync::Arc<Vec<QuantizedWeight>>,
    panels: std::sync::Arc<Vec<PanelsQ4>>,
    bytes: usize,
}

impl Shape<'_> {
    /// `family`'s weights at this shape, made on first use and shared with
    /// the families that read the same kind.
    fn prepared(&self, family: KernelFamily) -> Prepared {
        let kind = family.weights();
        let mut prepared = self.prepared.borrow_mut();
        let at = match prepared.iter().position(|(k, _)| *k == kind) {
            Some(at) => at,
            None => {
                let (weights, bytes) = weights(family, self.n, self.k, self.wf, self.cache == "cold");
                let p = Prepared {
                    weights: std::sync::Arc::new(weights),
                    panels: Default::default(),
                    bytes,
                };
                prepared.push((kind, p));
                prepared.len() - 1
            }
        };
        let p = &mut prepared[at].1;
        // a tier with panel tiles runs W4A8 (grouped or per channel) on the
        // panel form, as a layer on it does (the same bytes, permuted):
        // made once, for it
        if matches!(family, KernelFamily::W4A8 | KernelFamily::W4A8Grouped) && p.panels.is_empty() {
            p.panels = std::sync::Arc::new(
                p.weights
                    .iter()
                    .filter_map(|w| match w {
                        QuantizedWeight::Q4(q) => PanelsQ4::new(q),
                        QuantizedWeight::Q8(_) => None,
                    })
                    .collect(),
            );
        }
        p.clone()
    }
}

/// The f32 baseline (the `gemm` crate) at `at`, for each M of `ms` and 1 and
/// 2 threads.
fn f32_cases(at: &Shape<'_>, ms: &[usize], cases: &mut Vec<Case>) {
    let (n, k, cache, wf) = (at.n, at.k, at.cache, at.wf);
    let fcopies = std::sync::Arc::new(
        (0..copies(n * k * 4, cache == "cold"))
            .map(|_| wf.to_vec())
            .collect::<Vec<Vec<f32>>>(),
    );
    for &m in ms {
        for threads in [1usize, 2] {
            let (fcopies, x) = (fcopies.clone(), data(m * k, 2));
            let mut y = vec![0f32; m * n];
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let par = if threads == 1 {
                gemm::Parallelism::None
            } else {
                gemm::Parallelism::Rayon(threads)
            };
            cases.push(Case {
                family: "f32".into(),
                tier: "gemm".into(),
                m,
                n,
                k,
                threads,
                cache,
                weight_bytes: n * k * 4,
                run: Box::new(move |budget| {
                    pool.install(|| {
                        median_time(budget, |i| {
                            let w = &fcopies[i % fcopies.len()];
                            // SAFETY: y is [m, n] (row stride n), x is [m, k] (row stride
                            // k), and w is [n, k] read as Wᵀ [k, n] (column stride k);
                            // all three are live, correctly sized buffers and y does not
                            // alias them.
                            unsafe {
                                gemm::gemm(
                                    m,
                                    n,
                                    k,
                                    y.as_mut_ptr(),
                                    1,
                                    n as isize,
                                    false,
                                    x.as_ptr(),
                                    1,
                                    k as isize,
                                    w.as_ptr(),
                                    k as isize,
                                    1,
                                    0.0f32,
                                    1.0f32,
                                    false,
                                    false,
                                    false,
                                    par,
                                )
                            }
                        })
                    })
                }),
            });
        }
    }
}

/// One kernel family at `at` on every proven tier and on the plan's route,
/// for each M of `ms` and 1 and 2 threads (the scalar tier at M = 1, and at
/// M = 16 outside `--quick`).
fn family_cases(
    cfg: &Config,
    tiers: &[Int8Tier],
    at: &Shape<'_>,
    family: KernelFamily,
    fname: &'static str,
    ms: &[usize],
    cases: &mut Vec<Case>,
) {
    let (n, k, cache) = (at.n, at.k, at.cache);
    let Prepared { weights, panels, bytes } = at.prepared(family);
    // only the W4A8 families have panel tiles
    let panels = if matches!(family, KernelFamily::W4A8 | KernelFamily::W4A8Grouped) {
        panels
    } else {
        Default::default()
    };
    for &m in ms {
        let mut routes: Vec<(String, Route)> = tiers
            .iter()
            .map(|&t| (t.to_string(), Route::for_tier(t).unwrap()))
            .collect();
        if let Ok(r) = Route::planned(family, m) {
            routes.push((format!("plan:{}", r.tier()), r));
        }
        for (name, route) in routes {
            // the scalar tier is the slow reference: M = 1 always, M = 16 outside
            // --quick, never prefill
            if route.tier() == Int8Tier::Scalar && (m > 16 || (m > 1 && cfg.quick)) {
                continue;
            }
            for threads in [1usize, 2] {
                let (weights, x) = (weights.clone(), data(m * k, 3));
                let panels = if route.has_panels(family) {
                    panels.clone()
                } else {
                    Default::default()
                };
                let mut y = vec![0f32; m * n];
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                cases.push(Case {
                    family: fname.into(),
                    tier: name.clone(),
                    m,
                    n,
                    k,
                    threads,
                    cache,
                    weight_bytes: bytes,
                    run: Box::new(move |budget| {
                        pool.install(|| {
                            median_time(budget, |i| match panels.get(i % panels.len().max(1)) {
                                Some(p) => route
                                    .linear_q4_panels(&x, m, p, &mut y)
                                    .expect("benchmark shapes are valid"),
                                None => run_family(&route, family, &weights, &x, m, &mut y, i),
                            })
                        })
                    }),
                });
            }
        }
    }
}

/// candle's `QMatMul` on one of its types at `at` (`--features candle`).
#[cfg(feature = "candle")]
fn candle_cases(
    at: &Shape<'_>,
    (fname, tier, dtype, block_bytes): (&'static str, &'static str, candle_core::quantized::GgmlDType, usize),
    ms: &[usize],
    cases: &mut Vec<Case>,
) {
    let (n, k, cache, wf) = (at.n, at.k, at.cache, at.wf);
    let bytes = n * k / 32 * block_bytes;
    for &m in ms {
        let (wf, x) = (wf.clone(), data(m * k, 3));
        let copies = copies(bytes, cache == "cold");
        cases.push(Case {
            family: fname.into(),
            tier: tier.into(),
            m,
            n,
            k,
            threads: crate::candle::threads(),
            cache,
            weight_bytes: bytes,
            run: Box::new(move |budget| {
                crate::candle::median_us(&wf, (n, k), &x, m, dtype, copies, budget)
                    .expect("candle QMatMul on a valid shape")
            }),
        });
    }
}

/// Runs the matrix `repeat` times, each repeat after the bandwidth probe
/// (and, with `compare`, followed by the other revision's runner on the same
/// slice): every case's samples, and the other revision's JSON rows.
pub(crate) fn measure(
    cases: &mut [Case],
    cfg: &Config,
    repeat: usize,
    compare: Option<&(String, String)>,
    args: &[String],
) -> (Vec<Sample>, Vec<serde_json::Value>) {
    // The whole matrix `repeat` times: each repeat measures the probe, then
    // every case once, so a case's repeats alternate with every other case
    // (and with the other revision's run, under --compare-with).
    let mut samples: Vec<Sample> = vec![];
    let mut other: Vec<serde_json::Value> = vec![];
    for rep in 0..repeat {
        let bw: Vec<f64> = [1, 2].iter().map(|&t| bandwidth_probe(t)).collect();
        println!(
            "repeat {}/{repeat}: memory bandwidth probe (1 GiB read): 1 thread {:.2} GB/s, 2 threads {:.2} GB/s",
            rep + 1,
            bw[0],
            bw[1]
        );
        for (c, case) in cases.iter_mut().enumerate() {
            let t = (case.run)(cfg.budget);
            eprintln!(
                "[{}/{repeat}] {:<10} {:<18} M={:<3} {}x{} t={} {}: {t:.1} µs",
                rep + 1,
                case.family,
                case.tier,
                case.m,
                case.n,
                case.k,
                case.threads,
                case.cache
            );
            samples.push(Sample {
                case: c,
                repeat: rep,
                median_us: t,
                probe_gbps: bw[(case.threads - 1).min(1)],
            });
        }
        if let Some((bin, json)) = &compare {
            let passthrough: Vec<&String> = args
                .iter()
                .skip(1)
                .enumerate()
                .filter(|(i, a)| {
                    let prev = if *i == 0 { None } else { args.get(*i) };
                    !matches!(a.as_str(), "--repeat" | "--compare-with" | "--compare-json")
                        && !prev.is_some_and(|p| matches!(p.as_str(), "--repeat" | "--compare-with" | "--compare-json"))
                })
                .map(|(_, a)| a)
                .collect();
            eprintln!("[{}/{repeat}] the other revision: {bin} {passthrough:?}", rep + 1);
            let status = std::process::Command::new(bin)
                .args(&passthrough)
                .stdout(std::process::Stdio::null())
                .status()
                .expect("the other revision's runner starts");
            assert!(status.success(), "the other revision's runner failed: {status}");
            let text = std::fs::read_to_string(json).expect("the other revision wrote its JSON");
            let v: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
            for r in v["rows"].as_array().cloned().unwrap_or_default() {
                other.push(r);
            }
        }
    }
    (samples, other)
}
