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
    quantize_row_q4_gptq, quantize_row_q4_grouped_gptq, quantize_row_q4_grouped_weighted, quantize_row_q4_grouped_with,
    quantize_row_q4_weighted, quantize_row_q4_with, quantize_row_q8_gptq, quantize_row_q8_weighted,
    quantize_row_q8_with, FormatError, GptqFactor, QScheme, QuantizedFile, Recipe, RecipeError,
};
use rayon::prelude::*;
use regex::Regex;

use crate::print_out;

mod input;
mod plan;
mod write;

pub use input::Input;
use input::*;
use plan::*;
use write::*;

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
    /// squared error per row or group), activation-aware (the search with
    /// each column's error weighted by --importance) or gptq (each row
    /// column by column, every rounding error spread over the columns still
    /// to come by --hessian); the same format either way.
    #[arg(long, default_value = "canonical")]
    recipe: String,
    /// For --recipe activation-aware: a safetensors file holding, for each
    /// quantized PREFIX.weight of shape [n, k], a tensor PREFIX.importance
    /// of shape [k] (finite, >= 0; e.g. the mean x² of each input over
    /// calibration activations, as `qlinear-minilm --calibrate` writes).
    #[arg(long)]
    importance: Option<PathBuf>,
    /// For --recipe gptq: a safetensors file holding, for each quantized
    /// PREFIX.weight of shape [n, k], a tensor PREFIX.hessian of shape
    /// [k, k]: the mean x xᵀ of the layer's inputs over calibration
    /// activations (as `qlinear-smollm --calibrate --hessian-out` writes;
    /// docs/NUMERICS.md §3.9).
    #[arg(long)]
    hessian: Option<PathBuf>,
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
    if let Some(path) = &args.hessian {
        options = options.with_hessian(open(path)?, &path.display().to_string());
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
    /// The hessian file and its name in messages.
    hessian: Option<(QuantizedFile, String)>,
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
            hessian: None,
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

    /// The same options with the hessian file `file` (`--hessian`, named
    /// `label` in messages), for the GPTQ recipe.
    pub fn with_hessian(mut self, file: QuantizedFile, label: &str) -> Options {
        self.hessian = Some((file, label.to_string()));
        self
    }

    /// The recipe and the calibration files agree: activation-aware needs
    /// an importance file and gptq a hessian file, and no other recipe
    /// reads either.
    pub fn check(&self) -> Result<(), String> {
        match (self.recipe, &self.hessian) {
            (Recipe::Gptq, None) => {
                return Err(
                    "--recipe gptq needs --hessian FILE (a PREFIX.hessian of [k, k] per quantized PREFIX.weight)"
                        .into(),
                )
            }
            (r, Some(_)) if r != Recipe::Gptq => {
                return Err(format!("--hessian is read only by --recipe gptq, not by --recipe {r}"))
            }
            _ => {}
        }
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
    quantize_and_write(input, plan, options.recipe, options.hessian.as_ref(), progress, sink)
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
