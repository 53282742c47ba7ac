//! Activation rows in a family's layout, as the tiles read them, and the
//! per-call cache that shares them between a call's tasks. The frame
//! (`frame/rows.rs`) writes them; what a tile receives is defined here.

use std::sync::{Mutex, OnceLock};

use crate::abi::tile::Layout;

/// Integer activation rows in a family's layout: row `i` is
/// `buf[start + i · stride ..][.. len]`, cut to the `kb` columns of whole
/// blocks. A copied layout starts every row on a 64-byte boundary and holds
/// `kp` columns: the columns past the last whole block, then zeros up to a
/// whole block (`kp = kb` when `k` is whole blocks, and for the borrowed
/// natural layout). A tile may read that padded block against weight rows
/// that run on into the next row's codes: the zeros make those products
/// vanish, so the integer sums are the K tail's exactly (`gemm_w4a8`).
pub(crate) struct IntRows<'a> {
    pub(crate) buf: std::borrow::Cow<'a, [i8]>,
    pub(crate) kb: usize,
    pub(crate) kp: usize,
    pub(crate) len: usize,
    pub(crate) start: usize,
    pub(crate) stride: usize,
    /// [`Layout::EvenOddQuads16`]'s blocks, aligned like the rows.
    pub(crate) quads: Vec<i8>,
    pub(crate) quads_start: usize,
    /// Bytes a column: 1, or 2 for the paired layouts (computed once, not
    /// divided out per view).
    pub(crate) per: usize,
}

/// The alignment of every copied activation row, in bytes.
pub(crate) const ROW_ALIGN: usize = 64;

impl IntRows<'_> {
    #[inline]
    pub(crate) fn row(&self, i: usize) -> &[i8] {
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
pub(crate) struct LayoutKey {
    pub(crate) rows_at: usize,
    pub(crate) m: usize,
    pub(crate) k: usize,
    pub(crate) block: usize,
    pub(crate) layout: Layout,
}

impl LayoutKey {
    pub(crate) fn of<T>(rows: &[T], m: usize, k: usize, block: usize, layout: Layout) -> Self {
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
pub(crate) fn cached<R>(cell: &OnceLock<(LayoutKey, R)>, key: LayoutKey, make: impl FnOnce() -> R) -> Option<&R> {
    let (k, rows) = cell.get_or_init(|| (key, make()));
    (*k == key).then_some(rows)
}

/// The activation rows of one call laid out for a family's tiles, written
/// once by the first task that needs them and read by every other task of
/// the call (the driver splits a call's output features over several tasks,
/// each of which would otherwise lay the same rows out again). Create one per
/// call (it holds that call's rows) and attach it with
/// [`ActivationsQ8::with_layouts`](crate::abi::activations::ActivationsQ8::with_layouts) or
/// [`ActivationsF32::with_layouts`](crate::abi::activations::ActivationsF32::with_layouts); the
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
    pub(crate) int: OnceLock<(LayoutKey, IntRows<'static>)>,
    pub(crate) float: OnceLock<(LayoutKey, FloatRows)>,
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
    pub(crate) fn take_spare(&self) -> Vec<i8> {
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

/// f32 rows laid out per group, `len` values a row.
#[derive(Debug)]
pub(crate) struct FloatRows {
    pub(crate) values: Vec<f32>,
    pub(crate) len: usize,
}

impl FloatRows {
    #[inline]
    pub(crate) fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.len..(i + 1) * self.len]
    }
}
