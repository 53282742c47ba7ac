//! [`Linear`]: one quantized layer (its weight, optional bias and mode)
//! with its kernel route resolved when it is built, so that a forward call
//! goes straight to its tier's entry; the weight is held in the form that
//! route reads (the panel form where its tiers have panel tiles).

use std::sync::OnceLock;

use qlinear_dispatch::{Int8Tier, LayerRoute, PanelsQ4, QuantLinearMode, Route};
use qlinear_quant_recipe::{GroupSize, QScheme, QuantizedWeight, RecipeError, SharedBuffer};

use crate::{Error, Result};

/// A quantized linear layer: `y = x · Wᵀ + b`, with `W` a [`QuantizedWeight`]
/// `[out_features, in_features]` and an optional f32 bias `[out_features]`.
///
/// The mode is fixed when the layer is built: by default the one
/// `QLINEAR_QUANT_MODE` names, else the weight's own
/// ([`QuantLinearMode::default_for`]: W8A8 for `q8`, W4A8 for `q4` and
/// `q4g<G>`); [`Linear::with_mode`] overrides it. A mode that cannot run the
/// weight is refused there, never on a forward call.
///
/// The layer also resolves its kernels when it is built: the planned tier's
/// entry for its family at decode (M = 1) and in batches ([`LayerRoute`]),
/// so building the first layer in a process runs the selftest and the plan
/// (unless [`crate::init`] ran) and a forward call consults neither. Where
/// those tiers read a prepared layout, the layer holds its weight in it: a
/// W4A8 layer grouped by 32 or per channel (N a multiple of 16, K of 32) on
/// tiers with panel tiles for its family keeps the panel form
/// ([`crate::tiers::PanelsQ4`], the same bytes permuted): made by a copy
/// from a natural weight that owns its codes, or arranged where the codes
/// lie by [`crate::ModelFile::open_in_place`]. A natural weight whose codes
/// are shared (read in place) keeps the natural form, since the panel form
/// would be a second copy.
/// The bits are the natural layout's; [`Linear::weight`] rebuilds the
/// natural form the first time it is asked for.
///
/// ```
/// use qlinear::{Linear, QScheme};
/// let (n, k) = (3, 64);
/// let w: Vec<f32> = (0..n * k).map(|i| (i % 7) as f32 - 3.0).collect();
/// let layer = Linear::from_f32(QScheme::Q8, n, k, &w, Some(&[0.5, 0.0, -1.0]))?;
/// let x = vec![0.25f32; 2 * k];
/// let mut y = vec![0f32; 2 * n];
/// layer.forward(&x, 2, &mut y)?;
/// # Ok::<(), qlinear::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Linear {
    name: String,
    weight: Held,
    bias: Option<Vec<f32>>,
    route: LayerRoute,
}

/// A layer's weight as it holds it: natural, or in the panel form its
/// route's tiles read, with the natural form built only when asked for (the
/// panel form boxed, so that a layer is no larger than a natural one's
/// holding plus a pointer).
#[derive(Debug, Clone)]
enum Held {
    Natural(QuantizedWeight),
    Panels {
        panels: Box<PanelsQ4>,
        natural: OnceLock<QuantizedWeight>,
    },
}

impl Held {
    /// The weight in the form `route` reads: the panel form where the route
    /// runs it and the codes are owned (a natural weight read in place
    /// stays there: its panel form would be a second copy), else the
    /// natural one.
    fn settled(self, route: &LayerRoute) -> Held {
        match self {
            Held::Natural(QuantizedWeight::Q4(w)) if route.runs_panels() && !w.packed_shared() => {
                match PanelsQ4::new(&w) {
                    Some(panels) => Held::Panels {
                        panels: Box::new(panels),
                        natural: OnceLock::new(),
                    },
                    None => Held::Natural(QuantizedWeight::Q4(w)),
                }
            }
            Held::Panels { panels, natural } if !route.runs_panels() => Held::Natural(
                natural
                    .into_inner()
                    .unwrap_or_else(|| QuantizedWeight::Q4(panels.to_matrix())),
            ),
            held => held,
        }
    }

    fn natural(&self) -> &QuantizedWeight {
        match self {
            Held::Natural(w) => w,
            Held::Panels { panels, natural } => natural.get_or_init(|| QuantizedWeight::Q4(panels.to_matrix())),
        }
    }

