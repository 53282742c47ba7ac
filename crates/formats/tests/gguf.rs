//! The GGUF reader on hand-built files: every value type, both versions,
//! the tensor layout, and every way a hostile header can lie (the block
//! decoders are `gguf_blocks.rs`').

use std::time::Instant;

use proptest::prelude::*;
use qlinear_formats::{FormatError, GgmlType, GgufFile, GgufValue, GgufValueType};

mod gguf_files;
use gguf_files::*;

#[test]
fn every_value_type_and_tensor_reads_back() {
    let f = open(&sample()).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.get("general.architecture").and_then(GgufValue::as_str), Some("llama"));
    assert_eq!(f.get("u8"), Some(&GgufValue::U8(200)));
    assert_eq!(f.get("i8"), Some(&GgufValue::I8(-1)));
    assert_eq!(f.get("u16"), Some(&GgufValue::U16(513)));
    assert_eq!(f.get("i16"), Some(&GgufValue::I16(-2)));
    assert_eq!(f.get("u32").and_then(GgufValue::as_u64), Some(70000));
    assert_eq!(f.get("i32"), Some(&GgufValue::I32(-70000)));
    assert_eq!(f.get("i32").and_then(GgufValue::as_u64), None);
    assert_eq!(f.get("f32"), Some(&GgufValue::F32(0.5)));
    assert_eq!(f.get("bool"), Some(&GgufValue::Bool(true)));
    assert_eq!(f.get("u64"), Some(&GgufValue::U64(1 << 40)));
    assert_eq!(f.get("i64"), Some(&GgufValue::I64(-1)));
    assert_eq!(f.get("f64"), Some(&GgufValue::F64(0.125)));
    assert_eq!(
        f.get("tokens"),
        Some(&GgufValue::Array {
            item: GgufValueType::String,
            values: vec![GgufValue::String("a".into()), GgufValue::String("é".into())]
        })
    );
    let inner = GgufValue::Array {
        item: GgufValueType::U32,
        values: vec![GgufValue::U32(7), GgufValue::U32(9)],
    };
    assert_eq!(
        f.get("nested"),
        Some(&GgufValue::Array {
            item: GgufValueType::Array,
            values: vec![inner]
        })
    );
    assert_eq!(f.metadata().len(), 14);
    assert_eq!(f.metadata()[0].0, "general.architecture");
    assert_eq!(f.tensors().len(), 2);
    let up = f.tensor("blk.0.ffn_up.weight").unwrap();
    assert_eq!(
        (up.dims.clone(), up.shape(), up.ggml_type, up.n_bytes),
        (vec![32, 2], vec![2, 32], GgmlType::Q4_0, 36)
    );
    assert_eq!(f.tensor_data(up).len(), 36);
    let w = f.tensor_f32("blk.0.ffn_up.weight").unwrap();
    let want: Vec<f32> = [0.5f32, -2.0]
        .iter()
        .flat_map(|&d| (0..32).map(move |j| d * ((j % 16) as f32 - 8.0)))
        .collect();
    assert_eq!(w, want);
    assert_eq!(f.tensor_f32("norm.weight").unwrap(), [1.5, -2.0, 0.25, 8.0, 0.0, -0.5]);
    assert!(matches!(f.tensor_f32("nope"), Err(FormatError::MissingTensor { .. })));
    // version 2 reads the same
    let mut v2 = sample();
    v2.version = 2;
    assert_eq!(open(&v2).unwrap().tensors(), f.tensors());
}

#[test]
fn the_alignment_key_moves_the_data_section() {
    let mut b = Builder::new().kv("general.alignment", 4, &64u32.to_le_bytes());
    b.alignment = 64;
    let b = b.tensor("a", &[3], 0, &[0; 12]).tensor("b", &[2], 0, &[0; 8]);
    let f = open(&b).unwrap();
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.tensor("b").unwrap().offset, 64);
    for (v, ty) in [
        (48u32.to_le_bytes().to_vec(), 4),
        (0u32.to_le_bytes().to_vec(), 4),
        (64u64.to_le_bytes().to_vec(), 10),
    ] {
        let e = refusal(&Builder::new().kv("general.alignment", ty, &v));
        assert!(e.contains("general.alignment") && e.contains("power of two"), "{e}");
    }
}

#[test]
fn wrong_magic_and_versions_are_refused() {
    assert!(matches!(
        GgufFile::from_bytes(b"GGML\x03\0\0\0".to_vec()),
        Err(FormatError::NotGguf)
    ));
    assert!(matches!(GgufFile::from_bytes(vec![]), Err(FormatError::Gguf { .. })));
    for (version, says) in [
        (1, "version 1"),
        (0x0300_0000, "big-endian"),
        (4, "unknown GGUF version 4"),
    ] {
        let mut b = sample();
        b.version = version;
        let e = refusal(&b);
        assert!(e.contains(says), "{e}");
    }
}

#[test]
fn every_truncation_is_refused() {
    let bytes = sample().bytes();
    for len in 0..bytes.len() {
        let r = GgufFile::from_bytes(bytes[..len].to_vec());
        assert!(r.is_err(), "a file cut at {len} of {} bytes was accepted", bytes.len());
    }
}

