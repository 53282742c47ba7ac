//! Write → read round trips for every scheme, and every malformed file a
//! reader must refuse with a typed error naming the tensor (never a panic).

use std::borrow::Cow;
use std::collections::HashMap;

use half::f16;
use proptest::prelude::*;
use qlinear_formats::*;
use qlinear_quant_recipe::{GroupSize, QuantizedMatrix, QuantizedMatrixQ4, RecipeError};
use safetensors::tensor::TensorView;

mod arranged;
mod outputs;

fn weights(n: usize, k: usize, seed: u32) -> Vec<f32> {
    (0..n * k)
        .map(|i| (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 2001) as f32 / 100.0 - 10.0)
        .collect()
}

fn tensors_for(n: usize, k: usize) -> Vec<(String, QuantizedWeight)> {
    let w = weights(n, k, 7);
    let mut v = vec![
        (
            "m.q8".to_string(),
            QuantizedWeight::Q8(QuantizedMatrix::quantize(n, k, &w).unwrap()),
        ),
        (
            "m.q4".to_string(),
            QuantizedWeight::Q4(QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).unwrap()),
        ),
    ];
    if k.is_multiple_of(4) {
        let q = QuantizedMatrixQ4::quantize(n, k, GroupSize::Group(4), &w).unwrap();
        v.push(("m.q4g4".to_string(), QuantizedWeight::Q4(q)));
    }
    v
}

fn write(dir: &std::path::Path, name: &str, tensors: &[(String, QuantizedWeight)]) -> std::path::PathBuf {
    let path = dir.join(name);
    let mut out: Vec<OutputTensor<'_>> = tensors
        .iter()
        .map(|(p, t)| OutputTensor::Quantized {
            prefix: p.clone(),
            tensor: t.clone(),
        })
        .collect();
    out.push(OutputTensor::Raw {
        name: "m.bias".into(),
        dtype: Dtype::F32,
        shape: vec![2],
        data: Cow::Owned(vec![0, 0, 128, 63, 0, 0, 0, 64]),
    });
    let meta = HashMap::from([("producer".to_string(), "test".to_string())]);
    write_file(&path, &meta, out).unwrap();
    path
}

#[test]
fn round_trip_every_scheme_odd_k_and_k_one() {
    let dir = tempfile::tempdir().unwrap();
    for (n, k) in [(3, 8), (5, 7), (4, 1), (2, 64), (1, 0)] {
        let tensors = tensors_for(n, k);
        let path = write(dir.path(), &format!("rt_{n}_{k}.safetensors"), &tensors);
        let f = QuantizedFile::open(&path).unwrap();
        for (prefix, t) in &tensors {
            assert_eq!(&f.load(prefix).unwrap(), t, "{prefix} [{n}, {k}]");
        }
        let meta = f.metadata_map();
        assert_eq!(meta["qlinear.format"], "1");
        assert_eq!(meta["producer"], "test", "input metadata kept");
        assert_eq!(meta["m.q8.qscheme"], "q8");
        assert_eq!(meta["m.q4.in_features"], k.to_string());
        let bias = f.raw("m.bias").unwrap();
        assert_eq!(
            (bias.dtype, bias.shape, bias.data),
            (Dtype::F32, &[2usize][..], &[0, 0, 128, 63, 0, 0, 0, 64][..])
        );
        let q4 = f.raw("m.q4.qweight").unwrap();
        assert_eq!((q4.dtype, q4.shape), (Dtype::U8, &[n, k.div_ceil(2)][..]));
        if k % 2 == 1 && n > 0 {
            assert_eq!(q4.data[k / 2] >> 4, 0, "odd-K pad nibble is two's-complement 0 on disk");
        }
        assert!(f.validate().iter().all(|(_, r)| r.is_ok()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644, "an ordinary file, not the private temporary's 0600");
        }
    }
}

