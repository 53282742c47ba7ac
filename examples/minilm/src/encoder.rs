//! A BERT encoder (all-MiniLM-L6-v2's shape: 6 layers, hidden 384, 12 heads,
//! GELU feed-forward of 1536, post-LayerNorm), mean pooling and L2
//! normalisation. Every `Linear` is either a plain f32 matrix (the baseline)
//! or a `qlinear::Linear`.

use std::cell::RefCell;

use qlinear::{Linear, ModelFile, QuantLinearMode};

/// Errors of loading or running the encoder.
pub type Result<T> = std::result::Result<T, String>;

/// One linear layer: f32 (the baseline) or quantized through qlinear.
pub enum Dense {
    /// `y = x · Wᵀ + b`, W `[n, k]` row-major.
    F32 {
        w: Vec<f32>,
        b: Vec<f32>,
        n: usize,
        k: usize,
        /// The layer's prefix (`encoder.layer.0.attention.self.query`).
        name: String,
        /// Σ x² per input column (f64) and the rows seen: the calibration
        /// statistics behind the activation-aware recipe's importance.
        sumsq: RefCell<(Vec<f64>, u64)>,
    },
    /// A qlinear layer.
    Q(Linear),
}

impl Dense {
    fn out_features(&self) -> usize {
        match self {
            Dense::F32 { n, .. } => *n,
            Dense::Q(l) => l.out_features(),
        }
    }

    /// `x` `[m, k]` → `[m, n]`.
    fn forward(&self, x: &[f32], m: usize) -> Result<Vec<f32>> {
        let mut y = vec![0f32; m * self.out_features()];
        match self {
            Dense::F32 { w, b, n, k, sumsq, .. } => {
                let mut acc = sumsq.borrow_mut();
                for xr in x.chunks_exact(*k) {
                    acc.0
                        .iter_mut()
                        .zip(xr)
                        .for_each(|(s, &v)| *s += f64::from(v) * f64::from(v));
                    acc.1 += 1;
                }
                for (xr, yr) in x.chunks_exact(*k).zip(y.chunks_exact_mut(*n)) {
                    for ((wr, yv), bv) in w.chunks_exact(*k).zip(yr.iter_mut()).zip(b) {
                        *yv = dot(xr, wr) + bv;
                    }
                }
            }
            Dense::Q(l) => l.forward(x, m, &mut y).map_err(|e| e.to_string())?,
        }
        Ok(y)
    }
}

/// f32 dot product in 8 lanes (vectorises; the order is fixed).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac.remainder().iter().zip(bc.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            lanes[l] += x[l] * y[l];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

struct LayerNorm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

impl LayerNorm {
    /// In place over rows of `gamma.len()`, eps 1e-12 (the model's config);
    /// statistics in f64.
    fn apply(&self, x: &mut [f32]) {
        let h = self.gamma.len();
        for row in x.chunks_exact_mut(h) {
            let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / h as f64;
            let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / h as f64;
            let inv = 1.0 / (var + 1e-12).sqrt();
            for ((v, g), b) in row.iter_mut().zip(&self.gamma).zip(&self.beta) {
                *v = ((f64::from(*v) - mean) * inv) as f32 * g + b;
            }
        }
    }
}

struct Layer {
    query: Dense,
    key: Dense,
    value: Dense,
    attn_out: Dense,
    attn_norm: LayerNorm,
    inter: Dense,
    out: Dense,
    out_norm: LayerNorm,
}

/// The whole model.
pub struct Encoder {
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    emb_norm: LayerNorm,
    layers: Vec<Layer>,
    hidden: usize,
    heads: usize,
}

/// How the encoder's linears run.
#[derive(Clone, Copy)]
pub enum Precision {
    /// f32 matrices from the original file.
    F32,
    /// qlinear layers from a converted file, in this mode.
    Quantized(QuantLinearMode),
    /// The f32 model with every linear weight replaced by its round trip
    /// through ggml's Q4_0 (blocks of 32, 4.5 bits per weight): the peer
    /// format at q4g32's size, emulated in f32.
    Q4_0Emulated,
}

