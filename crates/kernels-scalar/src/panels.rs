//! W4A8 weights prepared once per layer: rows in panels of 16, interleaved
//! 4 bytes at a time ([`PanelsQ4`]), grouped by 32 or per channel, and the
//! frame that runs a tier's panel tiles over them.
//!
//! Why: in the natural layout one 512-bit register holds 128 columns of one
//! row, so each group of 32 ends up spread over 4 lanes and must be reduced
//! across lanes before its float step (docs/NUMERICS.md §6.1 adds one float
//! product per group, in increasing g): about as much work as the products
//! themselves. In a panel, one register holds the same 8 columns of 16 rows,
//! so a multiply-add of its low (high) nibbles against the activations'
//! first (last) 4 codes of those columns, broadcast, leaves each row's partial sum in its own lane: a group is 8 of
//! them, and its float step runs on 16 rows at once with no reduction. Per
//! channel the same layout spares each row's reduction across lanes at its
//! end and the padded block of a K that is not a multiple of the natural
//! tile's 128 columns (576). The nibbles are the natural ones, permuted and
//! paired so that the activation rows are read as they are stored
//! (docs/NUMERICS.md §4); the arithmetic is §6.1's.

use std::ops::Range;

use half::f16;
use qlinear_quant_recipe::{Codes, GroupSize, Q4Scales, QuantizedMatrixQ4, SharedBuffer};

use crate::frame::{IntView, Layout};
use crate::{ActivationsQ8, OutputTile};

/// Weight rows per panel.
pub const PANEL_ROWS: usize = 16;
/// The one group size a panel holds (Q4_0's).
pub const PANEL_GROUP: usize = 32;
/// Columns per interleaved piece: 4 packed bytes of a row.
const PIECE_COLS: usize = 8;

/// A Q4 weight, grouped by 32 or per channel, with its rows in panels of
/// [`PANEL_ROWS`]: the same nibbles and scales as the natural
/// [`QuantizedMatrixQ4`], permuted, so a layer holds one or the other.
///
/// Panel `p` holds rows `16p .. 16p + 16` in `16 · k / 2` bytes: for each 8
/// columns `8c .. 8c + 8`, the 16 rows' 4 bytes of those columns one after
/// another (row `q`'s at `p · 8k + 64c + 4q`), byte `j` holding column
/// `8c + j` in its low nibble and `8c + 4 + j` in its high one
/// (docs/NUMERICS.md §4; the natural byte `j` holds `8c + 2j` and
/// `8c + 2j + 1`), so that a tile reads an activation row as it is stored. Grouped scales are
/// group after group, the 16 rows' scale of group `g` at `p · 16 · groups +
/// 16g + q`; per-channel scales stay in row order (row `16p + q`'s at `16p +
/// q`). Only weights with N a multiple of 16 and K a multiple of 32, grouped
/// by 32 or per channel, have a panel form.
#[derive(Debug, Clone, PartialEq)]
pub struct PanelsQ4 {
    n: usize,
    k: usize,
    codes: Codes<u8>,
    /// Grouped by 32 in panel order, or per channel in row order.
    scales: Q4Scales,
}

/// Whether `n × k` has a panel form: whole panels (N a multiple of 16, not
/// 0) and whole groups of 32.
fn panel_shape(n: usize, k: usize) -> bool {
    n > 0 && n.is_multiple_of(PANEL_ROWS) && k.is_multiple_of(PANEL_GROUP)
}

impl PanelsQ4 {
    /// The group size of every grouped panel form ([`PANEL_GROUP`]).
    pub const GROUP: usize = PANEL_GROUP;

    /// The panel form of `w`, or `None` when it has none: a group other
    /// than 32, N not a multiple of 16 or K not a multiple of 32 (N = 0
    /// included). Copies the bytes once.
    pub fn new(w: &QuantizedMatrixQ4) -> Option<PanelsQ4> {
        let (n, k) = (w.n(), w.k());
        if !panel_shape(n, k) {
            return None;
        }
        let stride = k / 2;
        let scales = match w.scales() {
            Q4Scales::PerChannel(s) => Q4Scales::PerChannel(s.clone()),
            Q4Scales::Grouped { group, scales } if *group == PANEL_GROUP => {
                let groups = k / PANEL_GROUP;
                let mut panel_scales = vec![f16::ZERO; n * groups];
                for r in 0..n {
                    let (p, q) = (r / PANEL_ROWS, r % PANEL_ROWS);
                    for (g, &s) in scales[r * groups..(r + 1) * groups].iter().enumerate() {
                        panel_scales[p * PANEL_ROWS * groups + PANEL_ROWS * g + q] = s;
                    }
                }
                Q4Scales::Grouped {
                    group: PANEL_GROUP,
                    scales: panel_scales,
                }
            }
            Q4Scales::Grouped { .. } => return None,
        };
        // written in place: a Vec here would be copied into the aligned lines
        let mut owned = Codes::zeroed(n * stride);
        let codes = owned.as_mut_slice()?;
        for r in 0..n {
            let (p, q) = (r / PANEL_ROWS, r % PANEL_ROWS);
            let panel = &mut codes[p * PANEL_ROWS * stride..(p + 1) * PANEL_ROWS * stride];
            for (c, piece) in w.row_packed(r).chunks_exact(PIECE_COLS / 2).enumerate() {
                panel[64 * c + 4 * q..64 * c + 4 * q + 4].copy_from_slice(&repair(piece.try_into().expect("4 bytes")));
            }
        }
        Some(PanelsQ4 {
            n,
            k,
            codes: owned,
            scales,
        })
    }

