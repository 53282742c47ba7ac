//! The quantized-safetensors reader (copying and in place) on arbitrary bytes: it must return a
//! typed error or a validated tensor, never panic, overflow or read out of
//! bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qlinear_formats::QuantizedFile;

fuzz_target!(|data: &[u8]| {
    // the in-place reader rewrites Q4 nibbles in its own copy of the bytes
    // before it parses them again: it must hold to the same rules
    if let Ok(file) = QuantizedFile::from_bytes_in_place(data.to_vec()) {
        for (_, result) in file.validate() {
            if let Ok(info) = result {
                let _ = info.bits_per_weight();
            }
        }
    }
    if let Ok(file) = QuantizedFile::from_bytes(data.to_vec()) {
        for (_, result) in file.validate() {
            if let Ok(info) = result {
                let _ = info.bits_per_weight();
            }
        }
        for name in file.tensor_names() {
            let _ = file.raw(&name);
            let _ = file.tensor_f32(&name);
        }
    }
});
