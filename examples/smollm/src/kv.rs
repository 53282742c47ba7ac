//! What a cached key or value is held as.
//!
//! The KV cache is the one thing a decode step reads that grows with the
//! context: SmolLM2-135M holds 30 layers × 2 × 192 values a position, 45 KiB
//! in f32, so 11.25 MiB at 256 positions, read once a token and evicted
//! again by the weights streaming past it (its attention took 0.41–0.52 ms
//! of a token with the cache hot against 0.93–1.06 ms cold on an AMD EPYC
//! Zen 4, docs/benchmarks/history.md). Held as bfloat16 it is half the
//! bytes: a key or value is rounded once, to nearest-even, when it is
//! stored, and widened exactly (a 16-bit shift) when it is read, so every
//! target computes the same products from the same widened f32 values and
//! the tier law holds unchanged. bfloat16 keeps f32's exponent range (no
//! value overflows that f32 holds) and 8 significant bits; SmolLM2's own
//! weights and the caches of the runtimes that serve it in bfloat16 are
//! that type. What it costs in perplexity is measured, not assumed
//! (docs/BENCHMARKS.md).

use half::bf16;

#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
use crate::attend::Lanes8;

/// The type the KV cache holds its keys and values in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvPrecision {
    /// f32: the values as computed.
    #[default]
    F32,
    /// bfloat16: each value rounded to nearest-even when stored (half the
    /// bytes), widened exactly when read.
    Bf16,
}

impl KvPrecision {
    /// Bytes a cached value takes.
    pub fn bytes(self) -> usize {
        match self {
            KvPrecision::F32 => 4,
            KvPrecision::Bf16 => 2,
        }
    }

    /// The name the command line and the reports use (`f32`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            KvPrecision::F32 => "f32",
            KvPrecision::Bf16 => "bf16",
        }
    }
}

impl std::str::FromStr for KvPrecision {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<KvPrecision> {
        match s {
            "f32" => Ok(KvPrecision::F32),
            "bf16" => Ok(KvPrecision::Bf16),
            _ => Err(crate::Error::KvPrecision(s.to_string())),
        }
    }
}

/// A cached key or value: rounded from f32 once when stored, widened back
/// to f32 (exactly) whenever attention reads it.
pub(crate) trait KvValue: Copy + Default + Send + Sync + 'static {
    /// `x` as held.
    fn narrow(x: f32) -> Self;
    /// The held value as f32, exactly.
    fn widen(self) -> f32;
    /// Eight held values from the start of `s` (at least 8 long), widened,
    /// in `lanes`' registers.
    #[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
    fn load8<L: Lanes8>(lanes: L, s: &[Self]) -> L::V;
}

impl KvValue for f32 {
    #[inline(always)]
    fn narrow(x: f32) -> f32 {
        x
    }
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }
    #[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
    #[inline(always)]
    fn load8<L: Lanes8>(lanes: L, s: &[f32]) -> L::V {
        lanes.load(s)
    }
}

impl KvValue for bf16 {
    /// Round to nearest, ties to even (`half`'s conversion; a NaN stays a
    /// NaN).
    #[inline(always)]
    fn narrow(x: f32) -> bf16 {
        bf16::from_f32(x)
    }
    /// The bits shifted into f32's top half: the definition every wide
    /// path repeats.
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
    #[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
    #[inline(always)]
    fn load8<L: Lanes8>(lanes: L, s: &[bf16]) -> L::V {
        lanes.load_bf16(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_widens_exactly_and_rounds_to_nearest_even() {
        // every bf16 bit pattern widens to the f32 `half` gives (NaNs: a NaN)
        for b in 0..=u16::MAX {
            let (h, w) = (bf16::from_bits(b), bf16::from_bits(b).widen());
            if h.is_nan() {
                assert!(w.is_nan(), "{b:#06x}");
            } else {
                assert_eq!(w.to_bits(), h.to_f32().to_bits(), "{b:#06x}");
                // and narrowing it back is the identity
                assert_eq!(<bf16 as KvValue>::narrow(w).to_bits(), b, "{b:#06x}");
            }
        }
        // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to even (1)
        assert_eq!(<bf16 as KvValue>::narrow(1.0 + 1.0 / 256.0).widen(), 1.0);
        // 1 + 3·2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6
        assert_eq!(<bf16 as KvValue>::narrow(1.0 + 3.0 / 256.0).widen(), 1.0 + 1.0 / 64.0);
        // just above a tie rounds up
        let above = f32::from_bits((1.0f32 + 1.0 / 256.0).to_bits() + 1);
        assert_eq!(<bf16 as KvValue>::narrow(above).widen(), 1.0 + 1.0 / 128.0);
        // f32's largest value rounds to bf16's infinity, as f32 arithmetic would
        assert_eq!(<bf16 as KvValue>::narrow(f32::MAX).widen(), f32::INFINITY);
        assert!(<bf16 as KvValue>::narrow(f32::NAN).widen().is_nan());
    }

    #[test]
    fn precision_names_parse_back_and_others_are_refused() {
        for p in [KvPrecision::F32, KvPrecision::Bf16] {
            assert_eq!(p.name().parse::<KvPrecision>().unwrap(), p);
        }
        assert_eq!(KvPrecision::Bf16.bytes() * 2, KvPrecision::F32.bytes());
        let e = "f16".parse::<KvPrecision>().unwrap_err().to_string();
        assert!(e.contains("`f16`") && e.contains("f32 or bf16"), "{e}");
    }
}