    /// A panel form from bytes and scales already in panel order (the
    /// layout above), taken without a copy: N a multiple of 16 (not 0), K a
    /// multiple of 32, `codes` `n · k / 2` bytes (any byte is two biased
    /// nibbles), and either `n · k / 32` finite f16 grouped by 32 (of
    /// either sign, as a natural matrix's group scales) or `n` finite f32
    /// ≥ 0 per channel. `None` otherwise: the shapes with no panel form
    /// ([`PanelsQ4::new`]) and the scales a natural matrix refuses. For a
    /// caller whose bytes' values do not matter in the order they come (the
    /// plan times kernels on such) or that stored the panel form itself
    /// ([`PanelsQ4::into_panel_parts`]).
    pub fn from_panel_parts(n: usize, k: usize, codes: Vec<u8>, scales: Q4Scales) -> Option<PanelsQ4> {
        Self::from_panel_codes(n, k, Codes::owned(codes), scales)
    }

    /// [`PanelsQ4::from_panel_parts`] on codes owned or shared, moved in
    /// without a copy.
    pub fn from_panel_codes(n: usize, k: usize, codes: Codes<u8>, scales: Q4Scales) -> Option<PanelsQ4> {
        let sized = Some(codes.as_slice().len()) == n.checked_mul(k / 2);
        let scaled = match &scales {
            Q4Scales::PerChannel(s) => s.len() == n && s.iter().all(|s| s.is_finite() && *s >= 0.0),
            Q4Scales::Grouped { group, scales } => {
                *group == PANEL_GROUP
                    && Some(scales.len()) == n.checked_mul(k / PANEL_GROUP)
                    && scales.iter().all(|s| s.is_finite())
            }
        };
        (panel_shape(n, k) && sized && scaled).then_some(PanelsQ4 { n, k, codes, scales })
    }

    /// The bytes and scales in panel order, consuming the form (the bytes
    /// copied into a vector; the inverse of [`PanelsQ4::from_panel_parts`]).
    pub fn into_panel_parts(self) -> (Vec<u8>, Q4Scales) {
        (self.codes.into_vec(), self.scales)
    }

    /// The bytes and scales in panel order, moved out without a copy (the
    /// inverse of [`PanelsQ4::from_panel_codes`]).
    pub fn into_panel_codes(self) -> (Codes<u8>, Q4Scales) {
        (self.codes, self.scales)
    }

    /// Every panel's packed bytes, panel after panel (`n · k / 2`).
    pub fn codes(&self) -> &[u8] {
        self.codes.as_slice()
    }

    /// Whether the packed bytes are read in place from a shared buffer.
    pub fn codes_shared(&self) -> bool {
        self.codes.is_shared()
    }

    /// The same panel form (shape, scales) reading its packed bytes in place
    /// from `buffer[start .. start + n · k / 2]`: copy [`PanelsQ4::codes`]
    /// there first to get the same weight. `None` when the range is not
    /// within the buffer.
    pub fn with_shared_codes(&self, buffer: SharedBuffer, start: usize) -> Option<PanelsQ4> {
        let range = start..start.saturating_add(self.codes().len());
        Some(PanelsQ4 {
            n: self.n,
            k: self.k,
            codes: Codes::shared(buffer, range).ok()?,
            scales: self.scales.clone(),
        })
    }

    /// The natural matrix again, byte for byte the one this was made from.
    pub fn to_matrix(&self) -> QuantizedMatrixQ4 {
        let stride = self.k / 2;
        let mut packed = vec![0u8; self.n * stride];
        for (r, row) in packed.chunks_exact_mut(stride).enumerate() {
            row.copy_from_slice(&self.row_packed(r));
        }
        let scales = match &self.scales {
            Q4Scales::PerChannel(s) => Q4Scales::PerChannel(s.clone()),
            Q4Scales::Grouped { scales, .. } => {
                let groups = self.groups();
                let mut natural = vec![f16::ZERO; self.n * groups];
                for (i, &s) in scales.iter().enumerate() {
                    // panel p, group g, row q (the layout above)
                    let (p, g, q) = (i / (PANEL_ROWS * groups), i / PANEL_ROWS % groups, i % PANEL_ROWS);
                    natural[(p * PANEL_ROWS + q) * groups + g] = s;
                }
                Q4Scales::Grouped {
                    group: PANEL_GROUP,
                    scales: natural,
                }
            }
        };
        QuantizedMatrixQ4::from_parts_biased(self.n, self.k, packed, scales)
            .expect("a panel form holds a valid matrix's bytes")
    }

