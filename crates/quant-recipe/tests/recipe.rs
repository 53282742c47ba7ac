//! Hand examples, edge cases and error paths of the recipes.

use half::f16;
use qlinear_quant_recipe::*;

fn q8(w: &[f32]) -> (f32, Vec<i8>) {
    let mut c = vec![0; w.len()];
    let s = quantize_row_q8(w, &mut c).unwrap();
    (s, c)
}
fn q4(w: &[f32]) -> (f32, Vec<u8>) {
    let mut p = vec![0; w.len().div_ceil(2)];
    let s = quantize_row_q4(w, &mut p).unwrap();
    (s, p)
}

/// Seed 001 section 3: the codes `[1, -2 | 3, -8]` and `[7, 0 | -1, 4]` are the
/// bytes 0xE1 0x83 / 0x07 0x4F in two's complement; biased they differ by 0x88.
#[test]
fn seed_hand_example_bytes_twos_complement_and_biased() {
    let codes: [[i8; 4]; 2] = [[1, -2, 3, -8], [7, 0, -1, 4]];
    let twos = [[0xE1u8, 0x83], [0x07, 0x4F]];
    for (c, t) in codes.iter().zip(twos) {
        let mut biased = [0u8; 2];
        pack_codes_biased(c, &mut biased);
        assert_eq!(biased, [t[0] ^ 0x88, t[1] ^ 0x88]);
        let mut on_disk = biased;
        biased_to_twos_complement(&mut on_disk);
        assert_eq!(on_disk, t);
        for (col, &code) in c.iter().enumerate() {
            assert_eq!(unpack_code_biased(&biased, col), code);
        }
    }
    let scales = vec![
        f16::from_bits(0x3800),
        f16::from_bits(0x4000),
        f16::from_bits(0x3C00),
        f16::from_bits(0x3400),
    ];
    let m = QuantizedMatrixQ4::from_parts_twos_complement(
        2,
        4,
        vec![0xE1, 0x83, 0x07, 0x4F],
        Q4Scales::Grouped { group: 2, scales },
    )
    .unwrap();
    assert_eq!(m.dequantize(), vec![0.5, -1.0, 6.0, -16.0, 7.0, 0.0, -0.25, 1.0]);
    assert_eq!(m.to_twos_complement(), vec![0xE1, 0x83, 0x07, 0x4F]);
}

#[test]
fn every_nibble_code_in_both_positions() {
    for u in 0u8..16 {
        let code = u as i8 - 8;
        assert_eq!(unpack_code_biased(&[u], 0), code);
        assert_eq!(unpack_code_biased(&[u << 4], 1), code);
        assert_eq!(
            unpack_code_biased(&[u | 0x80], 0),
            code,
            "the other nibble must not leak in"
        );
        assert_eq!(unpack_code_biased(&[(u << 4) | 0x7], 1), code);
        // two's complement nibble t decodes as t < 8 ? t : t - 16 (seed 001)
        let t = u ^ 0x8;
        assert_eq!(if t < 8 { t as i8 } else { t as i8 - 16 }, code);
    }
}

#[test]
fn ties_go_to_even() {
    let (s, c) = q8(&[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 125.5, -126.5]);
    assert_eq!(s, 1.0);
    assert_eq!(c, vec![127, 0, 2, 2, 0, -2, -2, 126, -126]);
    let (s, p) = q4(&[7.0, 0.5, 1.5, 2.5, 3.5, -4.5, 6.5]);
    assert_eq!(s, 1.0);
    let codes: Vec<i8> = (0..7).map(|c| unpack_code_biased(&p, c)).collect();
    assert_eq!(codes, vec![7, 0, 2, 2, 4, -4, 6]);
}

#[test]
fn zero_rows_have_zero_scale_and_codes() {
    assert_eq!(q8(&[0.0, -0.0, 0.0]), (0.0, vec![0, 0, 0]));
    assert_eq!(q4(&[0.0, -0.0, 0.0]), (0.0, vec![0x88, 0x88]));
    let mut p = [0u8; 2];
    let mut s = [f16::ONE; 2];
    quantize_row_q4_grouped(&[0.0, 0.0, 1.0, -7.0], 2, &mut p, &mut s).unwrap();
    assert_eq!(s, [f16::ZERO, f16::ONE]);
    assert_eq!(p, [0x88, 0x19]); // codes 0 0 | 1 -7: nibbles 8 8 | 9 1
}

