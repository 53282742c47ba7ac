//! Smoothing and rotation keep the model's function and write files that
//! run.

use super::*;

/// Smoothing for W8A8 (`Model::smooth`) on a small f32 model read from a
/// safetensors file: the logits stay those of the model before (up to f32
/// rounding: the factors cancel in exact arithmetic), the weights do change,
/// the file `Model::write_f32` writes runs with the smoothed model's bits,
/// and what cannot be smoothed is one error naming why.
#[test]
fn smoothing_keeps_the_models_function_and_writes_a_file_that_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = small(dir.path(), None, 0.75);
    let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
    let mut model = Model::from_converted(&file, &meta, &Modes::default()).unwrap();
    assert_eq!(model.description, "f32");
    let ids = [3u32, 61, 7, 0, 42, 18, 69, 5, 33];
    let logits = |m: &Model| {
        let mut cache = KvCache::new(&m.config, 32).unwrap();
        m.forward(&mut cache, &ids, true).unwrap().to_vec()
    };
    let before = logits(&model);
    // nothing calibrated yet
    let e = model.smooth(0.5).unwrap_err().to_string();
    assert_eq!(
        e,
        "smoothing: blk.0.attn_q has no calibration rows: run the f32 path over a text first"
    );
    model.start_calibration(false);
    let mut cache = KvCache::new(&model.config, 32).unwrap();
    model
        .forward(&mut cache, &[9, 1, 55, 20, 64, 2, 38, 11, 47, 30, 6], false)
        .unwrap();
    let e = model.smooth(1.5).unwrap_err().to_string();
    assert_eq!(e, "smoothing: alpha 1.5 is outside [0, 1]");
    model.smooth(0.5).unwrap();
    assert_eq!(model.description, "f32, smoothed (alpha 0.5)");
    let after = logits(&model);
    let scale = before.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (a, b)) in before.iter().zip(&after).enumerate() {
        assert!((a - b).abs() <= 1e-4 * scale, "logit {i}: {a} before, {b} smoothed");
    }
    // the smoothed file: its weights differ from the original's, and it runs
    // with the bits of the model in memory
    let path = dir.path().join("smoothed.safetensors");
    model.write_f32(&path, &meta).unwrap();
    let written = ModelFile::open(&path).unwrap();
    for name in [
        "blk.0.attn_norm.weight",
        "blk.1.attn_q.weight",
        "blk.0.attn_v.weight",
        "blk.1.ffn_up.weight",
    ] {
        let (old, new) = (file.tensor_f32(name).unwrap(), written.tensor_f32(name).unwrap());
        assert_eq!(old.len(), new.len(), "{name}");
        assert_ne!(old, new, "{name} should be smoothed");
    }
    let meta2 = Meta::from_converted(written.file().metadata_map()).unwrap();
    let reread = Model::from_converted(&written, &meta2, &Modes::default()).unwrap();
    assert_eq!(reread.config.heads, 6);
    assert_eq!(logits(&reread), after);
    // smoothing twice needs a new calibration; a quantized model has no f32
    // weights to smooth or write; an f32 layer takes no mode
    let e = model.smooth(0.5).unwrap_err().to_string();
    assert!(e.contains("no calibration rows"), "{e}");
    let q = small(dir.path(), Some(QScheme::Q8), 0.75);
    let mut quantized = Model::from_converted(&q, &meta, &Modes::default()).unwrap();
    quantized.start_calibration(false);
    let e = quantized.smooth(0.5).unwrap_err().to_string();
    assert_eq!(
        e,
        "smoothing: blk.0.attn_q is quantized: smoothing needs the f32 path (a GGUF file, or an f32 one)"
    );
    let e = quantized
        .write_f32(&dir.path().join("no.safetensors"), &meta)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "token_embd.weight: quantized: only the f32 path can be written as f32"
    );
    assert!(!dir.path().join("no.safetensors").exists());
    let e = Model::from_converted(&file, &meta, &"W8A8".parse().unwrap())
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        e,
        "blk.0.attn_q.weight: kept in float: a mode (w8a8) applies to quantized layers only"
    );
}

/// A small f32 Llama whose widths have Hadamard matrices (hidden 96 = 12 ·
/// 8, FFN 192 = 12 · 16; 6 heads of 16 sharing 3 KV heads, vocabulary 70,
/// two blocks), with an LM head of its own where `untied`.
fn rotatable(dir: &std::path::Path, untied: bool) -> ModelFile {
    small_shaped(dir, None, 0.75, untied, 192)
}

