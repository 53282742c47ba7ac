//! The KV cache and the forward pass's work buffers.

use half::bf16;

use super::*;
use crate::kv::{KvPrecision, KvValue};

/// One layer's cached keys and values in the cache's type
/// ([`KvPrecision`]), each head-major (`[kv_head, capacity, head_dim]`): a
/// head's keys are read as one sequential run, which the hardware
/// prefetchers follow (past a few hundred positions the cache no longer
/// fits in L2).
pub(super) enum LayerKv {
    F32 { k: Vec<f32>, v: Vec<f32> },
    Bf16 { k: Vec<bf16>, v: Vec<bf16> },
}

impl LayerKv {
    /// `values` zeroed keys and as many values, held as `precision`.
    fn new(precision: KvPrecision, values: usize) -> LayerKv {
        match precision {
            KvPrecision::F32 => LayerKv::F32 {
                k: vec![0.0; values],
                v: vec![0.0; values],
            },
            KvPrecision::Bf16 => LayerKv::Bf16 {
                k: vec![bf16::ZERO; values],
                v: vec![bf16::ZERO; values],
            },
        }
    }

    /// Writes features `cols` of one position's keys `k` and values `v`
    /// (`[kv_heads · head_dim]` each) at position `pos`, each rounded once
    /// to the held type ([`KvValue::narrow`]).
    pub(super) fn store(&mut self, k: &[f32], v: &[f32], cols: Range<usize>, hd: usize, capacity: usize, pos: usize) {
        match self {
            LayerKv::F32 { k: kc, v: vc } => {
                store_kv(kc, k, cols.clone(), hd, capacity, pos);
                store_kv(vc, v, cols, hd, capacity, pos);
            }
            LayerKv::Bf16 { k: kc, v: vc } => {
                store_kv(kc, k, cols.clone(), hd, capacity, pos);
                store_kv(vc, v, cols, hd, capacity, pos);
            }
        }
    }
}

impl LayerKv {
    /// The keys and values, borrowed.
    pub(super) fn rows(&self) -> KvRows<'_> {
        match self {
            LayerKv::F32 { k, v } => KvRows::F32 { k, v },
            LayerKv::Bf16 { k, v } => KvRows::Bf16 { k, v },
        }
    }
}

/// A layer's keys and values as held, borrowed (`[kv_head, capacity,
/// head_dim]` each).
#[derive(Clone, Copy)]
pub(super) enum KvRows<'a> {
    F32 { k: &'a [f32], v: &'a [f32] },
    Bf16 { k: &'a [bf16], v: &'a [bf16] },
}

/// One layer's cached keys and values, of which positions `0..span` are
/// held.
#[derive(Clone, Copy)]
pub(super) struct Held<'a> {
    pub(super) kv: KvRows<'a>,
    pub(super) capacity: usize,
    pub(super) span: usize,
}

impl<'a> Held<'a> {
    /// These positions with bfloat16 values widened to f32 in `k` and `v`
    /// (laid out with a capacity of `span`); f32 ones as they are. A batch
    /// reads every cached value once per new row and query head, so
    /// widening each once first keeps a prefill's attention at the f32
    /// cache's speed; the values, and so the bits, are the same
    /// ([`KvValue::widen`] is exact).
    pub(super) fn widened(self, kv_heads: usize, hd: usize, k: &'a mut Vec<f32>, v: &'a mut Vec<f32>) -> Held<'a> {
        let KvRows::Bf16 { k: hk, v: hv } = self.kv else {
            return self;
        };
        for (wide, held) in [(&mut *k, hk), (&mut *v, hv)] {
            wide.clear();
            for head in 0..kv_heads {
                let from = head * self.capacity * hd;
                wide.extend(held[from..from + self.span * hd].iter().map(|x| x.widen()));
            }
        }
        Held {
            kv: KvRows::F32 { k, v },
            capacity: self.span,
            span: self.span,
        }
    }
}

/// Writes features `cols` of one position's keys or values `row`
/// (`[kv_heads · head_dim]`) at position `pos` of a head-major layer cache
/// (`[kv_head, capacity, head_dim]`).
fn store_kv<E: KvValue>(cached: &mut [E], row: &[f32], cols: Range<usize>, hd: usize, capacity: usize, pos: usize) {
    let mut j = cols.start;
    while j < cols.end {
        let (head, d) = (j / hd, j % hd);
        let run = (hd - d).min(cols.end - j);
        let at = (head * capacity + pos) * hd + d;
        cached[at..at + run]
            .iter_mut()
            .zip(&row[j..j + run])
            .for_each(|(c, &x)| *c = E::narrow(x));
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
    pub(super) kv: Vec<RwLock<LayerKv>>,
    pub(super) precision: KvPrecision,
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
    /// A cache for `capacity` positions (at most the model's context),
    /// holding f32 keys and values.
    pub fn new(config: &Config, capacity: usize) -> Result<KvCache> {
        KvCache::with_precision(config, capacity, KvPrecision::F32)
    }

    /// A cache for `capacity` positions (at most the model's context),
    /// holding its keys and values as `precision`
    /// ([`crate::Model::cache`] uses the model's).
    pub fn with_precision(config: &Config, capacity: usize, precision: KvPrecision) -> Result<KvCache> {
        if capacity > config.context {
            return Err(Error::Prompt(format!(
                "a cache of {capacity} positions exceeds the model's context of {} tokens",
                config.context
            )));
        }
        let kv = config.kv_heads * config.head_dim * capacity;
        Ok(KvCache {
            kv: (0..config.layers)
                .map(|_| RwLock::new(LayerKv::new(precision, kv)))
                .collect(),
            precision,
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

    /// The type its keys and values are held in.
    pub fn precision(&self) -> KvPrecision {
        self.precision
    }

    /// Bytes its keys and values take (every position it can hold).
    pub fn bytes(&self) -> usize {
        let values: usize = self
            .kv
            .iter()
            .map(|l| match &*l.read().unwrap_or_else(PoisonError::into_inner) {
                LayerKv::F32 { k, v } => k.len() + v.len(),
                LayerKv::Bf16 { k, v } => k.len() + v.len(),
            })
            .sum();
        values * self.precision.bytes()
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
    /// A batch's keys and values widened from a bfloat16 cache
    /// ([`Held::widened`]).
    pub(super) wide_k: Vec<f32>,
    pub(super) wide_v: Vec<f32>,
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
