use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::Path;

use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::Dtype;

use crate::{in_features_key, qscheme_key, FormatError, QuantizedWeight, FORMAT_KEY};

/// One tensor of a file to be written: its name, dtype and shape (the bytes
/// come later, from the producer of [`write_streaming`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorPlan {
    /// The tensor's name.
    pub name: String,
    /// Its dtype.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: Vec<usize>,
}

impl TensorPlan {
    /// The tensor's size in bytes: the shape's product times the element
    /// size, checked. [`FormatError::TooLarge`] (naming the tensor) when it
    /// does not fit in `usize`.
    pub fn byte_len(&self) -> Result<usize, FormatError> {
        let too_large = || FormatError::TooLarge {
            tensor: self.name.clone(),
            what: format!("shape {:?} of {:?}", self.shape, self.dtype),
        };
        let elems = self
            .shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(too_large)?;
        elems
            .checked_mul(self.dtype.bitsize())
            .map(|bits| bits / 8)
            .ok_or_else(too_large)
    }
}

/// The safetensors header of `plans` (in their order) and `metadata`, padded
/// to a multiple of 8, and each tensor's byte length. The JSON is written
/// with sorted metadata keys and the tensors in plan order, so the same
/// input gives the same bytes on every run.
fn header(metadata: &HashMap<String, String>, plans: &[TensorPlan]) -> Result<(Vec<u8>, Vec<usize>), FormatError> {
    let lens: Vec<usize> = plans.iter().map(TensorPlan::byte_len).collect::<Result<_, _>>()?;
    let mut offset = 0usize;
    let mut infos = Vec::with_capacity(plans.len());
    for (p, &len) in plans.iter().zip(&lens) {
        let start = offset;
        offset = offset.checked_add(len).ok_or_else(|| FormatError::TooLarge {
            tensor: p.name.clone(),
            what: "the file's total size".into(),
        })?;
        infos.push((
            p.name.clone(),
            TensorInfo {
                dtype: p.dtype,
                shape: p.shape.clone(),
                data_offsets: (start, offset),
            },
        ));
    }
    // the safetensors crate checks names, shapes and offsets for us
    let checked = Metadata::new(Some(metadata.clone()), infos)?;
    let json_err = |e: serde_json::Error| FormatError::Unsupported {
        tensor: "__metadata__".into(),
        reason: e.to_string(),
    };
    let mut object = serde_json::Map::new();
    if !metadata.is_empty() {
        let sorted: std::collections::BTreeMap<&String, &String> = metadata.iter().collect();
        object.insert("__metadata__".into(), serde_json::to_value(sorted).map_err(json_err)?);
    }
    for (name, info) in checked
        .tensors()
        .into_iter()
        .collect::<std::collections::BTreeMap<_, _>>()
    {
        object.insert(
            name,
            serde_json::json!({
                "dtype": serde_json::to_value(info.dtype).map_err(json_err)?,
                "shape": info.shape,
                "data_offsets": [info.data_offsets.0, info.data_offsets.1],
            }),
        );
    }
    let mut bytes = serde_json::to_vec(&object).map_err(json_err)?;
    bytes.resize(bytes.len().next_multiple_of(8), b' ');
    Ok((bytes, lens))
}

/// Writes a whole safetensors file to `out`: the header of `plans`, then
/// `produce(i, out)` for each plan in order, which must write exactly the
/// plan's byte length. No file is involved: this is the streaming core of
/// [`write_streaming`], usable on any writer (a `Vec<u8>` in tests and fuzzing).
pub fn write_to(
    out: &mut dyn Write,
    metadata: &HashMap<String, String>,
    plans: &[TensorPlan],
    mut produce: impl FnMut(usize, &mut dyn Write) -> Result<(), FormatError>,
    io: &dyn Fn(std::io::Error) -> FormatError,
) -> Result<(), FormatError> {
    let (header, lens) = header(metadata, plans)?;
    out.write_all(&(header.len() as u64).to_le_bytes()).map_err(io)?;
    out.write_all(&header).map_err(io)?;
    for (i, (plan, &len)) in plans.iter().zip(&lens).enumerate() {
        let mut counted = Counted {
            inner: &mut *out,
            written: 0,
        };
        produce(i, &mut counted)?;
        if counted.written != len {
            return Err(FormatError::Unsupported {
                tensor: plan.name.clone(),
                reason: format!("producer wrote {} bytes, the header says {len}", counted.written),
            });
        }
    }
    out.flush().map_err(io)
}

