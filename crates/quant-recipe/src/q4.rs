use half::f16;

use crate::codes::Codes;

use crate::{
    check_len, checked_elems, finite_amax, packed_row_bytes, quantize_value, unpack_code_biased, RecipeError, Q4_BIAS,
    Q4_MAX_ABS, Q4_PAD_BIASED,
};

/// How many columns share one Q4 scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupSize {
    /// One f32 scale per output row.
    PerChannel,
    /// One f16 scale per group of this many consecutive columns (even, > 0,
    /// dividing K).
    Group(usize),
}

impl GroupSize {
    /// Checks that a grouped layout fits `k` columns: the group is even, non-zero
    /// and divides `k` (so `k` is even too). Per-channel fits any `k`.
    pub fn validate(self, k: usize) -> Result<(), RecipeError> {
        match self {
            GroupSize::PerChannel => Ok(()),
            GroupSize::Group(0) => Err(RecipeError::GroupZero),
            GroupSize::Group(g) if g % 2 != 0 => Err(RecipeError::GroupOdd { group: g }),
            GroupSize::Group(g) if !k.is_multiple_of(g) => Err(RecipeError::GroupNotDividing { group: g, k }),
            GroupSize::Group(_) => Ok(()),
        }
    }
}

/// Quantizes one row per channel to Q4 and packs it; returns the scale.
///
/// `scale = max|w| / 7`; codes `clamp(rte(w / scale), -7, 7)` (all 0 if the
/// scale is 0), stored biased by +8, two per byte, low nibble first; an odd
/// length pads the last high nibble with 8. `packed.len()` must be
/// `ceil(w.len() / 2)`.
pub fn quantize_row_q4(w: &[f32], packed: &mut [u8]) -> Result<f32, RecipeError> {
    check_len("Q4 packed bytes", packed_row_bytes(w.len()), packed.len())?;
    let scale = finite_amax(w)? / f32::from(Q4_MAX_ABS);
    pack_quantized(w, scale, packed);
    Ok(scale)
}

/// Quantizes `w` with `scale` (all codes 0 if it is 0) straight into biased
/// packed bytes, low nibble first, an odd tail padded with the biased zero.
fn pack_quantized(w: &[f32], scale: f32, packed: &mut [u8]) {
    let nibble = |v: f32| (quantize_value(v, scale, Q4_MAX_ABS) + Q4_BIAS as i8) as u8;
    if scale == 0.0 {
        packed.fill(Q4_PAD_BIASED | (Q4_PAD_BIASED << 4));
        return;
    }
    let pairs = w.chunks_exact(2);
    let tail = pairs.remainder();
    for (byte, pair) in packed.iter_mut().zip(pairs) {
        *byte = nibble(pair[0]) | (nibble(pair[1]) << 4);
    }
    if let (Some(&v), Some(last)) = (tail.first(), packed.last_mut()) {
        *last = nibble(v) | (Q4_PAD_BIASED << 4);
    }
}

/// Quantizes one row to Q4 with one f16 scale per group of `group` columns.
///
/// Per group: `s = f16(max|w_g| / 7)` (round to nearest even, subnormals
/// kept); an infinite `s` is a [`RecipeError::ScaleOverflow`]; codes are 0 if
/// `f32(s) == 0`, else `clamp(rte(w / f32(s)), -7, 7)`, packed biased as in
/// [`quantize_row_q4`]. `packed.len()` must be `w.len() / 2` and
/// `scales.len()` `w.len() / group`. On error nothing is written.
pub fn quantize_row_q4_grouped(
    w: &[f32],
    group: usize,
    packed: &mut [u8],
    scales: &mut [f16],
) -> Result<(), RecipeError> {
    let k = w.len();
    GroupSize::Group(group).validate(k)?;
    check_len("Q4 packed bytes", k / 2, packed.len())?;
    check_len("Q4 group scales", k / group, scales.len())?;
    // Scales first (so an overflow refuses the row before anything is written),
    // then the codes of each group straight into its packed bytes.
    let mut row_scales = Vec::with_capacity(k / group);
    for (g, src) in w.chunks_exact(group).enumerate() {
        let amax = crate::q4::group_amax(src, g * group)?;
        let s = f16::from_f32(amax / f32::from(Q4_MAX_ABS));
        if s.is_infinite() {
            return Err(RecipeError::ScaleOverflow {
                row: 0,
                group: g,
                col_start: g * group,
                col_end: (g + 1) * group,
                amax,
            });
        }
        row_scales.push(s);
    }
    for ((src, dst), s) in w
        .chunks_exact(group)
        .zip(packed.chunks_exact_mut(group / 2))
        .zip(&row_scales)
    {
        pack_quantized(src, f32::from(*s), dst);
    }
    scales.copy_from_slice(&row_scales);
    Ok(())
}

