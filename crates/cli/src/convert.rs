//! `qlinear convert IN OUT --scheme S`: quantizes the selected 2-D `*.weight`
//! tensors of a safetensors or GGUF file (told apart by the magic), copies
//! everything else, streams the output one tensor at a time through a
//! temporary file renamed at the end. GGUF `Q4_0` weights become q4g32
//! losslessly unless `--requantize` (`docs/FORMAT.md`, "GGUF input").

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use half::{bf16, f16};
use qlinear::format::{
    encode, format_version, Dtype, RawTensor, TensorPlan, FORMAT_KEY, FORMAT_VERSION_SIGNED_GROUP_SCALES,
};
use qlinear::gguf::{dequantize_ggml, GgmlType, GgufFile, DEQUANTIZABLE};
use qlinear::{
    quantize_row_q4_grouped_weighted, quantize_row_q4_grouped_with, quantize_row_q4_weighted, quantize_row_q4_with,
    quantize_row_q8_weighted, quantize_row_q8_with, FormatError, QScheme, QuantizedFile, Recipe, RecipeError,
};
use rayon::prelude::*;
use regex::Regex;

use crate::print_out;

/// `qlinear convert`.
#[derive(clap::Args)]
pub struct Args {
    /// The input: a safetensors file (F32, F16 or BF16 weights) or a GGUF
    /// file (decided by its first bytes, not its name).
    input: PathBuf,
    /// The output file (written through a temporary file beside it).
    output: PathBuf,
    /// q8, q4, or q4g<G> (G even, e.g. q4g32).
    #[arg(long)]
    scheme: String,
    /// How scales and codes are chosen: canonical (the default), full-range
    /// (Q4 uses -8 when the negative side dominates), search (the least
    /// squared error per row or group) or activation-aware (the search with
    /// each column's error weighted by --importance); the same format
    /// either way.
    #[arg(long, default_value = "canonical")]
    recipe: String,
    /// For --recipe activation-aware: a safetensors file holding, for each
    /// quantized PREFIX.weight of shape [n, k], a tensor PREFIX.importance
    /// of shape [k] (finite, >= 0; e.g. the mean x² of each input over
    /// calibration activations, as `qlinear-minilm --calibrate` writes).
    #[arg(long)]
    importance: Option<PathBuf>,
    /// Quantize only weights whose name matches this regex (replaces the
    /// default rule that keeps embedding and position tables in float).
    #[arg(long)]
    include: Option<String>,
    /// Never quantize weights whose name matches this regex.
    #[arg(long)]
    exclude: Option<String>,
    /// REGEX=SCHEME (repeatable): weights whose name matches REGEX are
    /// quantized with SCHEME instead of --scheme (the first matching rule
    /// wins; it overrides the rule that keeps embedding tables in float and
    /// --include, not --exclude), e.g. --tensor-scheme 'token_embd=q8'.
    #[arg(long = "tensor-scheme", value_name = "REGEX=SCHEME")]
    tensor_scheme: Vec<String>,
    /// GGUF input: take Q4_0 weights through the recipe too (dequantized,
    /// then quantized), instead of importing them into q4g32 bit for bit.
    #[arg(long)]
    requantize: bool,
    /// Replace OUT if it exists (it must be a regular file, and not IN).
    #[arg(long)]
    force: bool,
}

/// Rows quantized per parallel task.
const ROWS_PER_TASK: usize = 16;

enum Entry {
    Raw(String),
    QWeight(String),
    Scales(String),
}

/// How one selected weight is quantized.
#[derive(Clone, Copy)]
struct Job {
    scheme: QScheme,
    /// A GGUF `Q4_0` weight imported into q4g32 bit for bit.
    lossless: bool,
}

#[derive(Default, Clone, Copy)]
struct Stats {
    max_abs_err: f64,
    signal: f64,
    noise: f64,
}

impl Stats {
    fn merge(self, o: Stats) -> Stats {
        Stats {
            max_abs_err: self.max_abs_err.max(o.max_abs_err),
            signal: self.signal + o.signal,
            noise: self.noise + o.noise,
        }
    }
    fn snr_db(&self) -> f64 {
        if self.noise == 0.0 {
            f64::INFINITY
        } else {
            10.0 * (self.signal / self.noise).log10()
        }
    }
}

struct Quantized {
    qweight: Vec<u8>,
    scales: Vec<u8>,
    stats: Stats,
}

/// `qlinear convert`: the exit code, or the one-line error to print.
pub fn run(args: Args) -> Result<ExitCode, String> {
    let start = Instant::now();
    let mut options = Options::parse(&args.scheme, args.include.as_deref(), args.exclude.as_deref())?
        .with_recipe(&args.recipe)?
        .with_tensor_schemes(&args.tensor_scheme)?
        .with_requantize(args.requantize);
    if let Some(path) = &args.importance {
        options = options.with_importance(open(path)?, &path.display().to_string());
    }
    options.check()?;
    let input = Input::open(&args.input)?;
    check_output(&args.input, &args.output, args.force)?;
    let progress = std::io::stderr().is_terminal();
    let label = args.input.display().to_string();
    let report = convert(&input, &label, &options, progress, |meta, plans, produce| {
        qlinear::format::write_streaming(&args.output, meta, plans, produce)
    })?;
    let secs = start.elapsed().as_secs_f64();
    let lines = format!(
        "{}total: {} -> {} bytes quantized in {secs:.2} s ({:.2} GB/s of input); written to {}\n",
        report.lines,
        report.quantized_in,
        report.quantized_out,
        report.quantized_in as f64 / secs / 1e9,
        esc(&args.output.display().to_string())
    );
    print_out(&lines)?;
    Ok(ExitCode::SUCCESS)
}

