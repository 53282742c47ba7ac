//! The kernel frame: what every SIMD tier's GEMMs share, written once.
//!
//! The frame owns the O(1) shape checks, the activation layout, the sweep of
//! weight-row chunks × activation-row tiles × weight-row blocks, the K tail
//! past the last whole block, and each family's output expression
//! (`docs/NUMERICS.md` §6). A tier supplies only micro-kernels: each computes
//! one tile of `wr` weight rows × `xr` activation rows and is registered with
//! its [`Tile`] in one [`Family`] value per kernel family. The declared tiles are also what the selftest derives its
//! random shapes from (see [`Shapes::proof_calls`]), so a new tile is proven
//! the moment it is registered.
//!
//! Exactness: integer micro-kernels return exact i32 sums over whole blocks,
//! and the frame adds the tail exactly, so the split never changes a bit.
//! Float micro-kernels return the spec's 8-lane partial of a whole row or
//! group (their tail is the zero-padded last chunk of the layout, which only
//! they can place in its lanes), and the frame multiplies by the scale.

use std::ops::Range;
use std::sync::OnceLock;

use half::f16;
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrix, QuantizedMatrixQ4};

use crate::layout::{chunked_f32, split_even_odd_into};
use crate::{dot_i8_i8, dot_i8_q4_biased, ActivationsF32, ActivationsQ8, OutputTile};

/// A micro-kernel's tile: `wr` weight rows (output features) × `xr`
/// activation rows, computed in one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tile {
    /// Weight rows per call.
    pub wr: usize,
    /// Activation rows per call.
    pub xr: usize,
}

impl Tile {
    /// The tile every family must have: one weight row × one activation row.
    pub const ONE: Tile = Tile { wr: 1, xr: 1 };
    /// `wr` × `xr`.
    pub const fn new(wr: usize, xr: usize) -> Tile {
        Tile { wr, xr }
    }
}

/// The largest `wr · xr` a micro-kernel may declare (the frame's stack tile).
pub const MAX_TILE: usize = 128;
/// The largest `wr` or `xr` a micro-kernel may declare.
pub const MAX_SIDE: usize = 16;

/// How one family of one tier is swept: its declared tiles and the weight-row
/// chunk that the activation tiles pass over before the next chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shapes {
    /// Every tile the family's micro-kernels compute. Must contain
    /// [`Tile::ONE`], and a `wr = 1` tile for every `xr` it declares, so any
    /// leftover rows have a tile ([`Shapes::validate`]).
    pub tiles: &'static [Tile],
    /// Weight rows per chunk: every activation tile passes over a chunk
    /// before the next, so a chunk that fits a cache level is read from
    /// memory once per call. 0 takes the whole range as one chunk, which
    /// for M above the widest activation tile streams the matrix once per
    /// activation tile.
    pub chunk: usize,
}

impl Shapes {
    /// One row at a time, no chunking: the scalar tier's shape.
    pub const SINGLE: Shapes = Shapes {
        tiles: &[Tile::ONE],
        chunk: 0,
    };

    /// Why these shapes cannot drive the frame, if they cannot.
    pub fn validate(&self) -> Result<(), String> {
        if !self.tiles.contains(&Tile::ONE) {
            return Err("no 1×1 tile".into());
        }
        for t in self.tiles {
            if t.wr == 0 || t.xr == 0 || t.wr > MAX_SIDE || t.xr > MAX_SIDE || t.wr * t.xr > MAX_TILE {
                return Err(format!(
                    "tile {}×{} outside 1..={MAX_SIDE} a side, {MAX_TILE} in all",
                    t.wr, t.xr
                ));
            }
            if !self.tiles.contains(&Tile::new(1, t.xr)) {
                return Err(format!(
                    "tile {}×{} has no 1×{} tile for leftover weight rows",
                    t.wr, t.xr, t.xr
                ));
            }
        }
        Ok(())
    }

    /// The largest declared `xr`.
    pub fn max_xr(&self) -> usize {
        self.tiles.iter().map(|t| t.xr).max().unwrap_or(1)
    }

    /// The largest declared `wr`.
    pub fn max_wr(&self) -> usize {
        self.tiles.iter().map(|t| t.wr).max().unwrap_or(1)
    }

    /// The declared `xr` values, ascending.
    fn xrs(&self) -> Vec<usize> {
        let mut xrs: Vec<usize> = self.tiles.iter().map(|t| t.xr).collect();
        xrs.sort_unstable();
        xrs.dedup();
        xrs
    }

    /// The largest `wr` declared with `xr`.
    fn max_wr_for(&self, xr: usize) -> usize {
        self.tiles
            .iter()
            .filter(|t| t.xr == xr)
            .map(|t| t.wr)
            .max()
            .unwrap_or(1)
    }

    /// The selftest's random-row calls, `(m, n)` each, that together run
    /// every declared tile, every leftover row and (when `chunks`) a
    /// second, partial weight-row chunk. The first call has `m` twice the
    /// largest `xr` plus its largest leftover (which the smaller `xr` take)
    /// and `n` twice the largest `wr` declared with that `xr` plus its
    /// largest leftover; a smaller `xr` whose own tiles need more weight
    /// rows than that (VNNI's 16 × 1 decode tile beside its 8 × 16 batch
    /// tile) gets a call of its own, one tile tall, so that the rows of
    /// the largest tile are not multiplied by the widest tile's. Each `n`
    /// is past one whole chunk when `chunks`.
    pub fn proof_calls(&self, chunks: bool) -> Vec<(usize, usize)> {
        let rows = |r: usize| 2 * r + r.saturating_sub(1).max(1);
        let past = if chunks { self.chunk } else { 0 };
        let xr = self.max_xr();
        let n = rows(self.max_wr_for(xr));
        let mut calls = vec![(rows(xr), past + n)];
        for x in self.xrs() {
            let nx = rows(self.max_wr_for(x));
            if x < xr && nx > n {
                calls.push((x, past + nx));
            }
        }
        calls
    }

    /// The lighter shapes of the selftest's random rows at the tail K: one
    /// `(m, n)` call per declared `xr`, `m = xr` activation rows against
    /// `n = 2·wr − 1` weight rows for that `xr`'s largest `wr`, so every
    /// declared tile runs once and every leftover weight row of each `xr`
    /// too. A tile's code depends on K only through its count of whole
    /// blocks, and the frame's tail loop is one piece of code for every
    /// tile, so running each tile once at every tail K covers what the
    /// tails vary; [`Shapes::proof_calls`] runs the tiles twice and the
    /// chunk boundary at the other K.
    pub fn tail_proof_calls(&self) -> Vec<(usize, usize)> {
        self.xrs()
            .into_iter()
            .map(|xr| (xr, 2 * self.max_wr_for(xr) - 1))
            .collect()
    }

