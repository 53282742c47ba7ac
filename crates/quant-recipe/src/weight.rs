//! The one quantized-weight type, its borrowed view, and the scheme names.

use std::fmt;
use std::str::FromStr;

use crate::{GroupSize, Q4Scales, QuantizedMatrix, QuantizedMatrixQ4, RecipeError};

/// A quantization scheme by its file name (`P.qscheme`): `q8`, `q4`, `q4g<G>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QScheme {
    /// Q8 per output channel: codes in `[-127, 127]`, one f32 scale per row.
    Q8,
    /// Q4 per output channel: codes in `[-7, 7]`, one f32 scale per row.
    Q4,
    /// Q4 with one f16 scale per group of this many columns (even, > 0).
    Q4Grouped(usize),
}

impl QScheme {
    /// The grouping of a Q4 scheme ([`GroupSize::PerChannel`] for `q8` and `q4`).
    pub fn group_size(self) -> GroupSize {
        match self {
            QScheme::Q4Grouped(g) => GroupSize::Group(g),
            _ => GroupSize::PerChannel,
        }
    }

    /// `[qweight shape, scales shape]` of an `[n, k]` weight on disk
    /// (`docs/FORMAT.md`). A grouped scheme whose group does not divide `k`
    /// has no valid shape; the result is then only a description.
    pub fn shapes(self, n: usize, k: usize) -> [Vec<usize>; 2] {
        match self {
            QScheme::Q8 => [vec![n, k], vec![n]],
            QScheme::Q4 => [vec![n, k.div_ceil(2)], vec![n]],
            QScheme::Q4Grouped(g) => [vec![n, k / 2], vec![n, k / g.max(1)]],
        }
    }

    /// Checks that an `[n, k]` weight can be stored in this scheme: for a
    /// grouped scheme the group is even, non-zero and divides `k`.
    pub fn validate(self, k: usize) -> Result<(), RecipeError> {
        self.group_size().validate(k)
    }
}

impl fmt::Display for QScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QScheme::Q8 => f.write_str("q8"),
            QScheme::Q4 => f.write_str("q4"),
            QScheme::Q4Grouped(g) => write!(f, "q4g{g}"),
        }
    }
}

impl FromStr for QScheme {
    type Err = RecipeError;
    /// `q8`, `q4`, or `q4g<G>` with `G` written in decimal digits, even and > 0.
    fn from_str(s: &str) -> Result<Self, RecipeError> {
        match s {
            "q8" => Ok(QScheme::Q8),
            "q4" => Ok(QScheme::Q4),
            _ => {
                let bad = || RecipeError::UnknownScheme { scheme: s.to_string() };
                let g: usize = s
                    .strip_prefix("q4g")
                    .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(bad)?
                    .parse()
                    .map_err(|_| bad())?;
                if g == 0 || g % 2 == 1 {
                    return Err(bad());
                }
                Ok(QScheme::Q4Grouped(g))
            }
        }
    }
}

/// A quantized weight matrix `[n, k]` (`n` output features, `k` input
/// features) of either scheme: the one owned weight type of qlinear, what a
/// file holds and what a layer runs.
#[derive(Debug, Clone, PartialEq)]
pub enum QuantizedWeight {
    /// Q8 per output channel.
    Q8(QuantizedMatrix),
    /// Q4, per output channel or grouped.
    Q4(QuantizedMatrixQ4),
}

