//! The checks every entry runs before a kernel, and the per-thread buffers
//! a dynamic call quantizes into.

use super::*;

/// The per-thread buffers a dynamic call quantizes its activations into, kept
/// between calls so that a decode step (hundreds of small calls) allocates
/// nothing for them. They grow to the largest `[m, k]` seen on the thread.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) codes: Vec<i8>,
    pub(super) scales: Vec<f32>,
    pub(super) spare: Spare,
}

/// The buffers a call fills after quantizing: the activations' group sums,
/// and the allocation its [`LayoutCache`] writes the tiles' rows into.
#[derive(Default)]
pub(super) struct Spare {
    pub(super) sums: Vec<i32>,
    layout: Vec<i8>,
}

impl Spare {
    /// Runs `f` with a new call's [`LayoutCache`] that writes its rows into
    /// this thread's allocation, kept for the next call (each call's cache
    /// holds only that call's rows; the bytes are rewritten).
    pub(super) fn with_layouts<R>(layout: &mut Vec<i8>, f: impl FnOnce(&LayoutCache) -> R) -> R {
        let cache = LayoutCache::with_buffer(std::mem::take(layout));
        let r = f(&cache);
        *layout = cache.into_buffer();
        r
    }

    /// The sums buffer and [`Spare::with_layouts`] on this one's allocation.
    pub(super) fn parts(&mut self) -> (&mut Vec<i32>, &mut Vec<i8>) {
        (&mut self.sums, &mut self.layout)
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` on this thread's [`Scratch`], or on a fresh one when the thread's
/// is in use: a call nested in another (a rayon worker that steals a second
/// layer's call while the first waits) must not share its buffers.
#[inline]
pub(super) fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut s) => f(&mut s),
        Err(_) => f(&mut Scratch::default()),
    })
}

/// `actual` must be `expected`. A shape's product is taken saturating: no
/// slice holds `usize::MAX` elements (its bytes are at most `isize::MAX`),
/// so an overflowing `[m, k]` is refused with the slice's true length.
#[inline]
pub(super) fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<(), DispatchError> {
    if expected == actual {
        Ok(())
    } else {
        Err(DispatchError::Shape { what, expected, actual })
    }
}

#[inline]
pub(super) fn check_k(family: KernelFamily, k: usize) -> Result<(), DispatchError> {
    match family.max_k() {
        Some(max) if k > max => Err(DispatchError::KTooLarge { family, k, max }),
        _ => Ok(()),
    }
}

#[inline]
pub(super) fn check_codes(codes: &[i8], k: usize) -> Result<(), DispatchError> {
    match qlinear_quant_recipe::find_code_out_of_range(codes) {
        Some(i) => Err(DispatchError::ActivationCodeOutOfRange {
            row: i / k.max(1),
            col: i % k.max(1),
        }),
        None => Ok(()),
    }
}

#[inline]
pub(super) fn check_finite(x: &[f32], k: usize) -> Result<(), DispatchError> {
    // `v · 0` is 0 for a finite v and NaN for NaN or ±Inf, so lanes of
    // `acc += v · 0` stay 0 exactly when every element is finite: a
    // multiply and an add per lane (a boolean fold did not vectorise: 14
    // instructions an element); the position is looked for on failure. 32
    // lanes, not 8: each lane's adds are one chain of dependent float adds,
    // and with 8 (two SSE registers) the chains, not the arithmetic, set the
    // time (72 dependent adds at K = 576). The quantized families no longer
    // come here: their tier's quantizer finds NaN and ±∞ in its maximum's
    // pass (`QuantizeRow`); the float families, which quantize nothing, do.
    let mut acc = [0f32; 32];
    let chunks = x.chunks_exact(32);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += v * 0.0;
        }
    }
    for (a, v) in acc.iter_mut().zip(tail) {
        *a += v * 0.0;
    }
    if acc.iter().all(|a| *a == 0.0) {
        return Ok(());
    }
    // a non-finite value means x is not empty, so k > 0
    let r = x.iter().position(|v| !v.is_finite()).unwrap_or(0) / k.max(1);
    non_finite_row(x.chunks(k.max(1)).nth(r).unwrap_or(&[]), r)
}

/// The refusal of activation row `r` (the row's values), which holds NaN or
/// ±∞: its first such column and value. [`check_finite`] and the quantized
/// families (whose tier's quantizer found the row) both refuse with it.
#[cold]
pub(super) fn non_finite_row(row: &[f32], r: usize) -> Result<(), DispatchError> {
    let col = row.iter().position(|v| !v.is_finite()).unwrap_or(0);
    Err(DispatchError::NonFiniteActivation {
        row: r,
        col,
        value: row.get(col).copied().unwrap_or(f32::NAN),
    })
}

/// `per_channel` or `grouped`, as `w` is.
#[inline]
pub(super) fn q4_family(w: &QuantizedMatrixQ4, per_channel: KernelFamily, grouped: KernelFamily) -> KernelFamily {
    match w.group_size() {
        GroupSize::PerChannel => per_channel,
        GroupSize::Group(_) => grouped,
    }
}

/// The W4A8 family a panel form runs: per channel or grouped by 32.
pub(super) fn panel_family(w: &PanelsQ4) -> KernelFamily {
    match w.group_size() {
        GroupSize::PerChannel => KernelFamily::W4A8,
        GroupSize::Group(_) => KernelFamily::W4A8Grouped,
    }
}

#[inline]
pub(super) fn check_scales(scales: &[f32]) -> Result<(), DispatchError> {
    match scales.iter().position(|s| !(s.is_finite() && *s >= 0.0)) {
        Some(row) => Err(DispatchError::InvalidActivationScale {
            row,
            value: scales[row],
        }),
        None => Ok(()),
    }
}
