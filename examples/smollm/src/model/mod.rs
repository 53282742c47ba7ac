use std::ops::Range;
use std::path::Path;
use std::sync::{Mutex, PoisonError, RwLock};

use qlinear::gguf::GgufFile;
use qlinear::{Embedding, Linear, ModelFile, QScheme, QuantLinearMode, QuantizedWeight};
use rayon::prelude::*;

use crate::attend::dot;
use crate::profile::{counters, take, Clock, Counters, Phase, StepTimes};
use crate::team::{share, share_items, AbortUnlessDone, Exchange};
use crate::{Error, Meta, Modes, Result};

mod cache;
mod calibrate;
mod dense;
mod load;
mod rope;
mod rotation;
mod step;

use rotation::{Rotation, Width};

pub use cache::KvCache;
use cache::*;
use calibrate::*;
use dense::*;
pub use load::{check_f32_path_fits, memory_available};

/// How a decode step (one new token) spreads over the threads of the rayon
/// pool it runs in. Both give the same bits: each output is computed by one
/// thread with the same arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecodeSplit {
    /// Every thread runs the whole step and takes its share of each layer
    /// (`qlinear::Linear::forward_rows`) and of the attention heads; the
    /// threads meet at a spinning barrier between layers, so the pool wakes
    /// once per step, as llama.cpp's threads do. A step holds every thread
    /// of the pool until it ends: steps of several sequences at once belong
    /// on pools of their own (two steps sharing a pool's threads could each
    /// wait, spinning, for a thread the other holds), or use
    /// [`DecodeSplit::Pool`].
    #[default]
    Team,
    /// Each layer's call is split over the pool on its own
    /// (`qlinear::Linear::forward`): the pool's workers wake for every call.
    Pool,
}

/// Where a converted file's quantized layers keep their codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightMemory {
    /// Read in place from the file's bytes, read once into memory on
    /// transparent huge pages where the OS has them, each weight byte
    /// resident once and the W4A8 weights arranged there in their panel
    /// form ([`ModelFile::open_in_place`]): on an AMD EPYC Zen 4 as fast as
    /// [`WeightMemory::Packed`] at 0.56–0.58× its peak RSS
    /// (`docs/BENCHMARKS.md`).
    #[default]
    InPlace,
    /// Copied out of the file, then moved into one region in the order a
    /// token reads them, on transparent huge pages where the OS has them
    /// ([`qlinear::pack_weights`]).
    Packed,
    /// Copied out of the file, each layer's codes in a buffer of their own
    /// ([`ModelFile::open`]).
    Copied,
}

/// The hyper-parameters of a Llama decoder, from the `llama.*` metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Transformer blocks (`llama.block_count`).
    pub layers: usize,
    /// The model's width (`llama.embedding_length`).
    pub hidden: usize,
    /// The MLP's inner width (`llama.feed_forward_length`).
    pub ffn: usize,
    /// Query heads (`llama.attention.head_count`).
    pub heads: usize,
    /// Key/value heads (`llama.attention.head_count_kv`), dividing `heads`.
    pub kv_heads: usize,
    /// A head's width: `hidden / heads`.
    pub head_dim: usize,
    /// The vocabulary (rows of `token_embd.weight`).
    pub vocab: usize,
    /// The longest sequence the model was trained for (`llama.context_length`).
    pub context: usize,
    /// RoPE's base (`llama.rope.freq_base`, 10 000 if absent).
    pub rope_base: f32,
    /// RMSNorm's epsilon (`llama.attention.layer_norm_rms_epsilon`).
    pub eps: f32,
}