    /// The largest tile that fits `xr_left` activation rows and `wr_left`
    /// weight rows — most activation rows first, then most weight rows —
    /// with its index in `tiles`.
    fn pick(&self, xr_left: usize, wr_left: usize) -> (usize, Tile) {
        let xr = self
            .tiles
            .iter()
            .map(|t| t.xr)
            .filter(|&x| x <= xr_left)
            .max()
            .unwrap_or(1);
        self.tiles
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, t)| t.xr == xr && t.wr <= wr_left)
            .max_by_key(|(_, t)| t.wr)
            .unwrap_or_else(|| {
                let one = self.tiles.iter().position(|&t| t == Tile::ONE);
                (one.expect("declared tiles include 1×1"), Tile::ONE)
            })
    }

    /// Calls `run(tile, r0, i0)` once per tile so that every (activation
    /// row, weight row) pair of `0..m` × `rows` is covered exactly once:
    /// weight rows in chunks, and within a chunk activation rows in the
    /// largest tiles that fit, each sweeping the chunk's weight rows in the
    /// largest blocks that fit.
    pub fn sweep(&self, m: usize, rows: Range<usize>, mut run: impl FnMut(Tile, usize, usize)) {
        self.sweep_indexed(m, rows, |_, t, r0, i0| run(t, r0, i0));
    }

    /// [`Shapes::sweep`], also passing each tile's index in `tiles` (its
    /// micro-kernel's).
    fn sweep_indexed(&self, m: usize, rows: Range<usize>, mut run: impl FnMut(usize, Tile, usize, usize)) {
        let chunk = if self.chunk == 0 { rows.len().max(1) } else { self.chunk };
        // a step's tiles depend only on the activation rows left, capped at
        // the tallest tile: the same in every chunk, so each is picked once
        // per sweep (picking per chunk cost 14 instructions a weight row of
        // a decode call at 576 × 576 on the Zen 3 EPYC, family 25 model 1,
        // before `75abfa8`: docs/benchmarks/history.md)
        let cap = self.max_xr().min(MAX_SIDE);
        let mut steps: [Option<(usize, usize, Tile)>; MAX_SIDE + 1] = [None; MAX_SIDE + 1];
        let mut c0 = rows.start;
        while c0 < rows.end {
            let c1 = (c0 + chunk).min(rows.end);
            let mut i0 = 0;
            while i0 < m {
                let left = (m - i0).min(cap);
                let (xr, wide, wt) = *steps[left].get_or_insert_with(|| {
                    let xr = self.pick(left, usize::MAX).1.xr;
                    // the widest tile for a chunk's full blocks
                    let (wide, wt) = self.pick(xr, usize::MAX);
                    (xr, wide, wt)
                });
                let mut r0 = c0;
                while r0 < c1 {
                    let (index, t) = if r0 + wt.wr <= c1 {
                        (wide, wt)
                    } else {
                        self.pick(xr, c1 - r0)
                    };
                    run(index, t, r0, i0);
                    r0 += t.wr;
                }
                i0 += xr;
            }
            c0 = c1;
        }
    }
}

/// How activations are laid out for a family's micro-kernels, prepared once
/// per call by the frame. New layouts come with new tiles (hence
/// `non_exhaustive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// Integer codes as they are, borrowed from the caller.
    Natural,
    /// Integer codes as they are, copied so that every row starts on a
    /// 64-byte boundary: a 512-bit load of an activation row then never
    /// straddles two cache lines (worth about 15 % to a batch tile of the
    /// AVX-512 VNNI tier on the first sessions' Intel Xeon, before
    /// `a6b869c`: `docs/benchmarks/history.md`). Every
    /// copied layout is aligned the same way; this one copies only for it.
    Aligned,
    /// Integer codes with each block's even columns, then its odd columns
    /// ([`split_even_odd_i8`](crate::layout::split_even_odd_i8)): the order in which the low and high nibbles
    /// of `block / 2` packed bytes come out of a register.
    EvenOdd,
    /// Integer codes of each row interleaved with the next row's (zeros
    /// after the last row) per 8 columns, `2 · kb` bytes: each 16-byte load
    /// is the 2 × 8 operand of a matrix-multiply instruction (`smmla`). The
    /// family's block must be a multiple of 8.
    Pairs8,
    /// As [`Layout::Pairs8`], with each 16 columns' even columns first: per
    /// 16 columns the row's 8 even columns, the next row's 8, the row's 8
    /// odd columns, the next row's 8 (`2 · kb` bytes). Two weight rows'
    /// packed Q4 bytes, zipped 8 at a time, then give the 2 × 8 operands
    /// of a matrix-multiply instruction directly: the low nibbles against
    /// the even half, the high nibbles against the odd half. The family's
    /// block must be a multiple of 16.
    Pairs8EvenOdd,
    /// As [`Layout::EvenOdd`], and for every whole 16 activation rows also
    /// those rows interleaved 4 bytes at a time with their sign bits flipped
    /// (`x + 128` as u8, `x ^ 0x80`): for each 4 bytes of the even/odd rows,
    /// the 16 rows' 4 bytes one after another (64 bytes: one 512-bit
    /// register with activation row `l` in 32-bit lane `l`), `16 · kb` bytes
    /// a block. A tile 16 activation rows tall receives its block as every
    /// one of its 16 views (starting at row `i0`, a multiple of 16); every
    /// other tile receives the even/odd rows. A multiply-add of such a
    /// register with one weight quad broadcast then sums 4 columns of 16
    /// activation rows in their own lanes, with no reduction across lanes.
    EvenOddQuads16,
    /// f32 rows (or groups) in zero-padded chunks of 8 ([`chunked_f32`]),
    /// in column order.
    Chunked,
    /// As [`Layout::Chunked`], each chunk's columns stored as `[0, 2, 4, 6,
    /// 1, 3, 5, 7]` ([`chunked_f32`] in Q4 order): the order in which the low
    /// and high nibbles of 4 packed bytes come out of a register.
    ChunkedQ4,
}

