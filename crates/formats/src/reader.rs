use std::collections::HashMap;
use std::path::Path;

use half::f16;
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrix, QuantizedMatrixQ4};
use safetensors::tensor::Metadata;
use safetensors::{Dtype, SafeTensors};

use crate::{in_features_key, qscheme_key, FormatError, QScheme, QuantizedWeight, FORMAT_KEY, FORMAT_VERSION};

enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A raw tensor of the file.
#[derive(Debug, Clone, Copy)]
pub struct RawTensor<'a> {
    pub dtype: Dtype,
    pub shape: &'a [usize],
    pub data: &'a [u8],
}

/// What [`QuantizedFile::validate`] found for one quantized tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedTensorInfo {
    pub prefix: String,
    pub scheme: QScheme,
    pub n: usize,
    pub k: usize,
    /// Bytes of `qweight` plus `scales`.
    pub bytes: usize,
}

impl QuantizedTensorInfo {
    /// Stored bits per weight, scales included.
    pub fn bits_per_weight(&self) -> f64 {
        self.bytes as f64 * 8.0 / (self.n * self.k).max(1) as f64
    }
}

/// A safetensors file opened for reading (memory-mapped from disk, or from
/// bytes in memory). Opening parses and checks the header with the
/// `safetensors` crate; quantized tensors are decoded and validated by
/// [`QuantizedFile::load`].
pub struct QuantizedFile {
    bytes: Bytes,
    header_len: usize,
    metadata: Metadata,
}

impl std::fmt::Debug for QuantizedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantizedFile")
            .field("tensors", &self.tensor_names())
            .finish()
    }
}

