//! The checked entry points. Every argument is validated before any kernel
//! runs (shapes, the K bound, codes in [-127, 127], finite activations and
//! scales); on error the output is untouched.

use std::cell::RefCell;

use qlinear_kernels_core::abi::panel::PANEL_GROUP;
use qlinear_kernels_core::{
    activation_group_sums_with, ActivationsF32, ActivationsQ8, Gemm, GemmF32Q4, GemmF32Q8, GemmQ8Panels, GemmQ8Q4,
    GemmQ8Q8, KernelTable, LayoutCache, OutputTile, PanelsQ4,
};
use qlinear_quant_recipe::{GroupSize, Q4Scales, QScheme, QuantizedMatrix, QuantizedMatrixQ4, QuantizedWeightRef};

use crate::driver::{drive, DEFAULT_PARALLEL_THRESHOLD};
use crate::plan::planned_tier;
use crate::selftest::{proven_for, refusal};
use crate::tier::tier_list;
use crate::{DispatchError, Int8Tier, KernelFamily, QuantLinearMode};

mod checks;
mod layer;
mod q4;

use checks::*;
pub use layer::*;

/// A proven tier and how calls on it are spread over threads: over the
/// calling thread's rayon pool, or (a route [`Route::over_rows`]) one range of
/// output features on the calling thread, for a runtime that splits the work
/// over threads of its own.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    tier: Int8Tier,
    table: &'static KernelTable,
    parallel_threshold: usize,
    /// `Some((start, end))`: only output features `start..end`, into a `y`
    /// of `[m, end − start]`, on the calling thread.
    rows: Option<(usize, usize)>,
}

/// Two routes are equal when they run the same tier with the same threshold
/// over the same rows (a tier has one table).
impl PartialEq for Route {
    fn eq(&self, other: &Route) -> bool {
        self.tier == other.tier && self.parallel_threshold == other.parallel_threshold && self.rows == other.rows
    }
}

impl Route {
    /// The route of `tier`, if it is compiled in and its CPU feature is
    /// present. Each entry point runs only after `tier` has passed the
    /// selftest's proof of the entry's family (proven when the family is
    /// first used in this process, `docs/NUMERICS.md` §8); a family the tier
    /// failed is [`DispatchError::TierUnavailable`] at the call.
    pub fn for_tier(tier: Int8Tier) -> Result<Route, DispatchError> {
        let table = tier.table().map_err(|reason| DispatchError::TierUnavailable {
            tier,
            reason,
            valid: tier_list(Int8Tier::ALL.into_iter().filter(|t| t.is_available())),
        })?;
        Ok(Route {
            tier,
            table,
            parallel_threshold: DEFAULT_PARALLEL_THRESHOLD,
            rows: None,
        })
    }

    /// The route the plan picks for `family` at `m` activation rows
    /// (proving and deciding the family now if this process has not).
    pub fn planned(family: KernelFamily, m: usize) -> Result<Route, DispatchError> {
        let route = Route::for_tier(planned_tier(family, m)?)?;
        route.proven(family)?;
        Ok(route)
    }

    /// `Ok` if this route's tier has passed the proofs `family` relies on
    /// (proving them now if this process has not), else why not. After the
    /// first call of a family, a few atomic loads.
    pub fn proven(&self, family: KernelFamily) -> Result<(), DispatchError> {
        match refusal(self.tier, family) {
            None => Ok(()),
            Some(reason) => Err(DispatchError::TierUnavailable {
                tier: self.tier,
                reason,
                valid: tier_list(proven_for(family)),
            }),
        }
    }

    /// The tier this route runs.
    pub fn tier(&self) -> Int8Tier {
        self.tier
    }

