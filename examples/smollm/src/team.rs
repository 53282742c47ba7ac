//! The threads of a decode step working as one team, as llama.cpp's do: each
//! thread runs the whole step and takes its share of every layer (a range of
//! output features, or of attention heads), and the threads meet at a
//! spinning barrier between layers instead of going back to sleep.
//!
//! Why: a decode step of SmolLM2-135M is about 240 small calls (5 to 30 µs
//! each on one core). Splitting each call over a rayon pool wakes the
//! pool's sleeping workers every time, which costs about as much as the
//! call: at 2 threads the split gained 1.18× where llama.cpp gains 1.7×.
//! A team wakes once per step; each meeting costs a cache line's round trip.
//!
//! Exchanges are double-buffered: a thread publishes its share of round `r`
//! into set `r % 2` and reads every share of round `r` after the barrier;
//! a faster thread can publish round `r + 1` (the other set) meanwhile, but
//! not round `r + 2` before every thread has passed round `r + 1`'s barrier,
//! which each reaches only after reading round `r`.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::{Error, Result};

/// Output features `0..n` split over `parts` threads: thread `t`'s range.
/// The ranges start on multiples of 16, a weight panel's rows
/// (`qlinear::Linear::forward_rows`), so no two threads read one panel.
pub(crate) fn share(n: usize, t: usize, parts: usize) -> Range<usize> {
    let chunk = n.div_ceil(parts.max(1)).div_ceil(16) * 16;
    let start = (t * chunk).min(n);
    start..(start + chunk).min(n)
}

/// `items` (attention heads) split over `parts` threads: thread `t`'s range.
pub(crate) fn share_items(items: usize, t: usize, parts: usize) -> Range<usize> {
    let chunk = items.div_ceil(parts.max(1));
    (t * chunk).min(items)..((t + 1) * chunk).min(items)
}

/// Spins before yielding the core: a team meets every few microseconds, and
/// a thread that sleeps between meetings is what the team exists to avoid;
/// the yield keeps a machine with fewer cores than threads moving.
const SPINS_BEFORE_YIELD: u32 = 1 << 14;

/// A reusable barrier for `n` threads that spins while it waits, and that a
/// failing thread can abort so that no other thread waits for it forever.
pub(crate) struct SpinBarrier {
    n: usize,
    arrived: AtomicUsize,
    generation: AtomicUsize,
    aborted: AtomicBool,
}

impl SpinBarrier {
    pub(crate) fn new(n: usize) -> Self {
        SpinBarrier {
            n,
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            aborted: AtomicBool::new(false),
        }
    }

    /// Waits until all `n` threads have called `wait` (the same number of
    /// times). [`Error::TeamAborted`] once a thread has aborted.
    pub(crate) fn wait(&self) -> Result<()> {
        if self.aborted.load(Ordering::Acquire) {
            return Err(Error::TeamAborted);
        }
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            // the last to arrive resets the count before it releases the
            // others, who cannot arrive again until they see the release
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.store(generation.wrapping_add(1), Ordering::Release);
            return Ok(());
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if self.aborted.load(Ordering::Acquire) {
                return Err(Error::TeamAborted);
            }
            if spins < SPINS_BEFORE_YIELD {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// Releases every thread waiting now or later with an error.
    pub(crate) fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
    }
}

/// Aborts `barrier` when dropped unless [`AbortUnlessDone::done`] was
/// called: a thread that returns an error or panics never leaves the others
/// spinning.
pub(crate) struct AbortUnlessDone<'b> {
    barrier: &'b SpinBarrier,
    done: bool,
}

impl<'b> AbortUnlessDone<'b> {
    pub(crate) fn new(barrier: &'b SpinBarrier) -> Self {
        AbortUnlessDone { barrier, done: false }
    }

    pub(crate) fn done(mut self) {
        self.done = true;
    }
}

impl Drop for AbortUnlessDone<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.barrier.abort();
        }
    }
}

/// One thread's published share: where it goes in the whole vector, and
/// its values (the buffer is kept: after the first steps nothing allocates).
#[derive(Default)]
struct Share {
    offset: usize,
    values: Vec<f32>,
}