/// What a conversion does, whatever the bytes come from or go to.
pub struct Options {
    scheme: QScheme,
    recipe: Recipe,
    include: Option<Regex>,
    exclude: Option<Regex>,
    /// `--tensor-scheme` rules, in order.
    tensor_schemes: Vec<(Regex, QScheme)>,
    /// `--requantize`.
    requantize: bool,
    /// The importance file and its name in messages.
    importance: Option<(QuantizedFile, String)>,
}

/// The default rule: weights whose name contains one of these are embedding
/// or position tables (looked up, not multiplied), kept in float unless
/// `--include` or a `--tensor-scheme` rule chooses otherwise. `token_embd`
/// is GGUF's name for the token embedding.
pub const KEEP_FLOAT: [&str; 6] = ["embed", "token_embd", "wte", "wpe", "position", "token_type"];

impl Options {
    /// The scheme and the `--include` / `--exclude` regexes, as the command
    /// line gives them; each refusal names the flag.
    pub fn parse(scheme: &str, include: Option<&str>, exclude: Option<&str>) -> Result<Options, String> {
        let scheme: QScheme = scheme.parse().map_err(|e: RecipeError| format!("--scheme: {e}"))?;
        let regex = |r: Option<&str>, flag: &str| {
            r.map(Regex::new)
                .transpose()
                .map_err(|e| format!("{flag}: invalid regex: {}", e.to_string().lines().last().unwrap_or("")))
        };
        Ok(Options {
            scheme,
            recipe: Recipe::Canonical,
            include: regex(include, "--include")?,
            exclude: regex(exclude, "--exclude")?,
            tensor_schemes: vec![],
            requantize: false,
            importance: None,
        })
    }

    /// The same options with `--tensor-scheme` rules, each `REGEX=SCHEME`
    /// (split at the last `=`); a refusal names the rule.
    pub fn with_tensor_schemes(mut self, rules: &[String]) -> Result<Options, String> {
        for rule in rules {
            let (re, scheme) = rule.rsplit_once('=').ok_or_else(|| {
                format!(
                    "--tensor-scheme {}: expected REGEX=SCHEME, e.g. 'token_embd=q8'",
                    esc(rule)
                )
            })?;
            let scheme: QScheme = scheme
                .parse()
                .map_err(|e: RecipeError| format!("--tensor-scheme {}: {e}", esc(rule)))?;
            let re = Regex::new(re).map_err(|e| {
                format!(
                    "--tensor-scheme {}: invalid regex: {}",
                    esc(rule),
                    e.to_string().lines().last().unwrap_or("")
                )
            })?;
            self.tensor_schemes.push((re, scheme));
        }
        Ok(self)
    }

    /// The same options with `--requantize` set to `on`.
    pub fn with_requantize(mut self, on: bool) -> Options {
        self.requantize = on;
        self
    }

    /// The same options with the importance file `file` (`--importance`,
    /// named `label` in messages), for the activation-aware recipe.
    pub fn with_importance(mut self, file: QuantizedFile, label: &str) -> Options {
        self.importance = Some((file, label.to_string()));
        self
    }

    /// The recipe and the importance file agree: activation-aware needs
    /// one, and no other recipe reads it.
    pub fn check(&self) -> Result<(), String> {
        match (self.recipe, &self.importance) {
            (Recipe::ActivationAware, None) => Err(
                "--recipe activation-aware needs --importance FILE (a PREFIX.importance of [k] per quantized \
                 PREFIX.weight)"
                    .into(),
            ),
            (r, Some(_)) if r != Recipe::ActivationAware => Err(format!(
                "--importance is read only by --recipe activation-aware, not by --recipe {r}"
            )),
            _ => Ok(()),
        }
    }

    /// The same options with the recipe named `recipe` (`--recipe`).
    pub fn with_recipe(mut self, recipe: &str) -> Result<Options, String> {
        self.recipe = recipe.parse().map_err(|e: RecipeError| format!("--recipe: {e}"))?;
        Ok(self)
    }
}

/// What [`convert`] did: one line per kept or quantized weight, and the bytes
/// quantized in and out.
pub struct Report {
    /// Printable lines (names escaped).
    pub lines: String,
    /// Bytes of the float weights that were quantized.
    pub quantized_in: usize,
    /// Bytes of their `qweight` and `scales`.
    pub quantized_out: usize,
}

/// The producer a sink calls for each planned tensor, in order.
pub type Produce<'a> = dyn FnMut(usize, &mut dyn Write) -> Result<(), FormatError> + 'a;

