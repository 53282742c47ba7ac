//! The integer reductions and the activation quantizer, one row at a
//! time: `Σ a·b` of int8 rows, `Σ x·q` against packed Q4 rows (biased
//! nibbles, bias cancelled by the code sums), and `quantize_row_q8` with
//! the finiteness check on the maximum's pass (docs/NUMERICS.md §3.2, §6.1).

use qlinear_quant_recipe::quantize_row_q8;

/// `Σ a[i]·b[i]` in i32. Exact for `a.len() <= MAX_K_W8A8` with codes in
/// `[-127, 127]` (the caller's bound).
pub fn dot_i8_i8(a: &[i8], b: &[i8]) -> i32 {
    assert_eq!(a.len(), b.len(), "dot_i8_i8 lengths");
    a.iter().zip(b).map(|(&x, &w)| i32::from(x) * i32::from(w)).sum()
}

/// `Σ x[i]·q[i]` against a packed Q4 row of biased nibbles `b = q + 8`,
/// computed as `Σ x·b − 8·Σ x`: the bias costs one correction, not a
/// subtraction per weight.
pub fn dot_i8_q4(x: &[i8], packed: &[u8]) -> i32 {
    assert_eq!(packed.len(), x.len().div_ceil(2), "dot_i8_q4 packed length");
    dot_i8_q4_biased(x, packed) - 8 * x.iter().map(|&v| i32::from(v)).sum::<i32>()
}

/// `Σ x·b` over the biased nibbles `b` of `packed` (`ceil(x.len()/2)` bytes;
/// no bias correction); an odd tail reads only the low nibble. SIMD tiers use
/// it for their column tails.
pub fn dot_i8_q4_biased(x: &[i8], packed: &[u8]) -> i32 {
    let pairs = x.chunks_exact(2);
    let tail = pairs
        .remainder()
        .first()
        .map_or(0, |&lo| i32::from(lo) * i32::from(packed[x.len() / 2] & 0x0F));
    tail + pairs
        .zip(packed)
        .map(|(p, &b)| i32::from(p[0]) * i32::from(b & 0x0F) + i32::from(p[1]) * i32::from(b >> 4))
        .sum::<i32>()
}

/// The activation quantizer of the scalar tier: `quantize_row_q8` itself,
/// `Some(scale)` on a finite row and `None` on one holding NaN or ±∞
/// ([`crate::abi::table::QuantizeRow`]).
pub fn quantize_row_q8_finite(x: &[f32], codes: &mut [i8]) -> Option<f32> {
    // the recipe's other refusal, unequal lengths, is a caller's bug here
    assert_eq!(x.len(), codes.len(), "quantize_row_q8 lengths");
    quantize_row_q8(x, codes).ok()
}

/// The bits of `|v|` (`v.to_bits() & 0x7FFF_FFFF`) order non-negative floats
/// as their values do, and reach `+∞`'s bits exactly when `v` is NaN or ±∞.
/// So a SIMD activation quantizer takes `max |x|` and the finiteness check in
/// one pass of integer maxima, exact in any order: this folds a row's scalar
/// tail into such a maximum `bits`.
pub fn abs_max_bits(bits: u32, x: &[f32]) -> u32 {
    x.iter().fold(bits, |m, v| m.max(v.to_bits() & 0x7FFF_FFFF))
}

/// §3.2's activation scale `amax / 127` from the bits of a row's `max |x|`
/// ([`abs_max_bits`]): `None` when the row held NaN or ±∞.
pub fn q8_scale_from_abs_max_bits(bits: u32) -> Option<f32> {
    (bits < f32::INFINITY.to_bits()).then(|| f32::from_bits(bits) / f32::from(qlinear_quant_recipe::Q8_MAX_ABS))
}

/// How far from its rounded integer `n` a product `y = x · q8_reciprocal(s).0`
/// may lie (`|y − n|`) and still give §3.2's code: `0.5 − 2⁻¹⁴`.
pub const Q8_NEAR_HALF: f32 = 0.5 - 1.0 / 16384.0;

/// The reciprocal a SIMD activation quantizer may multiply by instead of
/// dividing by §3.2's scale `s` (`amax / 127`, finite, > 0), and the bound
/// on `|y − n|` below which the product's integer is the division's:
/// `(fl(1/s), Q8_NEAR_HALF)` for a normal `s`, and `(0, −1)` for a
/// subnormal one (every value must then divide: `|y − n| > −1` always).
///
/// **Why the integer is the same.** §3.2 rounds `q = fl(x / s)` to the
/// nearest integer, ties to even; the quantizer rounds `y = fl(x · r)`, `r
/// = fl(1/s)`, to `n`, and keeps `n` where `|y − n| ≤ Q8_NEAR_HALF`:
///
/// - With `s` normal and `u = 2⁻²⁴`: `r = (1/s)(1 + δ₁)`, `y = (x/s)(1 +
///   δ₁)(1 + δ₂)` and `q = (x/s)(1 + δ₃)`, each `|δ| ≤ u`, plus at most
///   `2⁻¹⁵⁰` where a result is subnormal.
/// - `|x| ≤ amax` and `s = fl(amax / 127) ≥ (amax / 127)(1 − u)`, so `|x /
///   s| ≤ 127 / (1 − u)`, and `|y − q| ≤ 128 · 3.01 u + 2⁻¹⁴⁹ < 2⁻¹⁵`.
/// - `y − n` is exact (`n` is an integer within 0.5 of `y`, below 2²⁴ ulps
///   of `y`). If `|y − n| ≤ 0.5 − 2⁻¹⁴`, `q` lies strictly inside `(n − 0.5,
///   n + 0.5)` and rounds to `n` too; otherwise the value divides, rounds
///   and clamps as §3.2 says.
/// - A kept `n` needs no clamp: `|y| ≤ (127 / (1 − u))(1 + u)² < 127.5`, so
///   `n` is in `[−127, 127]` already, and §3.2's clamp leaves it alone.
///
/// On random rows about one value in 8 000 lies within 2⁻¹⁴ of a
/// half-integer; rows of exact ties divide throughout. The selftest's
/// near-ties row makes a quantizer that never divides round the wrong way.
pub fn q8_reciprocal(s: f32) -> (f32, f32) {
    if s >= f32::MIN_POSITIVE {
        (1.0 / s, Q8_NEAR_HALF)
    } else {
        (0.0, -1.0)
    }
}