/// `max|w|` of the group starting at column `start` of its row, or the first
/// non-finite element with its column in the row.
pub(crate) fn group_amax(src: &[f32], start: usize) -> Result<f32, RecipeError> {
    finite_amax(src).map_err(|e| match e {
        RecipeError::NonFinite { value, col, .. } => RecipeError::NonFinite {
            row: 0,
            col: start + col,
            value,
        },
        other => other,
    })
}

/// The scales of a [`QuantizedMatrixQ4`].
#[derive(Debug, Clone, PartialEq)]
pub enum Q4Scales {
    /// One f32 per row, `[n]`.
    PerChannel(Vec<f32>),
    /// One f16 per row and group, row-major `[n, k / group]`.
    Grouped {
        /// Columns per scale (even, > 0, dividing `k`).
        group: usize,
        /// The f16 scales, finite and >= 0 (`docs/NUMERICS.md` §3.4).
        scales: Vec<f16>,
    },
}

/// A weight matrix quantized to symmetric int4, packed two values per byte:
/// `n × k`, row stride `ceil(k / 2)` bytes, low nibble first, each nibble the
/// code biased by +8 (code -7..7 is nibble 1..15; -8, nibble 0, is accepted
/// from files but never emitted); an odd `k` pads with nibble 8.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedMatrixQ4 {
    n: usize,
    k: usize,
    packed: Codes<u8>,
    scales: Q4Scales,
}

impl QuantizedMatrixQ4 {
    /// Quantizes a row-major `[n, k]` f32 matrix, per channel or grouped,
    /// with the canonical recipe.
    pub fn quantize(n: usize, k: usize, group: GroupSize, w: &[f32]) -> Result<Self, RecipeError> {
        Self::quantize_with(crate::Recipe::Canonical, n, k, group, w)
    }

    /// Quantizes a row-major `[n, k]` f32 matrix with `recipe`
    /// (`docs/NUMERICS.md` §3), per channel or grouped.
    pub fn quantize_with(
        recipe: crate::Recipe,
        n: usize,
        k: usize,
        group: GroupSize,
        w: &[f32],
    ) -> Result<Self, RecipeError> {
        Self::quantize_rows(recipe, None, n, k, group, w)
    }

    /// `quantize_with`, with the activation-aware recipe's importance (one
    /// per column, the same for every row).
    pub(crate) fn quantize_rows(
        recipe: crate::Recipe,
        importance: Option<&[f32]>,
        n: usize,
        k: usize,
        group: GroupSize,
        w: &[f32],
    ) -> Result<Self, RecipeError> {
        check_len("Q4 weights", checked_elems(n, k)?, w.len())?;
        group.validate(k)?;
        let stride = packed_row_bytes(k);
        let mut packed = vec![Q4_PAD_BIASED | (Q4_PAD_BIASED << 4); n * stride];
        let rows = || (0..n).map(|r| &w[r * k..(r + 1) * k]);
        let scales = match group {
            GroupSize::PerChannel => {
                let mut scales = Vec::with_capacity(n);
                for (r, src) in rows().enumerate() {
                    let dst = &mut packed[r * stride..(r + 1) * stride];
                    scales.push(crate::recipe::q4_row(recipe, src, importance, dst).map_err(|e| e.at_row(r))?);
                }
                Q4Scales::PerChannel(scales)
            }
            GroupSize::Group(g) => {
                let groups = k / g;
                let mut scales = vec![f16::ZERO; n * groups];
                for (r, src) in rows().enumerate() {
                    let dst = &mut packed[r * stride..(r + 1) * stride];
                    let sdst = &mut scales[r * groups..(r + 1) * groups];
                    crate::recipe::q4_grouped_row(recipe, src, importance, g, dst, sdst).map_err(|e| e.at_row(r))?;
                }
                Q4Scales::Grouped { group: g, scales }
            }
        };
        Ok(Self {
            n,
            k,
            packed: Codes::owned(packed),
            scales,
        })
    }

