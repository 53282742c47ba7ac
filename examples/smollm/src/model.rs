use std::ops::Range;
use std::path::Path;
use std::sync::{Mutex, PoisonError, RwLock};

use qlinear::gguf::GgufFile;
use qlinear::{Embedding, Linear, ModelFile, QScheme, QuantLinearMode, QuantizedWeight};
use rayon::prelude::*;

use crate::attend::dot;
use crate::profile::{counters, take, Clock, Counters, Phase, StepTimes};
use crate::team::{share, share_items, AbortUnlessDone, Exchange};
use crate::{Error, Meta, Result};

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

/// What a layer's input columns held over the calibration rows: `Σ x²`
/// (the activation-aware recipe's importance) and `max |x|` (smoothing's,
/// as SmoothQuant takes it: the largest over every calibration row).
struct Calibration {
    squares: Vec<f64>,
    max: Vec<f32>,
    rows: u64,
}

impl Calibration {
    fn new(k: usize) -> Calibration {
        Calibration {
            squares: vec![0.0; k],
            max: vec![0.0; k],
            rows: 0,
        }
    }

    /// One call's rows (`[m, k]`).
    fn add(&mut self, x: &[f32], k: usize) {
        for row in x.chunks_exact(k) {
            for ((s, m), &v) in self.squares.iter_mut().zip(&mut self.max).zip(row) {
                *s += f64::from(v) * f64::from(v);
                *m = m.max(v.abs());
            }
            self.rows += 1;
        }
    }
}

/// One linear layer: f32 (the reference path) or a qlinear layer.
enum Dense {
    F32 {
        w: Vec<f32>,
        n: usize,
        k: usize,
        /// What the input columns held, while calibrating.
        stats: Option<std::sync::Mutex<Calibration>>,
    },
    Q(Box<Linear>),
}

impl Dense {
    /// An f32 layer of `[n, k]` weights, not calibrating.
    fn f32(w: Vec<f32>, n: usize, k: usize) -> Dense {
        Dense::F32 { w, n, k, stats: None }
    }

    fn n(&self) -> usize {
        match self {
            Dense::F32 { n, .. } => *n,
            Dense::Q(l) => l.out_features(),
        }
    }

    /// The f32 weight (`[n, k]`, row major) of layer `name`.
    fn weights(&self, name: &str) -> Result<&[f32]> {
        match self {
            Dense::F32 { w, .. } => Ok(w),
            Dense::Q(_) => Err(Error::Smooth(format!(
                "{name} is quantized: smoothing needs the f32 path (a GGUF file, or an f32 one)"
            ))),
        }
    }

    /// The f32 weight to change in place (a quantized layer has none: the
    /// callers read [`Dense::weights`] first, which says so).
    fn weights_mut(&mut self) -> &mut [f32] {
        match self {
            Dense::F32 { w, .. } => w,
            Dense::Q(_) => &mut [],
        }
    }

    /// Each input column's `max |x|` over the calibration rows of layer
    /// `name`.
    fn input_max(&self, name: &str) -> Result<Vec<f32>> {
        let none = || {
            Error::Smooth(format!(
                "{name} has no calibration rows: run the f32 path over a text first"
            ))
        };
        match self {
            Dense::Q(_) => self.weights(name).map(|_| vec![]),
            Dense::F32 { stats: Some(s), .. } => {
                let c = s.lock().map_err(|_| Error::Smooth("calibration poisoned".into()))?;
                if c.rows == 0 {
                    return Err(none());
                }
                Ok(c.max.clone())
            }
            _ => Err(none()),
        }
    }

    /// `y[m, n] = x[m, k] · Wᵀ`.
    fn forward(&self, x: &[f32], m: usize, y: &mut [f32]) -> Result<()> {
        match self {
            Dense::F32 { w, n, k, stats } => {
                if let Some(stats) = stats {
                    let mut acc = stats.lock().map_err(|_| Error::Prompt("calibration poisoned".into()))?;
                    acc.add(&x[..(m * k).min(x.len())], *k);
                }
                // blocks of 16 weight rows, each read once for all m
                // activation rows (it stays in L1/L2 meanwhile)
                const ROWS: usize = 16;
                let blocks: Vec<Vec<f32>> = w
                    .par_chunks(ROWS * k)
                    .map(|wb| {
                        let rows = wb.len() / k;
                        let mut out = vec![0f32; m * rows];
                        for (i, xr) in x.chunks_exact(*k).take(m).enumerate() {
                            for (r, wr) in wb.chunks_exact(*k).enumerate() {
                                out[i * rows + r] = dot(xr, wr);
                            }
                        }
                        out
                    })
                    .collect();
                for (b, out) in blocks.iter().enumerate() {
                    let rows = out.len() / m.max(1);
                    for i in 0..m {
                        y[i * n + b * ROWS..i * n + b * ROWS + rows].copy_from_slice(&out[i * rows..(i + 1) * rows]);
                    }
                }
                Ok(())
            }
            Dense::Q(l) => Ok(l.forward(x, m, y)?),
        }
    }