#[test]
fn negative_max_row() {
    let (s, c) = q8(&[-254.0, 127.0, 1.0]);
    assert_eq!(s, 2.0);
    assert_eq!(c, vec![-127, 64, 0]); // 63.5 -> 64 (even), 0.5 -> 0
}

#[test]
fn k_zero_one_and_odd() {
    assert_eq!(q8(&[]), (0.0, vec![]));
    assert_eq!(q4(&[]), (0.0, vec![]));
    assert_eq!(q8(&[-3.0]), (3.0 / 127.0, vec![-127]));
    assert_eq!(q4(&[-3.0]), (3.0 / 7.0, vec![0x81])); // code -7 is nibble 1, pad 8
    let m = QuantizedMatrixQ4::quantize(3, 5, GroupSize::PerChannel, &[1.0; 15]).unwrap();
    for r in 0..3 {
        assert_eq!(m.row_packed(r)[2] >> 4, Q4_PAD_BIASED);
    }
    let m0 = QuantizedMatrix::quantize(4, 0, &[]).unwrap();
    assert_eq!(m0.scales(), &[0.0; 4]);
}

#[test]
fn subnormal_and_huge_magnitudes() {
    // amax / 127 underflows to 0: every code is 0.
    assert_eq!(q8(&[1e-45, -1e-45]), (0.0, vec![0, 0]));
    let (s, c) = q8(&[1e-38, -5e-39]);
    assert!(s > 0.0 && s < f32::MIN_POSITIVE);
    assert_eq!(c[0], 127);
    let (s, c) = q8(&[f32::MAX, -f32::MAX, 0.0]);
    assert_eq!(s, f32::MAX / 127.0);
    assert_eq!(c, vec![127, -127, 0]);
}

#[test]
fn f16_group_scales_round_to_nearest_even_and_overflow() {
    let mut p = [0u8; 1];
    let mut s = [f16::ZERO; 1];
    // 7 * 2^-24 / 7 is the smallest f16 subnormal 0x0001: kept, not flushed.
    quantize_row_q4_grouped(&[7.0 * 2f32.powi(-24), 0.0], 2, &mut p, &mut s).unwrap();
    assert_eq!(s[0].to_bits(), 0x0001);
    // 1/3 rounds to f16 0x3555.
    quantize_row_q4_grouped(&[7.0 / 3.0, 0.0], 2, &mut p, &mut s).unwrap();
    assert_eq!(s[0].to_bits(), 0x3555);
    // 65504 is f16::MAX; 7 * 65520 / 7 rounds up to infinity: refused.
    quantize_row_q4_grouped(&[7.0 * 65504.0, 1.0], 2, &mut p, &mut s).unwrap();
    assert_eq!(s[0], f16::MAX);
    let e = quantize_row_q4_grouped(&[1.0, 1.0, 7.0 * 65520.0, 0.0], 2, &mut [0; 2], &mut [f16::ZERO; 2]).unwrap_err();
    assert!(
        matches!(
            e,
            RecipeError::ScaleOverflow {
                group: 1,
                col_start: 2,
                ..
            }
        ),
        "{e}"
    );
    let m = QuantizedMatrixQ4::quantize(2, 2, GroupSize::Group(2), &[1.0, 1.0, 1e9, 0.0]).unwrap_err();
    assert_eq!(
        m.to_string(),
        "f16 scale overflow at row 1, group 0 (columns 0..2): max |w| = 1000000000 gives a scale beyond f16's range"
    );
}

#[test]
fn non_finite_is_refused_with_row_and_column() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut w = vec![1.0f32; 12];
        w[7] = bad;
        let mut codes = vec![5i8; 12];
        assert!(matches!(
            quantize_row_q8(&w, &mut codes),
            Err(RecipeError::NonFinite { row: 0, col: 7, .. })
        ));
        assert_eq!(codes, vec![5; 12], "codes untouched on error");
        let e = QuantizedMatrix::quantize(3, 4, &w).unwrap_err();
        assert!(matches!(e, RecipeError::NonFinite { row: 1, col: 3, .. }), "{e}");
        let e = QuantizedMatrixQ4::quantize(3, 4, GroupSize::PerChannel, &w).unwrap_err();
        assert!(matches!(e, RecipeError::NonFinite { row: 1, col: 3, .. }), "{e}");
        let e = QuantizedMatrixQ4::quantize(2, 6, GroupSize::Group(2), &w).unwrap_err();
        assert!(matches!(e, RecipeError::NonFinite { row: 1, col: 1, .. }), "{e}");
    }
}

