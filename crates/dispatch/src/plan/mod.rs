//! The autotuned plan: which proven tier runs each kernel family for
//! decode (M = 1) and for batches, decided once per process by timing the
//! candidates (`timing.rs`), or forced by `QLINEAR_INT8_TIER`; the
//! decision, its measurements and the report that prints them.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::clock::{self, Instant};

use half::f16;
use qlinear_kernels_core::{
    activation_group_sums, ActivationsF32, ActivationsQ8, Gemm, KernelTable, OutputTile, PanelsQ4, Weights,
};
use qlinear_quant_recipe::{Codes, Q4Scales, QuantizedMatrix, QuantizedMatrixQ4};

use rayon::prelude::*;

use crate::selftest::{lock_beside_pool, prove_census, prove_process, proven_for, refusal, Census, Rng};
use crate::tier::tier_list;
use crate::{DispatchError, Int8Tier, KernelFamily};

#[cfg(test)]
mod tests;
mod timing;

use timing::*;

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
    /// W8A8 / W4A8, the activation quantizer W8A8. A family this plan does
    /// not hold ([`KernelPlanV0::holds`]: a plan from [`plan_for`] before
    /// the family's first use) gets the scalar tier here; dispatch decides
    /// it when it is first used.
    pub fn tier_for(&self, family: KernelFamily, m: usize) -> Int8Tier {
        let family = plan_key(family);
        let table = if m <= 1 { &self.decode } else { &self.batch };
        table
            .iter()
            .find(|(f, _)| *f == family)
            .map_or(Int8Tier::Scalar, |(_, t)| *t)
    }

    /// The fraction within which two tiers' timings at `m` activation rows
    /// are a tie, which the wider tier takes: 10 % at decode (M = 1), 3 %
    /// for batches (the plan's rule; `docs/NUMERICS.md` says why).
    pub fn tie(m: usize) -> f64 {
        if m <= 1 {
            PLAN_DECODE_TIE
        } else {
            PLAN_BATCH_TIE
        }
    }

    /// Measures, for each of `families` (GEMM families), the tiers proven
    /// for it, and returns each family's decode and batch winners with the
    /// timings behind them. The families share one decode pool and one
    /// cursor over it.
    fn decide(families: &[KernelFamily]) -> Vec<(KernelFamily, FamilyPlan)> {
        let tables_for = |family: KernelFamily| -> Vec<(Int8Tier, &'static KernelTable)> {
            timed_tiers(proven_for(family))
                .into_iter()
                .rev()
                .filter_map(|t| t.table().ok().map(|table| (t, table)))
                .collect()
        };
        let mut plans: Vec<(KernelFamily, FamilyPlan)> = vec![];
        if !clock::available() {
            // nothing can be timed here: take the most specific proven tier
            for &family in families {
                let t = tables_for(family).first().map_or(Int8Tier::Scalar, |t| t.0);
                plans.push((family, FamilyPlan::of(t)));
            }
            return plans;
        }
        let mut weights = PlanWeights::new();
        // one cursor over the decode pool for every family and kind: a
        // family starting again at buffer 0 read the buffers the last
        // family (or the pool's fill) had just left in L2
        let cursor = Cell::new(0);
        // kind by kind, so that the decode buffers are lent to one kind's
        // matrices at a time
        for kind in Weights::ALL {
            let mut decode = weights.lend(kind);
            for family in KernelFamily::GEMM
                .into_iter()
                .filter(|&f| f.weights() == Some(kind) && families.contains(&f))
            {
                let tables = tables_for(family);
                // W4A8 (grouped or per channel) reads the pool as panel
                // forms where a SIMD tier has its panel tiles, every other
                // family as matrices
                let panels = builds_panels(&tables, family);
                decode = if panels {
                    decode.into_panels()
                } else {
                    decode.into_natural()
                };
                let mut plan = FamilyPlan::of(Int8Tier::Scalar);
                for m in [1, PLAN_BATCH_M] {
                    let inputs = PlanInputs::new(family, m, if m == 1 { &decode } else { weights.batch(kind) }, panels);
                    let timed = inputs.time(&tables, &cursor);
                    for &(tier, ns) in &timed {
                        plan.timings.push(PlanTiming {
                            family,
                            tier,
                            m,
                            n: inputs.n,
                            k: inputs.k,
                            best_ns: ns,
                        });
                    }
                    let tier = pick(&tables, &timed, family, Self::tie(m));
                    *if m == 1 { &mut plan.decode } else { &mut plan.batch } = tier;
                }
                plans.push((family, plan));
            }
            weights.take_back(decode);
        }
        plans
    }

    /// The plan of the families decided in this process so far, in
    /// [`KernelFamily::GEMM`] order.
    fn of_process(forced: Option<Int8Tier>) -> Self {
        let mut plan = KernelPlanV0 {
            decode: vec![],
            batch: vec![],
            forced,
            timings: vec![],
            elapsed: *lock_beside_pool(&PLANNING),
        };
        for (family, cell) in KernelFamily::GEMM.into_iter().zip(&PLANNED) {
            if let Some(p) = cell.get() {
                plan.decode.push((family, p.decode));
                plan.batch.push((family, p.batch));
                plan.timings.extend(p.timings.iter().cloned());
            }
        }
        plan
    }

    /// Whether this plan holds a decision for `family` (a plan from
    /// [`plan_for`] holds its census's families and those decided before).
    pub fn holds(&self, family: KernelFamily) -> bool {
        self.decode.iter().any(|(f, _)| *f == plan_key(family))
    }
}

