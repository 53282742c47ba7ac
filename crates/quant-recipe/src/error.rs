/// Every way a recipe, a matrix constructor or a layout check can refuse its input.
///
/// Row-level functions report `row: 0`; whole-matrix constructors report the
/// real row.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RecipeError {
    /// A NaN or ±Inf input value.
    #[error("non-finite value {value} at row {row}, column {col}")]
    NonFinite {
        /// The row (0 from a row-level function).
        row: usize,
        /// The column.
        col: usize,
        /// The value found (NaN or ±Inf).
        value: f32,
    },
    /// A buffer whose length does not match the shape.
    #[error("{what}: expected {expected} elements, got {actual}")]
    LengthMismatch {
        /// Which buffer.
        what: &'static str,
        /// The length the shape needs.
        expected: usize,
        /// The length given.
        actual: usize,
    },
    /// A row index at or past the matrix's rows.
    #[error("row {row} is out of range: the matrix has {rows} rows")]
    RowOutOfRange {
        /// The row asked for.
        row: usize,
        /// The matrix's rows.
        rows: usize,
    },
    /// `n * k` does not fit in memory arithmetic.
    #[error("shape [{n}, {k}] overflows usize")]
    ShapeOverflow {
        /// Rows.
        n: usize,
        /// Columns.
        k: usize,
    },
    /// A group size of zero.
    #[error("group size 0 is invalid: a group must hold at least two columns")]
    GroupZero,
    /// An odd group size (a group must be whole bytes of two nibbles).
    #[error("group size {group} is odd: a group must be whole bytes (an even number of columns)")]
    GroupOdd {
        /// The group size given.
        group: usize,
    },
    /// A group size that does not divide K.
    #[error("group size {group} does not divide K = {k}")]
    GroupNotDividing {
        /// The group size given.
        group: usize,
        /// The row length it must divide.
        k: usize,
    },
    /// `f16(max|w_g| / 7)` is infinite: the group cannot be stored with an f16 scale.
    #[error("f16 scale overflow at row {row}, group {group} (columns {col_start}..{col_end}): max |w| = {amax} gives a scale beyond f16's range")]
    ScaleOverflow {
        /// The row (0 from a row-level function).
        row: usize,
        /// The group index within the row.
        group: usize,
        /// First column of the group.
        col_start: usize,
        /// One past its last column.
        col_end: usize,
        /// The group's `max|w|`, whose `/ 7` exceeds f16's range.
        amax: f32,
    },
    /// A Q8 code of -128 in pre-quantized data (the recipe never emits it).
    #[error("Q8 code -128 at row {row}, column {col}: codes must be in [-127, 127]")]
    Q8CodeOutOfRange {
        /// The row.
        row: usize,
        /// The column.
        col: usize,
    },
    /// A scheme name that is not `q8`, `q4` or `q4g<G>` with `G` even and > 0.
    #[error("unknown scheme {scheme:?}: expected q8, q4 or q4g<G> with G even and > 0 (e.g. q4g32)")]
    UnknownScheme {
        /// The text given.
        scheme: String,
    },
    /// A recipe name that is not `canonical`, `full-range`, `search` or
    /// `activation-aware`.
    #[error("unknown recipe {recipe:?}: expected canonical, full-range, search, activation-aware or gptq")]
    UnknownRecipe {
        /// The text given.
        recipe: String,
    },
    /// The activation-aware recipe was asked for without an importance vector.
    #[error("the activation-aware recipe needs an importance vector (one value per input column); use the *_weighted functions")]
    ImportanceRequired,
    /// The GPTQ recipe was asked for without a hessian.
    #[error("the gptq recipe needs the layer's hessian (its inputs' second moment, [k, k]); use GptqFactor and the *_gptq functions")]
    HessianRequired,
    /// A hessian element that is not finite, or a negative diagonal element.
    #[error("hessian at row {row}, column {col} is {value}: it must be finite, its diagonal >= 0")]
    BadHessian {
        /// The row.
        row: usize,
        /// The column.
        col: usize,
        /// The value found.
        value: f32,
    },
    /// A hessian that is not positive definite even after dampening.
    #[error("the hessian is not positive definite (pivot of column {col} <= 0 after dampening): it is not the second moment of any inputs")]
    HessianNotPositiveDefinite {
        /// The column whose pivot failed (they are taken from the last back).
        col: usize,
    },
    /// An importance value that is negative, NaN or infinite.
    #[error("importance at column {col} is {value}: it must be finite and >= 0")]
    BadImportance {
        /// The column.
        col: usize,
        /// The value found.
        value: f32,
    },
    /// A negative or non-finite scale in pre-quantized data.
    #[error("invalid scale {value} at row {row}, group {group}: scales must be finite and >= 0")]
    InvalidScale {
        /// The row.
        row: usize,
        /// The group (0 for a per-channel scale).
        group: usize,
        /// The value found.
        value: f32,
    },
    /// An odd-K row whose pad nibble is not the expected zero code.
    #[error("pad nibble of row {row} is {nibble:#x}, expected {expected:#x} (the zero code)")]
    BadPadNibble {
        /// The row.
        row: usize,
        /// The pad nibble found.
        nibble: u8,
        /// The zero code's nibble in this encoding (8 biased, 0 two's complement).
        expected: u8,
    },
}

impl RecipeError {
    /// The same error with a [`RecipeError::BadPadNibble`] reported as a
    /// file stores it, in two's complement (biased nibble `b` is `b ^ 8`
    /// there, the zero code 0); any other error unchanged.
    pub fn pad_nibble_as_twos_complement(self) -> Self {
        match self {
            RecipeError::BadPadNibble { row, nibble, .. } => RecipeError::BadPadNibble {
                row,
                nibble: nibble ^ 0x8,
                expected: 0,
            },
            other => other,
        }
    }

    /// The same error attributed to `row` (row-level functions report row 0).
    pub(crate) fn at_row(self, row: usize) -> Self {
        match self {
            RecipeError::NonFinite { col, value, .. } => RecipeError::NonFinite { row, col, value },
            RecipeError::ScaleOverflow {
                group,
                col_start,
                col_end,
                amax,
                ..
            } => RecipeError::ScaleOverflow {
                row,
                group,
                col_start,
                col_end,
                amax,
            },
            other => other,
        }
    }
}
