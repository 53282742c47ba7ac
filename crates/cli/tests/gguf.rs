//! `qlinear convert` and `inspect` on GGUF input (issue 18): hand-built
//! files for every refusal, and the real SmolLM2-135M-Instruct Q4_1 file
//! with Q4_0 and Q8_0 files of the same model that the `gguf` package
//! writes (`tools/gguf_fixtures.py`). The tests that need the model or
//! Python skip with a message where they are missing; under `cargo xtask
//! test` (`QLINEAR_REQUIRE_GGUF`, `QLINEAR_SMOLLM2_GGUF`) they fail instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use qlinear::gguf::{GgmlType, GgufFile};
use qlinear::{QuantizedFile, QuantizedWeight};

#[path = "../../formats/tests/support/smollm2.rs"]
mod smollm2;
mod support;

use smollm2::{python_gguf, smollm2_gguf as model, weighted_bits};
use support::{qlinear, refused, s};

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// GGUF v3 bytes: string key/values, then tensors `(name, ggml dims, type
/// id, data)` laid out at 32-byte offsets.
fn gguf(kv: &[(&str, &str)], tensors: &[(&str, &[u64], u32, Vec<u8>)]) -> Vec<u8> {
    let text = |t: &str| [(t.len() as u64).to_le_bytes().as_slice(), t.as_bytes()].concat();
    let mut head = [b"GGUF".as_slice(), &3u32.to_le_bytes()].concat();
    head.extend((tensors.len() as u64).to_le_bytes());
    head.extend((kv.len() as u64).to_le_bytes());
    for (k, v) in kv {
        head.extend([text(k), 8u32.to_le_bytes().to_vec(), text(v)].concat());
    }
    let mut data: Vec<u8> = vec![];
    for (name, dims, ty, bytes) in tensors {
        data.resize(data.len().next_multiple_of(32), 0);
        head.extend(text(name));
        head.extend((dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| head.extend(d.to_le_bytes()));
        head.extend(ty.to_le_bytes());
        head.extend((data.len() as u64).to_le_bytes());
        data.extend(bytes);
    }
    head.resize(head.len().next_multiple_of(32), 0);
    [head, data].concat()
}

/// A Q4_0 block: `d` as f16 bits and 16 bytes of nibbles.
fn q4_0(d: u16, fill: u8) -> Vec<u8> {
    [d.to_le_bytes().to_vec(), vec![fill; 16]].concat()
}

/// A small model: a Q4_0 `[2, 64]` weight with a negative block scale, an
/// F16 `[2, 32]` weight, an F32 norm and a string key.
fn small(dir: &Path) -> PathBuf {
    let f16s: Vec<u8> = (0..64u16).flat_map(|i| (0x3000 + i * 16).to_le_bytes()).collect();
    let bytes = gguf(
        &[("general.architecture", "llama"), ("general.name", "tiny \"test\"")],
        &[
            (
                "blk.0.ffn_up.weight",
                &[64, 2],
                2,
                [
                    q4_0(0xC000, 0x1F),
                    q4_0(0x3800, 0x80),
                    q4_0(0x8000, 0x88),
                    q4_0(0x0001, 0x07),
                ]
                .concat(),
            ),
            ("blk.0.attn_q.weight", &[32, 2], 1, f16s),
            (
                "output_norm.weight",
                &[4],
                0,
                [1f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect(),
            ),
        ],
    );
    let path = dir.join("small.gguf");
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn a_small_gguf_converts_with_q4_0_imported_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let input = small(dir.path());
    let before = std::fs::read(&input).unwrap();
    let out = dir.path().join("out.safetensors");
    let report = stdout(&qlinear(&["convert", s(&input), s(&out), "--scheme", "q4g32"]));
    assert!(
        report.contains("blk.0.ffn_up.weight  [2, 64]  q4g32 imported losslessly from Q4_0 (every code and scale bit kept)  72 -> 72 bytes"),
        "{report}"
    );
    assert!(
        report.contains("blk.0.attn_q.weight  [2, 32]  q4g32 canonical from F16 (dequantized, then requantized)"),
        "{report}"
    );
    assert!(
        report.contains("output_norm.weight  F32 [4]  kept as it is"),
        "{report}"
    );
    assert_eq!(std::fs::read(&input).unwrap(), before, "the input is never touched");
    let f = QuantizedFile::open(&out).unwrap();
    let meta = f.metadata_map();
    // the negative block scale 0xC000 (-2) needs version 2
    assert_eq!(meta["qlinear.format"], "2");
    assert_eq!(meta["gguf.general.architecture"], "\"llama\"");
    assert_eq!(meta["gguf.general.name"], "\"tiny \\\"test\\\"\"");
    assert_eq!(meta["blk.0.ffn_up.qrecipe"], "gguf:Q4_0");
    assert_eq!(meta["blk.0.attn_q.qrecipe"], "canonical");
    // the scales are the blocks' d bits; codes in qlinear's order: block 0
    // bytes 0x1F hold weight j = 0xF - 8 = 7 for j < 16, 0x1 - 8 = -7 after
    let scales = f.raw("blk.0.ffn_up.scales").unwrap();
    assert_eq!(scales.data, &[0x00, 0xC0, 0x00, 0x38, 0x00, 0x80, 0x01, 0x00]);
    let QuantizedWeight::Q4(w) = f.load("blk.0.ffn_up").unwrap() else {
        panic!("q4")
    };
    let row0: Vec<i8> = (0..64).map(|c| w.code(0, c)).collect();
    let want: Vec<i8> = [[7i8; 16], [-7; 16], [-8; 16], [0; 16]].concat();
    assert_eq!(row0, want);
    let norm = f.tensor_f32("output_norm.weight").unwrap();
    assert_eq!(norm, vec![1.0, 2.0, 3.0, 4.0]);
    let inspect = stdout(&qlinear(&["inspect", s(&out)]));
    assert!(inspect.contains("qlinear format 2"), "{inspect}");
    assert!(
        inspect.contains("blk.0.ffn_up  q4g32 gguf:Q4_0  [2, 64]  4.500 bits/weight  ok"),
        "{inspect}"
    );
    // --requantize takes the Q4_0 weight through the recipe: version 1
    let again = dir.path().join("again.safetensors");
    let report = stdout(&qlinear(&[
        "convert",
        s(&input),
        s(&again),
        "--scheme",
        "q4g32",
        "--requantize",
    ]));
    assert!(
        report.contains("blk.0.ffn_up.weight  [2, 64]  q4g32 canonical from Q4_0 (dequantized, then requantized)"),
        "{report}"
    );
    assert_eq!(
        QuantizedFile::open(&again).unwrap().metadata_map()["qlinear.format"],
        "1"
    );
    // another scheme requantizes too, and says so
    let q8 = dir.path().join("q8.safetensors");
    let report = stdout(&qlinear(&["convert", s(&input), s(&q8), "--scheme", "q8"]));
    assert!(
        report.contains("blk.0.ffn_up.weight  [2, 64]  q8 canonical from Q4_0 (dequantized, then requantized)"),
        "{report}"
    );
}

#[test]
fn inspect_lists_a_gguf_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = small(dir.path());
    let text = stdout(&qlinear(&["inspect", s(&input)]));
    for line in [
        "small.gguf: GGUF version 3, 3 tensors, 2 metadata keys, alignment 32",
        "general.architecture  \"llama\"",
        "blk.0.ffn_up.weight  Q4_0  [2, 64]  4.500 bits/weight",
        "blk.0.attn_q.weight  F16  [2, 32]  16.000 bits/weight",
        "output_norm.weight  F32  [4]  32.000 bits/weight",
        "3 tensors, 196 weights in 216 bytes (8.816 bits/weight); header, offsets and extents valid",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
}

#[test]
fn tensor_scheme_rules_mix_schemes_and_override_the_table_rule() {
    let dir = tempfile::tempdir().unwrap();
    let emb: Vec<u8> = (0..128u16).flat_map(|i| (0x3C00 ^ (i << 4)).to_le_bytes()).collect();
    let bytes = gguf(
        &[],
        &[
            ("token_embd.weight", &[32, 4], 1, emb),
            (
                "blk.0.ffn_up.weight",
                &[64, 1],
                2,
                [q4_0(0x3C00, 0x12), q4_0(0x3C00, 0x34)].concat(),
            ),
        ],
    );
    let input = dir.path().join("m.gguf");
    std::fs::write(&input, bytes).unwrap();
    // by default the embedding table stays in float
    let plain = dir.path().join("plain.safetensors");
    let report = stdout(&qlinear(&["convert", s(&input), s(&plain), "--scheme", "q4g32"]));
    assert!(
        report.contains("token_embd.weight  kept in float by the default rule"),
        "{report}"
    );
    assert_eq!(
        QuantizedFile::open(&plain)
            .unwrap()
            .raw("token_embd.weight")
            .unwrap()
            .shape,
        &[4, 32]
    );
    // a rule quantizes it with its own scheme; the first matching rule wins
    let mixed = dir.path().join("mixed.safetensors");
    let report = stdout(&qlinear(&[
        "convert",
        s(&input),
        s(&mixed),
        "--scheme",
        "q4g32",
        "--tensor-scheme",
        "token_embd=q8",
        "--tensor-scheme",
        "embd=q4",
    ]));
    assert!(
        report.contains("token_embd.weight  [4, 32]  q8 canonical from F16"),
        "{report}"
    );
    let f = QuantizedFile::open(&mixed).unwrap();
    let schemes: Vec<String> = f
        .validate()
        .into_iter()
        .map(|(p, r)| format!("{p} {}", r.unwrap().scheme))
        .collect();
    assert_eq!(schemes, ["blk.0.ffn_up q4g32", "token_embd q8"]);
    // --exclude still wins over a rule
    let ex = dir.path().join("ex.safetensors");
    let report = stdout(&qlinear(&[
        "convert",
        s(&input),
        s(&ex),
        "--scheme",
        "q4g32",
        "--tensor-scheme",
        "token_embd=q8",
        "--exclude",
        "embd",
    ]));
    assert!(!report.contains("token_embd.weight  [4, 32]"), "{report}");
    // a bad rule is one line naming it, and nothing is written
    let bad = dir.path().join("bad.safetensors");
    for (rule, want) in [
        ("token_embd", "--tensor-scheme token_embd: expected REGEX=SCHEME"),
        ("token_embd=q5", "--tensor-scheme token_embd=q5: "),
        ("(=q8", "--tensor-scheme (=q8: invalid regex"),
    ] {
        let o = qlinear(&["convert", s(&input), s(&bad), "--scheme", "q8", "--tensor-scheme", rule]);
        refused(&o, &[want]);
        assert!(!bad.exists());
    }
}

#[test]
fn hostile_gguf_inputs_are_one_line_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(small(dir.path())).unwrap();
    let out = dir.path().join("out.safetensors");
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    // truncated inside the header, and inside the data
    for (name, cut) in [("head.gguf", 40), ("data.gguf", good.len() - 5)] {
        let p = write(name, &good[..cut]);
        for cmd in ["convert", "inspect"] {
            let o = if cmd == "convert" {
                qlinear(&["convert", s(&p), s(&out), "--scheme", "q8"])
            } else {
                qlinear(&["inspect", s(&p)])
            };
            refused(&o, &[name, "GGUF"]);
        }
        assert!(!out.exists());
    }
    // a NaN block scale cannot be imported losslessly; --requantize says
    // the recipe's refusal instead
    let nan = gguf(&[], &[("w.weight", &[32, 1], 2, q4_0(0x7E00, 0x88))]);
    let p = write("nan.gguf", &nan);
    let o = qlinear(&["convert", s(&p), s(&out), "--scheme", "q4g32"]);
    refused(
        &o,
        &["w.weight", "row 0, block 0 (columns 0..32) has the scale d = NaN"],
    );
    let o = qlinear(&["convert", s(&p), s(&out), "--scheme", "q4g32", "--requantize"]);
    refused(&o, &["w.weight", "row 0", "non-finite"]);
    assert!(!out.exists());
    // a tensor type the converter cannot decode, even one it would copy
    let iq = gguf(&[], &[("w.weight", &[256, 1], 16, vec![0; 66])]);
    let p = write("iq.gguf", &iq);
    let o = qlinear(&["convert", s(&p), s(&out), "--scheme", "q8"]);
    refused(&o, &["w.weight: GGUF type IQ2_XXS, which this converter cannot decode"]);
    assert!(!out.exists());
    // OUT == IN is refused for GGUF input too
    let p = write("same.gguf", &good);
    let o = qlinear(&["convert", s(&p), s(&p), "--scheme", "q8", "--force"]);
    refused(&o, &["is the input file"]);
    assert_eq!(std::fs::read(&p).unwrap(), good);
    // nothing left behind: no output, no partial file
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "data.gguf",
            "head.gguf",
            "iq.gguf",
            "nan.gguf",
            "same.gguf",
            "small.gguf"
        ]
    );
}