    /// The proven kernel table this route calls. Its entries check nothing
    /// beyond O(1) shape asserts: the checked methods of this type are the
    /// way in; the table is for timing the bare kernels (the per-call
    /// benchmark) and for tests.
    ///
    /// Every family of the table is proven on this tier first (now, if this
    /// process has not): a family it failed is
    /// [`DispatchError::TierUnavailable`].
    pub fn table(&self) -> Result<&'static KernelTable, DispatchError> {
        for family in KernelFamily::ALL {
            self.proven(family)?;
        }
        Ok(self.table)
    }

    /// Whether this route and `other` run the same kernel for `family` (one
    /// tier taking another's entry), so that their timings differ by noise
    /// alone.
    pub fn runs_same_kernel(&self, other: &Route, family: KernelFamily) -> bool {
        self.table.same_gemm(other.table, family)
    }

    /// Calls with fewer multiply-adds than this run on the calling thread
    /// (0: always split rows across the current rayon pool). Never changes bits.
    pub fn with_parallel_threshold(mut self, multiply_adds: usize) -> Self {
        self.parallel_threshold = multiply_adds;
        self
    }

    /// This route restricted to output features `rows`: every matrix entry
    /// point then computes `y[i, j − rows.start]` for `j` in `rows` only,
    /// into a `y` of `[m, rows.len()]`, on the calling thread (no pool), with
    /// the bits of the same outputs of a whole call (each output is computed
    /// by one thread with the tier's fixed arithmetic: `docs/NUMERICS.md` §7,
    /// law 3). A runtime that keeps threads of its own gives each a range.
    /// The activations are checked and quantized by every call, as in a
    /// whole one. A range past the matrix's `n` is
    /// [`DispatchError::RowsOutOfRange`] at the call.
    pub fn over_rows(mut self, rows: std::ops::Range<usize>) -> Self {
        self.rows = Some((rows.start, rows.end));
        self
    }

    /// The output features a call on `n` computes, and the name of `y`'s
    /// shape: `n` and `"y [m, n]"`, or the width of [`Route::over_rows`]'s
    /// range and `"y [m, rows]"`.
    fn out_width(&self, n: usize) -> Result<(usize, &'static str), DispatchError> {
        match self.rows {
            None => Ok((n, "y [m, n]")),
            Some((start, end)) if start <= end && end <= n => Ok((end - start, "y [m, rows]")),
            Some((start, end)) => Err(DispatchError::RowsOutOfRange { start, end, n }),
        }
    }

    /// Checks `y` for `m` rows of the outputs a call on `n` computes.
    fn check_y(&self, m: usize, n: usize, y: &[f32]) -> Result<(), DispatchError> {
        let (width, what) = self.out_width(n)?;
        check_len(what, m.saturating_mul(width), y.len())
    }

    /// Runs `kernel` over this route's output features of an `[m, n]`
    /// product: split over the pool, or the one range on this thread.
    fn drive(
        &self,
        (m, n, k): (usize, usize, usize),
        bias: &[f32],
        y: &mut [f32],
        kernel: impl Fn(std::ops::Range<usize>, &mut OutputTile<'_>) + Sync,
    ) {
        match self.rows {
            None => drive(m, n, k, self.parallel_threshold, bias, y, kernel),
            Some((start, end)) => {
                let bias = bias.get(start..end).unwrap_or(&[]);
                kernel(
                    start..end,
                    &mut OutputTile {
                        y,
                        ld: end - start,
                        bias,
                    },
                );
            }
        }
    }

    /// Exact `Σ a·b` of two int8 code rows in [-127, 127].
    pub fn dot_i32(&self, a: &[i8], b: &[i8]) -> Result<i32, DispatchError> {
        self.proven(KernelFamily::DotI8I8)?;
        check_len("dot_i32 b", a.len(), b.len())?;
        check_k(KernelFamily::DotI8I8, a.len())?;
        check_codes(a, a.len())?;
        check_codes(b, b.len())?;
        Ok((self.table.dot_i8_i8)(a, b))
    }

    /// Exact `Σ x·q` of int8 codes against one packed Q4 row of biased nibbles
    /// (`ceil(k/2)` bytes, low nibble first, odd-K pad nibble 8).
    pub fn dot_i32_q4(&self, x: &[i8], packed: &[u8]) -> Result<i32, DispatchError> {
        self.proven(KernelFamily::DotI8Q4)?;
        let k = x.len();
        check_len("dot_i32_q4 packed row bytes", k.div_ceil(2), packed.len())?;
        check_k(KernelFamily::DotI8Q4, k)?;
        check_codes(x, k)?;
        if k % 2 == 1 && packed[k / 2] >> 4 != 8 {
            return Err(DispatchError::BadPadNibble {
                k,
                nibble: packed[k / 2] >> 4,
            });
        }
        Ok((self.table.dot_i8_q4)(x, packed))
    }

    /// Quantizes `m` rows of `x` (`[m, k]`) with this tier's activation
    /// quantizer — byte for byte `quantize_row_q8` — into `codes` `[m, k]` and
    /// `scales` `[m]`.
    pub fn quantize_activations(
        &self,
        x: &[f32],
        m: usize,
        codes: &mut [i8],
        scales: &mut [f32],
    ) -> Result<(), DispatchError> {
        self.proven(KernelFamily::QuantizeActivations)?;
        check_len("activation scales", m, scales.len())?;
        check_len("activation codes", x.len(), codes.len())?;
        let k = x.len().checked_div(m).unwrap_or(0);
        check_len("activations", m.saturating_mul(k), x.len())?;
        self.quantize_rows(x, m, k, codes, scales)
    }

    /// Quantizes the rows of `x` (`[m, k]`, lengths checked) into the scratch
    /// buffers and returns the codes and scales (the sums buffer stays free
    /// for the caller); a row holding NaN or ±∞ is refused.
    fn quantize_into<'s>(
        &self,
        x: &[f32],
        m: usize,
        k: usize,
        codes: &'s mut Vec<i8>,
        scales: &'s mut Vec<f32>,
    ) -> Result<(&'s [i8], &'s [f32]), DispatchError> {
        // every code and scale is written below, so the buffers are only
        // sized, not cleared: zeroing a decode row's codes first cost a call
        // to memset each call
        codes.resize(x.len(), 0);
        scales.resize(m, 0.0);
        self.quantize_rows(x, m, k, codes, scales)?;
        Ok((codes, scales))
    }

    /// The tier's quantizer over each row of `x` (`[m, k]`, lengths checked).
    /// It checks each row's finiteness in its maximum's pass, so the rows are
    /// not read a third time for it; a row that fails is refused as
    /// [`check_finite`] would refuse it (the same row, column and value).
    fn quantize_rows(
        &self,
        x: &[f32],
        m: usize,
        k: usize,
        codes: &mut [i8],
        scales: &mut [f32],
    ) -> Result<(), DispatchError> {
        if k == 0 {
            scales[..m].fill(0.0);
            return Ok(());
        }
        // rows by index, not `chunks_exact`: each of those divides the
        // length by `k` to count its chunks (two 64-bit divisions a call)
        for (r, s) in scales[..m].iter_mut().enumerate() {
            let at = r * k..(r + 1) * k;
            let row = &x[at.clone()];
            match (self.table.quantize_row_q8)(row, &mut codes[at]) {
                Some(scale) => *s = scale,
                None => return non_finite_row(row, r),
            }
        }
        Ok(())
    }

    /// [`quant_linear`] on this route: f32 activations `x` `[m, k]` times `w`
    /// in `mode` (W8A8 and W4A8 quantize each activation row first), into `y`
    /// `[m, n]`. A mode that cannot run `w` is an error.
    pub fn quant_linear<'w>(
        &self,
        mode: QuantLinearMode,
        x: &[f32],
        m: usize,
        w: impl Into<QuantizedWeightRef<'w>>,
        y: &mut [f32],
    ) -> Result<(), DispatchError> {
        let w = w.into();
        let family = family_of(mode, w)?;
        self.proven(family)?;
        self.run_gemm(self.entry(mode, family)?, x, m, w, &[], y)
    }

    /// The table's entry for a matrix `family` (as `mode` resolves it).
    pub(super) fn entry(&self, mode: QuantLinearMode, family: KernelFamily) -> Result<Gemm, DispatchError> {
        // `family_for` gives matrix families only, which every table has
        self.table.gemm(family).ok_or(DispatchError::ModeWeightMismatch {
            mode,
            needs: mode.weight_kind(),
            got: "a matrix family",
        })
    }

    /// Runs `gemm` (an entry of this route's table, for `w`'s family) on f32
    /// activations `x` `[m, k]` (W8A8 and W4A8 quantize each row first),
    /// adding `bias` (`[n]`, or empty for none) to each output as it is
    /// stored. An entry of the other weight kind is
    /// [`DispatchError::ModeWeightMismatch`].
    pub(super) fn run_gemm(
        &self,
        gemm: Gemm,
        x: &[f32],
        m: usize,
        w: QuantizedWeightRef<'_>,
        bias: &[f32],
        y: &mut [f32],
    ) -> Result<(), DispatchError> {
        use QuantizedWeightRef as W;
        match (gemm, w) {
            (Gemm::Q8Q8(f), W::Q8(w)) => self.q8_dynamic(f, x, m, w, bias, y),
            (Gemm::F32Q8(f), W::Q8(w)) => self.w8a16(f, x, m, w, bias, y),
            (Gemm::Q8Q4(f), W::Q4(w)) => self.q4_dynamic(f, x, m, w, bias, y),
            (Gemm::F32Q4(f), W::Q4(w)) => self.w4a16(f, x, m, w, bias, y),
            (gemm, w) => Err(DispatchError::ModeWeightMismatch {
                mode: match gemm {
                    Gemm::Q8Q8(_) => QuantLinearMode::W8A8,
                    Gemm::Q8Q4(_) => QuantLinearMode::W4A8,
                    Gemm::F32Q8(_) => QuantLinearMode::W8A16,
                    Gemm::F32Q4(_) => QuantLinearMode::W4A16,
                },
                needs: if matches!(w, W::Q8(_)) { "Q4" } else { "Q8" },
                got: if matches!(w, W::Q8(_)) { "Q8" } else { "Q4" },
            }),
        }
    }

    /// W8A8: int8 activations `x_codes` `[m, k]` with per-row `x_scales` times a
    /// [`QuantizedMatrix`] `[n, k]`, into `y` `[m, n]`:
    /// `y = (Σ x·w as f32) * (x_scale * w_scale)`.
    pub fn linear_q8(
        &self,
        x_codes: &[i8],
        x_scales: &[f32],
        m: usize,
        w: &QuantizedMatrix,
        y: &mut [f32],
    ) -> Result<(), DispatchError> {
        self.proven(KernelFamily::W8A8)?;
        let (n, k) = (w.n(), w.k());
        check_len("x codes [m, k]", m.saturating_mul(k), x_codes.len())?;
        check_len("x scales [m]", m, x_scales.len())?;
        self.check_y(m, n, y)?;
        check_k(KernelFamily::W8A8, k)?;
        check_codes(x_codes, k)?;
        check_scales(x_scales)?;
        let f = self.table.gemm_w8a8;
        with_scratch(|s| self.run_w8a8(f, (x_codes, x_scales), m, w, &[], y, &mut s.spare))
    }

    #[allow(clippy::too_many_arguments)]
    fn run_w8a8(
        &self,
        f: GemmQ8Q8,
        (x_codes, x_scales): (&[i8], &[f32]),
        m: usize,
        w: &QuantizedMatrix,
        bias: &[f32],
        y: &mut [f32],
        spare: &mut Spare,
    ) -> Result<(), DispatchError> {
        let (n, k) = (w.n(), w.k());
        if m == 0 || n == 0 {
            return Ok(());
        }
        // one layout for every task of the call (docs/ARCHITECTURE.md)
        Spare::with_layouts(spare.parts().1, |layouts| {
            let act = ActivationsQ8::new(m, k, x_codes, x_scales, &[], k)?.with_layouts(layouts);
            self.drive((m, n, k), bias, y, |rows, t| f(&act, w, rows, t));
            Ok(())
        })
    }

    /// W8A8 with f32 activations `x` `[m, k]`, each row quantized first with
    /// the activation quantizer (identical to `quantize_row_q8`).
    pub fn linear_q8_dynamic(
        &self,
        x: &[f32],
        m: usize,
        w: &QuantizedMatrix,
        y: &mut [f32],
    ) -> Result<(), DispatchError> {
        self.proven(KernelFamily::W8A8)?;
        self.q8_dynamic(self.table.gemm_w8a8, x, m, w, &[], y)
    }

    fn q8_dynamic(
        &self,
        f: GemmQ8Q8,
        x: &[f32],
        m: usize,
        w: &QuantizedMatrix,
        bias: &[f32],
        y: &mut [f32],
    ) -> Result<(), DispatchError> {
        let (n, k) = (w.n(), w.k());
        check_len("x [m, k]", m.saturating_mul(k), x.len())?;
        self.check_y(m, n, y)?;
        check_k(KernelFamily::W8A8, k)?;
        with_scratch(|s| {
            let codes = self.quantize_into(x, m, k, &mut s.codes, &mut s.scales)?;
            self.run_w8a8(f, codes, m, w, bias, y, &mut s.spare)
        })
    }

    /// W8A16: f32 activations `x` `[m, k]` times a [`QuantizedMatrix`], the
    /// weight dequantized in registers: `y = w_scale · (8-lane Σ x·q)`.
    pub fn linear_w8a16(&self, x: &[f32], m: usize, w: &QuantizedMatrix, y: &mut [f32]) -> Result<(), DispatchError> {
        self.proven(KernelFamily::W8A16)?;
        self.w8a16(self.table.gemm_w8a16, x, m, w, &[], y)
    }

    fn w8a16(
        &self,
        f: GemmF32Q8,
        x: &[f32],
        m: usize,
        w: &QuantizedMatrix,
        bias: &[f32],
        y: &mut [f32],
    ) -> Result<(), DispatchError> {
        let (n, k) = (w.n(), w.k());
        check_len("x [m, k]", m.saturating_mul(k), x.len())?;
        self.check_y(m, n, y)?;
        check_finite(x, k)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let layouts = LayoutCache::default();
        let act = ActivationsF32::new(m, k, x)?.with_layouts(&layouts);
        self.drive((m, n, k), bias, y, |rows, t| f(&act, w, rows, t));
        Ok(())
    }

    /// W4A16: f32 activations `x` `[m, k]` times a [`QuantizedMatrixQ4`] (per
    /// channel or grouped): `y = Σ_g s_g · (8-lane Σ_{k∈g} x·q)`.
    pub fn linear_w4a16(&self, x: &[f32], m: usize, w: &QuantizedMatrixQ4, y: &mut [f32]) -> Result<(), DispatchError> {
        let f = match w.group_size() {
            GroupSize::PerChannel => self.table.gemm_w4a16,
            GroupSize::Group(_) => self.table.gemm_w4a16_grouped,
        };
        self.proven(q4_family(w, KernelFamily::W4A16, KernelFamily::W4A16Grouped))?;
        self.w4a16(f, x, m, w, &[], y)
    }

    fn w4a16(
        &self,
        f: GemmF32Q4,
        x: &[f32],
        m: usize,
        w: &QuantizedMatrixQ4,
        bias: &[f32],
        y: &mut [f32],
    ) -> Result<(), DispatchError> {
        let (n, k) = (w.n(), w.k());
        check_len("x [m, k]", m.saturating_mul(k), x.len())?;
        self.check_y(m, n, y)?;
        check_finite(x, k)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let layouts = LayoutCache::default();
        let act = ActivationsF32::new(m, k, x)?.with_layouts(&layouts);
        self.drive((m, n, k), bias, y, |rows, t| f(&act, w, rows, t));
        Ok(())
    }
}
