//! The whole `qlinear convert` pipeline in memory on arbitrary bytes: the
//! first byte picks the scheme and flags (`--exclude`, `--requantize`, a
//! `--tensor-scheme` rule), the rest is the input file, safetensors or GGUF. It must return a
//! typed error or an output that our own reader validates, never panic,
//! overflow, or allocate what the input's size cannot justify.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qlinear_cli::convert::{convert_bytes, Options};

const SCHEMES: [&str; 6] = ["q8", "q4", "q4g2", "q4g32", "q4g18446744073709551614", "q4g6"];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, file)) = data.split_first() else { return };
    let scheme = SCHEMES[usize::from(pick) % SCHEMES.len()];
    let exclude = (pick & 0x80 != 0).then_some("^e");
    let Ok(options) = Options::parse(scheme, None, exclude) else { return };
    let rules = if pick & 0x20 != 0 { vec!["embd=q8".to_string()] } else { vec![] };
    let Ok(options) = options.with_tensor_schemes(&rules) else { return };
    let options = options.with_requantize(pick & 0x40 != 0);
    if let Ok(out) = convert_bytes(file.to_vec(), &options) {
        // what convert_bytes returns has already been read back and validated
        assert!(out.len() >= 8);
    }
});