/// The Q4_0 (embedding Q8_0, as llama.cpp writes its Q4_0 files) and Q8_0
/// files of the model, written once by `tools/gguf_fixtures.py`.
fn fixtures() -> Option<&'static (tempfile::TempDir, PathBuf, PathBuf)> {
    static FIXTURES: OnceLock<Option<(tempfile::TempDir, PathBuf, PathBuf)>> = OnceLock::new();
    FIXTURES
        .get_or_init(|| {
            let src = model()?;
            if !python_gguf() {
                return None;
            }
            let dir = tempfile::tempdir().unwrap();
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/gguf_fixtures.py");
            let mut made = vec![];
            for (name, args) in [("q4_0.gguf", ["Q4_0", "Q8_0"]), ("q8_0.gguf", ["Q8_0", "Q8_0"])] {
                let out = dir.path().join(name);
                let st = Command::new("python3")
                    .arg(script)
                    .arg(&src)
                    .arg(&out)
                    .args(args)
                    .status()
                    .unwrap();
                assert!(st.success(), "tools/gguf_fixtures.py {name} failed");
                made.push(out);
            }
            let q8 = made.pop().unwrap();
            let q4 = made.pop().unwrap();
            Some((dir, q4, q8))
        })
        .as_ref()
}

#[test]
fn smollm2_q4_1_converts_with_every_scheme() {
    let Some(path) = model() else { return };
    let dir = tempfile::tempdir().unwrap();
    for scheme in ["q8", "q4", "q4g32"] {
        let out = dir.path().join(format!("{scheme}.safetensors"));
        let report = stdout(&qlinear(&["convert", s(&path), s(&out), "--scheme", scheme]));
        let lines = report
            .lines()
            .filter(|l| {
                l.contains(&format!(
                    "  {scheme} canonical from Q4_1 (dequantized, then requantized)"
                ))
            })
            .count();
        assert_eq!(lines, 210, "{report}");
        let inspect = stdout(&qlinear(&["inspect", s(&out)]));
        assert!(inspect.contains("qlinear format 1"), "{inspect}");
        assert!(inspect.contains("210 quantized tensors, 0 invalid"), "{inspect}");
        let f = QuantizedFile::open(&out).unwrap();
        let meta = f.metadata_map();
        assert_eq!(meta["gguf.llama.block_count"], "30");
        assert_eq!(meta["gguf.llama.rope.freq_base"], "100000.0");
        assert!(meta["gguf.tokenizer.chat_template"].starts_with("\"{% for message in messages %}"));
        let tokens: Vec<String> = serde_json::from_str(&meta["gguf.tokenizer.ggml.tokens"]).unwrap();
        assert_eq!(tokens.len(), 49_152);
        // the tied embedding stays in float (49152 × 576, dequantized Q8_0)
        assert_eq!(f.raw("token_embd.weight").unwrap().shape, &[49_152, 576]);
    }
}