/// A borrowed [`QuantizedWeight`]: what a kernel entry point takes, so a
/// caller that owns a bare [`QuantizedMatrix`] or [`QuantizedMatrixQ4`] need
/// not move it into the enum. Every reference converts with `into()`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum QuantizedWeightRef<'a> {
    /// Q8 per output channel.
    Q8(&'a QuantizedMatrix),
    /// Q4, per output channel or grouped.
    Q4(&'a QuantizedMatrixQ4),
}

impl QuantizedWeight {
    /// Quantizes a row-major f32 `[n, k]` matrix with the canonical recipe of
    /// `scheme` (`docs/NUMERICS.md` §3): [`QuantizedMatrix::quantize`] or
    /// [`QuantizedMatrixQ4::quantize`]. Errors: a length that is not `n * k`,
    /// a non-finite value (naming row and column), a group that does not fit
    /// `k`, an f16 scale overflow.
    pub fn quantize(scheme: QScheme, n: usize, k: usize, w: &[f32]) -> Result<Self, RecipeError> {
        Self::quantize_with(crate::Recipe::Canonical, scheme, n, k, w)
    }

    /// [`QuantizedWeight::quantize`] with a named `recipe` (`docs/NUMERICS.md`
    /// §3.6–§3.7): the same format, scales and codes chosen differently.
    /// `Recipe::ActivationAware` needs [`QuantizedWeight::quantize_weighted`]
    /// ([`RecipeError::ImportanceRequired`] here).
    pub fn quantize_with(
        recipe: crate::Recipe,
        scheme: QScheme,
        n: usize,
        k: usize,
        w: &[f32],
    ) -> Result<Self, RecipeError> {
        Self::quantize_rows(recipe, None, scheme, n, k, w)
    }

    /// The activation-aware search (`docs/NUMERICS.md` §3.8): as
    /// [`QuantizedWeight::quantize_with`], with column `c`'s squared error
    /// weighted by `importance[c]` in every row. `importance` holds `k`
    /// finite values `>= 0` (e.g. the mean `x²` of each input over
    /// calibration activations); otherwise a [`crate::RecipeError`] names
    /// the length or the column.
    pub fn quantize_weighted(
        scheme: QScheme,
        n: usize,
        k: usize,
        w: &[f32],
        importance: &[f32],
    ) -> Result<Self, RecipeError> {
        crate::check_len("importance", k, importance.len())?;
        Self::quantize_rows(crate::Recipe::ActivationAware, Some(importance), scheme, n, k, w)
    }

    /// GPTQ (`docs/NUMERICS.md` §3.9): as [`QuantizedWeight::quantize_with`],
    /// each row quantized column by column with its rounding errors spread
    /// by `factor`, the [`crate::GptqFactor`] of the layer's hessian (its
    /// `k` must be this weight's). Errors as the other recipes', naming the
    /// row.
    pub fn quantize_gptq(
        scheme: QScheme,
        n: usize,
        k: usize,
        w: &[f32],
        factor: &crate::GptqFactor,
    ) -> Result<Self, RecipeError> {
        crate::check_len("weights", crate::checked_elems(n, k)?, w.len())?;
        crate::check_len("the hessian's k", k, factor.k())?;
        let rows = || (0..n).map(|r| &w[r * k..(r + 1) * k]);
        match scheme {
            QScheme::Q8 => {
                let mut codes = vec![0i8; n * k];
                let mut scales = Vec::with_capacity(n);
                for (r, src) in rows().enumerate() {
                    let dst = &mut codes[r * k..(r + 1) * k];
                    scales.push(crate::quantize_row_q8_gptq(src, factor, dst).map_err(|e| e.at_row(r))?);
                }
                QuantizedMatrix::from_parts(n, k, codes, scales).map(QuantizedWeight::Q8)
            }
            QScheme::Q4 => {
                let stride = crate::packed_row_bytes(k);
                let mut packed = vec![0u8; n * stride];
                let mut scales = Vec::with_capacity(n);
                for (r, src) in rows().enumerate() {
                    let dst = &mut packed[r * stride..(r + 1) * stride];
                    scales.push(crate::quantize_row_q4_gptq(src, factor, dst).map_err(|e| e.at_row(r))?);
                }
                QuantizedMatrixQ4::from_parts_biased(n, k, packed, Q4Scales::PerChannel(scales))
                    .map(QuantizedWeight::Q4)
            }
            QScheme::Q4Grouped(g) => {
                crate::GroupSize::Group(g).validate(k)?;
                let (stride, groups) = (k / 2, k / g);
                let mut packed = vec![0u8; n * stride];
                let mut scales = vec![half::f16::ZERO; n * groups];
                for (r, src) in rows().enumerate() {
                    let dst = &mut packed[r * stride..(r + 1) * stride];
                    let sdst = &mut scales[r * groups..(r + 1) * groups];
                    crate::quantize_row_q4_grouped_gptq(src, factor, g, dst, sdst).map_err(|e| e.at_row(r))?;
                }
                QuantizedMatrixQ4::from_parts_biased(n, k, packed, Q4Scales::Grouped { group: g, scales })
                    .map(QuantizedWeight::Q4)
            }
        }
    }

    fn quantize_rows(
        recipe: crate::Recipe,
        importance: Option<&[f32]>,
        scheme: QScheme,
        n: usize,
        k: usize,
        w: &[f32],
    ) -> Result<Self, RecipeError> {
        match scheme {
            QScheme::Q8 => QuantizedMatrix::quantize_rows(recipe, importance, n, k, w).map(QuantizedWeight::Q8),
            _ => QuantizedMatrixQ4::quantize_rows(recipe, importance, n, k, scheme.group_size(), w)
                .map(QuantizedWeight::Q4),
        }
    }

    /// The borrowed view.
    pub fn view(&self) -> QuantizedWeightRef<'_> {
        match self {
            QuantizedWeight::Q8(m) => QuantizedWeightRef::Q8(m),
            QuantizedWeight::Q4(m) => QuantizedWeightRef::Q4(m),
        }
    }

    /// Output features (rows).
    pub fn n(&self) -> usize {
        self.view().n()
    }

    /// Input features (columns).
    pub fn k(&self) -> usize {
        self.view().k()
    }

    /// `(n, k)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.n(), self.k())
    }

    /// The scheme that stores this weight.
    pub fn scheme(&self) -> QScheme {
        self.view().scheme()
    }

    /// Whether the codes (Q8 codes or packed Q4 bytes) are read in place
    /// from a shared buffer, a model file's memory, rather than owned.
    pub fn codes_shared(&self) -> bool {
        match self {
            QuantizedWeight::Q8(m) => m.codes_shared(),
            QuantizedWeight::Q4(m) => m.packed_shared(),
        }
    }

    /// The code bytes: Q8 codes as bytes (two's complement), or the packed
    /// Q4 bytes (biased nibbles), row-major, [`QuantizedWeight::code_len`]
    /// of them. What [`QuantizedWeight::with_shared_codes`] reads back.
    pub fn code_bytes(&self) -> &[u8] {
        match self {
            QuantizedWeight::Q8(m) => bytemuck::cast_slice(m.codes()),
            QuantizedWeight::Q4(m) => m.packed(),
        }
    }

    /// How many code bytes the weight holds: `n · k` (Q8) or `n · ceil(k / 2)` (Q4).
    pub fn code_len(&self) -> usize {
        self.code_bytes().len()
    }

    /// The same weight (shape, scheme, scales) reading its codes in place
    /// from `buffer[start .. start + code_len()]` instead: the layout of
    /// [`QuantizedWeight::code_bytes`], checked as the constructors check
    /// ([`QuantizedMatrix::from_codes`], [`QuantizedMatrixQ4::from_codes_biased`]).
    /// Copy `code_bytes()` there first to get the same weight; other bytes
    /// make another weight. Errors: a range outside the buffer
    /// ([`RecipeError::LengthMismatch`]), a code the scheme refuses.
    pub fn with_shared_codes(&self, buffer: crate::SharedBuffer, start: usize) -> Result<Self, RecipeError> {
        let range = start..start.saturating_add(self.code_len());
        Ok(match self {
            QuantizedWeight::Q8(m) => QuantizedWeight::Q8(QuantizedMatrix::from_codes(
                m.n(),
                m.k(),
                crate::Codes::shared(buffer, range)?,
                m.scales().to_vec(),
            )?),
            QuantizedWeight::Q4(m) => QuantizedWeight::Q4(QuantizedMatrixQ4::from_codes_biased(
                m.n(),
                m.k(),
                crate::Codes::shared(buffer, range)?,
                m.scales().clone(),
            )?),
        })
    }

    /// The weight in f32, `[n, k]` row-major: code times scale, exactly as the
    /// float kernels see it.
    pub fn dequantize(&self) -> Vec<f32> {
        match self {
            QuantizedWeight::Q8(m) => m.dequantize(),
            QuantizedWeight::Q4(m) => m.dequantize(),
        }
    }

    /// Row `r` in f32 into `out`: the same values as row `r` of
    /// [`QuantizedWeight::dequantize`], for a runtime that reads a
    /// quantized table (a token embedding) one row at a time.
    /// Errors: `r >= n` ([`RecipeError::RowOutOfRange`]), `out.len() != k`
    /// ([`RecipeError::LengthMismatch`]); `out` is untouched then.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<(), RecipeError> {
        if r >= self.n() {
            return Err(RecipeError::RowOutOfRange { row: r, rows: self.n() });
        }
        crate::check_len("dequantized row", self.k(), out.len())?;
        match self {
            QuantizedWeight::Q8(m) => m.dequantize_row_into(r, out),
            QuantizedWeight::Q4(m) => m.dequantize_row_into(r, out),
        }
        Ok(())
    }
}

