//! A mixed-scheme file (a q8 token table that doubles as the LM head,
//! q4g32 projections, a float position table) read by `ModelFile`: every
//! layer loads with its own scheme, and tables read row by row.

use std::borrow::Cow;
use std::collections::HashMap;

use qlinear::format::{write_file, Dtype, OutputTensor};
use qlinear::{ModelFile, QScheme, QuantizedWeight};

fn values(n: usize, k: usize, seed: u32) -> Vec<f32> {
    (0..n * k)
        .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 20) as f32 / 512.0 - 4.0)
        .collect()
}

#[test]
fn a_mixed_file_loads_every_scheme_and_reads_tables_by_row() {
    let (vocab, dim) = (10, 64);
    let tok = QuantizedWeight::quantize(QScheme::Q8, vocab, dim, &values(vocab, dim, 1)).unwrap();
    let proj = QuantizedWeight::quantize(QScheme::Q4Grouped(32), 8, dim, &values(8, dim, 2)).unwrap();
    let pos = values(3, dim, 3);
    // WASI has no temp_dir: the runner gives TMPDIR (as linear.rs does)
    let base = std::env::var_os("TMPDIR").map_or_else(|| std::path::PathBuf::from("/tmp"), Into::into);
    let dir = tempfile::tempdir_in(base).unwrap();
    let path = dir.path().join("mixed.safetensors");
    write_file(
        &path,
        &HashMap::new(),
        vec![
            OutputTensor::Quantized {
                prefix: "token_embd".into(),
                tensor: tok.clone(),
            },
            OutputTensor::Quantized {
                prefix: "blk.0.attn_q".into(),
                tensor: proj.clone(),
            },
            OutputTensor::Raw {
                name: "norm.weight".into(),
                dtype: Dtype::F32,
                shape: vec![2],
                data: Cow::Owned(vec![0; 8]),
            },
            OutputTensor::Raw {
                name: "pos.weight".into(),
                dtype: Dtype::F32,
                shape: vec![3, dim],
                data: Cow::Owned(pos.iter().flat_map(|v| v.to_le_bytes()).collect()),
            },
        ],
    )
    .unwrap();
    let model = ModelFile::open(&path).unwrap();
    assert_eq!(model.linears(), ["blk.0.attn_q", "token_embd"]);
    // each layer with its own scheme; the table is also the tied LM head
    let head = model.linear("token_embd").unwrap();
    let proj_family = model.linear("blk.0.attn_q").unwrap().route().family();
    // the census: the one K, and each layer's family in the mode it took
    let census = model.census();
    assert_eq!(census.ks, [dim]);
    assert_eq!(census.families, [head.route().family(), proj_family]);
    assert_eq!((head.out_features(), head.in_features()), (vocab, dim));
    assert_eq!(model.linear("blk.0.attn_q").unwrap().out_features(), 8);
    // rows of the quantized table are its dequantized rows, bit for bit
    let emb = model.embedding("token_embd.weight").unwrap();
    assert_eq!((emb.rows(), emb.dim()), (vocab, dim));
    let all = tok.dequantize();
    let mut row = vec![0f32; dim];
    for r in 0..vocab {
        emb.row(r, &mut row).unwrap();
        assert_eq!(row, all[r * dim..(r + 1) * dim]);
    }
    // the prefix names it too; a q4g32 table reads the same way
    let q4 = model.embedding("blk.0.attn_q").unwrap();
    q4.row(7, &mut row).unwrap();
    assert_eq!(row, proj.dequantize()[7 * dim..]);
    // a float table
    let p = model.embedding("pos.weight").unwrap();
    p.row(2, &mut row).unwrap();
    assert_eq!(row, pos[2 * dim..]);
    // errors name the table, and leave `out` as it was
    row.fill(7.0);
    let e = emb.row(vocab, &mut row).unwrap_err().to_string();
    assert_eq!(e, "token_embd: row 10 is out of range: the matrix has 10 rows");
    let e = p.row(3, &mut row).unwrap_err().to_string();
    assert_eq!(e, "pos.weight: row 3 is out of range: the matrix has 3 rows");
    let e = emb.row(0, &mut row[..5]).unwrap_err().to_string();
    assert_eq!(e, "token_embd: dequantized row: expected 64 elements, got 5");
    let e = p.row(0, &mut row[..5]).unwrap_err().to_string();
    assert_eq!(e, "pos.weight: embedding row: expected 64 elements, got 5");
    assert!(row.iter().all(|&v| v == 7.0));
    let e = model.embedding("missing.weight").unwrap_err().to_string();
    assert_eq!(e, "missing.weight: no such tensor");
    let e = model.embedding("norm.weight").unwrap_err().to_string();
    assert_eq!(e, "norm.weight: shape [2] is not a 2-D table of rows");
}
