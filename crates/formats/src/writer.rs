use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::Path;

use half::f16;
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrix, QuantizedMatrixQ4};
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::Dtype;

use crate::{in_features_key, qscheme_key, FormatError, QuantizedWeight, FORMAT_KEY, FORMAT_VERSION};

/// One tensor of a file to be written: its name, dtype and shape (the bytes
/// come later, from the producer of [`write_streaming`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorPlan {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
}

impl TensorPlan {
    /// The tensor's size in bytes.
    pub fn byte_len(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.bitsize() / 8
    }
}

/// Writes a safetensors file tensor by tensor, in the order of `plans`:
/// the header is computed from the plans, then `produce(i, out)` writes the
/// bytes of `plans[i]`. The file is written to a temporary file beside `path`
/// and renamed at the end, so a failed or interrupted write never leaves
/// `path` behind or half-written. Memory holds one tensor at a time at most.
pub fn write_streaming(
    path: &Path,
    metadata: HashMap<String, String>,
    plans: &[TensorPlan],
    mut produce: impl FnMut(usize, &mut dyn Write) -> Result<(), FormatError>,
) -> Result<(), FormatError> {
    let mut offset = 0usize;
    let infos: Vec<(String, TensorInfo)> = plans
        .iter()
        .map(|p| {
            let start = offset;
            offset += p.byte_len();
            (
                p.name.clone(),
                TensorInfo {
                    dtype: p.dtype,
                    shape: p.shape.clone(),
                    data_offsets: (start, offset),
                },
            )
        })
        .collect();
    let meta = Metadata::new(Some(metadata), infos)?;
    let mut header = serde_json::to_string(&meta)
        .map_err(|e| FormatError::Unsupported {
            tensor: "__metadata__".into(),
            reason: e.to_string(),
        })?
        .into_bytes();
    header.resize(header.len().next_multiple_of(8), b' ');

    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let temp = tempfile::Builder::new()
        .prefix(".qlinear-partial-")
        .tempfile_in(dir)
        .map_err(|e| FormatError::io(dir, e))?;
    {
        let mut out = BufWriter::with_capacity(1 << 20, temp.as_file());
        let io = |e| FormatError::io(temp.path(), e);
        out.write_all(&(header.len() as u64).to_le_bytes()).map_err(io)?;
        out.write_all(&header).map_err(io)?;
        for (i, plan) in plans.iter().enumerate() {
            let mut counted = Counted {
                inner: &mut out,
                written: 0,
            };
            produce(i, &mut counted)?;
            if counted.written != plan.byte_len() {
                return Err(FormatError::Unsupported {
                    tensor: plan.name.clone(),
                    reason: format!(
                        "producer wrote {} bytes, the header says {}",
                        counted.written,
                        plan.byte_len()
                    ),
                });
            }
        }
        out.flush().map_err(io)?;
    }
    // the temporary file is created private (0600); the result is an ordinary file
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let io = |e| FormatError::io(temp.path(), e);
        temp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(io)?;
    }
    temp.persist(path).map_err(|e| FormatError::io(path, e.error))?;
    Ok(())
}

struct Counted<'a, W: Write> {
    inner: &'a mut W,
    written: usize,
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A tensor to write with [`write_file`].
#[derive(Debug, Clone)]
pub enum OutputTensor<'a> {
    /// A quantized weight, written as `prefix.qweight` and `prefix.scales`
    /// with its `prefix.qscheme` and `prefix.in_features` metadata.
    Quantized { prefix: String, tensor: QuantizedWeight },
    /// Any other tensor, copied as it is.
    Raw {
        name: String,
        dtype: Dtype,
        shape: Vec<usize>,
        data: Cow<'a, [u8]>,
    },
}