/// The team's meeting place: a barrier and two sets of one published share
/// per thread.
pub(crate) struct Exchange {
    barrier: SpinBarrier,
    sets: [Vec<Mutex<Share>>; 2],
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // a share is plain data, whole after every write: a panic elsewhere
    // cannot leave it half-written in a way that matters (the step fails)
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Exchange {
    pub(crate) fn new(threads: usize) -> Self {
        let set = || (0..threads).map(|_| Mutex::new(Share::default())).collect();
        Exchange {
            barrier: SpinBarrier::new(threads),
            sets: [set(), set()],
        }
    }

    /// Makes the exchange ready for a step after one that may have been
    /// aborted (no thread is using it: the caller holds it exclusively).
    pub(crate) fn reset(&mut self) {
        self.barrier.arrived.store(0, Ordering::Relaxed);
        self.barrier.aborted.store(false, Ordering::Relaxed);
    }

    pub(crate) fn barrier(&self) -> &SpinBarrier {
        &self.barrier
    }

    /// Thread `t`'s exchange number `round`: publishes `whole[mine]`, waits
    /// for every thread's, and copies them all into `whole`.
    pub(crate) fn all_gather(&self, t: usize, round: &mut usize, mine: Range<usize>, whole: &mut [f32]) -> Result<()> {
        let set = &self.sets[*round % 2];
        *round += 1;
        {
            let mut share = lock(&set[t]);
            share.offset = mine.start;
            share.values.clear();
            share.values.extend_from_slice(&whole[mine]);
        }
        self.barrier.wait()?;
        for (u, slot) in set.iter().enumerate() {
            if u != t {
                let share = lock(slot);
                whole[share.offset..share.offset + share.values.len()].copy_from_slice(&share.values);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_rows_once_on_panel_bounds() {
        for n in [0, 1, 15, 16, 17, 96, 192, 576, 1536, 49_152, 1000] {
            for parts in 1..=5 {
                let ranges: Vec<Range<usize>> = (0..parts).map(|t| share(n, t, parts)).collect();
                let mut next = 0;
                for r in &ranges {
                    assert_eq!(r.start, next.min(n), "n={n} parts={parts} {ranges:?}");
                    assert!(r.start % 16 == 0 || r.start == n, "{ranges:?}");
                    next = r.end;
                }
                assert_eq!(next, n, "n={n} parts={parts} {ranges:?}");
            }
        }
        assert_eq!(share(576, 1, 2), 288..576);
        assert_eq!(share(192, 0, 2), 0..96);
        assert_eq!(share(40, 1, 3), 16..32);
        assert_eq!(share(40, 2, 3), 32..40);
        let heads: Vec<Range<usize>> = (0..2).map(|t| share_items(9, t, 2)).collect();
        assert_eq!(heads, [0..5, 5..9]);
        assert_eq!(share_items(2, 2, 3), 2..2);
    }

    #[test]
    fn a_team_gathers_every_share_and_an_abort_frees_the_waiters() {
        let threads = 3;
        let exchange = Exchange::new(threads);
        let results: Vec<Vec<f32>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let exchange = &exchange;
                    s.spawn(move || {
                        let mut whole = vec![0f32; 40];
                        let mut round = 0;
                        let mut seen = vec![];
                        for r in 0..50 {
                            let mine = share(40, t, threads);
                            whole[mine.clone()].iter_mut().enumerate().for_each(|(i, v)| {
                                *v = (r * 100 + mine.start + i) as f32;
                            });
                            exchange.all_gather(t, &mut round, mine, &mut whole).unwrap();
                            seen.push(whole.iter().enumerate().all(|(i, &v)| v == (r * 100 + i) as f32));
                        }
                        seen.into_iter().map(|b| f32::from(u8::from(b))).collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(results.iter().flatten().all(|&v| v == 1.0), "a round saw a stale share");

        let barrier = SpinBarrier::new(2);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| barrier.wait());
            let guard = AbortUnlessDone::new(&barrier);
            drop(guard); // a failing thread: never calls done
            assert!(matches!(waiter.join().unwrap(), Err(Error::TeamAborted)));
        });
        assert!(matches!(barrier.wait(), Err(Error::TeamAborted)));
    }
}
