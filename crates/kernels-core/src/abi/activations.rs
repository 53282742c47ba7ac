//! What a kernel reads and writes: the int8 and f32 activation rows, the
//! output tile, the i32 bounds of the integer reductions, and what an
//! activation builder refuses (docs/NUMERICS.md §6).

use crate::abi::rows::LayoutCache;

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
