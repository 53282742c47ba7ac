use crate::{Int8Tier, KernelFamily, QuantLinearMode};

/// Every way a dispatch call can refuse its arguments or its environment.
/// Shape and argument errors are detected before any read; outputs are left
/// untouched.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// A buffer whose length does not match the shape.
    #[error("{what}: expected {expected} elements, got {actual}")]
    Shape {
        what: &'static str,
        expected: usize,
        actual: usize,
    },
    /// K beyond the bound proven to fit i32 for an integer family.
    #[error("{family}: K = {k} exceeds the largest K whose exact i32 reduction is proven, {max}")]
    KTooLarge { family: KernelFamily, k: usize, max: usize },
    /// An activation code of -128 passed to a pre-quantized API.
    #[error("activation code -128 at row {row}, column {col}: int8 codes must be in [-127, 127]")]
    ActivationCodeOutOfRange { row: usize, col: usize },
    /// A negative or non-finite activation scale passed to a pre-quantized API.
    #[error("activation scale {value} of row {row} must be finite and >= 0")]
    InvalidActivationScale { row: usize, value: f32 },
    /// A NaN or ±Inf activation.
    #[error("non-finite activation {value} at row {row}, column {col}")]
    NonFiniteActivation { row: usize, col: usize, value: f32 },
    /// A packed Q4 row passed directly whose odd-K pad nibble is not the biased zero 8.
    #[error("packed Q4 row: pad nibble {nibble:#x} must be 0x8 (the biased zero) for odd K = {k}")]
    BadPadNibble { k: usize, nibble: u8 },
    /// A tier name that is not one of [`Int8Tier`]'s.
    #[error("unknown int8 tier {name:?}; valid tiers: {valid}")]
    UnknownTier { name: String, valid: String },
    /// A tier that is not compiled in, whose CPU feature is absent, or that failed its proof.
    #[error("int8 tier {tier} is not dispatchable: {reason}; dispatchable tiers here: {valid}")]
    TierUnavailable {
        tier: Int8Tier,
        reason: String,
        valid: String,
    },
    /// A `QLINEAR_QUANT_MODE` value that is not a mode.
    #[error("unknown quant mode {value:?}; valid modes: w8a8, w4a8, w8a16, w4a16")]
    UnknownMode { value: String },
    /// A weight whose scheme does not fit the mode (e.g. a Q4 matrix in W8A8).
    #[error("quant mode {mode} needs {needs} weights, got {got}")]
    ModeWeightMismatch {
        mode: QuantLinearMode,
        needs: &'static str,
        got: &'static str,
    },
}