    /// Output features (rows).
    pub fn n(&self) -> usize {
        self.n
    }
    /// Input features (columns).
    pub fn k(&self) -> usize {
        self.k
    }
    /// The grouping of the scales: by [`PANEL_GROUP`] or per channel.
    pub fn group_size(&self) -> GroupSize {
        match self.scales {
            Q4Scales::PerChannel(_) => GroupSize::PerChannel,
            Q4Scales::Grouped { .. } => GroupSize::Group(PANEL_GROUP),
        }
    }
    /// The scales: grouped ones in panel order, per-channel ones in row
    /// order (the layout above).
    pub fn scales(&self) -> &Q4Scales {
        &self.scales
    }
    /// Activation sums a row's tiles take: its groups of 32 (grouped), or
    /// 1, the whole row's (per channel).
    pub fn groups(&self) -> usize {
        match self.scales {
            Q4Scales::PerChannel(_) => 1,
            Q4Scales::Grouped { .. } => self.k / PANEL_GROUP,
        }
    }
    /// Panel `p`'s packed bytes, `16 · k / 2`.
    pub fn panel(&self, p: usize) -> &[u8] {
        let len = PANEL_ROWS * self.k / 2;
        &self.codes()[p * len..(p + 1) * len]
    }
    /// Panel `p`'s group scales, `16 · groups`, group after group (empty
    /// per channel).
    pub fn panel_scales(&self, p: usize) -> &[f16] {
        match &self.scales {
            Q4Scales::Grouped { scales, .. } => {
                let len = PANEL_ROWS * self.groups();
                &scales[p * len..(p + 1) * len]
            }
            Q4Scales::PerChannel(_) => &[],
        }
    }
    /// Panel `p`'s 16 per-channel scales, in row order (empty when grouped).
    pub fn channel_scales(&self, p: usize) -> &[f32] {
        match &self.scales {
            Q4Scales::PerChannel(s) => &s[p * PANEL_ROWS..(p + 1) * PANEL_ROWS],
            Q4Scales::Grouped { .. } => &[],
        }
    }
    /// Row `r`'s packed bytes in the natural order and pairing (gathered).
    pub fn row_packed(&self, r: usize) -> Vec<u8> {
        let (panel, q) = (self.panel(r / PANEL_ROWS), r % PANEL_ROWS);
        panel
            .chunks_exact(64)
            .flat_map(|piece| unpair(piece[4 * q..4 * q + 4].try_into().expect("4 bytes")))
            .collect()
    }
}

/// The 8 nibbles of 4 naturally packed bytes (byte `j`: columns `2j`,
/// `2j + 1`) re-paired as a panel holds them (byte `j`: columns `j`, `j +
/// 4`; docs/NUMERICS.md §4), so that a load's low nibbles meet an
/// activation row's first 4 codes of the 8 and its high nibbles the last 4,
/// in the row's own order.
fn repair(natural: [u8; 4]) -> [u8; 4] {
    let nibble = |col: usize| (natural[col / 2] >> (4 * (col % 2))) & 0x0F;
    std::array::from_fn(|j| nibble(j) | nibble(j + 4) << 4)
}

/// [`repair`]'s inverse: a panel's 4 bytes in the natural pairing.
fn unpair(panel: [u8; 4]) -> [u8; 4] {
    let nibble = |col: usize| (panel[col % 4] >> (4 * (col / 4))) & 0x0F;
    std::array::from_fn(|j| nibble(2 * j) | nibble(2 * j + 1) << 4)
}

/// W4A8 grouped over one panel: `x` holds `xr` activation rows in their
/// natural order, `k` codes each (of each 8 columns, the first 4 meet a
/// panel piece's 4 low nibbles and the last 4 its high ones, §4); `sums` their `groups` sums per group of 32; `panel` and
/// `s` one panel's bytes and scales ([`PanelsQ4::panel`],
/// [`PanelsQ4::panel_scales`]). Writes `out[i · 16 + q] = Σ_g (acc_g as
/// f32) · f32(s_g)` for activation row `i` and panel row `q`, `acc_g = Σ x·b
/// − 8·sums[i][g]` exact, added in increasing g from +0 (§6.1; the frame
/// multiplies by the activation scale).
pub type TilePanelQ4 = fn(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[f16], out: &mut [f32]);

/// W4A8 per channel over one panel: `x` as for [`TilePanelQ4`], `sums`
/// each row's one sum of all `k` codes, `panel` one panel's bytes. Writes
/// `out[i · 16 + q] = acc as f32` for activation row `i` and panel row `q`,
/// `acc = Σ x·b − 8·sums[i][0]` exact in i32 (§6.1; the frame multiplies by
/// `x_scale · w_scale`, the two scales multiplied first).
pub type TilePanelQ4PerChannel = fn(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], out: &mut [f32]);

/// The shapes a [`TilePanelQ4`] for `xr` activation rows relies on, checked
/// before its loads: `xr` rows of `k = 32 · groups` codes and of `groups`
/// sums, one panel's `16 · k / 2` bytes and `16 · groups` scales, `16 · xr`
/// outputs. Returns `groups`; panics on any other shape (the frame passes
/// these, and a SIMD tile's pointer loads stay in bounds only on them).
#[inline]
pub fn check_tile(xr: usize, x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[f16], out: &[f32]) -> usize {
    check_grouped(xr, 1, x, sums, panel, s, out)
}

/// [`check_tile`] for a pair tile ([`PanelFamily::pairs`]): one activation
/// row against two consecutive panels, `2 · 16 · k / 2` bytes and `2 · 16 ·
/// groups` scales (the two panels' one after the other, as [`PanelsQ4`]
/// holds them), 32 outputs. Returns `groups`.
#[inline]
pub fn check_pair(x: &[&[i8]], sums: &[&[i32]], panels: &[u8], s: &[f16], out: &[f32]) -> usize {
    check_grouped(1, 2, x, sums, panels, s, out)
}

