//! The run-time selftest: each present tier's kernel tables proven on the
//! running CPU by the prover of `qlinear-kernels-core`
//! ([`qlinear_kernels_core::proof`]), one kernel family at a time as the
//! process first needs it, and the report of what passed.

use std::fmt;
use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::Duration;

use crate::clock::Instant;

pub(crate) use qlinear_kernels_core::proof::Rng;
pub use qlinear_kernels_core::proof::{default_census, prove_kernel_table, FamilyProof, Mismatch};
use qlinear_kernels_core::proof::{prove_family, release_shared_inputs, RANDOM_PROOF_MAX_K};
use qlinear_kernels_core::{MAX_K_W4A8, MAX_K_W8A8};
use rayon::prelude::*;

use crate::{Int8Tier, KernelFamily};

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
    // A tier whose table holds the same code for a family as an earlier
    // tier's (relaxed SIMD runs SIMD128's W8A8 and quantizer; AVX-512 VNNI
    // AVX2's float families) takes that tier's proof: the same functions
    // on the same rows give the same bits (`KernelTable::same_family_code`,
    // `docs/NUMERICS.md` §8). The scalar tier, proven at fewer K, neither
    // lends nor borrows.
    let (own, shared): (Vec<_>, Vec<_>) = jobs.iter().partition(|&&job| prover_of(&jobs, job) == job.0);
    let mut proofs: Vec<(Int8Tier, FamilyProof)> = if rayon::current_thread_index().is_some() {
        own.into_iter().filter_map(prove).collect()
    } else {
        own.into_par_iter().filter_map(prove).collect()
    };
    for (tier, family) in shared {
        let by = prover_of(&jobs, (tier, family));
        if let Some(p) = proofs.iter().find(|(t, p)| *t == by && p.family == family) {
            let p = p.1.clone();
            proofs.push((tier, p));
        }
    }
    // the shared inputs are for this run only; free them
    release_shared_inputs();
    proofs
}

/// The tier among `jobs` whose proof of `job`'s family serves `job`'s
/// tier: the first non-scalar tier (in [`Int8Tier::ALL`] order, as `jobs`
/// are) holding the same code for the family, which is the job's own tier
/// when no earlier one does, and always for the scalar tier.
fn prover_of(jobs: &[(Int8Tier, KernelFamily)], (tier, family): (Int8Tier, KernelFamily)) -> Int8Tier {
    let Ok(table) = tier.table() else {
        return tier;
    };
    if tier == Int8Tier::Scalar {
        return tier;
    }
    jobs.iter()
        .filter(|&&(t, f)| f == family && t != Int8Tier::Scalar)
        .find_map(|&(t, _)| t.table().ok().filter(|o| o.same_family_code(table, family)).map(|_| t))
        .unwrap_or(tier)
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
    let mut wanted: Vec<KernelFamily> = families.iter().flat_map(|&f| f.needs().iter().copied()).collect();
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
    for &f in family.needs() {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (tier, family) job of the present tiers.
    fn all_jobs() -> Vec<(Int8Tier, KernelFamily)> {
        Int8Tier::ALL
            .into_iter()
            .filter(|t| t.table().is_ok())
            .flat_map(|t| KernelFamily::ALL.map(|f| (t, f)))
            .collect()
    }

    /// A job's proof comes from the first non-scalar tier holding the same
    /// code for the family, never from one with other code or from the
    /// scalar tier, and the scalar tier proves its own.
    #[test]
    fn a_proof_is_lent_only_between_tables_holding_the_same_code() {
        let jobs = all_jobs();
        let rank = |t: Int8Tier| Int8Tier::ALL.iter().position(|&a| a == t);
        for &(tier, family) in &jobs {
            let by = prover_of(&jobs, (tier, family));
            if tier == Int8Tier::Scalar {
                assert_eq!(by, tier);
                continue;
            }
            let (table, lender) = (tier.table().unwrap(), by.table().unwrap());
            assert!(
                by != Int8Tier::Scalar && rank(by) <= rank(tier),
                "{tier} {family}: from {by}"
            );
            assert!(lender.same_family_code(table, family), "{tier} {family}: from {by}");
            // no earlier non-scalar tier with the same code was passed over
            for &(t, f) in &jobs {
                if f == family && t != Int8Tier::Scalar && rank(t) < rank(by) {
                    assert!(!t.table().unwrap().same_family_code(table, family), "{tier} {family}");
                }
            }
        }
    }

    /// A fresh selftest gives a tier that borrows a family's proof exactly
    /// its lender's proof, and proves every other family of every present
    /// tier (the report's rows).
    #[test]
    fn a_borrowed_proof_is_the_lenders_and_every_other_is_run() {
        let report = run_selftest(&[96]);
        let jobs = all_jobs();
        let proof = |t: Int8Tier, f: KernelFamily| {
            report.tiers.iter().find(|r| r.tier == t).and_then(|r| match &r.status {
                TierStatus::Proven(p) | TierStatus::Failed(p) => p.iter().find(|p| p.family == f).cloned(),
                TierStatus::Absent(_) => None,
            })
        };
        for &(tier, family) in &jobs {
            let got = proof(tier, family).unwrap_or_else(|| panic!("{tier} {family}: no proof"));
            assert!(got.checks > 0, "{tier} {family}: no proof rows ran");
            let by = prover_of(&jobs, (tier, family));
            assert_eq!(Some(got), proof(by, family), "{tier} {family}");
        }
    }
}
