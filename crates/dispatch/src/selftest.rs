//! The proof a tier must pass on the running CPU before it is dispatched.
//!
//! For every family and every K of the census (the K values bound in use,
//! tail lengths 1..=67 and the family's largest supported K):
//! * all-extreme rows — codes ±127 against ±127, nibbles 15 / 0 / 1 (codes +7,
//!   -8, -7) against ±127, alternating signs — through the tier's real kernel
//!   functions, checked against exact i64 arithmetic (integer families) or the
//!   scalar tier (float families). These are exactly the inputs that break a
//!   saturating `maddubs` or a wrong `dpbusd` form;
//! * random rows, checked bit for bit against the scalar tier.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::Duration;

use crate::clock::Instant;

use half::f16;
use qlinear_kernels_scalar::panels::PANEL_GROUP;
use qlinear_kernels_scalar::{
    activation_group_sums, ActivationsF32, ActivationsQ8, GemmQ8Panels, KernelError, KernelTable, LayoutCache,
    OutputTile, PanelsQ4, MAX_K_W4A8, MAX_K_W8A8, SCALAR,
};
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrix, QuantizedMatrixQ4, RecipeError};
use rayon::prelude::*;

use crate::{Int8Tier, KernelFamily};

/// Float families have no integer bound; their extreme rows stop here to keep
/// the selftest fast (their arithmetic does not depend on K beyond the tails).
const FLOAT_PROOF_MAX_K: usize = 65_537;
/// Random differential rows are drawn at census K up to this length.
const RANDOM_PROOF_MAX_K: usize = 4096;

/// The census used when none is given: tails 1..=67, common model widths, a K
/// past 65536, and each integer family's largest supported K.
pub fn default_census() -> Vec<usize> {
    let mut c: Vec<usize> = (1..=67).collect();
    c.extend([
        0, 96, 128, 200, 256, 384, 1024, 2048, 4096, 11008, 65_538, MAX_K_W8A8, MAX_K_W4A8,
    ]);
    c.sort_unstable();
    c.dedup();
    c
}

/// The first disagreement a proof found.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// Which proof row (e.g. `"x=+127 w=-127"`).
    pub case: String,
    /// The K it ran at.
    pub k: usize,
    /// What exact arithmetic (or the scalar tier) gives.
    pub expected: String,
    /// What the tier returned.
    pub got: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at K = {}: expected {}, got {}",
            self.case, self.k, self.expected, self.got
        )
    }
}

/// The proof of one family on one tier.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyProof {
    /// The family proven.
    pub family: KernelFamily,
    /// How many proof rows ran.
    pub checks: usize,
    /// The first failure, if any.
    pub mismatch: Option<Mismatch>,
}

/// A tier's outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum TierStatus {
    /// Not compiled in, or the CPU lacks the feature: never dispatched.
    Absent(String),
    /// Every family proven passed: dispatchable for them. A report of the
    /// process's proofs ([`selftest_for`]) lists the families proven so
    /// far; the others are proven when first used.
    Proven(Vec<FamilyProof>),
    /// At least one family failed: that family, and the families that need
    /// it (W8A8 and W4A8 need the activation quantizer), are never
    /// dispatched on this tier; the families that passed still are.
    Failed(Vec<FamilyProof>),
}

/// One tier's line of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct TierReport {
    /// The tier.
    pub tier: Int8Tier,
    /// Absent, proven or failed, with the proofs.
    pub status: TierStatus,
}

/// What [`run_selftest`] found, per tier and family.
#[derive(Debug, Clone, PartialEq)]
pub struct SelftestReport {
    /// The K values proven (before each family's own bound).
    pub census: Vec<usize>,
    /// Every tier of [`Int8Tier::ALL`], in that order.
    pub tiers: Vec<TierReport>,
    /// How long the selftest took.
    pub elapsed: Duration,
}

impl SelftestReport {
    /// Whether `tier` is present and passed every proof in this report.
    pub fn is_proven(&self, tier: Int8Tier) -> bool {
        self.tiers
            .iter()
            .any(|t| t.tier == tier && matches!(t.status, TierStatus::Proven(_)))
    }
    /// The proven tiers, in [`Int8Tier::ALL`] order.
    pub fn proven_tiers(&self) -> Vec<Int8Tier> {
        self.tiers
            .iter()
            .filter(|t| matches!(t.status, TierStatus::Proven(_)))
            .map(|t| t.tier)
            .collect()
    }
    /// True unless a present (compiled-in, CPU-supported) tier failed.
    pub fn all_present_passed(&self) -> bool {
        !self.tiers.iter().any(|t| matches!(t.status, TierStatus::Failed(_)))
    }
}