/// A file opened in place loads the weights the copying reader loads, with
/// their codes read from the file's bytes as the process read them (Q4
/// nibbles made biased there), and leaves the file as it was; the weights
/// outlive the file value that made them.
#[test]
fn a_file_opened_in_place_reads_codes_from_its_memory_and_is_never_written() {
    let dir = tempfile::tempdir().unwrap();
    for (n, k) in [(3, 8), (5, 7), (4, 1), (2, 64), (1, 0), (0, 4)] {
        let tensors = tensors_for(n, k);
        let path = write(dir.path(), &format!("ip_{n}_{k}.safetensors"), &tensors);
        let on_disk = std::fs::read(&path).unwrap();
        let copied = QuantizedFile::open(&path).unwrap();
        let in_place = QuantizedFile::open_in_place(&path).unwrap();
        let in_memory = QuantizedFile::from_bytes_in_place(on_disk.clone()).unwrap();
        let mut loaded = vec![];
        for (prefix, t) in &tensors {
            let want = copied.load(prefix).unwrap();
            assert_eq!(&want, t, "{prefix} [{n}, {k}]");
            for file in [&in_place, &in_memory] {
                let got = file.load(prefix).unwrap();
                assert_eq!(got, want, "{prefix} [{n}, {k}] in place");
                let (shared, codes_at) = match &got {
                    QuantizedWeight::Q8(q) => (q.codes_shared(), q.codes().as_ptr() as usize),
                    QuantizedWeight::Q4(q) => (q.packed_shared(), q.packed().as_ptr() as usize),
                };
                assert!(shared, "{prefix} [{n}, {k}]: codes read in place");
                let raw = file.raw(&format!("{prefix}.qweight")).unwrap();
                if !raw.data.is_empty() {
                    assert_eq!(codes_at, raw.data.as_ptr() as usize, "{prefix}: the file's own bytes");
                }
                // a copying load's codes are its own
                match &want {
                    QuantizedWeight::Q8(q) => assert!(!q.codes_shared()),
                    QuantizedWeight::Q4(q) => assert!(!q.packed_shared()),
                }
                loaded.push((got, want.clone()));
            }
        }
        drop((copied, in_place, in_memory));
        for (got, want) in loaded {
            assert_eq!(got, want, "[{n}, {k}]: a weight outlives its file value");
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            on_disk,
            "[{n}, {k}]: the file is never written"
        );
    }
    assert!(matches!(
        QuantizedFile::open_in_place("/nonexistent/x.safetensors"),
        Err(FormatError::Io { .. })
    ));
    assert!(matches!(
        QuantizedFile::open_in_place(dir.path()),
        Err(FormatError::NotARegularFile { .. })
    ));
}

#[test]
fn seed_hand_example_bytes_on_disk() {
    let scales = [0x3800u16, 0x4000, 0x3C00, 0x3400].map(f16::from_bits).to_vec();
    let m = QuantizedMatrixQ4::from_parts_twos_complement(
        2,
        4,
        vec![0xE1, 0x83, 0x07, 0x4F],
        qlinear_quant_recipe::Q4Scales::Grouped { group: 2, scales },
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "seed.safetensors",
        &[("seed".into(), QuantizedWeight::Q4(m.clone()))],
    );
    let f = QuantizedFile::open(&path).unwrap();
    assert_eq!(f.raw("seed.qweight").unwrap().data, &[0xE1, 0x83, 0x07, 0x4F]);
    assert_eq!(
        f.raw("seed.scales").unwrap().data,
        &[0x00, 0x38, 0x00, 0x40, 0x00, 0x3C, 0x00, 0x34]
    );
    assert_eq!(f.metadata_map()["seed.qscheme"], "q4g2");
    assert_eq!(f.load("seed").unwrap(), QuantizedWeight::Q4(m));
}

/// A hand-made file: tensors as (name, dtype, shape, bytes) and metadata.
fn craft(tensors: &[(&str, safetensors::Dtype, Vec<usize>, Vec<u8>)], meta: &[(&str, &str)]) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let meta: HashMap<String, String> = meta.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    safetensors::serialize(views, Some(meta)).unwrap()
}

fn q8_file(codes: Vec<u8>, scales: &[f32], meta: &[(&str, &str)]) -> Vec<u8> {
    let n = scales.len();
    let k = codes.len() / n.max(1);
    craft(
        &[
            ("w.qweight", Dtype::I8, vec![n, k], codes),
            (
                "w.scales",
                Dtype::F32,
                vec![n],
                scales.iter().flat_map(|s| s.to_le_bytes()).collect(),
            ),
        ],
        meta,
    )
}

const GOOD: &[(&str, &str)] = &[("qlinear.format", "1"), ("w.qscheme", "q8"), ("w.in_features", "2")];

fn load_err(bytes: Vec<u8>) -> FormatError {
    match QuantizedFile::from_bytes(bytes) {
        Err(e) => e,
        Ok(f) => f.load("w").unwrap_err(),
    }
}

