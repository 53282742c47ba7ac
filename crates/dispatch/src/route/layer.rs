//! A layer's routes resolved once ([`LayerRoute`]), and the free entry
//! points on the planned tier.

use super::*;

/// One layer's kernels, resolved once: the kernel family that its mode and
/// weight need, and for decode (M ≤ 1) and for batches (M > 1) the route
/// with the typed kernel entries it runs (the family's entry of the
/// route's tier, and its panel entry where the tier has one). A
/// `qlinear::Linear` builds one when it is built, so that a forward call
/// goes straight to its tier's entry: the plan, the selftest report, the
/// tier registry and the kernel table are consulted here and never again.
///
/// The routes are fixed facts of the process (the plan is decided once), so
/// resolving again would give the same routes; the bits are those of the
/// same call through [`quant_linear`].
#[derive(Debug, Clone, Copy)]
pub struct LayerRoute {
    mode: QuantLinearMode,
    family: KernelFamily,
    decode: Resolved,
    batch: Resolved,
}

/// Two layer routes are equal when they run the same mode and family on the
/// same routes (the entries are the routes' tables', for the family).
impl PartialEq for LayerRoute {
    fn eq(&self, other: &LayerRoute) -> bool {
        self.mode == other.mode
            && self.family == other.family
            && self.decode.route == other.decode.route
            && self.batch.route == other.batch.route
    }
}

/// A route with the entries it runs for one layer's family, taken from its
/// tier's table when the layer is built.
#[derive(Debug, Clone, Copy)]
struct Resolved {
    route: Route,
    gemm: Gemm,
    /// The panel entry (W4A8, grouped or per channel), where the tier has one.
    panels: Option<GemmQ8Panels>,
}

impl Resolved {
    fn new(route: Route, mode: QuantLinearMode, family: KernelFamily) -> Result<Resolved, DispatchError> {
        Ok(Resolved {
            gemm: route.entry(mode, family)?,
            panels: route.table.panels(family),
            route,
        })
    }
}

