//! The activation rows as a family's micro-kernels read them: laid out once
//! per call (or borrowed), cached between calls, and the views a tile gets.

use crate::abi::activations::{ActivationsF32, ActivationsQ8};
use crate::abi::rows::{cached, FloatRows, IntRows, LayoutKey, ROW_ALIGN};
use crate::abi::tile::Layout;
use crate::frame::layout::{chunked_f32_into, split_even_odd_into, split_word};

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
            let ((e0, o0), (e1, o1)) = (split_word(&c16[..8]), split_word(&c16[8..]));
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
