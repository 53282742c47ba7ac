//! The scalar tier's declaration.

use crate::abi::spec::TierSpec;
use crate::scalar::SCALAR;

/// The scalar tier: portable Rust, the reference every other tier equals.
pub const SCALAR_TIER: TierSpec = TierSpec {
    name: "scalar",
    arch: "any",
    features: &[],
    detect: || Ok(&SCALAR),
    build_features: "",
    emulated_with: "",
    emulated_without: &[],
    folder: "crates/kernels-core/src/scalar",
    mutants: &[],
};
