//! Calibration (each linear's input statistics), smoothing for W8A8 and
//! the f32 model written back.

use super::*;
use crate::rotate::{HADAMARD, ROTATION_KEY};

/// What a layer's input columns held over the calibration rows: `Σ x²`
/// (the activation-aware recipe's importance), `max |x|` (smoothing's, as
/// SmoothQuant takes it: the largest over every calibration row) and,
/// when asked for, `Σ x xᵀ` (GPTQ's hessian, `docs/NUMERICS.md` §3.9).
pub(super) struct Calibration {
    pub(super) squares: Vec<f64>,
    pub(super) max: Vec<f32>,
    pub(super) rows: u64,
    /// `Σ x xᵀ`, `[k, k]` row major, its upper triangle (`i <= j`) kept.
    pub(super) gram: Option<Vec<f64>>,
}

impl Calibration {
    pub(super) fn new(k: usize, gram: bool) -> Calibration {
        Calibration {
            squares: vec![0.0; k],
            max: vec![0.0; k],
            rows: 0,
            gram: gram.then(|| vec![0.0; k * k]),
        }
    }

    /// One call's rows (`[m, k]`).
    pub(super) fn add(&mut self, x: &[f32], k: usize) {
        for row in x.chunks_exact(k) {
            for ((s, m), &v) in self.squares.iter_mut().zip(&mut self.max).zip(row) {
                *s += f64::from(v) * f64::from(v);
                *m = m.max(v.abs());
            }
            self.rows += 1;
        }
        if let Some(g) = &mut self.gram {
            add_gram(g, x, k);
        }
    }
}

/// `g += xᵀ x` over the rows of `x` (`[m, k]`), upper triangle: the rows'
/// columns transposed once, so that each entry is one dot product of two
/// contiguous columns, in f32 over this call's rows (eight partial sums,
/// which the compiler can keep in vector lanes) and added to the f64 total.
/// A statistic, so the order of its sums is free; rows of `g` in parallel.
fn add_gram(g: &mut [f64], x: &[f32], k: usize) {
    let m = x.len() / k;
    if m == 0 {
        return;
    }
    let mut xt = vec![0f32; k * m];
    for (t, row) in x.chunks_exact(k).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            xt[j * m + t] = v;
        }
    }
    let dot = |a: &[f32], b: &[f32]| {
        let mut p = [0f32; 8];
        let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
        let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
        for (x, y) in ac.zip(bc) {
            for l in 0..8 {
                p[l] += x[l] * y[l];
            }
        }
        p.iter().sum::<f32>() + tail
    };
    g.par_chunks_mut(k).enumerate().for_each(|(i, row)| {
        let xi = &xt[i * m..(i + 1) * m];
        for (j, v) in row.iter_mut().enumerate().skip(i) {
            *v += f64::from(dot(xi, &xt[j * m..(j + 1) * m]));
        }
    });
}

impl Model {
    /// Whether the f32 layers are recording calibration statistics (a team
    /// step records none: its calls see a share of each layer).
    pub(super) fn calibrating(&self) -> bool {
        matches!(self.head, Dense::F32 { stats: Some(_), .. })
    }

