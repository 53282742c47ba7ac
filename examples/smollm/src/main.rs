//! `qlinear-smollm MODEL --prompt TEXT`: generates text with a Llama
//! decoder. MODEL is a GGUF file (the f32 path: every weight dequantized)
//! or a file `qlinear convert` made from one (every linear layer, the LM
//! head included, a `qlinear::Linear`).
#![forbid(unsafe_code)]

// `--bench` (the binary's, not the library's)
mod bench;
// `--eval`: the perplexity table and its JSON
mod score;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use qlinear_smollm::{
    prompt_ids, DecodeSplit, Generation, KvPrecision, Model, Modes, Record, Sampler, Tokenizer, WeightMemory,
};

#[derive(Parser)]
#[command(
    name = "qlinear-smollm",
    about = "Text generation with every linear layer through qlinear"
)]
struct Args {
    /// A GGUF file (f32 path) or a converted qlinear file, optionally
    /// followed by `@MODE` (W8A8, W4A8, W8A16, W4A16) for its layers, and
    /// overrides by layer role (`@W8A8,ffn_down=W8A16`). With
    /// --eval, more models follow; the first is the reference.
    #[arg(required = true)]
    models: Vec<String>,
    /// The prompt.
    #[arg(long)]
    prompt: Option<String>,
    /// The prompt as token ids (comma-separated) instead of text.
    #[arg(long, value_delimiter = ',')]
    ids: Option<Vec<u32>>,
    /// Wrap the prompt in the file's chat template (one user turn).
    #[arg(long)]
    chat: bool,
    /// Tokens to generate at most (stops earlier at a control token: the end
    /// of the turn or of the text).
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// 0 is greedy; finite and at least 0.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Sample from the K most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Sample from the smallest set of tokens whose probability reaches P,
    /// in (0, 1] (1: all).
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// The sampler's seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Worker threads (default: every CPU).
    #[arg(long)]
    threads: Option<usize>,
    /// The most positions the KV cache may hold (at most the model's
    /// context): the prompt and --max-tokens must fit; the cache holds
    /// just those.
    #[arg(long, default_value_t = 2048)]
    context: usize,
    /// Write the prompt's logits, f32 little-endian [positions, vocab], here.
    #[arg(long)]
    logits: Option<PathBuf>,
    /// Write the generation's trace here as JSON: the prompt's token ids,
    /// the generated ids and the FNV-1a digest of the bits of every logits
    /// row a token was chosen from (`qlinear_smollm::logits_digest`), which
    /// `cargo xtask browser` compares with the page's.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Score every model on this text: perplexity (llama.cpp's way, windows
    /// of --window tokens, each window's second half scored) and the share
    /// of positions whose top-1 token is the first model's.
    #[arg(long)]
    eval: Option<PathBuf>,
    /// The tokens of the --eval or --calibrate text used (the first N; 0:
    /// the whole text, as many whole windows as it holds).
    #[arg(long, default_value_t = 4096)]
    eval_tokens: usize,
    /// The window of --eval.
    #[arg(long, default_value_t = 512)]
    window: usize,
    /// Write the --eval rows here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run the first model (a GGUF: the f32 path) over this text and write
    /// each linear's mean x² per input column to --importance-out, for
    /// `qlinear convert --recipe activation-aware --importance`, and/or the
    /// model smoothed for W8A8 to --smooth-out.
    #[arg(long)]
    calibrate: Option<PathBuf>,
    /// Where --calibrate writes the importance (safetensors, P.importance).
    #[arg(long, requires = "calibrate")]
    importance_out: Option<PathBuf>,
    /// Where --calibrate writes the model smoothed for W8A8 (SmoothQuant:
    /// each projection's input columns divided by a factor that its weight
    /// columns are multiplied by; the norm weights and the rows of ffn_up
    /// and attn_v absorb the division), as an f32 safetensors file for
    /// `qlinear convert`.
    #[arg(long, requires = "calibrate")]
    smooth_out: Option<PathBuf>,
    /// Where --calibrate writes each linear's hessian, the mean x xᵀ of its
    /// inputs (safetensors, P.hessian of [k, k] f32), for `qlinear convert
    /// --recipe gptq --hessian` (docs/NUMERICS.md §3.9). Calibrate the model
    /// you convert: a rotated one (--rotate-out) for a rotated file
    #[arg(long, requires = "calibrate")]
    hessian_out: Option<PathBuf>,
    /// Write the first model (a GGUF, or an f32 file as --smooth-out writes
    /// it) rotated for W8A8 here, an f32 safetensors file for `qlinear
    /// convert`: every projection's input and weight rows multiplied by a
    /// Hadamard matrix, which spreads the activations' large columns over
    /// all of them (the model computes the same function; a rotated file
    /// rotates its inputs as it runs).
    #[arg(long, conflicts_with_all = ["calibrate", "eval", "bench"])]
    rotate_out: Option<PathBuf>,
    /// The share of the activations' range --smooth-out moves into the
    /// weights, from 0 (none) to 1.
    #[arg(long, default_value_t = 0.5)]
    smooth_alpha: f32,
    /// Time every model: prefill of --bench-prompt tokens and decode of
    /// --bench-tokens greedy tokens, at each of --bench-threads, the models
    /// alternated in each of --repeat rounds after an untimed warm-up of
    /// each; medians and ranges, rows to --json. The prompt is the start of
    /// this text file.
    #[arg(long)]
    bench: Option<PathBuf>,
    /// Prompt tokens of --bench.
    #[arg(long, default_value_t = 128)]
    bench_prompt: usize,
    /// Generated tokens of --bench.
    #[arg(long, default_value_t = 128)]
    bench_tokens: usize,
    /// Thread counts of --bench.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    bench_threads: Vec<usize>,
    /// How a decode step spreads over the threads: `team` (every thread
    /// takes a share of every layer and they meet at a spinning barrier) or
    /// `pool` (each layer's call split over the rayon pool on its own).
    /// --bench times each one given, alternated; the other commands take
    /// the first.
    #[arg(long, value_delimiter = ',', default_value = "team")]
    decode_split: Vec<Split>,
    /// What the KV cache holds its keys and values as: `f32`, or `bf16`
    /// (half the bytes; each value rounded to nearest-even once, when it is
    /// stored). --bench times each one given, alternated (within each
    /// decode split); the other commands take the first.
    #[arg(long, value_delimiter = ',', default_value = "f32")]
    kv: Vec<KvPrecision>,
    /// Rounds of --bench.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// With --bench: time the phases of every decode step, per thread
    /// (projections, attention, waits, the LM head, the rest), and print
    /// where a token's time goes. A profiled step runs as a team, of one
    /// thread at one thread, and reads the clock 16 times a layer.
    #[arg(long, requires = "bench")]
    profile_step: bool,
    /// Where a converted file's codes are held: `in-place` (read from the
    /// file's bytes, read once into memory on transparent huge pages where
    /// the OS has them: each weight byte resident once), `packed` (copied
    /// into one region in the order a token reads them:
    /// `qlinear::pack_weights`) or `copied` (each layer's in a buffer of
    /// its own).
    #[arg(long, value_enum, default_value_t = Weights::InPlace)]
    weights: Weights,
}

