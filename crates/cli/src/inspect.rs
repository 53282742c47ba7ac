//! `qlinear inspect FILE`: the tensors, their schemes and shapes, bits per
//! weight, and the result of full validation.

use std::path::PathBuf;
use std::process::ExitCode;

use qlinear::gguf::{GgufFile, GgufValue};

use crate::convert::esc;
use crate::print_out;

/// `qlinear inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// The file to inspect: qlinear safetensors, or GGUF (decided by its
    /// first bytes).
    file: PathBuf,
}

/// `qlinear inspect`: the exit code, or the one-line error to print.
pub fn run(args: Args) -> Result<ExitCode, String> {
    let file = match crate::convert::Input::open(&args.file)? {
        crate::convert::Input::Gguf(g) => return gguf(&args.file, &g),
        crate::convert::Input::Safetensors(f) => f,
    };
    let mut out = String::new();
    let meta = file.metadata_map();
    out += &format!(
        "{}: qlinear format {}\n",
        args.file.display(),
        esc(meta.get(qlinear::format::FORMAT_KEY).map_or("(none)", |v| v))
    );
    let checked = file.validate();
    // the tensors the quantized prefixes own, for one look-up per name
    let owned: std::collections::HashSet<String> = checked
        .iter()
        .flat_map(|(p, _)| [format!("{p}.qweight"), format!("{p}.scales")])
        .collect();
    let mut failures = 0;
    for (prefix, result) in &checked {
        match result {
            Ok(info) => {
                let recipe = meta
                    .get(&format!("{prefix}.qrecipe"))
                    .map_or(String::new(), |r| format!(" {}", esc(r)));
                out += &format!(
                    "{}  {}{recipe}  [{}, {}]  {:.3} bits/weight  ok\n",
                    esc(prefix),
                    info.scheme,
                    info.n,
                    info.k,
                    info.bits_per_weight()
                )
            }
            Err(e) => {
                failures += 1;
                out += &format!("{}  INVALID: {}\n", esc(prefix), esc(&e.to_string()));
            }
        }
    }
    for name in file.tensor_names() {
        if let (false, Some(raw)) = (owned.contains(name), file.raw(name)) {
            out += &format!("{}  {:?}  {:?}  (not quantized)\n", esc(name), raw.dtype, raw.shape);
        }
    }
    out += &format!("{} quantized tensors, {failures} invalid\n", checked.len());
    print_out(&out)?;
    if failures > 0 {
        return Err(format!(
            "{}: {failures} quantized tensor(s) failed validation",
            args.file.display()
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// A metadata value for the summary: scalars and strings in full up to 80
/// characters, arrays as their item type and count.
fn summary(v: &GgufValue) -> String {
    match v {
        GgufValue::Array { item, values } => format!("[{item:?} × {}]", values.len()),
        v => {
            let text = v.to_json();
            match text.char_indices().nth(80) {
                Some((cut, _)) => format!("{}… ({} chars)", &text[..cut], text.chars().count()),
                None => text,
            }
        }
    }
}

/// `qlinear inspect FILE.gguf`: the header (already fully checked when the
/// file was opened: every count, length, offset, extent and alignment), the
/// metadata in file order and every tensor with its type, row-major shape
/// and bits per weight.
fn gguf(path: &std::path::Path, file: &GgufFile) -> Result<ExitCode, String> {
    let mut out = format!(
        "{}: GGUF version {}, {} tensors, {} metadata keys, alignment {}\n",
        path.display(),
        file.version(),
        file.tensors().len(),
        file.metadata().len(),
        file.alignment()
    );
    for (key, value) in file.metadata() {
        out += &format!("{}  {}\n", esc(key), esc(&summary(value)));
    }
    let mut weights = 0usize;
    let mut bytes = 0usize;
    for t in file.tensors() {
        weights += t.n_elements();
        bytes += t.n_bytes;
        out += &format!(
            "{}  {}  {:?}  {:.3} bits/weight\n",
            esc(&t.name),
            t.ggml_type,
            t.shape(),
            t.ggml_type.bits_per_weight()
        );
    }
    out += &format!(
        "{} tensors, {weights} weights in {bytes} bytes ({:.3} bits/weight); header, offsets and extents valid\n",
        file.tensors().len(),
        if weights == 0 {
            0.0
        } else {
            bytes as f64 * 8.0 / weights as f64
        }
    );
    print_out(&out)?;
    Ok(ExitCode::SUCCESS)
}