#[test]
fn malformed_metadata_and_codes_are_typed_errors_naming_the_tensor() {
    assert!(QuantizedFile::from_bytes(q8_file(vec![1, 2, 3, 4], &[1.0, 0.5], GOOD))
        .unwrap()
        .load("w")
        .is_ok());
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            q8_file(vec![1, 2, 0x80, 4], &[1.0, 0.5], GOOD),
            "w.qweight: Q8 code -128 at row 1, column 0",
        ),
        (
            q8_file(vec![1, 2, 3, 4], &[1.0, -0.5], GOOD),
            "w.scales: invalid scale -0.5 at row 1",
        ),
        (
            q8_file(vec![1, 2, 3, 4], &[1.0, f32::NAN], GOOD),
            "w.scales: invalid scale NaN at row 1",
        ),
        (
            q8_file(vec![1, 2, 3, 4], &[1.0, 0.5], &[("qlinear.format", "3")]),
            "unknown qlinear format version \"3\"",
        ),
        (
            // version 2 allows negative scales in q4g tensors only
            q8_file(
                vec![1, 2, 3, 4],
                &[1.0, -0.5],
                &[("qlinear.format", "2"), ("w.qscheme", "q8"), ("w.in_features", "2")],
            ),
            "w.scales: invalid scale -0.5 at row 1",
        ),
        (
            q8_file(vec![1, 2, 3, 4], &[1.0, 0.5], &[("w.qscheme", "q8")]),
            "w.qweight: the file has no qlinear.format",
        ),
        (
            q8_file(
                vec![1, 2, 3, 4],
                &[1.0, 0.5],
                &[("qlinear.format", "1"), ("w.in_features", "2")],
            ),
            "w.qweight: metadata key w.qscheme is missing",
        ),
        (
            q8_file(
                vec![1, 2, 3, 4],
                &[1.0, 0.5],
                &[("qlinear.format", "1"), ("w.qscheme", "q5"), ("w.in_features", "2")],
            ),
            "w.qweight: unknown quantization scheme \"q5\"",
        ),
        (
            q8_file(
                vec![1, 2, 3, 4],
                &[1.0, 0.5],
                &[("qlinear.format", "1"), ("w.qscheme", "q4g3"), ("w.in_features", "2")],
            ),
            "unknown quantization scheme \"q4g3\"",
        ),
        (
            q8_file(
                vec![1, 2, 3, 4],
                &[1.0, 0.5],
                &[("qlinear.format", "1"), ("w.qscheme", "q8"), ("w.in_features", "-2")],
            ),
            "w.qweight: in_features \"-2\"",
        ),
        (
            q8_file(
                vec![1, 2, 3, 4],
                &[1.0, 0.5],
                &[("qlinear.format", "1"), ("w.qscheme", "q8"), ("w.in_features", "3")],
            ),
            "w.qweight: shape [2, 2] where the scheme and K need [2, 3]",
        ),
        (
            q8_file(
                vec![1, 2, 3, 4],
                &[1.0, 0.5],
                &[("qlinear.format", "1"), ("w.qscheme", "q4"), ("w.in_features", "2")],
            ),
            "w.qweight: dtype I8 where the scheme needs U8",
        ),
    ];
    assert_refused(cases);
}

#[test]
fn malformed_tensors_are_typed_errors_naming_the_tensor() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            craft(&[("w.qweight", Dtype::I8, vec![1, 2], vec![1, 2])], GOOD),
            "w.qweight: its partner tensor w.scales is missing",
        ),
        (
            craft(&[("w.scales", Dtype::F32, vec![1], vec![0; 4])], GOOD),
            "w.scales: its partner tensor w.qweight is missing",
        ),
        (
            craft(
                &[
                    ("w.qweight", Dtype::I8, vec![1, 2], vec![1, 2]),
                    ("w.scales", Dtype::F16, vec![1], vec![0; 2]),
                ],
                GOOD,
            ),
            "w.scales: dtype F16 where the scheme needs F32",
        ),
        (
            craft(
                &[
                    ("w.qweight", Dtype::I8, vec![1, 2], vec![1, 2]),
                    ("w.scales", Dtype::F32, vec![2], vec![0; 8]),
                ],
                GOOD,
            ),
            "w.scales: shape [2] where the scheme and K need [1]",
        ),
        (
            craft(
                &[
                    ("w.qweight", Dtype::U8, vec![1, 2], vec![0x11, 0x81]),
                    ("w.scales", Dtype::F32, vec![1], vec![0; 4]),
                ],
                &[("qlinear.format", "1"), ("w.qscheme", "q4"), ("w.in_features", "3")],
            ),
            "w.qweight: pad nibble of row 0 is 0x8, expected 0x0",
        ),
        (
            craft(
                &[
                    ("w.qweight", Dtype::U8, vec![1, 3], vec![0; 3]),
                    ("w.scales", Dtype::F16, vec![1, 1], vec![0; 2]),
                ],
                &[("qlinear.format", "1"), ("w.qscheme", "q4g4"), ("w.in_features", "6")],
            ),
            "w.qweight: group size 4 does not divide K = 6",
        ),
        (
            craft(
                &[
                    ("w.qweight", Dtype::U8, vec![1, 2], vec![0; 2]),
                    ("w.scales", Dtype::F16, vec![1, 2], vec![0, 0x7C, 0, 0]),
                ],
                &[("qlinear.format", "1"), ("w.qscheme", "q4g2"), ("w.in_features", "4")],
            ),
            "w.scales: invalid scale inf at row 0, group 0",
        ),
    ];
    assert_refused(cases);
}