/// What `qlinear convert` reads: a safetensors file or a GGUF file, told
/// apart by the first bytes (`GGUF`), not by the name.
pub enum Input {
    /// A safetensors file: F32, F16 and BF16 weights are quantized, every
    /// other tensor is copied as it is.
    Safetensors(QuantizedFile),
    /// A GGUF file: weights of a type in [`DEQUANTIZABLE`] are quantized
    /// from their f32 values (or, `Q4_0` to q4g32, imported bit for bit),
    /// other tensors of those types are written as F32, integer tensors
    /// as they are.
    Gguf(GgufFile),
}

/// One input tensor as the converter sees it.
struct Source {
    name: String,
    /// Row-major (`[out, in]` for a linear weight; GGUF's dimensions reversed).
    shape: Vec<usize>,
    /// Its type as the report names it (`F16`, `Q4_1`).
    what: String,
    /// Its values can be decoded to f32, so it may be quantized.
    float: bool,
    /// Its bytes in the input.
    bytes: usize,
}

impl Input {
    /// Opens `path` as GGUF if it starts with `GGUF`, else as safetensors;
    /// the message names the path once. A path that is not a regular file
    /// is left to the safetensors reader, which says what it is.
    pub fn open(path: &std::path::Path) -> Result<Input, String> {
        let is_gguf = std::fs::metadata(path).is_ok_and(|m| m.is_file()) && {
            let mut magic = [0u8; 4];
            std::fs::File::open(path)
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
                .is_ok()
                && qlinear::gguf::is_gguf(&magic)
        };
        if !is_gguf {
            return open(path).map(Input::Safetensors);
        }
        GgufFile::open(path)
            .map(Input::Gguf)
            .map_err(|e| esc(&format!("{}: {e}", path.display())))
    }

    /// Parses a file held in memory, GGUF or safetensors by its magic.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Input, FormatError> {
        if qlinear::gguf::is_gguf(&bytes) {
            GgufFile::from_bytes(bytes).map(Input::Gguf)
        } else {
            QuantizedFile::from_bytes(bytes).map(Input::Safetensors)
        }
    }

    fn sources(&self) -> Vec<Source> {
        match self {
            Input::Safetensors(f) => f
                .tensor_names()
                .iter()
                .filter_map(|name| {
                    let raw = f.raw(name)?;
                    Some(Source {
                        name: name.clone(),
                        shape: raw.shape.to_vec(),
                        what: format!("{:?}", raw.dtype),
                        float: matches!(raw.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16),
                        bytes: raw.data.len(),
                    })
                })
                .collect(),
            Input::Gguf(f) => f
                .tensors()
                .iter()
                .map(|t| Source {
                    name: t.name.clone(),
                    shape: t.shape(),
                    what: t.ggml_type.to_string(),
                    float: DEQUANTIZABLE.contains(&t.ggml_type),
                    bytes: t.n_bytes,
                })
                .collect(),
        }
    }

    /// The output dtype of a tensor copied without quantizing: a safetensors
    /// tensor keeps its own, a decodable GGUF one becomes F32, a GGUF
    /// integer or F64 one keeps its type; any other GGUF type is refused.
    fn kept_dtype(&self, name: &str) -> Result<Dtype, String> {
        match self {
            Input::Safetensors(f) => f
                .raw(name)
                .map(|r| r.dtype)
                .ok_or_else(|| format!("{}: vanished from the header", esc(name))),
            Input::Gguf(f) => {
                let ty = f
                    .tensor(name)
                    .map(|t| t.ggml_type)
                    .ok_or_else(|| format!("{}: vanished from the header", esc(name)))?;
                Ok(match ty {
                    t if DEQUANTIZABLE.contains(&t) => Dtype::F32,
                    GgmlType::I8 => Dtype::I8,
                    GgmlType::I16 => Dtype::I16,
                    GgmlType::I32 => Dtype::I32,
                    GgmlType::I64 => Dtype::I64,
                    GgmlType::F64 => Dtype::F64,
                    other => {
                        return Err(format!(
                            "{}: GGUF type {other}, which this converter cannot decode (it decodes {}); no output \
                             written",
                            esc(name),
                            DEQUANTIZABLE.map(|t| t.to_string()).join(", ")
                        ))
                    }
                })
            }
        }
    }

    /// Writes a copied tensor's bytes (see [`Input::kept_dtype`]).
    fn write_kept(&self, name: &str, out: &mut dyn Write) -> Result<(), FormatError> {
        let io = |e: std::io::Error| FormatError::Unsupported {
            tensor: name.into(),
            reason: format!("cannot write: {e}"),
        };
        match self {
            Input::Safetensors(f) => out
                .write_all(f.raw(name).map(|r| r.data).unwrap_or_default())
                .map_err(io),
            Input::Gguf(f) => {
                let info = f
                    .tensor(name)
                    .ok_or_else(|| FormatError::MissingTensor { tensor: name.into() })?;
                if info.ggml_type != GgmlType::F32 && DEQUANTIZABLE.contains(&info.ggml_type) {
                    let v = f.tensor_f32(name)?;
                    out.write_all(&encode::f32s(&v)).map_err(io)
                } else {
                    out.write_all(f.tensor_data(info)).map_err(io)
                }
            }
        }
    }

    /// Row `r` (of `k` values) of the 2-D float tensor `name`, as f32.
    fn row_f32(&self, name: &str, r: usize, k: usize, out: &mut Vec<f32>) -> Result<(), String> {
        match self {
            Input::Safetensors(f) => {
                let raw = f.raw(name).ok_or_else(|| format!("{}: vanished", esc(name)))?;
                let elem = raw.dtype.bitsize() / 8;
                decode_row(&raw, &raw.data[r * k * elem..(r + 1) * k * elem], out);
                Ok(())
            }
            Input::Gguf(f) => {
                let info = f.tensor(name).ok_or_else(|| format!("{}: vanished", esc(name)))?;
                let data = f.tensor_data(info);
                let rows = info.shape().first().copied().unwrap_or(1).max(1);
                let row_bytes = data.len() / rows;
                out.clear();
                out.resize(k, 0.0);
                dequantize_ggml(name, info.ggml_type, &data[r * row_bytes..(r + 1) * row_bytes], out)
                    .map_err(|e| esc(&e.to_string()))
            }
        }
    }

    /// A GGUF `Q4_0` weight whose blocks can go to q4g32 unchanged.
    fn is_q4_0(&self, name: &str) -> bool {
        matches!(self, Input::Gguf(f) if f.tensor(name).is_some_and(|t| t.ggml_type == GgmlType::Q4_0))
    }

    /// Whether the imported `Q4_0` weight `name` holds a negative block
    /// scale (sign set, not −0.0): the output must then say version 2.
    fn q4_0_has_negative_scale(&self, name: &str) -> bool {
        let Input::Gguf(f) = self else { return false };
        f.tensor(name).is_some_and(|t| {
            f.tensor_data(t).chunks_exact(GgmlType::Q4_0.block_bytes()).any(|b| {
                let bits = u16::from_le_bytes([b[0], b[1]]);
                bits & 0x8000 != 0 && bits != 0x8000
            })
        })
    }

    /// The output's metadata before the qlinear keys: a safetensors input's
    /// own map; a GGUF input's key/values as `gguf.KEY` = the value's JSON
    /// text (`docs/FORMAT.md`, "GGUF input").
    fn metadata(&self) -> HashMap<String, String> {
        match self {
            Input::Safetensors(f) => f.metadata_map().clone(),
            Input::Gguf(f) => f
                .metadata()
                .iter()
                .map(|(k, v)| (format!("{GGUF_KEY_PREFIX}{k}"), v.to_json()))
                .collect(),
        }
    }
}

