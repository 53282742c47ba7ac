//! The browser build of qlinear (`wasm32-unknown-unknown`, built once per
//! wasm tier of the registry: `+simd128`, and `+simd128,+relaxed-simd` for
//! browsers that have relaxed SIMD), bound to JavaScript by `wasm-bindgen`
//! for `web/index.html`:
//!
//! * [`selftest`]: the proof table and the plan, measured with the page's
//!   clock (`performance.now()`, given to the plan by
//!   [`qlinear_dispatch::set_clock`]);
//! * [`gemv_setup`] / [`gemv_run`]: a W8A8 or W4A8 GEMV on one tier, for
//!   the page's timing table;
//! * [`Decoder`]: the SmolLM2 decoder of `examples/smollm` (the same
//!   library the native `qlinear-smollm` runs: model, KV cache, attention,
//!   sampler, tokenizer, chat template), on a model file the page streams
//!   into wasm memory in chunks.
//!
//! The page runs the decoder in a Web Worker (`web/worker.js`), so that a
//! long step never blocks the page.

use std::sync::Mutex;

use qlinear_dispatch::{autotuned_plan, cpu_features, selftest_report, Int8Tier, KernelPlanV0, Route, SelftestReport};
use qlinear_quant_recipe::{GroupSize, QuantizedMatrix, QuantizedMatrixQ4, QuantizedWeight};
use wasm_bindgen::prelude::*;

mod session;
pub use session::{Session, MAX_FILE_BYTES, PAGE_WEIGHTS};

#[wasm_bindgen]
extern "C" {
    /// `performance.now()`: milliseconds, in a window and in a worker.
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn performance_now() -> f64;
}

/// Starts `threads` Web Workers that share this module's memory and makes
/// them rayon's global pool (in the builds with atomics only, which need a
/// cross-origin isolated page; the promise resolves when every worker is
/// up). Call it once, before the first layer runs.
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
pub use wasm_bindgen_rayon::init_thread_pool;

/// The threads a layer's work spreads over: rayon's global pool (1 in a
/// build without atomics).
#[wasm_bindgen]
pub fn threads() -> usize {
    rayon::current_num_threads()
}

/// Gives the plan and the selftest the page's clock (once; later calls do
/// nothing). Every export that may prove or plan calls it first.
fn clock() {
    qlinear_dispatch::set_clock(performance_now);
}

/// The selftest's and the plan's report, as [`selftest`] returns it.
#[wasm_bindgen(getter_with_clone)]
pub struct SelftestResult {
    /// The CPU features, the proof table and the plan, as text.
    pub text: String,
    /// Whether every compiled-in tier passed its proof.
    pub passed: bool,
    /// The selftest's time in ms, by the page's clock.
    pub selftest_ms: f64,
    /// The plan's time in ms (0 when it was forced or could not measure).
    pub plan_ms: f64,
}

impl SelftestResult {
    /// A selftest report and its plan (or why there is none) for the page.
    fn of(report: &SelftestReport, plan: Result<&KernelPlanV0, String>) -> SelftestResult {
        let (plan, plan_ms) = match plan {
            Ok(p) => (p.to_string(), p.elapsed.as_secs_f64() * 1e3),
            Err(e) => (format!("plan: {e}\n"), 0.0),
        };
        SelftestResult {
            text: format!("cpu features: {}\n{report}{plan}", cpu_features().join(" ")),
            passed: report.all_present_passed(),
            selftest_ms: report.elapsed.as_secs_f64() * 1e3,
            plan_ms,
        }
    }
}

/// Runs the selftest and the plan of every kernel family at the default
/// census (once per page; later calls report the same), timed by the
/// page's clock. A model needs less: loading a converted file proves and
/// plans its own census ([`Decoder::start_up`]).
#[wasm_bindgen]
pub fn selftest() -> SelftestResult {
    clock();
    SelftestResult::of(selftest_report(), autotuned_plan().map_err(|e| e.to_string()))
}

/// The CPU features the page's build sees (`simd128`, `relaxed-simd`).
#[wasm_bindgen]
pub fn features() -> Vec<String> {
    cpu_features().into_iter().map(String::from).collect()
}

struct Gemv {
    route: Route,
    weights: QuantizedWeight,
    x: Vec<f32>,
    y: Vec<f32>,
}

