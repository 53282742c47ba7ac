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

/// A ggml tensor type that this reader knows the block geometry of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// 32 weights: f16 scale, 16 bytes of 4-bit codes.
    Q4_0,
    /// 32 weights: f16 scale and minimum, 16 bytes of 4-bit codes.
    Q4_1,
    /// 32 weights: f16 scale, 4 bytes of fifth bits, 16 bytes of 4-bit codes.
    Q5_0,
    /// 32 weights: f16 scale and minimum, fifth bits, 4-bit codes.
    Q5_1,
    /// 32 weights: f16 scale, 32 signed bytes.
    Q8_0,
    /// 256 weights in 2 bits with 4-bit sub-block scales.
    Q2_K,
    /// 256 weights in 3 bits.
    Q3_K,
    /// 256 weights in 4 bits: 8 sub-blocks with 6-bit scales and minimums.
    Q4_K,
    /// 256 weights in 5 bits.
    Q5_K,
    /// 256 weights in 6 bits: 16 sub-blocks with 8-bit scales.
    Q6_K,
    /// 256 weights in 8 bits with an f32 scale (intermediate results).
    Q8_K,
    /// 256 weights, importance-quantized 2-bit (extra-extra small).
    IQ2_XXS,
    /// 256 weights, importance-quantized 2-bit (extra small).
    IQ2_XS,
    /// 256 weights, importance-quantized 3-bit (extra-extra small).
    IQ3_XXS,
    /// 256 weights, importance-quantized 1-bit.
    IQ1_S,
    /// 32 weights, non-linear 4-bit.
    IQ4_NL,
    /// 256 weights, importance-quantized 3-bit.
    IQ3_S,
    /// 256 weights, importance-quantized 2-bit.
    IQ2_S,
    /// 256 weights, non-linear 4-bit with sub-block scales.
    IQ4_XS,
    /// 8-bit integer.
    I8,
    /// 16-bit integer.
    I16,
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
    /// 64-bit float.
    F64,
    /// 256 weights, importance-quantized 1-bit with a mask.
    IQ1_M,
    /// bfloat16.
    BF16,
    /// 256 weights, ternary in 1.6 bits.
    TQ1_0,
    /// 256 weights, ternary in 2 bits.
    TQ2_0,
}

/// (type, id, weights per block, bytes per block), as ggml defines them
/// (`ggml_type_traits`; the `gguf` package's `GGML_QUANT_SIZES` agrees,
/// which a test checks). `Q8_1` (id 9), an intermediate of ggml's dot
/// products that no file holds, is left out: ggml and the `gguf` package
/// disagree on its size (36 and 40 bytes), so it is refused as unknown.
const GGML_TYPES: [(GgmlType, u32, usize, usize); 30] = {
    use GgmlType::*;
    [
        (F32, 0, 1, 4),
        (F16, 1, 1, 2),
        (Q4_0, 2, 32, 18),
        (Q4_1, 3, 32, 20),
        (Q5_0, 6, 32, 22),
        (Q5_1, 7, 32, 24),
        (Q8_0, 8, 32, 34),
        (Q2_K, 10, 256, 84),
        (Q3_K, 11, 256, 110),
        (Q4_K, 12, 256, 144),
        (Q5_K, 13, 256, 176),
        (Q6_K, 14, 256, 210),
        (Q8_K, 15, 256, 292),
        (IQ2_XXS, 16, 256, 66),
        (IQ2_XS, 17, 256, 74),
        (IQ3_XXS, 18, 256, 98),
        (IQ1_S, 19, 256, 50),
        (IQ4_NL, 20, 32, 18),
        (IQ3_S, 21, 256, 110),
        (IQ2_S, 22, 256, 82),
        (IQ4_XS, 23, 256, 136),
        (I8, 24, 1, 1),
        (I16, 25, 1, 2),
        (I32, 26, 1, 4),
        (I64, 27, 1, 8),
        (F64, 28, 1, 8),
        (IQ1_M, 29, 256, 56),
        (BF16, 30, 1, 2),
        (TQ1_0, 34, 256, 54),
        (TQ2_0, 35, 256, 66),
    ]
};

