use std::path::PathBuf;

use qlinear_quant_recipe::RecipeError;

/// Everything that can be wrong with a quantized safetensors file, or with
/// writing one. Each variant names the tensor (or path) at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The input is a directory, FIFO, socket or device: refused before it is read.
    #[error("{path}: is {kind}, not a regular file")]
    NotARegularFile {
        /// The path given.
        path: PathBuf,
        /// What it is instead (`"a directory"`, `"a FIFO"`, …).
        kind: &'static str,
    },
    /// The output path exists and is not a regular file: never replaced.
    #[error("{path}: the output exists and is {kind}; it is left as it is")]
    BadDestination {
        /// The output path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// The output could not be written: its folder is missing or refuses a
    /// new file, or a write failed (a full disk). The output path is as it
    /// was and no temporary file is left.
    #[error("{path}: {doing}: {source}; nothing was written")]
    Output {
        /// The output path.
        path: PathBuf,
        /// What failed (`"cannot create a file in its folder nodir"`, …).
        doing: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A GGUF file where a safetensors file was expected: `GgufFile` reads
    /// it, and `qlinear convert` turns it into a qlinear file.
    #[error("a GGUF file, where a safetensors file is expected (`qlinear convert` turns a GGUF model into one)")]
    GgufNotSafetensors,
    /// The header names a tensor twice.
    #[error("{tensor}: the header names this tensor twice")]
    DuplicateTensor {
        /// The name.
        tensor: String,
    },
    /// A size computed from a header does not fit this machine's `usize`
    /// or memory; nothing was allocated for it.
    #[error("{tensor}: {what} is too large for this machine")]
    TooLarge {
        /// The tensor.
        tensor: String,
        /// Which size (a shape, a byte length).
        what: String,
    },
    /// The file ends before its header, or before the tensors its header
    /// lays out: a file cut short (an interrupted copy or download).
    #[error("the file is {found} bytes, but its header{what} ends at byte {needed}: it is cut short")]
    Truncated {
        /// `""` when the tensors' data is cut, `" itself"` when the header is.
        what: &'static str,
        /// The length the header implies.
        needed: u64,
        /// The file's length.
        found: u64,
    },
    /// The file ended before the length it had when it was opened: another
    /// process truncated it while it was read.
    #[error("{}: the file shrank while it was read: it ended after {found} of its {expected} bytes", path.display())]
    ShrankWhileRead {
        /// The file.
        path: std::path::PathBuf,
        /// Its length when it was opened.
        expected: u64,
        /// The bytes read before it ended.
        found: u64,
    },
    /// The file is larger than the memory this process can still be given
    /// (`qlinear_formats::available_memory`): refused before it is read.
    #[error(
        "{}: the file is {} ({size} bytes), more than the {} ({available} bytes) of memory this process can \
         still be given (MemAvailable and SwapFree, within its cgroup's limit): it is not loaded",
        path.display(),
        mib(*size),
        mib(*available)
    )]
    LargerThanMemory {
        /// The file.
        path: std::path::PathBuf,
        /// Its length.
        size: u64,
        /// The memory available, in bytes.
        available: u64,
    },
    /// The `safetensors` crate refused the header or the layout.
    #[error("malformed safetensors file: {0}")]
    Header(#[from] safetensors::SafeTensorError),
    /// `qlinear.format` is neither `"1"` nor `"2"`.
    #[error("unknown qlinear format version {found:?} (this reader knows \"1\" and \"2\")")]
    UnknownFormatVersion {
        /// The version found.
        found: String,
    },
    /// A quantized tensor was asked of a file without `qlinear.format`.
    #[error("{tensor}: the file has no qlinear.format metadata, so it holds no qlinear tensors")]
    NotQuantizedFile {
        /// The tensor asked for.
        tensor: String,
    },
    /// [`crate::QuantizedFile::load`] was asked for a tensor whose codes
    /// were rearranged when the file was opened.
    #[error("{tensor}: its codes were rearranged when the file was opened in place; read it with load_arranged")]
    Arranged {
        /// The tensor asked for (its `qweight`).
        tensor: String,
    },
    /// [`crate::QuantizedFile::load_arranged`] was asked for a tensor whose
    /// codes are in the natural order.
    #[error("{tensor}: its codes were not rearranged when the file was opened; read it with load")]
    NotArranged {
        /// The tensor asked for (its `qweight`).
        tensor: String,
    },
    /// The tensor does not exist.
    #[error("{tensor}: no such tensor")]
    MissingTensor {
        /// The name asked for.
        tensor: String,
    },
    /// `P.qweight` without `P.scales`, or the reverse.
    #[error("{tensor}: its partner tensor {missing} is missing")]
    MissingPartner {
        /// The tensor present.
        tensor: String,
        /// The one missing.
        missing: String,
    },
    /// `P.qscheme` or `P.in_features` is missing.
    #[error("{tensor}: metadata key {key} is missing")]
    MissingMetadata {
        /// The quantized tensor.
        tensor: String,
        /// The key missing.
        key: String,
    },
    /// `P.qscheme` is not a scheme.
    #[error("{tensor}: unknown quantization scheme {scheme:?} (expected q8, q4 or q4g<G> with G even and > 0)")]
    UnknownScheme {
        /// The quantized tensor.
        tensor: String,
        /// The text found.
        scheme: String,
    },
    /// `P.in_features` is not a decimal number.
    #[error("{tensor}: in_features {value:?} is not a decimal K")]
    BadInFeatures {
        /// The quantized tensor.
        tensor: String,
        /// The text found.
        value: String,
    },
    /// A tensor's dtype does not fit its scheme (or is not a float, for `tensor_f32`).
    #[error("{tensor}: dtype {found} where the scheme needs {expected}")]
    Dtype {
        /// The tensor.
        tensor: String,
        /// What it must be.
        expected: &'static str,
        /// What it is.
        found: String,
    },
    /// A tensor's shape does not fit its scheme and K.
    #[error("{tensor}: shape {found:?} where the scheme and K need {expected:?}")]
    Shape {
        /// The tensor.
        tensor: String,
        /// The shape the scheme and K need.
        expected: Vec<usize>,
        /// The shape found.
        found: Vec<usize>,
    },
    /// The tensor's values break the recipe's invariants (a Q8 code −128,
    /// a negative or non-finite scale, a pad nibble that is not zero).
    #[error("{tensor}: {source}")]
    Invalid {
        /// The tensor at fault.
        tensor: String,
        /// What is wrong, with row and column.
        source: RecipeError,
    },
    /// A file of format version 1 holds a negative q4g scale, which only
    /// version 2 allows (`docs/FORMAT.md`, "Versions").
    #[error(
        "{tensor}: row {row}, group {group} holds the negative scale {value}, which qlinear.format \"1\" does \
         not allow (a q4g file with negative scales says \"2\")"
    )]
    NegativeScaleInVersion1 {
        /// The scales tensor.
        tensor: String,
        /// The row.
        row: usize,
        /// The group within the row.
        group: usize,
        /// The scale.
        value: f32,
    },
    /// A file read as GGUF does not start with the GGUF magic.
    #[error("not a GGUF file (it does not start with the bytes \"GGUF\")")]
    NotGguf,
    /// A GGUF file's header is malformed or lies: `at` names the metadata
    /// key, the tensor or the part of the header at fault.
    #[error("GGUF {at}: {reason}")]
    Gguf {
        /// The key, tensor or header part at fault.
        at: String,
        /// What is wrong, with the numbers that show it.
        reason: String,
    },
    /// Anything else a writer or producer refused, naming the tensor.
    #[error("{tensor}: {reason}")]
    Unsupported {
        /// The tensor.
        tensor: String,
        /// Why.
        reason: String,
    },
}

impl FormatError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FormatError::Io {
            path: path.into(),
            source,
        }
    }
}

/// `bytes` in MiB with one decimal, for messages.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}