/// `Σ a·w` over a tile, exact in i32: `x` holds the tile's `xr` activation
/// rows and `w` its `wr` weight rows, all cut to the same whole number of the
/// family's blocks; writes `acc[i · wr + q]` for activation row `i`, weight
/// row `q`.
pub type TileI8I8 = fn(x: &[&[i8]], w: &[&[i8]], acc: &mut [i32]);
/// `Σ x·b` over biased nibbles (uncorrected) of a tile, exact in i32: `x`
/// holds `xr` activation rows in the family's [`Layout`], cut to whole
/// blocks, and `w` the `wr` packed rows cut to the same columns (half as many
/// bytes); writes `acc[i · wr + q]`. With a copied layout the last block may
/// be the K tail padded with zeros, and `w` then runs on into the next rows'
/// codes, which meet only zeros: the tile sums it like any block.
pub type TileI8Q4 = fn(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]);
/// W4A8 grouped over a tile from group 0, in increasing group order: writes
/// `out[i · wr + q] = Σ_g (acc_g as f32) * s[q · groups + g]` with `acc_g =
/// Σ x·b − 8·sums[i][g]` exact, over the groups it covers, and returns the
/// first group not added (the same for the whole tile; the frame adds the
/// rest). `x` is cut to whole blocks in the family's layout, `w` to the same
/// columns; each `sums` row holds the `groups` sums of an activation row,
/// and `s` the tile's `wr` rows of `groups` f32 scales, one after another.
/// The last block may be the K tail padded with zeros (as for
/// [`TileI8Q4`]): when the family's block is wider than a group, `x` can
/// then hold more whole groups than `groups`, and the tile adds at most
/// `groups`.
pub type TileGroupedQ4 = fn(x: &[&[i8]], sums: &[&[i32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]) -> usize;
/// The spec's 8-lane partial (§6.2) of `x · q` over whole rows of `k`
/// columns, codes from int8 rows: `x` holds `xr` rows laid out per the
/// family ([`Layout::Chunked`], the whole row one group);
/// writes `out[i · wr + q]`, the frame multiplies by the scale.
pub type TileF32Q8 = fn(x: &[&[f32]], w: &[&[i8]], k: usize, out: &mut [f32]);
/// As [`TileF32Q8`] for packed biased Q4 rows (code = nibble − 8).
pub type TileF32Q4 = fn(x: &[&[f32]], w: &[&[u8]], k: usize, out: &mut [f32]);
/// W4A16 grouped over a tile: `out[i · wr + q] = Σ_g s[q · groups + g] ·
/// partial_g`, the 8-lane partial of each group, added in increasing g from
/// +0 (`groups = s.len() / wr`). `x` rows are laid out per group of `g`
/// columns.
pub type TileF32Q4Grouped = fn(x: &[&[f32]], w: &[&[u8]], s: &[f32], g: usize, out: &mut [f32]);

/// One kernel family of one tier on the frame: the micro-kernels, the `i`-th
/// computing `shapes.tiles[i]`, and what the frame prepares for them.
#[derive(Debug, Clone, Copy)]
pub struct Family<T: 'static> {
    /// The declared tiles and chunk.
    pub shapes: Shapes,
    /// One micro-kernel per declared tile, in the same order.
    pub kernels: &'static [T],
    /// Integer families: columns per block (even, > 0); the micro-kernels
    /// see whole blocks and the frame adds the rest. Float families: 8.
    pub block: usize,
    /// The activation layout the micro-kernels read.
    pub layout: Layout,
    /// Grouped families: converts one weight row's f16 group scales to f32
    /// (exactly; a tier may use its conversion instruction).
    pub scales_to_f32: fn(&[f16], &mut [f32]),
}

/// Exact f16 → f32 of a row of group scales, portable.
pub fn scales_to_f32(src: &[f16], dst: &mut [f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f32::from(*s);
    }
}

/// Integer activation rows in a family's layout: row `i` is
/// `buf[start + i · stride ..][.. len]`, cut to the `kb` columns of whole
/// blocks. A copied layout starts every row on a 64-byte boundary and holds
/// `kp` columns: the columns past the last whole block, then zeros up to a
/// whole block (`kp = kb` when `k` is whole blocks, and for the borrowed
/// natural layout). A tile may read that padded block against weight rows
/// that run on into the next row's codes: the zeros make those products
/// vanish, so the integer sums are the K tail's exactly (`gemm_w4a8`).
pub(crate) struct IntRows<'a> {
    buf: std::borrow::Cow<'a, [i8]>,
    kb: usize,
    kp: usize,
    len: usize,
    start: usize,
    stride: usize,
    /// [`Layout::EvenOddQuads16`]'s blocks, aligned like the rows.
    quads: Vec<i8>,
    quads_start: usize,
}

/// The alignment of every copied activation row, in bytes.
const ROW_ALIGN: usize = 64;

impl<'a> IntRows<'a> {
    /// The natural layout borrows the caller's codes (a GEMV is called per
    /// range of rows: a copy per call would cost more than the kernel's
    /// bookkeeping); the others are written once per call.
    fn new(x: &ActivationsQ8<'a>, block: usize, layout: Layout) -> Self {
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
            };
        }
        IntRows::copied(x, block, layout)
    }
}

impl IntRows<'static> {
    /// The rows of `x` written out in `layout` (any but the natural one).
    fn copied(x: &ActivationsQ8<'_>, block: usize, layout: Layout) -> Self {
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
        // room to move the first row to an aligned address
        let mut out = vec![0i8; x.m * stride + ROW_ALIGN];
        let start = out.as_ptr().align_offset(ROW_ALIGN).min(ROW_ALIGN);
        // the row, and for the paired layouts the next row, each with its
        // zero padding to a whole block (copied only when there is a tail)
        let (mut padded, mut next_padded) = (vec![0i8; kp], vec![0i8; kp]);
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
                    let next = (i + 1 < x.m).then(|| {
                        next_padded[..x.k].copy_from_slice(x.row(i + 1));
                        &next_padded[..]
                    });
                    // each 8-column chunk of the row, then the next row's
                    // same columns: natural chunks, or per 16 columns the
                    // even then the odd ones
                    let chunk = |r: &[i8], c: usize| -> [i8; 8] {
                        match layout {
                            Layout::Pairs8 => std::array::from_fn(|j| r[c + j]),
                            _ => {
                                let (c16, odd) = (c / 16 * 16, c / 8 % 2);
                                std::array::from_fn(|j| r[c16 + 2 * j + odd])
                            }
                        }
                    };
                    for (c, pair) in (0..kp).step_by(8).zip(dst.chunks_exact_mut(16)) {
                        pair[..8].copy_from_slice(&chunk(row, c));
                        pair[8..].copy_from_slice(&next.map_or([0; 8], |n| chunk(n, c)));
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
        }
    }
}

impl IntRows<'_> {
    fn row(&self, i: usize) -> &[i8] {
        let at = self.start + i * self.stride;
        &self.buf[at..at + self.len]
    }

    /// View `d` of a tile `xr` activation rows tall from row `i0`, over the
    /// whole blocks (`kb` columns) or with `padded` over the padded block
    /// too (`kp`): the interleaved block for a 16-row tile on
    /// [`Layout::EvenOddQuads16`], else row `i0 + d`. Every layout keeps a
    /// column prefix in a prefix of the bytes, so both are prefixes.
    pub(crate) fn view(&self, xr: usize, i0: usize, d: usize, padded: bool) -> &[i8] {
        let cols = if padded { self.kp } else { self.kb };
        if xr == 16 && !self.quads.is_empty() {
            let at = self.quads_start + i0 / 16 * 16 * self.kp;
            &self.quads[at..at + 16 * cols]
        } else {
            // bytes per column: 1, or 2 for the paired layouts
            let per = self.len.checked_div(self.kp).unwrap_or(1);
            &self.row(i0 + d)[..per * cols]
        }
    }
}