impl fmt::Display for SelftestReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kmax = self.census.iter().max().copied().unwrap_or(0);
        writeln!(
            f,
            "selftest: {} census K values (max {kmax}), {:.1} ms",
            self.census.len(),
            self.elapsed.as_secs_f64() * 1e3
        )?;
        let w = crate::tier::NAME_WIDTH;
        write!(f, "{:<w$}", "tier")?;
        for fam in KernelFamily::ALL {
            write!(f, " {:>13}", fam.to_string())?;
        }
        writeln!(f)?;
        for t in &self.tiers {
            write!(f, "{:<w$}", t.tier.name())?;
            match &t.status {
                TierStatus::Absent(why) => writeln!(f, " absent: {why}")?,
                TierStatus::Proven(p) | TierStatus::Failed(p) => {
                    for fam in KernelFamily::ALL {
                        // a family not proven yet in this process: "-"
                        let cell = match p.iter().find(|fp| fp.family == fam) {
                            None => "-".to_string(),
                            Some(FamilyProof {
                                mismatch: None, checks, ..
                            }) => format!("ok ({checks})"),
                            Some(_) => "FAILED".to_string(),
                        };
                        write!(f, " {cell:>13}")?;
                    }
                    writeln!(f)?;
                    for fp in p {
                        if let Some(m) = &fp.mismatch {
                            writeln!(f, "  {} {}: {m}", t.tier, fp.family)?;
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// Runs the proof on every tier compiled in whose CPU feature is present, at
/// the K values of `census` plus the tails 1..=67 and each family's largest
/// supported K. A fresh, complete run: the process's own proofs (the ones
/// dispatch consults, [`selftest_report`]) are neither read nor written.
pub fn run_selftest(census: &[usize]) -> SelftestReport {
    let start = Instant::now();
    let ks = census_ks(census);
    let jobs: Vec<(Int8Tier, KernelFamily)> = Int8Tier::ALL
        .into_iter()
        .filter(|t| t.table().is_ok())
        .flat_map(|t| KernelFamily::ALL.map(|f| (t, f)))
        .collect();
    let proofs = prove_jobs(jobs, &ks);
    report_of(
        ks,
        |tier, family| {
            proofs
                .iter()
                .find(|(t, p)| *t == tier && p.family == family)
                .map(|(_, p)| p)
        },
        start.elapsed(),
    )
}

/// The K values a selftest over `census` proves: the census, the tails
/// 1..=67 and each integer family's largest supported K, sorted.
fn census_ks(census: &[usize]) -> Vec<usize> {
    let mut ks: Vec<usize> = census
        .iter()
        .copied()
        .chain(1..=67)
        .chain([MAX_K_W8A8, MAX_K_W4A8])
        .collect();
    ks.sort_unstable();
    ks.dedup();
    ks
}

/// Proves each `(tier, family)` job at `ks`, all at once over the pool.
fn prove_jobs(jobs: Vec<(Int8Tier, KernelFamily)>, ks: &[usize]) -> Vec<(Int8Tier, FamilyProof)> {
    // The scalar tier is the reference: its rows past RANDOM_PROOF_MAX_K
    // (K up to 1 127 288, a third of the selftest's time in scalar code)
    // prove the reference's own i32 bounds, which do not depend on the CPU
    // and which the test suite proves on every target
    // (`prove_kernel_table(&SCALAR, …)`); at run time it is proven up to there.
    let reference_ks: Vec<usize> = ks.iter().copied().filter(|&k| k <= RANDOM_PROOF_MAX_K).collect();
    let prove = |(t, f): (Int8Tier, KernelFamily)| {
        let ks = if t == Int8Tier::Scalar { &reference_ks[..] } else { ks };
        Some((t, prove_family(t.table().ok()?, f, ks)))
    };
    // Every (tier, family) proof is independent: spread them all over the
    // pool, so the slow scalar proofs do not serialise behind one worker;
    // but on a pool thread (a layer built inside the runtime's own parallel
    // loop) one after another: waiting for the pool there, the thread would
    // take another of the loop's tasks, which would wait for the proof this
    // thread holds (see `lock_beside_pool`).
    let proofs = if rayon::current_thread_index().is_some() {
        jobs.into_iter().filter_map(prove).collect()
    } else {
        jobs.into_par_iter().filter_map(prove).collect()
    };
    // the shared inputs are for this run only; free them
    *MEMO.lock().unwrap_or_else(|e| e.into_inner()) = None;
    proofs
}

/// A report from each present tier's proofs as `proof` finds them (a
/// family it has none of is left out of the tier's list).
fn report_of<'p>(
    census: Vec<usize>,
    proof: impl Fn(Int8Tier, KernelFamily) -> Option<&'p FamilyProof>,
    elapsed: Duration,
) -> SelftestReport {
    let tiers = Int8Tier::ALL
        .into_iter()
        .map(|tier| {
            let status = match tier.table() {
                Err(why) => TierStatus::Absent(why),
                Ok(_) => {
                    let proofs: Vec<FamilyProof> = KernelFamily::ALL
                        .into_iter()
                        .filter_map(|f| proof(tier, f).cloned())
                        .collect();
                    if proofs.iter().all(|p| p.mismatch.is_none()) {
                        TierStatus::Proven(proofs)
                    } else {
                        TierStatus::Failed(proofs)
                    }
                }
            };
            TierReport { tier, status }
        })
        .collect();
    SelftestReport { census, tiers, elapsed }
}

/// What a runtime's layers need from the selftest and the plan: the K
/// values they use (each proven as the census's K values are) and the
/// kernel families they run (each proven, on every present tier, and
/// planned). `ModelFile::census` in the `qlinear` crate reads both from a
/// model file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// The layers' K values (input features), in any order.
    pub ks: Vec<usize>,
    /// The kernel families the layers run. The families a family needs
    /// are proven with it (the activation quantizer for W8A8 and W4A8).
    pub families: Vec<KernelFamily>,
}

impl Census {
    /// Every family at the K values `ks`: what [`selftest_report_for`] proves.
    pub fn all_families(ks: &[usize]) -> Self {
        Census {
            ks: ks.to_vec(),
            families: KernelFamily::ALL.to_vec(),
        }
    }
}

/// The families whose proofs a call of `family` relies on: itself, and the
/// activation quantizer where the family quantizes its activations first.
pub(crate) fn needs(family: KernelFamily) -> &'static [KernelFamily] {
    use KernelFamily as F;
    match family {
        F::W8A8 => &[F::W8A8, F::QuantizeActivations],
        F::W4A8 => &[F::W4A8, F::QuantizeActivations],
        F::W4A8Grouped => &[F::W4A8Grouped, F::QuantizeActivations],
        F::DotI8I8 => &[F::DotI8I8],
        F::DotI8Q4 => &[F::DotI8Q4],
        F::QuantizeActivations => &[F::QuantizeActivations],
        F::W8A16 => &[F::W8A16],
        F::W4A16 => &[F::W4A16],
        F::W4A16Grouped => &[F::W4A16Grouped],
    }
}

const TIERS: usize = Int8Tier::ALL.len();
const FAMILIES: usize = KernelFamily::ALL.len();

/// The process's proofs, one cell per (tier, family), each set when that
/// family is first proven (`docs/NUMERICS.md` §8: a family is proven when
/// it is first used, or when a runtime names it at `init_for`).
static PROOFS: [[OnceLock<FamilyProof>; FAMILIES]; TIERS] = [const { [const { OnceLock::new() }; FAMILIES] }; TIERS];
/// The K values every proof of this process runs at, fixed by the first.
static CENSUS: OnceLock<Vec<usize>> = OnceLock::new();
/// Wall time spent proving in this process.
static PROVING: Mutex<Duration> = Mutex::new(Duration::ZERO);
/// The report of [`selftest_report`], every family proven.
static REPORT: OnceLock<SelftestReport> = OnceLock::new();

fn cell(tier: Int8Tier, family: KernelFamily) -> &'static OnceLock<FamilyProof> {
    let t = Int8Tier::ALL.iter().position(|&x| x == tier).unwrap_or(0);
    let f = KernelFamily::ALL.iter().position(|&x| x == family).unwrap_or(0);
    &PROOFS[t][f]
}

/// The process's census K values: `census`'s if none is fixed yet (else
/// the first caller's stays), [`default_census`]'s if `None`.
fn process_ks(census: Option<&[usize]>) -> &'static [usize] {
    CENSUS.get_or_init(|| census_ks(census.unwrap_or(&default_census())))
}

