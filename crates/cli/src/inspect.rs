//! `qlinear inspect FILE`: the tensors, their schemes and shapes, bits per
//! weight, and the result of full validation.

use std::path::PathBuf;
use std::process::ExitCode;

use qlinear::QuantizedFile;

use crate::print_out;

/// `qlinear inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// The safetensors file to inspect.
    file: PathBuf,
}

pub fn run(args: Args) -> Result<ExitCode, String> {
    let file = QuantizedFile::open(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let mut out = String::new();
    let meta = file.metadata_map();
    out += &format!(
        "{}: qlinear format {}\n",
        args.file.display(),
        meta.get(qlinear::format::FORMAT_KEY).map_or("(none)", |v| v)
    );
    let checked = file.validate();
    let quantized: Vec<String> = checked.iter().map(|(p, _)| p.clone()).collect();
    let mut failures = 0;
    for (prefix, result) in &checked {
        match result {
            Ok(info) => {
                out += &format!(
                    "{prefix}  {}  [{}, {}]  {:.3} bits/weight  ok\n",
                    info.scheme,
                    info.n,
                    info.k,
                    info.bits_per_weight()
                )
            }
            Err(e) => {
                failures += 1;
                out += &format!("{prefix}  INVALID: {e}\n");
            }
        }
    }
    for name in file.tensor_names() {
        let owned = quantized
            .iter()
            .any(|p| name == format!("{p}.qweight") || name == format!("{p}.scales"));
        if let (false, Some(raw)) = (owned, file.raw(&name)) {
            out += &format!("{name}  {:?}  {:?}  (not quantized)\n", raw.dtype, raw.shape);
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