static GEMV: Mutex<Option<Gemv>> = Mutex::new(None);

/// The tiers the page can time, by index: the scalar tier, then the
/// registry's WebAssembly tiers in its order.
fn tiers() -> Vec<Int8Tier> {
    std::iter::once(Int8Tier::Scalar)
        .chain(Int8Tier::of_arch("wasm32"))
        .collect()
}

/// The names of the tiers the page can time, in index order (the indices
/// [`gemv_setup`] takes).
#[wasm_bindgen]
pub fn page_tiers() -> Vec<String> {
    tiers().iter().map(ToString::to_string).collect()
}

/// Prepares a GEMV (`family` 0 = W8A8, 1 = W4A8; `tier` an index of
/// [`page_tiers`]) of an `[n, k]` weight. Returns false if the tier is not
/// dispatchable in this build or the shape is refused.
#[wasm_bindgen]
pub fn gemv_setup(family: u32, tier: u32, n: u32, k: u32) -> bool {
    clock();
    let (n, k) = (n as usize, k as usize);
    let Some(&tier) = tiers().get(tier as usize) else {
        return false;
    };
    let Ok(route) = Route::for_tier(tier) else { return false };
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 2001) as f32 - 1000.0) * 1e-3).collect();
    let weights = match family {
        0 => QuantizedMatrix::quantize(n, k, &w).map(QuantizedWeight::Q8),
        _ => QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).map(QuantizedWeight::Q4),
    };
    let Ok(weights) = weights else { return false };
    let x = (0..k).map(|i| ((i * 31 % 101) as f32 - 50.0) * 0.01).collect();
    *GEMV.lock().unwrap_or_else(|e| e.into_inner()) = Some(Gemv {
        route,
        weights,
        x,
        y: vec![0.0; n],
    });
    true
}

/// Runs the prepared GEMV once (M = 1, activations quantized per call) and
/// returns `y[0]` (so the work cannot be optimised away), NaN if none is
/// prepared.
#[wasm_bindgen]
pub fn gemv_run() -> f32 {
    let mut guard = GEMV.lock().unwrap_or_else(|e| e.into_inner());
    let Some(g) = guard.as_mut() else { return f32::NAN };
    let r = match &g.weights {
        QuantizedWeight::Q8(w) => g.route.linear_q8_dynamic(&g.x, 1, w, &mut g.y),
        QuantizedWeight::Q4(w) => g.route.linear_q4_dynamic(&g.x, 1, w, &mut g.y),
    };
    if r.is_err() {
        return f32::NAN;
    }
    g.y[0]
}

/// The size of the module's linear memory in bytes: everything the page's
/// wasm holds (the model file, the KV cache, work buffers, the code's
/// data). Memory grows and never shrinks, so this is also its peak.
#[wasm_bindgen]
pub fn memory_bytes() -> f64 {
    #[cfg(target_arch = "wasm32")]
    {
        (core::arch::wasm32::memory_size::<0>() * 65536) as f64
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        0.0
    }
}

/// One generated token, as [`Decoder::step`] returns it.
#[wasm_bindgen(getter_with_clone)]
pub struct Token {
    /// The token id.
    pub id: u32,
    /// The whole characters it completes (empty inside a character).
    pub text: String,
}

/// The SmolLM2 decoder of the page: a model file streamed in
/// ([`Decoder::reserve`], then [`Decoder::append`] per chunk), loaded
/// ([`Decoder::load`]), then generations ([`Decoder::start`] and
/// [`Decoder::step`]). Every error is a JavaScript `Error` whose message
/// names what is wrong; after one, the decoder takes another file.
#[wasm_bindgen]
#[derive(Default)]
pub struct Decoder {
    session: Session,
}

/// A JavaScript error with `message`.
fn error(message: String) -> JsError {
    JsError::new(&message)
}

