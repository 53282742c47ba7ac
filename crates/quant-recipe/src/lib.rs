//! The canonical symmetric quantizers of qlinear, byte for byte.
//!
//! Every other qlinear crate (kernels, formats, the facade) treats this crate
//! as the definition of what a quantized weight *is*. An artifact converter can
//! depend on it alone:
//!
//! * [`quantize_row_q8`]: Q8 per output channel (also used for activation rows),
//!   `scale = max|w| / 127`, codes in `[-127, 127]`, ties to even.
//! * [`quantize_row_q4`]: Q4 per output channel, `scale = max|w| / 7`, codes in
//!   `[-7, 7]`, packed two per byte, low nibble first, biased by +8.
//! * [`quantize_row_q4_grouped`]: Q4 with one IEEE f16 scale per group of `G`
//!   columns.
//!
//! The most negative code (-128, -8) is never emitted, so negating a row
//! negates its codes exactly and the accumulator's worst case is symmetric.
//! All arithmetic is f32 with IEEE round to nearest; a row holding NaN or ±Inf
//! is refused with an error that names the row and column.

mod error;
mod nibble;
mod q4;
mod q8;

pub use error::RecipeError;
pub use nibble::{
    biased_to_twos_complement, pack_codes_biased, packed_row_bytes, twos_complement_to_biased, unpack_code_biased,
    Q4_BIAS, Q4_PAD_BIASED,
};
pub use q4::{quantize_row_q4, quantize_row_q4_grouped, GroupSize, Q4Scales, QuantizedMatrixQ4};
pub use q8::{quantize_row_q8, QuantizedMatrix};

/// Largest absolute Q8 code the canonical recipe emits (-128 is never emitted).
pub const Q8_MAX_ABS: i8 = 127;
/// Largest absolute Q4 code the canonical recipe emits (-8 is never emitted).
pub const Q4_MAX_ABS: i8 = 7;

/// Largest `max|w|` over `w`, or the first non-finite element as an error
/// (row reported as 0: whole-matrix callers re-label it).
pub(crate) fn finite_amax(w: &[f32]) -> Result<f32, RecipeError> {
    let mut amax = 0.0f32;
    for (col, &v) in w.iter().enumerate() {
        if !v.is_finite() {
            return Err(RecipeError::NonFinite { row: 0, col, value: v });
        }
        amax = amax.max(v.abs());
    }
    Ok(amax)
}

/// `clamp(rte(v / scale), -max, max)`: the one rounding step of every recipe.
/// `scale` is non-zero and finite here; a quotient that overflows to ±Inf is
/// clamped like any other out-of-range value.
#[inline]
pub(crate) fn quantize_value(v: f32, scale: f32, max: i8) -> i8 {
    let m = f32::from(max);
    (v / scale).round_ties_even().clamp(-m, m) as i8
}

pub(crate) fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<(), RecipeError> {
    if expected == actual {
        Ok(())
    } else {
        Err(RecipeError::LengthMismatch { what, expected, actual })
    }
}

pub(crate) fn checked_elems(n: usize, k: usize) -> Result<usize, RecipeError> {
    n.checked_mul(k).ok_or(RecipeError::ShapeOverflow { n, k })
}

// The README's converter example compiles and runs as a doctest of this crate.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctest;
