//! The activation rows as a family's micro-kernels read them: laid out once
//! per call (or borrowed), cached between calls, and the views a tile gets.

use std::sync::Mutex;

use super::*;

/// Integer activation rows in a family's layout: row `i` is
/// `buf[start + i · stride ..][.. len]`, cut to the `kb` columns of whole
/// blocks. A copied layout starts every row on a 64-byte boundary and holds
/// `kp` columns: the columns past the last whole block, then zeros up to a
/// whole block (`kp = kb` when `k` is whole blocks, and for the borrowed
/// natural layout). A tile may read that padded block against weight rows
/// that run on into the next row's codes: the zeros make those products
/// vanish, so the integer sums are the K tail's exactly (`gemm_w4a8`).
pub(crate) struct IntRows<'a> {
    pub(super) buf: std::borrow::Cow<'a, [i8]>,
    pub(super) kb: usize,
    pub(super) kp: usize,
    pub(super) len: usize,
    pub(super) start: usize,
    pub(super) stride: usize,
    /// [`Layout::EvenOddQuads16`]'s blocks, aligned like the rows.
    pub(super) quads: Vec<i8>,
    pub(super) quads_start: usize,
    /// Bytes a column: 1, or 2 for the paired layouts (computed once, not
    /// divided out per view).
    pub(super) per: usize,
}

/// The alignment of every copied activation row, in bytes.
pub(super) const ROW_ALIGN: usize = 64;

impl<'a> IntRows<'a> {
    /// The natural layout borrows the caller's codes (a GEMV is called per
    /// range of rows: a copy per call would cost more than the kernel's
    /// bookkeeping); the others are written once per call.
    pub(super) fn new(x: &ActivationsQ8<'a>, block: usize, layout: Layout) -> Self {
        let kb = x.k / block * block;
        if layout == Layout::Natural {
            return IntRows {
                buf: std::borrow::Cow::Borrowed(x.codes),
                kb,
                kp: kb,
                len: kb,
                start: 0,
                stride: x.k,
                quads: Vec::new(),
                quads_start: 0,
                per: 1,
            };
        }
        IntRows::copied(x, block, layout, Vec::new())
    }
}

