//! ggml's block formats decoded to f32, exactly as the `gguf` package's
//! `gguf.quants.dequantize` does it (numpy, each product and sum rounded
//! once, in the order written below; `docs/FORMAT.md`, "GGUF input").
//!
//! A block's f16 scales are converted exactly, NaN payloads included;
//! NaN, infinite, subnormal and negative-zero scales pass through the
//! arithmetic as IEEE says, with no special case, as they do in numpy.

use half::f16;

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
        GgmlType::Q4_K | GgmlType::Q5_K => {
            let five = ty == GgmlType::Q5_K;
            blocks.for_each(|(b, y)| {
                let (d, dmin) = (half(b, 0), half(b, 2));
                let (sc, mn) = k_scales(&b[4..16]);
                // Q5_K: 32 bytes of fifth bits (bit s of byte i for weight i
                // of sub-block s) before the 128 bytes of nibbles
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
            })
        }
        GgmlType::Q6_K => blocks.for_each(|(b, y)| {
            let (ql, qh, scales, d) = (&b[0..128], &b[128..192], &b[192..208], half(b, 208));
            // 8 runs of 32 weights: run c takes nibbles from ql's half c / 4,
            // bytes (c % 2) · 32 onward, low or high by (c / 2) % 2, and two
            // bits from qh's half c / 4 at shift (c % 4) · 2
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
        }),
        _ => unreachable!("DEQUANTIZABLE was checked above"),
    }
    Ok(())
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
