//! Text generation one token at a time: the prompt run once (prefill), then
//! a decode step per token, the text streamed in whole characters. The
//! native binary and the browser page both generate through
//! [`Generation`], so what the page shows is what the binary prints.

use crate::{Error, KvCache, Model, Result, Sampler, Tokenizer};

/// A generation in progress over one [`KvCache`]. It holds no borrow of the
/// model or the tokenizer (each call takes them), so a host such as the
/// page can keep it beside them.
pub struct Generation {
    cache: KvCache,
    sampler: Sampler,
    prompt: usize,
    max_tokens: usize,
    generated: Vec<u32>,
    /// The token the last logits chose, not yet emitted.
    next: u32,
    /// Bytes of the decoded text already emitted.
    shown: usize,
    /// [`logits_digest`] of each logits row a token was chosen from, when
    /// asked for ([`Record::digests`]).
    digests: Option<Vec<u64>>,
    /// Every prompt position's logits, when asked for
    /// ([`Record::prompt_logits`]).
    prompt_logits: Option<Vec<f32>>,
    done: bool,
}

/// What a [`Generation`] keeps beside the tokens (nothing by default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    /// The [`logits_digest`] of every logits row a token is chosen from
    /// ([`Generation::digests`]).
    pub digests: bool,
    /// The logits of every prompt position, `[prompt, vocab]`
    /// ([`Generation::prompt_logits`]).
    pub prompt_logits: bool,
}

/// One emitted token: its id, and the text it completes (empty while a
/// character is still incomplete: a token may end inside one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emitted {
    /// The token id.
    pub id: u32,
    /// The new whole characters of the generated text.
    pub text: String,
}

impl Generation {
    /// Runs `ids` (the prompt) through `model` in a new cache of the
    /// positions the generation can fill (the prompt's and `max_tokens`),
    /// at most `capacity` and the model's context, and chooses the first
    /// token with `sampler`;
    /// at most `max_tokens` follow from [`Generation::step`]; `record` says
    /// what is kept beside them. Errors: an empty
    /// prompt, a prompt and `max_tokens` beyond `capacity` or the model's
    /// context, a token past the vocabulary, and the model's own.
    pub fn start(
        model: &Model,
        ids: &[u32],
        capacity: usize,
        max_tokens: usize,
        sampler: Sampler,
        record: Record,
    ) -> Result<Generation> {
        if ids.is_empty() {
            return Err(Error::Prompt("the prompt is empty (no tokens)".into()));
        }
        let context = model.config.context;
        let capacity = capacity.min(context);
        if ids.len().saturating_add(max_tokens) > capacity {
            return Err(Error::Prompt(format!(
                "{} prompt tokens and {max_tokens} to generate exceed the context of {capacity} (at most the \
                 model's {context})",
                ids.len(),
            )));
        }
        let mut generation = Generation {
            cache: model.cache(ids.len() + max_tokens)?,
            sampler,
            prompt: ids.len(),
            max_tokens,
            generated: vec![],
            next: 0,
            shown: 0,
            digests: record.digests.then(Vec::new),
            prompt_logits: None,
            done: max_tokens == 0,
        };
        generation.run(model, ids, record.prompt_logits)?;
        Ok(generation)
    }

    /// Runs `tokens` and chooses the next token from the last logits (kept
    /// whole, every position's, when `all`).
    fn run(&mut self, model: &Model, tokens: &[u32], all: bool) -> Result<()> {
        let vocab = model.vocab();
        let logits = model.forward(&mut self.cache, tokens, all)?;
        if all {
            self.prompt_logits = Some(logits.to_vec());
        }
        let last = &logits[logits.len() - vocab..];
        if let Some(d) = &mut self.digests {
            d.push(logits_digest(last));
        }
        self.next = self.sampler.next(last);
        Ok(())
    }

    /// Emits the chosen token and runs it to choose the one after, or
    /// `None` once `max_tokens` are out or the model chose a control token
    /// (the end of its turn or of the text). Errors: the model's, and the
    /// tokenizer's.
    pub fn step(&mut self, model: &Model, tokenizer: &Tokenizer) -> Result<Option<Emitted>> {
        if self.done || tokenizer.is_control(self.next) {
            self.done = true;
            return Ok(None);
        }
        let id = self.next;
        self.generated.push(id);
        let text = tokenizer.decode(&self.generated)?;
        let mut new = String::new();
        // whole characters only
        if !text.ends_with('\u{FFFD}') && text.len() >= self.shown {
            new = text[self.shown..].to_string();
            self.shown = text.len();
        }
        if self.generated.len() == self.max_tokens {
            // the last token is not run: nothing would read its logits
            self.done = true;
        } else {
            self.run(model, &[id], false)?;
        }
        Ok(Some(Emitted { id, text: new }))
    }

