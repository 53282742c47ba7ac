//! qlinear: quantized linear layers (W8A8, W4A8, W8A16, W4A16) on the CPU.
//!
//! Weights are quantized once with the canonical recipes
//! ([`QuantizedWeight::quantize`], or `qlinear convert` for a whole file);
//! at run time a [`Linear`] computes `y = x · Wᵀ + b` with `x` `[m, k]`
//! row-major and `y` `[m, n]`, on the fastest tier the selftest has proven on
//! this CPU. Every tier gives the scalar tier's bits (`docs/NUMERICS.md`).
//!
//! ```no_run
//! # fn main() -> Result<(), qlinear::Error> {
//! let report = qlinear::init()?; // the selftest and the plan, paid once, now
//! let model = qlinear::ModelFile::open("model.q8.safetensors")?;
//! let query = model.linear("encoder.layer.0.attention.self.query")?;
//! let x = vec![0.5f32; 2 * query.in_features()]; // two activation rows
//! let mut y = vec![0f32; 2 * query.out_features()];
//! query.forward(&x, 2, &mut y)?;
//! # Ok(()) }
//! ```
//!
//! The seeds' API names ([`quant_linear`], [`linear_q8`], [`linear_q4`],
//! [`dot_i32_q4`], [`KernelPlanV0`], [`autotuned_plan`], [`Int8Tier`],
//! [`neon_sdot_available`], [`wasm_simd128_available`], …) are
//! at the top; tier-level plumbing lives in [`tiers`], the file format's
//! building blocks in [`format`](mod@format) (feature `formats`, on by default), nibble
//! packing in [`packing`].
//!
//! Errors are one type, [`Error`]; every argument is checked before any
//! kernel reads it, outputs are untouched on error, and nothing here panics
//! on bad input.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod error;
#[cfg(feature = "formats")]
mod file;
mod linear;
mod pack;

pub use error::{Error, Result};
#[cfg(feature = "formats")]
pub use file::{Embedding, ModelFile};
pub use linear::Linear;
pub use pack::{pack_weights, Packed};

pub use qlinear_dispatch::{
    autotuned_plan, dot_i32, dot_i32_q4, linear_q4, linear_q4_dynamic, linear_q8, linear_q8_dynamic, linear_w4a16,
    linear_w8a16, quant_linear, quant_mode_from_environment, run_selftest, selftest_report, Census, DispatchError,
    Int8Tier, KernelPlanV0, QuantLinearMode, SelftestReport, TierSpec, INT8_TIER_ENV, MAX_K_W4A8, MAX_K_W8A8,
    QUANT_MODE_ENV,
};
#[cfg(feature = "formats")]
pub use qlinear_formats::{FormatError, QuantizedFile};
pub use qlinear_quant_recipe::{
    quantize_row_q4, quantize_row_q4_gptq, quantize_row_q4_grouped, quantize_row_q4_grouped_gptq,
    quantize_row_q4_grouped_weighted, quantize_row_q4_grouped_with, quantize_row_q4_weighted, quantize_row_q4_with,
    quantize_row_q8, quantize_row_q8_gptq, quantize_row_q8_weighted, quantize_row_q8_with, GptqFactor, GroupSize,
    Q4Scales, QScheme, QuantizedMatrix, QuantizedMatrixQ4, QuantizedWeight, QuantizedWeightRef, Recipe, RecipeError,
    GPTQ_DAMPING, Q4_MAX_ABS, Q8_MAX_ABS,
};

/// Whether the SDOT tier is compiled in and this CPU reports FEAT_DotProd:
/// [`Int8Tier::NeonSdot`]`.is_available()`, under the seed's name (the int8
/// module of the seed documents lists it). Detection only: a detected tier
/// still runs only after its selftest proof ([`selftest_report`]) and when
/// the plan picks it. Always `false` off aarch64; never panics.
pub fn neon_sdot_available() -> bool {
    Int8Tier::NeonSdot.is_available()
}

/// Whether the SIMD128 tier is compiled in (a wasm32 build with
/// `+simd128`): [`Int8Tier::WasmSimd128`]`.is_available()`, under the seed's
/// name. As for [`neon_sdot_available`], the tier also needs its selftest
/// proof before it runs. Always `false` off wasm32; never panics.
pub fn wasm_simd128_available() -> bool {
    Int8Tier::WasmSimd128.is_available()
}