/// Proves `families`, and the families they need, on every present tier
/// that has not proven them in this process, at the process's census K.
/// One prover at a time: the time and the shared inputs are one run's.
pub(crate) fn prove_process(families: &[KernelFamily]) {
    let ks = process_ks(None);
    let mut spent = lock_beside_pool(&PROVING);
    let mut wanted: Vec<KernelFamily> = families.iter().flat_map(|&f| needs(f).iter().copied()).collect();
    wanted.sort_unstable_by_key(|f| KernelFamily::ALL.iter().position(|x| x == f));
    wanted.dedup();
    let jobs: Vec<(Int8Tier, KernelFamily)> = Int8Tier::ALL
        .into_iter()
        .filter(|t| t.table().is_ok())
        .flat_map(|t| wanted.iter().map(move |&f| (t, f)))
        .filter(|&(t, f)| cell(t, f).get().is_none())
        .collect();
    if jobs.is_empty() {
        return;
    }
    let start = Instant::now();
    for (tier, proof) in prove_jobs(jobs, ks) {
        // the lock is held, so no other prover set it
        let _ = cell(tier, proof.family).set(proof);
    }
    *spent += start.elapsed();
}

/// Locks `m` without stalling the rayon pool: a pool thread that finds it
/// held runs the pool's other tasks meanwhile (among them the holder's
/// proof jobs, when the holder is a thread outside the pool that spread
/// them over it), and sleeps briefly when there are none, so that a
/// holder timing kernels for the plan is not slowed by spinning threads.
/// A holder on a pool thread never waits for the pool (its proofs and the
/// plan's fill run on it alone), so it never waits for a thread that
/// waits for it.
pub(crate) fn lock_beside_pool<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    if rayon::current_thread_index().is_none() {
        return m.lock().unwrap_or_else(|e| e.into_inner());
    }
    loop {
        match m.try_lock() {
            Ok(guard) => return guard,
            Err(TryLockError::Poisoned(e)) => return e.into_inner(),
            Err(TryLockError::WouldBlock) => {
                if rayon::yield_now() != Some(rayon::Yield::Executed) {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
    }
}

/// Why `tier` may not run `family` here, if it may not: absent, or it failed
/// the proof of `family` or of a family it needs. Proves them first if this
/// process has not; after that, a few atomic loads.
pub(crate) fn refusal(tier: Int8Tier, family: KernelFamily) -> Option<String> {
    for &f in needs(family) {
        if cell(tier, f).get().is_none() {
            if let Err(why) = tier.table() {
                return Some(why);
            }
            prove_process(&[family]);
        }
        match cell(tier, f).get() {
            Some(FamilyProof { mismatch: None, .. }) => {}
            Some(FamilyProof { mismatch: Some(m), .. }) => {
                return Some(format!("its {f} kernels failed their selftest proof ({m})"))
            }
            None => return Some(format!("its {f} kernels were not proven")),
        }
    }
    None
}

/// The tiers that may run `family` here, in [`Int8Tier::ALL`] order
/// (proving it first if this process has not).
pub(crate) fn proven_for(family: KernelFamily) -> Vec<Int8Tier> {
    Int8Tier::ALL
        .into_iter()
        .filter(|&t| t.table().is_ok() && refusal(t, family).is_none())
        .collect()
}

/// The process's proofs so far: the families proven in it, on every
/// present tier, with the time spent proving.
fn process_report() -> SelftestReport {
    let elapsed = *lock_beside_pool(&PROVING);
    report_of(process_ks(None).to_vec(), |t, f| cell(t, f).get(), elapsed)
}

/// The report of the process's selftest with every family proven (over
/// [`default_census`] unless a census was given first), proving now what
/// has not been proven. Dispatch itself proves one family at a time, when
/// it is first used (`docs/NUMERICS.md` §8); this is the whole table.
pub fn selftest_report() -> &'static SelftestReport {
    if let Some(report) = REPORT.get() {
        return report;
    }
    // proven outside the cell, whose waiters would block (see `lock_beside_pool`)
    prove_process(&KernelFamily::ALL);
    let report = process_report();
    REPORT.get_or_init(|| report)
}

/// [`selftest_report`] with the process's census K values taken from
/// `census` if no proof has run yet (plus the tails 1..=67 and each integer
/// family's largest supported K, which every run proves); otherwise the
/// census of the first proof stays. A runtime that knows its layers' K
/// values (e.g. from the model file) proves exactly those, which is cheaper
/// than [`default_census`]; a K outside the census is still computed by
/// proven kernels, and its overflow bound is still proven by the
/// largest-K rows.
pub fn selftest_report_for(census: &[usize]) -> &'static SelftestReport {
    process_ks(Some(census));
    selftest_report()
}

/// Proves `census`'s families (and those they need) now, at its K values if
/// no proof has run yet in this process (as [`selftest_report_for`]), and
/// returns the process's proofs so far: the families proven, including any
/// proven before. The families not named are proven when first used.
pub fn selftest_for(census: &Census) -> SelftestReport {
    prove_census(census);
    process_report()
}

/// Fixes the process's census K values from `census` if no proof has run
/// yet, and proves its families (what [`selftest_for`] and
/// [`crate::plan_for`] both start with).
pub(crate) fn prove_census(census: &Census) {
    process_ks(Some(&census.ks));
    prove_process(&census.families);
}

/// Proves one kernel table at the given K values: every family, all-extreme
/// rows against exact arithmetic, random rows against the scalar table.
/// Public so that a test can show a deliberately wrong table fails.
pub fn prove_kernel_table(table: &KernelTable, census: &[usize]) -> Vec<FamilyProof> {
    KernelFamily::ALL
        .into_iter()
        .map(|family| prove_family(table, family, census))
        .collect()
}

/// One family's proof on one table (see [`prove_kernel_table`]). A family is
/// proven at the other family's bound only when that K is also within its
/// own (`MAX_K_W8A8` is not a bound of the Q4 families, so they skip it); the
/// scalar table skips the random rows, which would compare it with itself.
fn prove_family(table: &KernelTable, family: KernelFamily, census: &[usize]) -> FamilyProof {
    let mut p = Prover {
        table,
        family,
        random: !std::ptr::eq(table, &SCALAR),
        checks: 0,
        mismatch: None,
    };
    for &k in census {
        let other_bound = [MAX_K_W8A8, MAX_K_W4A8].contains(&k) && family.max_k() != Some(k);
        if family.max_k().is_some_and(|max| k > max) || other_bound {
            continue;
        }
        p.prove_at(k);
        if p.mismatch.is_some() {
            break;
        }
    }
    FamilyProof {
        family,
        checks: p.checks,
        mismatch: p.mismatch,
    }
}

struct Prover<'t> {
    table: &'t KernelTable,
    family: KernelFamily,
    /// Whether to run the random rows against the scalar table.
    random: bool,
    checks: usize,
    mismatch: Option<Mismatch>,
}