impl Encoder {
    /// Loads the model from `file`: `f32` takes every weight as a float
    /// tensor; otherwise the linears are the file's quantized layers (each
    /// with its bias) in `mode`, and the rest (embeddings, LayerNorms) float.
    pub fn load(file: &ModelFile, precision: Precision, layers: usize, heads: usize) -> Result<Self> {
        let t = |name: &str| file.tensor_f32(name).map_err(|e| e.to_string());
        let norm = |p: &str| -> Result<LayerNorm> {
            Ok(LayerNorm {
                gamma: t(&format!("{p}.weight"))?,
                beta: t(&format!("{p}.bias"))?,
            })
        };
        let dense = |p: &str| -> Result<Dense> {
            match precision {
                Precision::F32 | Precision::Q4_0Emulated => {
                    let shape = file
                        .shape(&format!("{p}.weight"))
                        .ok_or(format!("{p}.weight: missing"))?;
                    let mut w = t(&format!("{p}.weight"))?;
                    if matches!(precision, Precision::Q4_0Emulated) {
                        q4_0_round_trip(&mut w);
                    }
                    Ok(Dense::F32 {
                        w,
                        b: t(&format!("{p}.bias"))?,
                        n: shape[0],
                        k: shape[1],
                        name: p.to_string(),
                        sumsq: RefCell::new((vec![0.0; shape[1]], 0)),
                    })
                }
                Precision::Quantized(mode) => Ok(Dense::Q(
                    file.linear(p)
                        .and_then(|l| l.with_mode(mode))
                        .map_err(|e| e.to_string())?,
                )),
            }
        };
        let mut ls = vec![];
        for i in 0..layers {
            let p = format!("encoder.layer.{i}");
            ls.push(Layer {
                query: dense(&format!("{p}.attention.self.query"))?,
                key: dense(&format!("{p}.attention.self.key"))?,
                value: dense(&format!("{p}.attention.self.value"))?,
                attn_out: dense(&format!("{p}.attention.output.dense"))?,
                attn_norm: norm(&format!("{p}.attention.output.LayerNorm"))?,
                inter: dense(&format!("{p}.intermediate.dense"))?,
                out: dense(&format!("{p}.output.dense"))?,
                out_norm: norm(&format!("{p}.output.LayerNorm"))?,
            });
        }
        let emb_norm = norm("embeddings.LayerNorm")?;
        let hidden = emb_norm.gamma.len();
        if hidden % heads != 0 {
            return Err(format!("hidden size {hidden} is not a multiple of {heads} heads"));
        }
        Ok(Encoder {
            word: t("embeddings.word_embeddings.weight")?,
            position: t("embeddings.position_embeddings.weight")?,
            token_type: t("embeddings.token_type_embeddings.weight")?,
            emb_norm,
            layers: ls,
            hidden,
            heads,
        })
    }

    /// For every f32 linear, its prefix and the mean `x²` of each input
    /// column over every token embedded so far: the importance the
    /// activation-aware recipe weighs each column's error by
    /// (`qlinear convert --recipe activation-aware --importance`).
    pub fn importance(&self) -> Vec<(String, Vec<f32>)> {
        let mut out = vec![];
        for l in &self.layers {
            for d in [&l.query, &l.key, &l.value, &l.attn_out, &l.inter, &l.out] {
                if let Dense::F32 { name, sumsq, .. } = d {
                    let (s, rows) = &*sumsq.borrow();
                    let rows = (*rows).max(1) as f64;
                    out.push((name.clone(), s.iter().map(|v| (v / rows) as f32).collect()));
                }
            }
        }
        out
    }

