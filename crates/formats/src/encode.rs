//! The on-disk bytes of quantized rows and tensors (`docs/FORMAT.md`): Q8
//! codes as their two's complement bytes, Q4 nibbles in two's complement
//! (low nibble first), per-channel scales as f32 and group scales as f16,
//! all little-endian. The writers here and the converter's row-by-row
//! producer both encode through these functions, so the layout is written
//! once.

use half::f16;
use qlinear_quant_recipe::{biased_to_twos_complement, Q4Scales, QuantizedWeight};

use crate::FormatError;

fn check(what: &str, expected: usize, found: usize) -> Result<(), FormatError> {
    if expected == found {
        Ok(())
    } else {
        Err(FormatError::Shape {
            tensor: what.into(),
            expected: vec![expected],
            found: vec![found],
        })
    }
}

/// One Q8 row: each code as its two's complement byte into `qweight`
/// (`codes.len()` bytes) and the scale as f32 little-endian into `scale`
/// (4 bytes). Errors: a slice of the wrong length
/// ([`FormatError::Shape`], naming the qweight or scales row), with nothing
/// written.
pub fn q8_row(codes: &[i8], s: f32, qweight: &mut [u8], scale: &mut [u8]) -> Result<(), FormatError> {
    check("qweight row", codes.len(), qweight.len())?;
    check("scales row", 4, scale.len())?;
    for (o, &c) in qweight.iter_mut().zip(codes) {
        *o = c as u8;
    }
    scale.copy_from_slice(&s.to_le_bytes());
    Ok(())
}

/// One per-channel Q4 row: `packed` holds the row's biased nibbles as the
/// recipes emit them and is turned into the on-disk two's complement in
/// place; the scale goes into `scale` as f32 little-endian (4 bytes).
/// Errors: `scale` not 4 bytes ([`FormatError::Shape`]), with nothing
/// written.
pub fn q4_row(s: f32, packed: &mut [u8], scale: &mut [u8]) -> Result<(), FormatError> {
    check("scales row", 4, scale.len())?;
    scale.copy_from_slice(&s.to_le_bytes());
    biased_to_twos_complement(packed);
    Ok(())
}

/// One grouped Q4 row: the nibbles as for [`q4_row`], each group scale as
/// its f16 bits little-endian into `out` (2 bytes a group). Errors: `out`
/// not `2 · scales.len()` bytes ([`FormatError::Shape`]), with nothing
/// written.
pub fn q4_grouped_row(scales: &[f16], packed: &mut [u8], out: &mut [u8]) -> Result<(), FormatError> {
    check("scales row", 2 * scales.len(), out.len())?;
    for (o, s) in out.chunks_exact_mut(2).zip(scales) {
        o.copy_from_slice(&s.to_bits().to_le_bytes());
    }
    biased_to_twos_complement(packed);
    Ok(())
}

/// f32 values as little-endian bytes (an `F32` tensor's data, or
/// per-channel scales).
pub fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|s| s.to_le_bytes()).collect()
}

/// f16 values as little-endian bytes (group scales).
pub fn f16s(v: &[f16]) -> Vec<u8> {
    v.iter().flat_map(|s| s.to_bits().to_le_bytes()).collect()
}

/// The on-disk bytes of a quantized tensor: `[qweight, scales]`.
pub fn quantized(t: &QuantizedWeight) -> [Vec<u8>; 2] {
    match t {
        QuantizedWeight::Q8(m) => [m.codes().iter().map(|&c| c as u8).collect(), f32s(m.scales())],
        QuantizedWeight::Q4(m) => {
            let scales = match m.scales() {
                Q4Scales::PerChannel(s) => f32s(s),
                Q4Scales::Grouped { scales, .. } => f16s(scales),
            };
            [m.to_twos_complement(), scales]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_encode_the_format_bytes_and_refuse_wrong_lengths() {
        let (mut q, mut s) = ([0u8; 3], [0u8; 4]);
        q8_row(&[1, -1, -127], 0.5, &mut q, &mut s).unwrap();
        assert_eq!((q, s), ([0x01, 0xFF, 0x81], 0.5f32.to_le_bytes()));
        assert!(matches!(
            q8_row(&[1], 0.5, &mut q, &mut s),
            Err(FormatError::Shape { .. })
        ));
        assert!(q8_row(&[1, 2, 3], 0.5, &mut q, &mut [0u8; 2]).is_err());
        // biased nibbles 9 (code 1) and 0 (code -8): on disk 0x81
        let mut packed = [0x09u8];
        q4_row(2.0, &mut packed, &mut s).unwrap();
        assert_eq!((packed, s), ([0x81], 2.0f32.to_le_bytes()));
        let mut packed = [0x09u8];
        let mut g = [0u8; 4];
        q4_grouped_row(&[f16::from_f32(0.5), f16::from_f32(2.0)], &mut packed, &mut g).unwrap();
        assert_eq!((packed, g), ([0x81], [0x00, 0x38, 0x00, 0x40]));
        let mut packed = [0x09u8];
        assert!(q4_grouped_row(&[f16::ONE], &mut packed, &mut g).is_err());
        assert_eq!(packed, [0x09], "nothing written on error");
        assert_eq!(f32s(&[1.0]), 1.0f32.to_le_bytes());
    }
}
