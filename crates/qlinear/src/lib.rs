//! qlinear: quantized linear layers (W8A8, W4A8, W8A16, W4A16) on the CPU.
//!
//! Weights are quantized once with the canonical recipes
//! ([`QuantizedMatrix::quantize`], [`QuantizedMatrixQ4::quantize`]); at run
//! time [`quant_linear`] (or the per-mode functions) computes `y = x · Wᵀ` with
//! `x` `[m, k]` row-major and `y` `[m, n]`, on the fastest tier the selftest
//! has proven on this CPU. Every tier gives the scalar tier's bits.
//!
//! ```
//! use qlinear::{quant_linear, QuantLinearMode, QuantizedMatrix, QuantizedWeight};
//! let w = QuantizedMatrix::quantize(2, 4, &[1.0, -2.0, 3.0, -8.0, 7.0, 0.0, -1.0, 4.0])?;
//! let mut y = [0.0f32; 2];
//! quant_linear(QuantLinearMode::W8A16, &[1.0, 2.0, 3.0, 4.0], 1, QuantizedWeight::Q8(&w), &mut y)?;
//! assert!((y[0] - -26.0).abs() < 0.5 && (y[1] - 20.0).abs() < 0.5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Quantized safetensors files (`P.qweight` / `P.scales`, see `docs/FORMAT.md`)
//! are read with [`load_quantized`] or [`QuantizedFile`] and written with
//! [`write_file`].
//!
//! Errors ([`DispatchError`], [`RecipeError`], [`FormatError`]) are detected before any read
//! and leave outputs untouched; nothing here panics on bad input.

pub use qlinear_dispatch::{
    autotuned_plan, avx2_available, avx512_vnni_available, cpu_features, default_census, dot_i32, dot_i32_q4,
    linear_q4, linear_q4_dynamic, linear_q8, linear_q8_dynamic, linear_w4a16, linear_w8a16, neon_sdot_available,
    quant_linear, quant_mode_from_environment, run_selftest, selftest_report, wasm_simd128_available, DispatchError,
    Int8Tier, KernelFamily, KernelPlanV0, QuantLinearMode, QuantizedWeight, Route, SelftestReport, TierStatus,
    INT8_TIER_ENV, MAX_K_W4A8, MAX_K_W8A8, QUANT_MODE_ENV,
};
pub use qlinear_formats::{
    write_file, write_streaming, Dtype, FormatError, OutputTensor, QScheme, QuantizedFile, QuantizedTensor,
    QuantizedTensorInfo, RawTensor, TensorPlan, FORMAT_KEY, FORMAT_VERSION,
};
pub use qlinear_quant_recipe::{
    biased_to_twos_complement, pack_codes_biased, quantize_row_q4, quantize_row_q4_grouped, quantize_row_q8,
    twos_complement_to_biased, unpack_code_biased, GroupSize, Q4Scales, QuantizedMatrix, QuantizedMatrixQ4,
    RecipeError, Q4_MAX_ABS, Q8_MAX_ABS,
};

/// Opens a quantized safetensors file and loads the weight `prefix` (the `P`
/// of `P.qweight` / `P.scales`), fully validated.
pub fn load_quantized(path: impl AsRef<std::path::Path>, prefix: &str) -> Result<QuantizedTensor, FormatError> {
    QuantizedFile::open(path)?.load(prefix)
}

// The README's examples (the converter on the recipe crate alone, and the
// runtime on this facade) compile and run as doctests of this crate.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctest;
