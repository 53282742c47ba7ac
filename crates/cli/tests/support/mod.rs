//! What the `qlinear` binary's test files share: running it, and what a
//! refused run must look like.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// The `qlinear` binary run with `args`.
pub fn qlinear(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qlinear")).args(args).output().unwrap()
}

/// A path as a command-line argument.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A refused run: exit 1, one line on stderr holding every `want`.
pub fn refused(o: &Output, want: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "one clear line: {err}");
    for w in want {
        assert!(err.contains(w), "{err:?} should contain {w:?}");
    }
}
