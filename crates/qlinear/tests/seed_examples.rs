//! The seeds' hand examples and pitfalls (seed 001 section 5), each a test that
//! fails for its mutant, through the public facade.

use half::f16;
use qlinear::*;

/// Seed 001 section 3: W is 2×4, G = 2, codes `[1, -2 | 3, -8]`, `[7, 0 | -1, 4]`,
/// f16 scales 0x3800 0x4000 / 0x3C00 0x3400, on disk 0xE1 0x83 / 0x07 0x4F.
fn seed_q4_grouped() -> QuantizedMatrixQ4 {
    let scales = [0x3800u16, 0x4000, 0x3C00, 0x3400].map(f16::from_bits).to_vec();
    QuantizedMatrixQ4::from_parts_twos_complement(
        2,
        4,
        vec![0xE1, 0x83, 0x07, 0x4F],
        Q4Scales::Grouped { group: 2, scales },
    )
    .unwrap()
}

#[test]
fn hand_example_w4a16_grouped_is_exactly_minus_47_5_and_10_25() {
    let mut y = [0f32; 2];
    linear_w4a16(&[1.0, 2.0, 3.0, 4.0], 1, &seed_q4_grouped(), &mut y).unwrap();
    assert_eq!(y, [-47.5, 10.25]);
}

#[test]
fn q8_hand_example_w8a16_is_exactly_minus_13_and_5() {
    let w = QuantizedMatrix::from_parts(2, 4, vec![1, -2, 3, -8, 7, 0, -1, 4], vec![0.5, 0.25]).unwrap();
    let mut y = [0f32; 2];
    linear_w8a16(&[1.0, 2.0, 3.0, 4.0], 1, &w, &mut y).unwrap();
    assert_eq!(y, [-13.0, 5.0]);
}

/// The same example with int8 activation codes `[1, 2, 3, 4]` and scale 1:
/// by hand, W8A8 gives `acc = [1 - 4 + 9 - 32, 7 + 0 - 3 + 16] = [-26, 20]`,
/// times `1 · [0.5, 0.25]` = `[-13, 5]`; W4A8 grouped gives
/// `(0.5·(1 - 4) + 2·(9 - 32)) · 1 = -47.5` and `(1·7 + 0.25·13) · 1 = 10.25`.
#[test]
fn hand_example_integer_paths() {
    let w8 = QuantizedMatrix::from_parts(2, 4, vec![1, -2, 3, -8, 7, 0, -1, 4], vec![0.5, 0.25]).unwrap();
    let mut y = [0f32; 2];
    linear_q8(&[1, 2, 3, 4], &[1.0], 1, &w8, &mut y).unwrap();
    assert_eq!(y, [-13.0, 5.0]);
    linear_q4(&[1, 2, 3, 4], &[1.0], 1, &seed_q4_grouped(), &mut y).unwrap();
    assert_eq!(y, [-47.5, 10.25]);
    // x_scale 0.5 halves both: one multiply by x_scale after the group sum
    linear_q4(&[1, 2, 3, 4], &[0.5], 1, &seed_q4_grouped(), &mut y).unwrap();
    assert_eq!(y, [-23.75, 5.125]);
    // per channel: same codes, one f32 scale per row
    let (packed, _) = seed_q4_grouped().into_parts();
    let w4 = QuantizedMatrixQ4::from_parts_biased(2, 4, packed.clone(), Q4Scales::PerChannel(vec![0.5, 0.25])).unwrap();
    linear_q4(&[1, 2, 3, 4], &[1.0], 1, &w4, &mut y).unwrap();
    assert_eq!(y, [-13.0, 5.0]);
    assert_eq!(dot_i32(&[1, 2, 3, 4], &[1, -2, 3, -8]).unwrap(), -26);
    assert_eq!(dot_i32_q4(&[1, 2, 3, 4], &packed[..2]).unwrap(), -26);
    assert_eq!(dot_i32_q4(&[1, 2, 3, 4], &packed[2..]).unwrap(), 20);
}