/// The prefix of the metadata keys that carry a GGUF input's key/values.
pub const GGUF_KEY_PREFIX: &str = "gguf.";

/// Converts `input` (named `label` in messages): checks it, plans the output,
/// and hands `sink` the metadata, the plans and the producer, which quantizes
/// tensor i + 1 while tensor i is written. The sink is
/// `write_streaming` for a file, `write_to` for memory.
pub fn convert(
    input: &Input,
    label: &str,
    options: &Options,
    progress: bool,
    sink: impl FnOnce(HashMap<String, String>, &[TensorPlan], &mut Produce<'_>) -> Result<(), FormatError>,
) -> Result<Report, String> {
    options.check()?;
    let negative_scale = check_copied(input, label)?;
    let plan = plan_output(input, label, options, negative_scale)?;
    quantize_and_write(input, plan, options.recipe, progress, sink)
}

/// The output's plan: its metadata, every tensor's plan in output order
/// (with where its bytes come from), the weights to quantize and how, their
/// importance, the notes on weights kept as they are, and the input bytes
/// to quantize.
struct Plan {
    meta: HashMap<String, String>,
    plans: Vec<(TensorPlan, Entry)>,
    jobs: HashMap<String, Job>,
    importances: HashMap<String, Vec<f32>>,
    sources: HashMap<String, Source>,
    notes: String,
    total_in: usize,
}

/// Stage 1: qlinear tensors already in the input are copied through only if
/// they validate (the output must pass the same check). Returns whether a
/// copied q4g weight has a negative group scale (the output is then
/// version 2 too).
fn check_copied(input: &Input, label: &str) -> Result<bool, String> {
    let mut negative_scale = false;
    if let Input::Safetensors(file) = input {
        for (prefix, result) in file.validate() {
            if let Err(e) = result {
                return Err(format!(
                    "{}: the input already holds qlinear tensors or metadata for {} that do not validate ({}); \
                     convert the original model instead",
                    label,
                    esc(&prefix),
                    esc(&e.to_string())
                ));
            }
            // a version 2 input's negative q4g scales are copied: say 2 too
            if file.metadata_map().get(FORMAT_KEY).map(String::as_str) == Some(FORMAT_VERSION_SIGNED_GROUP_SCALES) {
                if let Ok(qlinear::QuantizedWeight::Q4(w)) = file.load(&prefix) {
                    negative_scale |= w.negative_group_scale().is_some();
                }
            }
        }
    }
    Ok(negative_scale)
}

/// Stage 2: which tensors are quantized, with which scheme and recipe, and
/// which are kept; the output's metadata and tensor plans.
fn plan_output(input: &Input, label: &str, options: &Options, negative_scale: bool) -> Result<Plan, String> {
    let Options {
        scheme: default_scheme,
        recipe,
        include,
        exclude,
        tensor_schemes,
        requantize,
        importance,
    } = options;
    let mut negative_scale = negative_scale;
    let mut importances: HashMap<String, Vec<f32>> = HashMap::new();
    let mut meta: HashMap<String, String> = input.metadata();
    let mut plans: Vec<(TensorPlan, Entry)> = vec![];
    let mut jobs: HashMap<String, Job> = HashMap::new();
    let mut total_in = 0usize;
    let mut notes = String::new();
    // listed once: the loop plans, the quantizer thread and the writer read it
    let sources: HashMap<String, Source> = input.sources().into_iter().map(|s| (s.name.clone(), s)).collect();
    let mut listed: Vec<&Source> = sources.values().collect();
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    for src in listed {
        let name = src.name.clone();
        let rule = tensor_schemes.iter().find(|(r, _)| r.is_match(&name)).map(|r| r.1);
        let table = include.is_none() && rule.is_none() && KEEP_FLOAT.iter().any(|t| name.contains(t));
        let wanted = name.ends_with(".weight")
            && (rule.is_some() || include.as_ref().is_none_or(|r| r.is_match(&name)))
            && !exclude.as_ref().is_some_and(|r| r.is_match(&name));
        if wanted && table {
            notes += &format!(
                "{}  kept in float by the default rule (names containing {}; --include or --tensor-scheme replaces \
                 the rule)\n",
                esc(&name),
                KEEP_FLOAT.join(", ")
            );
        }
        let wanted = wanted && !table;
        let selected = wanted && src.shape.len() == 2 && src.float;
        if wanted && !selected {
            notes += &format!(
                "{}  {} {:?}  kept as it is: only 2-D float weights are quantized\n",
                esc(&name),
                src.what,
                src.shape,
            );
        }
        if !selected {
            plans.push((
                TensorPlan {
                    name: name.clone(),
                    dtype: input.kept_dtype(&name)?,
                    shape: src.shape.clone(),
                },
                Entry::Raw(name),
            ));
            continue;
        }
        let scheme = rule.unwrap_or(*default_scheme);
        let prefix = name.strip_suffix(".weight").unwrap_or(&name).to_string();
        let (n, k) = (src.shape[0], src.shape[1]);
        if let QScheme::Q4Grouped(g) = scheme {
            qlinear::GroupSize::Group(g)
                .validate(k)
                .map_err(|e| format!("{}: {e}", esc(&name)))?;
        }
        for other in ["qweight", "scales"] {
            if sources.contains_key(&format!("{prefix}.{other}")) {
                return Err(format!(
                    "{}: the input already has {}.{other}",
                    esc(&name),
                    esc(&prefix)
                ));
            }
        }
        let lossless = !requantize && scheme == QScheme::Q4Grouped(32) && input.is_q4_0(&name);
        if let (Some((file, flabel)), false) = (importance, lossless) {
            importances.insert(name.clone(), importance_of(file, flabel, &prefix, &name, k)?);
        }
        negative_scale |= lossless && input.q4_0_has_negative_scale(&name);
        total_in += src.bytes;
        let ([qp, sp], keys) = TensorPlan::quantized(scheme, &prefix, n, k);
        // which recipe chose the codes; readers ignore it (docs/FORMAT.md)
        let how = if lossless {
            format!("gguf:{}", src.what)
        } else {
            recipe.to_string()
        };
        meta.insert(format!("{prefix}.qrecipe"), how);
        meta.extend(keys);
        jobs.insert(name.clone(), Job { scheme, lossless });
        plans.push((qp, Entry::QWeight(name.clone())));
        plans.push((sp, Entry::Scales(name)));
    }
    meta.insert(FORMAT_KEY.into(), format_version(negative_scale).into());
    plans.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    if jobs.is_empty() {
        let kept = notes.lines().count();
        return Err(format!(
            "{label}: nothing to quantize (no 2-D float *.weight tensor matches the filters; {kept} *.weight kept \
             as they are); no output written"
        ));
    }

    Ok(Plan {
        meta,
        plans,
        jobs,
        importances,
        sources,
        notes,
        total_in,
    })
}

/// Stage 3: quantizes the planned weights and hands the output to `sink`,
/// tensor i + 1 quantized while tensor i is written; the report's lines.
fn quantize_and_write(
    input: &Input,
    plan: Plan,
    recipe: qlinear::Recipe,
    progress: bool,
    sink: impl FnOnce(HashMap<String, String>, &[TensorPlan], &mut Produce<'_>) -> Result<(), FormatError>,
) -> Result<Report, String> {
    let Plan {
        meta,
        plans,
        jobs,
        importances,
        sources,
        notes,
        total_in,
    } = plan;
    let bar = if progress {
        let bar = indicatif::ProgressBar::new(total_in as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {msg}")
                .map_err(|e| e.to_string())?,
        );
        Some(bar)
    } else {
        None
    };
    // Quantize tensor i + 1 while tensor i is written: a producer thread walks
    // the quantized tensors in output order and hands each over a channel of
    // depth 1, so at most two tensors' outputs are in memory at once.
    let order: Vec<String> = {
        let mut seen = std::collections::HashSet::new();
        plans
            .iter()
            .filter_map(|p| match &p.1 {
                Entry::QWeight(n) | Entry::Scales(n) => seen.insert(n.clone()).then(|| n.clone()),
                Entry::Raw(_) => None,
            })
            .collect()
    };
    let mut lines = String::new();
    let (mut total_out, mut total_q_in) = (0usize, 0usize);
    let just_plans: Vec<TensorPlan> = plans.iter().map(|p| p.0.clone()).collect();
    let result = std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(String, Result<Quantized, String>)>(1);
        let (bar, importances, jobs, sources) = (&bar, &importances, &jobs, &sources);
        scope.spawn(move || {
            for name in order {
                let (Some(src), Some(job)) = (sources.get(&name), jobs.get(&name)) else {
                    break;
                };
                if let Some(bar) = bar {
                    bar.set_message(name.clone());
                }
                let (n, k) = (src.shape[0], src.shape[1]);
                let q = if job.lossless {
                    import_q4_0(input, &name)
                } else {
                    let rows = |r: usize, out: &mut Vec<f32>| input.row_f32(&name, r, k, out);
                    quantize_tensor(
                        n,
                        k,
                        &rows,
                        job.scheme,
                        recipe,
                        importances.get(&name).map(Vec::as_slice),
                    )
                };
                if let Some(bar) = bar {
                    bar.inc(src.bytes as u64);
                }
                let failed = q.is_err();
                // a closed channel means the writer stopped: nothing more to do
                if tx.send((name, q)).is_err() || failed {
                    break;
                }
            }
        });
        let mut current: Option<(String, Quantized)> = None;
        sink(meta, &just_plans, &mut |i, out| {
            let io = |e: std::io::Error| FormatError::Unsupported {
                tensor: plans[i].0.name.clone(),
                reason: format!("cannot write: {e}"),
            };
            let fail = |tensor: &str, reason: String| FormatError::Unsupported {
                tensor: tensor.to_string(),
                reason,
            };
            match &plans[i].1 {
                Entry::Raw(name) => input.write_kept(name, out),
                Entry::QWeight(name) | Entry::Scales(name) => {
                    if current.as_ref().is_none_or(|c| &c.0 != name) {
                        let (got, q) = rx.recv().map_err(|_| fail(name, "quantizer stopped".into()))?;
                        let q = q.map_err(|reason| fail(&got, reason))?;
                        let (src, job) = match (sources.get(name), jobs.get(name)) {
                            (Some(s), Some(j)) => (s, j),
                            _ => return Err(fail(name, "vanished".into())),
                        };
                        let (n, k) = (src.shape[0], src.shape[1]);
                        let out_bytes = q.qweight.len() + q.scales.len();
                        total_out += out_bytes;
                        total_q_in += src.bytes;
                        let scheme = job.scheme;
                        lines += &if job.lossless {
                            format!(
                                "{}  [{n}, {k}]  {scheme} imported losslessly from {} (every code and scale bit \
                                 kept)  {} -> {out_bytes} bytes\n",
                                esc(name),
                                src.what,
                                src.bytes,
                            )
                        } else {
                            let from = match input {
                                Input::Gguf(_) => format!(" from {} (dequantized, then requantized)", src.what),
                                Input::Safetensors(_) => String::new(),
                            };
                            format!(
                                "{}  [{n}, {k}]  {scheme} {recipe}{from}  {} -> {out_bytes} bytes  max|err| {:.3e}  \
                                 SNR {:.1} dB\n",
                                esc(name),
                                src.bytes,
                                q.stats.max_abs_err,
                                q.stats.snr_db()
                            )
                        };
                        current = Some((got, q));
                    }
                    let Some((_, q)) = current.as_ref() else {
                        return Err(fail(name, "no tensor".into()));
                    };
                    let is_qweight = matches!(plans[i].1, Entry::QWeight(_));
                    out.write_all(if is_qweight { &q.qweight } else { &q.scales })
                        .map_err(io)
                }
            }
        })
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    result.map_err(|e| esc(&e.to_string()))?;
    Ok(Report {
        lines: notes + &lines,
        quantized_in: total_q_in,
        quantized_out: total_out,
    })
}

/// A GGUF `Q4_0` weight as q4g32 bytes, bit for bit (`docs/FORMAT.md`,
/// "GGUF input"): the error statistics are zero by construction.
fn import_q4_0(input: &Input, name: &str) -> Result<Quantized, String> {
    let Input::Gguf(f) = input else {
        return Err(format!("{}: not a GGUF tensor", esc(name)));
    };
    let w = f.q4g32_from_q4_0(name).map_err(|e| esc(&e.to_string()))?;
    let [qweight, scales] = encode::quantized(&qlinear::QuantizedWeight::Q4(w));
    Ok(Quantized {
        qweight,
        scales,
        stats: Stats::default(),
    })
}

/// The whole conversion in memory: `input` bytes to the output file's bytes,
/// checked exactly as a file is (read back and every quantized tensor
/// validated). What the `convert` fuzz target runs.
pub fn convert_bytes(input: Vec<u8>, options: &Options) -> Result<Vec<u8>, String> {
    let file = Input::from_bytes(input).map_err(|e| esc(&format!("input: {e}")))?;
    let mut out = Vec::new();
    convert(&file, "input", options, false, |meta, plans, produce| {
        let io = |e: std::io::Error| FormatError::Unsupported {
            tensor: "output".into(),
            reason: e.to_string(),
        };
        qlinear::format::write_to(&mut out, &meta, plans, produce, &io)
    })?;
    let back = QuantizedFile::from_bytes(out.clone()).map_err(|e| format!("output: {e}"))?;
    for (prefix, result) in back.validate() {
        result.map_err(|e| format!("output {}: {e}", esc(&prefix)))?;
    }
    Ok(out)
}

/// `rows * row_bytes` zero bytes, or "too large for this machine" when the
/// product overflows or the allocation fails (nothing is allocated then).
fn zeroed(rows: usize, row_bytes: usize, what: &str) -> Result<Vec<u8>, String> {
    let too_large = || format!("{what} ([{rows}] rows of {row_bytes} bytes) is too large for this machine");
    let len = rows.checked_mul(row_bytes).ok_or_else(too_large)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| too_large())?;
    v.resize(len, 0);
    Ok(v)
}

/// A name or message as it may be printed: control characters (a newline,
/// ESC) escaped, so a crafted tensor name cannot forge or hide output lines.
pub fn esc(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Opens a safetensors file; the message names the path once.
pub fn open(path: &std::path::Path) -> Result<QuantizedFile, String> {
    QuantizedFile::open(path).map_err(|e| match e {
        FormatError::Io { .. } | FormatError::NotARegularFile { .. } => esc(&e.to_string()),
        e => esc(&format!("{}: {e}", path.display())),
    })
}

/// OUT may not be IN (by identity: the same file through any path, hard or
/// symbolic link), and may exist only with `--force` (then it must be a
/// regular file, which the writer checks again).
fn check_output(input: &std::path::Path, output: &std::path::Path, force: bool) -> Result<(), String> {
    let Ok(out) = std::fs::metadata(output) else {
        return Ok(());
    };
    let inp = std::fs::metadata(input).map_err(|e| format!("{}: {e}", input.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if (out.dev(), out.ino()) == (inp.dev(), inp.ino()) {
            return Err(format!(
                "{} is the input file {} (the same file): refusing to overwrite the input",
                output.display(),
                input.display()
            ));
        }
    }
    #[cfg(not(unix))]
    if std::fs::canonicalize(input).ok() == std::fs::canonicalize(output).ok() {
        return Err(format!(
            "{} is the input file: refusing to overwrite it",
            output.display()
        ));
    }
    let _ = inp;
    if out.is_dir() {
        return Err(format!(
            "{}: is a directory; give the output file's path (e.g. {}), nothing was written",
            output.display(),
            output.join("model.safetensors").display()
        ));
    }
    if !out.is_file() {
        return Err(format!(
            "{}: exists and is {}, not a regular file; it is left as it is",
            output.display(),
            qlinear::format::file_kind(&out)
        ));
    }
    if !force {
        return Err(format!("{}: exists; pass --force to replace it", output.display()));
    }
    Ok(())
}

/// Widens one input row to f32 (exact for F16 and BF16).
fn decode_row(raw: &RawTensor<'_>, bytes: &[u8], out: &mut Vec<f32>) {
    out.clear();
    match raw.dtype {
        Dtype::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        Dtype::F16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()),
        ),
        _ => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()),
        ),
    }
}