/// Each file is refused with an error containing its message, the same by
/// the copying reader and the in-place one.
fn assert_refused(cases: Vec<(Vec<u8>, &str)>) {
    for (bytes, want) in cases {
        // the in-place reader refuses each file with the same message (a
        // pad nibble as the file stores it, though it was made biased)
        let in_place = match QuantizedFile::from_bytes_in_place(bytes.clone()) {
            Err(e) => e,
            Ok(f) => f.load("w").unwrap_err(),
        }
        .to_string();
        // and so does the arranging one, whether it arranged the tensor
        // (the checks do not depend on the codes' order) or not
        let arranged = match QuantizedFile::from_bytes_in_place_arranged(bytes.clone(), &mut |t| {
            t.codes.reverse();
            true
        }) {
            Err(e) => e,
            Ok(f) if f.is_arranged("w") => f.load_arranged("w").unwrap_err(),
            Ok(f) => f.load("w").unwrap_err(),
        }
        .to_string();
        let msg = load_err(bytes).to_string();
        assert!(msg.contains(want), "{msg:?} should contain {want:?}");
        assert_eq!(in_place, msg, "in place");
        assert_eq!(arranged, msg, "in place, arranged");
    }
}

#[test]
fn truncated_unreadable_and_absent_are_typed_errors() {
    let whole = q8_file(vec![1, 2, 3, 4], &[1.0, 0.5], GOOD);
    let len = whole.len() as u64;
    let mut truncated = whole.clone();
    truncated.pop();
    let e = QuantizedFile::from_bytes(truncated).unwrap_err();
    assert!(
        matches!(e, FormatError::Truncated { what: "", needed, found } if needed == len && found == len - 1),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        format!(
            "the file is {} bytes, but its header ends at byte {len}: it is cut short",
            len - 1
        )
    );
    // cut inside the header: the length field says where it ends
    let header_end = 8 + u64::from_le_bytes(whole[..8].try_into().unwrap());
    let e = QuantizedFile::from_bytes(whole[..20].to_vec()).unwrap_err();
    assert!(
        matches!(e, FormatError::Truncated { what: " itself", needed, found: 20 } if needed == header_end),
        "{e:?}"
    );
    // bytes past the tensors are not a cut: the crate's own refusal
    let mut longer = whole.clone();
    longer.push(0);
    assert!(matches!(QuantizedFile::from_bytes(longer), Err(FormatError::Header(_))));
    assert!(matches!(
        QuantizedFile::from_bytes(vec![1, 2, 3]),
        Err(FormatError::Header(_))
    ));
    assert!(matches!(
        QuantizedFile::open("/nonexistent/x.safetensors"),
        Err(FormatError::Io { .. })
    ));
    let e = QuantizedFile::from_bytes(q8_file(vec![1, 2], &[1.0], GOOD))
        .unwrap()
        .load("other")
        .unwrap_err();
    assert_eq!(e.to_string(), "other.qweight: no such tensor");
    // Q4 accepts all 16 codes including -8 (nibble 0x8 on disk)
    let f = craft(
        &[
            ("w.qweight", Dtype::U8, vec![1, 1], vec![0x88]),
            ("w.scales", Dtype::F32, vec![1], 1f32.to_le_bytes().to_vec()),
        ],
        &[("qlinear.format", "1"), ("w.qscheme", "q4"), ("w.in_features", "2")],
    );
    let QuantizedWeight::Q4(m) = QuantizedFile::from_bytes(f).unwrap().load("w").unwrap() else {
        panic!()
    };
    assert_eq!((m.code(0, 0), m.code(0, 1)), (-8, -8));
    let _ = RecipeError::GroupZero; // the recipe's errors are what Invalid carries
}