/// `--weights`' values.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Weights {
    Packed,
    Copied,
    InPlace,
}

impl Weights {
    fn of(self) -> WeightMemory {
        match self {
            Weights::Packed => WeightMemory::Packed,
            Weights::Copied => WeightMemory::Copied,
            Weights::InPlace => WeightMemory::InPlace,
        }
    }

    /// The flag's value for this choice, as clap spells it.
    fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self).map_or_else(String::new, |v| v.get_name().to_string())
    }
}

/// `--decode-split`'s values.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Split {
    Team,
    Pool,
}

impl Split {
    fn of(self) -> DecodeSplit {
        match self {
            Split::Team => DecodeSplit::Team,
            Split::Pool => DecodeSplit::Pool,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Split::Team => "team",
            Split::Pool => "pool",
        }
    }
}

/// `PATH[@MODES]` (`model.safetensors@W8A8,ffn_down=W8A16`: [`Modes`]).
fn model_arg(spec: &str) -> Result<(PathBuf, Modes), String> {
    match spec.rsplit_once('@') {
        Some((path, modes)) if !modes.contains('/') => {
            let modes = modes.parse::<Modes>().map_err(|e| format!("{spec}: {e}"))?;
            Ok((PathBuf::from(path), modes))
        }
        _ => Ok((PathBuf::from(spec), Modes::default())),
    }
}

