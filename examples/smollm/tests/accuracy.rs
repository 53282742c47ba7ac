//! Accuracy floors on the real model, measured and asserted with a margin
//! (`docs/benchmarks/history.md`, "Perplexity", has the full table from `cargo xtask smollm`):
//! SmolLM2-135M-Instruct converted by the converter's own code, scored on
//! the first 1024 tokens of Debian's GPL-3 text (`/usr/share/common-
//! licenses/GPL-3`, base-files) in windows of 512 against the f32 path.
//! Release only, for speed: `cargo xtask test` runs it with `--release
//! --ignored`.

use std::path::{Path, PathBuf};

use qlinear::gguf::GgufFile;

#[path = "../../../crates/formats/tests/support/smollm2.rs"]
mod smollm2;
use qlinear_cli::convert::{convert, Input, Options};
use qlinear_smollm::{score, Meta, Model, Scores, Tokenizer};
use smollm2::smollm2_gguf as model;

const TEXT: &str = "/usr/share/common-licenses/GPL-3";

/// `qlinear convert INPUT OUT --scheme S --tensor-scheme token_embd=q8`
/// (INPUT a GGUF or the f32 safetensors `Model::write_f32` writes).
fn converted(input: &Path, dir: &Path, scheme: &str) -> PathBuf {
    converted_by(input, dir, scheme, "canonical")
}

/// [`converted`] by `recipe` (`--recipe`).
fn converted_by(input: &Path, dir: &Path, scheme: &str, recipe: &str) -> PathBuf {
    converted_with(input, dir, scheme, recipe, None)
}

/// [`converted_by`], with the hessian file `hessian` (`--hessian`, for
/// `--recipe gptq`).
fn converted_with(input: &Path, dir: &Path, scheme: &str, recipe: &str, hessian: Option<&Path>) -> PathBuf {
    let stem = input.file_stem().and_then(|s| s.to_str()).unwrap_or("model");
    let out = dir.join(format!("{stem}-{scheme}-{recipe}.safetensors"));
    let input = Input::open(input).unwrap();
    let mut options = Options::parse(scheme, None, None)
        .unwrap()
        .with_recipe(recipe)
        .unwrap()
        .with_tensor_schemes(&["token_embd=q8".to_string()])
        .unwrap();
    if let Some(h) = hessian {
        options = options.with_hessian(qlinear::QuantizedFile::open(h).unwrap(), "hessian");
    }
    convert(&input, "model", &options, false, |meta, plans, produce| {
        qlinear::format::write_streaming(&out, meta, plans, produce)
    })
    .unwrap();
    out
}

/// `s`'s perplexity at most `max_ratio` × `f32`'s and its top-1 agreement
/// with `f32` at least `min_agree` (`what` names the model in the message).
fn holds_the_floors(what: &str, s: &Scores, f32: &Scores, max_ratio: f64, min_agree: f64) {
    let (ratio, agree) = (s.perplexity() / f32.perplexity(), s.agreement(f32));
    eprintln!(
        "{what}: perplexity {:.4} ({ratio:.4} × f32), top-1 {agree:.4}",
        s.perplexity()
    );
    assert!(
        ratio <= max_ratio,
        "{what}: perplexity {ratio:.4} × f32's, the floor is {max_ratio}"
    );
    assert!(
        agree >= min_agree,
        "{what}: top-1 agreement {agree:.4}, the floor is {min_agree}"
    );
}

/// A model transformed to compute the same function (smoothed, rotated)
/// scores as `f32`: its perplexity within 1e-4 and 99 % top-1.
fn keeps_the_f32_scores(what: &str, s: &Scores, f32: &Scores) {
    let (ratio, agree) = (s.perplexity() / f32.perplexity(), s.agreement(f32));
    eprintln!("{what} f32: perplexity {ratio:.6} × f32, top-1 {agree:.4}");
    assert!((ratio - 1.0).abs() <= 1e-4, "{what} f32: perplexity {ratio} × f32's");
    assert!(agree >= 0.99, "{what} f32: top-1 agreement {agree}");
}

#[test]
#[ignore = "release only (a 135M-parameter model): cargo xtask test runs it with --release --ignored"]
fn quantized_perplexity_stays_above_the_measured_floors() {
    let Some(gguf) = model() else { return };
    assert!(Path::new(TEXT).exists(), "{TEXT} is missing (Debian's base-files)");
    let file = GgufFile::open(&gguf).unwrap();
    let meta = Meta::from_gguf(&file);
    let tok = Tokenizer::from_meta(&meta).unwrap();
    let mut ids = tok.encode(&std::fs::read_to_string(TEXT).unwrap()).unwrap();
    ids.truncate(1024);
    let f32 = score(&Model::from_gguf(&file, &meta).unwrap(), &ids, 512).unwrap();
    let dir = tempfile::tempdir().unwrap();
    // (file, mode, the largest perplexity ratio to f32 and the smallest
    // top-1 agreement accepted). Measured on 7b4f3f5's successor (Intel
    // Xeon, family 6 model 207; the figures do not depend on the tier):
    // q8 W8A16 1.0092 / 95.5 %, q8 W8A8 1.0410 / 90.4 %, q4g32 W4A8
    // 1.3405 / 64.5 %; the floors leave a margin of a few per cent.
    for (scheme, mode, max_ratio, min_agree) in [
        ("q8", "W8A16", 1.02, 0.93),
        ("q8", "W8A8", 1.07, 0.87),
        ("q4g32", "W4A8", 1.40, 0.60),
    ] {
        let path = converted(&gguf, dir.path(), scheme);
        let (model, _) = Model::open(&path, &mode.parse().unwrap(), Default::default()).unwrap();
        let s = score(&model, &ids, 512).unwrap();
        holds_the_floors(&format!("{scheme} {mode}"), &s, &f32, max_ratio, min_agree);
    }
}