    /// The code bytes the route reads: the panel form's or the natural weight's.
    fn code_bytes(&self) -> &[u8] {
        match self {
            Held::Natural(w) => w.code_bytes(),
            Held::Panels { panels, .. } => panels.codes(),
        }
    }

    /// Whether the code bytes the route reads are a shared buffer's.
    fn codes_shared(&self) -> bool {
        match self {
            Held::Natural(QuantizedWeight::Q8(w)) => w.codes_shared(),
            Held::Natural(QuantizedWeight::Q4(w)) => w.packed_shared(),
            Held::Panels { panels, .. } => panels.codes_shared(),
        }
    }

    /// The same holding, reading its code bytes in place from `buffer` at
    /// `start` (where [`Held::code_bytes`] were copied).
    fn with_shared_codes(&self, buffer: SharedBuffer, start: usize) -> Result<Held> {
        Ok(match self {
            Held::Natural(w) => Held::Natural(w.with_shared_codes(buffer, start)?),
            Held::Panels { panels, .. } => {
                let len = (*buffer).as_ref().len();
                let panels = panels
                    .with_shared_codes(buffer, start)
                    .ok_or(RecipeError::LengthMismatch {
                        what: "panel code bytes (the end of the range against the buffer)",
                        expected: len,
                        actual: start.saturating_add(panels.codes().len()),
                    })?;
                Held::Panels {
                    panels: Box::new(panels),
                    natural: OnceLock::new(),
                }
            }
        })
    }

    fn scheme(&self) -> QScheme {
        match self {
            Held::Natural(w) => w.scheme(),
            Held::Panels { panels, .. } => match panels.group_size() {
                GroupSize::PerChannel => QScheme::Q4,
                GroupSize::Group(g) => QScheme::Q4Grouped(g),
            },
        }
    }

    fn n_k(&self) -> (usize, usize) {
        match self {
            Held::Natural(w) => (w.n(), w.k()),
            Held::Panels { panels, .. } => (panels.n(), panels.k()),
        }
    }
}

/// Two holdings are equal when their weights are, whatever their layout.
impl PartialEq for Held {
    fn eq(&self, other: &Held) -> bool {
        match (self, other) {
            (Held::Panels { panels: a, .. }, Held::Panels { panels: b, .. }) => a == b,
            _ => self.natural() == other.natural(),
        }
    }
}

impl Linear {
    /// A layer of `weight` and an optional `bias` (`out_features` long,
    /// finite). `name` labels its errors (a file's tensor prefix, say).
    /// Errors: a bias of the wrong length or with a non-finite element;
    /// a `QLINEAR_QUANT_MODE` that is not a mode or cannot run this weight;
    /// a `QLINEAR_INT8_TIER` that is unknown or unproven here.
    pub fn new(name: impl Into<String>, weight: QuantizedWeight, bias: Option<Vec<f32>>) -> Result<Self> {
        let name = name.into();
        if let Some(b) = &bias {
            check_bias(&name, weight.n(), b)?;
        }
        let mode = QuantLinearMode::for_new_layer(weight.scheme())?;
        let route = resolve(&name, mode, weight.scheme(), None)?;
        Ok(Linear {
            name,
            weight: Held::Natural(weight).settled(&route),
            bias,
            route,
        })
    }

    /// A layer of a weight already in the panel form (arranged in place
    /// from a file by [`crate::ModelFile::open_in_place`]), as
    /// [`Linear::new`] builds one of its natural form: held as it is when
    /// the layer's route runs the panel tiles, rebuilt in the natural form
    /// otherwise.
    #[cfg(feature = "formats")]
    pub(crate) fn from_panels(name: impl Into<String>, panels: PanelsQ4, bias: Option<Vec<f32>>) -> Result<Self> {
        let name = name.into();
        if let Some(b) = &bias {
            check_bias(&name, panels.n(), b)?;
        }
        let weight = Held::Panels {
            panels: Box::new(panels),
            natural: OnceLock::new(),
        };
        let scheme = weight.scheme();
        let mode = QuantLinearMode::for_new_layer(scheme)?;
        let route = resolve(&name, mode, scheme, None)?;
        Ok(Linear {
            name,
            weight: weight.settled(&route),
            bias,
            route,
        })
    }

