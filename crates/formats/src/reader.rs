//! The safetensors reader of docs/FORMAT.md: a file's quantized tensors
//! (`qweight` codes, `scales`, the scheme in the metadata) checked against
//! the contract and returned as [`QuantizedWeight`](qlinear_quant_recipe::QuantizedWeight)s, with the codes
//! copied or read in place from the file's bytes; every refusal names the
//! tensor and what is wrong with it.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use half::f16;
use std::sync::Arc;

use qlinear_quant_recipe::{Codes, Q4Scales, QuantizedMatrix, QuantizedMatrixQ4, RecipeError};
use safetensors::tensor::Metadata;
use safetensors::{Dtype, SafeTensors};

use crate::mapped::Bytes;
use crate::{
    in_features_key, qscheme_key, FormatError, QScheme, QuantizedWeight, FORMAT_KEY, FORMAT_VERSION,
    FORMAT_VERSION_SIGNED_GROUP_SCALES,
};

/// A raw tensor of the file.
#[derive(Debug, Clone, Copy)]
pub struct RawTensor<'a> {
    /// Its dtype.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: &'a [usize],
    /// Its bytes, borrowed from the file (the memory map, see [`QuantizedFile::open`]).
    pub data: &'a [u8],
}

/// What [`QuantizedFile::validate`] found for one quantized tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedTensorInfo {
    /// `P` of `P.qweight` / `P.scales`.
    pub prefix: String,
    /// Its scheme.
    pub scheme: QScheme,
    /// Output features.
    pub n: usize,
    /// Input features.
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
///
/// The header is indexed once when the file is opened (the metadata map, the
/// sorted tensor names, the quantized prefixes), so every look-up afterwards
/// is a hash look-up: `load` and `validate` take time linear in the file's
/// tensor count, not quadratic.
pub struct QuantizedFile {
    pub(crate) bytes: Arc<Bytes>,
    /// Opened by [`QuantizedFile::open_in_place`]: Q4 nibbles already
    /// biased, and `load` reads codes in place.
    pub(crate) in_place: bool,
    /// The Q4 prefixes a caller rearranged when the file was opened in
    /// place (`in_place.rs`): read with `load_arranged`, not `load`.
    pub(crate) arranged: HashSet<String>,
    /// Those of them whose grouped scales the caller rearranged too: read
    /// in place by `load_arranged`.
    pub(crate) arranged_scales: HashSet<String>,
    header_len: usize,
    metadata: Metadata,
    meta: HashMap<String, String>,
    names: Vec<String>,
    prefixes: Vec<String>,
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
    ///
    /// Only a regular file is opened: a directory, FIFO, socket or device is
    /// refused with [`FormatError::NotARegularFile`] (a FIFO is opened without
    /// blocking, so it cannot hang the caller).
    ///
    /// **While the file is mapped**, its bytes are read straight from the page
    /// cache: if another process truncates it meanwhile, touching the lost
    /// pages raises SIGBUS and ends the process (`docs/FORMAT.md`). Everything
    /// this type returns by value ([`QuantizedFile::load`],
    /// [`QuantizedFile::tensor_f32`]) is a copy, so a runtime is exposed only
    /// while it loads; [`QuantizedFile::raw`] borrows the map.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, FormatError> {
        Self::from_bytes_inner(crate::mapped::open(path.as_ref())?)
    }

    /// Parses a file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, FormatError> {
        Self::from_bytes_inner(Bytes::Owned(bytes))
    }

    pub(crate) fn from_bytes_inner(bytes: Bytes) -> Result<Self, FormatError> {
        let (header_len, metadata) = read_header(bytes.as_slice())?;
        // serde keeps the last of two equal keys: refuse them instead
        if let Some(header) = bytes.as_slice().get(8..8 + header_len) {
            if let Some(tensor) = duplicate_key(header) {
                return Err(FormatError::DuplicateTensor { tensor });
            }
        }
        let meta = metadata.metadata().clone().unwrap_or_default();
        if let Some(v) = meta.get(FORMAT_KEY) {
            if v != FORMAT_VERSION && v != FORMAT_VERSION_SIGNED_GROUP_SCALES {
                return Err(FormatError::UnknownFormatVersion { found: v.clone() });
            }
        }
        let mut names: Vec<String> = metadata.tensors().into_keys().collect();
        names.sort_unstable();
        let mut prefixes: Vec<String> = names
            .iter()
            .filter_map(|n| n.strip_suffix(".qweight").or_else(|| n.strip_suffix(".scales")))
            .chain(meta.keys().filter_map(|k| k.strip_suffix(".qscheme")))
            .map(String::from)
            .collect();
        prefixes.sort_unstable();
        prefixes.dedup();
        Ok(Self {
            bytes: Arc::new(bytes),
            in_place: false,
            arranged: HashSet::new(),
            arranged_scales: HashSet::new(),
            header_len,
            metadata,
            meta,
            names,
            prefixes,
        })
    }

    /// The `__metadata__` map (empty if the file has none).
    pub fn metadata_map(&self) -> &HashMap<String, String> {
        &self.meta
    }

    /// Every tensor name, sorted.
    pub fn tensor_names(&self) -> &[String] {
        &self.names
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
    pub fn quantized_prefixes(&self) -> &[String] {
        &self.prefixes
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
    /// them, scales finite and `>= 0` (q4g scales of either sign in a
    /// version 2 file), Q8 codes never -128, the odd-K pad nibble 0.
    /// Two's-complement nibbles become biased ones.
    ///
    /// Errors also: [`FormatError::Arranged`] for a tensor whose codes were
    /// rearranged when the file was opened
    /// ([`QuantizedFile::load_arranged`] reads it).
    pub fn load(&self, prefix: &str) -> Result<QuantizedWeight, FormatError> {
        if self.is_arranged(prefix) {
            return Err(FormatError::Arranged {
                tensor: format!("{prefix}.qweight"),
            });
        }
        self.load_checked(prefix)
    }

    /// [`QuantizedFile::load`] whatever the order of the codes (the checks
    /// do not depend on it for an even K, the only one arranged).
    pub(crate) fn load_checked(&self, prefix: &str) -> Result<QuantizedWeight, FormatError> {
        let meta = &self.meta;
        let tensor = format!("{prefix}.qweight");
        if !meta.contains_key(FORMAT_KEY) {
            return Err(FormatError::NotQuantizedFile { tensor });
        }
        let qweight = self.require(prefix, "qweight", "scales")?;
        let scales = self.require(prefix, "scales", "qweight")?;
        let (scheme, k) = self.scheme_and_k(prefix, &tensor)?;
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
                let codes = if self.in_place {
                    self.shared(&tensor, qweight.data)?
                } else {
                    Codes::<u8>::copied(qweight.data).cast()
                };
                QuantizedWeight::Q8(QuantizedMatrix::from_codes(n, k, codes, f32s(scales.data)).map_err(blame)?)
            }
            QScheme::Q4 | QScheme::Q4Grouped(_) => {
                let s = match scheme {
                    QScheme::Q4Grouped(group) => Q4Scales::Grouped {
                        group,
                        scales: f16s(scales.data),
                    },
                    _ => Q4Scales::PerChannel(f32s(scales.data)),
                };
                let w = if self.in_place {
                    // the nibbles were made biased when the file was opened;
                    // a bad pad nibble is reported as the file stores it
                    let packed = self.shared(&tensor, qweight.data)?;
                    QuantizedMatrixQ4::from_codes_biased(n, k, packed, s)
                        .map_err(RecipeError::pad_nibble_as_twos_complement)
                } else {
                    QuantizedMatrixQ4::from_twos_complement(n, k, qweight.data, s)
                }
                .map_err(blame)?;
                // version 1 promises scales >= 0 (docs/FORMAT.md, "Versions")
                if meta.get(FORMAT_KEY).map(String::as_str) == Some(FORMAT_VERSION) {
                    if let Some((row, group, value)) = w.negative_group_scale() {
                        return Err(FormatError::NegativeScaleInVersion1 {
                            tensor: scales_name,
                            row,
                            group,
                            value,
                        });
                    }
                }
                QuantizedWeight::Q4(w)
            }
        })
    }

    /// The scheme and K that the metadata gives the quantized tensor
    /// `prefix` (`tensor`, its `qweight`, for the errors).
    fn scheme_and_k(&self, prefix: &str, tensor: &str) -> Result<(QScheme, usize), FormatError> {
        let get = |key: String| {
            self.meta.get(&key).cloned().ok_or(FormatError::MissingMetadata {
                tensor: tensor.into(),
                key,
            })
        };
        let scheme_text = get(qscheme_key(prefix))?;
        let scheme: QScheme = scheme_text.parse().map_err(|_| FormatError::UnknownScheme {
            tensor: tensor.into(),
            scheme: scheme_text,
        })?;
        let k_text = get(in_features_key(prefix))?;
        let k: usize = k_text
            .parse()
            .ok()
            .filter(|_| k_text.bytes().all(|b| b.is_ascii_digit()))
            .ok_or(FormatError::BadInFeatures {
                tensor: tensor.into(),
                value: k_text,
            })?;
        Ok((scheme, k))
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
        self.prefixes
            .iter()
            .map(|prefix| {
                let prefix = prefix.clone();
                let r = self.load_checked(&prefix).map(|t| {
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

/// The safetensors header's length and metadata. A GGUF file is named as
/// such: its magic read as a header length is over 1.1 GB, which the
/// `safetensors` crate refuses as "header too large" (no valid file starts
/// so), a message that says nothing of what the file is.
/// The largest header [`QuantizedFile::header_metadata_of`] reads: the
/// `safetensors` crate's own limit.
const HEADER_METADATA_LIMIT: u64 = 100_000_000;

impl QuantizedFile {
    /// The `__metadata__` map of a safetensors file from its first bytes
    /// alone (`bytes` holds at least the 8-byte length and the header; the
    /// tensors' data need not follow): for a caller that needs the metadata
    /// before the file is parsed whole or rewritten (`qlinear::ModelFile`
    /// reads its census so, before it arranges codes in place). `None`
    /// where the bytes hold no such header: parsing the file whole reports
    /// what is wrong.
    pub fn header_metadata(bytes: &[u8]) -> Option<HashMap<String, String>> {
        let len = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
        if len > HEADER_METADATA_LIMIT {
            return None;
        }
        let header = bytes.get(8..8 + usize::try_from(len).ok()?)?;
        let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(header).ok()?;
        match header.get("__metadata__") {
            None => Some(HashMap::new()),
            Some(serde_json::Value::Object(m)) => m
                .iter()
                .map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect(),
            Some(_) => None,
        }
    }

    /// [`QuantizedFile::header_metadata`] of the file at `path`, reading
    /// only its header.
    pub fn header_metadata_of(path: impl AsRef<Path>) -> Option<HashMap<String, String>> {
        use std::io::Read;
        let mut file = std::fs::File::open(path).ok()?;
        let mut len = [0u8; 8];
        file.read_exact(&mut len).ok()?;
        let n = u64::from_le_bytes(len);
        if n > HEADER_METADATA_LIMIT {
            return None;
        }
        let mut bytes = len.to_vec();
        file.take(n).read_to_end(&mut bytes).ok()?;
        Self::header_metadata(&bytes)
    }
}

pub(crate) fn read_header(bytes: &[u8]) -> Result<(usize, Metadata), FormatError> {
    if crate::gguf::is_gguf(bytes) {
        return Err(FormatError::GgufNotSafetensors);
    }
    SafeTensors::read_metadata(bytes).map_err(|e| truncation(bytes).unwrap_or(FormatError::Header(e)))
}

/// A safetensors file cut short, as [`FormatError::Truncated`]: the
/// header's length field points past the end, or the header parses and
/// its tensors' last byte is past the end. `None` for any other fault
/// (the `safetensors` crate's own message stands).
fn truncation(bytes: &[u8]) -> Option<FormatError> {
    let found = bytes.len() as u64;
    let header_len = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let header_end = header_len.checked_add(8)?;
    let Some(header) = bytes.get(8..usize::try_from(header_end).ok()?) else {
        // a length past the largest header the crate reads is not a cut
        return (header_len <= 100_000_000).then_some(FormatError::Truncated {
            what: " itself",
            needed: header_end,
            found,
        });
    };
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(header).ok()?;
    let data_end = header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .filter_map(|(_, v)| v.get("data_offsets")?.get(1)?.as_u64())
        .max()?;
    let needed = header_end.checked_add(data_end)?;
    (needed > found).then_some(FormatError::Truncated {
        what: "",
        needed,
        found,
    })
}

/// The first top-level key of a safetensors header that appears twice, if any.
fn duplicate_key(header: &[u8]) -> Option<String> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                map.next_value::<IgnoredAny>()?;
                if !seen.insert(key.clone()) {
                    return Ok(Some(key));
                }
            }
            Ok(None)
        }
    }
    let header = std::str::from_utf8(header).ok()?.trim_end();
    serde_json::Deserializer::from_str(header)
        .deserialize_map(Keys)
        .ok()
        .flatten()
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
