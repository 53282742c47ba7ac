use std::ops::Range;

use qlinear_quant_recipe::{QuantizedMatrix, QuantizedMatrixQ4};

use crate::frame::{LayoutCache, Shapes};
use crate::panels::GemmQ8Panels;

/// Largest K a W8A8 reduction accepts: every partial sum of `Σ x·w` with
/// `|x|, |w| <= 127` fits i32 (`127 · 127 · K <= i32::MAX`).
pub const MAX_K_W8A8: usize = i32::MAX as usize / (127 * 127);
/// Largest K (or group length) a W4A8 reduction accepts: the biased form
/// `Σ x·b` with `|x| <= 127`, nibble `b <= 15` fits i32 (`15 · 127 · K <=
/// i32::MAX`); the bias correction `8·Σx` is smaller still.
pub const MAX_K_W4A8: usize = i32::MAX as usize / (15 * 127);

/// Int8 activation rows: `m × k` codes in `[-127, 127]`, one f32 scale per row,
/// and the sums of the codes per group of `sum_group` columns (`[m, k /
/// sum_group]`, or one sum per row when `sum_group == k`), which cancel the Q4
/// bias (`Σ x·(q + 8) − 8·Σ x`).
///
/// Built by [`ActivationsQ8::new`], which checks the lengths; the fields are
/// public to read. [`ActivationsQ8::with_layouts`] attaches a [`LayoutCache`]
/// so that the tasks of one call share the rows a family's tiles read
/// instead of each laying them out again.
#[derive(Debug, Clone, Copy)]
pub struct ActivationsQ8<'a> {
    /// Activation rows.
    pub m: usize,
    /// Columns per row.
    pub k: usize,
    /// `[m, k]` codes in `[-127, 127]` (the entry points refuse -128).
    pub codes: &'a [i8],
    /// `[m]` scales, finite and >= 0: `x ≈ code · scale`.
    pub scales: &'a [f32],
    /// `[m, k / sum_group]` sums of the codes per group (Q4 families).
    pub sums: &'a [i32],
    /// Columns per sum: `k` per channel, the group size for grouped Q4.
    pub sum_group: usize,
    /// Sums a row: `k / sum_group` (1 when `k == 0`, 0 without sums), found
    /// once here so that the frame divides by nothing per call (a 64-bit
    /// division is 10–18 cycles, and a decode call's fixed part is a few
    /// hundred).
    per_row: usize,
    layouts: Option<&'a LayoutCache>,
}

impl<'a> ActivationsQ8<'a> {
    /// `m` rows of `k` codes with their scales and the sums of their codes
    /// per `sum_group` columns (`sums` empty when no Q4 family reads them,
    /// W8A8). Errors ([`KernelError::Shape`], [`KernelError::SumGroup`]):
    /// `codes` not `m · k` long, `scales` not `m`, a `sum_group` of 0 or not
    /// dividing `k` (when `k > 0`), `sums` neither empty nor `m · k /
    /// sum_group` (`m` when `k == 0`). The values are not checked here: the
    /// dispatch entry points refuse code -128 and non-finite scales.
    pub fn new(
        m: usize,
        k: usize,
        codes: &'a [i8],
        scales: &'a [f32],
        sums: &'a [i32],
        sum_group: usize,
    ) -> Result<Self, KernelError> {
        shape("activation codes [m, k]", m.checked_mul(k), codes.len())?;
        shape("activation scales [m]", Some(m), scales.len())?;
        // per channel (`sum_group == k`) the one sum needs no division
        let per_row = match (k, sum_group) {
            (0, _) => 1,
            (_, g) if g == k => 1,
            (_, 0) => return Err(KernelError::SumGroup { group: sum_group, k }),
            (_, g) if !k.is_multiple_of(g) => return Err(KernelError::SumGroup { group: sum_group, k }),
            (_, g) => k / g,
        };
        // no sums (W8A8): rows of none
        let per_row = if sums.is_empty() { 0 } else { per_row };
        if !sums.is_empty() {
            shape("activation sums [m, k / sum_group]", m.checked_mul(per_row), sums.len())?;
        }
        Ok(ActivationsQ8 {
            m,
            k,
            codes,
            scales,
            sums,
            sum_group,
            per_row,
            layouts: None,
        })
    }