    /// Quantizes a row-major f32 weight `[n, k]` with the canonical recipe of
    /// `scheme` (`docs/NUMERICS.md` §3) and builds the layer, as [`Linear::new`].
    pub fn from_f32(scheme: QScheme, n: usize, k: usize, weight: &[f32], bias: Option<&[f32]>) -> Result<Self> {
        let name = "linear";
        if Some(weight.len()) != n.checked_mul(k) {
            return Err(Error::WeightLength {
                layer: name.into(),
                n,
                k,
                found: weight.len(),
            });
        }
        let w = QuantizedWeight::quantize(scheme, n, k, weight)?;
        Linear::new(name, w, bias.map(<[f32]>::to_vec))
    }

    /// The same layer run in `mode`, its kernels resolved again for it.
    /// Refused with [`Error::ModeMismatch`] when the mode cannot run the
    /// weight (a Q8 mode on a Q4 weight, or the reverse).
    pub fn with_mode(mut self, mode: QuantLinearMode) -> Result<Self> {
        self.route = resolve(&self.name, mode, self.scheme(), None)?;
        self.weight = self.weight.settled(&self.route);
        Ok(self)
    }

    /// The same layer pinned to one proven `tier` for every regime, instead
    /// of the plan's picks (for comparing tiers on a model; the bits do not
    /// change, `docs/NUMERICS.md` §6). Errors: a tier that is not compiled
    /// in, absent from this CPU or unproven ([`crate::DispatchError::TierUnavailable`]).
    pub fn on_tier(mut self, tier: Int8Tier) -> Result<Self> {
        self.route = resolve(&self.name, self.route.mode(), self.scheme(), Some(tier))?;
        self.weight = self.weight.settled(&self.route);
        Ok(self)
    }

    /// The same layer under another name (used in its error messages).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// `y = x · Wᵀ + b` for `m` rows: `x` is `[m, in_features]` and `y`
    /// `[m, out_features]`, both row-major. The kernel of the layer's mode
    /// runs on the route resolved when the layer was built, and the bias is
    /// added in f32 as each output is stored, `y[i, j] = kernel + b[j]`: the
    /// kernel's bits plus one rounding, as if added afterwards.
    ///
    /// Work is split over output features on the **calling thread's rayon
    /// pool**: run it inside `ThreadPool::install` to choose the thread count.
    /// The bits never depend on the thread count, the row count `m`, or the
    /// tier (`docs/NUMERICS.md` §6).
    ///
    /// W8A8 and W4A8 quantize `x` into buffers the calling thread keeps for
    /// its next call (the codes, their scales and sums, and the copy of the
    /// rows a tier's tiles read in another layout, twice as wide for the
    /// paired layouts): each thread that calls `forward` holds at most about
    /// `3 · m · k` bytes plus `8 · m` of its largest call until it exits.
    ///
    /// Errors ([`Error::Forward`], naming the layer): a length of `x` or `y`
    /// that does not fit `m`, a NaN or ±Inf activation, a K beyond the proven
    /// bound. `y` is then untouched.
    pub fn forward(&self, x: &[f32], m: usize, y: &mut [f32]) -> Result<()> {
        let bias = self.bias.as_deref();
        match &self.weight {
            Held::Natural(w) => self.route.forward(x, m, w, bias, y),
            Held::Panels { panels, .. } => self.route.forward_panels(x, m, panels, bias, y),
        }
        .map_err(|source| Error::Forward {
            layer: self.name.clone(),
            source,
        })
    }

    /// [`Linear::forward`] for output features `rows` only: `y` is `[m,
    /// rows.len()]` and receives `y[i, j − rows.start]` for `j` in `rows`,
    /// computed **on the calling thread** (no rayon pool) with the bits of
    /// the same outputs of [`Linear::forward`] (`docs/NUMERICS.md` §7, law
    /// 3: each output is one thread's fixed arithmetic). For a runtime that
    /// keeps threads of its own and gives each a range of every layer, as
    /// llama.cpp's threads each take a share of every operation: a decode
    /// step's hundreds of small calls then pay no pool wake-ups. Every call
    /// checks and quantizes `x` itself (`m · k` values, small beside the
    /// weights it reads). Ranges that start on a multiple of 16 read whole
    /// weight panels (`Linear::holds_panels`); any range gives the same bits.
    ///
    /// Errors as [`Linear::forward`], and a range past `out_features`.
    pub fn forward_rows(&self, x: &[f32], m: usize, rows: std::ops::Range<usize>, y: &mut [f32]) -> Result<()> {
        let bias = self.bias.as_deref();
        let route = self.route.over_rows(rows);
        match &self.weight {
            Held::Natural(w) => route.forward(x, m, w, bias, y),
            Held::Panels { panels, .. } => route.forward_panels(x, m, panels, bias, y),
        }
        .map_err(|source| Error::Forward {
            layer: self.name.clone(),
            source,
        })
    }

