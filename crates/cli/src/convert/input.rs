//! The converter's input: a safetensors or a GGUF file, its tensors as
//! sources, their rows as f32, and the tensors copied as they are.

use super::*;

/// What `qlinear convert` reads: a safetensors file or a GGUF file, told
/// apart by the first bytes (`GGUF`), not by the name.
pub enum Input {
    /// A safetensors file: F32, F16 and BF16 weights are quantized, every
    /// other tensor is copied as it is.
    Safetensors(QuantizedFile),
    /// A GGUF file: weights of a type in [`DEQUANTIZABLE`] are quantized
    /// from their f32 values (or, `Q4_0` to q4g32, imported bit for bit),
    /// other tensors of those types are written as F32, integer tensors
    /// as they are.
    Gguf(GgufFile),
}

/// One input tensor as the converter sees it.
pub(super) struct Source {
    pub(super) name: String,
    /// Row-major (`[out, in]` for a linear weight; GGUF's dimensions reversed).
    pub(super) shape: Vec<usize>,
    /// Its type as the report names it (`F16`, `Q4_1`).
    pub(super) what: String,
    /// Its values can be decoded to f32, so it may be quantized.
    pub(super) float: bool,
    /// Its bytes in the input.
    pub(super) bytes: usize,
}

impl Input {
    /// Opens `path` as GGUF if it starts with `GGUF`, else as safetensors;
    /// the message names the path once. A path that is not a regular file
    /// is left to the safetensors reader, which says what it is.
    pub fn open(path: &std::path::Path) -> Result<Input, String> {
        let is_gguf = std::fs::metadata(path).is_ok_and(|m| m.is_file()) && {
            let mut magic = [0u8; 4];
            std::fs::File::open(path)
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
                .is_ok()
                && qlinear::gguf::is_gguf(&magic)
        };
        if !is_gguf {
            return open(path).map(Input::Safetensors);
        }
        GgufFile::open(path)
            .map(Input::Gguf)
            .map_err(|e| esc(&format!("{}: {e}", path.display())))
    }