impl Config {
    /// Reads and checks the hyper-parameters. Errors: an architecture other
    /// than `llama`, a missing key, heads that do not divide the width, KV
    /// heads that do not divide the heads, RoPE over less than a head.
    pub fn from_meta(meta: &Meta) -> Result<Config> {
        let arch = meta.str("general.architecture")?;
        if arch != "llama" {
            return Err(Error::Architecture { found: arch.into() });
        }
        let hidden = meta.usize("llama.embedding_length")?;
        let heads = meta.usize("llama.attention.head_count")?;
        let kv_heads = meta.usize("llama.attention.head_count_kv").unwrap_or(heads);
        let bad = |key: &str, reason: String| Error::Metadata {
            key: key.into(),
            reason,
        };
        if heads == 0 || !hidden.is_multiple_of(heads) || (hidden / heads) % 2 == 1 {
            return Err(bad(
                "llama.attention.head_count",
                format!("{heads} heads do not split the width {hidden} into even head widths"),
            ));
        }
        if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(bad(
                "llama.attention.head_count_kv",
                format!("{kv_heads} KV heads do not divide {heads} query heads"),
            ));
        }
        let head_dim = hidden / heads;
        if let Ok(d) = meta.usize("llama.rope.dimension_count") {
            if d != head_dim {
                return Err(bad(
                    "llama.rope.dimension_count",
                    format!("is {d}; this decoder rotates whole heads of {head_dim}"),
                ));
            }
        }
        Ok(Config {
            layers: meta.usize("llama.block_count")?,
            hidden,
            ffn: meta.usize("llama.feed_forward_length")?,
            heads,
            kv_heads,
            head_dim,
            vocab: 0,
            context: meta.usize("llama.context_length")?,
            rope_base: meta.f32("llama.rope.freq_base").unwrap_or(10_000.0),
            eps: meta.f32("llama.attention.layer_norm_rms_epsilon")?,
        })
    }
}

struct Layer {
    attn_norm: Vec<f32>,
    q: Dense,
    k: Dense,
    v: Dense,
    o: Dense,
    ffn_norm: Vec<f32>,
    gate: Dense,
    up: Dense,
    down: Dense,
}

/// A Llama decoder whose linear layers are f32 matrices (from a GGUF file,
/// dequantized) or qlinear layers (from a converted file), with the same
/// code around them: RMSNorm, rotary embeddings as llama.cpp applies them
/// to GGUF Llama weights (adjacent pairs), grouped-query attention over a
/// [`KvCache`], the SwiGLU MLP, and the LM head: the file's `output`
/// weight, or the token embedding where there is none (tied, as
/// SmolLM2's).
pub struct Model {
    /// The hyper-parameters.
    pub config: Config,
    embed: Table,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    head: Dense,
    /// The head's weight prefix: `output`, or `token_embd` where it is tied.
    head_name: &'static str,
    /// RoPE's frequency of pair `i`, `base^(−2i / head_dim)` ([`Model::rope_rows`]).
    rope_freq: Vec<f64>,
    /// What the layers are, for reports (`f32`, `q4g32 W4A8`, …).
    pub description: String,
    /// How a decode step spreads over the pool's threads.
    split: DecodeSplit,
    /// What the caches [`Model::cache`] makes hold their keys and values as.
    kv: crate::KvPrecision,
    /// A rotated model's input rotations ([`crate::rotate`]), or none.
    rotation: Option<Rotation>,
    /// The selftest and plan of a converted file's census, run when it was
    /// opened ([`Model::from_converted`]); none on the f32 path.
    start_up: Option<qlinear::InitReport>,
}

