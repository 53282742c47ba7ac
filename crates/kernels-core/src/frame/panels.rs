//! The panel sweep: a tier's panel tiles ([`PanelFamily`]) run over a
//! [`PanelsQ4`] weight, beside the natural sweep of `frame/mod.rs`.

use std::ops::Range;

use qlinear_quant_recipe::GroupSize;

use crate::abi::activations::{ActivationsQ8, OutputTile};
use crate::abi::panel::{PanelFamily, PanelsQ4, TilePanelQ4PerChannel, PANEL_GROUP, PANEL_ROWS, PIECE_COLS};
use crate::abi::tile::Layout;
use crate::frame::IntView;

/// Runs `f`'s tiles over the panels that hold `rows` (a panel half inside
/// the range is computed whole and half stored), `xr` activation rows at a
/// time, and stores `sum · x_scale`. Panics on shapes that do not match (the
/// dispatch layer checks them first) and on a per-channel panel form.
pub fn gemm_w4a8_grouped_panels(
    f: &PanelFamily,
    x: &ActivationsQ8<'_>,
    w: &PanelsQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    assert!(
        w.group_size() == GroupSize::Group(PANEL_GROUP) && x.sum_group == PANEL_GROUP,
        "W4A8 grouped panel shapes"
    );
    let scales = w.grouped_scales();
    let per_panel = PANEL_ROWS * w.groups();
    sweep(f, x, w, rows, y, |tile, xv, sv, ps, panels, out| {
        tile(xv, sv, panels, &scales[ps.start * per_panel..ps.end * per_panel], out)
    });
}

/// [`gemm_w4a8_grouped_panels`] per channel: runs `f`'s tiles over the
/// panels that hold `rows` and stores `(acc as f32) · (x_scale · w_scale)`.
/// Panics on shapes that do not match and on a grouped panel form.
pub fn gemm_w4a8_panels(
    f: &PanelFamily<TilePanelQ4PerChannel>,
    x: &ActivationsQ8<'_>,
    w: &PanelsQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
) {
    assert!(
        w.group_size() == GroupSize::PerChannel && x.sum_group == x.k,
        "W4A8 per-channel panel shapes"
    );
    sweep(f, x, w, rows, y, |tile, xv, sv, _, panels, out| {
        tile(xv, sv, panels, out)
    });
}

/// The sweep both panel entries share: activation rows in blocks of
/// [`ROW_BLOCK`] (4 for a decode call), each block's tiles chosen once,
/// every panel of `rows` computed by `run(tile, rows' codes, rows' sums,
/// panels, their bytes, out)` and stored times the activation scale
/// (grouped) or times `x_scale · w_scale` (per channel, §6.1's order: the
/// scales multiplied first). A 1-row step writes the panels wholly inside
/// `rows` straight into `y`, two at a time where the family has a pair
/// tile, and scales them in one pass after the last panel.
fn sweep<T: Copy>(
    f: &PanelFamily<T>,
    x: &ActivationsQ8<'_>,
    w: &PanelsQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
    run: impl Fn(T, &[&[i8]], &[&[i32]], Range<usize>, &[u8], &mut [f32]),
) {
    // A decode call's few rows take blocks of 4 and a 4-row output buffer:
    // the 64-row block's views and buffer, made (zeroed) on every call, were
    // 420 of a 192 × 576 decode call's instructions outside the tiles
    // (callgrind, AVX2, Intel Xeon, family 6 model 167)
    if x.m <= 4 {
        sweep_blocks::<T, 4, 4>(f, x, w, rows, y, run)
    } else {
        sweep_blocks::<T, ROW_BLOCK, PANEL_ROWS>(f, x, w, rows, y, run)
    }
}