/// What a cached layout was made from: the rows (by address and shape) and
/// the layout, so that a cache is never read for other rows or another
/// family's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LayoutKey {
    rows_at: usize,
    m: usize,
    k: usize,
    block: usize,
    layout: Layout,
}

impl LayoutKey {
    fn of<T>(rows: &[T], m: usize, k: usize, block: usize, layout: Layout) -> Self {
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
fn cached<R>(cell: &OnceLock<(LayoutKey, R)>, key: LayoutKey, make: impl FnOnce() -> R) -> Option<&R> {
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
#[derive(Debug, Default)]
pub struct LayoutCache {
    int: OnceLock<(LayoutKey, IntRows<'static>)>,
    float: OnceLock<(LayoutKey, FloatRows)>,
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
    pub(crate) fn of(x: &ActivationsQ8<'a>, block: usize, layout: Layout) -> Self {
        let key = LayoutKey::of(x.codes, x.m, x.k, block, layout);
        let cache = x.layouts().filter(|_| layout != Layout::Natural);
        match cache.and_then(|c| cached(&c.int, key, || IntRows::copied(x, block, layout))) {
            Some(rows) => IntView::Ready(rows),
            None => IntView::Own(IntRows::new(x, block, layout)),
        }
    }

    pub(crate) fn rows(&self) -> &IntRows<'a> {
        match self {
            IntView::Ready(r) => r,
            IntView::Own(r) => r,
        }
    }
}

/// f32 rows laid out per group, `len` values a row.
#[derive(Debug)]
struct FloatRows {
    values: Vec<f32>,
    len: usize,
}

impl FloatRows {
    fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.len..(i + 1) * self.len]
    }
}

/// f32 rows for a family, from the call's cache or laid out here.
enum FloatView<'a> {
    Ready(&'a FloatRows),
    Own(FloatRows),
}

impl<'a> FloatView<'a> {
    fn of(x: &ActivationsF32<'a>, group: usize, layout: Layout) -> Self {
        let key = LayoutKey::of(x.x, x.m, x.k, group, layout);
        match x
            .layouts()
            .and_then(|c| cached(&c.float, key, || float_rows(x, group, layout)))
        {
            Some(rows) => FloatView::Ready(rows),
            None => FloatView::Own(float_rows(x, group, layout)),
        }
    }

    fn rows(&self) -> &FloatRows {
        match self {
            FloatView::Ready(r) => r,
            FloatView::Own(r) => r,
        }
    }
}

/// Row `r` of a weight's codes, `stride` a row: the codes are looked up once
/// per call, not per row (a weight read in place from a file's map finds
/// them through an indirect call).
fn rows_of<'w, T>(codes: &'w [T], stride: usize) -> impl Fn(usize) -> &'w [T] + 'w {
    move |r| &codes[r * stride..(r + 1) * stride]
}

/// The row views a micro-kernel receives, kept across the tiles of one call
/// so that each tile writes only the entries it uses.
struct Views<'a, T> {
    v: [&'a [T]; MAX_SIDE],
}

impl<'a, T> Views<'a, T> {
    fn new() -> Self {
        Views { v: [&[]; MAX_SIDE] }
    }

    /// The first `n` views, the `d`-th being `at(d)`.
    fn set(&mut self, n: usize, at: impl Fn(usize) -> &'a [T]) -> &[&'a [T]] {
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
    fn set_rows(&mut self, base: &'a [T], r0: usize, n: usize, stride: usize, len: usize) -> &[&'a [T]] {
        let v = &mut self.v[..n];
        let Some(last) = n.checked_sub(1) else {
            return v;
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
        for (q, v) in v.iter_mut().enumerate() {
            let at = q * stride;
            // SAFETY: q ≤ last, so at + len ≤ last · stride + len = span.len()
            // (computed above without overflow), and at ≤ at + len.
            *v = unsafe { span.get_unchecked(at..at + len) };
        }
        v
    }
}

/// W8A8 on a tier's micro-kernels: `y = (acc as f32) * (x_scale · w_scale)`
/// with `acc` the exact i32 `Σ x·w` (§6.1). Panics on shapes that do not
/// match (the dispatch layer checks them first).
pub fn gemm_w8a8(
    f: &Family<TileI8I8>,
    x: &ActivationsQ8<'_>,
    w: &QuantizedMatrix,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    x.check();
    y.check(x.m, rows.len());
    assert!(rows.end <= w.n() && w.k() == x.k, "W8A8 shapes");
    assert!(
        f.block > 0 && !matches!(f.layout, Layout::EvenOdd | Layout::EvenOddQuads16),
        "W8A8 family layout"
    );
    let xs = IntView::of(x, f.block, f.layout);
    let xs = xs.rows();
    let (kb, tails) = (xs.kb, xs.kb < x.k);
    let s = w.scales();
    let codes = w.codes();
    let wrow = rows_of(codes, w.k());
    let mut acc = [0i32; MAX_TILE];
    let mut out = [0f32; MAX_SIDE];
    let (mut xv, mut wv) = (Views::new(), Views::new());
    f.shapes.sweep_indexed(x.m, rows.clone(), |index, t, r0, i0| {
        let xv = xv.set(t.xr, |d| xs.view(t.xr, i0, d, false));
        let wv = wv.set_rows(codes, r0, t.wr, x.k, kb);
        (f.kernels[index])(xv, wv, &mut acc[..t.wr * t.xr]);
        let s = &s[r0..r0 + t.wr];
        for (d, acc) in acc[..t.wr * t.xr].chunks_exact_mut(t.wr).enumerate() {
            let (i, xs) = (i0 + d, x.scales[i0 + d]);
            // the columns past the whole blocks, tested once a tile row
            if tails {
                add_tails(acc, |q, a| *a += dot_i8_i8(&x.row(i)[kb..], &wrow(r0 + q)[kb..]));
            }
            for ((&a, v), &sr) in acc.iter().zip(&mut out).zip(s) {
                *v = a as f32 * (xs * sr);
            }
            y.set_run(i, r0 - rows.start, &out[..t.wr]);
        }
    });
}

/// `add(q, &mut acc[q])` for every weight row `q` of one activation row's
/// tile results: the columns a micro-kernel left (the K tail past the whole
/// blocks, or a grouped tile's last groups), out of the tile loop. Inlined
/// there, it made the loop spill its registers on every tile, tail or not:
/// W8A8 at 576 × 576, AVX2, 19 502 → 17 127 instructions a call outside
/// the micro-kernel (callgrind, AMD EPYC Zen 4, on `597ac8b` with the
/// views of [`Views::set_rows`]).
#[cold]
#[inline(never)]
fn add_tails<T>(acc: &mut [T], add: impl Fn(usize, &mut T)) {
    for (q, a) in acc.iter_mut().enumerate() {
        add(q, a);
    }
}

/// Which weight rows a tile may read over the activations' padded block
/// ([`IntRows`]): a packed row cut to `kp / 2` bytes runs on into the next
/// row's codes (rows are contiguous), which meet the padding's zeros and add
/// nothing, so a tile covers the K tail in its own blocks instead of the
/// frame's portable loop. Only the rows whose cut ends inside the codes can:
/// a tile that holds a row past them (the matrix's last row, or more at a
/// tiny K) takes the whole blocks and the frame adds the tail.
struct PaddedReach<'w> {
    packed: &'w [u8],
    stride: usize,
    kb: usize,
    kp: usize,
}

impl<'w> PaddedReach<'w> {
    fn new(xs: &IntRows<'_>, w: &'w QuantizedMatrixQ4) -> Self {
        PaddedReach {
            packed: w.packed(),
            stride: w.row_stride(),
            kb: xs.kb,
            kp: xs.kp,
        }
    }

