//! The f32 path against `tools/smollm_reference.py` (numpy, written from
//! the GGUF alone) on the real SmolLM2-135M-Instruct file: the logits of
//! every prompt position within 1e-3 of the largest logit, and the same 32
//! greedy tokens. And the tokenizer and the chat template on that file.

use std::process::Command;

use qlinear::gguf::GgufFile;

#[path = "../../../crates/formats/tests/support/smollm2.rs"]
mod smollm2;
use qlinear_smollm::{KvCache, Meta, Model, Sampler, Tokenizer};
use smollm2::smollm2_gguf as model;

const PROMPT: &str = "The quick brown fox jumps over the lazy dog. In 1905, Albert Einstein published";

#[test]
fn the_tokenizer_reads_the_files_vocabulary() {
    let Some(path) = model() else { return };
    let file = GgufFile::open(&path).unwrap();
    let tok = Tokenizer::from_meta(&Meta::from_gguf(&file)).unwrap();
    assert_eq!(tok.vocab_size(), 49_152);
    assert_eq!(tok.eos, 2);
    for text in [PROMPT, "naïve café — 東京 😀", "  two  spaces\nand\ttabs", "x = 12345;"] {
        let ids = tok.encode(text).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), text, "{ids:?}");
    }
    // every digit is its own token (llama.cpp's "smollm" pre-tokenizer)
    let digits = tok.encode("2024").unwrap();
    assert_eq!(digits.len(), 4);
    assert_eq!(tok.decode(&digits[1..2]).unwrap(), "0");
    // control tokens are matched whole
    assert_eq!(tok.encode("<|im_start|>user").unwrap()[0], 1);
    assert_eq!(tok.encode("<|im_end|>").unwrap(), [2]);
    let chat = tok.chat("Hi").unwrap();
    assert_eq!(
        chat,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    assert!(tok.decode(&[49_152]).is_err());
    // generation stops at the end of the turn and of the text
    assert!(tok.is_control(2) && tok.is_control(0) && tok.is_control(1));
    assert!(!tok.is_control(tok.encode(" the").unwrap()[0]));
}

#[test]
fn the_f32_path_matches_the_numpy_reference() {
    let Some(path) = model() else { return };
    if !smollm2::python_gguf() {
        return;
    }
    let file = GgufFile::open(&path).unwrap();
    let meta = Meta::from_gguf(&file);
    matches_the_numpy_reference(&path, &Model::from_gguf(&file, &meta).unwrap(), &meta);
}

/// The model rotated for W8A8 (`Model::rotate_weights`) and written as
/// f32: the reference reads the file and builds the Hadamard matrices
/// from the construction as documented, with `np.kron`.
#[test]
fn the_rotated_f32_path_matches_the_numpy_reference_on_its_file() {
    let Some(path) = model() else { return };
    if !smollm2::python_gguf() {
        return;
    }
    let file = GgufFile::open(&path).unwrap();
    let meta = Meta::from_gguf(&file);
    let mut model = Model::from_gguf(&file, &meta).unwrap();
    model.rotate_weights().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rotated = dir.path().join("rotated.safetensors");
    model.write_f32(&rotated, &meta).unwrap();
    drop(model);
    let (model, meta) = Model::open(&rotated, &Default::default(), Default::default()).unwrap();
    assert!(model.is_rotated());
    matches_the_numpy_reference(&rotated, &model, &meta);
}

/// `model`'s logits at every position of [`PROMPT`] within 1e-3 of the
/// largest of `tools/smollm_reference.py`'s on `path`, and its 32 greedy
/// tokens through the KV cache the reference's.
fn matches_the_numpy_reference(path: &std::path::Path, model: &Model, meta: &Meta) {
    let tok = Tokenizer::from_meta(meta).unwrap();
    let ids = tok.encode(PROMPT).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (logits_path, ids_path) = (dir.path().join("logits.bin"), dir.path().join("ids.txt"));
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/smollm_reference.py");
    let st = Command::new("python3")
        .arg(script)
        .arg(path)
        .arg(list.join(","))
        .arg(&logits_path)
        .arg(&ids_path)
        .arg("32")
        .status()
        .unwrap();
    assert!(st.success(), "the numpy reference failed");
    let theirs: Vec<f32> = std::fs::read(&logits_path)
        .unwrap()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let vocab = model.vocab();
    let mut cache = KvCache::new(&model.config, 128).unwrap();
    let ours = model.forward(&mut cache, &ids, true).unwrap();
    assert_eq!(ours.len(), theirs.len());
    for (pos, (a, b)) in ours.chunks_exact(vocab).zip(theirs.chunks_exact(vocab)).enumerate() {
        let max = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(
            worst <= 1e-3 * max,
            "position {pos}: max |Δ logit| {worst} against max |logit| {max}"
        );
    }
    // 32 greedy tokens through the KV cache, token for token
    let want: Vec<u32> = std::fs::read_to_string(&ids_path)
        .unwrap()
        .trim()
        .split(',')
        .map(|t| t.parse().unwrap())
        .collect();
    let mut next = Sampler::argmax(&ours[ours.len() - vocab..]);
    let mut got = vec![next];
    while got.len() < 32 {
        next = Sampler::argmax(model.forward(&mut cache, &[next], false).unwrap());
        got.push(next);
    }
    assert_eq!(got, want, "greedy continuation: {:?}", tok.decode(&got));
}