#[test]
fn smollm2_q4_0_imports_into_q4g32_bit_for_bit() {
    let Some((dir, q4_0, _)) = fixtures() else { return };
    let out = dir.path().join("imported.safetensors");
    let report = stdout(&qlinear(&["convert", s(q4_0), s(&out), "--scheme", "q4g32", "--force"]));
    let lossless = report
        .lines()
        .filter(|l| l.contains("q4g32 imported losslessly from Q4_0"))
        .count();
    assert_eq!(lossless, 210, "{report}");
    let g = GgufFile::open(q4_0).unwrap();
    let f = QuantizedFile::open(&out).unwrap();
    assert_eq!(
        f.metadata_map()["qlinear.format"],
        "2",
        "ggml's d = max / -8 is negative in about half the blocks"
    );
    // every code and scale bit, read from both files with no qlinear decoder
    let mut negative = 0usize;
    let mut blocks = 0usize;
    for t in g.tensors().iter().filter(|t| t.ggml_type == GgmlType::Q4_0) {
        let prefix = t.name.strip_suffix(".weight").unwrap();
        let data = g.tensor_data(t);
        let qweight = f.raw(&format!("{prefix}.qweight")).unwrap().data;
        let scales = f.raw(&format!("{prefix}.scales")).unwrap().data;
        for (i, b) in data.chunks_exact(18).enumerate() {
            assert_eq!(&scales[2 * i..2 * i + 2], &b[..2], "{}: block {i}'s scale", t.name);
            negative += usize::from(b[1] & 0x80 != 0 && b[..2] != [0x00, 0x80]);
            blocks += 1;
            for j in 0..32 {
                let ggml = if j < 16 { b[2 + j] & 15 } else { b[2 + j - 16] >> 4 };
                let byte = qweight[i * 16 + j / 2];
                let ours = if j % 2 == 0 { byte & 15 } else { byte >> 4 };
                // ggml's nibble is code + 8, ours the code in two's complement
                assert_eq!(ours, (ggml ^ 8) & 15, "{}: block {i} weight {j}", t.name);
            }
        }
    }
    assert!(
        negative * 4 > blocks && negative * 4 < 3 * blocks,
        "{negative} of {blocks} blocks negative"
    );
    // qlinear's dequantization of each imported weight against the gguf
    // package's dequantization of the Q4_0 tensor
    let script = "import sys, numpy as np, gguf\n\
                  r = gguf.GGUFReader(sys.argv[1])\n\
                  for t in r.tensors:\n\
                  \x20   if t.tensor_type != gguf.GGMLQuantizationType.Q4_0: continue\n\
                  \x20   y = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).ravel()\n\
                  \x20   b = y.view(np.uint32).astype(np.uint64)\n\
                  \x20   w = np.arange(b.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)\n\
                  \x20   print(t.name, b.size, int((b * w).sum(dtype=np.uint64)))\n";
    let o = Command::new("python3").args(["-c", script]).arg(q4_0).output().unwrap();
    let theirs = stdout(&o);
    assert_eq!(theirs.lines().count(), 210);
    for line in theirs.lines() {
        let v: Vec<&str> = line.split(' ').collect();
        let w = f.load(v[0].strip_suffix(".weight").unwrap()).unwrap().dequantize();
        assert_eq!(w.len().to_string(), v[1], "{}", v[0]);
        assert_eq!(
            weighted_bits(&w).to_string(),
            v[2],
            "{}: the dequantized bits differ",
            v[0]
        );
    }
}