/// The on-disk bytes of a quantized tensor: `[qweight, scales]`.
pub(crate) fn quantized_bytes(t: &QuantizedWeight) -> [Vec<u8>; 2] {
    match t {
        QuantizedWeight::Q8(m) => [q8_codes_bytes(m), f32_bytes(m.scales())],
        QuantizedWeight::Q4(m) => {
            let scales = match m.scales() {
                Q4Scales::PerChannel(s) => f32_bytes(s),
                Q4Scales::Grouped { scales, .. } => f16_bytes(scales),
            };
            [q4_bytes(m), scales]
        }
    }
}

fn q8_codes_bytes(m: &QuantizedMatrix) -> Vec<u8> {
    m.codes().iter().map(|&c| c as u8).collect()
}
fn q4_bytes(m: &QuantizedMatrixQ4) -> Vec<u8> {
    m.to_twos_complement()
}
pub(crate) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|s| s.to_le_bytes()).collect()
}
pub(crate) fn f16_bytes(v: &[f16]) -> Vec<u8> {
    v.iter().flat_map(|s| s.to_bits().to_le_bytes()).collect()
}

/// The plans and metadata entries of a quantized tensor `prefix`.
pub(crate) fn quantized_plans(prefix: &str, t: &QuantizedWeight) -> ([TensorPlan; 2], [(String, String); 2]) {
    let (n, k) = t.shape();
    TensorPlan::quantized(t.scheme(), prefix, n, k)
}

impl TensorPlan {
    /// The `P.qweight` and `P.scales` plans of an `[n, k]` weight with prefix
    /// `P` stored in `scheme`, and its two metadata entries (`P.qscheme`,
    /// `P.in_features`).
    pub fn quantized(
        scheme: crate::QScheme,
        prefix: &str,
        n: usize,
        k: usize,
    ) -> ([TensorPlan; 2], [(String, String); 2]) {
        let [qs, ss] = scheme.shapes(n, k);
        let (qd, sd) = match scheme {
            crate::QScheme::Q8 => (Dtype::I8, Dtype::F32),
            crate::QScheme::Q4 => (Dtype::U8, Dtype::F32),
            crate::QScheme::Q4Grouped(_) => (Dtype::U8, Dtype::F16),
        };
        (
            [
                TensorPlan {
                    name: format!("{prefix}.qweight"),
                    dtype: qd,
                    shape: qs,
                },
                TensorPlan {
                    name: format!("{prefix}.scales"),
                    dtype: sd,
                    shape: ss,
                },
            ],
            [
                (qscheme_key(prefix), scheme.to_string()),
                (in_features_key(prefix), k.to_string()),
            ],
        )
    }
}

/// Writes quantized and raw tensors to one safetensors file at `path`, with
/// `metadata` kept and the qlinear keys added (`qlinear.format`, and per
/// quantized tensor `P.qscheme`, `P.in_features`). Tensors are written in
/// name order (so each `P.qweight` sits next to its `P.scales`); the write goes
/// through a temporary file renamed at the end.
pub fn write_file(
    path: &Path,
    metadata: &HashMap<String, String>,
    tensors: Vec<OutputTensor<'_>>,
) -> Result<(), FormatError> {
    let mut meta = metadata.clone();
    meta.insert(FORMAT_KEY.into(), FORMAT_VERSION.into());
    let mut entries: Vec<(TensorPlan, Cow<'_, [u8]>)> = Vec::new();
    for t in tensors {
        match t {
            OutputTensor::Raw {
                name,
                dtype,
                shape,
                data,
            } => entries.push((TensorPlan { name, dtype, shape }, data)),
            OutputTensor::Quantized { prefix, tensor } => {
                let (plans, keys) = quantized_plans(&prefix, &tensor);
                meta.extend(keys);
                for (plan, bytes) in plans.into_iter().zip(quantized_bytes(&tensor)) {
                    entries.push((plan, Cow::Owned(bytes)));
                }
            }
        }
    }
    entries.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    let plans: Vec<TensorPlan> = entries.iter().map(|e| e.0.clone()).collect();
    write_streaming(path, meta, &plans, |i, out| {
        out.write_all(&entries[i].1).map_err(|e| FormatError::io(path, e))
    })
}