/// Every nibble code in both positions decodes to 0..7, -8..-1 (pitfalls s01, s02).
#[test]
fn every_nibble_code_through_the_kernels() {
    for u in 0u8..16 {
        let code = if u < 8 { u as i32 } else { u as i32 - 16 }; // two's complement on disk
        for pos in 0..2 {
            let byte = if pos == 0 { u } else { u << 4 };
            let scales = Q4Scales::Grouped {
                group: 2,
                scales: vec![f16::ONE],
            };
            let w = QuantizedMatrixQ4::from_parts_twos_complement(1, 2, vec![byte], scales).unwrap();
            let x = if pos == 0 { [1.0, 0.0] } else { [0.0, 1.0] };
            let mut y = [f32::NAN];
            linear_w4a16(&x, 1, &w, &mut y).unwrap();
            assert_eq!(y[0], code as f32, "nibble {u:#x} in position {pos}");
            linear_q4(&[x[0] as i8, x[1] as i8], &[1.0], 1, &w, &mut y).unwrap();
            assert_eq!(y[0], code as f32, "W4A8 nibble {u:#x} in position {pos}");
        }
    }
}

/// f16 scale bits 0x0001 (2^-24) and 0x3555 decode as half precision, not bfloat16 (s05).
#[test]
fn f16_scales_decode_exactly() {
    for (bits, value) in [(0x0001u16, 2f32.powi(-24)), (0x3555, 0.333_251_95)] {
        let scales = Q4Scales::Grouped {
            group: 2,
            scales: vec![f16::from_bits(bits)],
        };
        let w = QuantizedMatrixQ4::from_parts_twos_complement(1, 2, vec![0x01], scales).unwrap();
        let mut y = [0f32];
        linear_w4a16(&[1.0, 0.0], 1, &w, &mut y).unwrap();
        assert_eq!(y[0], value);
    }
}

/// Row-specific scales (s03), per-group partial reset (s04) and the int8 scale
/// indexed by weight row (s07) are all caught by rows with distinct scales.
#[test]
fn scales_index_by_row_and_reset_per_group() {
    let w = seed_q4_grouped();
    let mut y = [0f32; 4];
    linear_w4a16(&[1.0, 2.0, 3.0, 4.0, 4.0, 3.0, 2.0, 1.0], 2, &w, &mut y).unwrap();
    // row 2 by hand: 0.5·(4 - 6) + 2·(6 - 8) = -5;  1·(28) + 0.25·(-2 + 4) = 28.5
    assert_eq!(y, [-47.5, 10.25, -5.0, 28.5]);
    let w8 = QuantizedMatrix::from_parts(2, 4, vec![1, -2, 3, -8, 7, 0, -1, 4], vec![0.5, 0.25]).unwrap();
    linear_q8(&[1, 2, 3, 4, 4, 3, 2, 1], &[1.0, 2.0], 2, &w8, &mut y).unwrap();
    // row 2: acc = [4 - 6 + 6 - 8, 28 + 0 - 2 + 4] = [-4, 30]; ·2 ·[0.5, 0.25]
    assert_eq!(y, [-13.0, 5.0, -4.0, 15.0]);
}

/// Every name the seeds' module documents list (int4: seed 000; int8: seed
/// 002) is at the top of the facade, with the seed's kind of item: the
/// bindings below fail to compile if one is missing or changes shape. The
/// two detection wrappers agree with the tiers they name and are false off
/// their architecture.
#[test]
fn every_seed_api_name_is_at_the_top_of_the_facade() {
    // seed 000, module int4
    let _: fn(&[i8], &[u8]) -> std::result::Result<i32, DispatchError> = dot_i32_q4;
    let _ = linear_q4;
    let _ = std::mem::size_of::<QuantizedMatrixQ4>();
    // seed 002, module int8
    let _ = (
        std::mem::size_of::<KernelPlanV0>(),
        std::mem::size_of::<QuantizedMatrix>(),
    );
    let _: (Option<Int8Tier>, Option<QuantLinearMode>) = (None, None);
    assert_eq!(Q8_MAX_ABS, 127);
    let _ = (autotuned_plan, dot_i32, linear_q8, linear_q8_dynamic, linear_w8a16);
    let _ = |mode, x: &[f32], m, w: &QuantizedMatrix, y: &mut [f32]| quant_linear(mode, x, m, w, y);
    let _ = (quant_mode_from_environment, quantize_row_q8);
    let sdot: fn() -> bool = neon_sdot_available;
    let simd128: fn() -> bool = wasm_simd128_available;
    assert_eq!(sdot(), Int8Tier::NeonSdot.is_available());
    assert_eq!(simd128(), Int8Tier::WasmSimd128.is_available());
    if cfg!(not(target_arch = "aarch64")) {
        assert!(!sdot(), "SDOT detected off aarch64");
    }
    if cfg!(not(target_arch = "wasm32")) {
        assert!(!simd128(), "SIMD128 detected off wasm32");
    }
}