    /// The code bytes its route reads (for [`crate::pack_weights`]).
    pub(crate) fn code_bytes(&self) -> &[u8] {
        self.weight.code_bytes()
    }

    /// The same layer reading its code bytes in place from `buffer` at
    /// `start`, where [`Linear::code_bytes`] were copied.
    pub(crate) fn with_shared_codes(&self, buffer: SharedBuffer, start: usize) -> Result<Linear> {
        Ok(Linear {
            name: self.name.clone(),
            weight: self.weight.with_shared_codes(buffer, start)?,
            bias: self.bias.clone(),
            route: self.route,
        })
    }

    /// The layer's name, as its errors show it.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The quantized weight `[out_features, in_features]`, in its natural
    /// layout (for a layer holding the panel form, rebuilt on the first call
    /// and kept: a second copy of the weight's bytes).
    pub fn weight(&self) -> &QuantizedWeight {
        self.weight.natural()
    }
    /// The weight's scheme (without building the natural form).
    pub fn scheme(&self) -> QScheme {
        self.weight.scheme()
    }
    /// Whether the layer holds its weight in the panel form
    /// ([`crate::tiers::PanelsQ4`]) its route's tiles read.
    pub fn holds_panels(&self) -> bool {
        matches!(self.weight, Held::Panels { .. })
    }
    /// Whether the code bytes [`Linear::forward`] reads are read in place
    /// from a shared buffer (a file opened by
    /// [`crate::ModelFile::open_in_place`], or the region of
    /// [`crate::pack_weights`]) rather than owned by the layer.
    pub fn codes_shared(&self) -> bool {
        self.weight.codes_shared()
    }
    /// Whether the weight's group scales are read in place from a shared
    /// buffer too: a weight grouped by 32 held in the panel form, read from
    /// a file opened by [`crate::ModelFile::open_in_place`] (its scales
    /// arranged there with its codes). Elsewhere scales are the layer's own.
    pub fn scales_shared(&self) -> bool {
        matches!(&self.weight, Held::Panels { panels, .. } if panels.scales_shared())
    }
    /// The bias, if any.
    pub fn bias(&self) -> Option<&[f32]> {
        self.bias.as_deref()
    }
    /// The mode [`Linear::forward`] runs.
    pub fn mode(&self) -> QuantLinearMode {
        self.route.mode()
    }
    /// The kernels [`Linear::forward`] runs, resolved when the layer was built.
    pub fn route(&self) -> &LayerRoute {
        &self.route
    }
    /// Input features `k`: the length of one row of `x`.
    pub fn in_features(&self) -> usize {
        self.weight.n_k().1
    }
    /// Output features `n`: the length of one row of `y`.
    pub fn out_features(&self) -> usize {
        self.weight.n_k().0
    }
}

/// The layer's kernels for `mode` on `weight`: the plan's, or one `tier`'s.
fn resolve(layer: &str, mode: QuantLinearMode, scheme: QScheme, tier: Option<Int8Tier>) -> Result<LayerRoute> {
    if !mode.accepts(scheme) {
        return Err(Error::ModeMismatch {
            layer: layer.into(),
            mode,
            needs: mode.weight_kind(),
            scheme,
        });
    }
    Ok(match tier {
        None => LayerRoute::planned_for(mode, scheme)?,
        Some(t) => LayerRoute::on_for(Route::for_tier(t)?, mode, scheme)?,
    })
}

fn check_bias(layer: &str, n: usize, b: &[f32]) -> Result<()> {
    if b.len() != n {
        return Err(Error::BiasLength {
            layer: layer.into(),
            expected: n,
            found: b.len(),
        });
    }
    if let Some((index, &value)) = b.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(Error::NonFiniteBias {
            layer: layer.into(),
            index,
            value,
        });
    }
    Ok(())
}
