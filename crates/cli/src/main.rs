//! The `qlinear` command.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use qlinear_cli::{convert, inspect, selftest};

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
    /// Quantize the 2-D `*.weight` tensors of a safetensors file.
    Convert(convert::Args),
    /// List a file's tensors and validate its quantized ones.
    Inspect(inspect::Args),
    /// Prove every tier on this CPU; print the proof table and the plan.
    Selftest(selftest::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Convert(args) => convert::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Selftest(args) => selftest::run(args),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("qlinear: error: {}", convert::esc(&message));
            ExitCode::FAILURE
        }
    }
}