#[wasm_bindgen]
impl Decoder {
    /// A decoder with no model.
    #[wasm_bindgen(constructor)]
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Drops any model and makes room for a file of `bytes` bytes (a
    /// JavaScript number: a `File`'s size). Refused, before anything is
    /// allocated, when it is not a whole number, is over
    /// [`MAX_FILE_BYTES`] (the message names the size), or is more than
    /// this page's memory can grow to.
    pub fn reserve(&mut self, bytes: f64) -> Result<(), JsError> {
        self.session.reserve(bytes).map_err(error)
    }

    /// Appends the next chunk of the file, copied from the JavaScript array
    /// straight into the reserved buffer (a `&[u8]` argument would be
    /// copied into wasm memory first, past the file, growing the memory by
    /// a chunk). Refused past the size given to [`Decoder::reserve`].
    pub fn append(&mut self, chunk: &js_sys::Uint8Array) -> Result<(), JsError> {
        let len = chunk.length() as usize;
        self.session.append_with(len, |tail| chunk.copy_to(tail)).map_err(error)
    }

    /// Loads the file streamed in: a converted qlinear file (its layers in
    /// `modes`, `""` for each file's default: `W8A8`, `W4A8`, `W8A16`,
    /// `W4A16`, with overrides by role as `qlinear-smollm` takes them), its
    /// codes held as `weights` says (`packed`, `copied` or `in-place`, as
    /// `qlinear-smollm --weights`; `""` for [`PAGE_WEIGHTS`]), or a GGUF
    /// file (the f32 path); its KV caches hold `kv` (`f32` or `bf16`, as
    /// `qlinear-smollm --kv`; `""` for f32). Returns the model's
    /// description. Errors: a file shorter than reserved, an unknown
    /// `weights` or `kv`, and whatever the file's reader and the decoder
    /// refuse (a file that is not a Llama decoder names the key at fault).
    pub fn load(&mut self, modes: &str, weights: &str, kv: &str) -> Result<String, JsError> {
        clock();
        self.session.load(modes, weights, kv).map_err(error)
    }

    /// The selftest and the plan that loading the converted file ran for
    /// its census (its layers' kernel families at their K values, timed by
    /// the page's clock; with any family proven before in this page), or
    /// `undefined` with no model or on a GGUF's f32 path.
    pub fn start_up(&self) -> Option<SelftestResult> {
        let init = self.session.start_up()?;
        Some(SelftestResult::of(&init.selftest, Ok(&init.plan)))
    }

    /// The loaded model's tier for a decode step's projections (`f32` on the
    /// f32 path), or an empty string with no model.
    pub fn tier(&self) -> String {
        self.session.tier()
    }

    /// Starts a generation of at most `max_tokens` from `prompt` (wrapped
    /// in the file's chat template when `chat`): runs the prompt and
    /// returns its token count. `temperature` 0 is greedy; with `digests`
    /// the logits of every step are fingerprinted
    /// ([`qlinear_smollm::logits_digest`], for the native comparison).
    /// Errors: no model, an empty or too long prompt, a bad sampler
    /// setting.
    pub fn start(
        &mut self,
        prompt: &str,
        chat: bool,
        max_tokens: u32,
        temperature: f32,
        seed: u32,
        digests: bool,
    ) -> Result<u32, JsError> {
        self.session
            .start(prompt, chat, max_tokens, temperature, seed, digests)
            .map_err(error)
    }

    /// The next token, or `undefined` once the generation has ended (its
    /// token budget spent, or a control token chosen). Errors: no
    /// generation started, and the model's.
    pub fn step(&mut self) -> Result<Option<Token>, JsError> {
        Ok(self
            .session
            .step()
            .map_err(error)?
            .map(|t| Token { id: t.id, text: t.text }))
    }

    /// Times the loaded model as the native `qlinear-smollm --bench` does
    /// (`qlinear_smollm::time_decode`, by `performance.now()`): `ids` run
    /// at once, then `tokens` greedy decode steps; returns
    /// `[prefill tok/s, decode tok/s]`. Errors: no model, no ids, and the
    /// model's.
    pub fn bench(&mut self, ids: Vec<u32>, tokens: u32) -> Result<Vec<f64>, JsError> {
        let now = || performance_now();
        self.session.bench(&ids, tokens, &now).map_err(error)
    }

    /// The prompt's token ids of the current generation.
    pub fn prompt_ids(&self) -> Vec<u32> {
        self.session.prompt_ids()
    }

    /// The tokens the current generation has emitted so far.
    pub fn generated(&self) -> Vec<u32> {
        self.session.generated()
    }

    /// The logits digests of the current generation, as 16 hex digits
    /// each (empty unless started with `digests`).
    pub fn digests(&self) -> Vec<String> {
        self.session.digests()
    }
}