    /// Whether a tile of the rows before `end` reads the padded block.
    fn covers(&self, end: usize) -> bool {
        self.kp > self.kb && end >= 1 && (end - 1) * self.stride + self.kp / 2 <= self.packed.len()
    }

    /// Rows `r0..r0 + n`' codes over the whole blocks, or with `padded`
    /// over the padded block (on into the next row's codes), as `views`.
    fn rows<'v>(&self, views: &'v mut Views<'w, u8>, r0: usize, n: usize, padded: bool) -> &'v [&'w [u8]] {
        let cols = if padded { self.kp } else { self.kb };
        views.set_rows(self.packed, r0, n, self.stride, cols / 2)
    }
}

/// W4A8 per channel on a tier's micro-kernels: `acc = Σ x·b − 8·Σ x`, `y =
/// (acc as f32) * (x_scale · w_scale)` (§6.1).
pub fn gemm_w4a8(
    f: &Family<TileI8Q4>,
    x: &ActivationsQ8<'_>,
    w: &QuantizedMatrixQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::PerChannel(s) = w.scales() else {
        panic!("gemm_w4a8 needs per-channel scales")
    };
    assert!(
        rows.end <= w.n() && w.k() == x.k && (x.sum_group == x.k || x.k == 0),
        "W4A8 shapes"
    );
    assert!(f.block > 0 && f.block.is_multiple_of(2), "W4A8 family block");
    let xs = IntView::of(x, f.block, f.layout);
    let xs = xs.rows();
    let (kb, tails) = (xs.kb, xs.kb < x.k);
    let prow = rows_of(w.packed(), w.row_stride());
    let reach = PaddedReach::new(xs, w);
    let mut acc = [0i32; MAX_TILE];
    let mut out = [0f32; MAX_SIDE];
    let (mut xv, mut wv) = (Views::new(), Views::new());
    f.shapes.sweep_indexed(x.m, rows.clone(), |index, t, r0, i0| {
        let padded = reach.covers(r0 + t.wr);
        let xv = xv.set(t.xr, |d| xs.view(t.xr, i0, d, padded));
        let wv = reach.rows(&mut wv, r0, t.wr, padded);
        (f.kernels[index])(xv, wv, &mut acc[..t.wr * t.xr]);
        let tails = tails && !padded;
        let s = &s[r0..r0 + t.wr];
        for (d, acc) in acc[..t.wr * t.xr].chunks_exact_mut(t.wr).enumerate() {
            let i = i0 + d;
            let (correction, xs) = (8 * x.row_sums(i)[0], x.scales[i]);
            // the columns past the whole blocks, tested once a tile row
            if tails {
                add_tails(acc, |q, a| {
                    *a += dot_i8_q4_biased(&x.row(i)[kb..], &prow(r0 + q)[kb / 2..])
                });
            }
            for ((&a, v), &sr) in acc.iter().zip(&mut out).zip(s) {
                *v = (a - correction) as f32 * (xs * sr);
            }
            y.set_run(i, r0 - rows.start, &out[..t.wr]);
        }
    });
}

/// The f32 group scales of the weight-row chunk being swept, converted once
/// per chunk (the grouped families' sweeps take a chunk of 16 rows when the
/// family declares none).
struct ChunkScales<'a> {
    conv: fn(&[f16], &mut [f32]),
    scales: &'a [f16],
    groups: usize,
    rows: Range<usize>,
    chunk: usize,
    start: usize,
    buf: Vec<f32>,
}

impl<'a> ChunkScales<'a> {
    fn new(
        f_conv: fn(&[f16], &mut [f32]),
        scales: &'a [f16],
        groups: usize,
        rows: Range<usize>,
        shapes: &Shapes,
    ) -> Self {
        let chunk = if shapes.chunk == 0 { 16 } else { shapes.chunk };
        ChunkScales {
            conv: f_conv,
            scales,
            groups,
            rows,
            chunk,
            start: usize::MAX,
            buf: Vec::new(),
        }
    }

    /// The shapes to sweep with: the family's, with this chunk.
    fn shapes(&self, shapes: &Shapes) -> Shapes {
        Shapes {
            chunk: self.chunk,
            ..*shapes
        }
    }

    /// The scales of weight rows `r0 .. r0 + n` (inside one chunk), one
    /// row of `groups` after another; converts the chunk on first use.
    fn rows(&mut self, r0: usize, n: usize) -> &[f32] {
        let c0 = self.rows.start + (r0 - self.rows.start) / self.chunk * self.chunk;
        if self.start != c0 {
            let (g, end) = (self.groups, (c0 + self.chunk).min(self.rows.end));
            // every element is overwritten below: resizing (a no-op from one
            // whole chunk to the next) instead of clearing first saves
            // writing the chunk's scales twice
            self.buf.resize((end - c0) * g, 0.0);
            // the chunk's rows are contiguous: one call converts them all
            (self.conv)(&self.scales[c0 * g..end * g], &mut self.buf);
            self.start = c0;
        }
        &self.buf[(r0 - c0) * self.groups..(r0 - c0 + n) * self.groups]
    }
}