#[test]
fn lying_counts_and_lengths_are_refused_at_once() {
    let lie = |n_tensors: u64, n_kv: u64, rest: &[u8]| {
        let mut v = b"GGUF".to_vec();
        v.extend(3u32.to_le_bytes());
        v.extend(n_tensors.to_le_bytes());
        v.extend(n_kv.to_le_bytes());
        v.extend_from_slice(rest);
        let t = Instant::now();
        let e = GgufFile::from_bytes(v).map(|_| ()).unwrap_err().to_string();
        assert!(t.elapsed().as_secs_f64() < 0.5, "{e}: took {:?}", t.elapsed());
        e
    };
    assert!(lie(1 << 40, 0, &[0; 64]).contains("tensor count"));
    assert!(lie(0, 1 << 40, &[0; 64]).contains("metadata count"));
    assert!(lie(u64::MAX, u64::MAX, &[]).contains("count"));
    // a key of 2^63 bytes
    let mut kv = (1u64 << 63).to_le_bytes().to_vec();
    kv.extend([0; 32]);
    assert!(lie(0, 1, &kv).contains("needs 9223372036854775808 bytes"));
    // a string value of 2^63 bytes
    let e = refusal(&Builder::new().kv("s", 8, &[(1u64 << 63).to_le_bytes().to_vec(), vec![0; 16]].concat()));
    assert!(e.starts_with("GGUF s:"), "{e}");
    // an array of 2^62 u64
    let e = refusal(&Builder::new().kv(
        "a",
        9,
        &[10u32.to_le_bytes().to_vec(), (1u64 << 62).to_le_bytes().to_vec()].concat(),
    ));
    assert!(e.contains("4611686018427387904 items"), "{e}");
    // arrays nested 10 000 deep
    let mut deep = vec![];
    for _ in 0..10_000 {
        deep.extend(9u32.to_le_bytes());
        deep.extend(1u64.to_le_bytes());
    }
    deep.extend(4u32.to_le_bytes());
    deep.extend(0u64.to_le_bytes());
    let t = Instant::now();
    let e = refusal(&Builder::new().kv("deep", 9, &deep));
    assert!(e.contains("nested deeper than"), "{e}");
    assert!(t.elapsed().as_secs_f64() < 0.5);
}

#[test]
fn malformed_values_are_refused_naming_the_key() {
    for (key, ty, value, says) in [
        ("k", 13u32, vec![], "unknown metadata value type 13"),
        ("k", 7, vec![2], "bool byte 2"),
        ("k", 8, string(&[0xFF, 0xFE]), "not UTF-8"),
        (
            "k",
            9,
            [99u32.to_le_bytes().to_vec(), 0u64.to_le_bytes().to_vec()].concat(),
            "unknown value type 99",
        ),
    ] {
        let e = refusal(&Builder::new().kv(key, ty, &value));
        assert!(e.starts_with("GGUF k:") && e.contains(says), "{e}");
    }
    let e = refusal(&Builder::new().kv("k", 0, &[1]).kv("k", 0, &[2]));
    assert!(e.contains("twice"), "{e}");
    let mut bad_key = Builder::new();
    bad_key.kv.extend(string(&[0xC3]));
    bad_key.kv.extend(0u32.to_le_bytes());
    bad_key.kv.push(0);
    bad_key.n_kv = 1;
    assert!(refusal(&bad_key).contains("not UTF-8"));
}

#[test]
fn malformed_tensors_are_refused_naming_the_tensor() {
    let f32x4 = [0u8; 16];
    for (b, says) in [
        (
            Builder::new().tensor("t", &[4], 99, &f32x4),
            "unknown ggml tensor type 99",
        ),
        (
            Builder::new().tensor("t", &[4], 4, &f32x4),
            "unknown ggml tensor type 4",
        ),
        (Builder::new().tensor("t", &[], 0, &f32x4), "0 dimensions"),
        (Builder::new().tensor("t", &[1, 1, 1, 1, 4], 0, &f32x4), "5 dimensions"),
        (Builder::new().tensor("t", &[4, 0], 0, &f32x4), "no elements"),
        (
            Builder::new().tensor("t", &[u64::MAX, u64::MAX], 0, &f32x4),
            "too many elements",
        ),
        (Builder::new().tensor("t", &[1 << 62], 0, &f32x4), "too many bytes"),
        (
            Builder::new().tensor("t", &[16], 2, &[0; 18]),
            "not a multiple of Q4_0's block of 32",
        ),
        (Builder::new().tensor("t", &[8], 0, &f32x4), "past its end"),
        (
            Builder::new().tensor_at("t", &[4], 0, 16),
            "not a multiple of the alignment 32",
        ),
        (Builder::new().tensor_at("t", &[4], 0, 1 << 40), "past its end"),
        (
            Builder::new()
                .tensor("a", &[16], 0, &[0; 64])
                .tensor_at("b", &[4], 0, 32),
            "overlap",
        ),
    ] {
        let e = refusal(&b);
        assert!(e.contains(says), "{e} (expected: {says})");
    }
    let dup = Builder::new().tensor("t", &[4], 0, &f32x4).tensor("t", &[4], 0, &f32x4);
    assert!(matches!(open(&dup), Err(FormatError::DuplicateTensor { tensor }) if tensor == "t"));
    // the same tensor type refuses a dequantization it cannot do
    let iq = open(&Builder::new().tensor("t", &[256], 16, &[0; 66])).unwrap();
    let e = iq.tensor_f32("t").unwrap_err().to_string();
    assert!(e.contains("IQ2_XXS cannot be dequantized"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    /// Any bytes after a valid magic and version: an error or a file, never
    /// a panic, and quickly.
    #[test]
    fn random_headers_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..400), cut in 0usize..2000) {
        let mut v = b"GGUF\x03\0\0\0".to_vec();
        v.extend(tail);
        let _ = GgufFile::from_bytes(v);
        let s = sample().bytes();
        let mut corrupt = s.clone();
        let at = cut % s.len();
        corrupt[at] ^= 0xA5;
        let _ = GgufFile::from_bytes(corrupt);
    }
}