    /// Outputs `rows` of one activation row `x` (`[k]`) into `y`
    /// (`[rows.len()]`), on the calling thread: the bits of the same
    /// outputs of [`Dense::forward`]. Records no calibration statistics.
    fn forward_rows(&self, x: &[f32], rows: Range<usize>, y: &mut [f32]) -> Result<()> {
        match self {
            Dense::F32 { w, k, .. } => {
                for (j, out) in rows.zip(y) {
                    *out = dot(x, &w[j * k..(j + 1) * k]);
                }
                Ok(())
            }
            Dense::Q(l) => Ok(l.forward_rows(x, 1, rows, y)?),
        }
    }
}

enum Table {
    F32(Vec<f32>),
    Q(Embedding),
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
    /// `cos`, `sin` of position `p`, pair `i`: index `p · head_dim / 2 + i`.
    rope: (Vec<f32>, Vec<f32>),
    /// What the layers are, for reports (`f32`, `q4g32 W4A8`, …).
    pub description: String,
    /// How a decode step spreads over the pool's threads.
    split: DecodeSplit,
}

impl Model {
    /// Opens `path`: a GGUF file runs the f32 path (every weight
    /// dequantized to f32), a converted qlinear file the quantized one
    /// (its layers in `mode`, or each weight's default mode), their codes
    /// copied, or with `in_place` read in place from the file's memory
    /// ([`ModelFile::open_in_place`]).
    pub fn open(path: &Path, mode: Option<QuantLinearMode>, in_place: bool) -> Result<(Model, Meta)> {
        let mut magic = [0u8; 4];
        let is_gguf = std::fs::File::open(path)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
            .is_ok()
            && qlinear::gguf::is_gguf(&magic);
        if is_gguf {
            let file = GgufFile::open(path)?;
            let meta = Meta::from_gguf(&file);
            Ok((Model::from_gguf(&file, &meta)?, meta))
        } else {
            let file = if in_place {
                ModelFile::open_in_place(path)?
            } else {
                ModelFile::open(path)?
            };
            let meta = Meta::from_converted(file.file().metadata_map())?;
            Ok((Model::from_converted(&file, &meta, mode)?, meta))
        }
    }