impl LayerRoute {
    /// The planned routes for `w` in `mode` (proves and plans the family
    /// now if this process has not). Errors: a mode that cannot
    /// run `w` ([`DispatchError::ModeWeightMismatch`]), a forced tier that is
    /// unknown or unproven.
    pub fn planned<'w>(mode: QuantLinearMode, w: impl Into<QuantizedWeightRef<'w>>) -> Result<Self, DispatchError> {
        Self::planned_for(mode, w.into().scheme())
    }

    /// [`LayerRoute::planned`] from the weight's scheme alone (for a layer
    /// that holds its weight in another layout, as the panel form).
    pub fn planned_for(mode: QuantLinearMode, scheme: QScheme) -> Result<Self, DispatchError> {
        let family = mode.family_for(scheme)?;
        Ok(LayerRoute {
            mode,
            family,
            decode: Resolved::new(Route::planned(family, 1)?, mode, family)?,
            batch: Resolved::new(Route::planned(family, 16)?, mode, family)?,
        })
    }

    /// `route` for both regimes (a tier chosen by the caller, as the
    /// benchmarks and the tier law do). Errors as [`LayerRoute::planned`].
    pub fn on<'w>(
        route: Route,
        mode: QuantLinearMode,
        w: impl Into<QuantizedWeightRef<'w>>,
    ) -> Result<Self, DispatchError> {
        Self::on_for(route, mode, w.into().scheme())
    }

    /// [`LayerRoute::on`] from the weight's scheme alone.
    pub fn on_for(route: Route, mode: QuantLinearMode, scheme: QScheme) -> Result<Self, DispatchError> {
        let family = mode.family_for(scheme)?;
        route.proven(family)?;
        let resolved = Resolved::new(route, mode, family)?;
        Ok(LayerRoute {
            mode,
            family,
            decode: resolved,
            batch: resolved,
        })
    }

    /// These routes restricted to output features `rows` (see
    /// [`Route::over_rows`]): [`LayerRoute::forward`] and
    /// [`LayerRoute::forward_panels`] then compute those outputs only, into
    /// a `y` of `[m, rows.len()]`, on the calling thread, with the bits of a
    /// whole call's; the bias stays `[n]`.
    pub fn over_rows(self, rows: std::ops::Range<usize>) -> Self {
        let over = |r: Resolved, rows| Resolved {
            route: r.route.over_rows(rows),
            ..r
        };
        LayerRoute {
            decode: over(self.decode, rows.clone()),
            batch: over(self.batch, rows),
            ..self
        }
    }

    /// The mode the layer runs.
    pub fn mode(&self) -> QuantLinearMode {
        self.mode
    }

    /// The kernel family the layer's weight runs in its mode.
    pub fn family(&self) -> KernelFamily {
        self.family
    }

    /// Whether the layer can hold its weight in the panel form
    /// ([`PanelsQ4`]) and run [`LayerRoute::forward_panels`]: W4A8, grouped
    /// or per channel, with both regimes' tiers having panel tiles for the
    /// family.
    pub fn runs_panels(&self) -> bool {
        self.decode.panels.is_some() && self.batch.panels.is_some()
    }

    /// [`LayerRoute::forward`] on the panel form of a W4A8 weight (grouped
    /// by 32 or per channel, as the layer's family): the same checks and
    /// the same bits. Errors as there ([`DispatchError::RouteWeightMismatch`]
    /// for a panel form of the other family), and
    /// [`DispatchError::NoPanelTiles`] unless [`LayerRoute::runs_panels`].
    pub fn forward_panels(
        &self,
        x: &[f32],
        m: usize,
        w: &PanelsQ4,
        bias: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<(), DispatchError> {
        let resolved = self.resolved(m);
        let f = match (self.runs_panels(), resolved.panels) {
            (true, Some(f)) => f,
            _ => {
                return Err(DispatchError::NoPanelTiles {
                    tier: resolved.route.tier(),
                    family: self.family,
                })
            }
        };
        let got = panel_family(w);
        if got != self.family {
            return Err(DispatchError::RouteWeightMismatch {
                resolved: self.family,
                got,
            });
        }
        if let Some(b) = bias {
            check_len("bias [n]", w.n(), b.len())?;
        }
        resolved.route.q4_panels(f, x, m, w, bias.unwrap_or(&[]), y)
    }

    /// The route and entries a call of `m` activation rows takes.
    fn resolved(&self, m: usize) -> &Resolved {
        if m <= 1 {
            &self.decode
        } else {
            &self.batch
        }
    }

    /// The route a call of `m` activation rows takes.
    pub fn route(&self, m: usize) -> &Route {
        &self.resolved(m).route
    }

    /// `y = x · Wᵀ + b` for `m` rows of `x` (`[m, k]`) into `y` (`[m, n]`) on
    /// the route resolved for `m`, with the checks and bits of
    /// [`quant_linear`]; a `bias` (`[n]`) is added to each output as it is
    /// stored (`y[i, j] = kernel + b[j]`, one f32 addition: the bits of
    /// adding it afterwards). `w` must be of the family the route was
    /// resolved for ([`DispatchError::RouteWeightMismatch`] otherwise); a
    /// bias of another length is [`DispatchError::Shape`]. On any error `y`
    /// is untouched.
    pub fn forward<'w>(
        &self,
        x: &[f32],
        m: usize,
        w: impl Into<QuantizedWeightRef<'w>>,
        bias: Option<&[f32]>,
        y: &mut [f32],
    ) -> Result<(), DispatchError> {
        let w = w.into();
        let got = family_of(self.mode, w)?;
        if got != self.family {
            return Err(DispatchError::RouteWeightMismatch {
                resolved: self.family,
                got,
            });
        }
        if let Some(b) = bias {
            check_len("bias [n]", w.n(), b.len())?;
        }
        let resolved = self.resolved(m);
        resolved.route.run_gemm(resolved.gemm, x, m, w, bias.unwrap_or(&[]), y)
    }
}

/// Exact i32 dot product of two Q8 code rows over the planned tier.
pub fn dot_i32(a: &[i8], b: &[i8]) -> Result<i32, DispatchError> {
    Route::planned(KernelFamily::DotI8I8, 1)?.dot_i32(a, b)
}

/// Exact i32 dot product of an int8 activation row against one packed int4
/// weight row (biased nibbles) over the planned tier.
pub fn dot_i32_q4(x: &[i8], packed: &[u8]) -> Result<i32, DispatchError> {
    Route::planned(KernelFamily::DotI8Q4, 1)?.dot_i32_q4(x, packed)
}