/// The all-extreme activation/weight code patterns, as functions of the column.
/// A named proof row: activation code and weight code (or nibble) per column.
type Pattern<W> = (&'static str, fn(usize) -> i8, fn(usize) -> W);

const Q8_PATTERNS: [Pattern<i8>; 6] = [
    ("x=+127 w=+127", |_| 127, |_| 127),
    ("x=-127 w=+127", |_| -127, |_| 127),
    ("x=+127 w=-127", |_| 127, |_| -127),
    ("x=-127 w=-127", |_| -127, |_| -127),
    ("x=±127 w=±127 in phase", alt, alt),
    ("x=±127 w=∓127", alt, |i| -alt(i)),
];
/// Q4 weight patterns are nibbles: 15 is code +7, 0 is -8 (a file may carry it), 1 is -7.
const Q4_PATTERNS: [Pattern<u8>; 7] = [
    ("x=+127 nibble 15", |_| 127, |_| 15),
    ("x=-127 nibble 15", |_| -127, |_| 15),
    ("x=+127 nibble 0", |_| 127, |_| 0),
    ("x=-127 nibble 0", |_| -127, |_| 0),
    ("x=+127 nibble 1", |_| 127, |_| 1),
    ("x=±127 nibbles 15/0", alt, |i| if i % 2 == 0 { 15 } else { 0 }),
    ("x=±127 nibbles 0/15", alt, |i| if i % 2 == 0 { 0 } else { 15 }),
];

/// The census K at which the random rows also span a second, partial
/// weight-row chunk of the family's declared [`Shapes`](qlinear_kernels_scalar::frame::Shapes):
/// a K with a tail past the last block, and K = 256, where grouped families
/// reach 8 groups of 32. Chunk boundaries do not depend on K, and the
/// chunk-spanning rows cost several times the others.
const CHUNK_PROOF_K: [usize; 2] = [67, 256];
/// Below this K (the tails) the random rows take the lighter shapes of
/// [`Shapes::tail_proof_calls`](qlinear_kernels_scalar::frame::Shapes::tail_proof_calls),
/// every tile once: a tile's code depends on K only through its count of
/// whole blocks, the frame's tail loop (every column past them) is one
/// piece of code for every tile, and the full shapes at each of 66 tails
/// took half the selftest.
const TAIL_PROOF_BELOW: usize = 67;

/// Every pattern at ordinary K; at large K (past the random-row limit) only the two that reach the i32 extremes in both directions
/// (the dot families always run all of them).
fn patterns<T: Copy>(all: &[T], k: usize, extremes: [usize; 2]) -> Vec<T> {
    if k <= RANDOM_PROOF_MAX_K {
        all.to_vec()
    } else {
        extremes.iter().map(|&i| all[i]).collect()
    }
}

fn alt(i: usize) -> i8 {
    if i.is_multiple_of(2) {
        127
    } else {
        -127
    }
}

/// (what, the pattern's two values as [`sig`] gives them, K, group).
type MemoKey = (&'static str, i64, usize, usize);
type MemoMap = HashMap<(MemoKey, TypeId), Arc<OnceLock<Arc<dyn Any + Send + Sync>>>>;

/// The proof inputs at large K (past [`RANDOM_PROOF_MAX_K`]), built once per
/// selftest and shared by every tier: a fresh multi-megabyte buffer costs
/// page faults that, in a VM, took longer than the kernels run on it. Keyed
/// by what is built from which pattern values (so proof rows and families
/// laying out the same pattern share it), K and group; small inputs are
/// built each time.
static MEMO: Mutex<Option<MemoMap>> = Mutex::new(None);

fn memo<T: Any + Send + Sync>(key: MemoKey, build: impl FnOnce() -> T) -> Arc<T> {
    if key.2 <= RANDOM_PROOF_MAX_K {
        return Arc::new(build());
    }
    memo_shared(key, build)
}

/// [`memo`] at any K: for inputs that every table's proof reads alike and
/// whose building costs more than the proof (the panel proof's cases, with
/// their scalar reference outputs).
fn memo_shared<T: Any + Send + Sync>(key: MemoKey, build: impl FnOnce() -> T) -> Arc<T> {
    let cell = {
        let mut map = MEMO.lock().unwrap_or_else(|e| e.into_inner());
        let map = map.get_or_insert_with(HashMap::new);
        map.entry((key, TypeId::of::<T>())).or_default().clone()
    };
    match cell.get_or_init(|| Arc::new(build())).clone().downcast() {
        Ok(value) => value,
        Err(_) => unreachable!("the map is keyed by the value's TypeId"),
    }
}

/// A period-2 proof pattern's two values, as one memo key.
fn sig<T: Into<i64>>(f: fn(usize) -> T) -> i64 {
    f(0).into() * 65_536 + f(1).into()
}

/// [`periodic`] of `f` at `k`, shared by every proof row (activation or
/// weight) that lays out the same pattern.
fn periodic_memo(f: fn(usize) -> i8, k: usize) -> Arc<Vec<i8>> {
    memo(("periodic", sig(f), k, 0), || periodic(f, k))
}

/// The one-row Q4 matrix of nibble pattern `nib` at `k`, per channel
/// (`g = 0`, scale 1) or in groups of `g` (f16 scales 1), shared by the
/// `dot_i8_q4`, W4A8 and W4A16 proofs.
fn q4_pattern_memo(nib: fn(usize) -> u8, k: usize, g: usize) -> Arc<Result<QuantizedMatrixQ4, RecipeError>> {
    memo(("q4 row", sig(nib), k, g), || {
        let scales = if g == 0 {
            Q4Scales::PerChannel(vec![1.0])
        } else {
            Q4Scales::Grouped {
                group: g,
                scales: vec![f16::ONE; k / g],
            }
        };
        QuantizedMatrixQ4::from_parts_biased(1, k, pack_periodic(k, nib), scales)
    })
}

/// `[f(0), f(1), f(0), f(1), …]`, `k` long: a proof pattern (every one has
/// period 2) laid out without calling `f` per element, which at the largest
/// K would dominate the selftest.
fn periodic(f: fn(usize) -> i8, k: usize) -> Vec<i8> {
    let pair = [f(0), f(1)];
    let mut v = vec![pair[0]; k];
    v.chunks_exact_mut(2).for_each(|c| c.copy_from_slice(&pair));
    v
}

/// The packed row of a period-2 nibble pattern: one repeated byte, and the
/// odd-K pad.
fn pack_periodic(k: usize, nib: fn(usize) -> u8) -> Vec<u8> {
    let mut v = vec![nib(0) | nib(1) << 4; k.div_ceil(2)];
    if k % 2 == 1 {
        v[k / 2] = nib(0) | 8 << 4;
    }
    v
}

/// Exact `Σ_{i<k} x(i)·w(i)` in i64 for the proof patterns, which all have
/// period 2 (constant or alternating from an even column): the even columns
/// contribute `ceil(k/2)` times the first product, the odd ones `floor(k/2)`
/// times the second.
fn exact_dot(k: usize, x: impl Fn(usize) -> i8, w: impl Fn(usize) -> i64) -> i64 {
    let (even, odd) = (k.div_ceil(2) as i64, (k / 2) as i64);
    even * i64::from(x(0)) * w(0) + if k > 1 { odd * i64::from(x(1)) * w(1) } else { 0 }
}

/// A small deterministic generator (xorshift64*): the selftest needs no crate.
pub(crate) struct Rng(u64);
impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    /// `len` codes in −127..=127, eight from each draw (each byte mod 255:
    /// −127 comes up 2/256 of the time, which a proof does not mind). The
    /// random rows draw about a million a selftest.
    pub(crate) fn codes(&mut self, len: usize) -> Vec<i8> {
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            v.extend(self.next().to_le_bytes().map(|b| ((b % 255) as i32 - 127) as i8));
        }
        v.truncate(len);
        v
    }
    /// A packed row of `k` random nibbles (two from each random byte), the
    /// odd-K pad nibble 8 where the format needs it.
    pub(crate) fn packed(&mut self, k: usize) -> Vec<u8> {
        let len = k.div_ceil(2);
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            v.extend(self.next().to_le_bytes());
        }
        v.truncate(len);
        if k % 2 == 1 {
            v[len - 1] = (v[len - 1] & 0x0F) | 8 << 4;
        }
        v
    }
}

