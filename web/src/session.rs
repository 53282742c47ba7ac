//! The page's decoder session in plain Rust (errors as messages), so that
//! its refusals are tested natively; `Decoder` in `lib.rs` binds it to
//! JavaScript.

use qlinear_smollm::{
    prompt_ids, time_decode, Emitted, Generation, KvPrecision, Model, Modes, Record, Sampler, Tokenizer, WeightMemory,
};

/// The largest model file the page takes: what wasm32's 4 GiB address
/// space holds beside the decoder's own memory (its KV cache, work
/// buffers and code), 3.5 GiB.
pub const MAX_FILE_BYTES: f64 = 3.5 * 1024.0 * 1024.0 * 1024.0;

/// Where the page holds a converted file's codes unless told: in place, in
/// the file's bytes that the page streamed into wasm memory, the W4A8
/// weights arranged there in their panel form (`ModelFile::from_bytes_in_place`).
/// The file is held once: copying the codes out would cost about the file
/// again in wasm memory, which never shrinks.
pub const PAGE_WEIGHTS: WeightMemory = WeightMemory::InPlace;

/// A model file streamed in, the model loaded from it, and a generation.
#[derive(Default)]
pub struct Session {
    file: Vec<u8>,
    expected: usize,
    loaded: Option<(Model, Tokenizer)>,
    prompt: Vec<u32>,
    generation: Option<Generation>,
}

impl Session {
    /// See `Decoder::reserve`.
    pub fn reserve(&mut self, bytes: f64) -> Result<(), String> {
        *self = Session::default();
        if !(bytes.is_finite() && bytes >= 0.0 && bytes.fract() == 0.0) {
            return Err(format!("a file of {bytes} bytes is not a file size"));
        }
        if bytes > MAX_FILE_BYTES {
            return Err(format!(
                "the file is {bytes} bytes ({:.2} GiB): WebAssembly's 32-bit memory holds files of at most {:.1} GiB \
                 beside the decoder",
                bytes / 1024f64.powi(3),
                MAX_FILE_BYTES / 1024f64.powi(3)
            ));
        }
        let n = bytes as usize;
        self.file
            .try_reserve_exact(n)
            .map_err(|_| format!("cannot hold the file's {n} bytes: this page's memory cannot grow that far"))?;
        self.expected = n;
        Ok(())
    }

    /// See `Decoder::append`.
    pub fn append(&mut self, chunk: &[u8]) -> Result<(), String> {
        self.append_with(chunk.len(), |tail| tail.copy_from_slice(chunk))
    }

    /// Appends the file's next `len` bytes, which `fill` writes into the
    /// reserved buffer's next `len` bytes (zeroed first): the page's chunk
    /// goes from its JavaScript array straight there, never through a
    /// second buffer in wasm memory (a 16 MiB chunk allocated past the
    /// reserved file would grow the memory, which never shrinks, by as
    /// much). Refused past the size given to [`Session::reserve`].
    pub fn append_with(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<(), String> {
        let start = self.file.len();
        let total = start + len;
        if total > self.expected {
            return Err(format!(
                "{} bytes past the file's {} (a file that grew while it was read?)",
                total - self.expected,
                self.expected
            ));
        }
        // within the reserved capacity: no reallocation
        self.file.resize(total, 0);
        fill(&mut self.file[start..]);
        Ok(())
    }

    /// See `Decoder::load`.
    pub fn load(&mut self, modes: &str, weights: &str, kv: &str) -> Result<String, String> {
        if self.file.len() != self.expected {
            return Err(format!(
                "the file stopped after {} of its {} bytes",
                self.file.len(),
                self.expected
            ));
        }
        let modes = if modes.is_empty() {
            Modes::default()
        } else {
            modes.parse::<Modes>().map_err(|e| e.to_string())?
        };
        let memory = match weights {
            "" => PAGE_WEIGHTS,
            "packed" => WeightMemory::Packed,
            "copied" => WeightMemory::Copied,
            "in-place" => WeightMemory::InPlace,
            other => return Err(format!("weights {other:?}: give packed, copied or in-place")),
        };
        let kv = if kv.is_empty() {
            KvPrecision::default()
        } else {
            kv.parse::<KvPrecision>().map_err(|e| e.to_string())?
        };
        let bytes = std::mem::take(&mut self.file);
        self.expected = 0;
        let (mut model, meta) = Model::from_bytes(bytes, &modes, memory).map_err(|e| e.to_string())?;
        model.set_kv_precision(kv);
        let tokenizer = Tokenizer::from_meta(&meta).map_err(|e| e.to_string())?;
        let description = model.description.clone();
        self.loaded = Some((model, tokenizer));
        Ok(description)
    }

    /// The selftest and plan the loaded converted file's census ran
    /// (`Model::start_up`), if a model is loaded.
    pub fn start_up(&self) -> Option<&qlinear_smollm::InitReport> {
        self.loaded.as_ref()?.0.start_up()
    }

    /// See `Decoder::tier`.
    pub fn tier(&self) -> String {
        self.loaded.as_ref().map_or_else(String::new, |(m, _)| m.decode_tier())
    }

    /// See `Decoder::start`.
    pub fn start(
        &mut self,
        prompt: &str,
        chat: bool,
        max_tokens: u32,
        temperature: f32,
        seed: u32,
        digests: bool,
    ) -> Result<u32, String> {
        let (model, tokenizer) = self.loaded.as_ref().ok_or("no model is loaded")?;
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(format!(
                "temperature {temperature} must be finite and at least 0 (0 is greedy)"
            ));
        }
        self.generation = None;
        let ids = prompt_ids(tokenizer, prompt, chat).map_err(|e| e.to_string())?;
        let sampler = Sampler::new(temperature, 40, 0.95, u64::from(seed));
        let record = Record {
            digests,
            prompt_logits: false,
        };
        let context = model.config.context;
        let generation =
            Generation::start(model, &ids, context, max_tokens as usize, sampler, record).map_err(|e| e.to_string())?;
        self.generation = Some(generation);
        self.prompt = ids;
        Ok(self.prompt.len() as u32)
    }