/// The grouped shapes for `xr` activation rows against `np` panels.
#[inline]
fn check_grouped(xr: usize, np: usize, x: &[&[i8]], sums: &[&[i32]], panels: &[u8], s: &[f16], out: &[f32]) -> usize {
    assert!(x.len() == xr && sums.len() == xr && out.len() == xr * np * PANEL_ROWS && xr > 0);
    let groups = sums[0].len();
    let k = groups * PANEL_GROUP;
    assert!(
        x.iter().all(|r| r.len() == k)
            && sums.iter().all(|r| r.len() == groups)
            && panels.len() == np * PANEL_ROWS * k / 2
            && s.len() == np * PANEL_ROWS * groups,
        "panel tile shapes"
    );
    groups
}

/// The shapes a [`TilePanelQ4PerChannel`] for `xr` activation rows relies
/// on, checked before its loads: `xr` rows of `k` codes (a multiple of 32)
/// and of one sum each, one panel's `16 · k / 2` bytes, `16 · xr` outputs.
/// Returns `k / 32`, the tile's groups of 4 loads; panics on any other shape.
#[inline]
pub fn check_tile_per_channel(xr: usize, x: &[&[i8]], sums: &[&[i32]], panel: &[u8], out: &[f32]) -> usize {
    check_per_channel(xr, 1, x, sums, panel, out)
}

/// [`check_tile_per_channel`] for a pair tile: one activation row against
/// two consecutive panels' `2 · 16 · k / 2` bytes, 32 outputs. Returns
/// `k / 32`.
#[inline]
pub fn check_pair_per_channel(x: &[&[i8]], sums: &[&[i32]], panels: &[u8], out: &[f32]) -> usize {
    check_per_channel(1, 2, x, sums, panels, out)
}

/// The per-channel shapes for `xr` activation rows against `np` panels.
#[inline]
fn check_per_channel(xr: usize, np: usize, x: &[&[i8]], sums: &[&[i32]], panels: &[u8], out: &[f32]) -> usize {
    assert!(x.len() == xr && sums.len() == xr && out.len() == xr * np * PANEL_ROWS && xr > 0);
    let k = x[0].len();
    assert!(
        k.is_multiple_of(PANEL_GROUP)
            && x.iter().all(|r| r.len() == k)
            && sums.iter().all(|r| r.len() == 1)
            && panels.len() == np * PANEL_ROWS * k / 2,
        "per-channel panel tile shapes"
    );
    k / PANEL_GROUP
}

/// A tier's panel tiles: `(xr, tile)` by activation rows, widest first,
/// the last of 1 row; grouped ([`TilePanelQ4`], the default) or per
/// channel ([`TilePanelQ4PerChannel`]).
#[derive(Debug, Clone, Copy)]
pub struct PanelFamily<T: 'static = TilePanelQ4> {
    /// The tiles, widest first; the last takes 1 activation row.
    pub tiles: &'static [(usize, T)],
    /// A tile for one activation row against two consecutive panels at
    /// once (`panel` and, grouped, `s` holding both panels' in turn; `out`
    /// 32 values, `out[16h + q]` for row `q` of the pair's panel `h`), with
    /// the bits of the 1-row tile on each: decode then reads each activation
    /// code once for 32 weight rows. The frame gives it the pairs of panels
    /// wholly inside a call's range, and the 1-row tile the rest. `None`:
    /// the 1-row tile takes every panel.
    pub pairs: Option<T>,
}

