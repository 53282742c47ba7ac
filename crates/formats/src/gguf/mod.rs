//! GGUF files (llama.cpp and ggml's format), versions 2 and 3, read and
//! checked: the header, every metadata key/value (nested arrays included),
//! the tensor infos and where each tensor's bytes lie. `docs/FORMAT.md`
//! ("GGUF input") is the description this reader follows.
//!
//! Every count and length is checked against the bytes that remain before
//! anything is allocated for it, so a file that claims 2⁴⁰ tensors or a
//! string of 2⁶³ bytes is refused in time linear in its size, and every
//! tensor's extent (from its dimensions and its type's block size) is
//! checked to lie inside the data section, aligned, and apart from every
//! other tensor's. Only little-endian files are read (big-endian GGUF has
//! no marker but its byte-swapped version, which is refused as such).

use std::collections::HashMap;
use std::path::Path;

use crate::mapped::Bytes;
use crate::FormatError;

mod cursor;
mod types;

use cursor::Cursor;
pub use types::{GgmlType, GgufValue, GgufValueType};

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// The data section's alignment when `general.alignment` is absent.
pub const GGUF_DEFAULT_ALIGNMENT: usize = 32;
/// The metadata key that sets the data section's alignment.
pub const GGUF_ALIGNMENT_KEY: &str = "general.alignment";
/// Arrays of arrays deeper than this are refused (llama.cpp's own files
/// nest none; the limit keeps a hostile file from exhausting the stack).
pub const GGUF_MAX_ARRAY_DEPTH: usize = 8;
/// The most dimensions a ggml tensor has.
pub const GGML_MAX_DIMS: usize = 4;

/// Whether `bytes` start like a GGUF file (the converter decides its input
/// format by this, not by the file name).
pub fn is_gguf(bytes: &[u8]) -> bool {
    bytes.starts_with(&GGUF_MAGIC)
}

/// One tensor of a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufTensorInfo {
    /// Its name (`blk.0.attn_q.weight`, …).
    pub name: String,
    /// Its dimensions in ggml's order: `dims[0]` (`ne0`) is the innermost,
    /// contiguous one, the input size of a linear weight.
    pub dims: Vec<u64>,
    /// Its type.
    pub ggml_type: GgmlType,
    /// Where its bytes start, from the start of the data section.
    pub offset: u64,
    /// How many bytes it takes.
    pub n_bytes: usize,
}

impl GgufTensorInfo {
    /// The shape in row-major order as the rest of qlinear writes it
    /// (`[out, in]` for a linear weight): `dims` reversed.
    pub fn shape(&self) -> Vec<usize> {
        // every dimension was checked to fit usize when the file was read
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    /// The number of weights.
    pub fn n_elements(&self) -> usize {
        self.dims.iter().map(|&d| d as usize).product()
    }
}

/// A GGUF file opened for reading (memory-mapped, like
/// [`QuantizedFile`](crate::QuantizedFile)). Opening reads and checks the
/// whole header; [`GgufFile::tensor_data`] borrows a tensor's bytes.
pub struct GgufFile {
    bytes: Bytes,
    version: u32,
    alignment: usize,
    data_start: usize,
    metadata: Vec<(String, GgufValue)>,
    meta_index: HashMap<String, usize>,
    tensors: Vec<GgufTensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Opens `path` through a read-only memory map, with the same rules
    /// and the same SIGBUS caveat as [`QuantizedFile::open`](crate::QuantizedFile::open).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, FormatError> {
        Self::parse(crate::mapped::open(path.as_ref())?)
    }