/// Opens the model of `spec` as `args` ask (`--weights`, and the first of
/// `--kv` for its caches).
fn load(spec: &str, args: &Args) -> Result<(Model, qlinear_smollm::Meta), String> {
    let (path, modes) = model_arg(spec)?;
    let mut opened = Model::open(&path, &modes, args.weights.of());
    if let (Ok((model, _)), Some(&kv)) = (&mut opened, args.kv.first()) {
        model.set_kv_precision(kv);
    }
    opened.map_err(|e| {
        // an I/O error names the path already ("m.gguf: m.gguf: No such
        // file" before)
        let (e, p) = (e.to_string(), path.display().to_string());
        if e.starts_with(&format!("{p}: ")) {
            e
        } else {
            format!("{p}: {e}")
        }
    })
}

/// The first `n` tokens of the text file `path`, or why not.
fn text_tokens(tokenizer: &Tokenizer, path: &std::path::Path, n: usize) -> Result<Vec<u32>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut ids = tokenizer.encode(&text).map_err(|e| e.to_string())?;
    if n == 0 {
        return Ok(ids);
    }
    if ids.len() < n {
        return Err(format!(
            "{}: {} tokens, fewer than the {n} asked for",
            path.display(),
            ids.len()
        ));
    }
    ids.truncate(n);
    Ok(ids)
}

/// `--calibrate`'s outputs and `--smooth-alpha`, checked before anything
/// runs: an output that is the model (or the other output) would overwrite
/// it.
fn check_calibrate_args(args: &Args) -> Result<(), String> {
    if args.importance_out.is_none() && args.smooth_out.is_none() && args.hessian_out.is_none() {
        return Err(
            "--calibrate writes --importance-out FILE, --smooth-out FILE, --hessian-out FILE or several: give one"
                .into(),
        );
    }
    if !(0.0..=1.0).contains(&args.smooth_alpha) {
        return Err(format!("--smooth-alpha {} is outside [0, 1]", args.smooth_alpha));
    }
    // neither output may be the input, nor the other output
    let input = std::path::Path::new(&args.models[0]);
    let same = same_file;
    let outs: Vec<&PathBuf> = [&args.importance_out, &args.smooth_out, &args.hessian_out]
        .into_iter()
        .flatten()
        .collect();
    for (i, out) in outs.iter().enumerate() {
        if same(out, input) || outs[..i].iter().any(|o| same(o, out)) {
            return Err(format!(
                "{}: an output of --calibrate must differ from the model and from the other outputs",
                out.display()
            ));
        }
    }
    Ok(())
}

/// Whether `a` and `b` name the same file.
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    a == b || matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
}

/// `--rotate-out`: the first model rotated ([`Model::rotate_weights`]),
/// written as f32.
fn rotate(args: &Args, out: &std::path::Path) -> Result<(), String> {
    let (mut model, meta) = load(&args.models[0], args)?;
    model.rotate_weights().map_err(|e| format!("{}: {e}", args.models[0]))?;
    model
        .write_f32(out, &meta)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    eprintln!("the model rotated for W8A8 written to {}", out.display());
    Ok(())
}

