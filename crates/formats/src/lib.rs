//! qlinear's on-disk format: quantized weights in safetensors files; and
//! GGUF files (llama.cpp's) read and dequantized as converter input
//! ([`GgufFile`], [`dequantize_ggml`]).
//!
//! A weight `P.weight` `[N, K]` is stored as `P.qweight` and `P.scales`:
//!
//! | scheme | `P.qweight` | `P.scales` |
//! |---|---|---|
//! | `q8` | I8 `[N, K]` | F32 `[N]` |
//! | `q4` | U8 `[N, ceil(K/2)]` | F32 `[N]` |
//! | `q4g<G>` | U8 `[N, K/2]` | F16 `[N, K/G]` |
//!
//! Q4 nibbles on disk are two's complement, low nibble = even column, odd-K
//! pad nibble 0 (in memory they are biased by +8; the conversion is `XOR
//! 0x88`). `__metadata__` carries `qlinear.format = "1"` (`"2"` when a q4g
//! scale is negative), `P.qscheme` and
//! `P.in_features`. Headers are parsed by the `safetensors` crate; every
//! inconsistency is a [`FormatError`] naming the tensor, never a panic.
//! `docs/FORMAT.md` is the complete description.

#![warn(missing_docs)]
// every `unsafe` block states why it holds, on the line above it
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod encode;
mod error;
mod ggml_quants;
mod gguf;
mod in_place;
mod mapped;
mod memory;
mod reader;
mod writer;

pub use error::FormatError;
pub use ggml_quants::{dequantize as dequantize_ggml, q4_0_to_q4g32, DEQUANTIZABLE};
pub use gguf::{
    is_gguf, GgmlType, GgufFile, GgufTensorInfo, GgufValue, GgufValueType, GGML_MAX_DIMS, GGUF_ALIGNMENT_KEY,
    GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_MAX_ARRAY_DEPTH,
};
pub use in_place::{Arrange, ArrangedQ4, ArrangedScales, Q4InPlace};
pub use mapped::file_kind;
pub use memory::{available_memory, check_fits_in_memory};
pub use qlinear_quant_recipe::{QScheme, QuantizedWeight};
pub use reader::{QuantizedFile, QuantizedTensorInfo, RawTensor};
pub use safetensors::Dtype;
pub use writer::{write_file, write_streaming, write_to, OutputTensor, TensorPlan};

/// The `__metadata__` key holding the format version.
pub const FORMAT_KEY: &str = "qlinear.format";
/// The format version written when no q4g scale is negative (every file
/// qlinear's recipes produce): readable by every qlinear reader.
pub const FORMAT_VERSION: &str = "1";
/// The format version whose q4g scales may be negative (`docs/FORMAT.md`,
/// "Versions"): written only when one is, e.g. after a lossless GGUF
/// `Q4_0` import.
pub const FORMAT_VERSION_SIGNED_GROUP_SCALES: &str = "2";

/// The version a file must say: [`FORMAT_VERSION_SIGNED_GROUP_SCALES`] if
/// any of its q4g tensors holds a negative scale, else [`FORMAT_VERSION`].
pub fn format_version(any_negative_group_scale: bool) -> &'static str {
    if any_negative_group_scale {
        FORMAT_VERSION_SIGNED_GROUP_SCALES
    } else {
        FORMAT_VERSION
    }
}

/// The metadata key of tensor prefix `P`'s scheme: `P.qscheme`.
pub fn qscheme_key(prefix: &str) -> String {
    format!("{prefix}.qscheme")
}
/// The metadata key of tensor prefix `P`'s K: `P.in_features`.
pub fn in_features_key(prefix: &str) -> String {
    format!("{prefix}.in_features")
}

// The crate README (its crates.io page) runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