/// Writes a safetensors file tensor by tensor, in the order of `plans`: the
/// header is computed from the plans, then `produce(i, out)` writes the bytes
/// of `plans[i]`. Memory holds one tensor at a time at most.
///
/// What reaches `path` is complete, durable and valid, or nothing:
/// * an existing `path` that is not a regular file (a directory, device,
///   FIFO, socket or symbolic link) is refused before anything is written;
/// * the bytes go to a temporary file `.NAME.qlinear-partial-PID-N` beside
///   `path`, created with the process umask (or, when `path` exists, given
///   its mode), then fsynced;
/// * the temporary file is read back and every quantized tensor in it is
///   validated by [`crate::QuantizedFile`]: qlinear never emits a file its
///   own reader rejects;
/// * it is renamed over `path` and the directory is fsynced.
///
/// On any error the temporary file is removed and `path` is untouched. A
/// failure to create, write or rename the temporary file is
/// [`FormatError::Output`], which names `path` and what failed (a missing
/// or read-only folder, a full disk), not the temporary file's name.
/// Partial files that an earlier, dead qlinear process left for the same
/// `path` are removed first.
pub fn write_streaming(
    path: &Path,
    metadata: HashMap<String, String>,
    plans: &[TensorPlan],
    produce: impl FnMut(usize, &mut dyn Write) -> Result<(), FormatError>,
) -> Result<(), FormatError> {
    let existing = check_destination(path)?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| FormatError::io(path, std::io::Error::other("the output path names no file")))?
        .to_string_lossy()
        .into_owned();
    remove_stale_partials(dir, &name);
    // errors name the output, not the temporary file the user never named
    let failed = |doing: String| {
        move |source| FormatError::Output {
            path: path.to_path_buf(),
            doing,
            source,
        }
    };
    let (file, temp) =
        create_partial(dir, &name).map_err(failed(format!("cannot create a file in its folder {}", dir.display())))?;
    let guard = RemoveOnDrop(Some(temp.clone()));
    {
        let io = |e| failed("writing it".into())(e);
        let mut out = BufWriter::with_capacity(1 << 20, &file);
        write_to(&mut out, &metadata, plans, produce, &io)?;
        drop(out);
        if let Some(mode) = existing {
            file.set_permissions(mode).map_err(io)?;
        }
        file.sync_all().map_err(io)?;
    }
    drop(file);
    let written = crate::QuantizedFile::open(&temp)?;
    for (_, result) in written.validate() {
        result?;
    }
    drop(written);
    std::fs::rename(&temp, path).map_err(failed("moving it into place".into()))?;
    std::mem::forget(guard);
    // the rename is durable once the directory is
    #[cfg(unix)]
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| FormatError::io(dir, e))?;
    Ok(())
}

/// An existing destination must be a regular file (not a link to one): its
/// permissions are kept. `None` when it does not exist.
fn check_destination(path: &Path) -> Result<Option<std::fs::Permissions>, FormatError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => Ok(Some(m.permissions())),
        Ok(m) => Err(FormatError::BadDestination {
            path: path.to_path_buf(),
            kind: if m.file_type().is_symlink() {
                "a symbolic link (give the path it points to)"
            } else if m.is_dir() {
                "a directory"
            } else {
                "not a regular file (a device, FIFO or socket)"
            },
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FormatError::io(path, e)),
    }
}

fn partial_prefix(name: &str) -> String {
    format!(".{name}.qlinear-partial-")
}

/// Creates `.NAME.qlinear-partial-PID-N` exclusively (mode 0666 less the umask).
fn create_partial(dir: &Path, name: &str) -> std::io::Result<(std::fs::File, std::path::PathBuf)> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    loop {
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // WASI has no process ids (std::process::id panics there)
        let pid = if cfg!(target_family = "wasm") {
            0
        } else {
            std::process::id()
        };
        let temp = dir.join(format!("{}{pid}-{n}", partial_prefix(name)));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(f) => return Ok((f, temp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Removes `.NAME.qlinear-partial-PID-N` files whose process is gone (Linux:
/// no `/proc/PID`); a live process's partial file is left alone. Best effort:
/// a partial file that cannot be removed is left where it is.
fn remove_stale_partials(dir: &Path, name: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let prefix = partial_prefix(name);
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(rest) = file.to_str().and_then(|f| f.strip_prefix(&prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().filter(|p| p.bytes().all(|b| b.is_ascii_digit())) else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() && entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

struct RemoveOnDrop(Option<std::path::PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

struct Counted<'a, W: Write + ?Sized> {
    inner: &'a mut W,
    written: usize,
}

impl<W: Write + ?Sized> Write for Counted<'_, W> {
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
    Quantized {
        /// `P`: the tensors become `P.qweight` and `P.scales`.
        prefix: String,
        /// The weight.
        tensor: QuantizedWeight,
    },
    /// Any other tensor, copied as it is.
    Raw {
        /// The tensor's name.
        name: String,
        /// Its dtype.
        dtype: Dtype,
        /// Its shape.
        shape: Vec<usize>,
        /// Its bytes, little-endian, row-major: exactly `shape`'s product times the dtype's size.
        data: Cow<'a, [u8]>,
    },
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
/// `metadata` kept and the qlinear keys added (`qlinear.format`: `"2"` when
/// a q4g tensor holds a negative scale, else `"1"`; and per
/// quantized tensor `P.qscheme`, `P.in_features`). Tensors are written in
/// name order (so each `P.qweight` sits next to its `P.scales`); the write goes
/// through a temporary file renamed at the end.
pub fn write_file(
    path: &Path,
    metadata: &HashMap<String, String>,
    tensors: Vec<OutputTensor<'_>>,
) -> Result<(), FormatError> {
    let mut meta = metadata.clone();
    let negative = tensors.iter().any(|t| {
        matches!(t, OutputTensor::Quantized { tensor: QuantizedWeight::Q4(w), .. } if w.negative_group_scale().is_some())
    });
    meta.insert(FORMAT_KEY.into(), crate::format_version(negative).into());
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
                for (plan, bytes) in plans.into_iter().zip(crate::encode::quantized(&tensor)) {
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