    /// Parses a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, FormatError> {
        Self::parse(Bytes::Owned(bytes))
    }

    fn parse(bytes: Bytes) -> Result<Self, FormatError> {
        let mut c = Cursor {
            b: bytes.as_slice(),
            at: 0,
        };
        let magic = c.take(4, "the magic")?;
        if magic != GGUF_MAGIC {
            return Err(FormatError::NotGguf);
        }
        let version = c.u32("the version")?;
        match version {
            2 | 3 => {}
            1 => {
                return Err(gguf(
                    "the header",
                    "GGUF version 1 (32-bit counts) is not read; only versions 2 and 3",
                ))
            }
            v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
                return Err(gguf(
                    "the header",
                    "a big-endian GGUF file; only little-endian files are read",
                ))
            }
            v => {
                return Err(gguf(
                    "the header",
                    format!("unknown GGUF version {v} (this reader knows 2 and 3)"),
                ))
            }
        }
        let n_tensors = c.u64("the tensor count")?;
        let n_kv = c.u64("the metadata count")?;
        // a key/value takes at least 8 (key length) + 4 (type) + 1 bytes, a
        // tensor info 8 (name length) + 4 (dims) + 8 + 4 (type) + 8 (offset)
        c.fits(n_kv, 13, "the metadata count")?;
        c.fits(n_tensors, 32, "the tensor count")?;
        let mut metadata = Vec::with_capacity(n_kv as usize);
        let mut meta_index = HashMap::with_capacity(n_kv as usize);
        for _ in 0..n_kv {
            let key = c.string("a metadata key")?;
            let t = c.u32(&key)?;
            let ty = GgufValueType::from_id(t).ok_or_else(|| gguf(&key, format!("unknown metadata value type {t}")))?;
            let value = c.value(ty, &key, 0)?;
            if meta_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(gguf(&key, "the metadata names this key twice"));
            }
            metadata.push((key, value));
        }
        let alignment = match meta_index.get(GGUF_ALIGNMENT_KEY).map(|&i| &metadata[i].1) {
            None => GGUF_DEFAULT_ALIGNMENT,
            Some(GgufValue::U32(a)) if a.is_power_of_two() => *a as usize,
            Some(v) => return Err(gguf(GGUF_ALIGNMENT_KEY, format!("{v:?} is not a u32 power of two"))),
        };
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut tensor_index = HashMap::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            let info = c.tensor_info(alignment)?;
            if tensor_index.insert(info.name.clone(), tensors.len()).is_some() {
                return Err(FormatError::DuplicateTensor { tensor: info.name });
            }
            tensors.push(info);
        }
        let data_start = c.at.div_ceil(alignment).saturating_mul(alignment);
        let data_len = c.b.len().saturating_sub(data_start);
        if data_start > c.b.len() && !tensors.is_empty() {
            return Err(gguf("the data section", "the file ends before the data section starts"));
        }
        check_extents(&tensors, data_len)?;
        Ok(GgufFile {
            bytes,
            version,
            alignment,
            data_start,
            metadata,
            meta_index,
            tensors,
            tensor_index,
        })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data section's alignment in bytes.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Every metadata key/value, in the file's order.
    pub fn metadata(&self) -> &[(String, GgufValue)] {
        &self.metadata
    }

    /// The value of metadata key `key`.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Every tensor, in the file's order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// A tensor's weights as f32, in ggml's order (`dims[0]` fastest, i.e.
    /// row-major in [`GgufTensorInfo::shape`]), decoded exactly as
    /// `gguf.quants.dequantize` does ([`dequantize_ggml`](crate::dequantize_ggml)).
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>, FormatError> {
        let info = self
            .tensor(name)
            .ok_or_else(|| FormatError::MissingTensor { tensor: name.into() })?;
        let mut out = vec![0f32; info.n_elements()];
        crate::dequantize_ggml(name, info.ggml_type, self.tensor_data(info), &mut out)?;
        Ok(out)
    }

    /// The 2-D `Q4_0` tensor `name` as q4g32, losslessly
    /// ([`q4_0_to_q4g32`](crate::q4_0_to_q4g32)), shaped `[out, in]` (the
    /// reverse of ggml's dimensions). Errors: no such tensor, not `Q4_0`,
    /// not 2-D, or a block scale that is NaN or infinite.
    pub fn q4g32_from_q4_0(&self, name: &str) -> Result<qlinear_quant_recipe::QuantizedMatrixQ4, FormatError> {
        let info = self
            .tensor(name)
            .ok_or_else(|| FormatError::MissingTensor { tensor: name.into() })?;
        if info.ggml_type != GgmlType::Q4_0 || info.dims.len() != 2 {
            return Err(FormatError::Unsupported {
                tensor: name.into(),
                reason: format!(
                    "{} {:?} is not a 2-D Q4_0 tensor, which alone has a lossless q4g32 image",
                    info.ggml_type,
                    info.shape()
                ),
            });
        }
        let shape = info.shape();
        crate::q4_0_to_q4g32(name, shape[0], shape[1], self.tensor_data(info))
    }

    /// A tensor's bytes, borrowed from the file: `info.n_bytes` of them,
    /// checked to lie inside the file when it was opened. `info` must be one
    /// of this file's (anything else gets an empty slice).
    pub fn tensor_data(&self, info: &GgufTensorInfo) -> &[u8] {
        let start = self.data_start.saturating_add(info.offset as usize);
        self.bytes
            .as_slice()
            .get(start..start.saturating_add(info.n_bytes))
            .unwrap_or(&[])
    }
}

fn gguf(at: impl Into<String>, reason: impl Into<String>) -> FormatError {
    FormatError::Gguf {
        at: at.into(),
        reason: reason.into(),
    }
}

/// Every tensor inside `data_len` bytes, and no two overlapping (sorted by
/// offset: n log n in the tensor count).
fn check_extents(tensors: &[GgufTensorInfo], data_len: usize) -> Result<(), FormatError> {
    let mut order: Vec<(u64, u64, &str)> = tensors
        .iter()
        .map(|t| (t.offset, t.offset.saturating_add(t.n_bytes as u64), t.name.as_str()))
        .collect();
    order.sort_unstable();
    for (i, &(start, end, name)) in order.iter().enumerate() {
        if end > data_len as u64 {
            return Err(gguf(
                name,
                format!("its bytes {start}..{end} of the data section lie past its end ({data_len} bytes)"),
            ));
        }
        if let Some(&(next, _, other)) = order.get(i + 1) {
            if next < end {
                return Err(gguf(
                    name,
                    format!("its bytes {start}..{end} overlap tensor {other} at {next}"),
                ));
            }
        }
    }
    Ok(())
}