/// The model smoothed for W8A8 (`Model::smooth`, alpha 0.5) over the first
/// 1024 tokens of the GFDL 1.3 (base-files; disjoint from the scored text):
/// in f32 it scores as the model before it (the factors cancel up to f32
/// rounding), and at q8 W8A8 it stays above its measured floor, below the
/// unsmoothed file's; with `ffn_down` and the head at W8A16 the top-1
/// agreement stays above W8A8's.
#[test]
#[ignore = "release only (a 135M-parameter model): cargo xtask test runs it with --release --ignored"]
fn the_smoothed_model_keeps_the_f32_scores_and_lifts_w8a8() {
    const CALIBRATION: &str = "/usr/share/common-licenses/GFDL-1.3";
    // measured on the Intel Xeon (family 6 model 207): 1.0145 × f32 and
    // 90.0 % top-1 (the unsmoothed file above: 1.0410 / 90.4 %); the
    // perplexity floor is below the unsmoothed file's measured ratio, so
    // smoothing that did nothing fails it
    const MAX_RATIO: f64 = 1.03;
    const MIN_AGREE: f64 = 0.87;
    // the same file with `ffn_down` (whose input, SwiGLU's product, has the
    // widest columns) and the head at W8A16 (`qlinear_smollm::Modes`),
    // measured on the AMD EPYC Zen 4 (family 25 model 17): 1.0162 × f32
    // and 93.3 % top-1. Over 1024 tokens the perplexity moves with a few
    // positions (over 4096 the same rows are +0.96 % against W8A8's
    // +2.78 %, docs/BENCHMARKS.md), so the top-1 floor is the one above
    // W8A8's measured 90.0 %
    const MIXED: &str = "W8A8,ffn_down=W8A16,token_embd=W8A16";
    const MIXED_MAX_RATIO: f64 = 1.04;
    const MIXED_MIN_AGREE: f64 = 0.915;
    let Some(gguf) = model() else { return };
    let file = GgufFile::open(&gguf).unwrap();
    let meta = Meta::from_gguf(&file);
    let tok = Tokenizer::from_meta(&meta).unwrap();
    let ids = |path: &str| {
        let mut ids = tok.encode(&std::fs::read_to_string(path).unwrap()).unwrap();
        ids.truncate(1024);
        ids
    };
    let (scored, calibration) = (ids(TEXT), ids(CALIBRATION));
    let mut model = Model::from_gguf(&file, &meta).unwrap();
    let f32 = score(&model, &scored, 512).unwrap();
    model.start_calibration(false);
    let mut cache = qlinear_smollm::KvCache::new(&model.config, 512).unwrap();
    for window in calibration.chunks(512) {
        cache.clear();
        model.forward(&mut cache, window, false).unwrap();
    }
    model.smooth(0.5).unwrap();
    let smoothed = score(&model, &scored, 512).unwrap();
    keeps_the_f32_scores("smoothed", &smoothed, &f32);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("smoothed.safetensors");
    model.write_f32(&path, &meta).unwrap();
    drop(model);
    let q8 = converted(&path, dir.path(), "q8");
    for (modes, max_ratio, min_agree) in [
        ("W8A8", MAX_RATIO, MIN_AGREE),
        (MIXED, MIXED_MAX_RATIO, MIXED_MIN_AGREE),
    ] {
        let (model, _) = Model::open(&q8, &modes.parse().unwrap(), Default::default()).unwrap();
        let s = score(&model, &scored, 512).unwrap();
        holds_the_floors(&format!("smoothed q8 {modes}"), &s, &f32, max_ratio, min_agree);
    }
}

