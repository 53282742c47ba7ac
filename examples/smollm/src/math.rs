//! The decoder's transcendental functions, one portable implementation for
//! every target, so that a token's logits have the same bits natively and
//! in the browser (issue 64's tier law across the platform boundary).
//!
//! `f32::exp` is the platform's: glibc's `expf` natively, compiler-builtins'
//! port of an older musl `expf` on `wasm32-unknown-unknown`; both are
//! accurate, but they are different functions and round some arguments
//! differently. The functions here use only IEEE-754 additions,
//! multiplications and exact bit operations, which round the same way on
//! every target (Rust never contracts `a * b + c` into a fused
//! multiply-add), so their results are a function of their argument alone.

/// `e^x` for `f32`: 2ⁿ · e^r with `n = round(x / ln 2)` and
/// `r = x − n · ln 2` in two steps (Cody and Waite's split of ln 2, as
/// Cephes' `expf`), e^r by Cephes' degree-6 polynomial, 2ⁿ applied as two
/// exact powers of two (so subnormal results are reached without forming
/// 2ⁿ out of range). At most 2 ulp from the exact value (tested against
/// `f64::exp` over the whole range). `+∞` above 88.72284 (where `e^x`
/// overflows `f32`), `0` below −103.97208 (under half the smallest
/// subnormal), NaN for NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const HI: f32 = 88.722_84;
    const LO: f32 = -103.972_08;
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 = C1 + C2, C1 with few enough bits that n · C1 is exact
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    // 1.5 · 2²³: adding and subtracting it rounds to the nearest integer
    // (ties to even) for |v| < 2²², with basic operations only
    const ROUND: f32 = 12_582_912.0;
    if x.is_nan() {
        return x;
    }
    if x > HI {
        return f32::INFINITY;
    }
    if x < LO {
        return 0.0;
    }
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = (x - n * C1) - n * C2;
    let z = r * r;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    // Cephes writes 5.0000001201e-1, which rounds to 0.5 in f32
    let p = p * r + 0.5;
    let y = p * z + r + 1.0;
    // n in [-150, 128]: each half's power of two is a normal f32
    let n = n as i32;
    let (a, b) = (n / 2, n - n / 2);
    y * pow2(a) * pow2(b)
}

/// `2^n` for `n` in `[-126, 127]`, built from its exponent bits.
#[inline(always)]
fn pow2(n: i32) -> f32 {
    f32::from_bits(((n + 127) as u32) << 23)
}

/// `x / (1 + e^−x)`: SiLU, through [`exp`].
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units of the last place between an `f32` and the exact
    /// value (held in f64), measured at the exact value's binade.
    fn ulps(got: f32, exact: f64) -> f64 {
        let e = exact as f32;
        let ulp = if e == 0.0 || !e.is_normal() {
            f64::from(f32::from_bits(1))
        } else {
            f64::from(f32::from_bits(e.abs().to_bits() + 1) - e.abs())
        };
        (f64::from(got) - exact).abs() / ulp
    }

    #[test]
    fn exp_is_within_two_ulp_of_the_exact_value_over_its_whole_range() {
        // every 97th f32 magnitude up to the lowest argument that is not
        // 0 and up to the highest whose result is finite: 23 million
        let mut worst = (0.0, 0.0f32);
        let (lo, hi) = (103.972_08f32, 88.722_84f32);
        let below = (0..=lo.to_bits()).step_by(97).map(|b| -f32::from_bits(b));
        let above = (0..=hi.to_bits()).step_by(97).map(f32::from_bits);
        for x in below.chain(above) {
            let u = ulps(exp(x), f64::from(x).exp());
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(worst.0 <= 2.0, "exp({}) is {} ulp off", worst.1, worst.0);
    }

    #[test]
    fn exp_of_hand_values() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-200.0), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        assert!((exp(1.0) - std::f32::consts::E).abs() <= f32::EPSILON * 3.0);
        // the largest finite result, and a subnormal one
        assert!(exp(88.72).is_finite() && exp(88.72) > 3.3e38);
        let tiny = exp(-100.0);
        assert!(tiny > 0.0 && !tiny.is_normal(), "{tiny:e}");
        // e^x e^-x = 1 to within the two roundings
        for x in [0.5f32, 3.25, 10.0, 40.0] {
            assert!((exp(x) * exp(-x) - 1.0).abs() < 4.0 * f32::EPSILON, "{x}");
        }
    }

    #[test]
    fn silu_of_hand_values() {
        assert_eq!(silu(0.0), 0.0);
        assert_eq!(silu(200.0), 200.0);
        assert_eq!(silu(-200.0), -0.0);
        assert!((silu(1.0) - 0.731_058_6).abs() < 1e-6);
        assert!((silu(-1.0) + 0.268_941_43).abs() < 1e-6);
    }
}
