//! `ModelFile`: a layer loaded from a converted file in one line, copied or
//! read in place from the file's map.

use std::borrow::Cow;
use std::collections::HashMap;

use half::f16;
use qlinear::format::{write_file, Dtype, OutputTensor};
use qlinear::*;

mod support;
use support::{bits, weights};

/// A converted layer loads in one line, with its bias widened exactly from
/// F16; plain tensors come back as f32; `linears` and `census` list the file.
#[test]
fn a_file_layer_loads_in_one_line() {
    let (n, k) = (6, 64);
    let w = weights(n, k, 9);
    let q = QuantizedWeight::quantize(QScheme::Q4Grouped(32), n, k, &w).unwrap();
    let bias: Vec<f16> = (0..n).map(|i| f16::from_f32(i as f32 * 0.25 - 0.5)).collect();
    let bias_bytes: Vec<u8> = bias.iter().flat_map(|b| b.to_bits().to_le_bytes()).collect();
    let norm: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    // std::env::temp_dir() is unavailable on WASI, where this test also runs
    let base = std::env::var_os("TMPDIR").map_or_else(|| std::path::PathBuf::from("/tmp"), Into::into);
    let dir = tempfile::tempdir_in(base).unwrap();
    let path = dir.path().join("m.safetensors");
    write_file(
        &path,
        &HashMap::new(),
        vec![
            OutputTensor::Quantized {
                prefix: "enc.0.q".into(),
                tensor: q.clone(),
            },
            OutputTensor::Raw {
                name: "enc.0.q.bias".into(),
                dtype: Dtype::F16,
                shape: vec![n],
                data: Cow::Owned(bias_bytes),
            },
            OutputTensor::Raw {
                name: "norm.weight".into(),
                dtype: Dtype::F32,
                shape: vec![2],
                data: Cow::Owned(norm),
            },
            OutputTensor::Raw {
                name: "ids".into(),
                dtype: Dtype::I64,
                shape: vec![1],
                data: Cow::Owned(vec![0; 8]),
            },
        ],
    )
    .unwrap();
    let model = ModelFile::open(&path).unwrap();
    let layer = model.linear("enc.0.q").unwrap();
    assert_eq!(layer.weight(), &q);
    assert_eq!(
        layer.bias().unwrap(),
        bias.iter().map(|b| b.to_f32()).collect::<Vec<_>>()
    );
    assert_eq!(layer.mode(), QuantLinearMode::W4A8);
    assert_eq!(layer.name(), "enc.0.q");
    assert_eq!(model.tensor_f32("norm.weight").unwrap(), vec![1.5, -2.0]);
    assert_eq!(model.linears(), vec!["enc.0.q".to_string()]);
    assert_eq!(
        model.census(),
        Census {
            ks: vec![k],
            families: vec![tiers::KernelFamily::W4A8Grouped]
        }
    );
    let e = model.tensor_f32("ids").unwrap_err();
    assert!(e.to_string().starts_with("ids: dtype I64"), "{e}");
    let e = model.linear("enc.1.q").unwrap_err();
    assert!(
        matches!(e, Error::Format(_)) && e.to_string().contains("enc.1.q"),
        "{e}"
    );
    let e = model.tensor_f32("missing").unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
}

/// A model opened in place hands out layers and embeddings whose codes are
/// the file's own memory, with the bits of the copying loader's, that keep
/// working after the `ModelFile` is dropped.
#[test]
fn a_model_opened_in_place_shares_its_codes_and_outlives_the_file_value() {
    // 48 rows have a panel form (whole panels of 16), 40 do not
    for (n, k) in [(40, 96), (48, 96)] {
        let w = weights(n, k, 21);
        let base = std::env::var_os("TMPDIR").map_or_else(|| std::path::PathBuf::from("/tmp"), Into::into);
        let dir = tempfile::tempdir_in(base).unwrap();
        let path = dir.path().join("m.safetensors");
        let schemes = [QScheme::Q8, QScheme::Q4, QScheme::Q4Grouped(32)];
        let tensors = schemes
            .iter()
            .map(|&s| OutputTensor::Quantized {
                prefix: format!("l.{s}"),
                tensor: QuantizedWeight::quantize(s, n, k, &w).unwrap(),
            })
            .collect();
        write_file(&path, &HashMap::new(), tensors).unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        // the file's map, and its bytes held in memory (as the browser page
        // holds them)
        let mapped = ModelFile::open_in_place(&path).unwrap();
        let held = ModelFile::from_bytes_in_place(on_disk.clone()).unwrap();
        for in_place in [mapped, held] {
            check_in_place(&path, in_place, &schemes, n, k);
        }
        assert_eq!(std::fs::read(&path).unwrap(), on_disk, "the file is never written");
    }
}

