//! `qlinear-smollm`'s argument checks (`--calibrate`'s and `--rotate-out`'s outputs, `--profile-step`
//! without `--bench`): each refusal is one line
//! on stderr and a failing exit, made before any model is read, with no
//! output written and the input untouched.

use std::path::Path;
use std::process::Command;

fn run(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_qlinear-smollm"))
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    (out.status.success(), err)
}

#[test]
fn calibrate_refuses_bad_outputs_and_alpha_before_reading_the_model() {
    let dir = tempfile::tempdir().unwrap();
    // not a model: every check below comes before the model is opened
    let model = dir.path().join("model.gguf");
    std::fs::write(&model, b"not read").unwrap();
    let text = dir.path().join("text.txt");
    std::fs::write(&text, "some calibration text").unwrap();
    let out = dir.path().join("out.safetensors");
    let m = model.as_os_str();
    let t = text.as_os_str();
    let o = out.as_os_str();
    let cases: [(Vec<&std::ffi::OsStr>, &str); 6] = [
        (
            vec![m, "--calibrate".as_ref(), t],
            "qlinear-smollm: error: --calibrate writes --importance-out FILE, --smooth-out FILE, --hessian-out FILE or several: give one",
        ),
        (
            vec![
                m,
                "--calibrate".as_ref(),
                t,
                "--smooth-out".as_ref(),
                o,
                "--smooth-alpha".as_ref(),
                "1.5".as_ref(),
            ],
            "qlinear-smollm: error: --smooth-alpha 1.5 is outside [0, 1]",
        ),
        (
            vec![m, "--calibrate".as_ref(), t, "--smooth-out".as_ref(), m],
            "must differ from the model and from the other outputs",
        ),
        (
            vec![
                m,
                "--calibrate".as_ref(),
                t,
                "--smooth-out".as_ref(),
                o,
                "--importance-out".as_ref(),
                o,
            ],
            "must differ from the model and from the other outputs",
        ),
        (
            vec![m, "--calibrate".as_ref(), t, "--hessian-out".as_ref(), m],
            "must differ from the model and from the other outputs",
        ),
        (
            vec![
                m,
                "--calibrate".as_ref(),
                t,
                "--importance-out".as_ref(),
                o,
                "--hessian-out".as_ref(),
                o,
            ],
            "must differ from the model and from the other outputs",
        ),
    ];
    for (args, want) in cases {
        let (ok, err) = run(&args);
        assert!(!ok, "{args:?} should fail");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!Path::new(&out).exists(), "{args:?} wrote an output");
        assert_eq!(
            std::fs::read(&model).unwrap(),
            b"not read",
            "{args:?} touched the input"
        );
    }
    // --smooth-out without --calibrate is a usage error
    let (ok, err) = run(&[m, "--smooth-out".as_ref(), o]);
    assert!(!ok && err.contains("--calibrate"), "{err}");
}

/// `--profile-step` profiles `--bench`'s rounds and means nothing without
/// them: refused by the argument parser, before any model is read.
#[test]
fn profile_step_needs_bench() {
    let (ok, err) = run(&["missing.gguf".as_ref(), "--profile-step".as_ref()]);
    assert!(!ok);
    assert!(err.contains("--bench"), "{err}");
    assert!(!err.contains("missing.gguf"), "the model was read: {err}");
}

/// Sampling settings that cannot mean anything are refused before the
/// model is read (a NaN temperature sampled from garbage, a top-p of 2 was
/// taken as 1 unsaid, `--threads 0` as every CPU).
#[test]
fn sampling_settings_out_of_range_are_refused_before_the_model_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.gguf");
    std::fs::write(&model, b"not read").unwrap();
    let m = model.as_os_str();
    for (flag, want) in [
        ("--temperature=nan", "--temperature NaN must be finite and at least 0"),
        ("--temperature=-1", "--temperature -1 must be finite and at least 0"),
        ("--temperature=inf", "--temperature inf must be finite and at least 0"),
        ("--top-p=2", "--top-p 2 must be in (0, 1]"),
        ("--top-p=0", "--top-p 0 must be in (0, 1]"),
        ("--top-p=nan", "--top-p NaN must be in (0, 1]"),
        ("--threads=0", "--threads 0: give at least 1"),
        ("--bench-threads=1,0", "--bench-threads: a thread count of 0"),
    ] {
        let (ok, err) = run(&[m, "--prompt".as_ref(), "Hi".as_ref(), flag.as_ref()]);
        assert!(!ok, "{flag}");
        assert!(
            err.starts_with(&format!("qlinear-smollm: error: {want}")),
            "{flag}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// A model that is not there is one line naming its path once (it was
/// named twice: "m.gguf: m.gguf: No such file or directory").
#[test]
fn a_missing_model_is_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("absent.gguf");
    let (ok, err) = run(&[model.as_os_str()]);
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    let p = model.display().to_string();
    assert!(err.starts_with(&format!("qlinear-smollm: error: {p}: ")), "{err}");
    assert_eq!(err.matches(&p).count(), 1, "{err}");
}

/// `--rotate-out` writes one model's rotation to a new file: the model
/// itself, a second model or `--eval` beside it are refused before the
/// model is read, and a file that is not a model is one error with no
/// output written; the input is never touched.
#[test]
fn rotate_out_refuses_its_input_and_leaves_no_partial_output() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model.gguf");
    std::fs::write(&model, b"not a model").unwrap();
    let out = dir.path().join("rotated.safetensors");
    let (m, o) = (model.as_os_str(), out.as_os_str());
    let cases: [(Vec<&std::ffi::OsStr>, &str); 3] = [
        (
            vec![m, "--rotate-out".as_ref(), m],
            "--rotate-out writes one model's rotation to a file other than the model",
        ),
        (
            vec![m, m, "--rotate-out".as_ref(), o],
            "--rotate-out writes one model's rotation to a file other than the model",
        ),
        (vec![m, "--rotate-out".as_ref(), o], "model.gguf"),
    ];
    for (args, want) in cases {
        let (ok, err) = run(&args);
        assert!(!ok, "{args:?} should fail");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote an output");
        assert_eq!(
            std::fs::read(&model).unwrap(),
            b"not a model",
            "{args:?} touched the input"
        );
    }
    // with --eval it is a usage error
    let (ok, err) = run(&[m, "--rotate-out".as_ref(), o, "--eval".as_ref(), m]);
    assert!(!ok && err.contains("--eval") && !out.exists(), "{err}");
}

/// A KV cache type that is not one is refused before the model is read,
/// naming the value and the types there are.
#[test]
fn an_unknown_kv_type_is_refused_before_the_model_is_read() {
    let (ok, err) = run(&[
        "missing.gguf".as_ref(),
        "--kv".as_ref(),
        "f32,f16".as_ref(),
        "--prompt".as_ref(),
        "Hi".as_ref(),
    ]);
    assert!(!ok);
    assert!(
        err.contains("unknown KV cache type `f16`: expected f32 or bf16"),
        "{err}"
    );
    assert!(!err.contains("missing.gguf"), "the model was read: {err}");
}