#[test]
fn group_and_shape_errors() {
    let w = [1.0f32; 12];
    assert_eq!(GroupSize::Group(0).validate(12), Err(RecipeError::GroupZero));
    assert_eq!(
        GroupSize::Group(3).validate(12),
        Err(RecipeError::GroupOdd { group: 3 })
    );
    assert_eq!(
        GroupSize::Group(8).validate(12),
        Err(RecipeError::GroupNotDividing { group: 8, k: 12 })
    );
    assert!(QuantizedMatrixQ4::quantize(1, 12, GroupSize::Group(8), &w).is_err());
    assert!(QuantizedMatrixQ4::quantize(1, 11, GroupSize::Group(2), &w[..11]).is_err());
    assert!(matches!(
        QuantizedMatrix::quantize(2, 5, &w),
        Err(RecipeError::LengthMismatch {
            expected: 10,
            actual: 12,
            ..
        })
    ));
    assert!(matches!(
        quantize_row_q8(&w, &mut [0; 3]),
        Err(RecipeError::LengthMismatch { .. })
    ));
    assert!(matches!(
        quantize_row_q4(&w, &mut [0; 3]),
        Err(RecipeError::LengthMismatch { .. })
    ));
    assert!(matches!(
        QuantizedMatrix::quantize(usize::MAX, 2, &w),
        Err(RecipeError::ShapeOverflow { .. })
    ));
}

#[test]
fn the_first_out_of_range_code_is_found() {
    use qlinear_quant_recipe::find_code_out_of_range;
    assert_eq!(find_code_out_of_range(&[]), None);
    assert_eq!(find_code_out_of_range(&[0, 127, -127, 5]), None);
    assert_eq!(find_code_out_of_range(&[3, -128, 0, -128]), Some(1));
    let mut long = vec![1i8; 1 << 20];
    long[(1 << 20) - 1] = i8::MIN;
    assert_eq!(find_code_out_of_range(&long), Some((1 << 20) - 1));
    // the first of several, at and around the search's 4 KiB blocks' edges
    for first in [0, 4095, 4096, 4097, 8191, 12_288] {
        let mut codes = vec![-127i8; 16_384 + 3];
        for at in [first, first + 1, 16_386] {
            codes[at] = i8::MIN;
        }
        assert_eq!(find_code_out_of_range(&codes), Some(first), "first at {first}");
    }
}

