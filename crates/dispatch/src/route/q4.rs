//! The W4A8 entry points: int8 activations times a Q4 weight, natural or
//! in the panel form, per channel or grouped.

use super::*;

impl Route {
    /// W4A8: int8 activations times a [`QuantizedMatrixQ4`] (per channel or
    /// grouped), into `y` `[m, n]`. Per channel:
    /// `y = (acc as f32) * (x_scale * w_scale)`; grouped:
    /// `y = (Σ_g (acc_g as f32) * s_g) * x_scale`.
    pub fn linear_q4(
        &self,
        x_codes: &[i8],
        x_scales: &[f32],
        m: usize,
        w: &QuantizedMatrixQ4,
        y: &mut [f32],
    ) -> Result<(), DispatchError> {
        self.proven(q4_family(w, KernelFamily::W4A8, KernelFamily::W4A8Grouped))?;
        let (n, k) = (w.n(), w.k());
        check_len("x codes [m, k]", m.saturating_mul(k), x_codes.len())?;
        check_len("x scales [m]", m, x_scales.len())?;
        self.check_y(m, n, y)?;
        Self::check_k_q4(w)?;
        check_codes(x_codes, k)?;
        check_scales(x_scales)?;
        let f = self.w4a8_entry(w);
        with_scratch(|s| self.run_w4a8_with(f, (x_codes, x_scales), m, w, &[], y, &mut s.spare))
    }

    fn check_k_q4(w: &QuantizedMatrixQ4) -> Result<(), DispatchError> {
        match w.group_size() {
            GroupSize::PerChannel => check_k(KernelFamily::W4A8, w.k()),
            GroupSize::Group(g) => check_k(KernelFamily::W4A8Grouped, g),
        }
    }

    /// The table's W4A8 entry for `w`: per channel or grouped.
    fn w4a8_entry(&self, w: &QuantizedMatrixQ4) -> GemmQ8Q4 {
        match w.group_size() {
            GroupSize::PerChannel => self.table.gemm_w4a8,
            GroupSize::Group(_) => self.table.gemm_w4a8_grouped,
        }
    }

    /// W4A8 entry `f` on quantized rows `(codes, scales)`, their group sums
    /// (per `w`'s group, or the row for per channel) and layout written into
    /// `spare`.
    #[allow(clippy::too_many_arguments)]
    fn run_w4a8_with(
        &self,
        f: GemmQ8Q4,
        (x_codes, x_scales): (&[i8], &[f32]),
        m: usize,
        w: &QuantizedMatrixQ4,
        bias: &[f32],
        y: &mut [f32],
        spare: &mut Spare,
    ) -> Result<(), DispatchError> {
        let (n, k) = (w.n(), w.k());
        if m == 0 || n == 0 {
            return Ok(());
        }
        let sum_group = match w.scales() {
            Q4Scales::PerChannel(_) => k,
            Q4Scales::Grouped { group, .. } => *group,
        };
        let (sums, layout) = spare.parts();
        activation_group_sums_with(self.table.group_sums, x_codes, m, k, sum_group, sums);
        Spare::with_layouts(layout, |layouts| {
            let act = ActivationsQ8::new(m, k, x_codes, x_scales, sums, sum_group)?.with_layouts(layouts);
            self.drive((m, n, k), bias, y, |rows, t| f(&act, w, rows, t));
            Ok(())
        })
    }

    /// W4A8 with f32 activations `x` `[m, k]`, each row quantized first.
    pub fn linear_q4_dynamic(
        &self,
        x: &[f32],
        m: usize,
        w: &QuantizedMatrixQ4,
        y: &mut [f32],
    ) -> Result<(), DispatchError> {
        self.proven(q4_family(w, KernelFamily::W4A8, KernelFamily::W4A8Grouped))?;
        self.q4_dynamic(self.w4a8_entry(w), x, m, w, &[], y)
    }

