//! The weight-row views a tile receives.

use super::*;

/// Row `r` of a weight's codes, `stride` a row: the codes are looked up once
/// per call, not per row (a weight read in place from a file's map finds
/// them through an indirect call).
#[inline]
pub(super) fn rows_of<'w, T>(codes: &'w [T], stride: usize) -> impl Fn(usize) -> &'w [T] + 'w {
    move |r| &codes[r * stride..(r + 1) * stride]
}

/// The row views a micro-kernel receives, kept across the tiles of one call
/// so that each tile writes only the entries it uses.
pub(super) struct Views<'a, T> {
    v: [&'a [T]; MAX_SIDE],
    /// What the views were last [`set_for`](Views::set_for).
    key: Option<ViewKey>,
    /// Where the views last made by [`set_rows`](Views::set_rows) or
    /// [`next_rows`](Views::next_rows) lie, for `next_rows`.
    rows: Option<RowSpan<T>>,
}

/// The first `n` views are rows of the slice at `base` (`base_len`
/// elements), the last ending at element `end`; `step` is `n` rows'
/// elements.
struct RowSpan<T> {
    base: *const T,
    base_len: usize,
    end: usize,
    step: usize,
    n: usize,
}

/// What a tile's activation views depend on: the first activation row, the
/// tile's rows and whether they reach the padded block.
pub(super) type ViewKey = (usize, usize, bool);

impl<'a, T> Views<'a, T> {
    #[inline]
    pub(super) fn new() -> Self {
        Views {
            v: [&[]; MAX_SIDE],
            key: None,
            rows: None,
        }
    }

    /// [`set`](Views::set) unless the views were last set for the same
    /// `key` (the same activation rows): a decode call's tiles all read one
    /// activation row, whose view was remade per 16-row tile (with the one
    /// range of [`Shapes::sweep`], the frame's instructions a 16-row
    /// decode tile fell from 418 to 344: W8A8 at 576 × 576, AVX2;
    /// callgrind, AMD EPYC Zen 4, family 25 model 17).
    #[inline]
    pub(super) fn set_for(&mut self, key: ViewKey, at: impl Fn(usize) -> &'a [T]) -> &[&'a [T]] {
        let n = key.1;
        if self.key != Some(key) {
            self.set(n, at);
            self.key = Some(key);
        }
        &self.v[..n]
    }

    /// The first `n` views, the `d`-th being `at(d)`.
    #[inline]
    pub(super) fn set(&mut self, n: usize, at: impl Fn(usize) -> &'a [T]) -> &[&'a [T]] {
        self.key = None;
        self.rows = None;
        for (d, v) in self.v[..n].iter_mut().enumerate() {
            *v = at(d);
        }
        &self.v[..n]
    }

    /// The first `n` views: rows `r0..r0 + n` of `base`, `stride` elements
    /// a row, each view `len` long (a view may run on into the next rows'
    /// elements: the padded reach of [`PaddedReach`]). The tile's span is
    /// checked once, not each row: a decode call at 576 × 576 spent 15
    /// instructions a weight row on two checks per view (callgrind, AVX2
    /// W8A8, `323db81`, AMD EPYC Zen 4). Panics when the last view would
    /// end past `base`.
    #[inline]
    pub(super) fn set_rows(&mut self, base: &'a [T], r0: usize, n: usize, stride: usize, len: usize) -> &[&'a [T]] {
        self.key = None;
        self.rows = None;
        let Some(last) = n.checked_sub(1) else {
            return &self.v[..0];
        };
        let start = r0.checked_mul(stride);
        let end = r0
            .checked_add(last)
            .and_then(|r| r.checked_mul(stride))
            .and_then(|e| e.checked_add(len));
        let (Some(start), Some(end)) = (start, end) else {
            panic!("{n} rows from row {r0} of stride {stride} overflow usize")
        };
        let span = &base[start..end];
        for (q, v) in self.v[..n].iter_mut().enumerate() {
            let at = q * stride;
            // SAFETY: q ≤ last, so at + len ≤ last · stride + len = span.len()
            // (computed above without overflow), and at ≤ at + len.
            *v = unsafe { span.get_unchecked(at..at + len) };
        }
        self.rows = n.checked_mul(stride).map(|step| RowSpan {
            base: base.as_ptr(),
            base_len: base.len(),
            end,
            step,
            n,
        });
        &self.v[..n]
    }

    /// The views of the next `n` rows after the last
    /// [`set_rows`](Views::set_rows) (or `next_rows`) of `n` rows on `base`:
    /// each view moved on by `n` rows, `len` and `stride` as they were;
    /// `None` when the views were not last made that way, or when the last
    /// moved view would end past `base`. A decode loop over whole 16-row
    /// blocks moves 16 pointers: `set_rows` each time worked out 16 offsets
    /// (spilled to the stack: 16 more loads) and checked the span with
    /// overflow tests, about 90 of a W8A8 decode tile's 173 instructions
    /// in the frame (qemu, NEON SDOT at 384 × 384).
    #[inline]
    pub(super) fn next_rows(&mut self, base: &'a [T], n: usize) -> Option<&[&'a [T]]> {
        let rows = self
            .rows
            .as_mut()
            .filter(|r| r.base == base.as_ptr() && r.base_len == base.len() && r.n == n)?;
        let end = rows.end.checked_add(rows.step).filter(|&e| e <= base.len())?;
        rows.end = end;
        let step = rows.step;
        // `rows` is only set by `set_rows` and here, with the views then rows
        // of `base` (the same slice: its address and length match) ending at
        // or before the old `end`; so each view lies in `base`, and moved on
        // by `step` it ends at or before `end`, checked above to be within
        // `base`
        for v in &mut self.v[..n] {
            // SAFETY: the moved view is in bounds of `base`, derived from it.
            *v = unsafe { std::slice::from_raw_parts(v.as_ptr().add(step), v.len()) };
        }
        Some(&self.v[..n])
    }
}