    /// The same rows, sharing `cache` for the layouts the tiles read: the
    /// first task of a call that needs a layout writes it there, the others
    /// read it. One cache serves one set of activations (a cache filled from
    /// other rows is recognised and not used).
    pub fn with_layouts(mut self, cache: &'a LayoutCache) -> Self {
        self.layouts = Some(cache);
        self
    }

    /// The cache attached by [`ActivationsQ8::with_layouts`], if any.
    pub(crate) fn layouts(&self) -> Option<&'a LayoutCache> {
        self.layouts
    }

    /// Codes of activation row `i`.
    #[inline]
    pub fn row(&self, i: usize) -> &'a [i8] {
        &self.codes[i * self.k..(i + 1) * self.k]
    }
    /// The bias-correction sums of row `i` (one per sum group).
    #[inline]
    pub fn row_sums(&self, i: usize) -> &'a [i32] {
        &self.sums[i * self.per_row..(i + 1) * self.per_row]
    }
    /// Panics unless the buffers match the shape (O(1)), the sums as
    /// [`ActivationsQ8::new`] found them (a field changed since is refused).
    pub fn check(&self) {
        assert_eq!(self.codes.len(), self.m * self.k, "activation codes");
        assert_eq!(self.scales.len(), self.m, "activation scales");
        assert!(
            self.sums.is_empty() || self.sums.len() == self.m * self.per_row,
            "activation sums"
        );
    }
}

fn shape(what: &'static str, expected: Option<usize>, actual: usize) -> Result<(), KernelError> {
    match expected {
        Some(e) if e == actual => Ok(()),
        _ => Err(KernelError::Shape {
            what,
            expected: expected.unwrap_or(usize::MAX),
            actual,
        }),
    }
}

/// What an activation builder refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// A buffer of the wrong length for the shape (`expected` is
    /// `usize::MAX` when the shape's element count overflows).
    #[error("{what}: expected {expected} elements, got {actual}")]
    Shape {
        /// The buffer, with its shape.
        what: &'static str,
        /// The length the shape needs.
        expected: usize,
        /// The length given.
        actual: usize,
    },
    /// A sum group of 0 or one that does not divide K.
    #[error("activation sums per {group} columns do not divide K = {k}")]
    SumGroup {
        /// The columns per sum.
        group: usize,
        /// The row length.
        k: usize,
    },
}

/// f32 activation rows, `m × k` row-major. Built by [`ActivationsF32::new`];
/// [`ActivationsF32::with_layouts`] shares the chunked rows between the
/// tasks of a call as for [`ActivationsQ8`].
#[derive(Debug, Clone, Copy)]
pub struct ActivationsF32<'a> {
    /// Activation rows.
    pub m: usize,
    /// Columns per row.
    pub k: usize,
    /// `[m, k]` finite values (the entry points refuse NaN and ±Inf).
    pub x: &'a [f32],
    layouts: Option<&'a LayoutCache>,
}

impl<'a> ActivationsF32<'a> {
    /// `m` rows of `k` values. Errors: `x` not `m · k` long
    /// ([`KernelError::Shape`]). The values are not checked here (the
    /// dispatch entry points refuse NaN and ±Inf).
    pub fn new(m: usize, k: usize, x: &'a [f32]) -> Result<Self, KernelError> {
        shape("activations [m, k]", m.checked_mul(k), x.len())?;
        Ok(ActivationsF32 { m, k, x, layouts: None })
    }

    /// The same rows, sharing `cache` for the layouts the tiles read (see
    /// [`ActivationsQ8::with_layouts`]).
    pub fn with_layouts(mut self, cache: &'a LayoutCache) -> Self {
        self.layouts = Some(cache);
        self
    }

    /// The cache attached by [`ActivationsF32::with_layouts`], if any.
    pub(crate) fn layouts(&self) -> Option<&'a LayoutCache> {
        self.layouts
    }

    /// Activation row `i`.
    #[inline]
    pub fn row(&self, i: usize) -> &'a [f32] {
        &self.x[i * self.k..(i + 1) * self.k]
    }
    /// Panics unless the buffer matches the shape (O(1)).
    pub fn check(&self) {
        assert_eq!(self.x.len(), self.m * self.k, "activations");
    }
}