#[test]
fn smollm2_q8_0_requantizes_to_q8_and_says_so() {
    let Some((dir, _, q8_0)) = fixtures() else { return };
    let out = dir.path().join("q8.safetensors");
    let report = stdout(&qlinear(&[
        "convert",
        s(q8_0),
        s(&out),
        "--scheme",
        "q8",
        "--tensor-scheme",
        "token_embd=q8",
        "--force",
    ]));
    let lines = report
        .lines()
        .filter(|l| l.contains("  q8 canonical from Q8_0 (dequantized, then requantized)"))
        .count();
    assert_eq!(lines, 211, "{report}");
    let inspect = stdout(&qlinear(&["inspect", s(&out)]));
    assert!(inspect.contains("211 quantized tensors, 0 invalid"), "{inspect}");
    // a runtime reads the quantized table by rows and uses it as the head
    let model = qlinear::ModelFile::open(&out).unwrap();
    let emb = model.embedding("token_embd.weight").unwrap();
    assert_eq!((emb.rows(), emb.dim()), (49_152, 576));
    let all = QuantizedFile::open(&out)
        .unwrap()
        .load("token_embd")
        .unwrap()
        .dequantize();
    let mut row = vec![0f32; 576];
    for r in [0, 1, 49_151] {
        emb.row(r, &mut row).unwrap();
        assert_eq!(row, all[r * 576..(r + 1) * 576]);
    }
    assert_eq!(model.linear("token_embd").unwrap().out_features(), 49_152);
}

