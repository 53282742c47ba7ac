use crate::{Model, Result, Sampler};

/// A model's scores on a text, as llama.cpp's `perplexity` counts them: the
/// text cut into windows of `window` tokens, each run from an empty cache,
/// and in each the tokens of its second half predicted (the logits at
/// position `j` score token `j + 1`, for `window / 2 <= j < window - 1`).
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    /// `Σ −ln p(token)` over the scored tokens.
    pub nll: f64,
    /// `−ln p(token)` of each scored token, in order (for intervals: a
    /// bootstrap resamples these).
    pub token_nll: Vec<f64>,
    /// The most likely token at every scored position, in order.
    pub top1: Vec<u32>,
}

impl Scores {
    /// `exp(nll / count)`.
    pub fn perplexity(&self) -> f64 {
        (self.nll / self.top1.len().max(1) as f64).exp()
    }

    /// The share of scored positions whose most likely token is `other`'s.
    pub fn agreement(&self, other: &Scores) -> f64 {
        let same = self.top1.iter().zip(&other.top1).filter(|(a, b)| a == b).count();
        same as f64 / self.top1.len().max(1) as f64
    }
}

/// Scores `model` on `tokens` (whole windows only; see [`Scores`]).
pub fn score(model: &Model, tokens: &[u32], window: usize) -> Result<Scores> {
    let mut cache = model.cache(window)?;
    let vocab = model.vocab();
    let mut scores = Scores {
        nll: 0.0,
        token_nll: vec![],
        top1: vec![],
    };
    for chunk in tokens.chunks_exact(window) {
        cache.clear();
        let logits = model.forward(&mut cache, chunk, true)?;
        for j in window / 2..window - 1 {
            let row = &logits[j * vocab..(j + 1) * vocab];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = row.iter().map(|&v| f64::from(v - max).exp()).sum();
            let p = f64::from(row[chunk[j + 1] as usize] - max) - sum.ln();
            scores.nll -= p;
            scores.token_nll.push(-p);
            scores.top1.push(Sampler::argmax(row));
        }
    }
    Ok(scores)
}