/// The model rotated for W8A8 (`Model::rotate_weights`): in f32 it scores
/// as the model before it (H Hᵀ = I up to f32 rounding), and converted at
/// q8 by the search recipe its W8A8 perplexity is within 1 % of f32's,
/// which neither the unrotated nor the smoothed file reaches.
#[test]
#[ignore = "release only (a 135M-parameter model): cargo xtask test runs it with --release --ignored"]
fn the_rotated_model_keeps_the_f32_scores_and_w8a8_near_them() {
    // measured on the AMD EPYC Zen 4 (family 25 model 17; the figures do
    // not depend on the tier): 0.9943 × f32's perplexity and 96.1 % top-1
    // (canonical recipe: 1.0010 and 95.1 %; unrotated 1.0410 / 90.4 %,
    // smoothed 1.0145 / 90.0 %, above). Over 4096 tokens: +0.07 %, 96.3 %
    const MAX_RATIO: f64 = 1.01;
    const MIN_AGREE: f64 = 0.935;
    let Some(gguf) = model() else { return };
    let file = GgufFile::open(&gguf).unwrap();
    let meta = Meta::from_gguf(&file);
    let tok = Tokenizer::from_meta(&meta).unwrap();
    let mut ids = tok.encode(&std::fs::read_to_string(TEXT).unwrap()).unwrap();
    ids.truncate(1024);
    let mut model = Model::from_gguf(&file, &meta).unwrap();
    let f32 = score(&model, &ids, 512).unwrap();
    model.rotate_weights().unwrap();
    let rotated = score(&model, &ids, 512).unwrap();
    keeps_the_f32_scores("rotated", &rotated, &f32);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rotated.safetensors");
    model.write_f32(&path, &meta).unwrap();
    drop(model);
    let q8 = converted_by(&path, dir.path(), "q8", "search");
    let (model, _) = Model::open(&q8, &"W8A8".parse().unwrap(), Default::default()).unwrap();
    assert!(model.is_rotated(), "the converted file keeps the rotation's key");
    let s = score(&model, &ids, 512).unwrap();
    holds_the_floors("rotated q8 W8A8", &s, &f32, MAX_RATIO, MIN_AGREE);
}

/// GPTQ (`docs/NUMERICS.md` §3.9) on the model rotated for W8A8: its
/// hessians recorded over the first 4096 tokens of the GFDL 1.3 (disjoint
/// from the scored text) on the rotated f32 path, q4g32 by GPTQ scores
/// within a few per cent of f32 at W4A8, where the search recipe on the
/// same rotated weights is a third worse.
#[test]
#[ignore = "release only (a 135M-parameter model): cargo xtask test runs it with --release --ignored"]
fn gptq_brings_the_rotated_q4g32_model_near_f32_at_w4a8() {
    const CALIBRATION: &str = "/usr/share/common-licenses/GFDL-1.3";
    // measured on the AMD EPYC Zen 4 (family 25 model 17; the figures do
    // not depend on the tier): GPTQ 1.0272 × f32's perplexity and 84.3 %
    // top-1; the search recipe on the same weights 1.4734 / 68.8 %; the
    // unrotated activation-aware file of `cargo xtask smollm` +13.3 % over
    // 4096 tokens. With 2048 calibration tokens GPTQ scored 1.0837
    const MAX_RATIO: f64 = 1.06;
    const MIN_AGREE: f64 = 0.81;
    let Some(gguf) = model() else { return };
    let file = GgufFile::open(&gguf).unwrap();
    let meta = Meta::from_gguf(&file);
    let tok = Tokenizer::from_meta(&meta).unwrap();
    let ids = |path: &str, n: usize| {
        let mut ids = tok.encode(&std::fs::read_to_string(path).unwrap()).unwrap();
        ids.truncate(n);
        ids
    };
    let (scored, calibration) = (ids(TEXT, 1024), ids(CALIBRATION, 4096));
    let mut model = Model::from_gguf(&file, &meta).unwrap();
    let f32 = score(&model, &scored, 512).unwrap();
    model.rotate_weights().unwrap();
    model.start_calibration(true);
    let mut cache = qlinear_smollm::KvCache::new(&model.config, 512).unwrap();
    for window in calibration.chunks(512) {
        cache.clear();
        model.forward(&mut cache, window, false).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let (rotated, hessian) = (
        dir.path().join("rotated.safetensors"),
        dir.path().join("hessian.safetensors"),
    );
    // one per linear: 7 a block and the head
    assert_eq!(model.write_hessians(&hessian).unwrap(), 7 * model.config.layers + 1);
    model.write_f32(&rotated, &meta).unwrap();
    drop(model);
    let gptq = converted_with(&rotated, dir.path(), "q4g32", "gptq", Some(&hessian));
    let search = converted_by(&rotated, dir.path(), "q4g32", "search");
    let scores = |path: &Path| {
        let (model, _) = Model::open(path, &"W4A8".parse().unwrap(), Default::default()).unwrap();
        score(&model, &scored, 512).unwrap()
    };
    holds_the_floors("gptq q4g32 W4A8", &scores(&gptq), &f32, MAX_RATIO, MIN_AGREE);
    let s = scores(&search);
    let ratio = s.perplexity() / f32.perplexity();
    eprintln!(
        "search q4g32 W4A8 (rotated): {ratio:.4} × f32, top-1 {:.4}",
        s.agreement(&f32)
    );
    assert!(
        ratio > MAX_RATIO,
        "the search recipe alone reaches {ratio:.4}: the test no longer shows what GPTQ adds"
    );
}