impl GgmlType {
    /// Every type this reader knows.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        GGML_TYPES.iter().map(|t| t.0)
    }

    /// The type with ggml's numeric id, if this reader knows it.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GGML_TYPES.iter().find(|t| t.1 == id).map(|t| t.0)
    }

    fn entry(self) -> (GgmlType, u32, usize, usize) {
        // every variant has its row: `all()` iterates the table itself
        GGML_TYPES
            .iter()
            .copied()
            .find(|t| t.0 == self)
            .unwrap_or((self, u32::MAX, 1, 0))
    }

    /// ggml's numeric id.
    pub fn id(self) -> u32 {
        self.entry().1
    }

    /// Weights per block (1 for the plain number types).
    pub fn block_weights(self) -> usize {
        self.entry().2
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.entry().3
    }

    /// ggml's name of the type (`"Q4_0"`, `"F16"`, …).
    pub fn name(self) -> String {
        format!("{self:?}")
    }

    /// Stored bits per weight.
    pub fn bits_per_weight(self) -> f64 {
        (self.block_bytes() * 8) as f64 / self.block_weights() as f64
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

/// The type of a metadata value (GGUF's `gguf_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufValueType {
    /// `u8`.
    U8,
    /// `i8`.
    I8,
    /// `u16`.
    U16,
    /// `i16`.
    I16,
    /// `u32`.
    U32,
    /// `i32`.
    I32,
    /// `f32`.
    F32,
    /// A byte that is 0 or 1.
    Bool,
    /// A UTF-8 string with a `u64` length.
    String,
    /// An array: item type, `u64` count, items.
    Array,
    /// `u64`.
    U64,
    /// `i64`.
    I64,
    /// `f64`.
    F64,
}