    pub(super) fn q4_dynamic(
        &self,
        f: GemmQ8Q4,
        x: &[f32],
        m: usize,
        w: &QuantizedMatrixQ4,
        bias: &[f32],
        y: &mut [f32],
    ) -> Result<(), DispatchError> {
        Self::check_k_q4(w)?;
        self.quantized(x, m, w.n(), w.k(), y, |codes, y, spare| {
            self.run_w4a8_with(f, codes, m, w, bias, y, spare)
        })
    }

    /// Checks the lengths of `x` `[m, k]` and `y` `[m, n]`, quantizes `x`
    /// into this thread's scratch (refusing a non-finite row) and runs `f` on
    /// the codes and scales, `y` and the scratch's other buffers.
    fn quantized(
        &self,
        x: &[f32],
        m: usize,
        n: usize,
        k: usize,
        y: &mut [f32],
        f: impl FnOnce((&[i8], &[f32]), &mut [f32], &mut Spare) -> Result<(), DispatchError>,
    ) -> Result<(), DispatchError> {
        check_len("x [m, k]", m.saturating_mul(k), x.len())?;
        self.check_y(m, n, y)?;
        with_scratch(|s| {
            let codes = self.quantize_into(x, m, k, &mut s.codes, &mut s.scales)?;
            f(codes, y, &mut s.spare)
        })
    }

    /// W4A8 on the weight's panel form ([`PanelsQ4`], grouped by 32 or per
    /// channel): f32 activations `x` `[m, k]`, each row quantized first,
    /// into `y` `[m, n]`, with the bits of [`Route::linear_q4_dynamic`] on
    /// the natural matrix. Errors: the lengths and activations as there, K
    /// past the family's bound, and [`DispatchError::NoPanelTiles`] on a
    /// tier without panel tiles for the weight's family.
    pub fn linear_q4_panels(&self, x: &[f32], m: usize, w: &PanelsQ4, y: &mut [f32]) -> Result<(), DispatchError> {
        let family = panel_family(w);
        self.proven(family)?;
        let f = self.table.panels(family).ok_or(DispatchError::NoPanelTiles {
            tier: self.tier,
            family,
        })?;
        self.q4_panels(f, x, m, w, &[], y)
    }

    /// Whether this route's tier has panel tiles ([`PanelsQ4`]) for
    /// `family` (W4A8 grouped or per channel; no other family has any).
    pub fn has_panels(&self, family: KernelFamily) -> bool {
        self.table.panels(family).is_some()
    }

    /// Panel entry `f` on `w` (the entry of `w`'s family: grouped or per
    /// channel), with its bias.
    pub(super) fn q4_panels(
        &self,
        f: GemmQ8Panels,
        x: &[f32],
        m: usize,
        w: &PanelsQ4,
        bias: &[f32],
        y: &mut [f32],
    ) -> Result<(), DispatchError> {
        let (n, k) = (w.n(), w.k());
        // per channel one exact sum spans the row, so K is bounded (a
        // group's 32 columns always fit), and the bias is cancelled by the
        // row's one activation sum
        let sum_group = match w.group_size() {
            GroupSize::PerChannel => {
                check_k(KernelFamily::W4A8, k)?;
                k
            }
            GroupSize::Group(_) => PANEL_GROUP,
        };
        self.quantized(x, m, n, k, y, |(x_codes, x_scales), y, spare| {
            if m == 0 || n == 0 {
                return Ok(());
            }
            let sums = spare.parts().0;
            activation_group_sums_with(self.table.group_sums, x_codes, m, k, sum_group, sums);
            // no layout cache: the panel tiles read the rows as they are
            // (their nibble pairing matches them), so a cache would only be
            // made and taken apart again, about 100 instructions a call
            let act = ActivationsQ8::new(m, k, x_codes, x_scales, sums, sum_group)?;
            self.drive((m, n, k), bias, y, |rows, t| f(&act, w, rows, t));
            Ok(())
        })
    }
}
