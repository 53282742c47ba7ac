//! The tile contract: a micro-kernel's tile, the shapes a family declares,
//! the activation layouts the frame prepares, the micro-kernels' types and
//! a family's registration. The frame (`frame/`) sweeps these; the proof
//! derives its shapes from them.

use half::f16;

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
    /// ([`split_even_odd_i8`](crate::frame::layout::split_even_odd_i8)): the order in which the low and high nibbles
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
    /// f32 rows (or groups) in zero-padded chunks of 8 ([`chunked_f32`](crate::frame::layout::chunked_f32)),
    /// in column order.
    Chunked,
    /// As [`Layout::Chunked`], each chunk's columns stored as `[0, 2, 4, 6,
    /// 1, 3, 5, 7]` ([`chunked_f32`](crate::frame::layout::chunked_f32) in Q4 order): the order in which the low
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