/// One GEMM family's decision: its decode and batch tiers, and the timings
/// behind them (none when forced or untimed).
#[derive(Debug, Clone)]
struct FamilyPlan {
    decode: Int8Tier,
    batch: Int8Tier,
    timings: Vec<PlanTiming>,
}

impl FamilyPlan {
    fn of(tier: Int8Tier) -> Self {
        FamilyPlan {
            decode: tier,
            batch: tier,
            timings: vec![],
        }
    }
}

/// The GEMM family whose decision `family` follows: the dot-product
/// families follow W8A8 / W4A8, the activation quantizer W8A8.
/// The tiers the plan times for a family, of those proven for it (in
/// [`Int8Tier::ALL`] order): all of them, except on WebAssembly, where the
/// scalar tier is timed only when no SIMD tier is proven for the family.
/// *Why:* a WebAssembly engine runs a function's baseline code until the
/// function has done enough work, then its optimized code, and at start-up
/// the scalar tier's kernels have done the most (the selftest runs them as
/// the proof's reference). In Chromium 156 the plan timed scalar W8A8
/// decode at 70–75 µs against SIMD128's 95–125 and picked it, and the page
/// decoded at half its speed; optimized, SIMD128 takes 32.5 µs there and
/// scalar 76 (Node.js 20 with `--no-liftoff`, AMD EPYC Zen 4, family 25
/// model 17; SIMD128's W8A8 decode call ran at 101–102 µs for ~300 calls,
/// then 32). Between the SIMD tiers the start-up timings kept the optimized
/// order (grouped W4A8 decode: relaxed SIMD 47–85 µs against SIMD128's
/// 143–165, optimized 32.5 against 69.7). `docs/NUMERICS.md` §8.
pub(crate) fn timed_tiers(mut proven: Vec<Int8Tier>) -> Vec<Int8Tier> {
    if cfg!(target_arch = "wasm32") && proven.iter().any(|&t| t != Int8Tier::Scalar) {
        proven.retain(|&t| t != Int8Tier::Scalar);
    }
    proven
}

fn plan_key(family: KernelFamily) -> KernelFamily {
    match family {
        KernelFamily::DotI8I8 | KernelFamily::QuantizeActivations => KernelFamily::W8A8,
        KernelFamily::DotI8Q4 => KernelFamily::W4A8,
        f => f,
    }
}

/// The process's decisions, one cell per GEMM family (in
/// [`KernelFamily::GEMM`] order), each set when the family is first
/// planned (`docs/NUMERICS.md` §8).
static PLANNED: [OnceLock<FamilyPlan>; KernelFamily::GEMM.len()] =
    [const { OnceLock::new() }; KernelFamily::GEMM.len()];
/// Wall time spent planning in this process; held while planning, so one
/// plan runs at a time and no two time each other's calls.
static PLANNING: Mutex<Duration> = Mutex::new(Duration::ZERO);

fn planned_cell(family: KernelFamily) -> &'static OnceLock<FamilyPlan> {
    let i = KernelFamily::GEMM
        .iter()
        .position(|&f| f == plan_key(family))
        .unwrap_or(0);
    &PLANNED[i]
}

/// The tier `QLINEAR_INT8_TIER` forces, read once per process. Errors: an
/// unknown tier, or one not compiled in or absent from this CPU (a forced
/// tier's proof of a family is checked when the family is planned).
fn forced_tier() -> Result<Option<Int8Tier>, DispatchError> {
    static FORCED: OnceLock<Result<Option<Int8Tier>, DispatchError>> = OnceLock::new();
    FORCED
        .get_or_init(|| {
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
                if let Err(reason) = t.table() {
                    return Err(DispatchError::TierUnavailable {
                        tier: t,
                        reason,
                        valid: tier_list(Int8Tier::ALL.into_iter().filter(|t| t.is_available())),
                    });
                }
            }
            Ok(forced)
        })
        .clone()
}