#[test]
fn from_parts_validates() {
    assert!(matches!(
        QuantizedMatrix::from_parts(2, 2, vec![1, 2, -128, 4], vec![1.0, 1.0]),
        Err(RecipeError::Q8CodeOutOfRange { row: 1, col: 0 })
    ));
    assert!(matches!(
        QuantizedMatrix::from_parts(1, 2, vec![1, 2], vec![-1.0]),
        Err(RecipeError::InvalidScale { row: 0, .. })
    ));
    assert!(QuantizedMatrix::from_parts(1, 2, vec![1, 2], vec![f32::NAN]).is_err());
    assert!(QuantizedMatrix::from_parts(1, 2, vec![-127, 127], vec![0.5]).is_ok());
    // odd k: the biased pad must be 8; nibble 0 (code -8) is accepted elsewhere.
    assert!(QuantizedMatrixQ4::from_parts_biased(1, 3, vec![0x00, 0x80], Q4Scales::PerChannel(vec![1.0])).is_ok());
    assert!(matches!(
        QuantizedMatrixQ4::from_parts_biased(1, 3, vec![0x00, 0x00], Q4Scales::PerChannel(vec![1.0])),
        Err(RecipeError::BadPadNibble {
            row: 0,
            nibble: 0,
            expected: 8
        })
    ));
    assert!(matches!(
        QuantizedMatrixQ4::from_parts_twos_complement(1, 3, vec![0x00, 0x80], Q4Scales::PerChannel(vec![1.0])),
        Err(RecipeError::BadPadNibble {
            row: 0,
            nibble: 8,
            expected: 0
        })
    ));
    // a negative group scale is accepted (docs/NUMERICS.md §4) and keeps its
    // sign in the values; a non-finite one is refused, naming row and group
    let negative = Q4Scales::Grouped {
        group: 2,
        scales: vec![f16::ONE, f16::from_f32(-1.0)],
    };
    let m = QuantizedMatrixQ4::from_parts_biased(1, 4, vec![0x91, 0x0F], negative).unwrap();
    assert_eq!(m.dequantize(), vec![-7.0, 1.0, -7.0, 8.0]);
    let nan = Q4Scales::Grouped {
        group: 2,
        scales: vec![f16::ONE, f16::from_bits(0xFE00)],
    };
    assert!(matches!(
        QuantizedMatrixQ4::from_parts_biased(1, 4, vec![0; 2], nan),
        Err(RecipeError::InvalidScale { row: 0, group: 1, .. })
    ));
    let neg_inf = Q4Scales::Grouped {
        group: 2,
        scales: vec![f16::NEG_INFINITY, f16::ONE],
    };
    assert!(matches!(
        QuantizedMatrixQ4::from_parts_biased(1, 4, vec![0; 2], neg_inf),
        Err(RecipeError::InvalidScale { row: 0, group: 0, .. })
    ));
    let inf = Q4Scales::Grouped {
        group: 2,
        scales: vec![f16::INFINITY, f16::ONE],
    };
    assert!(QuantizedMatrixQ4::from_parts_biased(1, 4, vec![0; 2], inf).is_err());
}

#[test]
fn every_f16_group_scale_is_accepted_exactly_when_finite() {
    for bits in 0..=u16::MAX {
        let s = f16::from_bits(bits);
        let scales = Q4Scales::Grouped {
            group: 2,
            scales: vec![s],
        };
        let accepted = QuantizedMatrixQ4::from_parts_biased(1, 2, vec![0x88], scales).is_ok();
        assert_eq!(accepted, s.is_finite(), "f16 bits {bits:#06x}");
    }
}

/// A weight's code bytes, and the same weight reading them in place from a
/// shared buffer: equal, refused past the buffer's end, and checked as the
/// constructors check (a -128 among Q8 codes).
#[test]
fn a_weight_reads_its_codes_from_a_shared_buffer() {
    let w: Vec<f32> = (0..6 * 10).map(|i| (i as f32 * 0.37).sin()).collect();
    for scheme in [QScheme::Q8, QScheme::Q4, QScheme::Q4Grouped(2)] {
        let q = QuantizedWeight::quantize(scheme, 6, 10, &w).unwrap();
        let len = if scheme == QScheme::Q8 { 60 } else { 30 };
        assert_eq!((q.code_len(), q.code_bytes().len()), (len, len), "{scheme}");
        let mut bytes = vec![0u8; 3];
        bytes.extend_from_slice(q.code_bytes());
        let buffer: SharedBuffer = std::sync::Arc::new(bytes.clone());
        let shared = q.with_shared_codes(buffer.clone(), 3).unwrap();
        assert!(shared.codes_shared() && !q.codes_shared(), "{scheme}");
        assert_eq!(shared, q, "{scheme}");
        assert_eq!(
            shared.code_bytes().as_ptr(),
            (*buffer).as_ref()[3..].as_ptr(),
            "{scheme} in place"
        );
        assert_eq!(
            q.with_shared_codes(buffer, 4).unwrap_err(),
            RecipeError::LengthMismatch {
                what: "shared code bytes (the end of the range against the buffer)",
                expected: len + 3,
                actual: len + 4,
            },
            "{scheme}"
        );
        if scheme == QScheme::Q8 {
            bytes[3 + 13] = 0x80; // -128: row 1, column 3
            let e = q.with_shared_codes(std::sync::Arc::new(bytes), 3).unwrap_err();
            assert_eq!(e, RecipeError::Q8CodeOutOfRange { row: 1, col: 3 });
        }
    }
}