    /// Builds a matrix from biased packed bytes and scales, validating lengths,
    /// the group, the pad nibble of odd-K rows (must be 8) and the scales:
    /// per channel finite and `>= 0`; grouped finite, of either sign
    /// (`docs/NUMERICS.md` §4: an imported GGUF `Q4_0` block keeps its
    /// negative scale). All 16 nibble values are accepted.
    pub fn from_parts_biased(n: usize, k: usize, packed: Vec<u8>, scales: Q4Scales) -> Result<Self, RecipeError> {
        Self::from_codes_biased(n, k, Codes::owned(packed), scales)
    }

    /// [`QuantizedMatrixQ4::from_parts_biased`] on biased packed bytes owned
    /// or read in place from a shared buffer ([`Codes::shared`]: a model
    /// file's memory map, its nibbles made biased in place), with the same
    /// checks.
    pub fn from_codes_biased(n: usize, k: usize, packed: Codes<u8>, scales: Q4Scales) -> Result<Self, RecipeError> {
        let stride = packed_row_bytes(k);
        check_len("Q4 packed bytes", checked_elems(n, stride)?, packed.as_slice().len())?;
        match &scales {
            Q4Scales::PerChannel(s) => {
                check_len("Q4 per-channel scales", n, s.len())?;
                if let Some((row, &value)) = s.iter().enumerate().find(|(_, s)| !(s.is_finite() && **s >= 0.0)) {
                    return Err(RecipeError::InvalidScale { row, group: 0, value });
                }
            }
            Q4Scales::Grouped { group, scales } => {
                GroupSize::Group(*group).validate(k)?;
                let groups = k / group;
                check_len("Q4 group scales", checked_elems(n, groups)?, scales.len())?;
                // on the bits: finite (exponent not all ones), as
                // `is_finite()` without a conversion per scale, which
                // dominated building a matrix from parts. Any sign: a group
                // scale may be negative (docs/NUMERICS.md §4, GGUF Q4_0)
                let valid = |s: &f16| s.to_bits() & 0x7C00 != 0x7C00;
                if let Some((i, s)) = scales.iter().enumerate().find(|(_, s)| !valid(s)) {
                    return Err(RecipeError::InvalidScale {
                        row: i / groups,
                        group: i % groups,
                        value: f32::from(*s),
                    });
                }
            }
        }
        if k % 2 == 1 {
            for r in 0..n {
                let nibble = packed.as_slice()[r * stride + stride - 1] >> 4;
                if nibble != Q4_PAD_BIASED {
                    return Err(RecipeError::BadPadNibble {
                        row: r,
                        nibble,
                        expected: Q4_PAD_BIASED,
                    });
                }
            }
        }
        Ok(Self { n, k, packed, scales })
    }

    /// Builds a matrix from two's-complement packed bytes (the on-disk form; odd-K
    /// pad nibble 0), converting them to the biased form in one pass.
    pub fn from_parts_twos_complement(
        n: usize,
        k: usize,
        packed: Vec<u8>,
        scales: Q4Scales,
    ) -> Result<Self, RecipeError> {
        Self::from_twos_complement(n, k, &packed, scales)
    }

    /// [`QuantizedMatrixQ4::from_parts_twos_complement`] on borrowed bytes
    /// (a file's), copied once into the matrix's own buffer and converted
    /// there.
    pub fn from_twos_complement(n: usize, k: usize, packed: &[u8], scales: Q4Scales) -> Result<Self, RecipeError> {
        let mut codes = Codes::copied(packed);
        if let Some(bytes) = codes.as_mut_slice() {
            crate::twos_complement_to_biased(bytes);
        }
        Self::from_codes_biased(n, k, codes, scales).map_err(RecipeError::pad_nibble_as_twos_complement)
    }

