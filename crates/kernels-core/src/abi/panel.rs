//! W4A8 weights prepared once per layer: rows in panels of 16, interleaved
//! 4 bytes at a time ([`PanelsQ4`]), grouped by 32 or per channel, the panel
//! tiles' contract and their family; the frame's panel sweep is
//! `frame/panels.rs`.
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

use crate::abi::activations::{ActivationsQ8, OutputTile};
use crate::abi::pairing::{repair, unpair};

/// Weight rows per panel.
pub const PANEL_ROWS: usize = 16;
/// The one group size a panel holds (Q4_0's).
pub const PANEL_GROUP: usize = 32;
/// Columns per interleaved piece: 4 packed bytes of a row.
pub(crate) const PIECE_COLS: usize = 8;

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
#[derive(Debug, Clone)]
pub struct PanelsQ4 {
    n: usize,
    k: usize,
    codes: Codes<u8>,
    scales: PanelScales,
}

/// A panel form's scales: grouped by 32 in panel order, or per channel in
/// row order.
#[derive(Debug, Clone)]
enum PanelScales {
    /// Held by the form.
    Held(Q4Scales),
    /// Grouped by 32, in panel order: little-endian f16 in a shared buffer,
    /// on a 2-byte boundary, all finite (checked when the form was made).
    Shared(Codes<u8>),
}