/// What [`init`] or [`init_for`] did: the selftest's proofs and the plan,
/// as they stand in this process when it returns.
#[derive(Debug, Clone)]
pub struct InitReport {
    /// The process's selftest: from [`init`] every family (the same as
    /// [`selftest_report`]), from [`init_for`] the census's families and any
    /// proven before.
    pub selftest: SelftestReport,
    /// The process's plan: from [`init`] every family (the same as
    /// [`autotuned_plan`]), from [`init_for`] the families decided so far.
    pub plan: KernelPlanV0,
}

impl std::fmt::Display for InitReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.selftest, self.plan)
    }
}

/// Proves and plans every kernel family now, once per process, and returns
/// what was found. Without it each family is proven and planned when it is
/// first used (a layer built or a kernel called: `docs/NUMERICS.md` §8,
/// and `docs/BENCHMARKS.md` for the measured cost); a runtime calls this,
/// or [`init_for`] with its model's census, at start-up to pay on purpose
/// and to log which tier runs.
///
/// Errors: `QLINEAR_INT8_TIER` names an unknown tier, or one that is absent
/// or failed a proof here. A tier that fails a proof is not an error: it is
/// reported and never used for that family.
pub fn init() -> Result<InitReport> {
    let plan = autotuned_plan()?.clone();
    Ok(InitReport {
        selftest: selftest_report().clone(),
        plan,
    })
}

/// [`init`] for the layers of a model: proves the `census`'s kernel
/// families at its K values (see `ModelFile::census`; plus the tails and
/// bounds every proof covers) and plans them. Cheaper than [`init`]: a
/// family the model does not run is proven only if it is used later. The
/// census's K values count if no proof has run yet in this process; after
/// one, its K values stay.
pub fn init_for(census: &Census) -> Result<InitReport> {
    let plan = qlinear_dispatch::plan_for(census)?;
    Ok(InitReport {
        selftest: qlinear_dispatch::selftest_for(census),
        plan,
    })
}

/// Tier-level plumbing: one proven tier's checked entry points ([`tiers::Route`]),
/// the kernel families, the selftest's parts and the CPU probes.
pub mod tiers {
    pub use qlinear_dispatch::{
        arrange_in_place, arrange_scales_in_place, cpu_features, cpu_model, default_census, plan_for,
        prove_kernel_table, selftest_for, Activations, FamilyProof, FamilySpec, KernelFamily, KernelTable, LayerRoute,
        Mismatch, PanelsQ4, PlanTiming, Route, TierReport, TierStatus, Weights, FAMILIES,
    };
}

/// Nibble packing of Q4 codes: biased (+8, in memory) and two's complement
/// (on disk), low nibble first (`docs/NUMERICS.md` §4).
pub mod packing {
    pub use qlinear_quant_recipe::{
        biased_to_twos_complement, pack_codes_biased, packed_row_bytes, twos_complement_to_biased, unpack_code_biased,
        Q4_BIAS, Q4_PAD_BIASED,
    };
}

/// The safetensors format's building blocks: raw tensors, streaming writes,
/// metadata keys (`docs/FORMAT.md`).
#[cfg(feature = "formats")]
pub mod format {
    /// The on-disk bytes of quantized rows and tensors, for writers that
    /// produce a tensor row by row.
    pub use qlinear_formats::encode;
    pub use qlinear_formats::{
        available_memory, check_fits_in_memory, file_kind, format_version, in_features_key, qscheme_key, write_file,
        write_streaming, write_to, Dtype, OutputTensor, QuantizedTensorInfo, RawTensor, TensorPlan, FORMAT_KEY,
        FORMAT_VERSION, FORMAT_VERSION_SIGNED_GROUP_SCALES,
    };
}

/// GGUF files (llama.cpp's format) read, dequantized and imported
/// (`docs/FORMAT.md`, "GGUF input").
#[cfg(feature = "formats")]
pub mod gguf {
    pub use qlinear_formats::{
        dequantize_ggml, is_gguf, q4_0_to_q4g32, GgmlType, GgufFile, GgufTensorInfo, GgufValue, GgufValueType,
        DEQUANTIZABLE,
    };
}

/// Opens a quantized safetensors file and loads the weight `prefix` (the `P`
/// of `P.qweight` / `P.scales`), fully validated.
#[cfg(feature = "formats")]
pub fn load_quantized(path: impl AsRef<std::path::Path>, prefix: &str) -> Result<QuantizedWeight> {
    Ok(QuantizedFile::open(path)?.load(prefix)?)
}

// This crate's README (its crates.io page) compiles and runs as a doctest;
// the repository's README is tested by `examples/minilm`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
