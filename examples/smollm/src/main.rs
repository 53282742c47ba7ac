//! `qlinear-smollm MODEL --prompt TEXT`: generates text with a Llama
//! decoder. MODEL is a GGUF file (the f32 path: every weight dequantized)
//! or a file `qlinear convert` made from one (every linear layer, the LM
//! head included, a `qlinear::Linear`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use qlinear::QuantLinearMode;
use qlinear_smollm::{KvCache, Model, Sampler, Tokenizer};

#[derive(Parser)]
#[command(
    name = "qlinear-smollm",
    about = "Text generation with every linear layer through qlinear"
)]
struct Args {
    /// A GGUF file (f32 path) or a converted qlinear file.
    model: PathBuf,
    /// The prompt.
    #[arg(long)]
    prompt: Option<String>,
    /// The prompt as token ids (comma-separated) instead of text.
    #[arg(long, value_delimiter = ',')]
    ids: Option<Vec<u32>>,
    /// Wrap the prompt in the file's chat template (one user turn).
    #[arg(long)]
    chat: bool,
    /// Tokens to generate at most (stops earlier at the end-of-turn token).
    #[arg(long, default_value_t = 64)]
    max_tokens: usize,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Sample from the K most likely tokens (0: all).
    #[arg(long, default_value_t = 40)]
    top_k: usize,
    /// Sample from the smallest set of tokens whose probability reaches P.
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// The sampler's seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The mode of every quantized layer (W8A8, W4A8, W8A16, W4A16);
    /// default: each weight's own.
    #[arg(long)]
    mode: Option<String>,
    /// Worker threads (default: every CPU).
    #[arg(long)]
    threads: Option<usize>,
    /// The KV cache's positions (at most the model's context).
    #[arg(long, default_value_t = 2048)]
    context: usize,
    /// Write the prompt's logits, f32 little-endian [positions, vocab], here.
    #[arg(long)]
    logits: Option<PathBuf>,
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
    if let Some(t) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .map_err(|e| e.to_string())?;
    }
    let mode = args
        .mode
        .as_deref()
        .map(|m| m.parse::<QuantLinearMode>().map_err(|e| format!("--mode: {e}")))
        .transpose()?;
    let start = Instant::now();
    qlinear::init().map_err(|e| e.to_string())?;
    let (model, meta) = Model::open(&args.model, mode).map_err(|e| format!("{}: {e}", args.model.display()))?;
    let tokenizer = Tokenizer::from_meta(&meta).map_err(|e| e.to_string())?;
    let ids = match (&args.ids, &args.prompt) {
        (Some(ids), None) => ids.clone(),
        (None, Some(p)) => {
            let text = if args.chat {
                tokenizer.chat(p).map_err(|e| e.to_string())?
            } else {
                p.clone()
            };
            tokenizer.encode(&text).map_err(|e| e.to_string())?
        }
        _ => return Err("give the prompt as --prompt TEXT or as --ids 1,2,3 (one of them)".into()),
    };
    if ids.is_empty() {
        return Err("prompt: the prompt is empty (no tokens)".into());
    }
    let capacity = args.context.min(model.config.context);
    if ids.len() + args.max_tokens > capacity {
        return Err(format!(
            "prompt: {} prompt tokens and {} to generate exceed the context of {capacity} (--context, at most the \
             model's {})",
            ids.len(),
            args.max_tokens,
            model.config.context
        ));
    }
    let mut cache = KvCache::new(&model.config, capacity).map_err(|e| e.to_string())?;
    let loaded = start.elapsed();
    let t0 = Instant::now();
    let logits = model
        .forward(&mut cache, &ids, args.logits.is_some())
        .map_err(|e| e.to_string())?;
    let prefill = t0.elapsed();
    let vocab = model.vocab();
    if let Some(path) = &args.logits {
        let bytes: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
        std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let mut sampler = Sampler::new(args.temperature, args.top_k, args.top_p, args.seed);
    let mut next = sampler.next(&logits[logits.len() - vocab..]);
    let mut generated: Vec<u32> = vec![];
    let mut shown = 0;
    let stdout = std::io::stdout();
    let t1 = Instant::now();
    while generated.len() < args.max_tokens && next != tokenizer.eos {
        generated.push(next);
        let text = tokenizer.decode(&generated).map_err(|e| e.to_string())?;
        // print whole characters only: a token may end inside one
        if !text.ends_with('\u{FFFD}') && text.len() >= shown {
            let mut out = stdout.lock();
            let _ = out.write_all(&text.as_bytes()[shown..]);
            let _ = out.flush();
            shown = text.len();
        }
        if generated.len() == args.max_tokens {
            break;
        }
        let l = model.forward(&mut cache, &[next], false).map_err(|e| e.to_string())?;
        next = sampler.next(&l);
    }
    let decode = t1.elapsed();
    println!();
    if args.ids.is_some() {
        let list: Vec<String> = generated.iter().map(u32::to_string).collect();
        println!("ids: {}", list.join(","));
    }
    eprintln!(
        "{}: loaded in {:.2} s; prefill {} tokens in {:.1} ms ({:.1} tok/s); decode {} tokens in {:.1} ms ({:.1} tok/s)",
        model.description,
        loaded.as_secs_f64(),
        ids.len(),
        prefill.as_secs_f64() * 1e3,
        ids.len() as f64 / prefill.as_secs_f64(),
        generated.len(),
        decode.as_secs_f64() * 1e3,
        generated.len() as f64 / decode.as_secs_f64().max(1e-9),
    );
    Ok(())
}