fn check_in_place(path: &std::path::Path, in_place: ModelFile, schemes: &[QScheme], n: usize, k: usize) {
    let copying = ModelFile::open(path).unwrap();
    let x = weights(3, k, 22);
    let mut kept = vec![];
    for &s in schemes {
        let name = format!("l.{s}");
        let want = copying.linear(&name).unwrap();
        let got = in_place.linear(&name).unwrap();
        assert!(got.codes_shared() && !want.codes_shared(), "{s} [{n}, {k}]");
        // a weight with a panel form takes it in place as a copying load
        // takes it in a buffer of its own (the page's and the frugal load's
        // speed are the copied layer's)
        assert_eq!(got.holds_panels(), want.holds_panels(), "{s} [{n}, {k}]");
        assert_eq!(in_place.file().is_arranged(&name), got.holds_panels(), "{s} [{n}, {k}]");
        // grouped scales arranged with their codes are read in place too
        let grouped = matches!(s, QScheme::Q4Grouped(_));
        assert_eq!(got.scales_shared(), got.holds_panels() && grouped, "{s} [{n}, {k}]");
        assert!(!want.scales_shared(), "{s} [{n}, {k}]");
        assert_eq!(got.weight(), want.weight(), "{s}");
        let (e, copied) = (in_place.embedding(&name).unwrap(), copying.embedding(&name).unwrap());
        assert_eq!((e.rows(), e.dim()), (n, k));
        for r in [0, 17, n - 1] {
            let (mut a, mut b) = (vec![0f32; k], vec![0f32; k]);
            e.row(r, &mut a).unwrap();
            copied.row(r, &mut b).unwrap();
            assert_eq!(bits(&a), bits(&b), "{s}: embedding row {r}");
        }
        // the same refusals, word for word
        let (mut short, mut other) = (vec![0f32; k - 1], vec![0f32; k - 1]);
        let errors = |e: &Embedding, row, out: &mut [f32]| e.row(row, out).unwrap_err().to_string();
        assert_eq!(errors(&e, n, &mut short), errors(&copied, n, &mut other), "{s}");
        assert_eq!(errors(&e, 0, &mut short), errors(&copied, 0, &mut other), "{s}");
        kept.push((got, want));
    }
    drop((copying, in_place));
    for (got, want) in kept {
        for m in [1, 3] {
            let (mut y1, mut y2) = (vec![f32::NAN; m * n], vec![f32::NAN; m * n]);
            got.forward(&x[..m * k], m, &mut y1).unwrap();
            want.forward(&x[..m * k], m, &mut y2).unwrap();
            assert_eq!(bits(&y1), bits(&y2), "{} m={m}", got.name());
        }
    }
}

/// A file larger than the memory this process can still be given (a
/// sparse file: no disk is used) is refused by both ways of opening a
/// model, naming both sizes, before its header is read; reading its header
/// alone (`QuantizedFile::open`, as `qlinear inspect` does) is not refused.
#[cfg(target_os = "linux")]
#[test]
fn a_model_larger_than_memory_is_refused_before_loading() {
    let available = format::available_memory().expect("/proc/meminfo");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.safetensors");
    let size = available + (4 << 30);
    std::fs::File::create(&path).unwrap().set_len(size).unwrap();
    for (how, got) in [
        ("copying", ModelFile::open(&path).err()),
        ("in place", ModelFile::open_in_place(&path).err()),
    ] {
        match got {
            Some(Error::Format(FormatError::LargerThanMemory {
                size: s, available: a, ..
            })) => {
                assert_eq!(s, size, "{how}");
                assert!(a < size, "{how}: {a} available");
            }
            other => panic!("{how}: {other:?}"),
        }
    }
    let e = QuantizedFile::open(&path).unwrap_err();
    assert!(!matches!(e, FormatError::LargerThanMemory { .. }), "{e:?}");
}