/// W4A8 grouped on a tier's micro-kernels: per group `acc_g` exact in i32,
/// `sum += (acc_g as f32) * f32(s_g)` in increasing g, `y = sum · x_scale`
/// (§6.1). The micro-kernel adds the groups it covers; the frame adds the
/// rest in the same order.
pub fn gemm_w4a8_grouped(
    f: &Family<TileGroupedQ4>,
    x: &ActivationsQ8<'_>,
    w: &QuantizedMatrixQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::Grouped { group, scales } = w.scales() else {
        panic!("gemm_w4a8_grouped needs group scales")
    };
    let (g, groups) = (*group, w.k() / *group);
    assert!(
        rows.end <= w.n() && w.k() == x.k && x.sum_group == g,
        "W4A8 grouped shapes"
    );
    assert!(f.block > 0 && f.block.is_multiple_of(2), "W4A8 grouped family block");
    let xs = IntView::of(x, f.block, f.layout);
    let xs = xs.rows();
    let prow = rows_of(w.packed(), w.row_stride());
    let reach = PaddedReach::new(xs, w);
    let mut sf = ChunkScales::new(f.scales_to_f32, scales, groups, rows.clone(), &f.shapes);
    let mut out = [0f32; MAX_TILE];
    let (mut xv, mut sv, mut wv) = (Views::new(), Views::new(), Views::new());
    sf.shapes(&f.shapes)
        .sweep_indexed(x.m, rows.clone(), |index, t, r0, i0| {
            let padded = reach.covers(r0 + t.wr);
            let xv = xv.set(t.xr, |d| xs.view(t.xr, i0, d, padded));
            let sv = sv.set(t.xr, |d| &x.row_sums(i0 + d)[..groups]);
            let wv = reach.rows(&mut wv, r0, t.wr, padded);
            let st = sf.rows(r0, t.wr);
            let kernel = f.kernels[index];
            let done = kernel(xv, sv, wv, st, g, &mut out[..t.wr * t.xr]);
            for (d, out) in out[..t.wr * t.xr].chunks_exact_mut(t.wr).enumerate() {
                let i = i0 + d;
                // the groups the micro-kernel left, in increasing g
                if done < groups {
                    let (xr, sums) = (x.row(i), x.row_sums(i));
                    add_tails(out, |q, sum| {
                        let (wr, sr) = (prow(r0 + q), &st[q * groups..(q + 1) * groups]);
                        for gi in done..groups {
                            let acc = dot_i8_q4_biased(&xr[gi * g..(gi + 1) * g], &wr[gi * g / 2..(gi + 1) * g / 2])
                                - 8 * sums[gi];
                            *sum += acc as f32 * sr[gi];
                        }
                    });
                }
                let xs = x.scales[i];
                for sum in out.iter_mut() {
                    *sum *= xs;
                }
                y.set_run(i, r0 - rows.start, out);
            }
        });
}

/// f32 activation rows laid out per group of `group` columns.
fn float_rows(x: &ActivationsF32<'_>, group: usize, layout: Layout) -> FloatRows {
    // a table's registration, fixed at compile time, not an input
    let q4_order = match layout {
        Layout::Chunked => false,
        Layout::ChunkedQ4 => true,
        _ => panic!("a float family needs a chunked layout"),
    };
    let rows: Vec<Vec<f32>> = (0..x.m).map(|i| chunked_f32(x.row(i), group, q4_order)).collect();
    let len = rows.first().map_or(0, Vec::len);
    FloatRows {
        values: rows.concat(),
        len,
    }
}

/// A per-channel float micro-kernel over weight rows of `W`.
type TileF32<W> = fn(&[&[f32]], &[&[W]], usize, &mut [f32]);

/// W8A16 and W4A16 per channel on a tier's micro-kernels: `y = w_scale ·
/// partial` (§6.2).
#[allow(clippy::too_many_arguments)]
fn float_per_channel<W: 'static>(
    kernels: &'static [TileF32<W>],
    f_shapes: &Shapes,
    layout: Layout,
    x: &ActivationsF32<'_>,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
    (codes, stride): (&[W], usize),
    s: &[f32],
) {
    let xs = FloatView::of(x, x.k, layout);
    let xs = xs.rows();
    let mut out = [0f32; MAX_TILE];
    let (mut xv, mut wv) = (Views::new(), Views::new());
    f_shapes.sweep_indexed(x.m, rows.clone(), |index, t, r0, i0| {
        let xv = xv.set(t.xr, |d| xs.row(i0 + d));
        let wv = wv.set_rows(codes, r0, t.wr, stride, stride);
        (kernels[index])(xv, wv, x.k, &mut out[..t.wr * t.xr]);
        let s = &s[r0..r0 + t.wr];
        for (d, out) in out[..t.wr * t.xr].chunks_exact_mut(t.wr).enumerate() {
            for (v, &sr) in out.iter_mut().zip(s) {
                *v *= sr;
            }
            y.set_run(i0 + d, r0 - rows.start, out);
        }
    });
}

/// W8A16 on a tier's micro-kernels: `y = w_scale · partial` (§6.2).
pub fn gemm_w8a16(
    f: &Family<TileF32Q8>,
    x: &ActivationsF32<'_>,
    w: &QuantizedMatrix,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    x.check();
    y.check(x.m, rows.len());
    assert!(rows.end <= w.n() && w.k() == x.k, "W8A16 shapes");
    let codes = (w.codes(), w.k());
    float_per_channel(f.kernels, &f.shapes, f.layout, x, rows, y, codes, w.scales());
}

/// W4A16 per channel on a tier's micro-kernels: `y = w_scale · partial` (§6.2).
pub fn gemm_w4a16(
    f: &Family<TileF32Q4>,
    x: &ActivationsF32<'_>,
    w: &QuantizedMatrixQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::PerChannel(s) = w.scales() else {
        panic!("gemm_w4a16 needs per-channel scales")
    };
    assert!(rows.end <= w.n() && w.k() == x.k, "W4A16 shapes");
    let packed = (w.packed(), w.row_stride());
    float_per_channel(f.kernels, &f.shapes, f.layout, x, rows, y, packed, s);
}

