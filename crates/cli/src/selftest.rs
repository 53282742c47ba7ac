use std::process::ExitCode;

use qlinear::{autotuned_plan, cpu_features, default_census, run_selftest};

use crate::print_out;

/// `qlinear selftest`.
#[derive(clap::Args)]
pub struct Args {
    /// Extra K values to prove (comma separated), beside the default census.
    #[arg(long, value_delimiter = ',')]
    k: Vec<usize>,
}

pub fn run(args: Args) -> Result<ExitCode, String> {
    let mut census = default_census();
    census.extend(args.k);
    let report = run_selftest(&census);
    let plan = autotuned_plan().map_err(|e| e.to_string())?;
    print_out(&format!("cpu features: {}\n{report}{plan}", cpu_features().join(" ")))?;
    if report.all_present_passed() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err("a compiled-in, CPU-supported tier failed its proof".into())
    }
}