    /// Every linear layer by its weight's prefix, the head last.
    pub(super) fn linears_mut(&mut self) -> Vec<(String, &mut Dense)> {
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
    /// activation-aware recipe's importance, `docs/NUMERICS.md` §3.8) and
    /// `max |x|` (smoothing's); with `hessian`, also `Σ x xᵀ` (GPTQ's,
    /// §3.9), once per distinct input: `attn_q`'s for `attn_k` and
    /// `attn_v`, `ffn_gate`'s for `ffn_up` ([`Model::hessians`]).
    pub fn start_calibration(&mut self, hessian: bool) {
        for (name, d) in self.linears_mut() {
            let shared = ["attn_k", "attn_v", "ffn_up"].iter().any(|s| name.ends_with(s));
            if let Dense::F32 { k, stats, .. } = d {
                *stats = Some(std::sync::Mutex::new(Calibration::new(*k, hessian && !shared)));
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
        if self.is_rotated() {
            // the norms' weights act before the rotation, the weights'
            // columns after it: a factor divided out of one is not the
            // factor multiplied into the other
            return Err(Error::Rotation(
                "the model is rotated: smoothing divides factors out of the norm weights, \
                 which act before the rotation; smooth the model first, then rotate it"
                    .into(),
            ));
        }
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

    /// Rotates the model for W8A8 ([`crate::rotate`]): every projection's
    /// and the LM head's weight rows, and the token table's rows, are
    /// multiplied by the Hadamard matrix of their width (`W ← W H`), and
    /// from now on the model rotates each projection's input the same way
    /// (`x ← x H`; the table's rows back by `Hᵀ`). In exact arithmetic the
    /// model computes the same function; in f32 it differs by rounding.
    /// [`Model::write_f32`] then writes it with the key that says so.
    ///
    /// Errors ([`Error::Rotation`]): a model rotated already, a layer or
    /// table that is not f32 (opened from a converted file), a width with
    /// no Hadamard matrix here. Nothing is changed on an error.
    pub fn rotate_weights(&mut self) -> Result<()> {
        if self.is_rotated() {
            return Err(Error::Rotation("the model is rotated already".into()));
        }
        let rotation = Rotation::new(&self.config)?;
        let not_f32 = |name: &str| {
            Error::Rotation(format!(
                "{name} is quantized: rotation needs the f32 path (a GGUF file, or an f32 one)"
            ))
        };
        if !matches!(self.embed, Table::F32(_)) {
            return Err(not_f32("token_embd.weight"));
        }
        for (name, d) in self.linears_mut() {
            d.weights(&name).map_err(|_| not_f32(&name))?;
        }
        for (name, d) in self.linears_mut() {
            // ffn_down reads the MLP's width, every other layer the hidden one
            let h = if name.ends_with("ffn_down") {
                &rotation.ffn
            } else {
                &rotation.hidden
            };
            h.apply(d.weights_mut());
        }
        if let Table::F32(e) = &mut self.embed {
            rotation.hidden.apply(e);
        }
        self.rotation = Some(rotation);
        self.description.push_str(", rotated");
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
        let mut entries = meta.to_converted();
        let key = format!("gguf.{ROTATION_KEY}");
        // the key says what the weights are, whatever `meta` said
        entries.remove(&key);
        if self.is_rotated() {
            entries.insert(key, serde_json::Value::from(HADAMARD).to_string());
        }
        qlinear::format::write_file(path, &entries, tensors).map_err(qlinear::Error::from)?;
        Ok(())
    }

    /// The mean `x xᵀ` of the inputs of every f32 layer seen while
    /// calibrating with the hessian ([`Model::start_calibration`]), by
    /// prefix, `[k, k]` row major and symmetric: GPTQ's hessian
    /// (`docs/NUMERICS.md` §3.9). `attn_k` and `attn_v` read what `attn_q`
    /// reads, `ffn_up` what `ffn_gate` reads, so they get the same matrix.
    /// Empty when no hessian was recorded.
    pub fn hessians(&mut self) -> Vec<(String, Vec<f32>)> {
        let mut own: Vec<(String, Vec<f32>)> = self
            .linears_mut()
            .into_iter()
            .filter_map(|(p, d)| match d {
                Dense::F32 { stats: Some(s), k, .. } => {
                    let k = *k;
                    let c = &*s.get_mut().ok()?;
                    let g = c.gram.as_ref()?;
                    let rows = c.rows.max(1) as f64;
                    let mut h = vec![0f32; k * k];
                    for i in 0..k {
                        for j in i..k {
                            let v = (g[i * k + j] / rows) as f32;
                            h[i * k + j] = v;
                            h[j * k + i] = v;
                        }
                    }
                    Some((p, h))
                }
                _ => None,
            })
            .collect();
        let mut shared = vec![];
        for (p, h) in &own {
            for (from, to) in [
                ("attn_q", ["attn_k", "attn_v"].as_slice()),
                ("ffn_gate", ["ffn_up"].as_slice()),
            ] {
                if let Some(stem) = p.strip_suffix(from) {
                    shared.extend(to.iter().map(|t| (format!("{stem}{t}"), h.clone())));
                }
            }
        }
        own.extend(shared);
        own
    }

    /// Writes [`Model::importance`] to `path` as `P.importance` (`[k]` f32)
    /// per linear, for `qlinear convert --recipe activation-aware
    /// --importance`; returns how many. Errors: the file cannot be written.
    pub fn write_importance(&mut self, path: &Path) -> Result<usize> {
        write_statistics(self.importance(), "importance", false, path)
    }

    /// Writes [`Model::hessians`] to `path` as `P.hessian` (`[k, k]` f32)
    /// per linear, for `qlinear convert --recipe gptq --hessian`; returns
    /// how many. Errors: the file cannot be written.
    pub fn write_hessians(&mut self, path: &Path) -> Result<usize> {
        write_statistics(self.hessians(), "hessian", true, path)
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

/// `P.<suffix>` f32 tensors, `[k]` or (`square`) `[k, k]`, written to `path`.
fn write_statistics(stats: Vec<(String, Vec<f32>)>, suffix: &str, square: bool, path: &Path) -> Result<usize> {
    let count = stats.len();
    let tensors = stats
        .into_iter()
        .map(|(p, v)| {
            let shape = if square {
                vec![v.len().isqrt(), v.len().isqrt()]
            } else {
                vec![v.len()]
            };
            qlinear::format::OutputTensor::Raw {
                name: format!("{p}.{suffix}"),
                dtype: qlinear::format::Dtype::F32,
                shape,
                data: std::borrow::Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            }
        })
        .collect();
    qlinear::format::write_file(path, &Default::default(), tensors).map_err(qlinear::Error::from)?;
    Ok(count)
}
