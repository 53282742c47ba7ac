//! The GGUF reader and its block decoders on arbitrary bytes: a typed error
//! or a checked file, never a panic, an overflow or a read out of bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qlinear_formats::GgufFile;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = GgufFile::from_bytes(data.to_vec()) {
        for (key, _) in file.metadata() {
            let _ = file.get(key);
        }
        for info in file.tensors() {
            let _ = file.tensor_data(info).len();
            // the decoders on every tensor small enough to decode here
            if info.n_elements() <= 1 << 20 {
                let _ = file.tensor_f32(&info.name);
            }
        }
    }
});