impl IntRows<'static> {
    /// The rows of `x` written out in `layout` (any but the natural one),
    /// into `buffer`'s allocation when it is large enough.
    pub(super) fn copied(x: &ActivationsQ8<'_>, block: usize, layout: Layout, buffer: Vec<i8>) -> Self {
        let kb = x.k / block * block;
        let kp = x.k.div_ceil(block) * block;
        assert!(
            layout != Layout::Pairs8 || block.is_multiple_of(8),
            "Pairs8 needs blocks of 8"
        );
        assert!(
            layout != Layout::Pairs8EvenOdd || block.is_multiple_of(16),
            "Pairs8EvenOdd needs blocks of 16"
        );
        let paired = matches!(layout, Layout::Pairs8 | Layout::Pairs8EvenOdd);
        let len = if paired { 2 * kp } else { kp };
        let stride = len.div_ceil(ROW_ALIGN) * ROW_ALIGN;
        // room to move the first row to an aligned address; zeroed, so that
        // no byte a tile may read holds another call's codes
        let mut out = buffer;
        out.clear();
        out.resize(x.m * stride + ROW_ALIGN, 0);
        let start = out.as_ptr().align_offset(ROW_ALIGN).min(ROW_ALIGN);
        // the row, and for the paired layouts the next row, each with its
        // zero padding to a whole block (copied only when there is a tail;
        // allocated only then, and the next row's only for the paired
        // layouts of more than one row: with both always allocated, malloc and free took 6.2 %
        // of a W8A8 decode call's samples at 192 × 576, without 1.2 %;
        // `perf`, AMD EPYC Zen 4, family 25 model 17)
        let (mut padded, mut next_padded) = (Vec::new(), Vec::new());
        if kp != x.k {
            padded = vec![0i8; kp];
        }
        if paired && x.m > 1 && kp != x.k {
            next_padded = vec![0i8; kp];
        }
        for i in 0..x.m {
            let row = if kp == x.k {
                x.row(i)
            } else {
                padded[..x.k].copy_from_slice(x.row(i));
                &padded[..]
            };
            let dst = &mut out[start + i * stride..start + i * stride + len];
            match layout {
                Layout::Aligned => dst.copy_from_slice(row),
                Layout::EvenOdd | Layout::EvenOddQuads16 => split_even_odd_into(row, block, dst),
                Layout::Pairs8 | Layout::Pairs8EvenOdd => {
                    // the row in each pair's first 8 bytes, the next row's
                    // in the other 8; after the last row those stay zero
                    let even_odd = layout == Layout::Pairs8EvenOdd;
                    pairs8_into(row, even_odd, dst, 0);
                    if i + 1 < x.m {
                        let next = if kp == x.k {
                            x.row(i + 1)
                        } else {
                            next_padded[..x.k].copy_from_slice(x.row(i + 1));
                            &next_padded[..]
                        };
                        pairs8_into(next, even_odd, dst, 8);
                    }
                }
                _ => panic!("an integer family needs an integer layout"),
            }
        }
        let (mut quads, mut quads_start) = (Vec::new(), 0);
        if layout == Layout::EvenOddQuads16 {
            let blocks = x.m / 16;
            quads = vec![0i8; blocks * 16 * kp + ROW_ALIGN];
            quads_start = quads.as_ptr().align_offset(ROW_ALIGN).min(ROW_ALIGN);
            for b in 0..blocks {
                let block = &mut quads[quads_start + b * 16 * kp..quads_start + (b + 1) * 16 * kp];
                for (l, i) in (16 * b..16 * b + 16).enumerate() {
                    let row = &out[start + i * stride..start + i * stride + kp];
                    for (d, quad) in row.chunks_exact(4).enumerate() {
                        for (dst, &v) in block[64 * d + 4 * l..64 * d + 4 * l + 4].iter_mut().zip(quad) {
                            *dst = v ^ i8::MIN;
                        }
                    }
                }
            }
        }
        IntRows {
            buf: std::borrow::Cow::Owned(out),
            kb,
            kp,
            len,
            start,
            stride,
            quads,
            quads_start,
            per: if paired { 2 } else { 1 },
        }
    }
}

/// One row's half of [`Layout::Pairs8`] (`even_odd` false) or
/// [`Layout::Pairs8EvenOdd`] (true): each 8 of `row`'s columns (per 16
/// columns the 8 even ones, then the 8 odd ones) into bytes `half..half + 8`
/// of the next 16 of `dst` (`half` 0 for the row, 8 for the next row).
/// Whole chunks as arrays: a closure building each chunk by index took 7.8
/// guest instructions a column (qemu, I8MM W8A8 at 192 × 576).
fn pairs8_into(row: &[i8], even_odd: bool, dst: &mut [i8], half: usize) {
    if even_odd {
        for (c16, quad) in row.chunks_exact(16).zip(dst.chunks_exact_mut(32)) {
            let ((e0, o0), (e1, o1)) = (
                crate::layout::split_word(&c16[..8]),
                crate::layout::split_word(&c16[8..]),
            );
            let bytes = |lo: u32, hi: u32| (u64::from(lo) | u64::from(hi) << 32).to_le_bytes().map(|b| b as i8);
            quad[half..half + 8].copy_from_slice(&bytes(e0, e1));
            quad[16 + half..16 + half + 8].copy_from_slice(&bytes(o0, o1));
        }
    } else {
        for (c8, pair) in row.chunks_exact(8).zip(dst.chunks_exact_mut(16)) {
            pair[half..half + 8].copy_from_slice(c8);
        }
    }
}

