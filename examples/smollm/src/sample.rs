use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How the next token is chosen from the logits: greedy (temperature 0),
/// or sampled with a temperature, the `top_k` most likely tokens and the
/// smallest set whose probability reaches `top_p`, from a seeded generator
/// (the same seed gives the same text).
pub struct Sampler {
    temperature: f32,
    top_k: usize,
    top_p: f32,
    rng: StdRng,
    order: Vec<u32>,
}

impl Sampler {
    /// Greedy when `temperature <= 0`; `top_k == 0` means no limit;
    /// `top_p` is clamped to `(0, 1]`.
    pub fn new(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> Sampler {
        Sampler {
            temperature,
            top_k,
            top_p: if top_p > 0.0 && top_p < 1.0 { top_p } else { 1.0 },
            rng: StdRng::seed_from_u64(seed),
            order: vec![],
        }
    }

    /// The most likely token (the first of equal maxima; NaN never wins).
    pub fn argmax(logits: &[f32]) -> u32 {
        let mut best = 0;
        for (i, &v) in logits.iter().enumerate() {
            if v > logits[best] || logits[best].is_nan() {
                best = i;
            }
        }
        best as u32
    }

    /// The next token.
    pub fn next(&mut self, logits: &[f32]) -> u32 {
        if self.temperature <= 0.0 {
            return Self::argmax(logits);
        }
        self.order.clear();
        self.order.extend(0..logits.len() as u32);
        let key = |i: &u32| logits[*i as usize];
        self.order
            .sort_unstable_by(|a, b| key(b).partial_cmp(&key(a)).unwrap_or(std::cmp::Ordering::Equal));
        if self.top_k > 0 {
            self.order.truncate(self.top_k);
        }
        let max = key(&self.order[0]);
        let mut probs: Vec<f32> = self
            .order
            .iter()
            .map(|i| crate::math::exp((key(i) - max) / self.temperature))
            .collect();
        let total: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        let mut kept = 0;
        let mut mass = 0.0;
        for p in &probs {
            kept += 1;
            mass += p;
            if mass >= self.top_p {
                break;
            }
        }
        let r: f32 = self.rng.random::<f32>() * mass;
        let mut acc = 0.0;
        for (i, p) in probs[..kept].iter().enumerate() {
            acc += p;
            if r < acc {
                return self.order[i];
            }
        }
        self.order[kept - 1]
    }
}
