use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use crate::clock::{self, Instant};

use half::f16;
use qlinear_kernels_scalar::{activation_group_sums, ActivationsF32, ActivationsQ8, Gemm, KernelTable, OutputTile};
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrix, QuantizedMatrixQ4};

use crate::selftest::Rng;
use crate::tier::tier_list;
use crate::{selftest_report, DispatchError, Int8Tier, KernelFamily};

/// The environment variable that forces one tier for every family (A/B runs).
pub const INT8_TIER_ENV: &str = "QLINEAR_INT8_TIER";

/// One measurement behind the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanTiming {
    /// The family timed.
    pub family: KernelFamily,
    /// The tier timed.
    pub tier: Int8Tier,
    /// The regime: 1 (decode) or 16 (batch).
    pub m: usize,
    /// The shape measured.
    pub n: usize,
    /// The K measured.
    pub k: usize,
    /// Best of the repetitions, in nanoseconds.
    pub best_ns: f64,
}

/// The measured per-regime route assignment, decided once per process: for
/// each matrix family the winning proven tier at decode (M = 1) and at batch
/// (M = 16, used for every M > 1).
#[derive(Debug, Clone, PartialEq)]
pub struct KernelPlanV0 {
    decode: Vec<(KernelFamily, Int8Tier)>,
    batch: Vec<(KernelFamily, Int8Tier)>,
    /// The tier `QLINEAR_INT8_TIER` forced, if any (then nothing is measured).
    pub forced: Option<Int8Tier>,
    /// What was measured to decide.
    pub timings: Vec<PlanTiming>,
    /// How long deciding took.
    pub elapsed: Duration,
}

impl KernelPlanV0 {
    /// The tier for `family` at `m` activation rows. Dot-product families follow
    /// W8A8 / W4A8, the activation quantizer W8A8.
    pub fn tier_for(&self, family: KernelFamily, m: usize) -> Int8Tier {
        let family = match family {
            KernelFamily::DotI8I8 | KernelFamily::QuantizeActivations => KernelFamily::W8A8,
            KernelFamily::DotI8Q4 => KernelFamily::W4A8,
            f => f,
        };
        let table = if m <= 1 { &self.decode } else { &self.batch };
        table
            .iter()
            .find(|(f, _)| *f == family)
            .map_or(Int8Tier::Scalar, |(_, t)| *t)
    }

    /// Measures the proven tiers (or takes the one `forced`).
    fn decide(forced: Option<Int8Tier>) -> Self {
        let start = Instant::now();
        let mut plan = KernelPlanV0 {
            decode: vec![],
            batch: vec![],
            forced,
            timings: vec![],
            elapsed: Duration::ZERO,
        };
        if let Some(t) = forced {
            plan.decode = KernelFamily::GEMM.iter().map(|&f| (f, t)).collect();
            plan.batch = plan.decode.clone();
        } else {
            let tiers = selftest_report().proven_tiers();
            if !clock::AVAILABLE {
                // nothing can be timed here: take the most specific proven tier
                let t = tiers.last().copied().unwrap_or(Int8Tier::Scalar);
                plan.decode = KernelFamily::GEMM.iter().map(|&f| (f, t)).collect();
                plan.batch = plan.decode.clone();
                return plan;
            }
            for family in KernelFamily::GEMM {
                for (m, n) in PLAN_SHAPES {
                    // Widest tier first, so the likely winner sets the pace: a
                    // tier whose warm-up run is over 3× the best so far has
                    // lost and is not repeated (the scalar tier, usually).
                    let mut timed: Vec<(Int8Tier, f64)> = vec![];
                    for &tier in tiers.iter().rev() {
                        let Ok(table) = tier.table() else { continue };
                        let best = timed.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
                        let ns = measure(table, family, m, n, PLAN_K, best * 3.0);
                        plan.timings.push(PlanTiming {
                            family,
                            tier,
                            m,
                            n,
                            k: PLAN_K,
                            best_ns: ns,
                        });
                        timed.push((tier, ns));
                    }
                    // in preference order, a later (wider) tier must win by 3% to displace an earlier one
                    let mut best: Option<(f64, Int8Tier)> = None;
                    for (tier, ns) in timed.into_iter().rev() {
                        if best.is_none_or(|(b, _)| ns < b * 0.97) {
                            best = Some((ns, tier));
                        }
                    }
                    let tier = best.map_or(Int8Tier::Scalar, |(_, t)| t);
                    if m == 1 { &mut plan.decode } else { &mut plan.batch }.push((family, tier));
                }
            }
        }
        plan.elapsed = start.elapsed();
        plan
    }
}

/// The shapes the plan times, `(m, n)` at K = [`PLAN_K`]: decode, and a batch
/// wide enough (N = 64) for the 4-row tiles of the SIMD tiers to show. Small,
/// so that the plan costs milliseconds on first use (cache-hot, like a layer
/// re-run every token).
const PLAN_SHAPES: [(usize, usize); 2] = [(1, 128), (16, 64)];
/// The K the plan times.
const PLAN_K: usize = 512;

