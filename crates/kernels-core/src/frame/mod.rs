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
//!
//! Here: the sweep of the declared tiles (their contract is
//! `abi/tile.rs`); `rows.rs` lays the activation rows out as the tiles read
//! them, `views.rs` makes the weight-row views, `int.rs` and `float.rs` are
//! the integer and float families' GEMMs, `panels.rs` the panel form's
//! sweep, `layout.rs` the layouts' byte orders and `entries.rs` the macros a
//! tier registers its entries with.

use std::ops::Range;

use half::f16;
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrix, QuantizedMatrixQ4};

use crate::abi::activations::{ActivationsF32, ActivationsQ8, OutputTile};
use crate::abi::rows::IntRows;
use crate::abi::tile::{
    Family, Layout, Shapes, Tile, TileF32Q4, TileF32Q4Grouped, TileF32Q8, TileGroupedQ4, TileI8I8, TileI8Q4, MAX_SIDE,
    MAX_TILE,
};
use crate::reference::dot::{dot_i8_i8, dot_i8_q4_biased};

impl Shapes {
    /// The largest tile that fits `xr_left` activation rows and `wr_left`
    /// weight rows — most activation rows first, then most weight rows —
    /// with its index in `tiles`.
    fn pick(&self, xr_left: usize, wr_left: usize) -> (usize, Tile) {
        // plain loops: as iterator adapters (`max`, `max_by_key`) this took
        // about 180 instructions a pick for six tiles (callgrind, AVX2, AMD
        // EPYC Zen 4, family 25 model 17)
        let mut xr = 1;
        for t in self.tiles {
            if t.xr <= xr_left && t.xr > xr {
                xr = t.xr;
            }
        }
        let mut best = None;
        for (i, &t) in self.tiles.iter().enumerate() {
            // the last of equal tiles, as `max_by_key` gives
            if t.xr == xr && t.wr <= wr_left && best.is_none_or(|(_, b): (usize, Tile)| t.wr >= b.wr) {
                best = Some((i, t));
            }
        }
        best.unwrap_or_else(|| {
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
    #[inline]
    fn sweep_indexed(&self, m: usize, rows: Range<usize>, mut run: impl FnMut(usize, Tile, usize, usize)) {
        let mut chunk = if self.chunk == 0 { rows.len().max(1) } else { self.chunk };
        // a step's tiles depend only on the activation rows left, capped at
        // the tallest tile: the same in every chunk, so each is picked once
        // per sweep (picking per chunk cost 14 instructions a weight row of
        // a decode call at 576 × 576 on the Zen 3 EPYC, family 25 model 1,
        // before `75abfa8`: docs/benchmarks/history.md)
        let cap = self.max_xr().min(MAX_SIDE);
        let mut steps: [Option<(usize, usize, Tile)>; MAX_SIDE + 1] = [None; MAX_SIDE + 1];
        let mut step = |left: usize| {
            *steps[left].get_or_insert_with(|| {
                let xr = self.pick(left, usize::MAX).1.xr;
                // the widest tile for a chunk's full blocks
                let (wide, wt) = self.pick(xr, usize::MAX);
                (xr, wide, wt)
            })
        };
        // one activation step covering every row (decode) passes over each
        // chunk once, in order, so chunks change nothing when the widest
        // tile divides them (the tiles are the same): sweep the range as
        // one chunk, and skip a chunk's set-up per 16-row decode tile
        // (`Views::set_for` has the figure)
        if m > 0 && chunk < rows.len() {
            let (xr, _, wt) = step(m.min(cap));
            if xr >= m && chunk.is_multiple_of(wt.wr) {
                chunk = rows.len();
            }
        }
        let mut c0 = rows.start;
        while c0 < rows.end {
            let c1 = (c0 + chunk).min(rows.end);
            let mut i0 = 0;
            while i0 < m {
                let left = (m - i0).min(cap);
                let (xr, wide, wt) = step(left);
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

/// A `4·QUADS` × 4 W4A8 tile made of a tier's 4 × 4 tile (`tile`, the
/// `TileI8Q4` contract) over each 4 weight rows in turn, each of its sums
/// stored at its rows' columns (`acc[i · 4·QUADS + 4p + q]`), so that the
/// frame's work per tile call (the views, the scales, the store) is paid
/// once per `4·QUADS` weight rows. Integer sums: the bits are the inner
/// tile's. Used by the tiers whose 4 × 4 tile takes slices (WebAssembly,
/// NEON); the x86 tiers' inner tiles take arrays and loop themselves.
///
/// # Panics
/// Unless `x` has 4 rows, `w` `4·QUADS` and `acc` `16·QUADS` entries.
#[inline(always)]
pub fn quads_in_turn<const QUADS: usize>(
    x: &[&[i8]],
    w: &[&[u8]],
    acc: &mut [i32],
    tile: impl Fn(&[&[i8]], &[&[u8]], &mut [i32]),
) {
    assert!(x.len() == 4 && w.len() == 4 * QUADS && acc.len() == 16 * QUADS);
    let mut part = [0i32; 16];
    for p in 0..QUADS {
        tile(x, &w[4 * p..4 * p + 4], &mut part);
        for (row, sums) in acc.chunks_exact_mut(4 * QUADS).zip(part.chunks_exact(4)) {
            row[4 * p..4 * p + 4].copy_from_slice(sums);
        }
    }
}

// The families (`int.rs`, `float.rs`) call the sweep, the rows' and the
// views' small accessors once a tile: those carry `#[inline]`. A release
// build may give each module a codegen unit of its own, and a call across
// units is not inlined: splitting `frame.rs` into these files cost W8A8 and
// W4A8 9–11 % more instructions outside the micro-kernels until the hints,
// with which they count as the single file did or fewer (callgrind, AVX2,
// AMD EPYC Zen 4, `tools/callgrind_share.py`).
mod entries;
pub mod float;
pub mod int;
pub mod layout;
pub mod panels;
mod rows;
#[cfg(test)]
mod tests;
mod views;

use self::{int::*, rows::*, views::*};
pub use float::{gemm_w4a16, gemm_w4a16_grouped, gemm_w8a16};
pub use int::{gemm_w4a8, gemm_w4a8_grouped, gemm_w8a8};
pub(crate) use rows::IntView;