impl GgufValueType {
    fn from_id(id: u32) -> Option<GgufValueType> {
        use GgufValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The fewest bytes a value of this type takes: what a count is checked
    /// against before anything is allocated for it.
    fn min_bytes(self) -> u64 {
        use GgufValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// A string.
    String(String),
    /// An array of items of one type (arrays may hold arrays).
    Array {
        /// The items' type.
        item: GgufValueType,
        /// The items.
        values: Vec<GgufValue>,
    },
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

impl GgufValue {
    /// The value as an unsigned integer, if it is an integer type holding a
    /// value ≥ 0.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a float, if it is `f32` or `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(f64::from(v)),
            GgufValue::F64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as JSON text, as `qlinear convert` carries GGUF metadata
    /// (`docs/FORMAT.md`, "GGUF input"): strings quoted and escaped,
    /// integers in decimal, floats in the shortest decimal that reads back
    /// to the same `f32` or `f64` (NaN and ±infinity, which JSON lacks, as
    /// the strings `"NaN"`, `"inf"`, `"-inf"`), bools `true` / `false`,
    /// arrays as JSON arrays.
    pub fn to_json(&self) -> String {
        fn float(x: f64, text: String) -> String {
            if x.is_nan() {
                "\"NaN\"".into()
            } else if x.is_infinite() {
                if x > 0.0 { "\"inf\"" } else { "\"-inf\"" }.into()
            } else {
                text
            }
        }
        match self {
            GgufValue::U8(x) => x.to_string(),
            GgufValue::I8(x) => x.to_string(),
            GgufValue::U16(x) => x.to_string(),
            GgufValue::I16(x) => x.to_string(),
            GgufValue::U32(x) => x.to_string(),
            GgufValue::I32(x) => x.to_string(),
            GgufValue::U64(x) => x.to_string(),
            GgufValue::I64(x) => x.to_string(),
            GgufValue::F32(x) => float(f64::from(*x), format!("{x:?}")),
            GgufValue::F64(x) => float(*x, format!("{x:?}")),
            GgufValue::Bool(x) => x.to_string(),
            GgufValue::String(s) => serde_json::Value::String(s.clone()).to_string(),
            GgufValue::Array { values, .. } => {
                let items: Vec<String> = values.iter().map(GgufValue::to_json).collect();
                format!("[{}]", items.join(","))
            }
        }
    }
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

/// Reads little-endian values, each checked against the bytes that remain.
struct Cursor<'b> {
    b: &'b [u8],
    at: usize,
}

impl<'b> Cursor<'b> {
    fn take(&mut self, n: u64, what: &str) -> Result<&'b [u8], FormatError> {
        let left = self.b.len() - self.at;
        if n > left as u64 {
            return Err(gguf(
                what,
                format!(
                    "needs {n} bytes at byte {}, and the file ends {left} bytes later",
                    self.at
                ),
            ));
        }
        let s = &self.b[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }

    /// `count` items of at least `min` bytes each fit in what remains.
    fn fits(&self, count: u64, min: u64, what: &str) -> Result<(), FormatError> {
        let left = (self.b.len() - self.at) as u64;
        if count.checked_mul(min).is_none_or(|need| need > left) {
            return Err(gguf(
                what,
                format!("{count} items need at least {min} bytes each, and {left} bytes remain"),
            ));
        }
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], FormatError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32, FormatError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, FormatError> {
        self.array(what).map(u64::from_le_bytes)
    }

    fn string(&mut self, what: &str) -> Result<String, FormatError> {
        let len = self.u64(what)?;
        let s = self.take(len, what)?;
        String::from_utf8(s.to_vec()).map_err(|e| gguf(what, format!("a string that is not UTF-8 ({e})")))
    }

    fn value(&mut self, ty: GgufValueType, key: &str, depth: usize) -> Result<GgufValue, FormatError> {
        use GgufValueType as T;
        Ok(match ty {
            T::U8 => GgufValue::U8(self.array::<1>(key)?[0]),
            T::I8 => GgufValue::I8(i8::from_le_bytes(self.array(key)?)),
            T::U16 => GgufValue::U16(u16::from_le_bytes(self.array(key)?)),
            T::I16 => GgufValue::I16(i16::from_le_bytes(self.array(key)?)),
            T::U32 => GgufValue::U32(self.u32(key)?),
            T::I32 => GgufValue::I32(i32::from_le_bytes(self.array(key)?)),
            T::F32 => GgufValue::F32(f32::from_le_bytes(self.array(key)?)),
            T::Bool => match self.array::<1>(key)?[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => return Err(gguf(key, format!("a bool byte {b} (neither 0 nor 1)"))),
            },
            T::String => GgufValue::String(self.string(key)?),
            T::U64 => GgufValue::U64(self.u64(key)?),
            T::I64 => GgufValue::I64(i64::from_le_bytes(self.array(key)?)),
            T::F64 => GgufValue::F64(f64::from_le_bytes(self.array(key)?)),
            T::Array => {
                if depth >= GGUF_MAX_ARRAY_DEPTH {
                    return Err(gguf(key, format!("arrays nested deeper than {GGUF_MAX_ARRAY_DEPTH}")));
                }
                let t = self.u32(key)?;
                let item = GgufValueType::from_id(t)
                    .ok_or_else(|| gguf(key, format!("an array of unknown value type {t}")))?;
                let count = self.u64(key)?;
                self.fits(count, item.min_bytes(), key)?;
                // reserved up to a bound: the items' own bytes, read one by
                // one, are what may grow it further
                let mut values = Vec::with_capacity((count as usize).min(1 << 16));
                for _ in 0..count {
                    values.push(self.value(item, key, depth + 1)?);
                }
                GgufValue::Array { item, values }
            }
        })
    }

    fn tensor_info(&mut self, alignment: usize) -> Result<GgufTensorInfo, FormatError> {
        let name = self.string("a tensor name")?;
        let n_dims = self.u32(&name)?;
        if n_dims == 0 || n_dims as usize > GGML_MAX_DIMS {
            return Err(gguf(
                &name,
                format!("{n_dims} dimensions (ggml tensors have 1 to {GGML_MAX_DIMS})"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64(&name)?);
        }
        let t = self.u32(&name)?;
        let ggml_type = GgmlType::from_id(t).ok_or_else(|| gguf(&name, format!("unknown ggml tensor type {t}")))?;
        let offset = self.u64(&name)?;
        if dims.contains(&0) {
            return Err(gguf(&name, format!("dimensions {dims:?}: a tensor with no elements")));
        }
        let elements = dims
            .iter()
            .try_fold(1usize, |acc, &d| {
                usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
            })
            .filter(|&e| e <= i64::MAX as usize)
            .ok_or_else(|| {
                gguf(
                    &name,
                    format!("dimensions {dims:?}: too many elements for this machine"),
                )
            })?;
        let per_block = ggml_type.block_weights() as u64;
        if !dims[0].is_multiple_of(per_block) {
            return Err(gguf(
                &name,
                format!(
                    "its first dimension {} is not a multiple of {ggml_type}'s block of {per_block}",
                    dims[0]
                ),
            ));
        }
        let n_bytes = (elements / ggml_type.block_weights())
            .checked_mul(ggml_type.block_bytes())
            .ok_or_else(|| gguf(&name, format!("dimensions {dims:?}: too many bytes for this machine")))?;
        if !offset.is_multiple_of(alignment as u64) {
            return Err(gguf(
                &name,
                format!("its data offset {offset} is not a multiple of the alignment {alignment}"),
            ));
        }
        Ok(GgufTensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            n_bytes,
        })
    }
}