/// Where a kernel writes: `y[i · ld + (r − rows.start)]` for activation row `i`
/// and output feature `r` in `rows`, plus `bias[r − rows.start]` when the
/// tile has a bias (the layer's bias, added as each output is stored: one
/// f32 addition of the kernel's value, the bits of adding it afterwards).
#[derive(Debug)]
pub struct OutputTile<'a> {
    /// The output buffer.
    pub y: &'a mut [f32],
    /// Its row stride in elements.
    pub ld: usize,
    /// The bias of the tile's output features (`width` long), or empty.
    pub bias: &'a [f32],
}

impl<'a> OutputTile<'a> {
    /// A tile of `y` with row stride `ld` and no bias.
    pub fn new(y: &'a mut [f32], ld: usize) -> Self {
        OutputTile { y, ld, bias: &[] }
    }
    /// Panics unless `m` rows of `width` outputs fit, and the bias, if any,
    /// is `width` long (O(1)).
    pub fn check(&self, m: usize, width: usize) {
        assert!(width <= self.ld || m <= 1, "output tile stride");
        if m > 0 && width > 0 {
            assert!(self.y.len() >= (m - 1) * self.ld + width, "output tile length");
        }
        assert!(self.bias.is_empty() || self.bias.len() == width, "output tile bias");
    }
    /// Writes output `j` (relative to the tile's first feature) of activation
    /// row `i`: `v`, plus the bias of feature `j` when the tile has one.
    #[inline]
    pub fn set(&mut self, i: usize, j: usize, v: f32) {
        self.y[i * self.ld + j] = match self.bias.get(j) {
            Some(b) => v + b,
            None => v,
        };
    }
    /// [`OutputTile::set_run`] of a run whose length the compiler sees: the
    /// bias sums are made as one array and stored whole. A decode tile's 16
    /// outputs through `set_run` came out as vectors of 4, 4, 4, 1, 2 and 1
    /// lanes (LLVM's SLP vectorizer on the chunked loops), 69 guest
    /// instructions with the scaling before them, 37 this way (NEON, qemu).
    /// Panics, as `set_run` does, when the run ends past the end of `y`.
    #[inline]
    pub fn set_array<const N: usize>(&mut self, i: usize, j0: usize, values: &[f32; N]) {
        let at = i * self.ld + j0;
        let out: &mut [f32; N] = (&mut self.y[at..at + N]).try_into().expect("N outputs");
        match self.bias.get(j0..j0 + N) {
            Some(b) => {
                let b: &[f32; N] = b.try_into().expect("N biases");
                *out = std::array::from_fn(|j| values[j] + b[j]);
            }
            None => *out = *values,
        }
    }
    /// Writes outputs `j0 .. j0 + values.len()` of activation row `i`, each
    /// as [`OutputTile::set`] would (one bounds check and one bias test for
    /// the run, not per output).
    #[inline]
    pub fn set_run(&mut self, i: usize, j0: usize, values: &[f32]) {
        let at = i * self.ld + j0;
        let out = &mut self.y[at..at + values.len()];
        match self.bias.get(j0..j0 + values.len()) {
            Some(b) => {
                // four at a time, each four's sums made before they are
                // stored: the compiler cannot tell that `y` and `bias` never
                // overlap, so an output stored before the next bias load
                // kept the loop to one lane (48 instructions for 16
                // outputs; callgrind, AMD EPYC Zen 4, family 25 model 17)
                let (mut o4, mut v4, mut b4) = (out.chunks_exact_mut(4), values.chunks_exact(4), b.chunks_exact(4));
                for ((o, v), b) in (&mut o4).zip(&mut v4).zip(&mut b4) {
                    let sums: [f32; 4] = std::array::from_fn(|j| v[j] + b[j]);
                    o.copy_from_slice(&sums);
                }
                for ((o, v), b) in o4.into_remainder().iter_mut().zip(v4.remainder()).zip(b4.remainder()) {
                    *o = v + b;
                }
            }
            None => {
                // a run is a tile's width (at most 16 values): copied four at
                // a time, a length the compiler sees, so no call to memmove,
                // which cost more than the copy (3 % of SmolLM2's prefill on
                // the Intel Xeon, family 6 model 207, before `f062aa0`:
                // docs/benchmarks/history.md)
                let (mut o4, mut v4) = (out.chunks_exact_mut(4), values.chunks_exact(4));
                for (o, v) in (&mut o4).zip(&mut v4) {
                    o.copy_from_slice(v);
                }
                for (o, v) in o4.into_remainder().iter_mut().zip(v4.remainder()) {
                    *o = *v;
                }
            }
        }
    }
}

