//! Where a team decode step's time goes, thread by thread: each group of
//! projections (whose bytes `--bench` turns into GB/s beside the probe),
//! the head, attention, the thread hand-offs, the norms and rotations,
//! RoPE and the rest (issue 63), answered from the step itself rather than
//! from a sampling profiler, whose stacks a release build without frame
//! pointers loses at the kernels.
//!
//! A step's thread reads the clock once at each boundary between phases
//! (`Clock::lap`) and charges the time since the last read to the phase
//! that just ended, so the phases add up to the step by construction. The
//! clock is read only when the cache asks for it
//! ([`crate::KvCache::profile_steps`]): an unprofiled step does one branch a
//! boundary.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A phase of a decode step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The thread's share of the query, key and value projections
    /// (`qlinear::Linear::forward_rows`, the activation's check and
    /// quantization included, as for every projection below).
    Qkv,
    /// The thread's share of the attention output projection.
    Output,
    /// The thread's share of the MLP's gate and up projections.
    GateUp,
    /// The thread's share of the MLP's down projection.
    Down,
    /// The thread's share of the LM head.
    Head,
    /// The thread's query heads attending over the cache.
    Attention,
    /// Waiting for the other threads (the barrier after the keys and values
    /// and every gather of a layer's shares), the copies of their shares
    /// included: the thread hand-offs.
    Waits,
    /// The RMS norms and the rotated file's Hadamard rotations of the
    /// projections' inputs.
    Norms,
    /// RoPE on the thread's query and key rows and the cache writes.
    Rope,
    /// Everything else: the embedding row, SwiGLU and the residual adds.
    Other,
}

impl Phase {
    /// Every phase, in the order of [`StepTimes::threads`]' entries.
    pub const ALL: [Phase; 10] = [
        Phase::Qkv,
        Phase::Output,
        Phase::GateUp,
        Phase::Down,
        Phase::Head,
        Phase::Attention,
        Phase::Waits,
        Phase::Norms,
        Phase::Rope,
        Phase::Other,
    ];

    /// The phases that stream weights, in [`Phase::ALL`]'s order: a
    /// projection's or the head's.
    pub const WEIGHTS: [Phase; 5] = [Phase::Qkv, Phase::Output, Phase::GateUp, Phase::Down, Phase::Head];

    /// The phase's name, as a table's column shows it.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Qkv => "Q K V",
            Phase::Output => "O",
            Phase::GateUp => "gate up",
            Phase::Down => "down",
            Phase::Head => "LM head",
            Phase::Attention => "attention",
            Phase::Waits => "waits",
            Phase::Norms => "norms, rotations",
            Phase::Rope => "RoPE, cache",
            Phase::Other => "other",
        }
    }
}

/// Nanoseconds per phase of one thread, summed over the profiled steps.
pub(crate) type Counters = [AtomicU64; Phase::ALL.len()];

/// What the threads of the profiled decode steps spent, summed over the
/// steps since profiling began or was last taken
/// ([`crate::KvCache::take_step_times`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepTimes {
    /// Team decode steps measured.
    pub steps: u64,
    /// Per thread of the team, nanoseconds per phase in [`Phase::ALL`]'s
    /// order.
    pub threads: Vec<[u64; Phase::ALL.len()]>,
}

impl StepTimes {
    /// Milliseconds a step, per thread and phase (0 when no step was
    /// measured).
    pub fn ms_per_step(&self) -> Vec<[f64; Phase::ALL.len()]> {
        let steps = self.steps.max(1) as f64;
        self.threads
            .iter()
            .map(|t| t.map(|ns| ns as f64 / steps / 1e6))
            .collect()
    }
}

/// Counters for `threads` threads, all zero.
pub(crate) fn counters(threads: usize) -> Vec<Counters> {
    (0..threads).map(|_| Default::default()).collect()
}

/// Reads the counters and zeroes them.
pub(crate) fn take(counters: &[Counters], steps: u64) -> StepTimes {
    StepTimes {
        steps,
        threads: counters
            .iter()
            .map(|c| std::array::from_fn(|p| c[p].swap(0, Ordering::Relaxed)))
            .collect(),
    }
}

/// One thread's stopwatch over a step: [`Clock::lap`] charges the time
/// since the previous lap (or the clock's start) to a phase.
pub(crate) struct Clock<'p> {
    counters: Option<(&'p Counters, Instant)>,
}

impl<'p> Clock<'p> {
    /// A clock charging `counters`, or one that reads no time.
    pub(crate) fn new(counters: Option<&'p Counters>) -> Self {
        Clock {
            counters: counters.map(|c| (c, Instant::now())),
        }
    }

    /// Charges the time since the last lap to `phase`.
    pub(crate) fn lap(&mut self, phase: Phase) {
        if let Some((c, last)) = &mut self.counters {
            let now = Instant::now();
            let ns = u64::try_from(now.duration_since(*last).as_nanos()).unwrap_or(u64::MAX);
            c[phase as usize].fetch_add(ns, Ordering::Relaxed);
            *last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laps_charge_their_phase_and_take_zeroes() {
        let c = counters(2);
        let mut clock = Clock::new(Some(&c[1]));
        std::thread::sleep(std::time::Duration::from_millis(2));
        clock.lap(Phase::Attention);
        clock.lap(Phase::Head);
        let t = take(&c, 2);
        assert_eq!(t.threads[0], [0; Phase::ALL.len()]);
        assert!(t.threads[1][Phase::Attention as usize] >= 2_000_000, "{t:?}");
        assert!(t.threads[1][Phase::Head as usize] < t.threads[1][Phase::Attention as usize]);
        assert_eq!(t.threads[1][Phase::Qkv as usize], 0);
        let ms = t.ms_per_step();
        assert!(ms[1][Phase::Attention as usize] >= 1.0, "{ms:?}");
        assert_eq!(take(&c, 0).threads, vec![[0; Phase::ALL.len()]; 2]);
        // a clock without counters reads nothing and charges nothing
        let mut off = Clock::new(None);
        off.lap(Phase::Other);
        assert!(off.counters.is_none());
    }

    #[test]
    fn phases_are_listed_once_in_index_order() {
        for (i, p) in Phase::ALL.iter().enumerate() {
            assert_eq!(*p as usize, i, "{}", p.name());
        }
        // the weight phases come first, in the same order
        for (i, p) in Phase::WEIGHTS.iter().enumerate() {
            assert_eq!(*p as usize, i, "{}", p.name());
        }
    }
}