    /// Output features (rows).
    pub fn n(&self) -> usize {
        self.n
    }
    /// Input features (columns).
    pub fn k(&self) -> usize {
        self.k
    }
    /// Bytes per packed row: `ceil(k / 2)`.
    pub fn row_stride(&self) -> usize {
        packed_row_bytes(self.k)
    }
    /// All packed bytes (biased nibbles), `[n, ceil(k / 2)]`.
    pub fn packed(&self) -> &[u8] {
        self.packed.as_slice()
    }
    /// Whether the packed bytes are read in place from a shared buffer (a
    /// model file's memory map) rather than owned.
    pub fn packed_shared(&self) -> bool {
        self.packed.is_shared()
    }
    /// The packed bytes of row `r` (panics if `r >= n`, like slice indexing).
    pub fn row_packed(&self, r: usize) -> &[u8] {
        let s = self.row_stride();
        &self.packed()[r * s..(r + 1) * s]
    }
    /// The scales (per channel or grouped).
    pub fn scales(&self) -> &Q4Scales {
        &self.scales
    }
    /// The grouping of the scales.
    pub fn group_size(&self) -> GroupSize {
        match self.scales {
            Q4Scales::PerChannel(_) => GroupSize::PerChannel,
            Q4Scales::Grouped { group, .. } => GroupSize::Group(group),
        }
    }
    /// The code (`[-8, 7]`) at row `r`, column `c`.
    pub fn code(&self, r: usize, c: usize) -> i8 {
        unpack_code_biased(self.row_packed(r), c)
    }
    /// The `k` codes of row `r`, unpacked into `out` (`out.len() == k`).
    pub fn unpack_row(&self, r: usize, out: &mut [i8]) {
        let row = self.row_packed(r);
        for (c, o) in out.iter_mut().enumerate().take(self.k) {
            *o = unpack_code_biased(row, c);
        }
    }
    /// The scale of row `r`, column `c` as f32.
    pub fn scale_at(&self, r: usize, c: usize) -> f32 {
        match &self.scales {
            Q4Scales::PerChannel(s) => s[r],
            Q4Scales::Grouped { group, scales } => f32::from(scales[r * (self.k / group) + c / group]),
        }
    }
    /// `code · scale` as a row-major `[n, k]` f32 matrix.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.n * self.k];
        for (r, o) in out.chunks_exact_mut(self.k.max(1)).enumerate().take(self.n) {
            self.dequantize_row_into(r, o);
        }
        out
    }
    /// Row `r` as `code · scale` (the group's scale with its sign) into
    /// `out` (`out.len() == k`; panics if `r >= n`, like slice indexing).
    pub fn dequantize_row_into(&self, r: usize, out: &mut [f32]) {
        for (c, o) in out.iter_mut().enumerate().take(self.k) {
            *o = f32::from(self.code(r, c)) * self.scale_at(r, c);
        }
    }
    /// The first group scale below zero (sign set, not −0.0) as `(row,
    /// group, value)`, or `None`: what decides a file's format version
    /// (`docs/FORMAT.md`, "Versions"). Always `None` per channel.
    pub fn negative_group_scale(&self) -> Option<(usize, usize, f32)> {
        let Q4Scales::Grouped { group, scales } = &self.scales else {
            return None;
        };
        let groups = self.k / group;
        scales
            .iter()
            .position(|s| s.to_bits() & 0x8000 != 0 && s.to_bits() != 0x8000)
            .map(|i| (i / groups.max(1), i % groups.max(1), f32::from(scales[i])))
    }
    /// The packed bytes in two's complement (the on-disk form).
    pub fn to_twos_complement(&self) -> Vec<u8> {
        let mut out = self.packed().to_vec();
        crate::biased_to_twos_complement(&mut out);
        out
    }
    /// The biased packed bytes and scales, consuming the matrix (the bytes
    /// copied into a vector: [`QuantizedMatrixQ4::into_codes`] moves them).
    pub fn into_parts(self) -> (Vec<u8>, Q4Scales) {
        (self.packed.into_vec(), self.scales)
    }

    /// The packed bytes (biased nibbles) and scales, moved out without a
    /// copy (the inverse of [`QuantizedMatrixQ4::from_codes_biased`]).
    pub fn into_codes(self) -> (Codes<u8>, Q4Scales) {
        (self.packed, self.scales)
    }
}