/// `write_streaming` of one U8 tensor `a` of `len` bytes whose producer
/// writes the two bytes 1, 2.
fn write_two_bytes(path: &std::path::Path, len: usize) -> Result<(), FormatError> {
    let plans = vec![TensorPlan {
        name: "a".into(),
        dtype: Dtype::U8,
        shape: vec![len],
    }];
    write_streaming(path, HashMap::new(), &plans, |_, out| {
        out.write_all(&[1, 2]).map_err(|e| FormatError::Io {
            path: "x".into(),
            source: e,
        })
    })
}

#[test]
fn a_failed_write_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.safetensors");
    let plans = vec![TensorPlan {
        name: "a".into(),
        dtype: Dtype::U8,
        shape: vec![4],
    }];
    let r = write_streaming(&path, HashMap::new(), &plans, |_, out| {
        out.write_all(&[1, 2]).map_err(|e| FormatError::Io {
            path: "x".into(),
            source: e,
        })?;
        Err(FormatError::Unsupported {
            tensor: "a".into(),
            reason: "stop".into(),
        })
    });
    assert!(r.is_err());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "neither the output nor a temporary file remains"
    );
    let r = write_two_bytes(&path, 4);
    assert!(r
        .unwrap_err()
        .to_string()
        .contains("producer wrote 2 bytes, the header says 4"));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A GGUF file given where safetensors is read is named as GGUF, by every
/// opener (it was "malformed safetensors file: header too large").
#[test]
fn a_gguf_file_is_named_as_such_by_the_safetensors_reader() {
    // GGUF v3 with no tensors and no keys: a valid GGUF file
    let mut gguf = b"GGUF".to_vec();
    gguf.extend(3u32.to_le_bytes());
    gguf.extend(0u64.to_le_bytes());
    gguf.extend(0u64.to_le_bytes());
    assert!(qlinear_formats::GgufFile::from_bytes(gguf.clone()).is_ok());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    std::fs::write(&path, &gguf).unwrap();
    let results = [
        QuantizedFile::from_bytes(gguf.clone()),
        QuantizedFile::from_bytes_in_place(gguf.clone()),
        QuantizedFile::open(&path),
        QuantizedFile::open_in_place(&path),
    ];
    for r in results {
        let e = r.unwrap_err();
        assert!(matches!(e, FormatError::GgufNotSafetensors), "{e:?}");
        assert!(
            e.to_string()
                .contains("a GGUF file, where a safetensors file is expected"),
            "{e}"
        );
    }
    assert_eq!(std::fs::read(&path).unwrap(), gguf, "the file is never written");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    /// Any corruption of a valid file is either refused or loads; it never panics.
    #[test]
    fn corrupted_files_never_panic(flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6), cut in any::<prop::sample::Index>(), truncate in any::<bool>()) {
        let tensors = tensors_for(3, 8);
        let mut out: Vec<OutputTensor<'_>> = tensors.iter().map(|(p, t)| OutputTensor::Quantized { prefix: p.clone(), tensor: t.clone() }).collect();
        out.push(OutputTensor::Raw { name: "x".into(), dtype: Dtype::F32, shape: vec![1], data: Cow::Owned(vec![0; 4]) });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.safetensors");
        write_file(&path, &HashMap::new(), out).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        for (i, v) in flips {
            let i = i.index(bytes.len());
            bytes[i] ^= v;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        // the in-place reader loads what the copying one loads, or fails
        // with the same message
        let in_place = QuantizedFile::from_bytes_in_place(bytes.clone()).map(|f| f.validate());
        match QuantizedFile::from_bytes(bytes) {
            Ok(f) => {
                let copied = f.validate();
                let Ok(in_place) = in_place else { panic!("in place refused a file the copying reader opens") };
                for ((name, r), (name2, r2)) in copied.iter().zip(&in_place) {
                    prop_assert_eq!(name, name2);
                    prop_assert_eq!(r.as_ref().map_err(|e| e.to_string()), r2.as_ref().map_err(|e| e.to_string()));
                }
            }
            Err(e) => prop_assert_eq!(Some(e.to_string()), in_place.err().map(|e| e.to_string())),
        }
    }
}