/// [`sweep`] in blocks of `RB` activation rows, with room for the outputs
/// of `OUT` rows (the tallest tile a block of `RB` can pick).
fn sweep_blocks<T: Copy, const RB: usize, const OUT: usize>(
    f: &PanelFamily<T>,
    x: &ActivationsQ8<'_>,
    w: &PanelsQ4,
    rows: Range<usize>,
    y: &mut OutputTile<'_>,
    run: impl Fn(T, &[&[i8]], &[&[i32]], Range<usize>, &[u8], &mut [f32]),
) {
    let tiles = f.tiles;
    x.check();
    y.check(x.m, rows.len());
    assert!(rows.end <= w.n() && w.k() == x.k, "W4A8 panel shapes");
    assert!(
        tiles.last().is_some_and(|t| t.0 == 1),
        "a panel family ends with a 1-row tile"
    );
    let groups = w.groups();
    // the rows as they are: the panel's nibble pairing matches them (§4)
    let xs = IntView::of(x, PIECE_COLS, Layout::Natural);
    let xs = xs.rows();
    // The codes and the per-channel scales are found once, not per panel (a
    // weight read in place from a file's map finds its codes through an
    // indirect call), and each panel's rows are handled as arrays of 16, a
    // length the compiler sees, so that its scaling and its store are a few
    // vector instructions.
    let panel_bytes = PANEL_ROWS * w.k() / 2;
    let codes = w.codes();
    let channel_scales = w.per_channel_scales();
    let mut out = [[0f32; PANEL_ROWS]; OUT];
    // Rows in blocks of RB: a block's row views and sums are found
    // once for all its panels (each view costs integer divisions, a fifth
    // of an 8-row tile's time when they were found per tile), on the stack,
    // and so are its tiles (`steps`: first row and tile), so that a panel
    // costs its tile calls and stores. Found per panel, with the stores'
    // run lengths unknown to the compiler, they cost 463 instructions a
    // panel, 16 % of a decode call at 576 × 576; now about 200 (AVX2;
    // callgrind, AMD EPYC Zen 4, family 25 model 17).
    let mut xv: [&[i8]; RB] = [&[]; RB];
    let mut sv: [&[i32]; RB] = [&[]; RB];
    let mut steps = [(0u8, 0u8); RB];
    let panels = rows.start / PANEL_ROWS..rows.end.div_ceil(PANEL_ROWS);
    for b0 in (0..x.m).step_by(RB) {
        let block = RB.min(x.m - b0);
        for d in 0..block {
            (xv[d], sv[d]) = (xs.view(1, b0 + d, 0, false), &x.row_sums(b0 + d)[..groups]);
        }
        let n_steps = block_steps(tiles, block, OUT, &mut steps);
        let scales = &x.scales[b0..b0 + block];
        // The panels wholly inside the range: a 1-row tile writes their
        // sums straight into the output row, which is scaled and stored in
        // one pass after the last panel (`finish`).
        let inner = rows.start.div_ceil(PANEL_ROWS)..(rows.end / PANEL_ROWS).max(rows.start.div_ceil(PANEL_ROWS));
        let inner_cols = inner.start * PANEL_ROWS - rows.start..inner.end * PANEL_ROWS - rows.start;
        // A block of one 1-row step (decode) takes its inner panels in a
        // loop of their own, below, that does nothing but call the tiles:
        // in the loop over every panel, working out per panel what the
        // other steps need (views, stores) cost about 140 instructions a
        // panel, a sixth of a 384 × 384 decode call's (callgrind, AVX2,
        // Intel Xeon, family 6 model 167). Other blocks keep each panel's
        // steps together, so that a panel is read once for all of them.
        let single = (n_steps == 1 && tiles[usize::from(steps[0].1)].0 == 1).then_some(usize::from(steps[0].0));
        let edges = match single {
            Some(_) => [
                panels.start..inner.start.max(panels.start),
                inner.end.max(panels.start)..panels.end,
            ],
            None => [panels.clone(), 0..0],
        };
        let block = Block {
            b0,
            xv: &xv,
            sv: &sv,
            steps: &steps[..n_steps],
            scales,
        };
        for p in edges.into_iter().flatten() {
            edge_panel(
                f,
                &block,
                p,
                (codes, panel_bytes),
                (&rows, inner.clone()),
                channel_scales,
                &mut out,
                y,
                &run,
            );
        }
        if let Some(i0) = single.filter(|_| !inner.is_empty()) {
            let tile = tiles[usize::from(steps[0].1)].1;
            let at = (b0 + i0) * y.ld + inner.start * PANEL_ROWS - rows.start;
            let out = &mut y.y[at..at + inner.len() * PANEL_ROWS];
            let views = (&xv[i0..i0 + 1], &sv[i0..i0 + 1]);
            run_inner(f, tile, views, (codes, panel_bytes), inner.clone(), out, &run);
        }
        for &(i0, t) in &steps[..n_steps] {
            let i0 = usize::from(i0);
            if tiles[usize::from(t)].0 == 1 && !inner_cols.is_empty() {
                let ws = channel_scales.map(|s| &s[rows.start + inner_cols.start..rows.start + inner_cols.end]);
                finish(y, b0 + i0, inner_cols.clone(), scales[i0], ws);
            }
        }
    }
}

