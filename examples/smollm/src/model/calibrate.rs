//! Calibration (each linear's input statistics), smoothing for W8A8 and
//! the f32 model written back.

use super::*;

/// What a layer's input columns held over the calibration rows: `Σ x²`
/// (the activation-aware recipe's importance) and `max |x|` (smoothing's,
/// as SmoothQuant takes it: the largest over every calibration row).
pub(super) struct Calibration {
    pub(super) squares: Vec<f64>,
    pub(super) max: Vec<f32>,
    pub(super) rows: u64,
}

impl Calibration {
    pub(super) fn new(k: usize) -> Calibration {
        Calibration {
            squares: vec![0.0; k],
            max: vec![0.0; k],
            rows: 0,
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
    }
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
