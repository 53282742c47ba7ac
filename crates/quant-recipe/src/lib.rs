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

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod codes;
mod error;
mod gptq;
mod nibble;
mod q4;
mod q8;
pub(crate) mod recipe;
mod weight;

pub use codes::{Byte, Codes, SharedBuffer};
pub use error::RecipeError;
pub use gptq::{quantize_row_q4_gptq, quantize_row_q4_grouped_gptq, quantize_row_q8_gptq, GptqFactor, GPTQ_DAMPING};
pub use nibble::{
    biased_to_twos_complement, pack_codes_biased, packed_row_bytes, twos_complement_to_biased, unpack_code_biased,
    Q4_BIAS, Q4_PAD_BIASED,
};
pub use q4::{quantize_row_q4, quantize_row_q4_grouped, GroupSize, Q4Scales, QuantizedMatrixQ4};
pub use q8::{find_code_out_of_range, quantize_row_q8, QuantizedMatrix};
pub use recipe::{
    quantize_row_q4_grouped_weighted, quantize_row_q4_grouped_with, quantize_row_q4_weighted, quantize_row_q4_with,
    quantize_row_q8_weighted, quantize_row_q8_with, Recipe,
};
pub use weight::{QScheme, QuantizedWeight, QuantizedWeightRef};

/// Largest absolute Q8 code the canonical recipe emits (-128 is never emitted).
pub const Q8_MAX_ABS: i8 = 127;
/// Largest absolute Q4 code the canonical recipe emits (-8 is never emitted).
pub const Q4_MAX_ABS: i8 = 7;

/// Largest `max|w|` over `w`, or the first non-finite element as an error
/// (row reported as 0: whole-matrix callers re-label it).
pub(crate) fn finite_amax(w: &[f32]) -> Result<f32, RecipeError> {
    // Branch-free over the row (so it vectorises); the culprit is looked up
    // only when there is one. `max` is order-independent on finite values.
    let (amax, finite) = w
        .iter()
        .fold((0f32, true), |(m, ok), &v| (m.max(v.abs()), ok & v.is_finite()));
    if finite {
        return Ok(amax);
    }
    let col = w.iter().position(|v| !v.is_finite()).unwrap_or(0);
    Err(RecipeError::NonFinite {
        row: 0,
        col,
        value: w[col],
    })
}

/// Round half to even, exactly `f32::round_ties_even`, in plain IEEE
/// arithmetic: for `|x| < 2^23`, `|x| + 2^23` lands in `[2^23, 2^24)` where the
/// spacing is 1, so the addition itself rounds `|x|` to the nearest integer,
/// ties to even, and subtracting `2^23` is exact; larger values are already
/// integers. (The baseline x86-64 target has no SSE4.1 `roundss`, where
/// `round_ties_even` becomes a library call.)
#[inline]
pub(crate) fn round_ties_even(x: f32) -> f32 {
    const TWO_23: f32 = 8_388_608.0;
    let a = x.abs();
    let r = ((a + TWO_23) - TWO_23).copysign(x);
    // a select, not a branch, so the quantize loops vectorise
    if a < TWO_23 {
        r
    } else {
        x
    }
}

/// `clamp(rte(v / scale), -max, max)`: the one rounding step of every recipe.
/// `scale` is non-zero and finite here; a quotient that overflows to ±Inf is
/// clamped like any other out-of-range value.
#[inline]
pub(crate) fn quantize_value(v: f32, scale: f32, max: i8) -> i8 {
    let m = f32::from(max);
    // Compares and selects (the quotient is never NaN: inputs are finite and
    // the scale non-zero), then the integer read from the mantissa: adding
    // 1.5 · 2^23 to an integral value in [-127, 127] is exact and leaves it in
    // the low bits. The same as clamp-and-cast, without the saturating
    // float-to-int conversion that keeps the baseline x86-64 target scalar.
    let q = round_ties_even(v / scale);
    let q = if q < -m { -m } else { q };
    let q = if q > m { m } else { q };
    ((q + 12_582_912.0).to_bits() as i32 - 0x4B40_0000) as i8
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

#[cfg(test)]
mod tests {
    /// The arithmetic rounding equals the library's on every f32 in a sweep
    /// that covers all ties, signs, both sides of 2^23, NaN-free extremes.
    #[test]
    fn round_ties_even_matches_std() {
        let mut bits = 0u32;
        loop {
            let x = f32::from_bits(bits);
            if x.is_finite() {
                assert_eq!(
                    super::round_ties_even(x).to_bits(),
                    x.round_ties_even().to_bits(),
                    "{x}"
                );
            }
            match bits.checked_add(997) {
                Some(b) => bits = b,
                None => break,
            }
        }
        for k in -300i32..300 {
            for x in [
                k as f32 + 0.5,
                k as f32 - 0.5,
                k as f32,
                (k as f32 + 0.5).next_up(),
                (k as f32 + 0.5).next_down(),
            ] {
                assert_eq!(
                    super::round_ties_even(x).to_bits(),
                    x.round_ties_even().to_bits(),
                    "{x}"
                );
            }
        }
        for x in [
            8_388_607.5f32,
            8_388_608.0,
            -8_388_607.5,
            4_194_303.5,
            -0.0,
            0.0,
            -0.5,
            0.5,
            1e-45,
            -1e-45,
        ] {
            assert_eq!(
                super::round_ties_even(x).to_bits(),
                x.round_ties_even().to_bits(),
                "{x}"
            );
        }
    }
}

// The crate README (its crates.io page) runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