/// A block of activation rows of [`sweep_blocks`]: its first row, the
/// rows' views and group sums, its tile steps (first row, tile index) and
/// the rows' activation scales, found once for all its panels.
struct Block<'b, 'x, const RB: usize> {
    b0: usize,
    xv: &'b [&'x [i8]; RB],
    sv: &'b [&'x [i32]; RB],
    steps: &'b [(u8, u8)],
    scales: &'b [f32],
}

/// Every step of `block` on panel `p` (of `rows`; `inner` the panels
/// wholly inside it): a 1-row step on an inner panel writes its sums
/// straight into `y` (both panels of a pair where the family has a pair
/// tile and `p` is the pair's first; nothing on its second), which
/// `finish` scales later; any other step sums into `out` and stores
/// through [`store_panel`], finding what that needs ([`stored`]) only then.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn edge_panel<T: Copy, const RB: usize, const OUT: usize>(
    f: &PanelFamily<T>,
    block: &Block<'_, '_, RB>,
    p: usize,
    (codes, panel_bytes): (&[u8], usize),
    (rows, inner): (&Range<usize>, Range<usize>),
    channel_scales: Option<&[f32]>,
    out: &mut [[f32; PANEL_ROWS]; OUT],
    y: &mut OutputTile<'_>,
    run: &impl Fn(T, &[&[i8]], &[&[i32]], Range<usize>, &[u8], &mut [f32]),
) {
    let (tiles, b0) = (f.tiles, block.b0);
    let panel = &codes[p * panel_bytes..(p + 1) * panel_bytes];
    let in_place = inner.contains(&p);
    // the inner panels in pairs from the first, for a pair tile: a pair's
    // first panel runs both, its second none (1-row steps)
    let paired = f
        .pairs
        .filter(|_| in_place && (p - inner.start).is_multiple_of(2) && p + 1 < inner.end);
    let second = f.pairs.is_some() && in_place && (p - inner.start) % 2 == 1;
    for &(i0, t) in block.steps {
        let (i0, (xr, tile)) = (usize::from(i0), tiles[usize::from(t)]);
        let (xv, sv) = (&block.xv[i0..i0 + xr], &block.sv[i0..i0 + xr]);
        if xr == 1 && in_place {
            let at = (b0 + i0) * y.ld + p * PANEL_ROWS - rows.start;
            match paired {
                Some(pair) => {
                    let both = &codes[p * panel_bytes..(p + 2) * panel_bytes];
                    run(pair, xv, sv, p..p + 2, both, &mut y.y[at..at + 2 * PANEL_ROWS]);
                }
                None if second => {}
                None => run(tile, xv, sv, p..p + 1, panel, &mut y.y[at..at + PANEL_ROWS]),
            }
            continue;
        }
        let (channel, r0, cols, whole) = stored(channel_scales, p, rows);
        let out = &mut out[..xr];
        run(tile, xv, sv, p..p + 1, panel, out.as_flattened_mut());
        store_panel(
            y,
            out,
            b0 + i0,
            &block.scales[i0..i0 + xr],
            channel,
            (r0 - rows.start, cols, whole),
        );
    }
}

