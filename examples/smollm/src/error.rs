/// Everything that can go wrong loading or running the model; each message
/// names the tensor, key or limit at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read as a model.
    #[error(transparent)]
    Qlinear(#[from] qlinear::Error),
    /// A GGUF or safetensors file is malformed.
    #[error(transparent)]
    Format(#[from] qlinear::FormatError),
    /// The file's architecture is not Llama.
    #[error("general.architecture is {found:?}: qlinear-smollm runs Llama decoders (\"llama\")")]
    Architecture {
        /// What the file says.
        found: String,
    },
    /// A metadata key is missing or has the wrong type.
    #[error("metadata {key}: {reason}")]
    Metadata {
        /// The GGUF key (`llama.block_count`, …).
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor is missing or has the wrong shape.
    #[error("{tensor}: {reason}")]
    Tensor {
        /// The tensor.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// A model's modes (`W8A8,ffn_down=W8A16`) do not parse: the spec and
    /// the part at fault.
    #[error("modes {0}")]
    Modes(String),
    /// A KV cache type that does not parse (`--kv`): the name given.
    #[error("unknown KV cache type `{0}`: expected f32 or bf16")]
    KvPrecision(String),
    /// The prompt cannot run: empty, or longer than the context.
    #[error("prompt: {0}")]
    Prompt(String),
    /// The tokenizer could not be built or refused a text.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The chat template could not be rendered.
    #[error("chat template: {0}")]
    Template(String),
    /// Smoothing cannot run: no calibration statistics, a factor that is
    /// not finite and positive, or an `alpha` outside `[0, 1]`.
    #[error("smoothing: {0}")]
    Smooth(String),
    /// A model cannot be rotated or run rotated: a width with no Hadamard
    /// matrix here, a model rotated already or quantized, an unknown
    /// rotation in the metadata, or smoothing asked of a rotated model.
    #[error("rotation: {0}")]
    Rotation(String),
    /// The f32 path cannot hold a GGUF file's weights dequantized: they
    /// need more memory than the process can still be given (refused
    /// before any is allocated).
    #[error(
        "the f32 path needs {needed} bytes ({:.1} MiB) to hold this GGUF file's {elements} weights dequantized, more \
         than the {available} bytes ({:.1} MiB) of memory this process can still be given: convert the file \
         (`qlinear convert FILE OUT`) and run the converted one, whose codes stay quantized",
        *needed as f64 / 1048576.0,
        *available as f64 / 1048576.0
    )]
    F32TooLarge {
        /// The weights in the file's tensors (and, for a head tied to the
        /// embedding, its copy).
        elements: u64,
        /// Bytes they take in f32.
        needed: u64,
        /// Bytes the process can still be given.
        available: u64,
    },
    /// A thread of a decode step's team stopped because another thread of
    /// the step failed (that thread's error is the one reported).
    #[error("decode step: another thread of the team failed")]
    TeamAborted,
}

/// The crate's `Result`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