/// W8A8 linear: quantized activations `[m, k]` times a [`QuantizedMatrix`]
/// `[n, k]`, producing f32 `[m, n]` (see [`Route::linear_q8`]).
pub fn linear_q8(
    x_codes: &[i8],
    x_scales: &[f32],
    m: usize,
    w: &QuantizedMatrix,
    y: &mut [f32],
) -> Result<(), DispatchError> {
    Route::planned(KernelFamily::W8A8, m)?.linear_q8(x_codes, x_scales, m, w, y)
}

/// Quantizes an f32 activation matrix `[m, k]` per row and runs [`linear_q8`].
pub fn linear_q8_dynamic(x: &[f32], m: usize, w: &QuantizedMatrix, y: &mut [f32]) -> Result<(), DispatchError> {
    Route::planned(KernelFamily::W8A8, m)?.linear_q8_dynamic(x, m, w, y)
}

/// W4A8 linear: quantized activations `[m, k]` times a [`QuantizedMatrixQ4`]
/// `[n, k]` (per channel or grouped), producing f32 `[m, n]`.
pub fn linear_q4(
    x_codes: &[i8],
    x_scales: &[f32],
    m: usize,
    w: &QuantizedMatrixQ4,
    y: &mut [f32],
) -> Result<(), DispatchError> {
    let family = QuantLinearMode::W4A8.family_for(QuantizedWeightRef::from(w).scheme())?;
    Route::planned(family, m)?.linear_q4(x_codes, x_scales, m, w, y)
}

/// Quantizes an f32 activation matrix `[m, k]` per row and runs [`linear_q4`].
pub fn linear_q4_dynamic(x: &[f32], m: usize, w: &QuantizedMatrixQ4, y: &mut [f32]) -> Result<(), DispatchError> {
    let family = QuantLinearMode::W4A8.family_for(QuantizedWeightRef::from(w).scheme())?;
    Route::planned(family, m)?.linear_q4_dynamic(x, m, w, y)
}

/// W8A16 linear: f32 activations `[m, k]` times a [`QuantizedMatrix`] `[n, k]`.
pub fn linear_w8a16(x: &[f32], m: usize, w: &QuantizedMatrix, y: &mut [f32]) -> Result<(), DispatchError> {
    Route::planned(KernelFamily::W8A16, m)?.linear_w8a16(x, m, w, y)
}

/// W4A16 linear: f32 activations `[m, k]` times a [`QuantizedMatrixQ4`] `[n, k]`.
pub fn linear_w4a16(x: &[f32], m: usize, w: &QuantizedMatrixQ4, y: &mut [f32]) -> Result<(), DispatchError> {
    let family = QuantLinearMode::W4A16.family_for(QuantizedWeightRef::from(w).scheme())?;
    Route::planned(family, m)?.linear_w4a16(x, m, w, y)
}

/// Runs one quantized linear in `mode` on f32 activations `x` `[m, k]`: the
/// drop-in a model runtime calls. W8A8 and W8A16 take Q8 weights, W4A8 and
/// W4A16 Q4 weights; a mismatch is an error. `w` is a [`QuantizedWeightRef`]
/// or anything that converts to one (`&QuantizedWeight`, `&QuantizedMatrix`,
/// `&QuantizedMatrixQ4`).
///
/// The first call of a kernel family in a process proves and plans that
/// family (see [`crate::plan_for`]); call that at start-up with the model's
/// census to pay the cost on purpose.
pub fn quant_linear<'w>(
    mode: QuantLinearMode,
    x: &[f32],
    m: usize,
    w: impl Into<QuantizedWeightRef<'w>>,
    y: &mut [f32],
) -> Result<(), DispatchError> {
    let w = w.into();
    Route::planned(family_of(mode, w)?, m)?.quant_linear(mode, x, m, w, y)
}

/// The kernel family that runs `w` in `mode`, or the mismatch error.
pub(super) fn family_of(mode: QuantLinearMode, w: QuantizedWeightRef<'_>) -> Result<KernelFamily, DispatchError> {
    mode.family_for(w.scheme())
}