/// The inner panels of a 1-row step (decode), `out` their outputs in the
/// activation row: the pair tile on two panels at a time where the family
/// has one, else the 1-row tile on each.
#[inline(always)]
fn run_inner<T: Copy>(
    f: &PanelFamily<T>,
    tile: T,
    (xv, sv): (&[&[i8]], &[&[i32]]),
    (codes, panel_bytes): (&[u8], usize),
    inner: Range<usize>,
    out: &mut [f32],
    run: &impl Fn(T, &[&[i8]], &[&[i32]], Range<usize>, &[u8], &mut [f32]),
) {
    let mut p = inner.start;
    while p < inner.end {
        let at = (p - inner.start) * PANEL_ROWS;
        match f.pairs {
            Some(pair) if p + 1 < inner.end => {
                let both = &codes[p * panel_bytes..(p + 2) * panel_bytes];
                run(pair, xv, sv, p..p + 2, both, &mut out[at..at + 2 * PANEL_ROWS]);
                p += 2;
            }
            _ => {
                let panel = &codes[p * panel_bytes..(p + 1) * panel_bytes];
                run(tile, xv, sv, p..p + 1, panel, &mut out[at..at + PANEL_ROWS]);
                p += 1;
            }
        }
    }
}

/// What a step that stores panel `p` through its own buffer needs: per
/// channel the panel's 16 weight scales; the first output row of the range
/// in the panel; the panel's rows inside the range, as columns of the
/// panel; whether they are the whole panel (the driver's ranges are whole
/// panels: their stores then have a length the compiler sees).
#[inline(always)]
fn stored<'s>(
    channel_scales: Option<&'s [f32]>,
    p: usize,
    rows: &Range<usize>,
) -> (Option<&'s [f32; PANEL_ROWS]>, usize, Range<usize>, bool) {
    let channel = channel_scales.map(|s| s[p * PANEL_ROWS..(p + 1) * PANEL_ROWS].try_into().expect("16 scales"));
    let r0 = (p * PANEL_ROWS).max(rows.start);
    let cols = r0 - p * PANEL_ROWS..((p + 1) * PANEL_ROWS).min(rows.end) - p * PANEL_ROWS;
    let whole = cols == (0..PANEL_ROWS);
    (channel, r0, cols, whole)
}

/// A block's steps: from its first row, the widest tile that fits the rows
/// left (and `out_rows`), as `(first row, tile index)` into `steps`;
/// returns how many.
#[inline(always)]
fn block_steps<T, const RB: usize>(
    tiles: &[(usize, T)],
    block: usize,
    out_rows: usize,
    steps: &mut [(u8, u8); RB],
) -> usize {
    let (mut n_steps, mut i0) = (0, 0);
    while i0 < block {
        let t = tiles
            .iter()
            .position(|t| t.0 <= (block - i0).min(out_rows))
            .expect("a 1-row tile");
        // i0 < RB <= 64, and a family has far fewer than 256 tiles
        steps[n_steps] = (i0 as u8, t as u8);
        n_steps += 1;
        i0 += tiles[t].0;
    }
    n_steps
}

/// Stores a step's panel sums `out` (one array of 16 per activation row,
/// from row `i0`): each whole panel row scaled (grouped: by the row's
/// activation scale; per channel: by `x_scale · w_scale`, the scales
/// multiplied first), the range's part stored at output column `at`
/// (`cols` of the panel; `whole` when they are all 16).
#[inline(always)]
fn store_panel(
    y: &mut OutputTile<'_>,
    out: &mut [[f32; PANEL_ROWS]],
    i0: usize,
    scales: &[f32],
    channel: Option<&[f32; PANEL_ROWS]>,
    (at, cols, whole): (usize, Range<usize>, bool),
) {
    for (d, o) in out.iter_mut().enumerate() {
        let xs = scales[d];
        match channel {
            None => *o = o.map(|v| v * xs),
            Some(ws) => *o = std::array::from_fn(|q| o[q] * (xs * ws[q])),
        }
        if whole {
            y.set_run(i0 + d, at, o);
        } else {
            y.set_run(i0 + d, at, &o[cols.clone()]);
        }
    }
}

