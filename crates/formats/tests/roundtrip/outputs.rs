//! An unwritable output, and the file version that negative group
//! scales need.

use super::*;

#[test]
fn an_unwritable_output_is_a_typed_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent").join("out.safetensors");
    let e = write_two_bytes(&path, 2).unwrap_err();
    match &e {
        FormatError::Output { path: p, doing, source } => {
            assert_eq!(p, &path);
            assert!(doing.contains("cannot create a file in its folder"), "{doing}");
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        e => panic!("expected FormatError::Output, got {e:?}"),
    }
    assert!(e.to_string().starts_with(&format!("{}: ", path.display())), "{e}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A q4g file with one negative scale (0xB800 = -0.5, row 1, group 1).
fn negative_q4g_file(version: &str) -> Vec<u8> {
    craft(
        &[
            ("w.qweight", Dtype::U8, vec![2, 2], vec![0x18, 0x87, 0x11, 0x22]),
            (
                "w.scales",
                Dtype::F16,
                vec![2, 2],
                vec![0, 0x3C, 0, 0x80, 0, 0x40, 0, 0xB8],
            ),
        ],
        &[
            ("qlinear.format", version),
            ("w.qscheme", "q4g2"),
            ("w.in_features", "4"),
        ],
    )
}

#[test]
fn negative_group_scales_need_version_2() {
    // docs/FORMAT.md, "Versions": version 1 promises scales >= 0 (-0.0, at
    // row 0 group 1, counts as >= 0); version 2 holds the sign
    let e = load_err(negative_q4g_file("1")).to_string();
    assert_eq!(
        e,
        "w.scales: row 1, group 1 holds the negative scale -0.5, which qlinear.format \"1\" does not allow (a q4g \
         file with negative scales says \"2\")"
    );
    let f = QuantizedFile::from_bytes(negative_q4g_file("2")).unwrap();
    let QuantizedWeight::Q4(w) = f.load("w").unwrap() else {
        panic!("q4")
    };
    assert_eq!(w.negative_group_scale(), Some((1, 1, -0.5)));
    // row 1: codes [1, 1 | 2, 2] · [2 | -0.5]
    assert_eq!(&w.dequantize()[4..], &[2.0, 2.0, -1.0, -1.0]);
    // written back, the file says "2"; without the negative scale, "1"
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "neg.safetensors",
        &[("w".into(), QuantizedWeight::Q4(w.clone()))],
    );
    let back = QuantizedFile::open(&path).unwrap();
    assert_eq!(back.metadata_map()["qlinear.format"], "2");
    assert_eq!(back.load("w").unwrap(), QuantizedWeight::Q4(w));
    let plain =
        QuantizedMatrixQ4::quantize(2, 4, GroupSize::Group(2), &[1.0, -2.0, 3.0, -4.0, 0.0, 0.0, -1.0, 1.0]).unwrap();
    assert_eq!(plain.negative_group_scale(), None);
    let path = write(
        dir.path(),
        "pos.safetensors",
        &[("w".into(), QuantizedWeight::Q4(plain))],
    );
    assert_eq!(
        QuantizedFile::open(&path).unwrap().metadata_map()["qlinear.format"],
        "1"
    );
}
