//! The `qlinear` command's subcommands, as a library: the binary parses the
//! command line and calls these; the `convert` fuzz target calls
//! [`convert::convert_bytes`].

#![warn(missing_docs)]
#![forbid(unsafe_code)]

/// `qlinear convert` and its in-memory core.
pub mod convert;
/// `qlinear inspect`.
pub mod inspect;
/// `qlinear selftest`.
pub mod selftest;

/// Writes to stdout; a closed pipe (`qlinear … | head`) ends quietly, not in a panic.
pub(crate) fn print_out(text: &str) -> Result<(), String> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("cannot write to stdout: {e}")),
        _ => Ok(()),
    }
}