impl IntRows<'_> {
    #[inline]
    pub(super) fn row(&self, i: usize) -> &[i8] {
        let at = self.start + i * self.stride;
        &self.buf[at..at + self.len]
    }

    /// View `d` of a tile `xr` activation rows tall from row `i0`, over the
    /// whole blocks (`kb` columns) or with `padded` over the padded block
    /// too (`kp`): the interleaved block for a 16-row tile on
    /// [`Layout::EvenOddQuads16`], else row `i0 + d`. Every layout keeps a
    /// column prefix in a prefix of the bytes, so both are prefixes.
    #[inline]
    pub(crate) fn view(&self, xr: usize, i0: usize, d: usize, padded: bool) -> &[i8] {
        let cols = if padded { self.kp } else { self.kb };
        if xr == 16 && !self.quads.is_empty() {
            let at = self.quads_start + i0 / 16 * 16 * self.kp;
            &self.quads[at..at + 16 * cols]
        } else {
            &self.row(i0 + d)[..self.per * cols]
        }
    }
}

impl IntRows<'_> {
    /// The padded block alone of view `d` ([`view`](Self::view)): the bytes
    /// the padded view holds past the unpadded one, which every layout lays
    /// out as one whole block of its own.
    #[inline]
    pub(crate) fn tail_view(&self, xr: usize, i0: usize, d: usize) -> &[i8] {
        let whole = self.view(xr, i0, d, false).len();
        &self.view(xr, i0, d, true)[whole..]
    }
}

/// What a cached layout was made from: the rows (by address and shape) and
/// the layout, so that a cache is never read for other rows or another
/// family's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LayoutKey {
    pub(super) rows_at: usize,
    pub(super) m: usize,
    pub(super) k: usize,
    pub(super) block: usize,
    pub(super) layout: Layout,
}

impl LayoutKey {
    pub(super) fn of<T>(rows: &[T], m: usize, k: usize, block: usize, layout: Layout) -> Self {
        LayoutKey {
            rows_at: rows.as_ptr() as usize,
            m,
            k,
            block,
            layout,
        }
    }
}

/// The layout `key` names from `cell`, written by `make` on first use; `None`
/// when the cell holds the layout of other rows or of another family.
pub(super) fn cached<R>(cell: &OnceLock<(LayoutKey, R)>, key: LayoutKey, make: impl FnOnce() -> R) -> Option<&R> {
    let (k, rows) = cell.get_or_init(|| (key, make()));
    (*k == key).then_some(rows)
}

/// The activation rows of one call laid out for a family's tiles, written
/// once by the first task that needs them and read by every other task of
/// the call (the driver splits a call's output features over several tasks,
/// each of which would otherwise lay the same rows out again). Create one per
/// call (it holds that call's rows) and attach it with
/// [`ActivationsQ8::with_layouts`] or [`ActivationsF32::with_layouts`]; the
/// natural layout is borrowed and never cached. Reading from the cache or
/// laying the rows out anew gives the same bytes, so it never changes bits.
///
/// A caller that makes one per call can hand each the allocation the last
/// one used ([`LayoutCache::with_buffer`], [`LayoutCache::into_buffer`]):
/// a decode call's rows are a few hundred bytes, and allocating, zeroing
/// and freeing them cost about a tenth of a 192 × 576 W4A8 call on the
/// Intel Xeon (family 6 model 167).
#[derive(Debug, Default)]
pub struct LayoutCache {
    pub(super) int: OnceLock<(LayoutKey, IntRows<'static>)>,
    pub(super) float: OnceLock<(LayoutKey, FloatRows)>,
    /// The allocation the integer rows are written into, until they are.
    spare: Mutex<Vec<i8>>,
}

impl LayoutCache {
    /// An empty cache whose integer rows, when a tile first needs them, are
    /// written into `buffer`'s allocation (its contents are overwritten).
    pub fn with_buffer(buffer: Vec<i8>) -> Self {
        LayoutCache {
            spare: Mutex::new(buffer),
            ..LayoutCache::default()
        }
    }