/// The entry of a tier's panel tiles: W4A8 (§6.1) on a [`PanelsQ4`] over
/// output features `rows`, any range within the matrix (the driver's are
/// multiples of 16; `Linear::forward_rows` passes the caller's): each panel
/// the range touches is computed whole and its rows inside the range
/// stored. Same bits as `gemm_w4a8_grouped` (a tier's grouped entry) or
/// `gemm_w4a8` (its per-channel entry) on the natural matrix.
pub type GemmQ8Panels = fn(&ActivationsQ8<'_>, &PanelsQ4, Range<usize>, &mut OutputTile<'_>);

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
    let scales = match &w.scales {
        Q4Scales::Grouped { scales, .. } => &scales[..],
        Q4Scales::PerChannel(_) => unreachable!("asserted grouped above"),
    };
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
    let channel_scales = match &w.scales {
        Q4Scales::PerChannel(s) => Some(&s[..]),
        Q4Scales::Grouped { .. } => None,
    };
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
        let (mut n_steps, mut i0) = (0, 0);
        while i0 < block {
            let t = tiles
                .iter()
                .position(|t| t.0 <= (block - i0).min(OUT))
                .expect("a 1-row tile");
            // i0 < RB <= 64, and a family has far fewer than 256 tiles
            steps[n_steps] = (i0 as u8, t as u8);
            n_steps += 1;
            i0 += tiles[t].0;
        }
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
        for p in edges.into_iter().flatten() {
            let panel = &codes[p * panel_bytes..(p + 1) * panel_bytes];
            let in_place = inner.contains(&p);
            // the inner panels in pairs from the first, for a pair tile: a
            // pair's first panel runs both, its second none (1-row steps)
            let paired = f
                .pairs
                .filter(|_| in_place && (p - inner.start) % 2 == 0 && p + 1 < inner.end);
            let second = f.pairs.is_some() && in_place && (p - inner.start) % 2 == 1;
            // what a step that stores through `out` needs, found once a
            // panel and only then (a decode call's inner panels need none of
            // it): per channel the panel's 16 weight scales; the panel's rows
            // inside the range, as output columns and as columns of the
            // panel; whether those are the whole panel (the driver's ranges
            // are whole panels: their stores have a length the compiler sees)
            let stored = || {
                let channel: Option<&[f32; PANEL_ROWS]> =
                    channel_scales.map(|s| s[p * PANEL_ROWS..(p + 1) * PANEL_ROWS].try_into().expect("16 scales"));
                let r0 = (p * PANEL_ROWS).max(rows.start);
                let cols = r0 - p * PANEL_ROWS..((p + 1) * PANEL_ROWS).min(rows.end) - p * PANEL_ROWS;
                let whole = cols == (0..PANEL_ROWS);
                (channel, r0, cols, whole)
            };
            for &(i0, t) in &steps[..n_steps] {
                let (i0, (xr, tile)) = (usize::from(i0), tiles[usize::from(t)]);
                if xr == 1 && in_place {
                    let at = (b0 + i0) * y.ld + p * PANEL_ROWS - rows.start;
                    let (xv, sv) = (&xv[i0..i0 + 1], &sv[i0..i0 + 1]);
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
                let (channel, r0, cols, whole) = stored();
                let out = &mut out[..xr];
                run(
                    tile,
                    &xv[i0..i0 + xr],
                    &sv[i0..i0 + xr],
                    p..p + 1,
                    panel,
                    out.as_flattened_mut(),
                );
                for (d, o) in out.iter_mut().enumerate() {
                    // the whole panel row scaled, the range's part stored
                    let xs = scales[i0 + d];
                    match channel {
                        None => *o = o.map(|v| v * xs),
                        Some(ws) => *o = std::array::from_fn(|q| o[q] * (xs * ws[q])),
                    }
                    let i = b0 + i0 + d;
                    if whole {
                        y.set_run(i, r0 - rows.start, o);
                    } else {
                        y.set_run(i, r0 - rows.start, &o[cols.clone()]);
                    }
                }
            }
        }
        if let Some(i0) = single {
            let (xv, sv) = (&xv[i0..i0 + 1], &sv[i0..i0 + 1]);
            let tile = tiles[usize::from(steps[0].1)].1;
            let row_at = (b0 + i0) * y.ld;
            let mut p = inner.start;
            while p < inner.end {
                let at = row_at + p * PANEL_ROWS - rows.start;
                match f.pairs {
                    Some(pair) if p + 1 < inner.end => {
                        let both = &codes[p * panel_bytes..(p + 2) * panel_bytes];
                        run(pair, xv, sv, p..p + 2, both, &mut y.y[at..at + 2 * PANEL_ROWS]);
                        p += 2;
                    }
                    _ => {
                        let panel = &codes[p * panel_bytes..(p + 1) * panel_bytes];
                        run(tile, xv, sv, p..p + 1, panel, &mut y.y[at..at + PANEL_ROWS]);
                        p += 1;
                    }
                }
            }
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

/// The portable panel tile (1 activation row): §6.1 read from the panel
/// layout, one row at a time. The scalar tier's entry, so that every
/// platform runs the frame above.
fn tile_panel_scalar(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[f16], out: &mut [f32]) {
    let (xs, sums) = (x[0], sums[0]);
    let groups = sums.len();
    for (q, o) in out.iter_mut().enumerate() {
        let mut sum = 0f32;
        for (g, &group_sum) in sums.iter().enumerate().take(groups) {
            sum += (panel_dot_biased(xs, panel, q, 4 * g..4 * g + 4) - 8 * group_sum) as f32
                * f32::from(s[PANEL_ROWS * g + q]);
        }
        *o = sum;
    }
}

/// The portable per-channel panel tile (1 activation row): §6.1 read from
/// the panel layout, one weight row at a time.
fn tile_panel_per_channel_scalar(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], out: &mut [f32]) {
    let (xs, sum) = (x[0], sums[0][0]);
    for (q, o) in out.iter_mut().enumerate() {
        *o = (panel_dot_biased(xs, panel, q, 0..xs.len() / PIECE_COLS) - 8 * sum) as f32;
    }
}

/// `Σ x·b` (biased, uncorrected) of panel row `q` over the pieces (8
/// columns each) `pieces`, `xs` an activation row: byte `j` of a piece
/// holds column `8c + j` low and `8c + 4 + j` high (§4).
fn panel_dot_biased(xs: &[i8], panel: &[u8], q: usize, pieces: Range<usize>) -> i32 {
    let mut acc = 0i32;
    for c in pieces {
        let (low, high) = (&xs[8 * c..8 * c + 4], &xs[8 * c + 4..8 * c + 8]);
        for (j, &b) in panel[64 * c + 4 * q..64 * c + 4 * q + 4].iter().enumerate() {
            acc += i32::from(low[j]) * i32::from(b & 0x0F) + i32::from(high[j]) * i32::from(b >> 4);
        }
    }
    acc
}

/// The scalar tier's panel family.
static SCALAR_PANELS: PanelFamily = PanelFamily {
    tiles: &[(1, tile_panel_scalar)],
    pairs: None,
};

/// The scalar tier's per-channel panel family.
static SCALAR_PANELS_PER_CHANNEL: PanelFamily<TilePanelQ4PerChannel> = PanelFamily {
    tiles: &[(1, tile_panel_per_channel_scalar)],
    pairs: None,
};

/// `fn $name(x, w, rows, y)`, a [`GemmQ8Panels`]: [`gemm_w4a8_grouped_panels`]
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
            x: &$crate::ActivationsQ8<'_>,
            w: &$crate::PanelsQ4,
            rows: ::std::ops::Range<usize>,
            y: &mut $crate::OutputTile<'_>,
        ) {
            $crate::panels::$frame(&$family, x, w, rows, y)
        }
    };
}