/// `PREFIX.importance` from the importance file: `[k]` floats, finite and
/// `>= 0` (checked again by the recipe, which names the column).
fn importance_of(file: &QuantizedFile, label: &str, prefix: &str, weight: &str, k: usize) -> Result<Vec<f32>, String> {
    let name = format!("{prefix}.importance");
    let raw = file.raw(&name).ok_or_else(|| {
        format!(
            "{}: the importance file {} has no tensor {} (a [{k}] float vector for the activation-aware recipe)",
            esc(weight),
            esc(label),
            esc(&name)
        )
    })?;
    if !matches!(raw.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) || raw.shape != [k] {
        return Err(format!(
            "{}: {} in {} is {:?} {:?}; expected a float vector of [{k}] (the weight's in_features)",
            esc(weight),
            esc(&name),
            esc(label),
            raw.dtype,
            raw.shape
        ));
    }
    let mut v = Vec::with_capacity(k);
    decode_row(&raw, raw.data, &mut v);
    if let Some((col, x)) = v.iter().enumerate().find(|(_, x)| !(x.is_finite() && **x >= 0.0)) {
        return Err(format!(
            "{}: {} in {} holds {x} at column {col}; importance must be finite and >= 0",
            esc(weight),
            esc(&name),
            esc(label)
        ));
    }
    Ok(v)
}

