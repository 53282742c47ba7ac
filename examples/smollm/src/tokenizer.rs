use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use crate::{Error, Meta, Result};

/// GGUF's token type of control tokens (`<|im_start|>`, …): matched whole
/// in text, never split by the BPE.
const CONTROL: i64 = 3;

/// The byte-level BPE tokenizer of a GGUF `gpt2` vocabulary, built from the
/// file's `tokenizer.ggml.tokens`, `merges` and `token_type` with the
/// `tokenizers` crate, pre-tokenized as llama.cpp does for the `smollm`
/// pre-tokenizer: every digit alone, then GPT-2's split.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// The end-of-sequence token (`tokenizer.ggml.eos_token_id`).
    pub eos: u32,
    /// The chat template (`tokenizer.chat_template`), if the file has one.
    pub chat_template: Option<String>,
    vocab: usize,
    /// The ids of the control tokens (`<|im_start|>`, `<|endoftext|>`, …).
    control: Vec<u32>,
}

impl Tokenizer {
    /// Builds the tokenizer from a model's metadata. Errors name the key:
    /// a model other than `gpt2`, a pre-tokenizer other than `smollm`, a
    /// merge that is not two tokens.
    pub fn from_meta(meta: &Meta) -> Result<Tokenizer> {
        let model = meta.str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(Error::Metadata {
                key: "tokenizer.ggml.model".into(),
                reason: format!("is {model:?}; this tokenizer is byte-level BPE (\"gpt2\")"),
            });
        }
        let pre = meta.str("tokenizer.ggml.pre")?;
        if pre != "smollm" {
            return Err(Error::Metadata {
                key: "tokenizer.ggml.pre".into(),
                reason: format!("is {pre:?}; this tokenizer splits as llama.cpp's \"smollm\""),
            });
        }
        let tokens = meta.array("tokenizer.ggml.tokens")?;
        let types = meta.array("tokenizer.ggml.token_type").ok();
        let mut vocab = tokenizers::models::bpe::Vocab::with_capacity(tokens.len());
        let mut control = vec![];
        for (id, t) in tokens.iter().enumerate() {
            let t = t.as_str().ok_or_else(|| Error::Metadata {
                key: "tokenizer.ggml.tokens".into(),
                reason: format!("item {id} is not a string"),
            })?;
            vocab.insert(t.to_string(), id as u32);
            if types.and_then(|ty| ty.get(id)).and_then(|v| v.as_i64()) == Some(CONTROL) {
                control.push((t.to_string(), id as u32));
            }
        }
        let merges = meta
            .array("tokenizer.ggml.merges")?
            .iter()
            .enumerate()
            .map(|(i, m)| {
                m.as_str()
                    .and_then(|m| m.split_once(' '))
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .ok_or_else(|| Error::Metadata {
                        key: "tokenizer.ggml.merges".into(),
                        reason: format!("item {i} is not two tokens separated by a space"),
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        let mut inner = tokenizers::Tokenizer::new(bpe);
        let digits = Split::new(
            SplitPattern::Regex(r"\p{N}".into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| Error::Tokenizer(e.to_string()))?;
        inner.with_pre_tokenizer(Some(Sequence::new(vec![
            PreTokenizerWrapper::Split(digits),
            PreTokenizerWrapper::ByteLevel(ByteLevel::new(false, false, true)),
        ])));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let specials: Vec<AddedToken> = control.iter().map(|(t, _)| AddedToken::from(t.clone(), true)).collect();
        inner.add_special_tokens(&specials);
        let eos = meta.usize("tokenizer.ggml.eos_token_id")? as u32;
        let chat_template = meta.str("tokenizer.chat_template").ok().map(String::from);
        Ok(Tokenizer {
            inner,
            eos,
            chat_template,
            vocab: tokens.len(),
            control: control.into_iter().map(|(_, id)| id).collect(),
        })
    }

    /// Whether `id` is a control token: generation stops at any of them
    /// (the end of the turn, the end of the text, or the start of another
    /// turn), as it does at the end-of-sequence token.
    pub fn is_control(&self, id: u32) -> bool {
        id == self.eos || self.control.contains(&id)
    }

    /// The ids of `text` (control tokens in it matched whole).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`, control tokens included as their text.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        if let Some(bad) = ids.iter().find(|&&i| i as usize >= self.vocab) {
            return Err(Error::Tokenizer(format!(
                "token id {bad} is past the vocabulary ({})",
                self.vocab
            )));
        }
        self.inner
            .decode(ids, false)
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// The vocabulary's size.
    pub fn vocab_size(&self) -> usize {
        self.vocab
    }

    /// `prompt` as the single user turn of a chat, rendered with the file's
    /// chat template (Jinja, by `minijinja`) with the generation prompt.
    pub fn chat(&self, prompt: &str) -> Result<String> {
        let template = self
            .chat_template
            .as_deref()
            .ok_or_else(|| Error::Template("the file has no tokenizer.chat_template".into()))?;
        let mut env = minijinja::Environment::new();
        env.add_template("chat", template)
            .map_err(|e| Error::Template(e.to_string()))?;
        let ctx = minijinja::context! {
            messages => vec![minijinja::context! { role => "user", content => prompt }],
            add_generation_prompt => true,
        };
        env.get_template("chat")
            .and_then(|t| t.render(ctx))
            .map_err(|e| Error::Template(e.to_string()))
    }
}
