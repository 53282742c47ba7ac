//! Opening a file in place proves and plans the file's census before it
//! arranges any codes: the first proof of a process fixes its K values, and
//! the arrangement asks the plan. Its own test binary, so that this open is
//! the process's first proof.

use std::collections::HashMap;

use qlinear::format::{write_file, OutputTensor};
use qlinear::*;

mod support;
use support::weights;

#[test]
fn opening_in_place_proves_the_files_census_not_the_default_one() {
    // K = 96: in the default census too, so the check is on a K the file
    // lacks (4096) and the tails every census has
    let (n, k) = (48, 96);
    let w = weights(n, k, 5);
    let base = std::env::var_os("TMPDIR").map_or_else(|| std::path::PathBuf::from("/tmp"), Into::into);
    let dir = tempfile::tempdir_in(base).unwrap();
    let path = dir.path().join("m.safetensors");
    let tensor = QuantizedWeight::quantize(QScheme::Q4Grouped(32), n, k, &w).unwrap();
    write_file(
        &path,
        &HashMap::new(),
        vec![OutputTensor::Quantized {
            prefix: "l".into(),
            tensor,
        }],
    )
    .unwrap();
    let file = ModelFile::open_in_place(&path).unwrap();
    let census = file.census();
    assert_eq!(census.ks, vec![k]);
    // the process's K values: the file's, the tails, the families' bounds
    let proven = init_for(&Census::default()).unwrap().selftest.census;
    let mut want: Vec<usize> = (1..=67).chain([k, MAX_K_W8A8, MAX_K_W4A8]).collect();
    want.sort_unstable();
    want.dedup();
    assert_eq!(proven, want, "the default census's 4096 and 11008 would be here");
    // and the layer is built on it, in place
    let layer = file.linear("l").unwrap();
    assert!(layer.codes_shared());
}