crate::panel_entry!(
    /// The scalar tier's panel entry: [`gemm_w4a8_grouped_panels`] on the
    /// portable tile.
    pub fn gemm_w4a8_grouped_panels_scalar = SCALAR_PANELS
);

crate::panel_entry!(
    /// The scalar tier's per-channel panel entry: [`gemm_w4a8_panels`] on
    /// the portable tile.
    per_channel pub fn gemm_w4a8_panels_scalar = SCALAR_PANELS_PER_CHANNEL
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{activation_group_sums, gemm_w4a8, gemm_w4a8_grouped};

    fn matrix(n: usize, k: usize, seed: u32) -> QuantizedMatrixQ4 {
        let mut v = seed;
        let mut next = move || {
            v = v.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            v >> 8
        };
        let packed = (0..n * k / 2).map(|_| next() as u8).collect();
        let scales = (0..n * k / 32)
            .map(|_| f16::from_f32((next() % 2001) as f32 / 1000.0 - 1.0))
            .collect();
        QuantizedMatrixQ4::from_parts_biased(n, k, packed, Q4Scales::Grouped { group: 32, scales }).unwrap()
    }

    fn per_channel_matrix(n: usize, k: usize, seed: u32) -> QuantizedMatrixQ4 {
        let (packed, _) = matrix(n, k, seed).into_parts();
        let scales = (0..n)
            .map(|r| 0.001 + (r as u32 * 7 + seed) as f32 % 13.0 / 100.0)
            .collect();
        QuantizedMatrixQ4::from_parts_biased(n, k, packed, Q4Scales::PerChannel(scales)).unwrap()
    }

    #[test]
    fn a_panel_interleaves_16_rows_4_bytes_at_a_time() {
        let w = matrix(32, 64, 1);
        let p = PanelsQ4::new(&w).unwrap();
        // row 17 is panel 1's row 1: its bytes 4..8 (columns 8..16) are
        // that panel's second piece, 4 bytes in, re-paired
        let natural = &w.row_packed(17)[4..8];
        let nibble = |col: usize| natural[col / 2] >> (4 * (col % 2)) & 0x0F;
        let piece = &p.panel(1)[64 + 4..64 + 8];
        for (j, &b) in piece.iter().enumerate() {
            assert_eq!(b, nibble(j) | nibble(j + 4) << 4, "byte {j}: columns {j} and {}", j + 4);
        }
        // group 1's scales of panel 0 are rows 0..16's second scale
        let Q4Scales::Grouped { scales, .. } = w.scales() else {
            unreachable!()
        };
        assert_eq!(p.panel_scales(0)[16 + 3], scales[3 * 2 + 1]);
        assert_eq!(p.to_matrix(), w);
    }

    #[test]
    fn a_panel_pairs_column_j_with_column_j_plus_4() {
        // natural: byte j holds columns 2j (low) and 2j + 1 (high)
        let natural = [0x10, 0x32, 0x54, 0x76];
        assert_eq!(repair(natural), [0x40, 0x51, 0x62, 0x73]);
        assert_eq!(unpair(repair(natural)), natural);
        for b in 0..=255u8 {
            let bytes = [b, b.rotate_left(3), !b, b ^ 0x5A];
            assert_eq!(unpair(repair(bytes)), bytes);
        }
    }

    #[test]
    fn only_grouped_32_with_whole_panels_and_groups_has_a_panel_form() {
        assert!(PanelsQ4::new(&matrix(16, 32, 2)).is_some());
        assert!(PanelsQ4::new(&matrix(24, 32, 2)).is_none());
        let odd_k = QuantizedMatrixQ4::from_parts_biased(
            16,
            48,
            vec![0x88; 16 * 24],
            Q4Scales::Grouped {
                group: 16,
                scales: vec![f16::ONE; 16 * 3],
            },
        )
        .unwrap();
        assert!(PanelsQ4::new(&odd_k).is_none());
        let per_channel = |n: usize, k: usize| {
            QuantizedMatrixQ4::from_parts_biased(n, k, vec![0x88; n * k / 2], Q4Scales::PerChannel(vec![1.0; n]))
                .unwrap()
        };
        assert!(PanelsQ4::new(&per_channel(16, 32)).is_some());
        assert!(PanelsQ4::new(&per_channel(16, 40)).is_none(), "K not a multiple of 32");
        assert!(PanelsQ4::new(&per_channel(8, 32)).is_none(), "N not a multiple of 16");
    }

    #[test]
    fn a_per_channel_panel_keeps_its_scales_in_row_order_and_gives_its_matrix_back() {
        let w = per_channel_matrix(48, 96, 5);
        let p = PanelsQ4::new(&w).unwrap();
        assert_eq!(p.group_size(), GroupSize::PerChannel);
        assert_eq!(p.groups(), 1);
        assert!(p.panel_scales(1).is_empty());
        let Q4Scales::PerChannel(scales) = w.scales() else {
            unreachable!()
        };
        assert_eq!(p.channel_scales(2), &scales[32..48]);
        assert_eq!(
            &p.panel(2)[64 * 3 + 4 * 5..64 * 3 + 4 * 6],
            &repair(w.row_packed(37)[12..16].try_into().unwrap())
        );
        assert_eq!(p.to_matrix(), w);
        let (codes, s) = p.clone().into_panel_parts();
        assert_eq!(PanelsQ4::from_panel_parts(48, 96, codes.clone(), s).as_ref(), Some(&p));
        let refused =
            |s: Vec<f32>| PanelsQ4::from_panel_parts(48, 96, codes.clone(), Q4Scales::PerChannel(s)).is_none();
        assert!(refused(vec![1.0; 47]), "a scale short");
        let mut negative = vec![1.0; 48];
        negative[3] = -1.0;
        assert!(refused(negative), "a negative channel scale");
        let mut nan = vec![1.0; 48];
        nan[47] = f32::NAN;
        assert!(refused(nan), "a NaN channel scale");
    }

    #[test]
    fn panel_parts_go_out_and_back_unchanged_and_only_in_a_panel_shape() {
        let p = PanelsQ4::new(&matrix(32, 64, 3)).unwrap();
        let (codes, scales) = p.clone().into_panel_parts();
        let back = PanelsQ4::from_panel_parts(32, 64, codes.clone(), scales.clone());
        assert_eq!(back.as_ref(), Some(&p));
        let Q4Scales::Grouped { scales, .. } = scales else {
            unreachable!()
        };
        let parts = |n: usize, k: usize| (vec![0x88u8; n * k / 2], vec![f16::ONE; n * k / 32]);
        let refused = |n: usize, k: usize, codes: Vec<u8>, scales: Vec<f16>| {
            PanelsQ4::from_panel_parts(n, k, codes, Q4Scales::Grouped { group: 32, scales }).is_none()
        };
        let (c, s) = parts(24, 64);
        assert!(refused(24, 64, c, s), "N not a multiple of 16");
        let (c, s) = parts(16, 48);
        assert!(refused(16, 48, c, s), "K not a multiple of 32");
        assert!(refused(0, 64, vec![], vec![]), "N = 0");
        assert!(refused(32, 64, codes[1..].to_vec(), scales.clone()), "a byte short");
        assert!(refused(32, 64, codes.clone(), scales[1..].to_vec()), "a scale short");
        let mut nan = scales.clone();
        nan[5] = f16::NAN;
        assert!(refused(32, 64, codes.clone(), nan), "a NaN scale");
        let mut inf = scales;
        inf[0] = f16::NEG_INFINITY;
        assert!(refused(32, 64, codes.clone(), inf), "an infinite scale");
        let group_16 = Q4Scales::Grouped {
            group: 16,
            scales: vec![f16::ONE; 32 * 4],
        };
        assert!(
            PanelsQ4::from_panel_parts(32, 64, codes, group_16).is_none(),
            "a group of 16"
        );
    }

    #[test]
    fn a_panel_form_reads_its_bytes_from_a_shared_buffer() {
        let p = PanelsQ4::new(&matrix(32, 64, 4)).unwrap();
        assert!(!p.codes_shared());
        let mut bytes = vec![0xEEu8; 7];
        bytes.extend_from_slice(p.codes());
        let buffer: SharedBuffer = std::sync::Arc::new(bytes);
        let shared = p.with_shared_codes(buffer.clone(), 7).unwrap();
        assert!(shared.codes_shared());
        assert_eq!(shared, p);
        assert_eq!(shared.codes().as_ptr(), (*buffer).as_ref()[7..].as_ptr(), "in place");
        assert_eq!(shared.to_matrix(), p.to_matrix());
        assert!(p.with_shared_codes(buffer, 8).is_none(), "a byte past the buffer");
    }

    #[test]
    fn the_scalar_panel_entry_has_the_natural_entrys_bits() {
        for (m, n, k, rows) in [
            (1, 16, 32, 0..16),
            (3, 48, 96, 8..40),
            (5, 32, 576, 16..32),
            (2, 64, 64, 0..64),
            // the entry's row blocks of ROW_BLOCK: one whole, one row past,
            // two and a bit
            (ROW_BLOCK, 16, 64, 0..16),
            (ROW_BLOCK + 1, 32, 96, 8..24),
            (2 * ROW_BLOCK + 3, 16, 32, 0..16),
        ] {
            let w = matrix(n, k, (m * n + k) as u32);
            let p = PanelsQ4::new(&w).unwrap();
            let codes: Vec<i8> = (0..m * k).map(|i| ((i * 37 % 255) as i32 - 127) as i8).collect();
            let scales: Vec<f32> = (0..m).map(|i| 0.01 + i as f32 * 0.003).collect();
            let sums = activation_group_sums(&codes, m, k, 32);
            let x = ActivationsQ8::new(m, k, &codes, &scales, &sums, 32).unwrap();
            let width = rows.len();
            let (mut want, mut got) = (vec![0f32; m * width], vec![1f32; m * width]);
            gemm_w4a8_grouped(&x, &w, rows.clone(), &mut OutputTile::new(&mut want, width));
            gemm_w4a8_grouped_panels_scalar(&x, &p, rows.clone(), &mut OutputTile::new(&mut got, width));
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&want), bits(&got), "m {m} n {n} k {k} rows {rows:?}");
            // per channel: one sum a row, the scales multiplied first
            let w = per_channel_matrix(n, k, (m + n * k) as u32);
            let p = PanelsQ4::new(&w).unwrap();
            let sums = activation_group_sums(&codes, m, k, k);
            let x = ActivationsQ8::new(m, k, &codes, &scales, &sums, k).unwrap();
            let (mut want, mut got) = (vec![0f32; m * width], vec![1f32; m * width]);
            gemm_w4a8(&x, &w, rows.clone(), &mut OutputTile::new(&mut want, width));
            gemm_w4a8_panels_scalar(&x, &p, rows.clone(), &mut OutputTile::new(&mut got, width));
            assert_eq!(bits(&want), bits(&got), "per channel: m {m} n {n} k {k} rows {rows:?}");
        }
    }

    /// The portable tiles as a pair tile: each panel of the pair by the
    /// 1-row tile, so the frame's pairing is checked on every platform.
    fn pair_scalar(x: &[&[i8]], sums: &[&[i32]], panels: &[u8], s: &[f16], out: &mut [f32]) {
        PAIRS_RUN.with(|c| c.set(c.get() + 1));
        let (bytes, per) = (panels.len() / 2, s.len() / 2);
        for (h, o) in out.chunks_exact_mut(PANEL_ROWS).enumerate() {
            tile_panel_scalar(
                x,
                sums,
                &panels[h * bytes..(h + 1) * bytes],
                &s[h * per..(h + 1) * per],
                o,
            );
        }
    }

    fn pair_per_channel_scalar(x: &[&[i8]], sums: &[&[i32]], panels: &[u8], out: &mut [f32]) {
        let bytes = panels.len() / 2;
        for (h, o) in out.chunks_exact_mut(PANEL_ROWS).enumerate() {
            tile_panel_per_channel_scalar(x, sums, &panels[h * bytes..(h + 1) * bytes], o);
        }
    }

    thread_local! {
        static PAIRS_RUN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    static PAIRED: PanelFamily = PanelFamily {
        tiles: &[(1, tile_panel_scalar)],
        pairs: Some(pair_scalar),
    };
    static PAIRED_PER_CHANNEL: PanelFamily<TilePanelQ4PerChannel> = PanelFamily {
        tiles: &[(1, tile_panel_per_channel_scalar)],
        pairs: Some(pair_per_channel_scalar),
    };

    /// A family with a pair tile gives the natural entry's bits over any
    /// range: even and odd counts of whole panels, ranges cut inside their
    /// first or last panel (those panels take the 1-row tile), one panel,
    /// and batches (whose leftover row takes the pairs). Each pair's tile
    /// is counted: the frame must hand it the inner panels two by two.
    #[test]
    fn a_pair_tile_takes_the_inner_panels_two_by_two_with_the_same_bits() {
        let (n, k) = (96, 64);
        // (m, rows, pair calls: pairs of inner panels times activation rows)
        for (m, rows, pairs) in [
            (1, 0..96, 3),
            (1, 0..80, 2),
            (1, 8..72, 1),
            (1, 16..48, 1),
            (1, 0..16, 0),
            (1, 20..28, 0),
            (3, 8..88, 6),
            (5, 0..96, 15),
        ] {
            let codes: Vec<i8> = (0..m * k).map(|i| ((i * 53 % 255) as i32 - 127) as i8).collect();
            let scales: Vec<f32> = (0..m).map(|i| 0.02 + i as f32 * 0.001).collect();
            let width = rows.len();
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            let w = matrix(n, k, 7);
            let p = PanelsQ4::new(&w).unwrap();
            let sums = activation_group_sums(&codes, m, k, 32);
            let x = ActivationsQ8::new(m, k, &codes, &scales, &sums, 32).unwrap();
            let (mut want, mut got) = (vec![0f32; m * width], vec![1f32; m * width]);
            gemm_w4a8_grouped(&x, &w, rows.clone(), &mut OutputTile::new(&mut want, width));
            PAIRS_RUN.with(|c| c.set(0));
            gemm_w4a8_grouped_panels(&PAIRED, &x, &p, rows.clone(), &mut OutputTile::new(&mut got, width));
            assert_eq!(bits(&want), bits(&got), "grouped: m {m} rows {rows:?}");
            assert_eq!(PAIRS_RUN.with(|c| c.get()), pairs, "pair calls: m {m} rows {rows:?}");
            let w = per_channel_matrix(n, k, 9);
            let p = PanelsQ4::new(&w).unwrap();
            let sums = activation_group_sums(&codes, m, k, k);
            let x = ActivationsQ8::new(m, k, &codes, &scales, &sums, k).unwrap();
            let (mut want, mut got) = (vec![0f32; m * width], vec![1f32; m * width]);
            gemm_w4a8(&x, &w, rows.clone(), &mut OutputTile::new(&mut want, width));
            gemm_w4a8_panels(
                &PAIRED_PER_CHANNEL,
                &x,
                &p,
                rows.clone(),
                &mut OutputTile::new(&mut got, width),
            );
            assert_eq!(bits(&want), bits(&got), "per channel: m {m} rows {rows:?}");
        }
    }
}