fn calibrate(args: &Args, text: &std::path::Path) -> Result<(), String> {
    let (mut model, meta) = load(&args.models[0], args)?;
    let tokenizer = Tokenizer::from_meta(&meta).map_err(|e| e.to_string())?;
    let tokens = text_tokens(&tokenizer, text, args.eval_tokens)?;
    model.start_calibration(args.hessian_out.is_some());
    let window = args.window.min(model.config.context);
    let mut cache = model.cache(window).map_err(|e| e.to_string())?;
    for chunk in tokens.chunks(window) {
        cache.clear();
        model.forward(&mut cache, chunk, false).map_err(|e| e.to_string())?;
    }
    if model.importance().is_empty() {
        return Err(format!(
            "{}: --calibrate needs the f32 path: give the GGUF file (or an f32 file, as --smooth-out writes)",
            args.models[0]
        ));
    }
    let written = |what: &str, out: &std::path::Path| {
        eprintln!(
            "the {what} of every linear over {} tokens written to {}",
            tokens.len(),
            out.display()
        );
    };
    if let Some(out) = &args.importance_out {
        model
            .write_importance(out)
            .map_err(|e| format!("{}: {e}", out.display()))?;
        written("importance", out);
    }
    if let Some(out) = &args.hessian_out {
        model
            .write_hessians(out)
            .map_err(|e| format!("{}: {e}", out.display()))?;
        written("hessian", out);
    }
    if let Some(out) = &args.smooth_out {
        model.smooth(args.smooth_alpha).map_err(|e| e.to_string())?;
        model
            .write_f32(out, &meta)
            .map_err(|e| format!("{}: {e}", out.display()))?;
        eprintln!(
            "the model smoothed over {} tokens (alpha {}) written to {}",
            tokens.len(),
            args.smooth_alpha,
            out.display()
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qlinear-smollm: error: {}", e.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    // the sampler's settings, before any model is read: a NaN or negative
    // temperature sampled from garbage or fell back to greedy unsaid
    if !(args.temperature.is_finite() && args.temperature >= 0.0) {
        return Err(format!(
            "--temperature {} must be finite and at least 0 (0 is greedy)",
            args.temperature
        ));
    }
    if !(args.top_p > 0.0 && args.top_p <= 1.0) {
        return Err(format!("--top-p {} must be in (0, 1]", args.top_p));
    }
    if args.threads == Some(0) {
        return Err("--threads 0: give at least 1, or leave it out for every CPU".into());
    }
    if args.bench_threads.contains(&0) {
        return Err("--bench-threads: a thread count of 0; give counts of at least 1".into());
    }
    if let Some(t) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .map_err(|e| e.to_string())?;
    }
    if args.calibrate.is_some() {
        check_calibrate_args(&args)?;
    }
    if let Some(out) = &args.rotate_out {
        let (input, _) = model_arg(&args.models[0])?;
        if args.models.len() > 1 || same_file(out, &input) {
            return Err(format!(
                "{}: --rotate-out writes one model's rotation to a file other than the model",
                out.display()
            ));
        }
    }
    let start = Instant::now();
    // no whole-table selftest here: opening a converted file proves and
    // plans its own census (`Model::from_converted`), a GGUF's f32 path
    // needs none, and a layer in another mode proves its family when built
    // what the process held before the model: the peak beyond it is the model's
    let before_model = peak_rss_mib();
    if let Some(text) = &args.eval {
        return score::eval(&args, text);
    }
    if let Some(text) = &args.bench {
        return bench::bench(&args, text);
    }
    if let Some(text) = &args.calibrate {
        return calibrate(&args, text);
    }
    if let Some(out) = &args.rotate_out {
        return rotate(&args, out);
    }
    if args.models.len() > 1 {
        return Err("several models are compared only with --eval or --bench".into());
    }
    let (mut model, meta) = load(&args.models[0], &args)?;
    if let Some(split) = args.decode_split.first() {
        model.set_decode_split(split.of());
    }
    // run on a pool thread: a call from outside the pool hands every layer's
    // work to it and sleeps until it is done, a wake-up a call (at one
    // thread, a tenth of the step's time went to the kernel's futex)
    match rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads.unwrap_or(0))
        .build()
    {
        Ok(pool) => pool.install(|| generate(&args, &model, &meta, start, before_model)),
        // no threads on this platform (WASI): the calling thread runs it all
        Err(_) if cfg!(target_family = "wasm") => generate(&args, &model, &meta, start, before_model),
        Err(e) => Err(e.to_string()),
    }
}

