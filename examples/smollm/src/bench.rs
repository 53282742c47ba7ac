//! `qlinear-smollm --bench`: prefill and decode speed of every model given,
//! alternated in rounds, beside a same-run read probe, with each model's
//! start-up in a fresh process (and `--profile-step`'s phases).

use std::time::Instant;

use qlinear_smollm::{time_decode, KvCache, KvPrecision, Model, Phase, StepTimes, Tokenizer};

use crate::{load, text_tokens, Args, Split};

/// `(median, min, max)`.
fn spread(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// A sequential read of 1 GiB by `threads` threads (each its own slice,
/// summed as u64 so nothing is skipped), median of 3: GB/s.
fn probe(threads: usize) -> f64 {
    let buf = vec![1u64; (1 << 30) / 8];
    let mut runs: Vec<f64> = (0..3)
        .map(|_| {
            let t = Instant::now();
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().ok();
            let sum: u64 = match pool {
                Some(p) => p.install(|| {
                    use rayon::prelude::*;
                    buf.par_chunks(buf.len() / threads).map(|c| c.iter().sum::<u64>()).sum()
                }),
                None => buf.iter().sum(),
            };
            std::hint::black_box(sum);
            (1u64 << 30) as f64 / t.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    spread(&mut runs).0
}

/// The models of a run as loaded: the argument, the model, its metadata
/// and its load time in seconds.
type Loaded = (String, Model, qlinear_smollm::Meta, f64);

/// One configuration's prefill and decode tokens/s, a value a round.
type Samples = (Vec<f64>, Vec<f64>);

/// A decode split and a KV cache type: what `--bench` alternates within a
/// model (every `--decode-split` with every `--kv`).
#[derive(Clone, Copy)]
struct Variant {
    split: Split,
    kv: KvPrecision,
}

impl Variant {
    /// Every one `args` ask for, splits outermost.
    fn all(args: &Args) -> Vec<Variant> {
        let kvs = if args.kv.is_empty() {
            vec![KvPrecision::F32]
        } else {
            args.kv.clone()
        };
        args.decode_split
            .iter()
            .flat_map(|&split| kvs.iter().map(move |&kv| Variant { split, kv }))
            .collect()
    }
}

/// Per model, variant and thread count (in that nesting): each round's
/// prefill and decode tokens/s, and the decode steps' phases
/// (`--profile-step`) summed over the rounds.
struct Rounds {
    runs: Vec<Vec<Vec<Samples>>>,
    phases: Vec<Vec<Vec<Option<StepTimes>>>>,
}

/// What every row of the report shares: the CPU, the probe at each thread
/// count, each model's fresh-process start-up (seconds to the first token,
/// peak RSS MiB) and the thread count it ran at, and the prompt.
struct Context {
    cpu: String,
    probes: Vec<f64>,
    fresh: Vec<(f64, f64)>,
    threads_max: usize,
    prompt: Vec<u32>,
}

/// `--bench`: every model timed in `args.repeat` rounds, alternated within
/// each round, then the table (and `--json`'s rows, `--profile-step`'s
/// phases).
pub(crate) fn bench(args: &Args, text: &std::path::Path) -> Result<(), String> {
    let mut models = vec![];
    for spec in &args.models {
        let t = Instant::now();
        let (model, meta) = load(spec, args)?;
        models.push((spec.clone(), model, meta, t.elapsed().as_secs_f64()));
    }
    let tokenizer = Tokenizer::from_meta(&models[0].2).map_err(|e| e.to_string())?;
    let prompt = text_tokens(&tokenizer, text, args.bench_prompt)?;
    let probes: Vec<f64> = args.bench_threads.iter().map(|&t| probe(t)).collect();
    // each model alone in a fresh process: start to first token, peak RSS
    let threads_max = args.bench_threads.iter().copied().max().unwrap_or(1);
    let fresh: Vec<(f64, f64)> = args
        .models
        .iter()
        .map(|spec| first_token(spec, &prompt, threads_max, args))
        .collect::<Result<_, _>>()?;
    let mut rounds = run_rounds(args, &mut models, &prompt)?;
    let context = Context {
        cpu: qlinear::tiers::cpu_model(),
        probes,
        fresh,
        threads_max,
        prompt,
    };
    let rows = report(args, &models, &mut rounds, &context);
    if args.profile_step {
        print_step_phases(&models, args, &rounds, &context.probes);
    }
    if let Some(path) = &args.json {
        let body = serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?;
        std::fs::write(path, body).map_err(|e| format!("{}: {e}", path.display()))?;
        // the prompt's ids, for a peer timed on the same tokens
        let ids: Vec<String> = context.prompt.iter().map(u32::to_string).collect();
        let side = path.with_extension("prompt");
        std::fs::write(&side, ids.join(",")).map_err(|e| format!("{}: {e}", side.display()))?;
        // and as text, for a peer that takes text (wllama)
        let text = tokenizer.decode(&context.prompt).map_err(|e| e.to_string())?;
        let side = path.with_extension("prompt.txt");
        std::fs::write(&side, text).map_err(|e| format!("{}: {e}", side.display()))?;
    }
    Ok(())
}

/// A pool of `n` threads; `None` for one thread on WASI, which has no
/// threads (the calling thread runs the work there).
fn pool_of(n: usize) -> Result<Option<rayon::ThreadPool>, String> {
    match rayon::ThreadPoolBuilder::new().num_threads(n).build() {
        Ok(pool) => Ok(Some(pool)),
        Err(_) if cfg!(target_family = "wasm") && n == 1 => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// The rounds, after an untimed warm-up: in each, every thread count's pool
/// runs every model in every variant in turn ([`time_model`]), in the
/// reverse order every other round.
fn run_rounds(args: &Args, models: &mut [Loaded], prompt: &[u32]) -> Result<Rounds, String> {
    let (splits, threads) = (Variant::all(args), &args.bench_threads);
    let mut r = Rounds {
        runs: vec![vec![vec![(vec![], vec![]); threads.len()]; splits.len()]; models.len()],
        phases: vec![vec![vec![None; threads.len()]; splits.len()]; models.len()],
    };
    // an untimed warm-up of every model at every thread count first (the
    // pages, the caches, the pool's threads), as llama.cpp's rounds have
    let warm_prompt = &prompt[..prompt.len().min(16)];
    for &n in threads {
        let pool = pool_of(n)?;
        for (spec, model, _, _) in models.iter() {
            let warm = || time_model(spec, model, warm_prompt, 8, false);
            match &pool {
                Some(pool) => pool.install(warm)?,
                None => warm()?,
            };
        }
    }
    for round in 0..args.repeat.max(1) {
        // every model and variant in turn, the order reversed every other
        // round (A B, B A, …): neither side always runs first
        let mut order: Vec<(usize, usize)> = (0..models.len())
            .flat_map(|mi| (0..splits.len()).map(move |si| (mi, si)))
            .collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for (ti, &n) in threads.iter().enumerate() {
            let pool = pool_of(n)?;
            for &(mi, si) in &order {
                let (spec, model, _, _) = &mut models[mi];
                model.set_decode_split(splits[si].split.of());
                model.set_kv_precision(splits[si].kv);
                let (spec, model) = (&*spec, &*model);
                let time = || time_model(spec, model, prompt, args.bench_tokens, args.profile_step);
                let (p, d, times) = match &pool {
                    Some(pool) => pool.install(time)?,
                    None => time()?,
                };
                r.runs[mi][si][ti].0.push(p);
                r.runs[mi][si][ti].1.push(d);
                if let Some(t) = times {
                    let sum = &mut r.phases[mi][si][ti];
                    *sum = Some(sum.take().map_or(t.clone(), |s| add_times(s, &t)));
                }
            }
        }
    }
    Ok(r)
}

/// Prints the table: one row per model, decode split and thread count, the
/// medians and ranges of the rounds; returns the same rows as JSON.
fn report(args: &Args, models: &[Loaded], rounds: &mut Rounds, c: &Context) -> Vec<serde_json::Value> {
    println!(
        "{}, {} rounds alternated; prompt {} tokens, {} generated",
        c.cpu,
        args.repeat,
        c.prompt.len(),
        args.bench_tokens
    );
    println!(
        "first token and peak RSS: each model alone in a fresh process at {} threads (selftest, load and \
         prefill of the prompt included)",
        c.threads_max
    );
    println!(
        "| model | layers | tier | decode split | KV | threads | prefill tok/s | decode tok/s | decode GB/s (% of probe) | \
         load s | first token s | peak RSS MiB |"
    );
    println!("|---|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|");
    let mut rows = vec![];
    for (mi, (spec, model, _, load_s)) in models.iter().enumerate() {
        let tier = model.decode_tier();
        let bytes = model.weight_bytes_per_token();
        for (si, Variant { split, kv }) in Variant::all(args).into_iter().enumerate() {
            for (ti, &threads) in args.bench_threads.iter().enumerate() {
                let run = &mut rounds.runs[mi][si][ti];
                let (p, d) = (spread(&mut run.0), spread(&mut run.1));
                let gbs = d.0 * bytes as f64 / 1e9;
                let (first_s, rss) = c.fresh[mi];
                println!(
                    "| {spec} | {} | {tier} | {} | {} | {threads} | {:.1} ({:.1}–{:.1}) | {:.1} ({:.1}–{:.1}) | {gbs:.2} ({:.0} %) | {load_s:.2} | {first_s:.2} | {rss:.1} |",
                    model.description,
                    split.name(),
                    kv.name(),
                    p.0, p.1, p.2, d.0, d.1, d.2,
                    100.0 * gbs / c.probes[ti],
                );
                rows.push(serde_json::json!({
                    "model": spec, "layers": model.description, "tier": tier, "split": split.name(),
                    "kv": kv.name(), "threads": threads, "cpu": c.cpu,
                    "prefill_tok_s": {"median": p.0, "min": p.1, "max": p.2},
                    "decode_tok_s": {"median": d.0, "min": d.1, "max": d.2},
                    "weight_bytes_per_token": bytes, "probe_gb_s": c.probes[ti], "load_s": load_s,
                    "first_token_s": first_s, "peak_rss_mib": rss, "first_token_threads": c.threads_max,
                    "prompt_tokens": c.prompt.len(), "generated_tokens": args.bench_tokens, "rounds": args.repeat,
                }));
            }
        }
    }
    rows
}

/// One round of `model`: prefill of `prompt` as one batch, then `tokens`
/// greedy decode steps (profiled with `profile`): prefill and decode tok/s,
/// and the steps' phases.
fn time_model(
    spec: &str,
    model: &Model,
    prompt: &[u32],
    tokens: usize,
    profile: bool,
) -> Result<(f64, f64, Option<StepTimes>), String> {
    let start = Instant::now();
    let now = move || start.elapsed().as_secs_f64() * 1e3;
    let mut prepare = |cache: &mut KvCache| {
        if profile {
            cache.profile_steps();
        }
    };
    let mut timed = time_decode(model, prompt, tokens, &now, &mut prepare).map_err(|e| format!("{spec}: {e}"))?;
    Ok((timed.prefill_tok_s, timed.decode_tok_s, timed.cache.take_step_times()))
}

/// Two rounds' phase times added (the same team size in both).
fn add_times(mut a: StepTimes, b: &StepTimes) -> StepTimes {
    a.steps += b.steps;
    for (x, y) in a.threads.iter_mut().zip(&b.threads) {
        for (x, y) in x.iter_mut().zip(y) {
            *x += y;
        }
    }
    a
}

/// `--profile-step`'s tables. First, per model, split, thread count and
/// thread: milliseconds a decode step in each phase (the mean over every
/// round's steps), the step, and what a decode token took beyond the step
/// (the sampler, the call and the threads' start: the profiled rounds' mean
/// token time less the thread's mean step). Then the weights each phase streams: MB a token, and
/// GB/s over the slowest thread's time in the phase, beside the same run's
/// probe at that thread count.
fn print_step_phases(models: &[Loaded], args: &Args, rounds: &Rounds, probes: &[f64]) {
    println!();
    println!("where a decode step's time goes (--profile-step): ms a token, the mean over every round's steps");
    let names: Vec<&str> = Phase::ALL.iter().map(|p| p.name()).collect();
    println!(
        "| model | decode split | KV | threads | thread | {} | step | outside the step |",
        names.join(" | ")
    );
    println!("|---|---|---|--:|--:|{}--:|--:|", "--:|".repeat(names.len()));
    let mut streamed = vec![];
    for (m, ((spec, model, ..), per_split)) in models.iter().zip(&rounds.phases).enumerate() {
        for (s, (Variant { split, kv }, per_threads)) in Variant::all(args).into_iter().zip(per_split).enumerate() {
            for (ti, (&n, times)) in args.bench_threads.iter().zip(per_threads).enumerate() {
                let Some(times) = times else { continue };
                // the mean token time over the rounds, as the steps' is a mean
                let rates = &rounds.runs[m][s][ti].1;
                let token_ms = rates.iter().map(|r| 1e3 / r).sum::<f64>() / rates.len().max(1) as f64;
                let ms = times.ms_per_step();
                for (t, ms) in ms.iter().enumerate() {
                    let total: f64 = ms.iter().sum();
                    let cells: Vec<String> = ms
                        .iter()
                        .map(|v| format!("{v:.3} ({:.0} %)", 100.0 * v / total.max(f64::MIN_POSITIVE)))
                        .collect();
                    println!(
                        "| {spec} | {} | {} | {n} | {t} | {} | {total:.3} | {:.3} |",
                        split.name(),
                        kv.name(),
                        cells.join(" | "),
                        token_ms - total
                    );
                }
                let bytes = model.weight_bytes_by_phase();
                let cells: Vec<String> = Phase::WEIGHTS
                    .iter()
                    .zip(bytes)
                    .map(|(&p, b)| {
                        let slowest = ms.iter().map(|t| t[p as usize]).fold(0.0, f64::max);
                        let gbs = b as f64 / 1e6 / slowest.max(f64::MIN_POSITIVE);
                        format!(
                            "{:.1} MB, {gbs:.1} GB/s ({:.0} %)",
                            b as f64 / 1e6,
                            100.0 * gbs / probes[ti]
                        )
                    })
                    .collect();
                streamed.push(format!(
                    "| {spec} | {} | {} | {n} | {:.1} | {} |",
                    split.name(),
                    kv.name(),
                    probes[ti],
                    cells.join(" | ")
                ));
            }
        }
    }
    println!();
    println!("the weights a decode step streams (--profile-step): MB a token, GB/s over the slowest thread's time in the phase, and its share of the probe");
    let names: Vec<&str> = Phase::WEIGHTS.iter().map(|p| p.name()).collect();
    println!(
        "| model | decode split | KV | threads | probe GB/s | {} |",
        names.join(" | ")
    );
    println!("|---|---|---|--:|--:|{}", "--:|".repeat(names.len()));
    for row in streamed {
        println!("{row}");
    }
}

/// Runs this binary on `spec` alone for one generated token after
/// `prompt`, with `threads`: its time from start to the first token
/// (selftest, loading and prefill included) in seconds and its peak RSS in
/// MiB, as it reports them. NaN for both on WASI, which runs no second
/// process (the rest of `--bench`, `--profile-step` included, runs there).
fn first_token(spec: &str, prompt: &[u32], threads: usize, args: &Args) -> Result<(f64, f64), String> {
    if cfg!(target_os = "wasi") {
        return Ok((f64::NAN, f64::NAN));
    }
    let ids: Vec<String> = prompt.iter().map(u32::to_string).collect();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .arg(spec)
        .args(["--weights", &args.weights.name()])
        .args(["--kv", args.kv.first().map_or("f32", |kv| kv.name())])
        .args([
            "--ids",
            &ids.join(","),
            "--max-tokens",
            "1",
            "--threads",
            &threads.to_string(),
        ])
        .output()
        .map_err(|e| e.to_string())?;
    let err = String::from_utf8_lossy(&out.stderr);
    let grab = |key: &str, unit: &str| -> Option<f64> {
        let at = err.find(key)? + key.len();
        err[at..].split(unit).next()?.trim().parse().ok()
    };
    match (
        out.status.success(),
        grab("first token after", "ms"),
        grab("peak RSS", "MiB"),
    ) {
        (true, Some(ms), Some(rss)) => Ok((ms / 1e3, rss)),
        _ => Err(format!("{spec}: the first-token run failed: {}", err.trim())),
    }
}