impl Prover<'_> {
    fn check<T: PartialEq + fmt::Debug>(&mut self, case: &str, k: usize, expected: T, got: T) {
        self.checks += 1;
        if self.mismatch.is_none() && expected != got {
            self.mismatch = Some(Mismatch {
                case: case.to_string(),
                k,
                expected: format!("{expected:?}"),
                got: format!("{got:?}"),
            });
        }
    }

    /// The layout cache for the all-extreme activation rows of pattern
    /// `x_sig`, `m` rows of `k`: past [`RANDOM_PROOF_MAX_K`] one per tier,
    /// shared by its families and proof rows that lay the same rows out
    /// alike (the cache checks the rows and the layout, and lays them out
    /// anew for any other). At the integer bounds each layout is a fresh
    /// megabyte, and its page faults were half of the selftest's in a VM.
    fn layouts(&self, x_sig: i64, k: usize, m: usize) -> Arc<LayoutCache> {
        memo((self.table.name, x_sig, k, m), LayoutCache::default)
    }

    /// Activation rows a proof builds, or a recorded failure when the
    /// builder refuses them (a defect of the prover's own shapes).
    fn built<T>(&mut self, case: &str, k: usize, rows: Result<T, KernelError>) -> Option<T> {
        match rows {
            Ok(rows) => Some(rows),
            Err(e) => {
                self.check(case, k, "activation rows accepted".to_string(), e.to_string());
                None
            }
        }
    }

    fn prove_at(&mut self, k: usize) {
        use KernelFamily as F;
        if self.family.max_k().is_none() && k > FLOAT_PROOF_MAX_K {
            return;
        }
        match self.family {
            F::DotI8I8 => {
                for (case, x, w) in patterns(&Q8_PATTERNS, k, [1, 4]) {
                    let (xa, wa) = (periodic_memo(x, k), periodic_memo(w, k));
                    let exact = exact_dot(k, x, |i| i64::from(w(i)));
                    self.check(case, k, exact, i64::from((self.table.dot_i8_i8)(&xa, &wa)));
                }
            }
            F::DotI8Q4 => {
                for (case, x, nib) in patterns(&Q4_PATTERNS, k, [0, 1]) {
                    let xa = periodic_memo(x, k);
                    // the packed row of the W4A8 proof's matrix
                    let w = q4_pattern_memo(nib, k, 0);
                    let Ok(w) = w.as_ref() else {
                        continue;
                    };
                    let exact = exact_dot(k, x, |i| i64::from(nib(i)) - 8);
                    let got = (self.table.dot_i8_q4)(&xa, w.packed());
                    self.check(case, k, exact, i64::from(got));
                }
            }
            F::QuantizeActivations => self.prove_quantizer(k),
            F::W8A8 | F::W8A16 => {
                for (case, x, w) in patterns(&Q8_PATTERNS, k, [1, 4]) {
                    let wm = memo(("w, -w", sig(w), k, 0), || {
                        let mut codes = periodic(w, k);
                        codes.extend(periodic(w, k).iter().map(|&c| -c));
                        QuantizedMatrix::from_parts(2, k, codes, vec![1.0, 1.0])
                    });
                    let Ok(wm) = wm.as_ref() else {
                        continue;
                    };
                    let exact = exact_dot(k, x, |i| i64::from(w(i)));
                    self.prove_gemm_q8(case, k, x, sig(w), wm, [exact, -exact]);
                }
            }
            F::W4A8 | F::W4A16 | F::W4A8Grouped | F::W4A16Grouped => {
                for (case, x, nib) in patterns(&Q4_PATTERNS, k, [0, 1]) {
                    self.prove_q4_pattern(case, k, x, nib);
                }
            }
        }
        if self.random && k <= RANDOM_PROOF_MAX_K {
            self.prove_random(k);
        }
        if let (F::W4A8Grouped, Some(panels)) = (self.family, self.table.gemm_w4a8_grouped_panels) {
            if k <= RANDOM_PROOF_MAX_K && k.is_multiple_of(PANEL_GROUP) {
                self.prove_panels(panels, k);
            }
        }
    }

    /// A table's W4A8 grouped entry on the panel form ([`PanelsQ4`])
    /// against the scalar entry on the natural matrix, every table the
    /// scalar one included (its panel entry is other code): random rows
    /// with scales of both signs, then all-extreme rows; over 1 to 3 panels,
    /// M = 1 to 9 (the 4-row and 1-row tiles and their mixes), and ranges
    /// that start and end inside a panel (the driver splits by 8 rows). The
    /// cases and their reference outputs are built once per K and shared by
    /// every table ([`panel_cases`]).
    fn prove_panels(&mut self, panels: GemmQ8Panels, k: usize) {
        for case in panel_cases(k).iter() {
            let PanelCase {
                name,
                m,
                rows,
                xc,
                xs,
                sums,
                panels: p,
                want,
            } = case;
            let Some(p) = p else {
                self.check(name, k, "a panel form".to_string(), "none".to_string());
                return;
            };
            let layouts = LayoutCache::default();
            let Some(act) = self.built(name, k, ActivationsQ8::new(*m, k, xc, xs, sums, PANEL_GROUP)) else {
                return;
            };
            let act = act.with_layouts(&layouts);
            let width = rows.len();
            let mut got = vec![f32::NAN; m * width];
            panels(&act, p, rows.clone(), &mut OutputTile::new(&mut got, width));
            self.check(name, k, want.clone(), bits(&got));
        }
    }

    fn prove_quantizer(&mut self, k: usize) {
        let mut rng = Rng::new(k as u64);
        let rows: [Vec<f32>; 4] = [
            (0..k).map(|i| f32::from(alt(i)) * 0.5).collect(),
            (0..k).map(|i| (i % 255) as f32 - 127.0 + 0.5).collect(), // ties at .5 with scale 1
            (0..k).map(|_| rng.unit() * 1e-3).collect(),
            (0..k).map(|i| if i == 0 { 0.0 } else { rng.unit() * 3e38 }).collect(),
        ];
        for (n, row) in rows.iter().enumerate() {
            let (mut want, mut got) = (vec![0i8; k], vec![0i8; k]);
            let sw = (SCALAR.quantize_row_q8)(row, &mut want);
            let sg = (self.table.quantize_row_q8)(row, &mut got);
            self.check(
                &format!("activation row {n}"),
                k,
                (sw.to_bits(), want),
                (sg.to_bits(), got),
            );
        }
    }

    /// Runs a 2-row Q8 matrix (pattern row, negated row) against the pattern
    /// activation (and its negation) through the W8A8 or W8A16 kernel.
    fn prove_gemm_q8(
        &mut self,
        case: &'static str,
        k: usize,
        x: fn(usize) -> i8,
        w_sig: i64,
        w: &QuantizedMatrix,
        exact: [i64; 2],
    ) {
        let xc = periodic_memo(x, k);
        let mut y = vec![f32::NAN; 2];
        if self.family == KernelFamily::W8A8 {
            let sums = activation_group_sums(&xc, 1, k, k);
            let layouts = self.layouts(sig(x), k, 1);
            let Some(act) = self.built(case, k, ActivationsQ8::new(1, k, &xc, &[1.0], &sums, k)) else {
                return;
            };
            let act = act.with_layouts(&layouts);
            (self.table.gemm_w8a8)(&act, w, 0..2, &mut OutputTile::new(&mut y, 2));
            self.check(
                case,
                k,
                exact.map(|e| (e as f32).to_bits()),
                [y[0].to_bits(), y[1].to_bits()],
            );
            // a table with no batch tile (the scalar one) would only
            // repeat the rows above, 16 times over at the largest K
            if self.table.shapes(KernelFamily::W8A8).max_xr() > 1 {
                self.prove_w8a8_tile(case, &xc, (sig(x), w_sig), w, exact);
            }
        } else {
            let xf: Vec<f32> = xc.iter().map(|&c| f32::from(c)).collect();
            let layouts = LayoutCache::default();
            let Some(act) = self.built(case, k, ActivationsF32::new(1, k, &xf)) else {
                return;
            };
            let act = act.with_layouts(&layouts);
            let mut want = vec![f32::NAN; 2];
            (SCALAR.gemm_w8a16)(&act, w, 0..2, &mut OutputTile::new(&mut want, 2));
            (self.table.gemm_w8a16)(&act, w, 0..2, &mut OutputTile::new(&mut y, 2));
            self.check(case, k, bits(&want), bits(&y));
        }
    }

    /// The batch regime at the same K: 4 activation rows `x, -x, x, -x`
    /// against 4 weight rows `w, -w, w, -w` (the pattern matrix's two rows
    /// twice), which SIMD tiers run through a 4 × 4 register tile with its own
    /// arithmetic (biased operands, wrapping partial sums).
    fn prove_w8a8_tile(
        &mut self,
        case: &'static str,
        xc: &[i8],
        sigs: (i64, i64),
        w: &QuantizedMatrix,
        exact: [i64; 2],
    ) {
        let k = xc.len();
        let w4 = memo(("w, -w, w, -w", sigs.1, k, 0), || {
            let mut codes = Vec::with_capacity(4 * k);
            (0..4).for_each(|q| codes.extend_from_slice(w.row(q % 2)));
            QuantizedMatrix::from_parts(4, k, codes, vec![1.0; 4])
        });
        let Ok(w4) = w4.as_ref() else {
            return;
        };
        let sign = [1i8, -1, 1, -1];
        let x4 = memo(("x, -x, x, -x", sigs.0, k, 0), || {
            let mut x4 = Vec::with_capacity(4 * k);
            for s in sign {
                x4.extend(xc.iter().map(|&v| s * v));
            }
            x4
        });
        let sums = memo(("sums of x, -x, x, -x", sigs.0, k, 0), || {
            activation_group_sums(&x4, 4, k, k)
        });
        let layouts = self.layouts(sigs.0, k, 4);
        let Some(act) = self.built(case, k, ActivationsQ8::new(4, k, &x4, &[1.0; 4], &sums, k)) else {
            return;
        };
        let act = act.with_layouts(&layouts);
        let mut y = vec![f32::NAN; 16];
        (self.table.gemm_w8a8)(&act, w4, 0..4, &mut OutputTile::new(&mut y, 4));
        let want: Vec<u32> = (0..16)
            .map(|t| ((i64::from(sign[t / 4]) * exact[t % 2]) as f32).to_bits())
            .collect();
        self.check(&format!("{case}, 4 x 4 tile"), k, want, bits(&y));
    }

    fn prove_q4_pattern(&mut self, case: &'static str, k: usize, x: fn(usize) -> i8, nib: fn(usize) -> u8) {
        use KernelFamily as F;
        let grouped = matches!(self.family, F::W4A8Grouped | F::W4A16Grouped);
        if grouped && k % 2 == 1 {
            return;
        }
        let xc = periodic_memo(x, k);
        // Grouped: the smallest group (2) and the largest (one group of K); at
        // large K only the largest, which carries the i32 bound.
        let groups: &[usize] = if !grouped {
            &[0]
        } else if k == 0 {
            &[2]
        } else if k > FLOAT_PROOF_MAX_K {
            &[k]
        } else {
            &[2, k]
        };
        for &g in groups {
            let w = q4_pattern_memo(nib, k, if grouped { g } else { 0 });
            let Ok(w) = w.as_ref() else {
                continue;
            };
            let sum_group = if grouped { g } else { k };
            let sums = memo(("sums of x", sig(x), k, sum_group), || {
                activation_group_sums(&xc, 1, k, sum_group)
            });
            let mut y = [f32::NAN];
            let mut want = [f32::NAN];
            let case = format!("{case} group {g}");
            match self.family {
                F::W4A8 | F::W4A8Grouped => {
                    let layouts = self.layouts(sig(x), k, 1);
                    let Some(act) = self.built(&case, k, ActivationsQ8::new(1, k, &xc, &[1.0], &sums, sum_group))
                    else {
                        continue;
                    };
                    let act = act.with_layouts(&layouts);
                    let kernel = if grouped {
                        self.table.gemm_w4a8_grouped
                    } else {
                        self.table.gemm_w4a8
                    };
                    kernel(&act, w, 0..1, &mut OutputTile::new(&mut y, 1));
                    // exact per-group i64 sums, accumulated in f32 in increasing g as docs/NUMERICS.md §6
                    let g_len = if grouped { g } else { k.max(1) };
                    let mut sum = 0f32;
                    for start in (0..k).step_by(g_len) {
                        let acc = exact_dot(
                            g_len.min(k - start),
                            |i| x(start + i),
                            |i| i64::from(nib(start + i)) - 8,
                        );
                        sum += acc as f32 * 1.0;
                    }
                    want[0] = if grouped {
                        sum * 1.0
                    } else {
                        (exact_dot(k, x, |i| i64::from(nib(i)) - 8) as f32) * 1.0
                    };
                }
                _ => {
                    let xf: Vec<f32> = xc.iter().map(|&c| f32::from(c)).collect();
                    let layouts = LayoutCache::default();
                    let Some(act) = self.built(&case, k, ActivationsF32::new(1, k, &xf)) else {
                        continue;
                    };
                    let act = act.with_layouts(&layouts);
                    let (kernel, reference) = if grouped {
                        (self.table.gemm_w4a16_grouped, SCALAR.gemm_w4a16_grouped)
                    } else {
                        (self.table.gemm_w4a16, SCALAR.gemm_w4a16)
                    };
                    reference(&act, w, 0..1, &mut OutputTile::new(&mut want, 1));
                    kernel(&act, w, 0..1, &mut OutputTile::new(&mut y, 1));
                }
            }
            self.check(&case, k, bits(&want), bits(&y));
        }
    }

    /// Random rows (random codes and scales) against the scalar table, in
    /// calls shaped by the tiles the table declares for the family
    /// ([`Shapes::proof_calls`](qlinear_kernels_scalar::frame::Shapes::proof_calls)):
    /// M runs the largest activation-row tile twice and then its largest
    /// leftover, N likewise for weight rows (with a call of its own for a
    /// smaller activation tile that needs more weight rows), and at
    /// [`CHUNK_PROOF_K`] N first fills one whole weight-row chunk; below
    /// [`TAIL_PROOF_BELOW`] every tile once
    /// ([`Shapes::tail_proof_calls`](qlinear_kernels_scalar::frame::Shapes::tail_proof_calls)).
    /// A new tile is covered the moment it is declared.
    fn prove_random(&mut self, k: usize) {
        let shapes = self.table.shapes(self.family);
        let calls = if k < TAIL_PROOF_BELOW {
            shapes.tail_proof_calls()
        } else {
            shapes.proof_calls(CHUNK_PROOF_K.contains(&k))
        };
        let mut rng = Rng::new(0xC0FFEE ^ k as u64 ^ ((self.family as u64) << 32));
        for (m, n) in calls {
            self.prove_random_rows(&mut rng, m, n, k);
        }
    }

    /// One call of the random rows: `m` activation rows against `n` weight rows.
    fn prove_random_rows(&mut self, rng: &mut Rng, m: usize, n: usize, k: usize) {
        use KernelFamily as F;
        let float = self.family.float_activations();
        let xc: Vec<i8> = rng.codes(m * k);
        let xs: Vec<f32> = (0..m).map(|_| rng.unit().abs() * 0.1).collect();
        // f32 activations only where a float family reads them
        let xf: Vec<f32> = if float {
            (0..m * k).map(|_| rng.unit() * 4.0).collect()
        } else {
            Vec::new()
        };
        let case = "random rows";
        let layouts_f = LayoutCache::default();
        // no rows where no float family reads them
        let Some(act_f) = self.built(case, k, ActivationsF32::new(if float { m } else { 0 }, k, &xf)) else {
            return;
        };
        let act_f = act_f.with_layouts(&layouts_f);
        let run = |kernel: &dyn Fn(&mut OutputTile<'_>)| {
            let mut y = vec![f32::NAN; m * n];
            kernel(&mut OutputTile::new(&mut y, n));
            y
        };
        match self.family {
            F::DotI8I8 => {
                let w: Vec<i8> = rng.codes(k);
                self.check(
                    case,
                    k,
                    (SCALAR.dot_i8_i8)(&xc[..k], &w),
                    (self.table.dot_i8_i8)(&xc[..k], &w),
                );
            }
            F::DotI8Q4 => {
                let p = rng.packed(k);
                self.check(
                    case,
                    k,
                    (SCALAR.dot_i8_q4)(&xc[..k], &p),
                    (self.table.dot_i8_q4)(&xc[..k], &p),
                );
            }
            F::QuantizeActivations => {}
            F::W8A8 | F::W8A16 => {
                let codes: Vec<i8> = rng.codes(n * k);
                let scales: Vec<f32> = (0..n).map(|_| rng.unit().abs() * 0.01).collect();
                let Ok(w) = QuantizedMatrix::from_parts(n, k, codes, scales) else {
                    return;
                };
                let sums = activation_group_sums(&xc, m, k, k);
                let layouts = LayoutCache::default();
                let Some(act) = self.built(case, k, ActivationsQ8::new(m, k, &xc, &xs, &sums, k)) else {
                    return;
                };
                let act = act.with_layouts(&layouts);
                let (want, got) = if self.family == F::W8A8 {
                    (
                        run(&|t| (SCALAR.gemm_w8a8)(&act, &w, 0..n, t)),
                        run(&|t| (self.table.gemm_w8a8)(&act, &w, 0..n, t)),
                    )
                } else {
                    (
                        run(&|t| (SCALAR.gemm_w8a16)(&act_f, &w, 0..n, t)),
                        run(&|t| (self.table.gemm_w8a16)(&act_f, &w, 0..n, t)),
                    )
                };
                self.check(case, k, bits(&want), bits(&got));
            }
            F::W4A8 | F::W4A8Grouped | F::W4A16 | F::W4A16Grouped => {
                let grouped = matches!(self.family, F::W4A8Grouped | F::W4A16Grouped);
                let g = [64, 32, 8, 2].into_iter().find(|g| k.is_multiple_of(*g)).unwrap_or(0);
                if grouped && g == 0 {
                    return;
                }
                // groups of 32 as well once there are 8 of them: the SIMD
                // tiers' fast path for q4g32, which a group of 64 never takes
                // (K 256, 384 and 1024 reach its 8-group steps, the groups
                // after them and the 8-row batch tile; its code does not
                // change with K beyond that)
                if grouped && g == 64 && (256..=1024).contains(&k) {
                    self.prove_random_q4(rng, m, n, k, 32, &xc, &xs, &act_f, &run, case);
                }
                self.prove_random_q4(rng, m, n, k, g, &xc, &xs, &act_f, &run, case);
            }
        }
    }

    /// The random rows of the Q4 families with group `g` (grouped families).
    #[allow(clippy::too_many_arguments)]
    fn prove_random_q4(
        &mut self,
        rng: &mut Rng,
        m: usize,
        n: usize,
        k: usize,
        g: usize,
        xc: &[i8],
        xs: &[f32],
        act_f: &ActivationsF32<'_>,
        run: &RunTile<'_>,
        case: &'static str,
    ) {
        use KernelFamily as F;
        let grouped = matches!(self.family, F::W4A8Grouped | F::W4A16Grouped);
        let packed: Vec<u8> = (0..n).flat_map(|_| rng.packed(k)).collect();
        let scales = if grouped {
            Q4Scales::Grouped {
                group: g,
                // both signs: a group scale may be negative (NUMERICS §4)
                scales: (0..n * k / g).map(|_| f16::from_f32(rng.unit())).collect(),
            }
        } else {
            Q4Scales::PerChannel((0..n).map(|_| rng.unit().abs() * 0.01).collect())
        };
        let Ok(w) = QuantizedMatrixQ4::from_parts_biased(n, k, packed, scales) else {
            return;
        };
        let sum_group = if grouped { g } else { k };
        let sums = activation_group_sums(xc, m, k, sum_group);
        let layouts = LayoutCache::default();
        let Some(act) = self.built(case, k, ActivationsQ8::new(m, k, xc, xs, &sums, sum_group)) else {
            return;
        };
        let act = act.with_layouts(&layouts);
        let (reference, kernel_q8, reference_f, kernel_f) = if grouped {
            (
                SCALAR.gemm_w4a8_grouped,
                self.table.gemm_w4a8_grouped,
                SCALAR.gemm_w4a16_grouped,
                self.table.gemm_w4a16_grouped,
            )
        } else {
            (
                SCALAR.gemm_w4a8,
                self.table.gemm_w4a8,
                SCALAR.gemm_w4a16,
                self.table.gemm_w4a16,
            )
        };
        let (want, got) = if matches!(self.family, F::W4A8 | F::W4A8Grouped) {
            (
                run(&|t| reference(&act, &w, 0..n, t)),
                run(&|t| kernel_q8(&act, &w, 0..n, t)),
            )
        } else {
            (
                run(&|t| reference_f(act_f, &w, 0..n, t)),
                run(&|t| kernel_f(act_f, &w, 0..n, t)),
            )
        };
        self.check(case, k, bits(&want), bits(&got));
    }
}