/// Decides `families` (each as the GEMM family it follows) that this
/// process has not decided yet, proving them first: timed together, or
/// the forced tier, which must have passed each family's proof.
fn plan_process(families: &[KernelFamily]) -> Result<(), DispatchError> {
    let forced = forced_tier()?;
    // proven first, outside the planning time (the selftest counts it)
    let keys: Vec<KernelFamily> = families.iter().map(|&f| plan_key(f)).collect();
    prove_process(&keys);
    let mut spent = lock_beside_pool(&PLANNING);
    let mut todo: Vec<KernelFamily> = KernelFamily::GEMM
        .into_iter()
        .filter(|&g| families.iter().any(|&f| plan_key(f) == g) && planned_cell(g).get().is_none())
        .collect();
    if todo.is_empty() {
        return Ok(());
    }
    if let Some(t) = forced {
        for &family in &todo {
            if let Some(reason) = refusal(t, family) {
                return Err(DispatchError::TierUnavailable {
                    tier: t,
                    reason,
                    valid: tier_list(proven_for(family)),
                });
            }
            let _ = planned_cell(family).set(FamilyPlan::of(t));
        }
        return Ok(());
    }
    let start = Instant::now();
    todo.dedup();
    for (family, plan) in KernelPlanV0::decide(&todo) {
        // the lock is held, so no other planner set it
        let _ = planned_cell(family).set(plan);
    }
    *spent += start.elapsed();
    Ok(())
}

/// The tier the plan picks for `family` at `m` activation rows, deciding
/// the family now (proving it first) if this process has not.
pub(crate) fn planned_tier(family: KernelFamily, m: usize) -> Result<Int8Tier, DispatchError> {
    let cell = planned_cell(family);
    if cell.get().is_none() {
        plan_process(&[family])?;
    }
    Ok(cell
        .get()
        .map_or(Int8Tier::Scalar, |p| if m <= 1 { p.decode } else { p.batch }))
}

/// Decides `census`'s families now (proving them at its K values if no
/// proof has run yet, as [`crate::selftest_for`]) and returns the plan of
/// every family decided in this process so far. The families not named are
/// decided when first used. Errors as [`autotuned_plan`].
pub fn plan_for(census: &Census) -> Result<KernelPlanV0, DispatchError> {
    prove_census(census);
    plan_process(&census.families)?;
    Ok(KernelPlanV0::of_process(forced_tier()?))
}

/// The plan of every family: measures each proven tier at the two live
/// regimes and returns the winners, once per process (the families already
/// decided, by their first use or [`plan_for`], keep their decision).
/// `QLINEAR_INT8_TIER=<tier>` forces one tier instead; an unknown tier, or
/// one that is absent or failed a family's proof, is an error that lists
/// the valid choices — never a silent fallback.
pub fn autotuned_plan() -> Result<&'static KernelPlanV0, DispatchError> {
    static PLAN: OnceLock<Result<KernelPlanV0, DispatchError>> = OnceLock::new();
    if let Some(plan) = PLAN.get() {
        return plan.as_ref().map_err(Clone::clone);
    }
    // decided outside the cell, whose waiters would block (see `lock_beside_pool`)
    let plan = plan_process(&KernelFamily::GEMM).and_then(|()| Ok(KernelPlanV0::of_process(forced_tier()?)));
    PLAN.get_or_init(|| plan).as_ref().map_err(Clone::clone)
}

impl fmt::Display for KernelPlanV0 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.forced {
            Some(t) => writeln!(f, "plan: forced to {t} by {INT8_TIER_ENV}")?,
            None if !clock::available() => {
                writeln!(f, "plan: no clock on this platform: the most specific proven tier")?
            }
            None => writeln!(f, "plan: measured in {:.1} ms", self.elapsed.as_secs_f64() * 1e3)?,
        }
        let w = crate::tier::NAME_WIDTH;
        writeln!(f, "{:<14} {:>w$} {:>w$}", "family", "decode (M=1)", "batch (M=16)")?;
        for family in KernelFamily::GEMM {
            let (decode, batch) = if self.holds(family) {
                (self.tier_for(family, 1).name(), self.tier_for(family, 16).name())
            } else {
                // decided when first used
                ("-", "-")
            };
            writeln!(f, "{:<14} {decode:>w$} {batch:>w$}", family.to_string())?;
        }
        if !self.timings.is_empty() {
            writeln!(
                f,
                "timings (best of {} alternated calls; {} when the two fastest are over {:.0} % apart, {} within {:.0} %; µs):",
                PLAN_DECODE_CALLS - 1,
                PLAN_CLEAR_AFTER,
                PLAN_CLEAR * 100.0,
                PLAN_DECODE_CALLS - 1 + PLAN_CLOSE_ROUNDS,
                PLAN_CLOSE * 100.0
            )?;
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
