//! A file written by Python's safetensors + numpy (`tools/interop.py`, with an
//! independent numpy recipe) is read correctly: every tensor equals the Rust
//! recipe applied to the reference weights stored beside it.

use qlinear_formats::{Dtype, QuantizedFile, QuantizedWeight};
use qlinear_quant_recipe::{GroupSize, QuantizedMatrix, QuantizedMatrixQ4};

#[test]
fn python_written_file_reads_as_the_recipe() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/py_quantized.safetensors");
    let f = QuantizedFile::open(path).unwrap();
    assert_eq!(f.metadata_map()["writer"], "numpy");
    let mut seen = 0;
    for (prefix, scheme) in [("a", "q8"), ("b", "q4"), ("c", "q4g32"), ("d", "q4g2")] {
        let r = f.raw(&format!("{prefix}.reference")).unwrap();
        assert_eq!(r.dtype, Dtype::F32);
        let (n, k) = (r.shape[0], r.shape[1]);
        let w: Vec<f32> = r
            .data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let want = match scheme {
            "q8" => QuantizedWeight::Q8(QuantizedMatrix::quantize(n, k, &w).unwrap()),
            "q4" => QuantizedWeight::Q4(QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).unwrap()),
            s => {
                let g = s[3..].parse().unwrap();
                QuantizedWeight::Q4(QuantizedMatrixQ4::quantize(n, k, GroupSize::Group(g), &w).unwrap())
            }
        };
        assert_eq!(f.load(prefix).unwrap(), want, "{prefix} ({scheme})");
        seen += 1;
    }
    assert_eq!(seen, 4);
    assert!(f.validate().iter().all(|(_, r)| r.is_ok()));
}
