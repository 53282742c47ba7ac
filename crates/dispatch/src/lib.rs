//! Which tier runs, and the proof that it may.
//!
//! * [`Int8Tier`]: every ISA tier qlinear knows; the selftest proves each
//!   kernel family on the compiled-in tiers whose CPU feature is present,
//!   once per process, when the family is first used (or named at start-up,
//!   [`selftest_for`]): all-extreme rows against exact i64 arithmetic at
//!   every K of the census, random rows against the scalar tier. A tier that
//!   is absent, or fails a family's proof, is reported and never used for it.
//! * [`autotuned_plan`]: the measured winner per kernel family for decode
//!   (M = 1) and batch (M = 16), decided once per process, each family when
//!   it is first used ([`plan_for`] at start-up);
//!   `QLINEAR_INT8_TIER` forces a tier (an unknown or unproven tier is an error).
//! * [`Route`]: checked entry points (`linear_q8`, `linear_q4`, …) on one tier,
//!   run row-parallel with rayon in ranges of 16 output features; every output
//!   is computed by one worker with the same arithmetic, so thread count never
//!   changes the bits.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod clock;
mod driver;
mod error;
mod mode;
mod plan;
mod route;
mod selftest;
mod tier;

pub use clock::set_clock;
pub use error::DispatchError;
pub use mode::{quant_mode_from_environment, QuantLinearMode, QUANT_MODE_ENV};
pub use plan::{autotuned_plan, plan_for, KernelPlanV0, PlanTiming, INT8_TIER_ENV};
pub use route::{
    dot_i32, dot_i32_q4, linear_q4, linear_q4_dynamic, linear_q8, linear_q8_dynamic, linear_w4a16, linear_w8a16,
    quant_linear, LayerRoute, Route,
};
pub use selftest::{
    default_census, prove_kernel_table, run_selftest, selftest_for, selftest_report, selftest_report_for, Census,
    FamilyProof, Mismatch, SelftestReport, TierReport, TierStatus,
};
pub use tier::{cpu_features, cpu_model, Int8Tier};

pub use qlinear_kernels_core::{
    arrange_in_place, arrange_scales_in_place, Activations, FamilySpec, KernelFamily, KernelTable, PanelsQ4, TierSpec,
    Weights, FAMILIES, MAX_K_W4A8, MAX_K_W8A8,
};

// The crate README (its crates.io page) runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctest;
