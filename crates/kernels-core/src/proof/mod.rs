//! The proof a kernel table must pass before its tier is dispatched: the
//! prover the run-time selftest calls on the running CPU (in
//! `qlinear-dispatch`) and each kernel crate's tests call on its own tables
//! and on its mutants.
//!
//! For every family and every K of the census (the K values bound in use,
//! tail lengths 1..=67 and the family's largest supported K):
//! * all-extreme rows — codes ±127 against ±127, nibbles 15 / 0 / 1 (codes +7,
//!   -8, -7) against ±127, alternating signs — through the tier's real kernel
//!   functions, checked against exact i64 arithmetic (integer families) or the
//!   scalar tier (float families). These are exactly the inputs that break a
//!   saturating `maddubs` or a wrong `dpbusd` form;
//! * random rows, checked bit for bit against the scalar tier.

use std::fmt;

use crate::abi::activations::{MAX_K_W4A8, MAX_K_W8A8};
use crate::abi::family::KernelFamily;
use crate::abi::table::KernelTable;
use crate::scalar::SCALAR;

mod inputs;
pub mod mutants;
mod prover;
mod random;
mod rng;

pub use inputs::release_shared_inputs;
pub use rng::Rng;

/// Float families have no integer bound; their extreme rows stop here to keep
/// the selftest fast (their arithmetic does not depend on K beyond the tails).
pub(crate) const FLOAT_PROOF_MAX_K: usize = 65_537;
/// Random differential rows are drawn at census K up to this length.
pub const RANDOM_PROOF_MAX_K: usize = 4096;

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
pub fn prove_family(table: &KernelTable, family: KernelFamily, census: &[usize]) -> FamilyProof {
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
/// weight-row chunk of the family's declared [`Shapes`](qlinear_kernels_core::abi::tile::Shapes):
/// a K with a tail past the last block, and K = 256, where grouped families
/// reach 8 groups of 32. Chunk boundaries do not depend on K, and the
/// chunk-spanning rows cost several times the others.
const CHUNK_PROOF_K: [usize; 2] = [67, 256];
/// Below this K (the tails) the random rows take the lighter shapes of
/// [`Shapes::tail_proof_calls`](qlinear_kernels_core::abi::tile::Shapes::tail_proof_calls),
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