impl Model {
    /// Opens `path`: a GGUF file runs the f32 path (every weight
    /// dequantized to f32), a converted qlinear file the quantized one
    /// (its layers in `modes`: [`Modes::for_layer`]), their codes held as
    /// `memory` says.
    pub fn open(path: &Path, modes: &Modes, memory: WeightMemory) -> Result<(Model, Meta)> {
        let mut magic = [0u8; 4];
        let is_gguf = std::fs::File::open(path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
            .is_ok()
            && qlinear::gguf::is_gguf(&magic);
        if is_gguf {
            Model::of_gguf(&GgufFile::open(path)?)
        } else {
            let file = if memory == WeightMemory::InPlace {
                ModelFile::open_in_place(path)?
            } else {
                ModelFile::open(path)?
            };
            Model::of_file(file, modes, memory)
        }
    }

    /// A model file held in memory (the page's: a browser has no files to
    /// map), as [`Model::open`] reads it: a GGUF file runs the f32 path, a
    /// converted file the quantized one, its codes held as `memory` says
    /// ([`WeightMemory::InPlace`]: read from `bytes`, which the layers keep,
    /// so the file's bytes are held once; otherwise copied out, and `bytes`
    /// dropped before [`WeightMemory::Packed`] packs them). Errors: as
    /// [`Model::open`].
    pub fn from_bytes(bytes: Vec<u8>, modes: &Modes, memory: WeightMemory) -> Result<(Model, Meta)> {
        if qlinear::gguf::is_gguf(&bytes) {
            return Model::of_gguf(&GgufFile::from_bytes(bytes)?);
        }
        let file = if memory == WeightMemory::InPlace {
            ModelFile::from_bytes_in_place(bytes)?
        } else {
            ModelFile::from_bytes(bytes)?
        };
        Model::of_file(file, modes, memory)
    }

    /// The quantized model of an opened converted file, its codes packed
    /// after the file is dropped when `memory` is [`WeightMemory::Packed`]
    /// (the file's memory first: its pages, the copies and the region would
    /// otherwise be resident at once).
    fn of_file(file: ModelFile, modes: &Modes, memory: WeightMemory) -> Result<(Model, Meta)> {
        let (mut model, meta) = Model::of_converted(&file, modes)?;
        if memory == WeightMemory::Packed {
            drop(file);
            model.pack_weights()?;
        }
        Ok((model, meta))
    }

    /// The f32 model of a GGUF file, and its metadata.
    fn of_gguf(file: &GgufFile) -> Result<(Model, Meta)> {
        let meta = Meta::from_gguf(file);
        Ok((Model::from_gguf(file, &meta)?, meta))
    }

    /// The quantized model of a converted file, and its metadata.
    fn of_converted(file: &ModelFile, modes: &Modes) -> Result<(Model, Meta)> {
        let meta = Meta::from_converted(file.file().metadata_map())?;
        Ok((Model::from_converted(file, &meta, modes)?, meta))
    }

    /// Moves every quantized layer's codes into one region, in the order a
    /// decode step reads them (each block's q, k, v, o, gate, up, down, then
    /// the head), on transparent huge pages where the OS has them
    /// ([`qlinear::pack_weights`]). `None` when no layer is quantized.
    pub fn pack_weights(&mut self) -> Result<Option<qlinear::Packed>> {
        let mut layers: Vec<&mut Linear> = self
            .layers
            .iter_mut()
            .flat_map(|l| {
                [
                    &mut l.q,
                    &mut l.k,
                    &mut l.v,
                    &mut l.o,
                    &mut l.gate,
                    &mut l.up,
                    &mut l.down,
                ]
            })
            .chain([&mut self.head])
            .filter_map(|d| match d {
                Dense::Q(l) => Some(&mut **l),
                Dense::F32 { .. } => None,
            })
            .collect();
        if layers.is_empty() {
            return Ok(None);
        }
        Ok(Some(qlinear::pack_weights(&mut layers)?))
    }

    /// How decode steps spread over the threads from now on
    /// ([`DecodeSplit::Team`] unless set).
    pub fn set_decode_split(&mut self, split: DecodeSplit) {
        self.split = split;
    }

    /// What the caches [`Model::cache`] makes from now on hold their keys
    /// and values as ([`crate::KvPrecision::F32`] unless set).
    pub fn set_kv_precision(&mut self, kv: crate::KvPrecision) {
        self.kv = kv;
    }

    /// What the caches [`Model::cache`] makes hold their keys and values as.
    pub fn kv_precision(&self) -> crate::KvPrecision {
        self.kv
    }

    /// A cache for `capacity` positions of this model, in its KV type
    /// ([`Model::set_kv_precision`]); refused beyond the model's context.
    pub fn cache(&self, capacity: usize) -> Result<KvCache> {
        KvCache::with_precision(&self.config, capacity, self.kv)
    }

    /// The selftest and plan the converted file's census ran when it was
    /// opened (its families' proofs, and any proven before in the process),
    /// or `None` on the f32 path.
    pub fn start_up(&self) -> Option<&qlinear::InitReport> {
        self.start_up.as_ref()
    }

    /// How decode steps spread over the threads.
    pub fn decode_split(&self) -> DecodeSplit {
        self.split
    }

    /// Runs `tokens` (appended to `cache` at its current length) and returns
    /// the logits: `[tokens.len(), vocab]` when `all`, else the last
    /// position's `[vocab]`, borrowed from the cache's buffers (which every
    /// call reuses: a decode step allocates nothing here). Errors: no
    /// tokens, a token past the vocabulary, more tokens than the cache
    /// holds.
    pub fn forward<'c>(&self, cache: &'c mut KvCache, tokens: &[u32], all: bool) -> Result<&'c [f32]> {
        let c = &self.config;
        let m = tokens.len();
        if m == 0 {
            return Err(Error::Prompt("no tokens to run (an empty prompt?)".into()));
        }
        if let Some(t) = tokens.iter().find(|&&t| t as usize >= c.vocab) {
            return Err(Error::Prompt(format!(
                "token id {t} is past the vocabulary ({})",
                c.vocab
            )));
        }
        let base = cache.len;
        if base + m > cache.capacity {
            return Err(Error::Prompt(format!(
                "{} tokens after {base} do not fit the context of {} tokens",
                m, cache.capacity
            )));
        }
        let team = (self.split == DecodeSplit::Team && rayon::current_num_threads() > 1) || cache.profile.is_some();
        if m == 1 && team && !self.calibrating() {
            return self.step_team(cache, tokens[0]);
        }
        let (h, hd) = (c.hidden, c.head_dim);
        let (q_dim, kv_dim) = (c.heads * hd, c.kv_heads * hd);
        let KvCache {
            kv: kv_cache,
            scratch: s,
            ..
        } = cache;
        s.resize(m, base + m, c, if all { m } else { 1 });
        self.rope_rows(base, m, &mut s.cos, &mut s.sin);
        let half = hd / 2;
        for (row, &t) in s.x.chunks_exact_mut(h).zip(tokens) {
            self.embed_row(t, row)?;
        }
        for (l, layer) in self.layers.iter().enumerate() {
            rms_norm_rows(&s.x, &layer.attn_norm, c.eps, &mut s.h);
            self.rotate_inputs(&mut s.h, Width::Hidden);
            layer.q.forward(&s.h, m, &mut s.q)?;
            layer.k.forward(&s.h, m, &mut s.k)?;
            layer.v.forward(&s.h, m, &mut s.v)?;
            rows_of(&mut s.q, q_dim)
                .zip(rows_of(&mut s.k, kv_dim))
                .enumerate()
                .for_each(|(i, (q, k))| {
                    let (cos, sin) = (&s.cos[i * half..(i + 1) * half], &s.sin[i * half..(i + 1) * half]);
                    self.rotate(q, 0..q_dim, cos, sin);
                    self.rotate(k, 0..kv_dim, cos, sin);
                });
            let kv = kv_cache[l].get_mut().unwrap_or_else(PoisonError::into_inner);
            for (i, (kr, vr)) in s.k.chunks_exact(kv_dim).zip(s.v.chunks_exact(kv_dim)).enumerate() {
                kv.store(kr, vr, 0..kv_dim, hd, cache.capacity, base + i);
            }
            let mut held = Held {
                kv: kv.rows(),
                capacity: cache.capacity,
                span: base + m,
            };
            if m > 1 {
                // a decode step reads each value once per query head, from
                // the cache: widening it first would only add a pass
                held = held.widened(c.kv_heads, hd, &mut s.wide_k, &mut s.wide_v);
            }
            attention(c, base, &s.q, &held, &mut s.att, &mut s.scores);
            self.rotate_inputs(&mut s.att, Width::Hidden);
            layer.o.forward(&s.att, m, &mut s.h)?;
            s.x.iter_mut().zip(&s.h).for_each(|(x, o)| *x += o);
            rms_norm_rows(&s.x, &layer.ffn_norm, c.eps, &mut s.h);
            self.rotate_inputs(&mut s.h, Width::Hidden);
            layer.gate.forward(&s.h, m, &mut s.g)?;
            layer.up.forward(&s.h, m, &mut s.u)?;
            rows_of(&mut s.g, c.ffn)
                .zip(s.u.par_chunks(c.ffn).with_min_len(ROWS_PER_TASK))
                .for_each(|(g, u)| swiglu(g, u));
            self.rotate_inputs(&mut s.g, Width::Ffn);
            layer.down.forward(&s.g, m, &mut s.h)?;
            s.x.iter_mut().zip(&s.h).for_each(|(x, d)| *x += d);
        }
        cache.len += m;
        let rows = if all { m } else { 1 };
        let from = (m - rows) * h;
        rms_norm(&s.x[from..], &self.norm, c.eps, &mut s.h[..rows * h]);
        self.rotate_inputs(&mut s.h[..rows * h], Width::Hidden);
        self.head.forward(&s.h[..rows * h], rows, &mut s.logits)?;
        Ok(&s.logits)
    }

    /// Token `t`'s embedding row into `row` (`[hidden]`).
    fn embed_row(&self, t: u32, row: &mut [f32]) -> Result<()> {
        let h = self.config.hidden;
        match &self.embed {
            Table::F32(e) => row.copy_from_slice(&e[t as usize * h..(t as usize + 1) * h]),
            Table::Q(e) => e.row(t as usize, row)?,
        }
        if let Some(r) = &self.rotation {
            // a rotated model's table holds `E H`: `E`'s row is `row Hᵀ`
            r.hidden.apply_transposed(row);
        }
        Ok(())
    }

    /// The RoPE rows of positions `base..base + m` ([`rope::rows`]).
    fn rope_rows(&self, base: usize, m: usize, cos: &mut Vec<f32>, sin: &mut Vec<f32>) {
        rope::rows(&self.rope_freq, base, m, cos, sin);
    }

    /// RoPE on the features `cols` of one position's heads ([`rope::rotate`]).
    fn rotate(&self, x: &mut [f32], cols: Range<usize>, cos: &[f32], sin: &[f32]) {
        rope::rotate(self.config.head_dim, x, cols, cos, sin);
    }

    /// The head layer's output features (the vocabulary).
    pub fn vocab(&self) -> usize {
        self.head.n()
    }

    /// The bytes every decode step reads from the weights: every linear
    /// layer's (codes and scales, or f32) and one embedding row.
    pub fn weight_bytes_per_token(&self) -> usize {
        self.weight_bytes_by_phase().iter().sum::<usize>() + self.config.hidden * 4
    }

    /// [`Model::weight_bytes_per_token`]'s linear layers by the step phase
    /// that reads them ([`crate::Phase::WEIGHTS`]: Q K V, O, gate up, down,
    /// the LM head): what `--profile-step` divides by each phase's time.
    pub fn weight_bytes_by_phase(&self) -> [usize; 5] {
        let dense = |d: &Dense| match d {
            Dense::F32 { w, .. } => w.len() * 4,
            Dense::Q(l) => {
                let (n, k) = (l.out_features(), l.in_features());
                match l.scheme() {
                    QScheme::Q8 => n * k + 4 * n,
                    QScheme::Q4 => n * k.div_ceil(2) + 4 * n,
                    QScheme::Q4Grouped(g) => n * k / 2 + 2 * n * (k / g),
                }
            }
        };
        let sum = |of: &dyn Fn(&Layer) -> Vec<&Dense>| -> usize { self.layers.iter().flat_map(of).map(dense).sum() };
        [
            sum(&|l| vec![&l.q, &l.k, &l.v]),
            sum(&|l| vec![&l.o]),
            sum(&|l| vec![&l.gate, &l.up]),
            sum(&|l| vec![&l.down]),
            dense(&self.head),
        ]
    }

    /// The kernel family and tier the first projection's decode step runs
    /// on (`f32` for the f32 path), for reports.
    pub fn decode_tier(&self) -> String {
        let Some(Dense::Q(l)) = self.layers.first().map(|l| &l.q) else {
            return "f32".into();
        };
        // the route the layer resolved when it was built
        l.route().route(1).tier().to_string()
    }
}