/// Generates from the prompt of `args` with `model`, streaming the text;
/// the timings to stderr (`start`: the process's, before the selftest;
/// `before_model`: the peak RSS then).
fn generate(
    args: &Args,
    model: &Model,
    meta: &qlinear_smollm::Meta,
    start: Instant,
    before_model: Option<f64>,
) -> Result<(), String> {
    let tokenizer = Tokenizer::from_meta(meta).map_err(|e| e.to_string())?;
    let ids = match (&args.ids, &args.prompt) {
        (Some(ids), None) => ids.clone(),
        (None, Some(p)) => prompt_ids(&tokenizer, p, args.chat).map_err(|e| e.to_string())?,
        _ => return Err("give the prompt as --prompt TEXT or as --ids 1,2,3 (one of them)".into()),
    };
    let loaded = start.elapsed();
    let t0 = Instant::now();
    let sampler = Sampler::new(args.temperature, args.top_k, args.top_p, args.seed);
    let record = Record {
        digests: args.trace.is_some(),
        prompt_logits: args.logits.is_some(),
    };
    let mut generation =
        Generation::start(model, &ids, args.context, args.max_tokens, sampler, record).map_err(|e| e.to_string())?;
    let prefill = t0.elapsed();
    if let (Some(path), Some(logits)) = (&args.logits, generation.prompt_logits()) {
        let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    // from the start (before the selftest and the file) to the first token
    let first_token = start.elapsed();
    let stdout = std::io::stdout();
    let t1 = Instant::now();
    while let Some(token) = generation.step(model, &tokenizer).map_err(|e| e.to_string())? {
        let mut out = stdout.lock();
        let _ = out.write_all(token.text.as_bytes());
        let _ = out.flush();
    }
    let generated = generation.generated();
    let decode = t1.elapsed();
    println!();
    if args.ids.is_some() {
        let list: Vec<String> = generated.iter().map(u32::to_string).collect();
        println!("ids: {}", list.join(","));
    }
    if let Some(path) = &args.trace {
        let digests: Vec<String> = generation
            .digests()
            .unwrap_or_default()
            .iter()
            .map(|d| format!("{d:016x}"))
            .collect();
        let body = serde_json::json!({
            "model": model.description,
            "prompt_ids": ids,
            "tokens": generated,
            "logits_digests": digests,
        });
        std::fs::write(path, body.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    eprintln!(
        "{}: loaded in {:.2} s; prefill {} tokens in {:.1} ms ({:.1} tok/s); decode {} tokens in {:.1} ms ({:.1} \
         tok/s); first token after {:.1} ms; peak RSS {} ({} before loading)",
        model.description,
        loaded.as_secs_f64(),
        ids.len(),
        prefill.as_secs_f64() * 1e3,
        ids.len() as f64 / prefill.as_secs_f64(),
        generated.len(),
        decode.as_secs_f64() * 1e3,
        generated.len() as f64 / decode.as_secs_f64().max(1e-9),
        first_token.as_secs_f64() * 1e3,
        peak_rss_mib().map_or("unknown".into(), |m| format!("{m:.1} MiB")),
        before_model.map_or("unknown".into(), |m| format!("{m:.1} MiB")),
    );
    Ok(())
}

/// The process's peak resident set so far (`VmHWM` of
/// `/proc/self/status`), MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_weights_choice_names_the_flag_value_that_parses_back_to_it() {
        for w in [Weights::Packed, Weights::Copied, Weights::InPlace] {
            let name = w.name();
            assert!(!name.is_empty());
            let args = Args::try_parse_from(["qlinear-smollm", "m.safetensors", "--weights", &name]).unwrap();
            assert!(args.weights == w, "{name}");
        }
        assert_eq!(Weights::InPlace.name(), "in-place");
    }
}
