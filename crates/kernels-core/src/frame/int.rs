//! The integer families on a tier's micro-kernels: W8A8, W4A8 per channel
//! and grouped (`docs/NUMERICS.md` §6.1).

use super::*;

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
    // Decode: the family's 16 × 1 tile over the whole 16-row blocks of
    // `rows`, in a loop that only views, calls, scales and stores, on
    // arrays of 16 (a length the compiler sees); the rest goes through the
    // sweep below. Through the sweep a 16-row decode tile cost the frame
    // about 285 instructions (NEON SDOT under qemu; AVX2 alike), 16–24 % of
    // a small W8A8 call's; this loop first took 173, and 127 since the
    // views move on by 16 rows ([`Views::next_rows`]) and the outputs are
    // stored as one array ([`OutputTile::set_array`]). The bits are the
    // sweep's: the same exact sums, scaled and stored by the same
    // expressions.
    let mut start = rows.start;
    if let (1, false, Some(index)) = (
        x.m,
        tails,
        f.shapes.tiles.iter().position(|&t| t == Tile::new(MAX_SIDE, 1)),
    ) {
        let (tile, xs0, xv) = (f.kernels[index], x.scales[0], [xs.view(1, 0, 0, false)]);
        let mut sums = [0i32; MAX_SIDE];
        let mut first = true;
        while start + MAX_SIDE <= rows.end {
            let views = match first {
                true => wv.set_rows(codes, start, MAX_SIDE, x.k, kb),
                false => wv.next_rows(codes, MAX_SIDE).expect("the next 16 weight rows"),
            };
            first = false;
            tile(&xv, views, &mut sums);
            let sr: &[f32; MAX_SIDE] = s[start..start + MAX_SIDE].try_into().expect("16 scales");
            let v: [f32; MAX_SIDE] = std::array::from_fn(|q| sums[q] as f32 * (xs0 * sr[q]));
            y.set_array(0, start - rows.start, &v);
            start += MAX_SIDE;
        }
    }
    f.shapes.sweep_indexed(x.m, start..rows.end, |index, t, r0, i0| {
        let xv = xv.set_for((i0, t.xr, false), |d| xs.view(t.xr, i0, d, false));
        let wv = wv.set_rows(codes, r0, t.wr, x.k, kb);
        (f.kernels[index])(xv, wv, &mut acc[..t.wr * t.xr]);
        let s = &s[r0..r0 + t.wr];
        for d in 0..t.xr {
            let acc = &mut acc[d * t.wr..(d + 1) * t.wr];
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
pub(super) fn add_tails<T>(acc: &mut [T], add: impl Fn(usize, &mut T)) {
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
pub(super) struct PaddedReach<'w> {
    pub(super) packed: &'w [u8],
    pub(super) stride: usize,
    pub(super) kb: usize,
    pub(super) kp: usize,
}

impl<'w> PaddedReach<'w> {
    pub(super) fn new(xs: &IntRows<'_>, w: &'w QuantizedMatrixQ4) -> Self {
        PaddedReach {
            packed: w.packed(),
            stride: w.row_stride(),
            kb: xs.kb,
            kp: xs.kp,
        }
    }

    /// Whether a tile of the rows before `end` reads the padded block.
    #[inline]
    pub(super) fn covers(&self, end: usize) -> bool {
        self.kp > self.kb && end >= 1 && (end - 1) * self.stride + self.kp / 2 <= self.packed.len()
    }

    /// Rows `r0..r0 + n`' codes over the whole blocks, or with `padded`
    /// over the padded block (on into the next row's codes), as `views`.
    #[inline]
    pub(super) fn rows<'v>(&self, views: &'v mut Views<'w, u8>, r0: usize, n: usize, padded: bool) -> &'v [&'w [u8]] {
        let cols = if padded { self.kp } else { self.kb };
        views.set_rows(self.packed, r0, n, self.stride, cols / 2)
    }

    /// Rows `r0..r0 + n`' codes past the whole blocks, each copied into
    /// `scratch` and cut or filled with zeros to the padded block's
    /// `(kp − kb) / 2` bytes, as `views`: the tail of a tile that
    /// [`covers`](Self::covers) refuses (its last row would run past the
    /// codes), for one more call of the tile's own micro-kernel.
    pub(super) fn tail_rows<'s>(
        &self,
        scratch: &'s mut Vec<u8>,
        views: &'s mut Views<'s, u8>,
        r0: usize,
        n: usize,
    ) -> &'s [&'s [u8]] {
        let (from, bytes) = (self.kb / 2, (self.kp - self.kb) / 2);
        scratch.clear();
        scratch.resize(n * bytes, 0);
        for (q, dst) in scratch.chunks_exact_mut(bytes).enumerate() {
            let row = &self.packed[(r0 + q) * self.stride..(r0 + q + 1) * self.stride];
            let src = &row[from.min(row.len())..];
            let len = src.len().min(bytes);
            dst[..len].copy_from_slice(&src[..len]);
        }
        views.set_rows(scratch, 0, n, bytes, bytes)
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
    let mut scratch = Vec::new();
    f.shapes.sweep_indexed(x.m, rows.clone(), |index, t, r0, i0| {
        let padded = reach.covers(r0 + t.wr);
        let xv = xv.set_for((i0, t.xr, padded), |d| xs.view(t.xr, i0, d, padded));
        let wv = reach.rows(&mut wv, r0, t.wr, padded);
        let kernel = f.kernels[index];
        kernel(xv, wv, &mut acc[..t.wr * t.xr]);
        // a tile whose rows cannot reach the padded block (the matrix's
        // last rows) runs once more over it, from copies of its rows' K
        // tails: the frame's portable loop over those columns cost 7.7 % of
        // a W4A8 decode call at 576 × 576 on AVX-512 VNNI (blocks of 128;
        // `perf`, AMD EPYC Zen 4, family 25 model 17)
        let tails = tails && !padded;
        if tails && xs.kp > kb {
            add_tail_tile(kernel, xs, &reach, &mut scratch, t, r0, i0, &mut acc);
        }
        let s = &s[r0..r0 + t.wr];
        for d in 0..t.xr {
            let acc = &mut acc[d * t.wr..(d + 1) * t.wr];
            let i = i0 + d;
            let (correction, xs_scale) = (8 * x.row_sums(i)[0], x.scales[i]);
            // the columns past the whole blocks, tested once a tile row
            // (left only by a layout without a padded block)
            if tails && xs.kp == kb {
                add_tails(acc, |q, a| {
                    *a += dot_i8_q4_biased(&x.row(i)[kb..], &prow(r0 + q)[kb / 2..])
                });
            }
            for ((&a, v), &sr) in acc.iter().zip(&mut out).zip(s) {
                *v = (a - correction) as f32 * (xs_scale * sr);
            }
            y.set_run(i, r0 - rows.start, &out[..t.wr]);
        }
    });
}

/// Adds to `acc` (tile `t` at weight row `r0`, activation row `i0`) the
/// sums over the padded block that the tile's first call left, by a second
/// call of its micro-kernel on that block alone: the activation views'
/// last block, the weight rows' tails copied ([`PaddedReach::tail_rows`]).
/// Integer sums split at a block boundary add up to the same i32 (§6.1).
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn add_tail_tile(
    kernel: TileI8Q4,
    xs: &IntRows<'_>,
    reach: &PaddedReach<'_>,
    scratch: &mut Vec<u8>,
    t: Tile,
    r0: usize,
    i0: usize,
    acc: &mut [i32],
) {
    let mut part = [0i32; MAX_TILE];
    let mut xv = Views::new();
    let xv = xv.set(t.xr, |d| xs.tail_view(t.xr, i0, d));
    let mut wv = Views::new();
    let wv = reach.tail_rows(scratch, &mut wv, r0, t.wr);
    kernel(xv, wv, &mut part[..t.wr * t.xr]);
    for (a, p) in acc[..t.wr * t.xr].iter_mut().zip(&part) {
        *a = a.wrapping_add(*p);
    }
}

/// The f32 group scales of the weight-row chunk being swept, converted once
/// per chunk (the grouped families' sweeps take a chunk of 16 rows when the
/// family declares none).
pub(super) struct ChunkScales<'a> {
    pub(super) conv: fn(&[f16], &mut [f32]),
    pub(super) scales: &'a [f16],
    pub(super) groups: usize,
    pub(super) rows: Range<usize>,
    pub(super) chunk: usize,
    pub(super) start: usize,
    pub(super) buf: Vec<f32>,
}

impl<'a> ChunkScales<'a> {
    pub(super) fn new(
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
    pub(super) fn shapes(&self, shapes: &Shapes) -> Shapes {
        Shapes {
            chunk: self.chunk,
            ..*shapes
        }
    }

    /// The scales of weight rows `r0 .. r0 + n` (inside one chunk), one
    /// row of `groups` after another; converts the chunk on first use.
    #[inline]
    pub(super) fn rows(&mut self, r0: usize, n: usize) -> &[f32] {
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
            let xv = xv.set_for((i0, t.xr, padded), |d| xs.view(t.xr, i0, d, padded));
            let sv = sv.set_for((i0, t.xr, false), |d| &x.row_sums(i0 + d)[..groups]);
            let wv = reach.rows(&mut wv, r0, t.wr, padded);
            let st = sf.rows(r0, t.wr);
            let kernel = f.kernels[index];
            let done = kernel(xv, sv, wv, st, g, &mut out[..t.wr * t.xr]);
            for d in 0..t.xr {
                let out = &mut out[d * t.wr..(d + 1) * t.wr];
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
