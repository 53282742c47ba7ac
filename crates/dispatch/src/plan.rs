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
            let weights = PlanWeights::new();
            for family in KernelFamily::GEMM {
                for m in [1, PLAN_BATCH_M] {
                    let tables: Vec<(Int8Tier, &KernelTable)> = tiers
                        .iter()
                        .rev()
                        .filter_map(|&t| t.table().ok().map(|table| (t, table)))
                        .collect();
                    let inputs = PlanInputs::new(family, m, &weights);
                    let timed = inputs.time(&tables);
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

/// The K decode is timed at: a real layer's, so per-call and per-row costs
/// weigh what they weigh in a model.
const PLAN_K: usize = 4096;
/// The K batches are timed at: their cost grows with N · K alike, and the
/// float families' fixed summation order makes 4096 columns take
/// milliseconds.
const PLAN_BATCH_K: usize = 1024;
/// Decode (M = 1) is timed on weights streamed past L2, as a decoder reads
/// them: each call reads the next of several distinct matrices of
/// [`PLAN_DECODE_N`] rows, [`PLAN_DECODE_BYTES`] in all, so every call finds
/// its weights evicted from L2 (L2 is 0.5–2 MiB a core on the x86 and ARM
/// cores this targets). A small hot matrix favours the widest loads and
/// picked the 4-row lockstep VNNI kernels on a Zen 4 where streaming
/// weights ran 1.4–2.2× slower than AVX2 (issue #20 of the tracker).
const PLAN_DECODE_N: usize = 128;
/// The decode copies' total, per weight kind.
const PLAN_DECODE_BYTES: usize = 4 << 20;
/// Batches (every M > 1) are bound by their arithmetic: timed at M = 16 on
/// one matrix of [`PLAN_BATCH_N`] rows, hot.
const PLAN_BATCH_M: usize = 16;
/// Rows of the batch matrix: every tier's widest batch tile several times.
const PLAN_BATCH_N: usize = 64;
/// Calls per tier and regime after the probe (a warm-up, then the timed
/// rounds); at decode each reads its own matrix, the next tier's after the
/// previous tier's, so no tier finds its weights in L2.
const PLAN_DECODE_CALLS: usize = 5;
/// The first call of a tier computes this fraction of the rows; a tier
/// whose extrapolated time already loses by 3× stops there, so the scalar
/// tier costs little.
const PLAN_PROBE_SLICE: usize = 8;

/// The synthetic weights the plan times, one set per weight kind (the
/// families that share a kind share its matrices): for decode
/// [`PLAN_DECODE_BYTES`] of distinct matrices of [`PLAN_DECODE_N`] rows,
/// for batches one matrix of [`PLAN_BATCH_N`] rows.
struct PlanWeights {
    q8: [Vec<QuantizedMatrix>; 2],
    q4: [Vec<QuantizedMatrixQ4>; 2],
    q4g: [Vec<QuantizedMatrixQ4>; 2],
}

impl PlanWeights {
    fn new() -> Self {
        // patterns repeated per 4 KiB: the values do not change the time
        let fill = |len: usize, byte: &dyn Fn(usize) -> u8| -> Vec<u8> {
            let block: Vec<u8> = (0..4096).map(byte).collect();
            let mut v = Vec::with_capacity(len);
            while v.len() < len {
                v.extend_from_slice(&block[..block.len().min(len - v.len())]);
            }
            v
        };
        let q8 = |n: usize, k: usize| {
            let codes = fill(n * k, &|i| ((i % 255) as i32 - 127) as i8 as u8);
            // valid by construction (codes in -127..=127); a refusal would
            // leave the kind untimed, never a panic in a library
            QuantizedMatrix::from_parts(n, k, codes.into_iter().map(|b| b as i8).collect(), vec![0.01; n]).ok()
        };
        let q4 = |n: usize, k: usize, grouped: bool| {
            let scales = if grouped {
                Q4Scales::Grouped {
                    group: 32,
                    scales: vec![f16::from_f32(0.01); n * k / 32],
                }
            } else {
                Q4Scales::PerChannel(vec![0.01; n])
            };
            QuantizedMatrixQ4::from_parts_biased(n, k, fill(n * k / 2, &|i| (i * 37) as u8), scales).ok()
        };
        let (dn, dk, bn, bk) = (PLAN_DECODE_N, PLAN_K, PLAN_BATCH_N, PLAN_BATCH_K);
        let copies = |bytes_per_row: usize| (PLAN_DECODE_BYTES / (dn * bytes_per_row)).max(2 * PLAN_DECODE_CALLS);
        PlanWeights {
            q8: [
                (0..copies(dk)).filter_map(|_| q8(dn, dk)).collect(),
                q8(bn, bk).into_iter().collect(),
            ],
            q4: [
                (0..copies(dk / 2)).filter_map(|_| q4(dn, dk, false)).collect(),
                q4(bn, bk, false).into_iter().collect(),
            ],
            q4g: [
                (0..copies(dk / 2)).filter_map(|_| q4(dn, dk, true)).collect(),
                q4(bn, bk, true).into_iter().collect(),
            ],
        }
    }
}

/// What one family is timed on at one regime: synthetic activations and
/// the matrices of its weight kind.
struct PlanInputs<'w> {
    family: KernelFamily,
    m: usize,
    n: usize,
    k: usize,
    xc: Vec<i8>,
    xf: Vec<f32>,
    xs: Vec<f32>,
    sums: Vec<i32>,
    sum_group: usize,
    q8: &'w [QuantizedMatrix],
    q4: &'w [QuantizedMatrixQ4],
}

impl<'w> PlanInputs<'w> {
    fn new(family: KernelFamily, m: usize, w: &'w PlanWeights) -> Self {
        use KernelFamily as F;
        let regime = usize::from(m > 1);
        let grouped = matches!(family, F::W4A8Grouped | F::W4A16Grouped);
        let (q8, q4): (&[QuantizedMatrix], &[QuantizedMatrixQ4]) = match family {
            F::W8A8 | F::W8A16 => (&w.q8[regime], &[]),
            _ if grouped => (&[], &w.q4g[regime]),
            _ => (&[], &w.q4[regime]),
        };
        let (n, k) = q8
            .first()
            .map_or_else(|| q4.first().map_or((0, 0), |w| (w.n(), w.k())), |w| (w.n(), w.k()));
        let mut rng = Rng::new(7);
        let xc: Vec<i8> = (0..m * k).map(|_| rng.code(127)).collect();
        let xf: Vec<f32> = (0..m * k).map(|_| rng.unit()).collect();
        let sum_group = if grouped { 32 } else { k };
        let sums = activation_group_sums(&xc, m, k, sum_group);
        PlanInputs {
            family,
            m,
            n,
            k,
            xc,
            xf,
            xs: vec![0.01; m],
            sums,
            sum_group,
            q8,
            q4,
        }
    }

    /// One call of `table`'s kernel on the first `rows` rows of matrix
    /// `copy` (modulo the copies), in ns.
    fn run(&self, table: &KernelTable, y: &mut [f32], copy: usize, rows: usize) -> f64 {
        let (m, k, n) = (self.m, self.k, self.n);
        let aq = ActivationsQ8 {
            m,
            k,
            codes: &self.xc,
            scales: &self.xs,
            sums: &self.sums,
            sum_group: self.sum_group,
        };
        let af = ActivationsF32 { m, k, x: &self.xf };
        let copies = self.q8.len().max(self.q4.len()).max(1);
        let t = &mut OutputTile { y, ld: n };
        let start = Instant::now();
        match (
            table.gemm(self.family),
            self.q8.get(copy % copies),
            self.q4.get(copy % copies),
        ) {
            (Some(Gemm::Q8Q8(f)), Some(w), _) => f(&aq, w, 0..rows, t),
            (Some(Gemm::F32Q8(f)), Some(w), _) => f(&af, w, 0..rows, t),
            (Some(Gemm::Q8Q4(f)), _, Some(w)) => f(&aq, w, 0..rows, t),
            (Some(Gemm::F32Q4(f)), _, Some(w)) => f(&af, w, 0..rows, t),
            _ => {}
        }
        start.elapsed().as_secs_f64() * 1e9
    }

    /// Times `tables` (widest first) and returns each tier's time in ns:
    /// first one call per tier on 1/[`PLAN_PROBE_SLICE`] of the rows (a
    /// tier whose extrapolation is over 3× the best so far has lost, and
    /// that extrapolation is its time), then a warm-up call per remaining
    /// tier, then `PLAN_DECODE_CALLS − 1` rounds of one call per tier,
    /// alternated so that drift in the machine's speed falls on every tier
    /// alike; the best of its rounds.
    /// Decode: tier `j`'s calls read matrices `j · PLAN_DECODE_CALLS ..` in
    /// turn, which no other tier's call read, so none is in L2. A tier that
    /// runs an earlier tier's kernel for the family takes that tier's time
    /// (the preference order then keeps the narrower of the two).
    fn time(&self, tables: &[(Int8Tier, &KernelTable)]) -> Vec<(Int8Tier, f64)> {
        let mut y = vec![0f32; self.m * self.n];
        let first = |j: usize| if self.m == 1 { j * PLAN_DECODE_CALLS } else { 0 };
        let mut times: Vec<(Int8Tier, f64)> = vec![];
        let mut alive: Vec<usize> = vec![];
        // a tier that runs an earlier tier's kernel for this family is timed
        // once, as that tier: the choice between them is no choice
        let mut same: Vec<Option<usize>> = vec![None; tables.len()];
        for (j, &(tier, table)) in tables.iter().enumerate() {
            same[j] = (0..j).find(|&i| same[i].is_none() && tables[i].1.same_gemm(table, self.family));
            if let Some(i) = same[j] {
                times.push((tier, times[i].1));
                continue;
            }
            let probe = self.run(table, &mut y, first(j), self.n / PLAN_PROBE_SLICE) * PLAN_PROBE_SLICE as f64;
            let best = times.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
            times.push((tier, probe));
            if probe <= 3.0 * best {
                alive.push(j);
            }
        }
        for &j in &alive {
            self.run(tables[j].1, &mut y, first(j), self.n);
            times[j].1 = f64::INFINITY;
        }
        for round in 1..PLAN_DECODE_CALLS {
            for &j in &alive {
                let copy = first(j) + if self.m == 1 { round } else { 0 };
                let ns = self.run(tables[j].1, &mut y, copy, self.n);
                times[j].1 = times[j].1.min(ns);
            }
        }
        for (j, s) in same.iter().enumerate() {
            if let Some(i) = *s {
                times[j].1 = times[i].1;
            }
        }
        times
    }
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
            writeln!(f, "timings (best of {} alternated calls, µs):", PLAN_DECODE_CALLS - 1)?;
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