    /// The allocation of the integer rows (or the buffer given to
    /// [`LayoutCache::with_buffer`], if no rows were written), for the next
    /// call's cache.
    pub fn into_buffer(self) -> Vec<i8> {
        match self.int.into_inner() {
            Some((
                _,
                IntRows {
                    buf: std::borrow::Cow::Owned(buf),
                    ..
                },
            )) => buf,
            _ => self.spare.into_inner().unwrap_or_else(|e| e.into_inner()),
        }
    }

    /// The spare allocation, taken (empty when another call took it).
    fn take_spare(&self) -> Vec<i8> {
        match self.spare.lock() {
            Ok(mut v) => std::mem::take(&mut *v),
            Err(_) => Vec::new(),
        }
    }
}

impl std::fmt::Debug for IntRows<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntRows")
            .field("len", &self.len)
            .field("kb", &self.kb)
            .field("kp", &self.kp)
            .finish()
    }
}

/// Integer rows for a family: borrowed (natural), from the call's cache, or
/// laid out here when the call has none.
pub(crate) enum IntView<'a> {
    Ready(&'a IntRows<'static>),
    Own(IntRows<'a>),
}

impl<'a> IntView<'a> {
    #[inline]
    pub(crate) fn of(x: &ActivationsQ8<'a>, block: usize, layout: Layout) -> Self {
        let key = LayoutKey::of(x.codes, x.m, x.k, block, layout);
        let cache = x.layouts().filter(|_| layout != Layout::Natural);
        match cache.and_then(|c| cached(&c.int, key, || IntRows::copied(x, block, layout, c.take_spare()))) {
            Some(rows) => IntView::Ready(rows),
            None => IntView::Own(IntRows::new(x, block, layout)),
        }
    }

    #[inline]
    pub(crate) fn rows(&self) -> &IntRows<'a> {
        match self {
            IntView::Ready(r) => r,
            IntView::Own(r) => r,
        }
    }
}

/// f32 rows laid out per group, `len` values a row.
#[derive(Debug)]
pub(super) struct FloatRows {
    pub(super) values: Vec<f32>,
    pub(super) len: usize,
}

impl FloatRows {
    #[inline]
    pub(super) fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.len..(i + 1) * self.len]
    }
}

/// f32 rows for a family, from the call's cache or laid out here.
pub(super) enum FloatView<'a> {
    Ready(&'a FloatRows),
    Own(FloatRows),
}

impl<'a> FloatView<'a> {
    pub(super) fn of(x: &ActivationsF32<'a>, group: usize, layout: Layout) -> Self {
        let key = LayoutKey::of(x.x, x.m, x.k, group, layout);
        match x
            .layouts()
            .and_then(|c| cached(&c.float, key, || float_rows(x, group, layout)))
        {
            Some(rows) => FloatView::Ready(rows),
            None => FloatView::Own(float_rows(x, group, layout)),
        }
    }

    #[inline]
    pub(super) fn rows(&self) -> &FloatRows {
        match self {
            FloatView::Ready(r) => r,
            FloatView::Own(r) => r,
        }
    }
}

/// f32 activation rows laid out per group of `group` columns.
pub(super) fn float_rows(x: &ActivationsF32<'_>, group: usize, layout: Layout) -> FloatRows {
    // a table's registration, fixed at compile time, not an input
    let q4_order = match layout {
        Layout::Chunked => false,
        Layout::ChunkedQ4 => true,
        _ => panic!("a float family needs a chunked layout"),
    };
    // every row into one buffer (a Vec per row and their concatenation
    // were two allocations and a copy more, each call)
    let mut values = Vec::new();
    for i in 0..x.m {
        chunked_f32_into(x.row(i), group, q4_order, &mut values);
    }
    let len = values.len().checked_div(x.m).unwrap_or(0);
    FloatRows { values, len }
}