/// W4A16 grouped on a tier's micro-kernels: `y = Σ_g f32(s_g) · partial_g`
/// in increasing g, from +0 (§6.2); the micro-kernel owns the whole sum.
pub fn gemm_w4a16_grouped(
    f: &Family<TileF32Q4Grouped>,
    x: &ActivationsF32<'_>,
    w: &QuantizedMatrixQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    x.check();
    y.check(x.m, rows.len());
    let Q4Scales::Grouped { group, scales } = w.scales() else {
        panic!("gemm_w4a16_grouped needs group scales")
    };
    let (g, groups) = (*group, w.k() / *group);
    assert!(rows.end <= w.n() && w.k() == x.k, "W4A16 grouped shapes");
    let xs = FloatView::of(x, g, f.layout);
    let xs = xs.rows();
    let (packed, stride) = (w.packed(), w.row_stride());
    let mut sf = ChunkScales::new(f.scales_to_f32, scales, groups, rows.clone(), &f.shapes);
    let mut out = [0f32; MAX_TILE];
    let (mut xv, mut wv) = (Views::new(), Views::new());
    sf.shapes(&f.shapes)
        .sweep_indexed(x.m, rows.clone(), |index, t, r0, i0| {
            let xv = xv.set(t.xr, |d| xs.row(i0 + d));
            let wv = wv.set_rows(packed, r0, t.wr, stride, stride);
            let st = sf.rows(r0, t.wr);
            (f.kernels[index])(xv, wv, st, g, &mut out[..t.wr * t.xr]);
            for (d, out) in out[..t.wr * t.xr].chunks_exact(t.wr).enumerate() {
                y.set_run(i0 + d, r0 - rows.start, out);
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    const TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(2, 4), Tile::new(1, 4)];

    #[test]
    fn a_tiles_row_views_are_its_rows_and_may_reach_into_the_next() {
        let base: Vec<u8> = (0..40).collect();
        let mut views = Views::new();
        // rows 2..5 of stride 8, cut to 6 elements
        let v = views.set_rows(&base, 2, 3, 8, 6);
        assert_eq!(v, [&base[16..22], &base[24..30], &base[32..38]]);
        // cut past the stride: each view runs on into the next row
        let v = views.set_rows(&base, 1, 2, 8, 12);
        assert_eq!(v, [&base[8..20], &base[16..28]]);
        assert!(views.set_rows(&base, 4, 0, 8, 8).is_empty());
        // the last view may end exactly at the end
        assert_eq!(views.set_rows(&base, 3, 2, 8, 8)[1], &base[32..40]);
    }

    // WASI builds abort on a panic, so the refusals run natively only
    #[test]
    #[should_panic(expected = "out of range")]
    #[cfg_attr(target_os = "wasi", ignore)]
    fn a_view_past_the_base_panics() {
        let base = [0u8; 40];
        Views::new().set_rows(&base, 3, 2, 8, 9);
    }

    #[test]
    #[should_panic(expected = "overflow")]
    #[cfg_attr(target_os = "wasi", ignore)]
    fn an_overflowing_span_panics() {
        Views::<u8>::new().set_rows(&[], usize::MAX, 2, 8, 1);
    }

    #[test]
    fn sweep_covers_every_pair_once() {
        let shapes = Shapes { tiles: TILES, chunk: 8 };
        shapes.validate().unwrap();
        for m in 0..11 {
            for (start, end) in [(0, 0), (0, 1), (3, 22), (5, 9)] {
                let mut seen = vec![0u32; m * 30];
                shapes.sweep(m, start..end, |t, r0, i0| {
                    assert!(TILES.contains(&t));
                    assert!(r0 + t.wr <= end && i0 + t.xr <= m);
                    // a tile never straddles a chunk
                    assert_eq!((r0 - start) / 8, (r0 + t.wr - 1 - start) / 8);
                    for d in 0..t.xr {
                        for q in 0..t.wr {
                            seen[(i0 + d) * 30 + r0 + q] += 1;
                        }
                    }
                });
                for i in 0..m {
                    for r in 0..30 {
                        assert_eq!(seen[i * 30 + r], u32::from((start..end).contains(&r)), "m {m} row {r}");
                    }
                }
            }
        }
    }

    #[test]
    fn sweep_prefers_the_largest_tiles() {
        let shapes = Shapes { tiles: TILES, chunk: 0 };
        let mut used = Vec::new();
        shapes.sweep(5, 0..5, |t, r0, i0| used.push((t, r0, i0)));
        assert_eq!(
            used,
            [
                (Tile::new(2, 4), 0, 0),
                (Tile::new(2, 4), 2, 0),
                (Tile::new(1, 4), 4, 0),
                (Tile::new(4, 1), 0, 4),
                (Tile::ONE, 4, 4),
            ]
        );
    }

    #[test]
    fn validation_names_what_is_missing() {
        const NO_ONE: &[Tile] = &[Tile::new(4, 1)];
        const NO_LEFTOVER: &[Tile] = &[Tile::ONE, Tile::new(2, 4)];
        const TOO_BIG: &[Tile] = &[Tile::ONE, Tile::new(17, 1)];
        let shapes = |tiles| Shapes { tiles, chunk: 0 };
        assert_eq!(shapes(NO_ONE).validate().unwrap_err(), "no 1×1 tile");
        assert!(shapes(NO_LEFTOVER).validate().unwrap_err().contains("no 1×4 tile"));
        assert!(shapes(TOO_BIG).validate().unwrap_err().contains("17×1"));
    }

    /// The (activation, weight) lengths each call of [`tile_q4_recorded`]
    /// received (one test uses it).
    static TILE_LENS: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());

    /// `Σ x·b` per pair of rows in natural order (the `Aligned` layout),
    /// recording the lengths it was handed.
    fn tile_q4_recorded(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
        TILE_LENS.lock().unwrap().push((x[0].len(), w[0].len()));
        for (i, xr) in x.iter().enumerate() {
            for (q, wr) in w.iter().enumerate() {
                acc[i * w.len() + q] = dot_i8_q4_biased(xr, wr);
            }
        }
    }

    #[test]
    fn q4_tiles_read_the_padded_block_where_the_weight_rows_reach_it() {
        // K = 40 in blocks of 32: kb = 32, kp = 64; rows of 20 packed bytes,
        // so a row cut to 32 bytes runs 12 into the next row's codes
        let (n, k) = (9, 40);
        let wf: Vec<f32> = (0..n * k).map(|i| ((i * 37 % 29) as f32 - 14.0) / 7.0).collect();
        let w = QuantizedMatrixQ4::quantize(n, k, qlinear_quant_recipe::GroupSize::PerChannel, &wf).unwrap();
        let codes: Vec<i8> = (0..k).map(|c| ((c * 53 % 255) as i32 - 127) as i8).collect();
        let sum = codes.iter().map(|&c| i32::from(c)).sum::<i32>();
        let sums = [sum];
        let x = ActivationsQ8::new(1, k, &codes, &[0.5], &sums, k).unwrap();
        const FAMILY: Family<TileI8Q4> = Family {
            shapes: Shapes {
                tiles: &[Tile::ONE, Tile::new(4, 1)],
                chunk: 4,
            },
            kernels: &[tile_q4_recorded, tile_q4_recorded],
            block: 32,
            layout: Layout::Aligned,
            scales_to_f32,
        };
        let (mut got, mut want) = (vec![0f32; n], vec![0f32; n]);
        let mut y = OutputTile::new(&mut got, n);
        gemm_w4a8(&FAMILY, &x, &w, 0..n, &mut y);
        let mut y = OutputTile::new(&mut want, n);
        crate::int::gemm_w4a8(&x, &w, 0..n, &mut y);
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
        // rows 0..4 and 4..8 end inside the codes (7 · 20 + 32 <= 180); the
        // tile holding row 8 takes the whole block and the frame the tail
        assert_eq!(*TILE_LENS.lock().unwrap(), [(64, 32), (64, 32), (32, 16)]);
    }

    #[test]
    fn paired_layouts_put_each_row_beside_the_next() {
        // two rows of 40 codes (k = 40, blocks of 16: kb = 32), code = 50·row + column
        let codes: Vec<i8> = (0..2).flat_map(|r| (0..40).map(move |c| (r * 50 + c) as i8)).collect();
        let x = ActivationsQ8::new(2, 40, &codes, &[1.0, 1.0], &[0, 0], 40).unwrap();
        let v = |r: i8, cols: &[i8]| -> Vec<i8> { cols.iter().map(|&c| r * 50 + c).collect() };
        let seq = |from: i8, step: i8| -> Vec<i8> { (0..8).map(|j| from + step * j).collect() };
        let natural = IntRows::new(&x, 16, Layout::Pairs8);
        let even_odd = IntRows::new(&x, 16, Layout::Pairs8EvenOdd);
        let mut want_natural = Vec::new();
        let mut want_even_odd = Vec::new();
        for c in [0i8, 16] {
            for (cols_n, cols_e) in [(seq(c, 1), seq(c, 2)), (seq(c + 8, 1), seq(c + 1, 2))] {
                want_natural.extend(v(0, &cols_n));
                want_natural.extend(v(1, &cols_n));
                want_even_odd.extend(v(0, &cols_e));
                want_even_odd.extend(v(1, &cols_e));
            }
        }
        assert_eq!(natural.view(1, 0, 0, false), &want_natural[..]);
        assert_eq!(even_odd.view(1, 0, 0, false), &want_even_odd[..]);
        // the padded block: columns 32..40, then zeros to 48, beside the next row's
        let padded = natural.view(1, 0, 0, true);
        assert_eq!(padded.len(), 96);
        assert_eq!(&padded[..64], &want_natural[..]);
        assert_eq!(&padded[64..72], &v(0, &seq(32, 1))[..]);
        assert_eq!(&padded[72..80], &v(1, &seq(32, 1))[..]);
        assert!(padded[80..].iter().all(|&b| b == 0));
        // the last row is paired with zeros
        let last: Vec<i8> = even_odd
            .view(1, 1, 0, false)
            .chunks(8)
            .skip(1)
            .step_by(2)
            .flatten()
            .copied()
            .collect();
        assert!(last.iter().all(|&b| b == 0) && last.len() == 32);
        assert_eq!(&even_odd.view(1, 1, 0, false)[..8], &v(1, &seq(0, 2))[..]);
    }

    #[test]
    fn quads16_interleave_16_rows_per_4_bytes_with_the_sign_flipped() {
        // 17 rows of 130 codes (blocks of 128: kb = 128), code = row + 3·column
        let (m, k) = (17, 130);
        let code = |r: usize, c: usize| ((r + 3 * c) % 251) as i8;
        let codes: Vec<i8> = (0..m).flat_map(|r| (0..k).map(move |c| code(r, c))).collect();
        let x = ActivationsQ8::new(m, k, &codes, &[1.0; 17], &[0; 17], k).unwrap();
        let xs = IntRows::new(&x, 128, Layout::EvenOddQuads16);
        // the even/odd rows, 64-byte aligned, for tiles under 16 rows
        for i in [0, 16] {
            let row = xs.view(4, i.min(13), i - i.min(13), false);
            assert_eq!(row.as_ptr().align_offset(64), 0);
            let want: Vec<i8> = (0..64)
                .map(|j| code(i, 2 * j))
                .chain((0..64).map(|j| code(i, 2 * j + 1)))
                .collect();
            assert_eq!(row, &want[..]);
            // the padded block: columns 128 and 129 split even/odd, zeros elsewhere
            let padded = xs.view(4, i.min(13), i - i.min(13), true);
            assert_eq!(padded.len(), 256);
            assert_eq!(&padded[..128], &want[..]);
            for (j, &b) in padded[128..].iter().enumerate() {
                let want = match j {
                    0 => code(i, 128),
                    64 => code(i, 129),
                    _ => 0,
                };
                assert_eq!(b, want, "row {i} padded byte {j}");
            }
        }
        // a 16-row tile: every view is the block of rows 0..16
        let block = xs.view(16, 0, 5, false);
        assert_eq!(block.len(), 16 * 128);
        assert_eq!(xs.view(16, 0, 5, true).len(), 16 * 256);
        assert_eq!(block.as_ptr().align_offset(64), 0);
        for l in 0..16 {
            for j in 0..128 {
                let even_odd = if j < 64 {
                    code(l, 2 * j)
                } else {
                    code(l, 2 * (j - 64) + 1)
                };
                assert_eq!(
                    block[64 * (j / 4) + 4 * l + j % 4],
                    even_odd ^ i8::MIN,
                    "row {l} byte {j}"
                );
            }
        }
    }

    #[test]
    fn proof_calls_reach_every_tile_and_leftover() {
        // TILES: 1×1, 4×1, 2×4, 1×4; the 4-row tiles' 2 × 2 + 1 weight rows
        // do not reach the 4 × 1 tile twice, so xr = 1 has a call of its own
        let shapes = Shapes { tiles: TILES, chunk: 8 };
        assert_eq!(shapes.proof_calls(false), [(11, 5), (1, 11)]);
        assert_eq!(shapes.proof_calls(true), [(11, 13), (1, 19)]);
        assert_eq!(Shapes::SINGLE.proof_calls(true), [(3, 3)]);
        const WIDE: &[Tile] = &[Tile::ONE, Tile::new(16, 1), Tile::new(16, 4), Tile::new(1, 4)];
        let wide = Shapes { tiles: WIDE, chunk: 16 };
        assert_eq!(wide.proof_calls(false), [(11, 47)]);
        // every tile runs at least twice
        let mut used = std::collections::HashMap::new();
        for (m, n) in shapes.proof_calls(false) {
            shapes.sweep(m, 0..n, |t, _, _| *used.entry(t).or_insert(0) += 1);
        }
        assert!(TILES.iter().all(|t| used.get(t).copied().unwrap_or(0) >= 2), "{used:?}");
    }

    #[test]
    fn tail_proof_calls_run_every_tile_once() {
        // TILES: 1×1, 4×1, 2×4, 1×4
        let shapes = Shapes { tiles: TILES, chunk: 8 };
        assert_eq!(shapes.tail_proof_calls(), [(1, 7), (4, 3)]);
        assert_eq!(Shapes::SINGLE.tail_proof_calls(), [(1, 1)]);
        let mut used = std::collections::HashSet::new();
        for (m, n) in shapes.tail_proof_calls() {
            shapes.sweep(m, 0..n, |t, _, _| {
                used.insert(t);
            });
        }
        assert_eq!(used.len(), TILES.len(), "{used:?}");
    }
}