/// Rotation for W8A8 (`Model::rotate_weights`), tied and untied: the logits
/// stay those of the model before (H Hᵀ = I up to f32 rounding), the file
/// `Model::write_f32` writes says it is rotated and runs with the rotated
/// model's bits, that file quantized at q8 decodes with the same bits on
/// one thread, on teams and on a pool as in one batch, and what cannot be
/// rotated is one error naming why.
#[test]
fn rotation_keeps_the_models_function_and_runs_rotated_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let ids = [3u32, 61, 7, 0, 42, 18, 69, 5, 33];
    let logits = |m: &Model| {
        let mut cache = KvCache::new(&m.config, 32).unwrap();
        m.forward(&mut cache, &ids, true).unwrap().to_vec()
    };
    for untied in [false, true] {
        let file = rotatable(dir.path(), untied);
        let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
        let mut model = Model::from_converted(&file, &meta, &Modes::default()).unwrap();
        let before = logits(&model);
        model.rotate_weights().unwrap();
        assert!(model.is_rotated());
        assert_eq!(model.description, "f32, rotated");
        let after = logits(&model);
        let scale = before.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (i, (a, b)) in before.iter().zip(&after).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * scale,
                "{untied}: logit {i}: {a} before, {b} rotated"
            );
        }
        let e = model.rotate_weights().unwrap_err().to_string();
        assert_eq!(e, "rotation: the model is rotated already");
        model.start_calibration(false);
        let mut cache = KvCache::new(&model.config, 32).unwrap();
        model.forward(&mut cache, &[9, 1, 55, 20], false).unwrap();
        let e = model.smooth(0.5).unwrap_err().to_string();
        assert!(
            e.starts_with("rotation: the model is rotated: smoothing divides"),
            "{e}"
        );
        // the file: rotated weights, the key, the model's bits
        let path = dir.path().join(format!("rotated-{untied}.safetensors"));
        model.write_f32(&path, &meta).unwrap();
        let written = ModelFile::open(&path).unwrap();
        assert_eq!(
            written
                .file()
                .metadata_map()
                .get("gguf.qlinear_smollm.rotation")
                .map(String::as_str),
            Some("\"hadamard\"")
        );
        for name in ["token_embd.weight", "blk.1.attn_q.weight", "blk.0.ffn_down.weight"] {
            assert_ne!(
                file.tensor_f32(name).unwrap(),
                written.tensor_f32(name).unwrap(),
                "{name}"
            );
        }
        let meta2 = Meta::from_converted(written.file().metadata_map()).unwrap();
        let reread = Model::from_converted(&written, &meta2, &Modes::default()).unwrap();
        assert!(reread.is_rotated());
        assert_eq!(logits(&reread), after);
        // at q8: decode steps on every split have the batch's bits
        let q8 = dir.path().join(format!("rotated-q8-{untied}.safetensors"));
        let input = qlinear_cli::convert::Input::open(&path).unwrap();
        let options = qlinear_cli::convert::Options::parse("q8", None, None).unwrap();
        qlinear_cli::convert::convert(&input, "model", &options, false, |meta, plans, produce| {
            qlinear::format::write_streaming(&q8, meta, plans, produce)
        })
        .unwrap();
        let qfile = ModelFile::open(&q8).unwrap();
        let qmeta = Meta::from_converted(qfile.file().metadata_map()).unwrap();
        let mut quantized = Model::from_converted(&qfile, &qmeta, &Modes::default()).unwrap();
        assert!(quantized.is_rotated());
        assert_eq!(quantized.description, "q8 w8a8 (head q8 w8a8), rotated");
        let all = logits(&quantized);
        // the synthetic rows (a hash's sawtooth) are far from what rotation
        // is for: the real model's accuracy is tests/accuracy.rs's
        assert!(all.iter().all(|v| v.is_finite()));
        for (threads, split) in [
            (1, DecodeSplit::Team),
            (2, DecodeSplit::Team),
            (3, DecodeSplit::Team),
            (2, DecodeSplit::Pool),
        ] {
            quantized.set_decode_split(split);
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            let steps: Vec<u32> = pool.install(|| {
                let mut cache = KvCache::new(&quantized.config, 32).unwrap();
                ids.iter()
                    .flat_map(|&t| quantized.forward(&mut cache, &[t], false).unwrap().to_vec())
                    .map(f32::to_bits)
                    .collect()
            });
            let want: Vec<u32> = all.iter().map(|v| v.to_bits()).collect();
            assert!(steps == want, "{untied}: {threads} threads, {split:?}");
        }
        // a quantized model has no f32 weights to rotate
        let e = Model::from_converted(&qfile, &meta, &Modes::default())
            .unwrap()
            .rotate_weights()
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("rotation: "), "{e}");
    }
    // a width with no Hadamard matrix here (FFN 160), an unknown rotation
    let small = small(dir.path(), None, 0.75);
    let meta = Meta::from_converted(small.file().metadata_map()).unwrap();
    let e = Model::from_converted(&small, &meta, &Modes::default())
        .unwrap()
        .rotate_weights()
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "rotation: ffn_down's input (llama.feed_forward_length) is 160 wide: \
         a Hadamard rotation is built for widths 12^b · 2^a only"
    );
    let file = rotatable(dir.path(), false);
    let mut entries = file.file().metadata_map().clone();
    entries.insert("gguf.qlinear_smollm.rotation".into(), "\"givens\"".into());
    let e = Model::from_converted(&file, &Meta::from_converted(&entries).unwrap(), &Modes::default())
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        e,
        "metadata qlinear_smollm.rotation: is \"givens\": this build rotates by \"hadamard\" only"
    );
}
