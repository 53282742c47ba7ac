use qlinear_dispatch::{DispatchError, QuantLinearMode};
#[cfg(feature = "formats")]
use qlinear_formats::FormatError;
use qlinear_quant_recipe::{QScheme, RecipeError};

/// Every error of the facade: one type, so `?` works across recipes,
/// dispatch and files without boxing. Each message names the layer, tensor,
/// row, column or shape at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A recipe or matrix constructor refused its input.
    #[error(transparent)]
    Recipe(#[from] RecipeError),
    /// A kernel entry point refused its arguments or the environment.
    #[error(transparent)]
    Dispatch(#[from] DispatchError),
    /// A safetensors file is unreadable or inconsistent.
    #[cfg(feature = "formats")]
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A layer refused a forward call (shapes, non-finite activations, a K
    /// beyond the proven bound); nothing was written to the output.
    #[error("{layer}: {source}")]
    Forward {
        /// The layer's name (its tensor prefix, or what the caller named it).
        layer: String,
        /// What the kernel entry point said.
        source: DispatchError,
    },
    /// A mode that cannot run the layer's weight, refused when the layer is built.
    #[error("{layer}: mode {mode} needs {needs} weights, but the weight is {scheme}")]
    ModeMismatch {
        /// The layer's name.
        layer: String,
        /// The mode asked for.
        mode: QuantLinearMode,
        /// `"Q8"` or `"Q4"`.
        needs: &'static str,
        /// The weight's scheme.
        scheme: QScheme,
    },
    /// A bias whose length is not the layer's output features.
    #[error("{layer}: bias has {found} elements, the weight has {expected} output features")]
    BiasLength {
        /// The layer's name (for a file, the bias tensor's).
        layer: String,
        /// The weight's `n`.
        expected: usize,
        /// The bias length.
        found: usize,
    },
    /// A NaN or ±Inf bias element.
    #[error("{layer}: bias element {index} is {value}, not finite")]
    NonFiniteBias {
        /// The layer's name (for a file, the bias tensor's).
        layer: String,
        /// Position in the bias.
        index: usize,
        /// The value found.
        value: f32,
    },
    /// A float weight buffer whose length is not `n * k`.
    #[error("{layer}: weight has {found} elements, [{n}, {k}] needs {}", n.saturating_mul(*k))]
    WeightLength {
        /// The layer's name.
        layer: String,
        /// Output features.
        n: usize,
        /// Input features.
        k: usize,
        /// The buffer length.
        found: usize,
    },
}

/// The facade's `Result`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
