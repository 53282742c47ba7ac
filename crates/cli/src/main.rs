//! The `qlinear` command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod selftest;

#[derive(Parser)]
#[command(
    name = "qlinear",
    version,
    about = "Quantized linear layers: prove tiers, convert and inspect weight files"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Prove every tier on this CPU; print the proof table and the plan.
    Selftest(selftest::Args),
}

/// Writes to stdout; a closed pipe (`qlinear … | head`) ends quietly, not in a panic.
pub(crate) fn print_out(text: &str) -> Result<(), String> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("cannot write to stdout: {e}")),
        _ => Ok(()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Selftest(args) => selftest::run(args),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("qlinear: {message}");
            ExitCode::FAILURE
        }
    }
}
