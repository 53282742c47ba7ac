//! The KV cache and the forward pass's work buffers.

use super::*;

/// One layer's cached keys and values, head-major (`[kv_head, capacity,
/// head_dim]`): a head's keys are read as one sequential run, which the
/// hardware prefetchers follow (past a few hundred positions the cache no
/// longer fits in L2). Positions `0..span` are held.
pub(super) struct Held<'a> {
    pub(super) k: &'a [f32],
    pub(super) v: &'a [f32],
    pub(super) capacity: usize,
    pub(super) span: usize,
}

/// Writes features `cols` of one position's keys or values `row`
/// (`[kv_heads · head_dim]`) at position `pos` of a head-major layer cache
/// (`[kv_head, capacity, head_dim]`).
pub(super) fn store_kv(cached: &mut [f32], row: &[f32], cols: Range<usize>, hd: usize, capacity: usize, pos: usize) {
    let mut j = cols.start;
    while j < cols.end {
        let (head, d) = (j / hd, j % hd);
        let run = (hd - d).min(cols.end - j);
        let at = (head * capacity + pos) * hd + d;
        cached[at..at + run].copy_from_slice(&row[j..j + run]);
        j += run;
    }
}

/// The keys and values of every position so far, per layer, laid out for
/// the decode step (head-major, `[kv_head, capacity, head_dim]` a layer:
/// each head's positions one sequential run), with the forward pass's work
/// buffers (grown once, reused by every call).
pub struct KvCache {
    /// Per layer; locked only by a team step, whose threads each write
    /// their share of a position's keys and values before all read them.
    pub(super) k: Vec<RwLock<Vec<f32>>>,
    pub(super) v: Vec<RwLock<Vec<f32>>>,
    pub(super) len: usize,
    pub(super) capacity: usize,
    pub(super) scratch: Scratch,
    /// A team step's buffers, one set per thread.
    pub(super) team: Vec<Mutex<Scratch>>,
    /// A team step's meeting place.
    pub(super) exchange: Exchange,
    /// Per thread of a profiled team step, its phases' nanoseconds
    /// ([`KvCache::profile_steps`]).
    pub(super) profile: Option<Vec<Counters>>,
    /// Team steps profiled since the counters were last taken.
    pub(super) profiled_steps: u64,
}

impl KvCache {
    /// A cache for `capacity` positions (at most the model's context).
    pub fn new(config: &Config, capacity: usize) -> Result<KvCache> {
        if capacity > config.context {
            return Err(Error::Prompt(format!(
                "a cache of {capacity} positions exceeds the model's context of {} tokens",
                config.context
            )));
        }
        let kv = config.kv_heads * config.head_dim * capacity;
        Ok(KvCache {
            k: (0..config.layers).map(|_| RwLock::new(vec![0f32; kv])).collect(),
            v: (0..config.layers).map(|_| RwLock::new(vec![0f32; kv])).collect(),
            len: 0,
            capacity,
            scratch: Scratch::default(),
            team: vec![],
            exchange: Exchange::new(0),
            profile: None,
            profiled_steps: 0,
        })
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positions it can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forgets every position (the buffers stay).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Times the phases of every decode step run on this cache from now on,
    /// per thread ([`crate::profile`]), until [`KvCache::take_step_times`].
    /// A profiled decode step always runs as a team ([`DecodeSplit::Team`]),
    /// of one thread on a pool of one, whatever the model's split, so that
    /// one thread's step is measured the same way; the logits keep their
    /// bits (each output is the same arithmetic on any split).
    pub fn profile_steps(&mut self) {
        self.profile.get_or_insert_with(Vec::new);
    }

    /// The phases' times of the decode steps profiled since
    /// [`KvCache::profile_steps`] or the last take, zeroing them; `None`
    /// when this cache is not profiling. Profiling goes on.
    pub fn take_step_times(&mut self) -> Option<StepTimes> {
        let counters = self.profile.as_ref()?;
        let times = take(counters, self.profiled_steps);
        self.profiled_steps = 0;
        Some(times)
    }
}

/// A forward pass's work buffers; a team step has one per thread, each a
/// whole copy of one position's vectors, of which the thread computes its
/// share and the exchange fills in the rest (`o` holds a layer's gathered
/// output there).
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) x: Vec<f32>,
    pub(super) h: Vec<f32>,
    pub(super) q: Vec<f32>,
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) att: Vec<f32>,
    pub(super) o: Vec<f32>,
    pub(super) g: Vec<f32>,
    pub(super) u: Vec<f32>,
    pub(super) scores: Vec<f32>,
    pub(super) logits: Vec<f32>,
    /// RoPE's `cos` and `sin` rows of the call's positions ([`Model::rope_rows`]).
    pub(super) cos: Vec<f32>,
    pub(super) sin: Vec<f32>,
}

impl Scratch {
    /// Buffers for `m` new rows over `span` positions and `rows` rows of
    /// logits (grown, never shrunk: after the first calls a decode step
    /// allocates nothing).
    pub(super) fn resize(&mut self, m: usize, span: usize, c: &Config, rows: usize) {
        self.scores.resize(m * c.heads * span, 0.0);
        self.logits.resize(rows * c.vocab, 0.0);
        let (q_dim, kv_dim) = (c.heads * c.head_dim, c.kv_heads * c.head_dim);
        for (buf, width) in [
            (&mut self.x, c.hidden),
            (&mut self.h, c.hidden.max(q_dim)),
            (&mut self.q, q_dim),
            (&mut self.k, kv_dim),
            (&mut self.v, kv_dim),
            (&mut self.att, q_dim),
            (&mut self.o, c.hidden),
            (&mut self.g, c.ffn),
            (&mut self.u, c.ffn),
        ] {
            buf.resize(m * width, 0.0);
        }
    }
}
