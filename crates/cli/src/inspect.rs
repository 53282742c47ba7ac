//! `qlinear inspect FILE`: the tensors, their schemes and shapes, bits per
//! weight, and the result of full validation.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::convert::esc;
use crate::print_out;

/// `qlinear inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// The safetensors file to inspect.
    file: PathBuf,
}

/// `qlinear inspect`: the exit code, or the one-line error to print.
pub fn run(args: Args) -> Result<ExitCode, String> {
    let file = crate::convert::open(&args.file)?;
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
