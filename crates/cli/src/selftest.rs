use std::process::ExitCode;

use qlinear::tiers::{cpu_features, default_census};
use qlinear::{init_for, Census};

use crate::print_out;

/// `qlinear selftest`.
#[derive(clap::Args)]
pub struct Args {
    /// Extra K values to prove (comma separated), beside the default census.
    #[arg(long, value_delimiter = ',')]
    k: Vec<usize>,
    /// Take the census from a model file instead of the default one: the
    /// `in_features` of its quantized layers and the kernel families they
    /// run by default, exactly what a runtime's
    /// `qlinear::init_for(&file.census())` proves and plans, so the times
    /// printed are the start-up cost for that model (the other families
    /// print as `-`: proven when first used).
    #[arg(long, value_name = "FILE.safetensors")]
    census: Option<std::path::PathBuf>,
}

/// What a model file needs proven: [`qlinear::ModelFile::census`], the
/// `in_features` of its quantized layers and their kernel families. (The census once also took the
/// second dimension of every 2-D tensor, which in a converted file are the
/// packed bytes, the group scales and the float tables too: all-MiniLM-L6-v2
/// at q4g32 proved K 192, 512 and 768 beside its 384 and 1536, some 7 ms
/// of the printed selftest that `init_for` never pays.)
fn census_of(path: &std::path::Path) -> Result<Census, String> {
    let file = crate::convert::open(path)?;
    Ok(qlinear::ModelFile::from(file).census())
}

/// `qlinear selftest`: the exit code, or the one-line error to print. The
/// census run is the process's own proof, the one the plan consults, so the
/// plan's time is its own (a fresh proof beside the process's would run the
/// default census a second time inside the plan).
pub fn run(args: Args) -> Result<ExitCode, String> {
    let census = match &args.census {
        Some(path) => {
            let mut census = census_of(path)?;
            census.ks.extend(args.k);
            census
        }
        None => Census::all_families(&default_census().into_iter().chain(args.k).collect::<Vec<_>>()),
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