/// The mode a layer runs in when the projections run in `mode`: the same,
/// except that the LM head (`output`, or `token_embd` tied) keeps the activation type of
/// `mode` with its own weight's width (a q8 head runs W8A8 beside W4A8
/// projections, W8A16 beside W4A16), as a mixed file intends.
fn head_mode(prefix: &str, l: &Linear, mode: QuantLinearMode) -> QuantLinearMode {
    use QuantLinearMode::*;
    if prefix != "token_embd" && prefix != "output" {
        return mode;
    }
    match (mode, l.scheme() == QScheme::Q8) {
        (W4A8 | W8A8, true) => W8A8,
        (W4A16 | W8A16, true) => W8A16,
        (W4A8 | W8A8, false) => W4A8,
        (W4A16 | W8A16, false) => W4A16,
    }
}

fn vocab_of(shape: Option<Vec<usize>>) -> Result<usize> {
    match shape.as_deref() {
        Some(&[v, _]) if v > 0 => Ok(v),
        Some(s) => Err(Error::Tensor {
            tensor: "token_embd.weight".into(),
            reason: format!("shape {s:?} is not [vocab, hidden]"),
        }),
        None => Err(Error::Tensor {
            tensor: "token_embd.weight".into(),
            reason: "missing from the file".into(),
        }),
    }
}

