//! The `qlinear` binary end to end: conversions checked byte for byte against
//! the recipe crate, and every refused input: non-zero exit, one clear line,
//! no output file, no temporary file left behind.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use half::{bf16, f16};
use qlinear::{GroupSize, QuantizedFile, QuantizedMatrix, QuantizedMatrixQ4, QuantizedWeight, Recipe};
use safetensors::tensor::TensorView;
use safetensors::Dtype;

mod faults;

fn qlinear(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qlinear")).args(args).output().unwrap()
}

fn weights(n: usize, k: usize) -> Vec<f32> {
    (0..n * k).map(|i| ((i * 7919 % 1999) as f32 - 999.0) / 97.0).collect()
}

enum Src {
    F32(Vec<f32>),
    F16(Vec<f32>),
    Bf16(Vec<f32>),
    Bytes(Dtype, Vec<u8>),
}

/// Writes a float model file with the given tensors and metadata.
fn model(dir: &Path, name: &str, tensors: Vec<(&str, Vec<usize>, Src)>) -> PathBuf {
    let owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .into_iter()
        .map(|(n, shape, src)| {
            let (d, b) = match src {
                Src::F32(v) => (Dtype::F32, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
                Src::F16(v) => (
                    Dtype::F16,
                    v.iter()
                        .flat_map(|x| f16::from_f32(*x).to_bits().to_le_bytes())
                        .collect(),
                ),
                Src::Bf16(v) => (
                    Dtype::BF16,
                    v.iter()
                        .flat_map(|x| bf16::from_f32(*x).to_bits().to_le_bytes())
                        .collect(),
                ),
                Src::Bytes(d, b) => (d, b),
            };
            (n.to_string(), d, shape, b)
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = owned
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let meta = HashMap::from([("source".to_string(), "unit-test".to_string())]);
    let path = dir.join(name);
    std::fs::write(&path, safetensors::serialize(views, Some(meta)).unwrap()).unwrap();
    path
}

fn standard_model(dir: &Path) -> PathBuf {
    model(
        dir,
        "model.safetensors",
        vec![
            ("layers.0.attn.q.weight", vec![8, 64], Src::F32(weights(8, 64))),
            ("layers.0.mlp.up.weight", vec![6, 96], Src::F16(weights(6, 96))),
            ("layers.0.mlp.down.weight", vec![5, 32], Src::Bf16(weights(5, 32))),
            ("layers.0.attn.q.bias", vec![8], Src::F32(weights(1, 8))),
            ("norm.weight", vec![64], Src::F32(weights(1, 64))),
            ("positions", vec![2, 2], Src::Bytes(Dtype::I64, vec![7; 32])),
        ],
    )
}

fn widened(v: &[f32], dtype: Dtype) -> Vec<f32> {
    match dtype {
        Dtype::F16 => v.iter().map(|x| f16::from_f32(*x).to_f32()).collect(),
        Dtype::BF16 => v.iter().map(|x| bf16::from_f32(*x).to_f32()).collect(),
        _ => v.to_vec(),
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A varied importance vector of `k` values (zeros among them).
fn importance(k: usize, seed: usize) -> Vec<f32> {
    (0..k).map(|i| ((i * 31 + seed * 17) % 23) as f32 * 0.37).collect()
}

/// The importance file of `standard_model` (one vector stored as F16,
/// which convert widens).
fn standard_importance(dir: &Path) -> PathBuf {
    model(
        dir,
        "importance.safetensors",
        vec![
            ("layers.0.attn.q.importance", vec![64], Src::F32(importance(64, 1))),
            ("layers.0.mlp.up.importance", vec![96], Src::F16(importance(96, 2))),
            ("layers.0.mlp.down.importance", vec![32], Src::F32(importance(32, 3))),
        ],
    )
}

/// A hessian of `k` inputs: the mean x xᵀ of 2k rows whose columns
/// correlate (each the one before it times 0.8 plus a varied step).
fn hessian(k: usize, seed: usize) -> Vec<f32> {
    let t = 2 * k;
    let x: Vec<f64> = (0..t)
        .flat_map(|r| {
            let mut prev = 0f64;
            (0..k)
                .map(|j| {
                    prev = 0.8 * prev + (((r * 131 + j * 71 + seed * 29) % 37) as f64 - 18.0) / 9.0;
                    prev
                })
                .collect::<Vec<f64>>()
        })
        .collect();
    let mut h = vec![0f32; k * k];
    for i in 0..k {
        for j in 0..k {
            h[i * k + j] = ((0..t).map(|r| x[r * k + i] * x[r * k + j]).sum::<f64>() / t as f64) as f32;
        }
    }
    h
}

/// The hessian file of `standard_model`.
fn standard_hessian(dir: &Path) -> PathBuf {
    model(
        dir,
        "hessian.safetensors",
        vec![
            ("layers.0.attn.q.hessian", vec![64, 64], Src::F32(hessian(64, 1))),
            ("layers.0.mlp.up.hessian", vec![96, 96], Src::F32(hessian(96, 2))),
            ("layers.0.mlp.down.hessian", vec![32, 32], Src::F32(hessian(32, 3))),
        ],
    )
}

#[test]
fn convert_every_scheme_matches_the_recipe_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let input = standard_model(dir.path());
    let imp = standard_importance(dir.path());
    let hes = standard_hessian(dir.path());
    for (scheme, recipe) in ["q8", "q4", "q4g32"]
        .into_iter()
        .flat_map(|s| Recipe::ALL.map(|r| (s, r)))
    {
        let out = dir.path().join(format!("out-{scheme}-{recipe}.safetensors"));
        let recipe_name = recipe.to_string();
        let mut args = vec![
            "convert",
            input.to_str().unwrap(),
            out.to_str().unwrap(),
            "--scheme",
            scheme,
            "--recipe",
            &recipe_name,
        ];
        if recipe == Recipe::ActivationAware {
            args.extend(["--importance", imp.to_str().unwrap()]);
        }
        if recipe == Recipe::Gptq {
            args.extend(["--hessian", hes.to_str().unwrap()]);
        }
        let o = qlinear(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let stdout = String::from_utf8(o.stdout).unwrap();
        assert!(
            stdout.contains("layers.0.attn.q.weight  [8, 64]") && stdout.contains("SNR") && stdout.contains("total:"),
            "{stdout}"
        );
        let f = QuantizedFile::open(&out).unwrap();
        assert_eq!(f.metadata_map()["source"], "unit-test");
        for (seed, (name, n, k, dtype)) in [
            ("layers.0.attn.q", 8, 64, Dtype::F32),
            ("layers.0.mlp.up", 6, 96, Dtype::F16),
            ("layers.0.mlp.down", 5, 32, Dtype::BF16),
        ]
        .into_iter()
        .enumerate()
        {
            let w = widened(&weights(n, k), dtype);
            let a = widened(
                &importance(k, seed + 1),
                if seed == 1 { Dtype::F16 } else { Dtype::F32 },
            );
            let scheme_q: qlinear::QScheme = scheme.parse().unwrap();
            let want = match scheme {
                _ if recipe == Recipe::Gptq => {
                    let f = qlinear::GptqFactor::from_hessian(&hessian(k, seed + 1), k).unwrap();
                    QuantizedWeight::quantize_gptq(scheme_q, n, k, &w, &f).unwrap()
                }
                _ if recipe == Recipe::ActivationAware => {
                    QuantizedWeight::quantize_weighted(scheme_q, n, k, &w, &a).unwrap()
                }
                "q8" => QuantizedWeight::Q8(QuantizedMatrix::quantize_with(recipe, n, k, &w).unwrap()),
                "q4" => QuantizedWeight::Q4(
                    QuantizedMatrixQ4::quantize_with(recipe, n, k, GroupSize::PerChannel, &w).unwrap(),
                ),
                _ => QuantizedWeight::Q4(
                    QuantizedMatrixQ4::quantize_with(recipe, n, k, GroupSize::Group(32), &w).unwrap(),
                ),
            };
            assert_eq!(f.load(name).unwrap(), want, "{name} {scheme} {recipe}");
            assert_eq!(f.metadata_map()[&format!("{name}.qrecipe")], recipe_name);
            assert!(f.raw(&format!("{name}.weight")).is_none());
        }
        // everything else is copied unchanged
        let src = QuantizedFile::open(&input).unwrap();
        for name in ["layers.0.attn.q.bias", "norm.weight", "positions"] {
            let (a, b) = (src.raw(name).unwrap(), f.raw(name).unwrap());
            assert_eq!((a.dtype, a.shape, a.data), (b.dtype, b.shape, b.data), "{name}");
        }
        let o = qlinear(&["inspect", out.to_str().unwrap()]);
        assert!(o.status.success());
        let text = String::from_utf8(o.stdout).unwrap();
        assert!(
            text.contains(&format!("layers.0.mlp.up  {scheme} {recipe}  [6, 96]"))
                && text.contains("3 quantized tensors, 0 invalid"),
            "{text}"
        );
    }
}

/// `selftest --census FILE` proves the K values of a model's layers (and
/// the tails and bounds) rather than the default census, and only the
/// families the file's layers use.
#[test]
fn a_models_census_is_its_layers_k() {
    let dir = tempfile::tempdir().unwrap();
    let input = standard_model(dir.path());
    let converted = dir.path().join("out-q4g32-search.safetensors");
    let o = qlinear(&[
        "convert",
        input.to_str().unwrap(),
        converted.to_str().unwrap(),
        "--scheme",
        "q4g32",
        "--recipe",
        "search",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let census = qlinear(&["selftest", "--census", converted.to_str().unwrap()]);
    assert!(census.status.success(), "{}", String::from_utf8_lossy(&census.stderr));
    // the model's census replaces the default one: its K values (6 and 96
    // here) beside the tails 1..=67 and the two bounds, not the default's
    let count = |o: &std::process::Output| -> usize {
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        let line = text
            .lines()
            .find(|l| l.starts_with("selftest: "))
            .unwrap_or_else(|| panic!("{text}"));
        line["selftest: ".len()..].split(' ').next().unwrap().parse().unwrap()
    };
    let default = qlinear(&["selftest"]);
    assert!(default.status.success());
    assert!(
        count(&census) < count(&default),
        "{} against {}",
        count(&census),
        count(&default)
    );
    assert_eq!(count(&census), 67 + 2 + 1, "K = 96 beside 1..=67 and the two bounds");
    // and its families alone (W4A8 grouped by default, with the activation
    // quantizer it needs): the others are proven and planned at first use
    let row = |o: &std::process::Output, start: &str| -> String {
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        let line = text.lines().find(|l| l.starts_with(&format!("{start} ")));
        line.unwrap_or_else(|| panic!("no {start} row in\n{text}")).to_string()
    };
    assert_eq!(row(&census, "scalar").matches("ok (").count(), 2);
    assert_eq!(row(&census, "scalar").matches(" -").count(), 7);
    assert!(!row(&census, "w4a8_grouped").contains(" -"));
    assert!(row(&census, "w8a16").trim_end().ends_with(" -"));
    // the default run proves every family
    assert_eq!(row(&default, "scalar").matches("ok (").count(), 9);

    // a model's census is its layers' K alone: not a grouped layer's packed
    // bytes (128 a row at K = 256), nor a float table's width (200)
    let wide = model(
        dir.path(),
        "wide.safetensors",
        vec![
            ("layers.0.mlp.up.weight", vec![4, 256], Src::F32(weights(4, 256))),
            (
                "embeddings.word_embeddings.weight",
                vec![3, 200],
                Src::F32(weights(3, 200)),
            ),
        ],
    );
    let wide_q = dir.path().join("wide-q4g32.safetensors");
    let o = qlinear(&[
        "convert",
        wide.to_str().unwrap(),
        wide_q.to_str().unwrap(),
        "--scheme",
        "q4g32",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = qlinear(&["selftest", "--census", wide_q.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(count(&o), 67 + 2 + 1, "K = 256 beside 1..=67 and the two bounds");
}

#[test]
fn include_and_exclude_filters() {
    let dir = tempfile::tempdir().unwrap();
    let input = standard_model(dir.path());
    let out = dir.path().join("out.safetensors");
    let o = qlinear(&[
        "convert",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        "--scheme",
        "q8",
        "--include",
        "mlp",
        "--exclude",
        "down",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let f = QuantizedFile::open(&out).unwrap();
    assert_eq!(f.quantized_prefixes(), vec!["layers.0.mlp.up".to_string()]);
    assert!(f.raw("layers.0.attn.q.weight").is_some() && f.raw("layers.0.mlp.down.weight").is_some());
}

/// Runs a conversion that must fail: exit 1, one line on stderr containing
/// every `want`, and nothing new in the directory.
fn refused(dir: &Path, input: &Path, scheme: &str, want: &[&str]) {
    let before = entries(dir);
    let out = dir.join("refused.safetensors");
    let o = qlinear(&[
        "convert",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        "--scheme",
        scheme,
    ]);
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "one clear line: {err}");
    for w in want {
        assert!(err.contains(w), "{err:?} should contain {w:?}");
    }
    assert!(!out.exists(), "no output file");
    assert_eq!(entries(dir), before, "no temporary file left behind");
}

#[test]
fn refused_conversions_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut w = weights(4, 16);
    w[2 * 16 + 5] = f32::NAN;
    let nan = model(
        d,
        "nan.safetensors",
        vec![
            ("a.weight", vec![4, 16], Src::F32(weights(4, 16))),
            ("b.weight", vec![4, 16], Src::F32(w)),
        ],
    );
    refused(d, &nan, "q8", &["b.weight", "non-finite value NaN at row 2, column 5"]);
    refused(d, &nan, "q4g8", &["b.weight", "row 2, column 5"]);
    let good = model(
        d,
        "good.safetensors",
        vec![("a.weight", vec![4, 48], Src::F32(weights(4, 48)))],
    );
    refused(d, &good, "q4g32", &["a.weight", "group size 32 does not divide K = 48"]);
    refused(d, &good, "q4g3", &["unknown scheme \"q4g3\""]);
    refused(d, &good, "q4g0", &["unknown scheme \"q4g0\""]);
    refused(d, &good, "q5", &["unknown scheme \"q5\""]);
    let mut big = weights(2, 8);
    big[8 + 3] = 7.0 * 70000.0;
    let overflow = model(d, "overflow.safetensors", vec![("a.weight", vec![2, 8], Src::F32(big))]);
    refused(
        d,
        &overflow,
        "q4g4",
        &["a.weight", "f16 scale overflow at row 1, group 0"],
    );
    let mut bytes = std::fs::read(&good).unwrap();
    bytes.truncate(bytes.len() - 3);
    let truncated = d.join("truncated.safetensors");
    std::fs::write(&truncated, bytes).unwrap();
    refused(d, &truncated, "q8", &["truncated.safetensors", "it is cut short"]);
    let garbage = d.join("garbage.safetensors");
    std::fs::write(&garbage, b"\xff\xff\xff\xff\xff\xff\xff\x7fnot a header").unwrap();
    refused(d, &garbage, "q8", &["garbage.safetensors", "malformed"]);
    refused(d, &d.join("missing.safetensors"), "q8", &["missing.safetensors"]);
}

#[test]
fn inspect_reports_an_invalid_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = standard_model(dir.path());
    let out = dir.path().join("out.safetensors");
    assert!(qlinear(&[
        "convert",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        "--scheme",
        "q8"
    ])
    .status
    .success());
    // corrupt one scale of layers.0.attn.q to -1.0, in place
    let f = QuantizedFile::open(&out).unwrap();
    let scales = f.raw("layers.0.attn.q.scales").unwrap().data.to_vec();
    let mut bytes = std::fs::read(&out).unwrap();
    let at = bytes.windows(scales.len()).position(|w| w == scales).unwrap();
    bytes[at..at + 4].copy_from_slice(&(-1.0f32).to_le_bytes());
    drop(f);
    std::fs::write(&out, bytes).unwrap();
    let o = qlinear(&["inspect", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("layers.0.attn.q  INVALID: layers.0.attn.q.scales: invalid scale -1 at row 0"),
        "{text}"
    );
    assert!(String::from_utf8(o.stderr)
        .unwrap()
        .contains("1 quantized tensor(s) failed validation"));
}

/// `QLINEAR_INT8_TIER` names a tier for A/B runs; an unknown or undispatchable
/// one is an error listing the valid choices, never a silent fallback.
#[test]
fn forcing_a_tier_by_environment() {
    let run = |tier: &str| {
        Command::new(env!("CARGO_BIN_EXE_qlinear"))
            .arg("selftest")
            .env("QLINEAR_INT8_TIER", tier)
            .output()
            .unwrap()
    };
    let o = run("sse9");
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8(o.stderr).unwrap();
    // the registry's tiers, in its order
    let valid = qlinear::Int8Tier::ALL.map(|t| t.name()).join(", ");
    assert!(
        err.contains(&format!("unknown int8 tier \"sse9\"; valid tiers: {valid}")),
        "{err}"
    );
    // a tier of another architecture than this one
    let foreign = qlinear::Int8Tier::ALL
        .into_iter()
        .find(|t| t.arch() != "any" && t.arch() != std::env::consts::ARCH)
        .expect("the registry has tiers of other architectures")
        .name();
    let o = run(foreign);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(
        err.contains(&format!("int8 tier {foreign} is not dispatchable"))
            && err.contains("dispatchable tiers here: scalar"),
        "{err}"
    );
    let o = run("scalar");
    assert!(o.status.success());
    assert!(String::from_utf8(o.stdout)
        .unwrap()
        .contains("plan: forced to scalar by QLINEAR_INT8_TIER"));
}

/// Embedding and position tables stay in float by default, with the rule
/// printed; `--include` replaces the rule; an unknown recipe is refused.
#[test]
fn embedding_tables_stay_float_unless_included() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = model(
        d,
        "emb.safetensors",
        vec![
            ("embeddings.word_embeddings.weight", vec![4, 8], Src::F32(weights(4, 8))),
            ("transformer.wte.weight", vec![4, 8], Src::F32(weights(4, 8))),
            (
                "embeddings.position_embeddings.weight",
                vec![4, 8],
                Src::F32(weights(4, 8)),
            ),
            ("encoder.dense.weight", vec![4, 8], Src::F32(weights(4, 8))),
        ],
    );
    let out = d.join("out.safetensors");
    let o = qlinear(&[
        "convert",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        "--scheme",
        "q4",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    assert_eq!(text.matches("kept in float by the default rule").count(), 3, "{text}");
    let f = QuantizedFile::open(&out).unwrap();
    assert_eq!(f.quantized_prefixes(), ["encoder.dense".to_string()]);
    assert!(f.raw("embeddings.word_embeddings.weight").is_some());

    let o = qlinear(&[
        "convert",
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        "--scheme",
        "q4",
        "--include",
        ".",
        "--force",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(QuantizedFile::open(&out).unwrap().quantized_prefixes().len(), 4);

    let o = qlinear(&[
        "convert",
        input.to_str().unwrap(),
        d.join("x.safetensors").to_str().unwrap(),
        "--scheme",
        "q4",
        "--recipe",
        "best",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown recipe \"best\""));
}