/// The best of 3 timed runs of one kernel on a synthetic shape, after a
/// warm-up; only the warm-up when that already took longer than `give_up_ns`.
fn measure(table: &KernelTable, family: KernelFamily, m: usize, n: usize, k: usize, give_up_ns: f64) -> f64 {
    use KernelFamily as F;
    let mut rng = Rng::new(7);
    let xc: Vec<i8> = (0..m * k).map(|_| rng.code(127)).collect();
    let xf: Vec<f32> = (0..m * k).map(|_| rng.unit()).collect();
    let xs = vec![0.01f32; m];
    let mut y = vec![0f32; m * n];
    let q8 = || {
        QuantizedMatrix::from_parts(
            n,
            k,
            (0..n * k).map(|i| ((i % 255) as i32 - 127) as i8).collect(),
            vec![0.01; n],
        )
    };
    let q4 = |grouped: bool| {
        let scales = if grouped {
            Q4Scales::Grouped {
                group: 32,
                scales: vec![f16::from_f32(0.01); n * k / 32],
            }
        } else {
            Q4Scales::PerChannel(vec![0.01; n])
        };
        QuantizedMatrixQ4::from_parts_biased(n, k, (0..n * k / 2).map(|i| (i * 37) as u8).collect(), scales)
    };
    let grouped = matches!(family, F::W4A8Grouped | F::W4A16Grouped);
    let sum_group = if grouped { 32 } else { k };
    let sums = activation_group_sums(&xc, m, k, sum_group);
    let aq = ActivationsQ8 {
        m,
        k,
        codes: &xc,
        scales: &xs,
        sums: &sums,
        sum_group,
    };
    let af = ActivationsF32 { m, k, x: &xf };
    let (w8, w4) = (q8().ok(), q4(grouped).ok());
    let mut run = || {
        let t = &mut OutputTile { y: &mut y, ld: n };
        match (table.gemm(family), &w8, &w4) {
            (Some(Gemm::Q8Q8(f)), Some(w), _) => f(&aq, w, 0..n, t),
            (Some(Gemm::F32Q8(f)), Some(w), _) => f(&af, w, 0..n, t),
            (Some(Gemm::Q8Q4(f)), _, Some(w)) => f(&aq, w, 0..n, t),
            (Some(Gemm::F32Q4(f)), _, Some(w)) => f(&af, w, 0..n, t),
            _ => {}
        }
    };
    let t = Instant::now();
    run();
    let warm_up = t.elapsed().as_secs_f64() * 1e9;
    if warm_up > give_up_ns {
        return warm_up;
    }
    (0..3)
        .map(|_| {
            let t = Instant::now();
            run();
            t.elapsed().as_secs_f64() * 1e9
        })
        .fold(f64::INFINITY, f64::min)
}

/// Measures each proven tier at the two live regimes and returns the winners,
/// once per process. `QLINEAR_INT8_TIER=<tier>` forces one tier instead; an
/// unknown tier, or one that is absent or failed its proof, is an error that
/// lists the valid choices — never a silent fallback.
pub fn autotuned_plan() -> Result<&'static KernelPlanV0, DispatchError> {
    static PLAN: OnceLock<Result<KernelPlanV0, DispatchError>> = OnceLock::new();
    PLAN.get_or_init(|| {
        let forced = match std::env::var(INT8_TIER_ENV) {
            Err(std::env::VarError::NotPresent) => None,
            Ok(v) if v.trim().is_empty() => None,
            Ok(v) => Some(v.parse::<Int8Tier>()?),
            Err(std::env::VarError::NotUnicode(v)) => {
                return Err(DispatchError::UnknownTier {
                    name: v.to_string_lossy().into_owned(),
                    valid: tier_list(Int8Tier::ALL),
                })
            }
        };
        if let Some(t) = forced {
            crate::Route::for_tier(t)?;
        }
        Ok(KernelPlanV0::decide(forced))
    })
    .as_ref()
    .map_err(Clone::clone)
}

impl fmt::Display for KernelPlanV0 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.forced {
            Some(t) => writeln!(f, "plan: forced to {t} by {INT8_TIER_ENV}")?,
            None if !clock::AVAILABLE => writeln!(f, "plan: no clock on this platform: the most specific proven tier")?,
            None => writeln!(f, "plan: measured in {:.1} ms", self.elapsed.as_secs_f64() * 1e3)?,
        }
        let w = crate::tier::NAME_WIDTH;
        writeln!(f, "{:<14} {:>w$} {:>w$}", "family", "decode (M=1)", "batch (M=16)")?;
        for family in KernelFamily::GEMM {
            writeln!(
                f,
                "{:<14} {:>w$} {:>w$}",
                family.to_string(),
                self.tier_for(family, 1).name(),
                self.tier_for(family, 16).name()
            )?;
        }
        if !self.timings.is_empty() {
            writeln!(f, "timings (best of 3, µs):")?;
            for t in &self.timings {
                writeln!(
                    f,
                    "  {:<14} {:<w$} M={:<2} N={} K={}: {:.1}",
                    t.family.to_string(),
                    t.tier.name(),
                    t.m,
                    t.n,
                    t.k,
                    t.best_ns / 1e3
                )?;
            }
        }
        Ok(())
    }
}
