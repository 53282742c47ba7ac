//! The importance and Hessian inputs' faults, each refused with a line
//! naming the tensor and what is wrong.

use super::*;

/// A q4g32 conversion of `standard_model` into `out` with extra arguments,
/// and the check that one was refused: exit 1, one line holding `want`, no
/// output left behind (the calibration-file fault tests' shared frame).
struct Refusals {
    input: PathBuf,
    out: PathBuf,
}

impl Refusals {
    fn new(d: &Path) -> Refusals {
        Refusals {
            input: standard_model(d),
            out: d.join("out.safetensors"),
        }
    }

    fn run(&self, extra: &[&str]) -> Output {
        let mut args = vec![
            "convert",
            self.input.to_str().unwrap(),
            self.out.to_str().unwrap(),
            "--scheme",
            "q4g32",
        ];
        args.extend(extra);
        qlinear(&args)
    }

    fn fails(&self, o: Output, want: &str) {
        assert_eq!(o.status.code(), Some(1), "{want}");
        let err = String::from_utf8(o.stderr).unwrap();
        assert!(
            err.contains(want) && err.lines().count() == 1,
            "want {want:?}, got {err}"
        );
        assert!(!self.out.exists(), "{want}: an output was left");
    }
}

/// `--importance` and `--recipe activation-aware` come together, and every
/// fault of the importance file is one line naming the tensor, with no
/// output left behind.
#[test]
fn activation_aware_importance_faults_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let r = Refusals::new(d);
    let good = standard_importance(d);
    let (run, fails) = (|extra: &[&str]| r.run(extra), |o, want| r.fails(o, want));
    let aware = |importance: &Path, extra: &[&str]| {
        let mut args = vec![
            "--recipe",
            "activation-aware",
            "--importance",
            importance.to_str().unwrap(),
        ];
        args.extend(extra);
        run(&args)
    };
    fails(
        run(&["--recipe", "activation-aware"]),
        "--recipe activation-aware needs --importance FILE",
    );
    fails(
        run(&["--recipe", "search", "--importance", good.to_str().unwrap()]),
        "--importance is read only by --recipe activation-aware, not by --recipe search",
    );
    fails(aware(&d.join("none"), &[]), "none");
    let bad = |name: &str, tensors: Vec<(&str, Vec<usize>, Src)>| model(d, name, tensors);
    let missing = bad(
        "missing.safetensors",
        vec![("layers.0.attn.q.importance", vec![64], Src::F32(importance(64, 1)))],
    );
    fails(aware(&missing, &[]), "layers.0.mlp.down.weight: the importance file");
    let mut nan = importance(96, 2);
    nan[5] = f32::NAN;
    for (file, tensors, want, include) in [
        (
            "shape.safetensors",
            vec![("layers.0.mlp.down.importance", vec![2, 16], Src::F32(importance(32, 3)))],
            "layers.0.mlp.down.importance in",
            "down",
        ),
        (
            "nan.safetensors",
            vec![("layers.0.mlp.up.importance", vec![96], Src::F32(nan))],
            "holds NaN at column 5",
            "up",
        ),
        (
            "neg.safetensors",
            vec![("layers.0.mlp.down.importance", vec![32], Src::F32(vec![-1.0; 32]))],
            "holds -1 at column 0",
            "down",
        ),
        (
            "int.safetensors",
            vec![(
                "layers.0.mlp.down.importance",
                vec![32],
                Src::Bytes(Dtype::I32, vec![0; 128]),
            )],
            "expected a float vector of [32]",
            "down",
        ),
    ] {
        fails(aware(&bad(file, tensors), &["--include", include]), want);
    }
}

/// `--hessian` and `--recipe gptq` come together, and every fault of the
/// hessian file is one line naming the weight and the tensor, with no
/// output left behind.
#[test]
fn gptq_hessian_faults_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let r = Refusals::new(d);
    let good = standard_hessian(d);
    let (run, fails) = (|extra: &[&str]| r.run(extra), |o, want| r.fails(o, want));
    let gptq = |hessian: &Path, extra: &[&str]| {
        let mut args = vec!["--recipe", "gptq", "--hessian", hessian.to_str().unwrap()];
        args.extend(extra);
        run(&args)
    };
    fails(run(&["--recipe", "gptq"]), "--recipe gptq needs --hessian FILE");
    fails(
        run(&["--recipe", "search", "--hessian", good.to_str().unwrap()]),
        "--hessian is read only by --recipe gptq, not by --recipe search",
    );
    fails(gptq(&d.join("none"), &[]), "none");
    let bad = |name: &str, tensors: Vec<(&str, Vec<usize>, Src)>| model(d, name, tensors);
    let missing = bad(
        "missing.safetensors",
        vec![("layers.0.attn.q.hessian", vec![64, 64], Src::F32(hessian(64, 1)))],
    );
    fails(gptq(&missing, &[]), "layers.0.mlp.down.weight: the hessian file");
    let mut nan = hessian(32, 3);
    nan[2 * 32 + 5] = f32::NAN;
    let mut indefinite = vec![0f32; 32 * 32];
    for j in 0..32 {
        indefinite[j * 32 + j] = 1.0;
        indefinite[j * 32 + (j + 1) % 32] = 3.0;
        indefinite[((j + 1) % 32) * 32 + j] = 3.0;
    }
    for (file, tensors, want) in [
        (
            "shape.safetensors",
            vec![("layers.0.mlp.down.hessian", vec![32, 16], Src::F32(vec![0.0; 512]))],
            "expected a float matrix of [32, 32]",
        ),
        (
            "nan.safetensors",
            vec![("layers.0.mlp.down.hessian", vec![32, 32], Src::F32(nan))],
            "layers.0.mlp.down.hessian in",
        ),
        (
            "indefinite.safetensors",
            vec![("layers.0.mlp.down.hessian", vec![32, 32], Src::F32(indefinite))],
            "not positive definite",
        ),
    ] {
        fails(gptq(&bad(file, tensors), &["--include", "down"]), want);
    }
    let nan_file = d.join("nan.safetensors");
    let o = gptq(&nan_file, &["--include", "down"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("row 2, column 5 is NaN"));
}