    /// The tokens emitted so far.
    pub fn generated(&self) -> &[u32] {
        &self.generated
    }

    /// The prompt's length in tokens.
    pub fn prompt_len(&self) -> usize {
        self.prompt
    }

    /// The digests kept (one per logits row a token was chosen from: the
    /// prompt's last, then each decode step's), or `None` when not asked.
    pub fn digests(&self) -> Option<&[u64]> {
        self.digests.as_deref()
    }

    /// Every prompt position's logits (`[prompt, vocab]`), or `None` when
    /// not asked.
    pub fn prompt_logits(&self) -> Option<&[f32]> {
        self.prompt_logits.as_deref()
    }

    /// Whether generation has ended.
    pub fn is_done(&self) -> bool {
        self.done
    }
}

/// A prefill and a decode timed by [`time_decode`].
pub struct Timed {
    /// Prompt tokens a second.
    pub prefill_tok_s: f64,
    /// Decode steps a second.
    pub decode_tok_s: f64,
    /// The cache the run filled (its profile, when one was asked for).
    pub cache: KvCache,
}

/// The speed measurement the native bench and the page share: `prompt`
/// run at once (prefill), then `tokens` decode steps, each on the argmax of
/// the step before, whatever token it is (a control token does not stop
/// it), in a cache of exactly that many positions and one more;
/// `before_decode` may prepare the cache between the two (the native
/// bench's step profile). `now` is a clock in milliseconds (std's
/// natively, `performance.now()` in the page). Errors: the model's.
pub fn time_decode(
    model: &Model,
    prompt: &[u32],
    tokens: usize,
    now: &dyn Fn() -> f64,
    before_decode: &mut dyn FnMut(&mut KvCache),
) -> Result<Timed> {
    let mut cache = model.cache(prompt.len() + tokens + 1)?;
    let t = now();
    let logits = model.forward(&mut cache, prompt, false)?;
    let prefill_ms = now() - t;
    let mut next = Sampler::argmax(logits);
    before_decode(&mut cache);
    let t = now();
    for _ in 0..tokens {
        next = Sampler::argmax(model.forward(&mut cache, &[next], false)?);
    }
    let decode_ms = now() - t;
    let rate = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1e3 / ms } else { f64::INFINITY };
    Ok(Timed {
        prefill_tok_s: rate(prompt.len(), prefill_ms),
        decode_tok_s: rate(tokens, decode_ms),
        cache,
    })
}

/// The prompt's token ids: `prompt` wrapped in the file's chat template
/// when `chat`, then encoded.
pub fn prompt_ids(tokenizer: &Tokenizer, prompt: &str, chat: bool) -> Result<Vec<u32>> {
    let text = if chat {
        tokenizer.chat(prompt)?
    } else {
        prompt.to_string()
    };
    tokenizer.encode(&text)
}

/// FNV-1a (64 bits) over the little-endian bytes of every value's bits: a
/// fingerprint of a logits row that differs when any bit does (barring a
/// collision), computed the same way natively and in the page, so the
/// two builds' logits can be compared bit for bit without moving them.
pub fn logits_digest(logits: &[f32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in logits {
        for b in v.to_bits().to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_fnv1a_of_the_bits_and_sees_every_bit() {
        // FNV-1a 64 of no bytes is its offset basis; of the bytes
        // 00 00 80 3f (1.0f32), computed by hand from the definition
        assert_eq!(logits_digest(&[]), 0xcbf2_9ce4_8422_2325);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in [0x00u8, 0x00, 0x80, 0x3f] {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        assert_eq!(logits_digest(&[1.0]), h);
        // 0.0 and -0.0 compare equal but differ in a bit
        assert_ne!(logits_digest(&[0.0]), logits_digest(&[-0.0]));
        let row: Vec<f32> = (0..64).map(|i| i as f32 * 0.25).collect();
        for i in 0..row.len() {
            let mut flipped = row.clone();
            flipped[i] = f32::from_bits(flipped[i].to_bits() ^ 1);
            assert_ne!(logits_digest(&flipped), logits_digest(&row), "{i}");
        }
    }
}