    /// The normalised sentence embedding of one tokenised sentence (no
    /// padding, so every token is attended to and pooled).
    pub fn embed(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let (t, h) = (ids.len(), self.hidden);
        if t * h > self.position.len() {
            return Err(format!("{t} tokens exceed the model's positions"));
        }
        let mut x = vec![0f32; t * h];
        for (i, (&id, row)) in ids.iter().zip(x.chunks_exact_mut(h)).enumerate() {
            let w = self
                .word
                .get(id as usize * h..(id as usize + 1) * h)
                .ok_or(format!("token id {id} is outside the vocabulary"))?;
            let p = &self.position[i * h..(i + 1) * h];
            for (j, v) in row.iter_mut().enumerate() {
                *v = w[j] + p[j] + self.token_type[j];
            }
        }
        self.emb_norm.apply(&mut x);
        for layer in &self.layers {
            let attn = self.attention(layer, &x, t)?;
            let mut a = layer.attn_out.forward(&attn, t)?;
            a.iter_mut().zip(&x).for_each(|(v, r)| *v += r);
            layer.attn_norm.apply(&mut a);
            let mut inter = layer.inter.forward(&a, t)?;
            inter.iter_mut().for_each(|v| *v = gelu(*v));
            let mut o = layer.out.forward(&inter, t)?;
            o.iter_mut().zip(&a).for_each(|(v, r)| *v += r);
            layer.out_norm.apply(&mut o);
            x = o;
        }
        let mut pooled = vec![0f64; h];
        for row in x.chunks_exact(h) {
            pooled.iter_mut().zip(row).for_each(|(p, &v)| *p += f64::from(v));
        }
        let norm = pooled
            .iter()
            .map(|v| (v / t as f64).powi(2))
            .sum::<f64>()
            .sqrt()
            .max(1e-12);
        Ok(pooled.iter().map(|v| (v / t as f64 / norm) as f32).collect())
    }

    /// Multi-head self-attention of `x` `[t, h]`, no mask.
    fn attention(&self, layer: &Layer, x: &[f32], t: usize) -> Result<Vec<f32>> {
        let h = self.hidden;
        let d = h / self.heads;
        let (q, k, v) = (
            layer.query.forward(x, t)?,
            layer.key.forward(x, t)?,
            layer.value.forward(x, t)?,
        );
        let scale = 1.0 / (d as f32).sqrt();
        let mut out = vec![0f32; t * h];
        let mut scores = vec![0f32; t];
        for head in 0..self.heads {
            let c = head * d..(head + 1) * d;
            for i in 0..t {
                let qi = &q[i * h..][c.clone()];
                for (j, s) in scores.iter_mut().enumerate() {
                    *s = dot(qi, &k[j * h..][c.clone()]) * scale;
                }
                let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut sum = 0f32;
                scores.iter_mut().for_each(|s| {
                    *s = (*s - max).exp();
                    sum += *s;
                });
                let o = &mut out[i * h..][c.clone()];
                for (j, s) in scores.iter().enumerate() {
                    let p = s / sum;
                    o.iter_mut()
                        .zip(&v[j * h..][c.clone()])
                        .for_each(|(ov, vv)| *ov += p * vv);
                }
            }
        }
        Ok(out)
    }
}

/// ggml's Q4_0 quantize-dequantize, in place (rows of a length divisible by
/// 32, as every MiniLM weight is): per block of 32, `d = m / -8` with `m` the
/// value of largest magnitude (sign kept), codes `min(15, trunc(x / d + 8.5))`
/// from the unrounded `1 / d`, values `(code − 8) · f16(d)`. As
/// `quantize_row_q4_0_ref` and `dequantize_row_q4_0` in ggml-quants.c.
pub fn q4_0_round_trip(w: &mut [f32]) {
    for block in w.chunks_mut(32) {
        let m = block
            .iter()
            .copied()
            .fold(0f32, |m, v| if v.abs() > m.abs() { v } else { m });
        let d = m / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let dh = f32::from(half_f16(d));
        for v in block.iter_mut() {
            let q = ((*v * id + 8.5) as i8).min(15);
            *v = f32::from(q - 8) * dh;
        }
    }
}

/// f32 → IEEE binary16 → f32, round to nearest even.
fn half_f16(v: f32) -> half::f16 {
    half::f16::from_f32(v)
}

/// BERT's exact GELU, `x · Φ(x)` with `Φ` through erf.
fn gelu(x: f32) -> f32 {
    let x = f64::from(x);
    (0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))) as f32
}

/// erf to about 1e-7 relative (Numerical Recipes' Chebyshev erfc), in f64:
/// far below f32's resolution of the GELU output.
fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98 + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 {
        1.0 - erfc
    } else {
        erfc - 1.0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0, 0.0),
            (0.5, 0.520_499_877_8),
            (1.0, 0.842_700_792_9),
            (-2.0, -0.995_322_265_0),
        ] {
            assert!((super::erf(x) - want).abs() < 2e-7, "erf({x})");
        }
    }
}