/// Decodes row `r` of a weight into f32 values (cleared first).
type RowSource<'a> = dyn Fn(usize, &mut Vec<f32>) -> Result<(), String> + Sync + 'a;

/// Quantizes one `[n, k]` tensor, whose row `r` `rows` decodes to f32, with
/// `recipe` (weighted by `importance` for activation-aware), rows in
/// parallel, into its on-disk `qweight` and `scales` bytes.
fn quantize_tensor(
    n: usize,
    k: usize,
    rows: &RowSource<'_>,
    scheme: QScheme,
    recipe: Recipe,
    importance: Option<&[f32]>,
) -> Result<Quantized, String> {
    let [qshape, sshape] = scheme.shapes(n, k);
    let q_row = qshape[1];
    let s_row =
        if sshape.len() == 2 { sshape[1] } else { 1 } * if matches!(scheme, QScheme::Q4Grouped(_)) { 2 } else { 4 };
    let mut qweight = zeroed(n, q_row, "its qweight")?;
    let mut scales = zeroed(n, s_row, "its scales")?;
    if n == 0 || k == 0 {
        return Ok(Quantized {
            qweight,
            scales,
            stats: Stats::default(),
        });
    }
    let tasks: Vec<Result<Stats, String>> = qweight
        .par_chunks_mut((q_row * ROWS_PER_TASK).max(1))
        .zip(scales.par_chunks_mut((s_row * ROWS_PER_TASK).max(1)))
        .enumerate()
        .map(|(t, (qw, sc))| {
            let mut w = Vec::with_capacity(k);
            let mut stats = Stats::default();
            let mut codes = vec![0i8; k];
            let mut gscales = vec![f16::ZERO; if let QScheme::Q4Grouped(g) = scheme { k / g } else { 0 }];
            let mut deq: Vec<f32> = Vec::with_capacity(k + 1);
            for j in 0..ROWS_PER_TASK.min(n - t * ROWS_PER_TASK) {
                let r = t * ROWS_PER_TASK + j;
                rows(r, &mut w)?;
                let at = |e: RecipeError| match e {
                    RecipeError::NonFinite { col, value, .. } => format!("non-finite value {value} at row {r}, column {col}"),
                    RecipeError::ScaleOverflow { group, col_start, col_end, amax, .. } => format!(
                        "f16 scale overflow at row {r}, group {group} (columns {col_start}..{col_end}): max |w| = {amax}"
                    ),
                    e => format!("row {r}: {e}"),
                };
                let qw = &mut qw[j * q_row..(j + 1) * q_row];
                let sc = &mut sc[j * s_row..(j + 1) * s_row];
                match scheme {
                    QScheme::Q8 => {
                        // the recipe alone: a converter needs no selftest or plan
                        let s = match importance {
                            Some(a) => quantize_row_q8_weighted(&w, a, &mut codes),
                            None => quantize_row_q8_with(recipe, &w, &mut codes),
                        }
                        .map_err(at)?;
                        encode::q8_row(&codes, s, qw, sc).map_err(|e| e.to_string())?;
                        deq.clear();
                        deq.extend(codes.iter().map(|&c| f32::from(c) * s));
                        stats = stats.merge(row_stats(&w, &deq));
                    }
                    QScheme::Q4 => {
                        let s = match importance {
                            Some(a) => quantize_row_q4_weighted(&w, a, qw),
                            None => quantize_row_q4_with(recipe, &w, qw),
                        }
                        .map_err(at)?;
                        unpack_row_f32(qw, k, &mut deq);
                        deq.iter_mut().for_each(|d| *d *= s);
                        stats = stats.merge(row_stats(&w, &deq));
                        encode::q4_row(s, qw, sc).map_err(|e| e.to_string())?;
                    }
                    QScheme::Q4Grouped(g) => {
                        match importance {
                            Some(a) => quantize_row_q4_grouped_weighted(&w, a, g, qw, &mut gscales),
                            None => quantize_row_q4_grouped_with(recipe, &w, g, qw, &mut gscales),
                        }
                        .map_err(at)?;
                        unpack_row_f32(qw, k, &mut deq);
                        for (d, s) in deq.chunks_mut(g).zip(&gscales) {
                            let s = s.to_f32();
                            d.iter_mut().for_each(|d| *d *= s);
                        }
                        stats = stats.merge(row_stats(&w, &deq));
                        encode::q4_grouped_row(&gscales, qw, sc).map_err(|e| e.to_string())?;
                    }
                }
            }
            Ok(stats)
        })
        .collect();
    let mut stats = Stats::default();
    for t in tasks {
        stats = stats.merge(t?); // the first failing row range, in row order
    }
    Ok(Quantized { qweight, scales, stats })
}