    /// See `Decoder::step`.
    pub fn step(&mut self) -> Result<Option<Emitted>, String> {
        let (model, tokenizer) = self.loaded.as_ref().ok_or("no model is loaded")?;
        let generation = self.generation.as_mut().ok_or("no generation is started")?;
        generation.step(model, tokenizer).map_err(|e| e.to_string())
    }

    /// See `Decoder::bench`; `now` is the clock in ms.
    pub fn bench(&mut self, ids: &[u32], tokens: u32, now: &dyn Fn() -> f64) -> Result<Vec<f64>, String> {
        let (model, _) = self.loaded.as_ref().ok_or("no model is loaded")?;
        if ids.is_empty() {
            return Err("the bench's prompt is empty (no tokens)".into());
        }
        let t = time_decode(model, ids, tokens as usize, now, &mut |_| {}).map_err(|e| e.to_string())?;
        Ok(vec![t.prefill_tok_s, t.decode_tok_s])
    }

    /// See `Decoder::prompt_ids`.
    pub fn prompt_ids(&self) -> Vec<u32> {
        self.prompt.clone()
    }

    /// See `Decoder::generated`.
    pub fn generated(&self) -> Vec<u32> {
        self.generation
            .as_ref()
            .map_or_else(Vec::new, |g| g.generated().to_vec())
    }

    /// See `Decoder::digests`.
    pub fn digests(&self) -> Vec<String> {
        self.generation
            .as_ref()
            .and_then(Generation::digests)
            .map_or_else(Vec::new, |d| d.iter().map(|d| format!("{d:016x}")).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_size_is_checked_before_anything_is_allocated() {
        let mut s = Session::default();
        for bad in [f64::NAN, -1.0, 2.5, f64::INFINITY] {
            let e = s.reserve(bad).unwrap_err();
            assert!(e.contains("is not a file size"), "{bad}: {e}");
        }
        // 5 GiB: past wasm32's memory, refused with its size
        let e = s.reserve(5.0 * 1024f64.powi(3)).unwrap_err();
        assert_eq!(
            e,
            "the file is 5368709120 bytes (5.00 GiB): WebAssembly's 32-bit memory holds files of at most 3.5 GiB \
             beside the decoder"
        );
        assert_eq!(s.file.capacity(), 0);
    }

    #[test]
    fn chunks_past_the_size_and_short_files_are_refused_and_the_session_recovers() {
        let mut s = Session::default();
        s.reserve(10.0).unwrap();
        s.append(&[0; 6]).unwrap();
        assert_eq!(
            s.append(&[0; 6]).unwrap_err(),
            "2 bytes past the file's 10 (a file that grew while it was read?)"
        );
        assert_eq!(
            s.load("", "", "").unwrap_err(),
            "the file stopped after 6 of its 10 bytes"
        );
        s.append(&[1; 4]).unwrap();
        assert_eq!(
            s.load("", "mapped", "").unwrap_err(),
            "weights \"mapped\": give packed, copied or in-place"
        );
        assert_eq!(
            s.load("", "", "f16").unwrap_err(),
            "unknown KV cache type `f16`: expected f32 or bf16"
        );
        assert!(s.load("W9A9", "", "").unwrap_err().starts_with("modes "));
        // ten bytes of no model: the reader's refusal, and nothing loaded
        s.reserve(10.0).unwrap();
        s.append(&[1; 10]).unwrap();
        assert!(!s.load("", "", "").unwrap_err().is_empty());
        assert!(s.tier().is_empty());
        // a new file starts over
        s.reserve(3.0).unwrap();
        s.append(b"abc").unwrap();
        assert_eq!(s.file, b"abc");
    }

    #[test]
    fn generating_without_a_model_or_a_start_is_refused() {
        let mut s = Session::default();
        assert_eq!(
            s.start("hi", false, 4, 0.0, 0, false).unwrap_err(),
            "no model is loaded"
        );
        assert_eq!(s.step().unwrap_err(), "no model is loaded");
        assert_eq!(s.bench(&[1, 2], 4, &|| 0.0).unwrap_err(), "no model is loaded");
        assert!(s.generated().is_empty() && s.digests().is_empty() && s.prompt_ids().is_empty());
    }
}
