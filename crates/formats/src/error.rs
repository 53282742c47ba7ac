use std::path::PathBuf;

use qlinear_quant_recipe::RecipeError;

/// Everything that can be wrong with a quantized safetensors file, or with
/// writing one. Each variant names the tensor (or path) at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: is {kind}, not a regular file")]
    NotARegularFile { path: PathBuf, kind: &'static str },
    #[error("{path}: the output exists and is {kind}; it is left as it is")]
    BadDestination { path: PathBuf, kind: &'static str },
    #[error("{tensor}: the header names this tensor twice")]
    DuplicateTensor { tensor: String },
    #[error("{tensor}: {what} is too large for this machine")]
    TooLarge { tensor: String, what: String },
    #[error("malformed safetensors file: {0}")]
    Header(#[from] safetensors::SafeTensorError),
    #[error("unknown qlinear format version {found:?} (this reader knows \"1\")")]
    UnknownFormatVersion { found: String },
    #[error("{tensor}: the file has no qlinear.format metadata, so it holds no qlinear tensors")]
    NotQuantizedFile { tensor: String },
    #[error("{tensor}: no such tensor")]
    MissingTensor { tensor: String },
    #[error("{tensor}: its partner tensor {missing} is missing")]
    MissingPartner { tensor: String, missing: String },
    #[error("{tensor}: metadata key {key} is missing")]
    MissingMetadata { tensor: String, key: String },
    #[error("{tensor}: unknown quantization scheme {scheme:?} (expected q8, q4 or q4g<G> with G even and > 0)")]
    UnknownScheme { tensor: String, scheme: String },
    #[error("{tensor}: in_features {value:?} is not a decimal K")]
    BadInFeatures { tensor: String, value: String },
    #[error("{tensor}: dtype {found} where the scheme needs {expected}")]
    Dtype {
        tensor: String,
        expected: &'static str,
        found: String,
    },
    #[error("{tensor}: shape {found:?} where the scheme and K need {expected:?}")]
    Shape {
        tensor: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("{tensor}: {source}")]
    Invalid { tensor: String, source: RecipeError },
    #[error("{tensor}: {reason}")]
    Unsupported { tensor: String, reason: String },
}

impl FormatError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FormatError::Io {
            path: path.into(),
            source,
        }
    }
}
