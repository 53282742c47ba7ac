use std::process::ExitCode;

use qlinear::{autotuned_plan, cpu_features, default_census, run_selftest, selftest_report};

use crate::print_out;

/// `qlinear selftest`.
#[derive(clap::Args)]
pub struct Args {
    /// Extra K values to prove (comma separated), beside the default census.
    #[arg(long, value_delimiter = ',')]
    k: Vec<usize>,
}

pub fn run(args: Args) -> Result<ExitCode, String> {
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
