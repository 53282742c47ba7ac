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
        /// Which buffer (and its shape, e.g. `"y [m, n]"`).
        what: &'static str,
        /// The length the shape needs.
        expected: usize,
        /// The length given.
        actual: usize,
    },
    /// A route over rows ([`crate::Route::over_rows`]) whose range is not
    /// within the matrix's output features.
    #[error("output rows {start}..{end} are not within the matrix's {n} output features")]
    RowsOutOfRange {
        /// The range's first row.
        start: usize,
        /// One past the range's last row.
        end: usize,
        /// The matrix's output features.
        n: usize,
    },
    /// Activation rows the kernel layer's builder refuses (a length or a sum
    /// group that does not fit the shape).
    #[error(transparent)]
    Activations(#[from] qlinear_kernels_core::KernelError),
    /// K beyond the bound proven to fit i32 for an integer family.
    #[error("{family}: K = {k} exceeds the largest K whose exact i32 reduction is proven, {max}")]
    KTooLarge {
        /// The family whose bound it is.
        family: KernelFamily,
        /// The K (or group length) given.
        k: usize,
        /// The bound, `MAX_K_W8A8` or `MAX_K_W4A8` (`docs/NUMERICS.md` §2).
        max: usize,
    },
    /// An activation code of -128 passed to a pre-quantized API.
    #[error("activation code -128 at row {row}, column {col}: int8 codes must be in [-127, 127]")]
    ActivationCodeOutOfRange {
        /// The activation row.
        row: usize,
        /// The column.
        col: usize,
    },
    /// A negative or non-finite activation scale passed to a pre-quantized API.
    #[error("activation scale {value} of row {row} must be finite and >= 0")]
    InvalidActivationScale {
        /// The activation row.
        row: usize,
        /// The scale found.
        value: f32,
    },
    /// A NaN or ±Inf activation.
    #[error("non-finite activation {value} at row {row}, column {col}")]
    NonFiniteActivation {
        /// The activation row.
        row: usize,
        /// The column.
        col: usize,
        /// The value found (NaN or ±Inf).
        value: f32,
    },
    /// A packed Q4 row passed directly whose odd-K pad nibble is not the biased zero 8.
    #[error("packed Q4 row: pad nibble {nibble:#x} must be 0x8 (the biased zero) for odd K = {k}")]
    BadPadNibble {
        /// The row length (odd).
        k: usize,
        /// The pad nibble found.
        nibble: u8,
    },
    /// A tier name that is not one of [`Int8Tier`]'s.
    #[error("unknown int8 tier {name:?}; valid tiers: {valid}")]
    UnknownTier {
        /// The name given.
        name: String,
        /// Every tier name, comma separated.
        valid: String,
    },
    /// A tier that is not compiled in, whose CPU feature is absent, or that
    /// failed the proof of a kernel family asked of it.
    #[error("int8 tier {tier} is not dispatchable: {reason}; dispatchable tiers here: {valid}")]
    TierUnavailable {
        /// The tier asked for.
        tier: Int8Tier,
        /// Why it cannot run here.
        reason: String,
        /// The tiers that are dispatchable here, comma separated.
        valid: String,
    },
    /// A `QLINEAR_QUANT_MODE` value that is not a mode.
    #[error("unknown quant mode {value:?}; valid modes: w8a8, w4a8, w8a16, w4a16")]
    UnknownMode {
        /// The value given.
        value: String,
    },
    /// A weight whose scheme does not fit the mode (e.g. a Q4 matrix in W8A8).
    #[error("quant mode {mode} needs {needs} weights, got {got}")]
    ModeWeightMismatch {
        /// The mode asked for.
        mode: QuantLinearMode,
        /// The weight kind it runs, `"Q8"` or `"Q4"`.
        needs: &'static str,
        /// The weight kind given.
        got: &'static str,
    },
    /// A weight handed to a [`crate::LayerRoute`] resolved for another
    /// kernel family (a grouped weight on a per-channel route, say).
    #[error("the layer's route was resolved for {resolved}, but the weight needs {got}")]
    RouteWeightMismatch {
        /// The family the route was resolved for.
        resolved: crate::KernelFamily,
        /// The family the weight given needs.
        got: crate::KernelFamily,
    },
    /// A weight's panel form given to a route whose tier has no panel
    /// tiles for the family (or to a layer whose mode and family read no
    /// panel form: only W4A8, grouped by 32 or per channel, does).
    #[error("tier {tier} has no panel tiles for {family}")]
    NoPanelTiles {
        /// The tier of the route.
        tier: crate::Int8Tier,
        /// The family asked for: the panel form's, or the layer's.
        family: crate::KernelFamily,
    },
}