    /// Parses a file held in memory, GGUF or safetensors by its magic.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Input, FormatError> {
        if qlinear::gguf::is_gguf(&bytes) {
            GgufFile::from_bytes(bytes).map(Input::Gguf)
        } else {
            QuantizedFile::from_bytes(bytes).map(Input::Safetensors)
        }
    }

    pub(super) fn sources(&self) -> Vec<Source> {
        match self {
            Input::Safetensors(f) => f
                .tensor_names()
                .iter()
                .filter_map(|name| {
                    let raw = f.raw(name)?;
                    Some(Source {
                        name: name.clone(),
                        shape: raw.shape.to_vec(),
                        what: format!("{:?}", raw.dtype),
                        float: matches!(raw.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16),
                        bytes: raw.data.len(),
                    })
                })
                .collect(),
            Input::Gguf(f) => f
                .tensors()
                .iter()
                .map(|t| Source {
                    name: t.name.clone(),
                    shape: t.shape(),
                    what: t.ggml_type.to_string(),
                    float: DEQUANTIZABLE.contains(&t.ggml_type),
                    bytes: t.n_bytes,
                })
                .collect(),
        }
    }

    /// The output dtype of a tensor copied without quantizing: a safetensors
    /// tensor keeps its own, a decodable GGUF one becomes F32, a GGUF
    /// integer or F64 one keeps its type; any other GGUF type is refused.
    pub(super) fn kept_dtype(&self, name: &str) -> Result<Dtype, String> {
        match self {
            Input::Safetensors(f) => f
                .raw(name)
                .map(|r| r.dtype)
                .ok_or_else(|| format!("{}: vanished from the header", esc(name))),
            Input::Gguf(f) => {
                let ty = f
                    .tensor(name)
                    .map(|t| t.ggml_type)
                    .ok_or_else(|| format!("{}: vanished from the header", esc(name)))?;
                Ok(match ty {
                    t if DEQUANTIZABLE.contains(&t) => Dtype::F32,
                    GgmlType::I8 => Dtype::I8,
                    GgmlType::I16 => Dtype::I16,
                    GgmlType::I32 => Dtype::I32,
                    GgmlType::I64 => Dtype::I64,
                    GgmlType::F64 => Dtype::F64,
                    other => {
                        return Err(format!(
                            "{}: GGUF type {other}, which this converter cannot decode (it decodes {}); no output \
                             written",
                            esc(name),
                            DEQUANTIZABLE.map(|t| t.to_string()).join(", ")
                        ))
                    }
                })
            }
        }
    }

    /// Writes a copied tensor's bytes (see [`Input::kept_dtype`]).
    pub(super) fn write_kept(&self, name: &str, out: &mut dyn Write) -> Result<(), FormatError> {
        let io = |e: std::io::Error| FormatError::Unsupported {
            tensor: name.into(),
            reason: format!("cannot write: {e}"),
        };
        match self {
            Input::Safetensors(f) => out
                .write_all(f.raw(name).map(|r| r.data).unwrap_or_default())
                .map_err(io),
            Input::Gguf(f) => {
                let info = f
                    .tensor(name)
                    .ok_or_else(|| FormatError::MissingTensor { tensor: name.into() })?;
                if info.ggml_type != GgmlType::F32 && DEQUANTIZABLE.contains(&info.ggml_type) {
                    let v = f.tensor_f32(name)?;
                    out.write_all(&encode::f32s(&v)).map_err(io)
                } else {
                    out.write_all(f.tensor_data(info)).map_err(io)
                }
            }
        }
    }

    /// Row `r` (of `k` values) of the 2-D float tensor `name`, as f32.
    pub(super) fn row_f32(&self, name: &str, r: usize, k: usize, out: &mut Vec<f32>) -> Result<(), String> {
        match self {
            Input::Safetensors(f) => {
                let raw = f.raw(name).ok_or_else(|| format!("{}: vanished", esc(name)))?;
                let elem = raw.dtype.bitsize() / 8;
                decode_row(&raw, &raw.data[r * k * elem..(r + 1) * k * elem], out);
                Ok(())
            }
            Input::Gguf(f) => {
                let info = f.tensor(name).ok_or_else(|| format!("{}: vanished", esc(name)))?;
                let data = f.tensor_data(info);
                let rows = info.shape().first().copied().unwrap_or(1).max(1);
                let row_bytes = data.len() / rows;
                out.clear();
                out.resize(k, 0.0);
                dequantize_ggml(name, info.ggml_type, &data[r * row_bytes..(r + 1) * row_bytes], out)
                    .map_err(|e| esc(&e.to_string()))
            }
        }
    }

    /// A GGUF `Q4_0` weight whose blocks can go to q4g32 unchanged.
    pub(super) fn is_q4_0(&self, name: &str) -> bool {
        matches!(self, Input::Gguf(f) if f.tensor(name).is_some_and(|t| t.ggml_type == GgmlType::Q4_0))
    }

    /// Whether the imported `Q4_0` weight `name` holds a negative block
    /// scale (sign set, not −0.0): the output must then say version 2.
    pub(super) fn q4_0_has_negative_scale(&self, name: &str) -> bool {
        let Input::Gguf(f) = self else { return false };
        f.tensor(name).is_some_and(|t| {
            f.tensor_data(t).chunks_exact(GgmlType::Q4_0.block_bytes()).any(|b| {
                let bits = u16::from_le_bytes([b[0], b[1]]);
                bits & 0x8000 != 0 && bits != 0x8000
            })
        })
    }

    /// The output's metadata before the qlinear keys: a safetensors input's
    /// own map; a GGUF input's key/values as `gguf.KEY` = the value's JSON
    /// text (`docs/FORMAT.md`, "GGUF input").
    pub(super) fn metadata(&self) -> HashMap<String, String> {
        match self {
            Input::Safetensors(f) => f.metadata_map().clone(),
            Input::Gguf(f) => f
                .metadata()
                .iter()
                .map(|(k, v)| (format!("{GGUF_KEY_PREFIX}{k}"), v.to_json()))
                .collect(),
        }
    }
}

/// Widens one input row to f32 (exact for F16 and BF16).
pub(super) fn decode_row(raw: &RawTensor<'_>, bytes: &[u8], out: &mut Vec<f32>) {
    out.clear();
    match raw.dtype {
        Dtype::F32 => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        Dtype::F16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()),
        ),
        _ => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()),
        ),
    }
}