/// Scales and stores in place the sums a 1-row tile wrote into row `i` of
/// `y` over output columns `cols`: `v · xs` (grouped) or `v · (xs · ws)`
/// (per channel, `ws` the columns' weight scales, multiplied first), plus
/// the bias, as [`OutputTile::set_run`] adds it.
fn finish(y: &mut OutputTile<'_>, i: usize, cols: Range<usize>, xs: f32, ws: Option<&[f32]>) {
    let at = i * y.ld;
    let row = &mut y.y[at + cols.start..at + cols.end];
    let bias = y.bias.get(cols).unwrap_or(&[]);
    scale_row(row, xs, ws, bias);
}

/// [`finish`] on the row's values as separate slices, so that the compiler
/// knows the row from the bias and the scales (function arguments that do
/// not alias) and runs each loop on whole vectors: read through the output
/// tile it kept them to one value at a time, 7 instructions each, most of a
/// 384 × 384 decode call's frame (callgrind, AVX2, Intel Xeon, family 6
/// model 167).
#[inline(never)]
fn scale_row(row: &mut [f32], xs: f32, ws: Option<&[f32]>, bias: &[f32]) {
    match (ws, bias.is_empty()) {
        (None, true) => row.iter_mut().for_each(|v| *v *= xs),
        (None, false) => row.iter_mut().zip(bias).for_each(|(v, b)| *v = *v * xs + b),
        (Some(ws), true) => row.iter_mut().zip(ws).for_each(|(v, w)| *v *= xs * w),
        (Some(ws), false) => row
            .iter_mut()
            .zip(ws)
            .zip(bias)
            .for_each(|((v, w), b)| *v = *v * (xs * w) + b),
    }
}

/// Activation rows whose views [`sweep`] holds at once: a multiple of every
/// tile's rows (16, 8, 4), so only the last block of a call takes narrower
/// tiles than the rows would.
const ROW_BLOCK: usize = 64;

/// `fn $name(x, w, rows, y)`, a [`GemmQ8Panels`](crate::abi::panel::GemmQ8Panels): [`gemm_w4a8_grouped_panels`]
/// over the [`PanelFamily`] `$family`, or with `per_channel` before `fn`,
/// [`gemm_w4a8_panels`] over a per-channel one. The one line a tier writes
/// for its panel tiles (the attributes before `fn`, a doc comment included,
/// go on the function).
#[macro_export]
macro_rules! panel_entry {
    ($(#[$meta:meta])* $vis:vis fn $name:ident = $family:expr) => {
        $crate::panel_entry!(@entry gemm_w4a8_grouped_panels, $(#[$meta])* $vis fn $name = $family);
    };
    ($(#[$meta:meta])* per_channel $vis:vis fn $name:ident = $family:expr) => {
        $crate::panel_entry!(@entry gemm_w4a8_panels, $(#[$meta])* $vis fn $name = $family);
    };
    (@entry $frame:ident, $(#[$meta:meta])* $vis:vis fn $name:ident = $family:expr) => {
        $(#[$meta])*
        $vis fn $name(
            x: &$crate::abi::activations::ActivationsQ8<'_>,
            w: &$crate::abi::panel::PanelsQ4,
            rows: ::std::ops::Range<usize>,
            y: &mut $crate::abi::activations::OutputTile<'_>,
        ) {
            $crate::frame::panels::$frame(&$family, x, w, rows, y)
        }
    };
}

#[cfg(test)]
#[path = "panel_tests.rs"]
mod tests;