/// `Σ a·b` of two equal-length code rows, exact in i32 (`len <= MAX_K_W8A8`).
pub type DotI8I8 = fn(&[i8], &[i8]) -> i32;
/// `Σ x·q` of codes `x` against a packed biased Q4 row (`ceil(len/2)` bytes,
/// odd pad 8), exact in i32 (`len <= MAX_K_W4A8`).
pub type DotI8Q4 = fn(&[i8], &[u8]) -> i32;
/// The Q8 activation quantizer: on a finite row, `Some(scale)` with the codes
/// byte for byte `quantize_row_q8`'s; on a row holding NaN or ±∞, `None`
/// (the codes are then unspecified). The finiteness check rides on the
/// maximum's pass, so a caller reads the row twice, not three times.
pub type QuantizeRow = fn(&[f32], &mut [i8]) -> Option<f32>;
/// The activation codes' sums per group: `sums[i] = Σ codes[i·group ..
/// (i + 1)·group]`, exact in i32, for `group > 0`, `codes.len()` a multiple
/// of `group` and `sums.len() == codes.len() / group`. A group never spans
/// two activation rows when `group` divides K, so one call serves `[m, k]`.
pub type GroupSums = fn(&[i8], usize, &mut [i32]);
/// W8A8 over output features `rows`.
pub type GemmQ8Q8 = fn(&ActivationsQ8<'_>, &QuantizedMatrix, Range<usize>, &mut OutputTile<'_>);
/// W4A8 (per channel or grouped) over output features `rows`.
pub type GemmQ8Q4 = fn(&ActivationsQ8<'_>, &QuantizedMatrixQ4, Range<usize>, &mut OutputTile<'_>);
/// W8A16 over output features `rows`.
pub type GemmF32Q8 = fn(&ActivationsF32<'_>, &QuantizedMatrix, Range<usize>, &mut OutputTile<'_>);
/// W4A16 (per channel or grouped) over output features `rows`.
pub type GemmF32Q4 = fn(&ActivationsF32<'_>, &QuantizedMatrixQ4, Range<usize>, &mut OutputTile<'_>);

