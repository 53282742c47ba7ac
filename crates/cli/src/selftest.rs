use std::process::ExitCode;

use qlinear::tiers::{cpu_features, default_census};
use qlinear::{autotuned_plan, run_selftest, selftest_report};

use crate::print_out;

/// `qlinear selftest`.
#[derive(clap::Args)]
pub struct Args {
    /// Extra K values to prove (comma separated), beside the default census.
    #[arg(long, value_delimiter = ',')]
    k: Vec<usize>,
    /// Take the census from a model file: the K of every quantized tensor and
    /// of every 2-D tensor.
    #[arg(long, value_name = "FILE.safetensors")]
    census: Option<std::path::PathBuf>,
}

/// The K values a model file binds: `in_features` of its quantized tensors
/// and the second dimension of its 2-D tensors.
fn census_of(path: &std::path::Path) -> Result<Vec<usize>, String> {
    let file = crate::convert::open(path)?;
    let mut ks: Vec<usize> = file
        .validate()
        .into_iter()
        .filter_map(|(_, r)| r.ok().map(|i| i.k))
        .collect();
    ks.extend(
        file.tensor_names()
            .iter()
            .filter_map(|n| file.raw(n))
            .filter(|r| r.shape.len() == 2)
            .map(|r| r.shape[1]),
    );
    Ok(ks)
}

/// `qlinear selftest`: the exit code, or the one-line error to print.
pub fn run(mut args: Args) -> Result<ExitCode, String> {
    if let Some(path) = &args.census {
        args.k.extend(census_of(path)?);
    }
    let fresh;
    let report = if args.k.is_empty() {
        selftest_report() // the process's own proof, which dispatch consults
    } else {
        fresh = run_selftest(&default_census().into_iter().chain(args.k).collect::<Vec<_>>());
        &fresh
    };
    let plan = autotuned_plan().map_err(|e| e.to_string())?;
    print_out(&format!("cpu features: {}\n{report}{plan}", cpu_features().join(" ")))?;
    if report.all_present_passed() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err("a compiled-in, CPU-supported tier failed its proof".into())
    }
}