impl QuantizedWeightRef<'_> {
    /// Output features (rows).
    pub fn n(&self) -> usize {
        match self {
            QuantizedWeightRef::Q8(m) => m.n(),
            QuantizedWeightRef::Q4(m) => m.n(),
        }
    }

    /// Input features (columns).
    pub fn k(&self) -> usize {
        match self {
            QuantizedWeightRef::Q8(m) => m.k(),
            QuantizedWeightRef::Q4(m) => m.k(),
        }
    }

    /// The scheme that stores this weight.
    pub fn scheme(&self) -> QScheme {
        match self {
            QuantizedWeightRef::Q8(_) => QScheme::Q8,
            QuantizedWeightRef::Q4(m) => match m.group_size() {
                GroupSize::PerChannel => QScheme::Q4,
                GroupSize::Group(g) => QScheme::Q4Grouped(g),
            },
        }
    }
}

impl From<QuantizedMatrix> for QuantizedWeight {
    fn from(m: QuantizedMatrix) -> Self {
        QuantizedWeight::Q8(m)
    }
}

impl From<QuantizedMatrixQ4> for QuantizedWeight {
    fn from(m: QuantizedMatrixQ4) -> Self {
        QuantizedWeight::Q4(m)
    }
}

impl<'a> From<&'a QuantizedWeight> for QuantizedWeightRef<'a> {
    fn from(w: &'a QuantizedWeight) -> Self {
        w.view()
    }
}

impl<'a> From<&'a QuantizedMatrix> for QuantizedWeightRef<'a> {
    fn from(m: &'a QuantizedMatrix) -> Self {
        QuantizedWeightRef::Q8(m)
    }
}

impl<'a> From<&'a QuantizedMatrixQ4> for QuantizedWeightRef<'a> {
    fn from(m: &'a QuantizedMatrixQ4) -> Self {
        QuantizedWeightRef::Q4(m)
    }
}