fn check_shape(name: &str, found: &[usize], want: &[usize]) -> Result<()> {
    if found != want {
        return Err(Error::Tensor {
            tensor: name.into(),
            reason: format!("shape {found:?} where the model's hyper-parameters need {want:?}"),
        });
    }
    Ok(())
}

/// Rows a task of the prefill's per-row steps takes at least: the steps
/// are short (a norm, a rotation, a SwiGLU of one token), so a decode step
/// (one row) runs on the calling thread and a prompt's rows in blocks.
const ROWS_PER_TASK: usize = 8;

/// `x`'s rows of `width`, spread over the pool in blocks of
/// [`ROWS_PER_TASK`]: each row's arithmetic is its own, so the bits do not
/// depend on the split.
fn rows_of(x: &mut [f32], width: usize) -> rayon::iter::MinLen<rayon::slice::ChunksExactMut<'_, f32>> {
    x.par_chunks_exact_mut(width).with_min_len(ROWS_PER_TASK)
}

/// [`rms_norm`] of every row of `x`, the rows spread over the pool.
fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    x.par_chunks_exact(w.len())
        .zip(rows_of(out, w.len()))
        .for_each(|(x, out)| rms_norm(x, w, eps, out));
}

/// `out = x / sqrt(mean(x²) + eps) · w` per row (the mean in f64, as ggml).
fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    for (xr, or) in x.chunks_exact(w.len()).zip(out.chunks_exact_mut(w.len())) {
        let mean = xr.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / w.len() as f64;
        let scale = (1.0 / (mean + f64::from(eps)).sqrt()) as f32;
        for ((o, &v), &g) in or.iter_mut().zip(xr).zip(w) {
            *o = v * scale * g;
        }
    }
}