/// One tier: a kernel for every family. A tier is one value of this type; the
/// dispatch layer proves it with the selftest before handing it out.
#[derive(Debug, Clone, Copy)]
pub struct KernelTable {
    /// The tier's name, as `Int8Tier` displays it.
    pub name: &'static str,
    /// `Σ a·b` of two int8 code rows, exact in i32 for `len <= MAX_K_W8A8`
    /// (`docs/NUMERICS.md` §6.1).
    pub dot_i8_i8: DotI8I8,
    /// `Σ x·q` of int8 codes against one packed biased Q4 row, as
    /// `Σ x·b − 8·Σ x`, exact in i32 for `len <= MAX_K_W4A8`; any of the 16
    /// nibbles (§6.1).
    pub dot_i8_q4: DotI8Q4,
    /// The activation quantizer: byte for byte `quantize_row_q8` (§3.2) on a
    /// finite row, returning `Some(scale)`; `None` for a row holding NaN or
    /// ±∞ ([`QuantizeRow`]).
    pub quantize_row_q8: QuantizeRow,
    /// The activation codes' sums per group that cancel the nibble bias of
    /// the Q4 families (`8 · sum`, §6.1), exact ([`GroupSums`]); proven with
    /// the quantizer.
    pub group_sums: GroupSums,
    /// W8A8: `y = (acc as f32) * (x_scale · w_scale)` with `acc` exact in i32 (§6.1).
    pub gemm_w8a8: GemmQ8Q8,
    /// W4A8 per channel: `y = (acc as f32) * (x_scale · w_scale)`, `acc`
    /// exact in i32 with the bias cancelled by `sums` (§6.1).
    pub gemm_w4a8: GemmQ8Q4,
    /// W4A8 grouped: per group `acc_g` exact in i32; `sum += (acc_g as f32) *
    /// f32(s_g)` in increasing g; `y = sum * x_scale` (§6.1).
    pub gemm_w4a8_grouped: GemmQ8Q4,
    /// W4A8 grouped by 32 on the weight's panel form
    /// ([`PanelsQ4`](crate::PanelsQ4)): the
    /// same bits as `gemm_w4a8_grouped` on the natural matrix; `None` for a
    /// tier with no panel tiles (a layer then keeps the natural layout).
    pub gemm_w4a8_grouped_panels: Option<GemmQ8Panels>,
    /// W4A8 per channel on the weight's panel form
    /// ([`PanelsQ4`](crate::PanelsQ4)): the same bits as `gemm_w4a8` on the
    /// natural matrix; `None` for a tier with no per-channel panel tiles (a
    /// layer then keeps the natural layout).
    pub gemm_w4a8_panels: Option<GemmQ8Panels>,
    /// W8A16: 8 lanes of f32 products in increasing position, the fixed
    /// lane tree, times the row scale; no FMA (§6.2).
    pub gemm_w8a16: GemmF32Q8,
    /// W4A16 per channel: as W8A16 with Q4 codes (§6.2).
    pub gemm_w4a16: GemmF32Q4,
    /// W4A16 grouped: the 8-lane tree per group, `y += f32(s_g) · partial_g`
    /// in increasing g; no FMA (§6.2).
    pub gemm_w4a16_grouped: GemmF32Q4,
    /// The tiles each GEMM entry computes (its micro-kernels on the
    /// [`frame`](crate::frame), or its own sweep's), from which the selftest
    /// derives shapes that run every tile and every leftover row.
    pub shapes: GemmShapes,
}

/// The declared [`Shapes`] of a table's six GEMM entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShapes {
    /// W8A8.
    pub w8a8: Shapes,
    /// W4A8 per channel.
    pub w4a8: Shapes,
    /// W4A8 grouped.
    pub w4a8_grouped: Shapes,
    /// W8A16.
    pub w8a16: Shapes,
    /// W4A16 per channel.
    pub w4a16: Shapes,
    /// W4A16 grouped.
    pub w4a16_grouped: Shapes,
}

impl GemmShapes {
    /// One row at a time for every family: the scalar tier's shapes.
    pub const SINGLE: GemmShapes = GemmShapes {
        w8a8: Shapes::SINGLE,
        w4a8: Shapes::SINGLE,
        w4a8_grouped: Shapes::SINGLE,
        w8a16: Shapes::SINGLE,
        w4a16: Shapes::SINGLE,
        w4a16_grouped: Shapes::SINGLE,
    };
}

/// The scalar tier: the reference every other tier must equal bit for bit.
pub static SCALAR: KernelTable = KernelTable {
    name: "scalar",
    dot_i8_i8: crate::dot_i8_i8,
    dot_i8_q4: crate::dot_i8_q4,
    quantize_row_q8: crate::quantize_row_q8_finite,
    group_sums: group_sums_scalar,
    gemm_w8a8: crate::gemm_w8a8,
    gemm_w4a8: crate::gemm_w4a8,
    gemm_w4a8_grouped: crate::gemm_w4a8_grouped,
    gemm_w4a8_grouped_panels: Some(crate::panels::gemm_w4a8_grouped_panels_scalar),
    gemm_w4a8_panels: Some(crate::panels::gemm_w4a8_panels_scalar),
    gemm_w8a16: crate::gemm_w8a16,
    gemm_w4a16: crate::gemm_w4a16,
    gemm_w4a16_grouped: crate::gemm_w4a16_grouped,
    shapes: GemmShapes::SINGLE,
};

