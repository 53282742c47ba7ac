use std::fmt;
use std::str::FromStr;

use qlinear_quant_recipe::QScheme;

use qlinear_kernels_core::{Activations, Weights};

use crate::{DispatchError, KernelFamily};

/// The environment variable that selects the quantized-linear mode.
pub const QUANT_MODE_ENV: &str = "QLINEAR_QUANT_MODE";

/// Which quantized linear op class runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantLinearMode {
    /// Q8 weights, dynamically quantized Q8 activations, exact i32 accumulation.
    W8A8,
    /// Q4 weights (per channel or grouped), Q8 activations, exact i32 accumulation.
    W4A8,
    /// Q8 weights, f32 activations (weight-only), 8-lane f32 summation.
    W8A16,
    /// Q4 weights, f32 activations (weight-only), 8-lane f32 summation.
    W4A16,
}

impl QuantLinearMode {
    /// All modes.
    pub const ALL: [QuantLinearMode; 4] = [Self::W8A8, Self::W4A8, Self::W8A16, Self::W4A16];

    /// The mode a weight of `scheme` runs in unless told otherwise: W8A8 for
    /// `q8`, W4A8 for `q4` and `q4g<G>` (integer activations, exact i32 sums).
    pub fn default_for(scheme: QScheme) -> Self {
        match scheme {
            QScheme::Q8 => Self::W8A8,
            QScheme::Q4 | QScheme::Q4Grouped(_) => Self::W4A8,
        }
    }

    /// The mode a new layer of `scheme` runs: `QLINEAR_QUANT_MODE` where it
    /// is set ([`quant_mode_from_environment`]), else
    /// [`QuantLinearMode::default_for`]. Errors: the variable is not a mode.
    /// (A set mode that cannot run `scheme` is returned as it is; building
    /// the layer reports the mismatch.)
    pub fn for_new_layer(scheme: QScheme) -> Result<Self, DispatchError> {
        Ok(quant_mode_from_environment()?.unwrap_or(Self::default_for(scheme)))
    }

    /// Whether this mode runs weights of `scheme`: W8A8 and W8A16 take Q8,
    /// W4A8 and W4A16 take Q4 (per channel or grouped).
    pub fn accepts(self, scheme: QScheme) -> bool {
        self.family_for(scheme).is_ok()
    }

    /// The kernel family that runs a weight of `scheme` in this mode: the
    /// matrix family declared ([`FAMILIES`](qlinear_kernels_core::FAMILIES))
    /// with the scheme's kind of weights, this mode's code width and its
    /// activations. Errors: [`DispatchError::ModeWeightMismatch`] where no
    /// family does.
    pub fn family_for(self, scheme: QScheme) -> Result<KernelFamily, DispatchError> {
        let weights = Weights::of(scheme);
        let activations = match self {
            Self::W8A8 | Self::W4A8 => Activations::Quantized,
            Self::W8A16 | Self::W4A16 => Activations::F32,
        };
        let bits = match self {
            Self::W8A8 | Self::W8A16 => 8,
            Self::W4A8 | Self::W4A16 => 4,
        };
        KernelFamily::GEMM
            .into_iter()
            .find(|f| {
                let spec = f.spec();
                spec.weights == Some(weights) && spec.activations == activations && weights.bits() == bits
            })
            .ok_or(DispatchError::ModeWeightMismatch {
                mode: self,
                needs: self.weight_kind(),
                got: if weights.bits() == 8 { "Q8" } else { "Q4" },
            })
    }

    /// The weight bits this mode needs, `"Q8"` or `"Q4"` (for messages).
    pub fn weight_kind(self) -> &'static str {
        match self {
            Self::W8A8 | Self::W8A16 => "Q8",
            Self::W4A8 | Self::W4A16 => "Q4",
        }
    }
}

impl fmt::Display for QuantLinearMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::W8A8 => "w8a8",
            Self::W4A8 => "w4a8",
            Self::W8A16 => "w8a16",
            Self::W4A16 => "w4a16",
        })
    }
}

impl FromStr for QuantLinearMode {
    type Err = DispatchError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.to_string().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| DispatchError::UnknownMode { value: s.to_string() })
    }
}

/// The mode chosen by `QLINEAR_QUANT_MODE`: `Ok(None)` when unset, an error for
/// a value that is not `w8a8`, `w4a8`, `w8a16` or `w4a16`.
pub fn quant_mode_from_environment() -> Result<Option<QuantLinearMode>, DispatchError> {
    match std::env::var(QUANT_MODE_ENV) {
        Ok(v) => v.parse().map(Some),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(DispatchError::UnknownMode {
            value: v.to_string_lossy().into_owned(),
        }),
    }
}