/// Runs a kernel on a fresh NaN-filled output and returns the output.
type RunTile<'a> = dyn Fn(&dyn Fn(&mut OutputTile<'_>)) -> Vec<f32> + 'a;

/// One call of the panel proof: its activation rows, the weight's panel
/// form (none if the form refused the matrix, which the proof reports) and
/// the scalar entry's bits on the natural matrix over `rows`.
struct PanelCase {
    name: &'static str,
    m: usize,
    rows: Range<usize>,
    xc: Vec<i8>,
    xs: Vec<f32>,
    sums: Vec<i32>,
    panels: Option<PanelsQ4>,
    want: Vec<u32>,
}

/// The panel proof's calls at `k` (a multiple of 32), built once per
/// selftest and shared by every table that has a panel entry: the scalar
/// reference on the natural matrix costs more than the tiles it checks.
fn panel_cases(k: usize) -> Arc<Vec<PanelCase>> {
    memo_shared(("panel cases", 0, k, PANEL_GROUP), || {
        let mut rng = Rng::new(0x9A4E_1500 ^ k as u64);
        let calls: [(usize, usize, Range<usize>, bool); 4] = [
            (1, 16, 0..16, false),
            (5, 48, 8..40, false),
            (9, 32, 0..32, false),
            (4, 16, 0..16, true),
        ];
        let mut cases = vec![];
        for (m, n, rows, extreme) in calls {
            let (packed, xc): (Vec<u8>, Vec<i8>) = if extreme {
                (vec![0xFF; n * k / 2], vec![127; m * k])
            } else {
                ((0..n).flat_map(|_| rng.packed(k)).collect(), rng.codes(m * k))
            };
            let scales = (0..n * k / PANEL_GROUP).map(|_| f16::from_f32(rng.unit())).collect();
            let grouped = Q4Scales::Grouped {
                group: PANEL_GROUP,
                scales,
            };
            let xs: Vec<f32> = (0..m).map(|_| rng.unit().abs() * 0.1).collect();
            let Ok(w) = QuantizedMatrixQ4::from_parts_biased(n, k, packed, grouped) else {
                continue;
            };
            let sums = activation_group_sums(&xc, m, k, PANEL_GROUP);
            let layouts = LayoutCache::default();
            let Ok(act) = ActivationsQ8::new(m, k, &xc, &xs, &sums, PANEL_GROUP) else {
                continue;
            };
            let act = act.with_layouts(&layouts);
            let width = rows.len();
            let mut want = vec![f32::NAN; m * width];
            (SCALAR.gemm_w4a8_grouped)(&act, &w, rows.clone(), &mut OutputTile::new(&mut want, width));
            cases.push(PanelCase {
                name: if extreme {
                    "panel rows, x=+127 nibble 15"
                } else {
                    "panel rows"
                },
                m,
                rows,
                panels: PanelsQ4::new(&w),
                want: bits(&want),
                xc,
                xs,
                sums,
            });
        }
        cases
    })
}

fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn random_codes_are_codes_and_cover_the_range() {
        let codes = Rng::new(1).codes(100_003);
        assert_eq!(codes.len(), 100_003);
        assert!(codes.iter().all(|&c| (-127..=127).contains(&c)));
        assert!(codes.contains(&-127) && codes.contains(&127) && codes.contains(&0));
    }

    #[test]
    fn random_packed_rows_carry_the_pad_nibble_at_odd_k() {
        for k in [1, 2, 15, 16, 17, 4097] {
            let p = Rng::new(k as u64).packed(k);
            assert_eq!(p.len(), k.div_ceil(2), "k = {k}");
            if k % 2 == 1 {
                assert_eq!(p[k / 2] >> 4, 8, "k = {k}");
            }
        }
        let p = Rng::new(3).packed(4096);
        assert!((0..16).all(|n| p.iter().any(|&b| b & 0x0F == n)));
    }
}