/// Sums of int8 activation codes per group of `group` columns, `[m, k / group]`
/// (`group == k` or `k == 0`: one sum per row). The Q4 kernels subtract
/// `8 · sum` to cancel the nibble bias.
pub fn activation_group_sums(codes: &[i8], m: usize, k: usize, group: usize) -> Vec<i32> {
    let mut sums = Vec::new();
    activation_group_sums_into(codes, m, k, group, &mut sums);
    sums
}

/// [`activation_group_sums`] into a caller's buffer (cleared first), so that
/// a caller running many small calls reuses one allocation.
pub fn activation_group_sums_into(codes: &[i8], m: usize, k: usize, group: usize, sums: &mut Vec<i32>) {
    activation_group_sums_with(group_sums_scalar, codes, m, k, group, sums);
}

/// [`activation_group_sums_into`] with a tier's [`GroupSums`] entry `f`
/// (`group` dividing `k`, as every caller's shape has it).
pub fn activation_group_sums_with(f: GroupSums, codes: &[i8], m: usize, k: usize, group: usize, sums: &mut Vec<i32>) {
    sums.clear();
    if k == 0 || group == 0 {
        sums.resize(m, 0);
        return;
    }
    // per channel (`group == k`) one sum a row, without a division
    sums.resize(if group == k { m } else { codes.len() / group }, 0);
    f(&codes[..sums.len() * group], group, sums);
}

/// The scalar tier's [`GroupSums`]: [`group_sum`] of each group.
fn group_sums_scalar(codes: &[i8], group: usize, sums: &mut [i32]) {
    assert!(group > 0 && codes.len() == group * sums.len(), "group sums shape");
    for (s, g) in sums.iter_mut().zip(codes.chunks_exact(group)) {
        *s = group_sum(g);
    }
}

/// `Σ c` of one group of codes, exact: 32 codes at a time into 16 i16
/// lanes (two codes a lane per 32, at most 2 · 128 = 256 in magnitude), so
/// up to 127 of them (32 512 at most) before the lanes are widened and
/// added: the compiler turns the lanes into vector code. Widened per 32,
/// a per-channel row of 576 codes took 1.1 instructions a code, 3 % of a
/// W4A8 decode call at 192 × 576 (callgrind, AVX2, Intel Xeon, family 6
/// model 167); one code at a time, 1.7 (AMD EPYC Zen 4, family 25 model 17).
fn group_sum(g: &[i8]) -> i32 {
    let mut chunks = g.chunks_exact(32);
    let mut sum = 0i32;
    loop {
        let mut lanes = [0i16; 16];
        let mut taken = 0;
        for c in (&mut chunks).take(127) {
            for (j, l) in lanes.iter_mut().enumerate() {
                *l += i16::from(c[j]) + i16::from(c[j + 16]);
            }
            taken += 1;
        }
        sum += lanes.iter().map(|&v| i32::from(v)).sum::<i32>();
        if taken < 127 {
            break;
        }
    }
    sum + chunks.remainder().iter().map(|&c| i32::from(c)).sum::<i32>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_sums_are_the_plain_sums_at_every_length_and_extreme() {
        // lengths across the 32-code steps and their remainders, codes at
        // both ends of i8 (a lane of two is then ±256) and in between
        // (127 steps of 32 fill the i16 lanes: 4064 codes and past it)
        for len in [
            0usize, 1, 31, 32, 33, 63, 64, 100, 576, 4063, 4064, 4096, 4127, 8128, 12345,
        ] {
            for fill in [i8::MIN, i8::MAX, -1, 0] {
                let mut codes = vec![fill; len];
                for (i, c) in codes.iter_mut().enumerate().skip(1).step_by(7) {
                    *c = (i as i32 * 37 % 255 - 127) as i8;
                }
                let want: i32 = codes.iter().map(|&c| i32::from(c)).sum();
                assert_eq!(group_sum(&codes), want, "len {len} fill {fill}");
            }
        }
        // and by group: two rows of 64 in groups of 32
        let codes: Vec<i8> = (0..128).map(|i| (i as i8).wrapping_mul(3)).collect();
        let want: Vec<i32> = codes
            .chunks(32)
            .map(|g| g.iter().map(|&c| i32::from(c)).sum())
            .collect();
        assert_eq!(activation_group_sums(&codes, 2, 64, 32), want);
    }
}