/// Causal grouped-query attention of the new rows `q` (positions `base..`)
/// over the cached keys and values of positions `0..=pos`, into `out`.
/// `scores` holds one row of `held.span` per head and new row (reused).
fn attention(c: &Config, base: usize, q: &[f32], held: &Held<'_>, out: &mut [f32], scores: &mut [f32]) {
    let (hd, q_dim, span) = (c.head_dim, c.heads * c.head_dim, held.span);
    let group = c.heads / c.kv_heads;
    out.par_chunks_mut(hd)
        .zip(scores.par_chunks_mut(span))
        .enumerate()
        .for_each(|(idx, (o, row))| {
            let (i, head) = (idx / c.heads, idx % c.heads);
            let qh = &q[i * q_dim + head * hd..i * q_dim + (head + 1) * hd];
            attend(hd, base + i, qh, held, head / group, o, row);
        });
}

/// One query head `qh` at position `pos` attending over positions `0..=pos`
/// of KV head `kvh`: `o = softmax(qh · K / √hd) · V`, in `scores` (at least
/// `pos + 1` long) for the weights.
fn attend(hd: usize, pos: usize, qh: &[f32], held: &Held<'_>, kvh: usize, o: &mut [f32], scores: &mut [f32]) {
    let from = kvh * held.capacity * hd;
    let (to, scores) = (from + (pos + 1) * hd, &mut scores[..=pos]);
    match held.kv {
        KvRows::F32 { k, v } => crate::attend::attend(hd, qh, &k[from..to], &v[from..to], o, scores),
        KvRows::Bf16 { k, v } => crate::attend::attend(hd, qh, &k[from..to], &v[from..to], o, scores),
    }
}

/// SwiGLU in place: `g = silu(g) · u` ([`crate::math::silu`]: the same
/// bits on every target).
fn swiglu(g: &mut [f32], u: &[f32]) {
    g.iter_mut().zip(u).for_each(|(g, u)| *g = crate::math::silu(*g) * u);
}
