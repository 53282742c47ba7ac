//! ggml's block formats decoded to f32, exactly as the `gguf` package's
//! `gguf.quants.dequantize` does it (numpy, each product and sum rounded
//! once, in the order written below; `docs/FORMAT.md`, "GGUF input").
//!
//! A block's f16 scales are converted exactly, NaN payloads included;
//! NaN, infinite, subnormal and negative-zero scales pass through the
//! arithmetic as IEEE says, with no special case, as they do in numpy.

use half::f16;

use qlinear_quant_recipe::{Q4Scales, QuantizedMatrixQ4};

use crate::{FormatError, GgmlType};

/// The types [`dequantize`] decodes.
pub const DEQUANTIZABLE: [GgmlType; 11] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

/// Decodes `data`, whole blocks of `ty`, into `out` (one f32 per weight:
/// `data.len() / ty.block_bytes() · ty.block_weights()` of them). The
/// tensor name is for the error: a type not in [`DEQUANTIZABLE`], or a
/// length that is not whole blocks or does not match `out`.
pub fn dequantize(tensor: &str, ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<(), FormatError> {
    let (bw, bb) = (ty.block_weights(), ty.block_bytes());
    if !DEQUANTIZABLE.contains(&ty) {
        return Err(FormatError::Unsupported {
            tensor: tensor.into(),
            reason: format!("ggml type {ty} cannot be dequantized here (this reader decodes {DEQUANTIZABLE:?})"),
        });
    }
    if !data.len().is_multiple_of(bb) || data.len() / bb * bw != out.len() {
        return Err(FormatError::Unsupported {
            tensor: tensor.into(),
            reason: format!(
                "{} bytes of {ty} (blocks of {bb} bytes, {bw} weights) for {} weights",
                data.len(),
                out.len()
            ),
        });
    }
    let blocks = data.chunks_exact(bb).zip(out.chunks_exact_mut(bw));
    match ty {
        GgmlType::F32 => blocks.for_each(|(b, y)| y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        GgmlType::F16 => blocks.for_each(|(b, y)| y[0] = half(b, 0)),
        // bf16 is the top half of an f32: a shift, NaN payloads kept
        GgmlType::BF16 => {
            blocks.for_each(|(b, y)| y[0] = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16))
        }
        GgmlType::Q8_0 => blocks.for_each(|(b, y)| {
            let d = half(b, 0);
            for (y, &q) in y.iter_mut().zip(&b[2..34]) {
                *y = f32::from(q as i8) * d;
            }
        }),
        GgmlType::Q4_0 => blocks.for_each(|(b, y)| {
            let d = half(b, 0);
            for (j, y) in y.iter_mut().enumerate() {
                *y = d * f32::from(nibble(&b[2..18], j) as i8 - 8);
            }
        }),
        GgmlType::Q4_1 => blocks.for_each(|(b, y)| {
            let (d, m) = (half(b, 0), half(b, 2));
            for (j, y) in y.iter_mut().enumerate() {
                *y = d * f32::from(nibble(&b[4..20], j)) + m;
            }
        }),
        GgmlType::Q5_0 => blocks.for_each(|(b, y)| {
            let (d, qh) = (half(b, 0), u32::from_le_bytes([b[2], b[3], b[4], b[5]]));
            for (j, y) in y.iter_mut().enumerate() {
                let q = nibble(&b[6..22], j) | (((qh >> j) & 1) as u8) << 4;
                *y = d * f32::from(q as i8 - 16);
            }
        }),
        GgmlType::Q5_1 => blocks.for_each(|(b, y)| {
            let (d, m, qh) = (half(b, 0), half(b, 2), u32::from_le_bytes([b[4], b[5], b[6], b[7]]));
            for (j, y) in y.iter_mut().enumerate() {
                let q = nibble(&b[8..24], j) | (((qh >> j) & 1) as u8) << 4;
                *y = d * f32::from(q) + m;
            }
        }),
        GgmlType::Q4_K => blocks.for_each(|(b, y)| block_q45_k(b, y, false)),
        GgmlType::Q5_K => blocks.for_each(|(b, y)| block_q45_k(b, y, true)),
        GgmlType::Q6_K => blocks.for_each(|(b, y)| block_q6_k(b, y)),
        // DEQUANTIZABLE was checked above; a type added there without a
        // decoder here is refused rather than decoded wrongly
        other => {
            return Err(FormatError::Unsupported {
                tensor: tensor.into(),
                reason: format!("ggml type {other} has no decoder"),
            })
        }
    }
    Ok(())
}

/// One `Q4_K` block (`five`: `Q5_K`) of 256 weights: 8 sub-blocks of 32,
/// each with its 6-bit scale and min (`k_scales`), `y = d·sc·q − dmin·mn`.
fn block_q45_k(b: &[u8], y: &mut [f32], five: bool) {
    let (d, dmin) = (half(b, 0), half(b, 2));
    let (sc, mn) = k_scales(&b[4..16]);
    // Q5_K: 32 bytes of fifth bits (bit s of byte i for weight i of
    // sub-block s) before the 128 bytes of nibbles
    let (qh, qs) = if five {
        (&b[16..48], &b[48..176])
    } else {
        (&b[16..16], &b[16..144])
    };
    for s in 0..8 {
        let (ds, ms) = (d * f32::from(sc[s]), dmin * f32::from(mn[s]));
        let (bytes, shift) = (&qs[s / 2 * 32..s / 2 * 32 + 32], s % 2 * 4);
        for i in 0..32 {
            let mut q = (bytes[i] >> shift) & 0x0F;
            if five {
                q |= ((qh[i] >> s) & 1) << 4;
            }
            y[s * 32 + i] = ds * f32::from(q) - ms;
        }
    }
}

/// One `Q6_K` block of 256 weights: 4 low bits in `ql`, 2 high bits in
/// `qh`, an i8 scale per 16 weights, `y = d·scale·(q − 32)`.
fn block_q6_k(b: &[u8], y: &mut [f32]) {
    let (ql, qh, scales, d) = (&b[0..128], &b[128..192], &b[192..208], half(b, 208));
    // 8 runs of 32 weights: run c takes nibbles from ql's half c / 4, bytes
    // (c % 2) · 32 onward, low or high by (c / 2) % 2, and two bits from
    // qh's half c / 4 at shift (c % 4) · 2
    for c in 0..8 {
        let (g, lo_at, lo_shift, hi_shift) = (c / 4, c % 2 * 32, c / 2 % 2 * 4, c % 4 * 2);
        for i in 0..32 {
            let e = c * 32 + i;
            let lo = (ql[g * 64 + lo_at + i] >> lo_shift) & 0x0F;
            let hi = (qh[g * 32 + i] >> hi_shift) & 0x03;
            let q = (lo | hi << 4) as i8 - 32;
            let ds = d * f32::from(scales[e / 16] as i8);
            y[e] = ds * f32::from(q);
        }
    }
}

/// A `Q4_0` matrix of `n` rows and `k` columns (`data`: its `n · k / 32`
/// blocks, rows of `k / 32` blocks) as q4g32, **losslessly**: every block's
/// f16 `d` becomes the group's scale bit for bit (negative ones included,
/// `docs/FORMAT.md`, "Versions"), and its codes `n − 8 ∈ [−8, 7]` the
/// group's codes in qlinear's nibble order (column `2b` low, `2b + 1`
/// high; `Q4_0` holds weights 0..16 in the low nibbles and 16..32 in the
/// high ones). The dequantized values `code · f32(d)` are exactly ggml's
/// `d · (n − 8)`.
///
/// Refused, naming `tensor`, row and block: a `d` that is NaN or infinite
/// (q4g holds finite scales), and a `data` length that is not `n · k / 32`
/// blocks or a `k` that is not a multiple of 32.
pub fn q4_0_to_q4g32(tensor: &str, n: usize, k: usize, data: &[u8]) -> Result<QuantizedMatrixQ4, FormatError> {
    const BLOCK: usize = 32;
    let bb = GgmlType::Q4_0.block_bytes();
    let blocks_per_row = k / BLOCK;
    let expected = n.checked_mul(blocks_per_row).and_then(|b| b.checked_mul(bb));
    if !k.is_multiple_of(BLOCK) || expected != Some(data.len()) {
        return Err(FormatError::Unsupported {
            tensor: tensor.into(),
            reason: format!(
                "{} bytes of Q4_0 for [{n}, {k}]: a row must be whole blocks of {BLOCK} weights ({bb} bytes each)",
                data.len()
            ),
        });
    }
    let mut packed = Vec::with_capacity(n * k / 2);
    let mut scales = Vec::with_capacity(n * blocks_per_row);
    for (i, b) in data.chunks_exact(bb).enumerate() {
        let d = f16::from_le_bytes([b[0], b[1]]);
        if !d.is_finite() {
            return Err(FormatError::Gguf {
                at: format!("tensor {tensor}"),
                reason: format!(
                    "row {}, block {} (columns {}..{}) has the scale d = {} (f16 bits {:#06x}); q4g32 holds finite \
                     scales only, so this tensor cannot be imported",
                    i / blocks_per_row.max(1),
                    i % blocks_per_row.max(1),
                    i % blocks_per_row.max(1) * BLOCK,
                    (i % blocks_per_row.max(1) + 1) * BLOCK,
                    d,
                    d.to_bits()
                ),
            });
        }
        scales.push(d);
        let qs = &b[2..18];
        // the raw nibble n is code + 8: qlinear's biased in-memory nibble
        packed.extend((0..BLOCK / 2).map(|c| nibble(qs, 2 * c) | nibble(qs, 2 * c + 1) << 4));
    }
    QuantizedMatrixQ4::from_parts_biased(n, k, packed, Q4Scales::Grouped { group: BLOCK, scales }).map_err(|source| {
        FormatError::Invalid {
            tensor: tensor.into(),
            source,
        }
    })
}

/// The little-endian f16 at byte `at`, as f32 (exact). A NaN keeps its
/// payload and stays signalling if it was, as numpy's conversion does
/// (`half`, like F16C's `vcvtph2ps`, would set the quiet bit).
fn half(b: &[u8], at: usize) -> f32 {
    let h = f16::from_le_bytes([b[at], b[at + 1]]);
    if h.is_nan() {
        let bits = u32::from(h.to_bits());
        f32::from_bits((bits & 0x8000) << 16 | 0x7F80_0000 | (bits & 0x03FF) << 13)
    } else {
        h.to_f32()
    }
}

/// Weight `j` of a 32-weight block's 16 packed bytes: the low nibbles hold
/// weights 0..16, the high nibbles 16..32.
fn nibble(qs: &[u8], j: usize) -> u8 {
    if j < 16 {
        qs[j] & 0x0F
    } else {
        qs[j - 16] >> 4
    }
}

/// Q4_K / Q5_K's 8 sub-block scales and minimums, 6 bits each, from 12
/// bytes: sub-blocks 0..4 in the low 6 bits of bytes 0..4 (scales) and
/// 4..8 (minimums); sub-blocks 4..8 in the nibbles of bytes 8..12 with
/// their top 2 bits in the top 2 bits of bytes 0..8.
fn k_scales(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        sc[j] = s[j] & 0x3F;
        mn[j] = s[j + 4] & 0x3F;
        sc[j + 4] = (s[j + 8] & 0x0F) | ((s[j] >> 2) & 0x30);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30);
    }
    (sc, mn)
}