    /// The f32 path: a GGUF file's weights dequantized exactly.
    pub fn from_gguf(file: &GgufFile, meta: &Meta) -> Result<Model> {
        let config = Config::from_meta(meta)?;
        let tensor = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
            let info = file.tensor(name).ok_or_else(|| Error::Tensor {
                tensor: name.into(),
                reason: "missing from the file".into(),
            })?;
            check_shape(name, &info.shape(), shape)?;
            Ok(file.tensor_f32(name)?)
        };
        let dense = |name: &str, n: usize, k: usize| -> Result<Dense> {
            Ok(Dense::f32(tensor(&format!("{name}.weight"), &[n, k])?, n, k))
        };
        let vocab = vocab_of(file.tensor("token_embd.weight").map(|t| t.shape()))?;
        let embed = tensor("token_embd.weight", &[vocab, config.hidden])?;
        let head = match file.tensor("output.weight") {
            Some(_) => (dense("output", vocab, config.hidden)?, "output"),
            None => (Dense::f32(embed.clone(), vocab, config.hidden), "token_embd"),
        };
        Model::assemble(
            config,
            vocab,
            Table::F32(embed),
            head,
            "f32".into(),
            |name, shape| tensor(name, shape),
            dense,
        )
    }

    /// The quantized path: every linear of a converted file as a
    /// [`qlinear::Linear`] (in `mode`, or its weight's default), the tied
    /// embedding as the LM head; a `token_embd` kept in float is quantized
    /// to q8 for the head (the table itself stays f32 for the lookup). A
    /// projection the file keeps in float runs in f32 (a `mode` is then an
    /// error: it has none); a file with nothing quantized (as
    /// [`Model::write_f32`] writes it) is the f32 path, head included.
    pub fn from_converted(file: &ModelFile, meta: &Meta, mode: Option<QuantLinearMode>) -> Result<Model> {
        let config = Config::from_meta(meta)?;
        let quantized = file.linears();
        let linear = |prefix: &str, n: usize, k: usize| -> Result<Dense> {
            if !quantized.iter().any(|p| p == prefix) {
                // a layer the converter kept in float (or an f32 file's)
                let name = format!("{prefix}.weight");
                let Some(shape) = file.shape(&name) else {
                    return Err(Error::Tensor {
                        tensor: format!("{prefix}.qweight"),
                        reason: format!(
                            "missing, and no float {name} either: every linear weight of the model must be there"
                        ),
                    });
                };
                check_shape(&name, &shape, &[n, k])?;
                if let Some(mode) = mode {
                    return Err(Error::Tensor {
                        tensor: name,
                        reason: format!("kept in float: a mode ({mode}) applies to quantized layers only"),
                    });
                }
                return Ok(Dense::f32(file.tensor_f32(&name)?, n, k));
            }
            let mut l = file.linear(prefix)?;
            check_shape(prefix, &[l.out_features(), l.in_features()], &[n, k])?;
            if let Some(mode) = mode {
                let m = head_mode(prefix, &l, mode);
                l = l.with_mode(m)?;
            }
            Ok(Dense::Q(Box::new(l)))
        };
        let tensor = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
            let found = file.shape(name).ok_or_else(|| Error::Tensor {
                tensor: name.into(),
                reason: "missing from the file".into(),
            })?;
            check_shape(name, &found, shape)?;
            Ok(file.tensor_f32(name)?)
        };
        let embed = file.embedding("token_embd.weight")?;
        let vocab = embed.rows();
        check_shape("token_embd.weight", &[vocab, embed.dim()], &[vocab, config.hidden])?;
        if quantized.is_empty() {
            // nothing quantized: the f32 path, from a safetensors file (as
            // `Model::write_f32` writes it)
            let w = tensor("token_embd.weight", &[vocab, config.hidden])?;
            let head = match file.shape("output.weight") {
                Some(_) => (linear("output", vocab, config.hidden)?, "output"),
                None => (Dense::f32(w.clone(), vocab, config.hidden), "token_embd"),
            };
            let dense = |name: &str, n: usize, k: usize| linear(name, n, k);
            return Model::assemble(config, vocab, Table::F32(w), head, "f32".into(), tensor, dense);
        }
        // the head: `output` where the file has it, else the token table
        let head_name = if quantized.iter().any(|p| p == "output") || file.shape("output.weight").is_some() {
            "output"
        } else {
            "token_embd"
        };
        let head = if quantized.iter().any(|p| p == head_name) {
            linear(head_name, vocab, config.hidden)?
        } else {
            // kept in float beside quantized projections: q8 for the head
            let w = tensor(&format!("{head_name}.weight"), &[vocab, config.hidden])?;
            let mut l = Linear::new(
                head_name,
                QuantizedWeight::quantize(QScheme::Q8, vocab, config.hidden, &w).map_err(qlinear::Error::from)?,
                None,
            )?;
            if let Some(mode) = mode {
                let m = head_mode(head_name, &l, mode);
                l = l.with_mode(m)?;
            }
            Dense::Q(Box::new(l))
        };
        // named by the first quantized projection (a file may keep some
        // layers in float: `qlinear convert --exclude`)
        let first = quantized.iter().find(|p| p.starts_with("blk."));
        let description = match (&head, first) {
            (Dense::Q(l), Some(first)) => {
                let first = file.linear(first)?;
                let mode = mode.unwrap_or(first.mode());
                let kept = if quantized.iter().filter(|p| p.starts_with("blk.")).count() < 7 * config.layers {
                    ", some layers f32"
                } else {
                    ""
                };
                format!("{} {mode} (head {} {}{kept})", first.scheme(), l.scheme(), l.mode())
            }
            (Dense::Q(l), None) => format!("f32 (head {} {})", l.scheme(), l.mode()),
            (Dense::F32 { .. }, _) => "f32".into(),
        };
        let dense = |name: &str, n: usize, k: usize| linear(name, n, k);
        Model::assemble(
            config,
            vocab,
            Table::Q(embed),
            (head, head_name),
            description,
            tensor,
            dense,
        )
    }

    fn assemble(
        mut config: Config,
        vocab: usize,
        embed: Table,
        (head, head_name): (Dense, &'static str),
        description: String,
        tensor: impl Fn(&str, &[usize]) -> Result<Vec<f32>>,
        dense: impl Fn(&str, usize, usize) -> Result<Dense>,
    ) -> Result<Model> {
        config.vocab = vocab;
        let (h, q_dim, kv_dim) = (
            config.hidden,
            config.heads * config.head_dim,
            config.kv_heads * config.head_dim,
        );
        let mut layers = Vec::with_capacity(config.layers);
        for b in 0..config.layers {
            let p = |n: &str| format!("blk.{b}.{n}");
            layers.push(Layer {
                attn_norm: tensor(&p("attn_norm.weight"), &[h])?,
                q: dense(&p("attn_q"), q_dim, h)?,
                k: dense(&p("attn_k"), kv_dim, h)?,
                v: dense(&p("attn_v"), kv_dim, h)?,
                o: dense(&p("attn_output"), h, q_dim)?,
                ffn_norm: tensor(&p("ffn_norm.weight"), &[h])?,
                gate: dense(&p("ffn_gate"), config.ffn, h)?,
                up: dense(&p("ffn_up"), config.ffn, h)?,
                down: dense(&p("ffn_down"), h, config.ffn)?,
            });
        }
        let norm = tensor("output_norm.weight", &[h])?;
        let rope = rope_table(&config);
        Ok(Model {
            config,
            embed,
            layers,
            norm,
            head,
            head_name,
            rope,
            description,
            split: DecodeSplit::default(),
        })
    }

    /// How decode steps spread over the threads from now on
    /// ([`DecodeSplit::Team`] unless set).
    pub fn set_decode_split(&mut self, split: DecodeSplit) {
        self.split = split;
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
            k: k_cache,
            v: v_cache,
            scratch: s,
            ..
        } = cache;
        s.resize(m, base + m, c, if all { m } else { 1 });
        for (row, &t) in s.x.chunks_exact_mut(h).zip(tokens) {
            self.embed_row(t, row)?;
        }
        for (l, layer) in self.layers.iter().enumerate() {
            rms_norm_rows(&s.x, &layer.attn_norm, c.eps, &mut s.h);
            layer.q.forward(&s.h, m, &mut s.q)?;
            layer.k.forward(&s.h, m, &mut s.k)?;
            layer.v.forward(&s.h, m, &mut s.v)?;
            rows_of(&mut s.q, q_dim)
                .zip(rows_of(&mut s.k, kv_dim))
                .enumerate()
                .for_each(|(i, (q, k))| {
                    self.rotate(q, 0..q_dim, base + i);
                    self.rotate(k, 0..kv_dim, base + i);
                });
            let kc = k_cache[l].get_mut().unwrap_or_else(PoisonError::into_inner);
            let vc = v_cache[l].get_mut().unwrap_or_else(PoisonError::into_inner);
            for (i, (kr, vr)) in s.k.chunks_exact(kv_dim).zip(s.v.chunks_exact(kv_dim)).enumerate() {
                store_kv(kc, kr, 0..kv_dim, hd, cache.capacity, base + i);
                store_kv(vc, vr, 0..kv_dim, hd, cache.capacity, base + i);
            }
            let held = Held {
                k: kc,
                v: vc,
                capacity: cache.capacity,
                span: base + m,
            };
            attention(c, base, &s.q, &held, &mut s.att, &mut s.scores);
            layer.o.forward(&s.att, m, &mut s.h)?;
            s.x.iter_mut().zip(&s.h).for_each(|(x, o)| *x += o);
            rms_norm_rows(&s.x, &layer.ffn_norm, c.eps, &mut s.h);
            layer.gate.forward(&s.h, m, &mut s.g)?;
            layer.up.forward(&s.h, m, &mut s.u)?;
            rows_of(&mut s.g, c.ffn)
                .zip(s.u.par_chunks(c.ffn).with_min_len(ROWS_PER_TASK))
                .for_each(|(g, u)| swiglu(g, u));
            layer.down.forward(&s.g, m, &mut s.h)?;
            s.x.iter_mut().zip(&s.h).for_each(|(x, d)| *x += d);
        }
        cache.len += m;
        let rows = if all { m } else { 1 };
        let from = (m - rows) * h;
        rms_norm(&s.x[from..], &self.norm, c.eps, &mut s.h[..rows * h]);
        self.head.forward(&s.h[..rows * h], rows, &mut s.logits)?;
        Ok(&s.logits)
    }

    /// One decode step, token `token` at position `cache.len()`, run by
    /// every thread of the current rayon pool as a team ([`DecodeSplit::Team`],
    /// `team.rs`): each thread embeds the token and keeps its own copy of
    /// the residual stream (the norms run on every thread alike), computes
    /// its query heads' rows of Q and its share of the K and V rows (writing
    /// them into the cache), attends for its query heads, and takes a share
    /// of each other layer's output features; the shares are gathered
    /// between layers. Every output is computed by one thread with the
    /// arithmetic of [`Model::forward`]'s own path, so the logits are
    /// bit-identical to it. On a profiled cache each thread charges its
    /// time to the step's phases as it passes their boundaries
    /// ([`crate::profile`]). The caller has checked the token and the room.
    fn step_team<'c>(&self, cache: &'c mut KvCache, token: u32) -> Result<&'c [f32]> {
        let c = &self.config;
        let threads = rayon::current_num_threads();
        let (h, hd, pos, capacity) = (c.hidden, c.head_dim, cache.len, cache.capacity);
        let (kv_dim, group) = (c.kv_heads * hd, c.heads / c.kv_heads);
        if cache.team.len() != threads {
            cache.team = (0..threads).map(|_| Mutex::new(Scratch::default())).collect();
            cache.exchange = Exchange::new(threads);
        }
        if let Some(p) = cache.profile.as_mut().filter(|p| p.len() != threads) {
            // a new team size starts the count again
            *p = counters(threads);
            cache.profiled_steps = 0;
        }
        cache.exchange.reset();
        for local in &mut cache.team {
            local
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .resize(1, pos + 1, c, 1);
        }
        let KvCache {
            k: k_cache,
            v: v_cache,
            team,
            exchange,
            profile,
            ..
        } = &*cache;
        let step = |t: usize| -> Result<()> {
            let mut clock = Clock::new(profile.as_ref().map(|p| &p[t]));
            let running = AbortUnlessDone::new(exchange.barrier());
            let mut local = team[t].lock().unwrap_or_else(PoisonError::into_inner);
            let s = &mut *local;
            let mut round = 0;
            let heads = share_items(c.heads, t, threads);
            let q_rows = heads.start * hd..heads.end * hd;
            let kv_rows = share(kv_dim, t, threads);
            let h_rows = share(h, t, threads);
            let f_rows = share(c.ffn, t, threads);
            self.embed_row(token, &mut s.x)?;
            for (l, layer) in self.layers.iter().enumerate() {
                rms_norm(&s.x, &layer.attn_norm, c.eps, &mut s.h[..h]);
                clock.lap(Phase::Other);
                layer
                    .q
                    .forward_rows(&s.h[..h], q_rows.clone(), &mut s.q[q_rows.clone()])?;
                layer
                    .k
                    .forward_rows(&s.h[..h], kv_rows.clone(), &mut s.k[kv_rows.clone()])?;
                layer
                    .v
                    .forward_rows(&s.h[..h], kv_rows.clone(), &mut s.v[kv_rows.clone()])?;
                clock.lap(Phase::Projections);
                self.rotate(&mut s.q, q_rows.clone(), pos);
                self.rotate(&mut s.k, kv_rows.clone(), pos);
                {
                    let mut kc = k_cache[l].write().unwrap_or_else(PoisonError::into_inner);
                    store_kv(&mut kc, &s.k, kv_rows.clone(), hd, capacity, pos);
                    drop(kc);
                    let mut vc = v_cache[l].write().unwrap_or_else(PoisonError::into_inner);
                    store_kv(&mut vc, &s.v, kv_rows.clone(), hd, capacity, pos);
                }
                clock.lap(Phase::Other);
                // every thread's keys and values of this position are held
                exchange.barrier().wait()?;
                clock.lap(Phase::Waits);
                {
                    let kc = k_cache[l].read().unwrap_or_else(PoisonError::into_inner);
                    let vc = v_cache[l].read().unwrap_or_else(PoisonError::into_inner);
                    let held = Held {
                        k: &kc,
                        v: &vc,
                        capacity,
                        span: pos + 1,
                    };
                    for head in heads.clone() {
                        let (qh, o) = (&s.q[head * hd..(head + 1) * hd], &mut s.att[head * hd..(head + 1) * hd]);
                        attend(hd, pos, qh, &held, head / group, o, &mut s.scores);
                    }
                }
                clock.lap(Phase::Attention);
                exchange.all_gather(t, &mut round, q_rows.clone(), &mut s.att)?;
                clock.lap(Phase::Waits);
                layer.o.forward_rows(&s.att, h_rows.clone(), &mut s.o[h_rows.clone()])?;
                clock.lap(Phase::Projections);
                exchange.all_gather(t, &mut round, h_rows.clone(), &mut s.o)?;
                clock.lap(Phase::Waits);
                s.x.iter_mut().zip(&s.o).for_each(|(x, o)| *x += o);
                rms_norm(&s.x, &layer.ffn_norm, c.eps, &mut s.h[..h]);
                clock.lap(Phase::Other);
                layer
                    .gate
                    .forward_rows(&s.h[..h], f_rows.clone(), &mut s.g[f_rows.clone()])?;
                layer
                    .up
                    .forward_rows(&s.h[..h], f_rows.clone(), &mut s.u[f_rows.clone()])?;
                clock.lap(Phase::Projections);
                swiglu(&mut s.g[f_rows.clone()], &s.u[f_rows.clone()]);
                clock.lap(Phase::Other);
                exchange.all_gather(t, &mut round, f_rows.clone(), &mut s.g)?;
                clock.lap(Phase::Waits);
                layer
                    .down
                    .forward_rows(&s.g, h_rows.clone(), &mut s.o[h_rows.clone()])?;
                clock.lap(Phase::Projections);
                exchange.all_gather(t, &mut round, h_rows.clone(), &mut s.o)?;
                clock.lap(Phase::Waits);
                s.x.iter_mut().zip(&s.o).for_each(|(x, d)| *x += d);
            }
            rms_norm(&s.x, &self.norm, c.eps, &mut s.h[..h]);
            clock.lap(Phase::Other);
            let v_rows = share(c.vocab, t, threads);
            self.head
                .forward_rows(&s.h[..h], v_rows.clone(), &mut s.logits[v_rows])?;
            clock.lap(Phase::Head);
            running.done();
            Ok(())
        };
        let results = rayon::broadcast(|ctx| {
            if ctx.num_threads() == threads {
                step(ctx.index())
            } else {
                // not reachable: the pool asked is the pool run on
                exchange.barrier().abort();
                Err(Error::TeamAborted)
            }
        });
        // the first thread's own error, not the others' report of it
        if let Some(e) = results
            .iter()
            .position(|r| matches!(r, Err(e) if !matches!(e, Error::TeamAborted)))
        {
            return Err(results
                .into_iter()
                .nth(e)
                .and_then(Result::err)
                .unwrap_or(Error::TeamAborted));
        }
        results.into_iter().collect::<Result<Vec<()>>>()?;
        let KvCache { team, scratch, .. } = cache;
        scratch.logits.resize(c.vocab, 0.0);
        for (t, local) in team.iter_mut().enumerate() {
            let rows = share(c.vocab, t, threads);
            let local = local.get_mut().unwrap_or_else(PoisonError::into_inner);
            scratch.logits[rows.clone()].copy_from_slice(&local.logits[rows]);
        }
        cache.len += 1;
        if cache.profile.is_some() {
            cache.profiled_steps += 1;
        }
        Ok(&cache.scratch.logits)
    }

    /// Token `t`'s embedding row into `row` (`[hidden]`).
    fn embed_row(&self, t: u32, row: &mut [f32]) -> Result<()> {
        let h = self.config.hidden;
        match &self.embed {
            Table::F32(e) => row.copy_from_slice(&e[t as usize * h..(t as usize + 1) * h]),
            Table::Q(e) => e.row(t as usize, row)?,
        }
        Ok(())
    }

    /// Whether the f32 layers are recording calibration statistics (a team
    /// step records none: its calls see a share of each layer).
    fn calibrating(&self) -> bool {
        matches!(self.head, Dense::F32 { stats: Some(_), .. })
    }

    /// RoPE as llama.cpp applies it to GGUF Llama weights ("normal" mode:
    /// the pairs are adjacent, `(x[2i], x[2i+1])`, in every head) on the
    /// features `cols` (even bounds) of one position's heads `x`.
    fn rotate(&self, x: &mut [f32], cols: Range<usize>, pos: usize) {
        let (hd, half) = (self.config.head_dim, self.config.head_dim / 2);
        let (cos, sin) = (
            &self.rope.0[pos * half..(pos + 1) * half],
            &self.rope.1[pos * half..(pos + 1) * half],
        );
        for j in cols.step_by(2) {
            let i = (j % hd) / 2;
            let (a, b) = (x[j], x[j + 1]);
            x[j] = a * cos[i] - b * sin[i];
            x[j + 1] = a * sin[i] + b * cos[i];
        }
    }

    /// The head layer's output features (the vocabulary).
    pub fn vocab(&self) -> usize {
        self.head.n()
    }

    /// The bytes every decode step reads from the weights: every linear
    /// layer's (codes and scales, or f32) and one embedding row.
    pub fn weight_bytes_per_token(&self) -> usize {
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
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down]
                    .into_iter()
                    .map(dense)
                    .sum::<usize>()
            })
            .sum();
        layers + dense(&self.head) + self.config.hidden * 4
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

    /// Every linear layer by its weight's prefix, the head last.
    fn linears_mut(&mut self) -> Vec<(String, &mut Dense)> {
        let mut out = vec![];
        for (b, l) in self.layers.iter_mut().enumerate() {
            for (name, d) in [
                ("attn_q", &mut l.q),
                ("attn_k", &mut l.k),
                ("attn_v", &mut l.v),
                ("attn_output", &mut l.o),
                ("ffn_gate", &mut l.gate),
                ("ffn_up", &mut l.up),
                ("ffn_down", &mut l.down),
            ] {
                out.push((format!("blk.{b}.{name}"), d));
            }
        }
        out.push((self.head_name.into(), &mut self.head));
        out
    }

    /// From now on the f32 layers record `Σ x²` of each input column (the
    /// activation-aware recipe's importance, `docs/NUMERICS.md` §3.8).
    pub fn start_calibration(&mut self) {
        for (_, d) in self.linears_mut() {
            if let Dense::F32 { k, stats, .. } = d {
                *stats = Some(std::sync::Mutex::new(Calibration::new(*k)));
            }
        }
    }

    /// Smooths every block's projections for W8A8 ([`crate::smooth`]): each
    /// group of layers reading the same activations gets factors from the
    /// calibration's `max |x|` and its weights (`alpha` between 0 and 1;
    /// SmoothQuant's 0.5 moves half the outliers' range into the weights),
    /// divided out of the norm weight, `ffn_up`'s rows or `attn_v`'s rows
    /// that produce those activations. In exact arithmetic the model
    /// computes the same function; in f32 it differs by rounding. The
    /// calibration statistics describe the model before, so they are
    /// dropped.
    ///
    /// Errors: a layer that is not f32 or was not calibrated
    /// ([`Model::start_calibration`] and a forward pass first), an `alpha`
    /// outside `[0, 1]`, or a factor that is not finite and positive.
    pub fn smooth(&mut self, alpha: f32) -> Result<()> {
        use crate::smooth::{divide, divide_rows, factors, scale_columns, shared_over_heads};
        let (heads, kv_heads, head_dim) = (self.config.heads, self.config.kv_heads, self.config.head_dim);
        for (b, l) in self.layers.iter_mut().enumerate() {
            let name = |n: &str| format!("blk.{b}.{n}");
            // the attention's projections read attn_norm's output
            let act = l.q.input_max(&name("attn_q"))?;
            let s = factors(
                &name("attn_q, attn_k, attn_v"),
                &act,
                &[
                    l.q.weights(&name("attn_q"))?,
                    l.k.weights(&name("attn_k"))?,
                    l.v.weights(&name("attn_v"))?,
                ],
                alpha,
            )?;
            divide(&mut l.attn_norm, &s);
            scale_columns(l.q.weights_mut(), &s);
            scale_columns(l.k.weights_mut(), &s);
            scale_columns(l.v.weights_mut(), &s);
            // the output projection reads the heads' mix of V's rows, shared
            // by the query heads of one KV head
            let act = l.o.input_max(&name("attn_output"))?;
            let s = factors(&name("attn_output"), &act, &[l.o.weights(&name("attn_output"))?], alpha)?;
            let (s_v, s_o) = shared_over_heads(&s, heads, kv_heads, head_dim);
            divide_rows(l.v.weights_mut(), &s_v);
            scale_columns(l.o.weights_mut(), &s_o);
            // the MLP's gate and up read ffn_norm's output
            let act = l.gate.input_max(&name("ffn_gate"))?;
            let s = factors(
                &name("ffn_gate, ffn_up"),
                &act,
                &[l.gate.weights(&name("ffn_gate"))?, l.up.weights(&name("ffn_up"))?],
                alpha,
            )?;
            divide(&mut l.ffn_norm, &s);
            scale_columns(l.gate.weights_mut(), &s);
            scale_columns(l.up.weights_mut(), &s);
            // down reads silu(gate) ⊙ up, linear in up's rows
            let act = l.down.input_max(&name("ffn_down"))?;
            let s = factors(&name("ffn_down"), &act, &[l.down.weights(&name("ffn_down"))?], alpha)?;
            divide_rows(l.up.weights_mut(), &s);
            scale_columns(l.down.weights_mut(), &s);
        }
        for (_, d) in self.linears_mut() {
            if let Dense::F32 { stats, .. } = d {
                *stats = None;
            }
        }
        self.description = format!("f32, smoothed (alpha {alpha})");
        Ok(())
    }

    /// Writes the f32 model as a safetensors file that `qlinear convert`
    /// takes as its input: every tensor under its GGUF name in f32, and
    /// `meta`'s keys as `gguf.KEY` entries (the tokenizer, the template and
    /// the hyper-parameters travel with it, as from a GGUF input).
    ///
    /// Errors: a layer that is not f32 (the model was opened from a
    /// converted file), or the file cannot be written.
    pub fn write_f32(&self, path: &Path, meta: &Meta) -> Result<()> {
        use qlinear::format::{Dtype, OutputTensor};
        let Table::F32(embed) = &self.embed else {
            return Err(Error::Tensor {
                tensor: "token_embd.weight".into(),
                reason: "quantized: only the f32 path can be written as f32".into(),
            });
        };
        let raw = |name: String, shape: Vec<usize>, v: &[f32]| OutputTensor::Raw {
            name,
            dtype: Dtype::F32,
            shape,
            data: std::borrow::Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        };
        let h = self.config.hidden;
        let mut tensors = vec![
            raw("token_embd.weight".into(), vec![self.config.vocab, h], embed),
            raw("output_norm.weight".into(), vec![h], &self.norm),
        ];
        if self.head_name == "output" {
            let w = self.head.weights("output")?;
            tensors.push(raw("output.weight".into(), vec![self.config.vocab, h], w));
        }
        for (b, l) in self.layers.iter().enumerate() {
            tensors.push(raw(format!("blk.{b}.attn_norm.weight"), vec![h], &l.attn_norm));
            tensors.push(raw(format!("blk.{b}.ffn_norm.weight"), vec![h], &l.ffn_norm));
            for (n, d) in [
                ("attn_q", &l.q),
                ("attn_k", &l.k),
                ("attn_v", &l.v),
                ("attn_output", &l.o),
                ("ffn_gate", &l.gate),
                ("ffn_up", &l.up),
                ("ffn_down", &l.down),
            ] {
                let name = format!("blk.{b}.{n}");
                let w = d.weights(&name)?;
                tensors.push(raw(format!("{name}.weight"), vec![d.n(), w.len() / d.n().max(1)], w));
            }
        }
        qlinear::format::write_file(path, &meta.to_converted(), tensors).map_err(qlinear::Error::from)?;
        Ok(())
    }

    /// The mean `x²` of each input column of every f32 layer seen while
    /// calibrating, by prefix (`blk.0.attn_q`, …, `token_embd`).
    pub fn importance(&mut self) -> Vec<(String, Vec<f32>)> {
        self.linears_mut()
            .into_iter()
            .filter_map(|(p, d)| match d {
                Dense::F32 { stats: Some(s), .. } => {
                    let c = &*s.get_mut().ok()?;
                    Some((p, c.squares.iter().map(|v| (v / c.rows.max(1) as f64) as f32).collect()))
                }
                _ => None,
            })
            .collect()
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

/// `cos`, `sin` of `pos · base^(−2i / head_dim)` for every position of the
/// context, in f64 then rounded once to f32.
fn rope_table(c: &Config) -> (Vec<f32>, Vec<f32>) {
    let half = c.head_dim / 2;
    let mut cos = Vec::with_capacity(c.context * half);
    let mut sin = Vec::with_capacity(c.context * half);
    for p in 0..c.context {
        for i in 0..half {
            let theta = p as f64 * f64::from(c.rope_base).powf(-2.0 * i as f64 / c.head_dim as f64);
            cos.push(theta.cos() as f32);
            sin.push(theta.sin() as f32);
        }
    }
    (cos, sin)
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

/// One layer's cached keys and values, head-major (`[kv_head, capacity,
/// head_dim]`): a head's keys are read as one sequential run, which the
/// hardware prefetchers follow (past a few hundred positions the cache no
/// longer fits in L2). Positions `0..span` are held.
struct Held<'a> {
    k: &'a [f32],
    v: &'a [f32],
    capacity: usize,
    span: usize,
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
    let to = from + (pos + 1) * hd;
    crate::attend::attend(hd, qh, &held.k[from..to], &held.v[from..to], o, &mut scores[..=pos]);
}

/// Writes features `cols` of one position's keys or values `row`
/// (`[kv_heads · head_dim]`) at position `pos` of a head-major layer cache
/// (`[kv_head, capacity, head_dim]`).
fn store_kv(cached: &mut [f32], row: &[f32], cols: Range<usize>, hd: usize, capacity: usize, pos: usize) {
    let mut j = cols.start;
    while j < cols.end {
        let (head, d) = (j / hd, j % hd);
        let run = (hd - d).min(cols.end - j);
        let at = (head * capacity + pos) * hd + d;
        cached[at..at + run].copy_from_slice(&row[j..j + run]);
        j += run;
    }
}

/// SwiGLU in place: `g = silu(g) · u`.
fn swiglu(g: &mut [f32], u: &[f32]) {
    g.iter_mut().zip(u).for_each(|(g, u)| *g = *g / (1.0 + (-*g).exp()) * u);
}

/// The keys and values of every position so far, per layer, laid out for
/// the decode step (head-major, `[kv_head, capacity, head_dim]` a layer:
/// each head's positions one sequential run), with the forward pass's work
/// buffers (grown once, reused by every call).
pub struct KvCache {
    /// Per layer; locked only by a team step, whose threads each write
    /// their share of a position's keys and values before all read them.
    k: Vec<RwLock<Vec<f32>>>,
    v: Vec<RwLock<Vec<f32>>>,
    len: usize,
    capacity: usize,
    scratch: Scratch,
    /// A team step's buffers, one set per thread.
    team: Vec<Mutex<Scratch>>,
    /// A team step's meeting place.
    exchange: Exchange,
    /// Per thread of a profiled team step, its phases' nanoseconds
    /// ([`KvCache::profile_steps`]).
    profile: Option<Vec<Counters>>,
    /// Team steps profiled since the counters were last taken.
    profiled_steps: u64,
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
struct Scratch {
    x: Vec<f32>,
    h: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    o: Vec<f32>,
    g: Vec<f32>,
    u: Vec<f32>,
    scores: Vec<f32>,
    logits: Vec<f32>,
}

impl Scratch {
    /// Buffers for `m` new rows over `span` positions and `rows` rows of
    /// logits (grown, never shrunk: after the first calls a decode step
    /// allocates nothing).
    fn resize(&mut self, m: usize, span: usize, c: &Config, rows: usize) {
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
