//! `qlinear-minilm`'s refusals: one line on stderr and a failing exit,
//! naming the whole path at fault.

use std::path::Path;
use std::process::Command;

/// Runs `qlinear-minilm DIR`: whether it succeeded, and its stderr.
fn run(dir: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_qlinear-minilm"))
        .arg(dir)
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A folder without the model names the file it looked for by its whole
/// path (it said only "config.json: No such file or directory").
#[test]
fn a_folder_without_the_model_names_the_whole_path() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, err) = run(dir.path());
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    let want = dir.path().join("model").join("config.json");
    assert!(err.contains(&format!("{}: ", want.display())), "{err}");
}

/// A config without the encoder's sizes names the path and the key.
#[test]
fn a_config_without_its_sizes_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("model")).unwrap();
    let config = dir.path().join("model").join("config.json");
    std::fs::write(&config, r#"{"num_attention_heads": 12}"#).unwrap();
    let (ok, err) = run(dir.path());
    assert!(!ok);
    assert_eq!(
        err.trim(),
        format!("qlinear-minilm: {}: no num_hidden_layers", config.display())
    );
}