impl QuantizedFile {
    /// Opens `path` through a memory map (the file is not copied into memory;
    /// on WASI, which cannot map files, it is read instead).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, FormatError> {
        let path = path.as_ref();
        if cfg!(target_family = "wasm") {
            return Self::from_bytes_inner(Bytes::Owned(std::fs::read(path).map_err(|e| FormatError::io(path, e))?));
        }
        let file = std::fs::File::open(path).map_err(|e| FormatError::io(path, e))?;
        // The map is read-only and private to this value, and qlinear never
        // writes a file while it is mapped (outputs go to a new temporary file
        // renamed over the destination). Another process truncating the file
        // underneath is the accepted contract of every memory-mapped loader.
        // SAFETY: read-only private map of a file qlinear does not modify (above).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| FormatError::io(path, e))?;
        Self::from_bytes_inner(Bytes::Mapped(map))
    }

    /// Parses a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, FormatError> {
        Self::from_bytes_inner(Bytes::Owned(bytes))
    }

    fn from_bytes_inner(bytes: Bytes) -> Result<Self, FormatError> {
        let (header_len, metadata) = SafeTensors::read_metadata(bytes.as_slice())?;
        let f = Self {
            bytes,
            header_len,
            metadata,
        };
        if let Some(v) = f.metadata_map().get(FORMAT_KEY) {
            if v != FORMAT_VERSION {
                return Err(FormatError::UnknownFormatVersion { found: v.clone() });
            }
        }
        Ok(f)
    }

    /// The `__metadata__` map (empty if the file has none).
    pub fn metadata_map(&self) -> HashMap<String, String> {
        self.metadata.metadata().clone().unwrap_or_default()
    }

    /// Every tensor name, sorted.
    pub fn tensor_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.metadata.tensors().into_keys().collect();
        names.sort();
        names
    }

    /// A tensor's dtype, shape and bytes.
    pub fn raw(&self, name: &str) -> Option<RawTensor<'_>> {
        let info = self.metadata.info(name)?;
        let base = 8 + self.header_len;
        let (s, e) = info.data_offsets;
        Some(RawTensor {
            dtype: info.dtype,
            shape: &info.shape,
            data: &self.bytes.as_slice()[base + s..base + e],
        })
    }

    /// The prefixes `P` of the quantized tensors: every `P.qweight`, `P.scales`
    /// or `P.qscheme` the file mentions, sorted.
    pub fn quantized_prefixes(&self) -> Vec<String> {
        let mut p: Vec<String> = self
            .tensor_names()
            .iter()
            .filter_map(|n| {
                n.strip_suffix(".qweight")
                    .or_else(|| n.strip_suffix(".scales"))
                    .map(String::from)
            })
            .chain(
                self.metadata_map()
                    .keys()
                    .filter_map(|k| k.strip_suffix(".qscheme").map(String::from)),
            )
            .collect();
        p.sort();
        p.dedup();
        p
    }

    fn require(&self, prefix: &str, suffix: &str, partner: &str) -> Result<RawTensor<'_>, FormatError> {
        let name = format!("{prefix}.{suffix}");
        self.raw(&name).ok_or_else(|| {
            let other = format!("{prefix}.{partner}");
            if self.raw(&other).is_some() {
                FormatError::MissingPartner {
                    tensor: other,
                    missing: name,
                }
            } else {
                FormatError::MissingTensor { tensor: name }
            }
        })
    }

    /// Decodes and validates the quantized tensor `prefix`: the scheme and K
    /// from the metadata, dtypes and shapes of `qweight` and `scales` against
    /// them, scales finite and `>= 0`, Q8 codes never -128, the odd-K pad
    /// nibble 0. Two's-complement nibbles become biased ones.
    pub fn load(&self, prefix: &str) -> Result<QuantizedWeight, FormatError> {
        let meta = self.metadata_map();
        let tensor = format!("{prefix}.qweight");
        if !meta.contains_key(FORMAT_KEY) {
            return Err(FormatError::NotQuantizedFile { tensor });
        }
        let qweight = self.require(prefix, "qweight", "scales")?;
        let scales = self.require(prefix, "scales", "qweight")?;
        let get = |key: String| {
            meta.get(&key).cloned().ok_or(FormatError::MissingMetadata {
                tensor: tensor.clone(),
                key,
            })
        };
        let scheme_text = get(qscheme_key(prefix))?;
        let scheme: QScheme = scheme_text.parse().map_err(|_| FormatError::UnknownScheme {
            tensor: tensor.clone(),
            scheme: scheme_text,
        })?;
        let k_text = get(in_features_key(prefix))?;
        let k: usize = k_text
            .parse()
            .ok()
            .filter(|_| k_text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or(FormatError::BadInFeatures {
                tensor: tensor.clone(),
                value: k_text,
            })?;
        let n = *qweight.shape.first().ok_or_else(|| FormatError::Shape {
            tensor: tensor.clone(),
            expected: scheme.shapes(0, k)[0].clone(),
            found: qweight.shape.to_vec(),
        })?;
        if let QScheme::Q4Grouped(g) = scheme {
            if !k.is_multiple_of(g) {
                let source = qlinear_quant_recipe::RecipeError::GroupNotDividing { group: g, k };
                return Err(FormatError::Invalid { tensor, source });
            }
        }
        let [qshape, sshape] = scheme.shapes(n, k);
        let (qdtype, sdtype) = match scheme {
            QScheme::Q8 => (Dtype::I8, Dtype::F32),
            QScheme::Q4 => (Dtype::U8, Dtype::F32),
            QScheme::Q4Grouped(_) => (Dtype::U8, Dtype::F16),
        };
        let scales_name = format!("{prefix}.scales");
        check(&tensor, qweight, qdtype, &qshape)?;
        check(&scales_name, scales, sdtype, &sshape)?;
        // a bad scale is the scales tensor's fault, anything else the qweight's
        let blame = |e: qlinear_quant_recipe::RecipeError| {
            let t = if matches!(e, qlinear_quant_recipe::RecipeError::InvalidScale { .. }) {
                &scales_name
            } else {
                &tensor
            };
            FormatError::Invalid {
                tensor: t.clone(),
                source: e,
            }
        };
        Ok(match scheme {
            QScheme::Q8 => {
                let codes = qweight.data.iter().map(|&b| b as i8).collect();
                QuantizedWeight::Q8(QuantizedMatrix::from_parts(n, k, codes, f32s(scales.data)).map_err(blame)?)
            }
            QScheme::Q4 | QScheme::Q4Grouped(_) => {
                let s = match scheme {
                    QScheme::Q4Grouped(group) => Q4Scales::Grouped {
                        group,
                        scales: f16s(scales.data),
                    },
                    _ => Q4Scales::PerChannel(f32s(scales.data)),
                };
                QuantizedWeight::Q4(
                    QuantizedMatrixQ4::from_parts_twos_complement(n, k, qweight.data.to_vec(), s).map_err(blame)?,
                )
            }
        })
    }

    /// A plain float tensor (F32, F16 or BF16) widened exactly to f32, in its
    /// stored row-major order. Errors name the tensor: it is missing, or its
    /// dtype is not a float this reader widens.
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>, FormatError> {
        let raw = self
            .raw(name)
            .ok_or_else(|| FormatError::MissingTensor { tensor: name.into() })?;
        match raw.dtype {
            Dtype::F32 => Ok(f32s(raw.data)),
            Dtype::F16 => Ok(f16s(raw.data).into_iter().map(f32::from).collect()),
            Dtype::BF16 => Ok(raw
                .data
                .chunks_exact(2)
                .map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
                .collect()),
            other => Err(FormatError::Dtype {
                tensor: name.into(),
                expected: "F32, F16 or BF16",
                found: format!("{other:?}"),
            }),
        }
    }

    /// Loads every quantized tensor: the full validation `qlinear inspect` reports.
    pub fn validate(&self) -> Vec<(String, Result<QuantizedTensorInfo, FormatError>)> {
        self.quantized_prefixes()
            .into_iter()
            .map(|prefix| {
                let r = self.load(&prefix).map(|t| {
                    let (n, k) = t.shape();
                    let bytes = [".qweight", ".scales"]
                        .iter()
                        .filter_map(|s| self.raw(&format!("{prefix}{s}")))
                        .map(|r| r.data.len())
                        .sum();
                    QuantizedTensorInfo {
                        prefix: prefix.clone(),
                        scheme: t.scheme(),
                        n,
                        k,
                        bytes,
                    }
                });
                (prefix, r)
            })
            .collect()
    }
}

fn check(tensor: &str, t: RawTensor<'_>, dtype: Dtype, shape: &[usize]) -> Result<(), FormatError> {
    if t.dtype != dtype {
        return Err(FormatError::Dtype {
            tensor: tensor.into(),
            expected: dtype_name(dtype),
            found: format!("{:?}", t.dtype),
        });
    }
    if t.shape != shape {
        return Err(FormatError::Shape {
            tensor: tensor.into(),
            expected: shape.to_vec(),
            found: t.shape.to_vec(),
        });
    }
    Ok(())
}

fn dtype_name(d: Dtype) -> &'static str {
    match d {
        Dtype::I8 => "I8",
        Dtype::U8 => "U8",
        Dtype::F16 => "F16",
        Dtype::F32 => "F32",
        _ => "another dtype",
    }
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
fn f16s(b: &[u8]) -> Vec<f16> {
    b.chunks_exact(2)
        .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])))
        .collect()
}