impl PartialEq for PanelsQ4 {
    /// The same weight (shape, bytes and scales), wherever each is held.
    fn eq(&self, o: &Self) -> bool {
        let same_scales =
            self.grouped_scales() == o.grouped_scales() && self.per_channel_scales() == o.per_channel_scales();
        (self.n, self.k) == (o.n, o.k) && self.codes() == o.codes() && same_scales
    }
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
        let scales = panel_order(n, k, w.scales())?;
        // written in place: a Vec here would be copied into the aligned lines
        let mut owned = Codes::zeroed(n * (k / 2));
        let codes = owned.as_mut_slice()?;
        codes.copy_from_slice(w.packed());
        arrange_in_place(n, k, codes).then_some(PanelsQ4 {
            n,
            k,
            codes: owned,
            scales: PanelScales::Held(scales),
        })
    }

    /// The panel form of a natural weight whose packed bytes `codes` were
    /// already put in panel order by [`arrange_in_place`] (codes read in
    /// place from a file, say), and whose scales `natural_scales` are still
    /// the natural matrix's (`n · k / 32` grouped by 32 in row order, or `n`
    /// per channel); the scales are put in panel order (a copy), the codes
    /// moved in. `None` as for [`PanelsQ4::from_panel_codes`].
    pub fn from_arranged(n: usize, k: usize, codes: Codes<u8>, natural_scales: &Q4Scales) -> Option<PanelsQ4> {
        Self::from_panel_codes(n, k, codes, panel_order(n, k, natural_scales)?)
    }

    /// The panel form of a weight grouped by 32 whose packed bytes `codes`
    /// and scale bytes `scale_bytes` (`n · k / 32` little-endian f16, as a
    /// file stores them) were put in panel order where they lie
    /// ([`arrange_in_place`], [`arrange_scales_in_place`]): both read in
    /// place, no copy; decoded into a vector where they cannot be (not on a
    /// 2-byte boundary, a big-endian target). `None` as for
    /// [`PanelsQ4::from_panel_codes`] (grouped by 32).
    pub fn from_arranged_scales(n: usize, k: usize, codes: Codes<u8>, scale_bytes: Codes<u8>) -> Option<PanelsQ4> {
        let bytes = scale_bytes.as_slice();
        if !panel_shape(n, k) || Some(bytes.len()) != (n * (k / PANEL_GROUP)).checked_mul(2) {
            return None;
        }
        let Some(scales) = shared_f16(bytes) else {
            let scales = bytes
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]))
                .collect();
            return Self::from_panel_codes(
                n,
                k,
                codes,
                Q4Scales::Grouped {
                    group: PANEL_GROUP,
                    scales,
                },
            );
        };
        let valid = Some(codes.as_slice().len()) == n.checked_mul(k / 2) && scales.iter().all(|s| s.is_finite());
        valid.then_some(PanelsQ4 {
            n,
            k,
            codes,
            scales: PanelScales::Shared(scale_bytes),
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
        (panel_shape(n, k) && sized && scaled).then_some(PanelsQ4 {
            n,
            k,
            codes,
            scales: PanelScales::Held(scales),
        })
    }

    /// The bytes and scales in panel order, consuming the form (the bytes
    /// copied into a vector; the inverse of [`PanelsQ4::from_panel_parts`]).
    pub fn into_panel_parts(self) -> (Vec<u8>, Q4Scales) {
        let scales = self.to_scales();
        (self.codes.into_vec(), scales)
    }

    /// The bytes and scales in panel order, moved out without a copy (the
    /// inverse of [`PanelsQ4::from_panel_codes`]).
    pub fn into_panel_codes(self) -> (Codes<u8>, Q4Scales) {
        let scales = self.to_scales();
        (self.codes, scales)
    }

    /// Every panel's packed bytes, panel after panel (`n · k / 2`).
    pub fn codes(&self) -> &[u8] {
        self.codes.as_slice()
    }

    /// Whether the packed bytes are read in place from a shared buffer.
    pub fn codes_shared(&self) -> bool {
        self.codes.is_shared()
    }

    /// Whether the grouped scales are read in place from a shared buffer
    /// ([`PanelsQ4::from_arranged_scales`]).
    pub fn scales_shared(&self) -> bool {
        matches!(self.scales, PanelScales::Shared(_))
    }

    /// The same panel form (shape, scales) reading its packed bytes in place
    /// from `buffer[start .. start + n · k / 2]`: copy [`PanelsQ4::codes`]
    /// there first to get the same weight. Scales read in place from
    /// another buffer are copied (held by the form), so that the buffer they
    /// came from (a file's bytes) is not kept alive for them alone. `None`
    /// when the range is not within the buffer.
    pub fn with_shared_codes(&self, buffer: SharedBuffer, start: usize) -> Option<PanelsQ4> {
        let range = start..start.saturating_add(self.codes().len());
        Some(PanelsQ4 {
            n: self.n,
            k: self.k,
            codes: Codes::shared(buffer, range).ok()?,
            scales: PanelScales::Held(self.to_scales()),
        })
    }

    /// The natural matrix again, byte for byte the one this was made from.
    pub fn to_matrix(&self) -> QuantizedMatrixQ4 {
        let stride = self.k / 2;
        let mut packed = vec![0u8; self.n * stride];
        for (r, row) in packed.chunks_exact_mut(stride.max(1)).enumerate() {
            row.copy_from_slice(&self.row_packed(r));
        }
        let scales = match self.to_scales() {
            Q4Scales::PerChannel(s) => Q4Scales::PerChannel(s),
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

    /// Row `r` alone, as a one-row natural matrix (its bytes gathered, its
    /// scales in row order): what a row of [`PanelsQ4::to_matrix`] holds,
    /// without rebuilding the rest (an embedding table read one row at a
    /// time). `None` when `r >= n`.
    pub fn row(&self, r: usize) -> Option<QuantizedMatrixQ4> {
        if r >= self.n {
            return None;
        }
        let scales = match &self.scales {
            PanelScales::Held(Q4Scales::PerChannel(s)) => Q4Scales::PerChannel(vec![s[r]]),
            PanelScales::Held(Q4Scales::Grouped { .. }) | PanelScales::Shared(_) => {
                let q = r % PANEL_ROWS;
                let scales = self
                    .panel_scales(r / PANEL_ROWS)
                    .iter()
                    .skip(q)
                    .step_by(PANEL_ROWS)
                    .copied()
                    .collect();
                Q4Scales::Grouped {
                    group: PANEL_GROUP,
                    scales,
                }
            }
        };
        Some(
            QuantizedMatrixQ4::from_parts_biased(1, self.k, self.row_packed(r), scales)
                .expect("a panel form holds a valid matrix's bytes"),
        )
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
            PanelScales::Held(Q4Scales::PerChannel(_)) => GroupSize::PerChannel,
            PanelScales::Held(Q4Scales::Grouped { .. }) | PanelScales::Shared(_) => GroupSize::Group(PANEL_GROUP),
        }
    }
    /// The scales, copied: grouped ones in panel order, per-channel ones in
    /// row order (the layout above).
    pub fn to_scales(&self) -> Q4Scales {
        match &self.scales {
            PanelScales::Held(s) => s.clone(),
            PanelScales::Shared(_) => Q4Scales::Grouped {
                group: PANEL_GROUP,
                scales: self.grouped_scales().to_vec(),
            },
        }
    }
    /// Every grouped scale, in panel order (empty per channel).
    pub fn grouped_scales(&self) -> &[f16] {
        match &self.scales {
            PanelScales::Held(Q4Scales::Grouped { scales, .. }) => scales,
            PanelScales::Held(Q4Scales::PerChannel(_)) => &[],
            // checked readable in place when the form was made, and the
            // shared bytes never move
            PanelScales::Shared(bytes) => shared_f16(bytes.as_slice()).unwrap_or(&[]),
        }
    }
    /// Activation sums a row's tiles take: its groups of 32 (grouped), or
    /// 1, the whole row's (per channel).
    pub fn groups(&self) -> usize {
        match self.group_size() {
            GroupSize::PerChannel => 1,
            GroupSize::Group(_) => self.k / PANEL_GROUP,
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
        match self.group_size() {
            GroupSize::Group(_) => {
                let len = PANEL_ROWS * self.groups();
                &self.grouped_scales()[p * len..(p + 1) * len]
            }
            GroupSize::PerChannel => &[],
        }
    }
    /// Every per-channel scale, in row order (`None` when grouped).
    pub fn per_channel_scales(&self) -> Option<&[f32]> {
        match &self.scales {
            PanelScales::Held(Q4Scales::PerChannel(s)) => Some(s),
            _ => None,
        }
    }
    /// Panel `p`'s 16 per-channel scales, in row order (empty when grouped).
    pub fn channel_scales(&self, p: usize) -> &[f32] {
        match &self.scales {
            PanelScales::Held(Q4Scales::PerChannel(s)) => &s[p * PANEL_ROWS..(p + 1) * PANEL_ROWS],
            _ => &[],
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

/// Rearranges `codes`, the packed biased bytes of a natural Q4 weight of
/// `n` rows and `k` columns (`k / 2` bytes a row, docs/NUMERICS.md §4),
/// into the panel order [`PanelsQ4`] holds, in place: panel by panel (its
/// 16 rows are the same `16 · k / 2` bytes in either order), through one
/// panel's worth of scratch. So a weight read in place from a file's bytes
/// can take the panel form without a second copy of its codes. `false`,
/// and `codes` untouched, when `n × k` has no panel form (N a multiple of
/// 16, not 0; K a multiple of 32) or `codes` is not `n · k / 2` bytes.
pub fn arrange_in_place(n: usize, k: usize, codes: &mut [u8]) -> bool {
    if !panel_shape(n, k) || Some(codes.len()) != n.checked_mul(k / 2) {
        return false;
    }
    let stride = k / 2;
    if stride == 0 {
        return true; // K = 0: no bytes to move
    }
    let mut natural = vec![0u8; PANEL_ROWS * stride];
    let pieces = stride / (PIECE_COLS / 2);
    for panel in codes.chunks_exact_mut(PANEL_ROWS * stride) {
        natural.copy_from_slice(panel);
        // every piece re-paired where it lies in the scratch (one pass the
        // compiler vectorises), then moved as 4-byte arrays, the panel
        // written in order, a piece column (16 rows' 4 bytes) at a time: a
        // piece at a time through checked slices, row by row, the
        // 1.7B-shaped q4g32 file's codes took 0.37 s, a tenth of its load
        // (AMD EPYC Zen 4, `perf record` of `qlinear-bench --load`)
        for piece in natural.as_chunks_mut::<4>().0 {
            *piece = repair(*piece);
        }
        let (rows, _) = natural.as_chunks::<4>();
        let (columns, _) = panel.as_chunks_mut::<{ PANEL_ROWS * 4 }>();
        for (c, column) in columns.iter_mut().enumerate() {
            let (out, _) = column.as_chunks_mut::<4>();
            for (q, out) in out.iter_mut().enumerate() {
                *out = rows[q * pieces + c];
            }
        }
    }
    true
}

/// Little-endian f16 bytes read as f16 where they lie: on a little-endian
/// target, from a 2-byte boundary; `None` elsewhere (decode them instead).
fn shared_f16(bytes: &[u8]) -> Option<&[f16]> {
    bytemuck::try_cast_slice(bytes)
        .ok()
        .filter(|_| cfg!(target_endian = "little"))
}

/// Puts a grouped-by-32 weight's scale bytes (`n · k / 32` little-endian
/// f16, row after row, as a file stores them) in the order its panel form
/// holds them ([`PanelsQ4`]), where they lie: the scales' counterpart of
/// [`arrange_in_place`], so that a file read in place holds its scales
/// once. `false`, and `bytes` untouched, when `n × k` has no panel form or
/// `bytes` is not `2 · n · k / 32` long.
pub fn arrange_scales_in_place(n: usize, k: usize, bytes: &mut [u8]) -> bool {
    let groups = k / PANEL_GROUP;
    if !panel_shape(n, k) || Some(bytes.len()) != (n * groups).checked_mul(2) {
        return false;
    }
    match bytemuck::try_cast_slice_mut::<u8, [u8; 2]>(bytes) {
        Ok(scales) => to_panel_order(groups, scales),
        Err(_) => return false,
    }
    true
}

/// Group scales (f16 values, or their bytes) of whole panels, row after
/// row, put group after group within each panel (row `16p + q`'s group `g`
/// at `p · 16 · groups + 16g + q`), in place through one panel's scratch.
fn to_panel_order<T: Copy>(groups: usize, scales: &mut [T]) {
    let len = PANEL_ROWS * groups;
    if len == 0 {
        return; // K = 0: no groups, nothing to move
    }
    let mut natural = Vec::with_capacity(len);
    for panel in scales.chunks_exact_mut(len) {
        natural.clear();
        natural.extend_from_slice(panel);
        for (q, row) in natural.chunks_exact(groups).enumerate() {
            for (g, &s) in row.iter().enumerate() {
                panel[PANEL_ROWS * g + q] = s;
            }
        }
    }
}

/// A natural weight's scales in the order its panel form holds them:
/// grouped by 32 as [`to_panel_order`] puts them; per channel, unchanged.
/// `None` when `n × k` has no panel form, the group is not 32, or there are
/// not `n · k / 32` (grouped) or `n` (per channel) scales.
fn panel_order(n: usize, k: usize, natural: &Q4Scales) -> Option<Q4Scales> {
    if !panel_shape(n, k) {
        return None;
    }
    match natural {
        Q4Scales::PerChannel(s) => (s.len() == n).then(|| Q4Scales::PerChannel(s.clone())),
        Q4Scales::Grouped { group, scales } if *group == PANEL_GROUP && scales.len() == n * (k / PANEL_GROUP) => {
            let mut scales = scales.clone();
            to_panel_order(k / PANEL_GROUP, &mut scales);
            Some(Q4Scales::Grouped {
                group: PANEL_GROUP,
                scales,
            })
        }
        Q4Scales::Grouped { .. } => None,
    }
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
