use std::process::ExitCode;

use qlinear::init_for;
use qlinear::tiers::{cpu_features, default_census};

use crate::print_out;

/// `qlinear selftest`.
#[derive(clap::Args)]
pub struct Args {
    /// Extra K values to prove (comma separated), beside the default census.
    #[arg(long, value_delimiter = ',')]
    k: Vec<usize>,
    /// Take the census from a model file instead of the default one: the K of
    /// every quantized tensor and of every 2-D tensor (what a runtime's
    /// `qlinear::init_for(&file.census())` proves, so the times printed are
    /// the first call's cost for that model).
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

/// `qlinear selftest`: the exit code, or the one-line error to print. The
/// census run is the process's own proof, the one the plan consults, so the
/// plan's time is its own (a fresh proof beside the process's would run the
/// default census a second time inside the plan).
pub fn run(args: Args) -> Result<ExitCode, String> {
    let census: Vec<usize> = match &args.census {
        Some(path) => census_of(path)?.into_iter().chain(args.k).collect(),
        None if args.k.is_empty() => default_census(),
        None => default_census().into_iter().chain(args.k).collect(),
    };
    let init = init_for(&census).map_err(|e| e.to_string())?;
    let (report, plan) = (init.selftest, init.plan);
    print_out(&format!("cpu features: {}\n{report}{plan}", cpu_features().join(" ")))?;
    if report.all_present_passed() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err("a compiled-in, CPU-supported tier failed its proof".into())
    }
}