#[test]
fn activation_aware_and_lying_counts_on_gguf_input() {
    let dir = tempfile::tempdir().unwrap();
    let input = small(dir.path());
    // --recipe activation-aware reads PREFIX.importance as for safetensors;
    // the lossless import needs none, the requantized weight does
    let imp: Vec<u8> = (0..32).flat_map(|i| (1.0f32 + i as f32).to_le_bytes()).collect();
    let views = vec![(
        "blk.0.attn_q.importance".to_string(),
        safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![32], &imp).unwrap(),
    )];
    let imp_path = dir.path().join("imp.safetensors");
    std::fs::write(&imp_path, safetensors::serialize(views, None).unwrap()).unwrap();
    let out = dir.path().join("aa.safetensors");
    let args = [
        "convert",
        s(&input),
        s(&out),
        "--scheme",
        "q4g32",
        "--recipe",
        "activation-aware",
        "--importance",
    ];
    let report = stdout(&qlinear(&[&args[..], &[s(&imp_path)]].concat()));
    assert!(
        report.contains("blk.0.attn_q.weight  [2, 32]  q4g32 activation-aware from F16"),
        "{report}"
    );
    assert!(
        report.contains("blk.0.ffn_up.weight  [2, 64]  q4g32 imported losslessly from Q4_0"),
        "{report}"
    );
    assert_eq!(
        QuantizedFile::open(&out).unwrap().metadata_map()["blk.0.attn_q.qrecipe"],
        "activation-aware"
    );
    // with --requantize the Q4_0 weight needs its importance too, and says so
    let o = qlinear(&[&args[..], &[s(&imp_path), "--requantize", "--force"]].concat());
    refused(&o, &["blk.0.ffn_up.weight", "blk.0.ffn_up.importance"]);
    // a header that claims 2^40 tensors, or a 2^63-byte key, is refused at
    // once and names what lies
    let out = dir.path().join("x.safetensors");
    let mut huge = [
        b"GGUF".as_slice(),
        &3u32.to_le_bytes(),
        &(1u64 << 40).to_le_bytes(),
        &0u64.to_le_bytes(),
    ]
    .concat();
    huge.resize(4096, 0);
    let p = dir.path().join("huge.gguf");
    std::fs::write(&p, &huge).unwrap();
    let t = std::time::Instant::now();
    refused(
        &qlinear(&["convert", s(&p), s(&out), "--scheme", "q8"]),
        &["huge.gguf", "tensor count"],
    );
    let mut key = [
        b"GGUF".as_slice(),
        &3u32.to_le_bytes(),
        &0u64.to_le_bytes(),
        &1u64.to_le_bytes(),
    ]
    .concat();
    key.extend((1u64 << 63).to_le_bytes());
    key.resize(4096, b'a');
    std::fs::write(&p, &key).unwrap();
    refused(&qlinear(&["inspect", s(&p)]), &["huge.gguf", "GGUF"]);
    assert!(t.elapsed() < std::time::Duration::from_secs(10));
    assert!(!out.exists());
}