/// Error statistics of one row against its dequantized values: the maximum
/// absolute error exactly, and the sums of squares in eight f32 lanes
/// (vectorised) widened to f64 per row — ample for a figure in dB.
fn row_stats(w: &[f32], deq: &[f32]) -> Stats {
    let (mut max_err, mut sig, mut noise) = (0f32, [0f32; 8], [0f32; 8]);
    for (wc, dc) in w.chunks(8).zip(deq.chunks(8)) {
        for (l, (&v, &d)) in wc.iter().zip(dc).enumerate() {
            let e = d - v;
            max_err = max_err.max(e.abs());
            sig[l] += v * v;
            noise[l] += e * e;
        }
    }
    let sum = |a: [f32; 8]| a.iter().map(|&x| f64::from(x)).sum::<f64>();
    Stats {
        max_abs_err: f64::from(max_err),
        signal: sum(sig),
        noise: sum(noise),
    }
}

/// The codes of a biased packed row as f32 (two per byte), into `out`.
fn unpack_row_f32(packed: &[u8], k: usize, out: &mut Vec<f32>) {
    out.clear();
    out.resize(2 * packed.len(), 0.0);
    for (pair, &b) in out.chunks_exact_mut(2).zip(packed) {
        pair[0] = f32::from(b & 0x0F) - 8.0;
        pair[1] = f32::from(b >> 4) - 8.0;
    }
    out.truncate(k);
}
