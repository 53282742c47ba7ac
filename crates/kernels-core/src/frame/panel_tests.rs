//! The panel form's packing and the panel sweep against the natural
//! layout's reference, bit for bit.

use half::f16;
use qlinear_quant_recipe::{GroupSize, Q4Scales, QuantizedMatrixQ4, SharedBuffer};

use super::*;
use crate::abi::pairing::{repair, unpair};
use crate::reference::group_sums::activation_group_sums;
use crate::reference::int::{gemm_w4a8, gemm_w4a8_grouped};
use crate::reference::panel::{tile_panel_per_channel_scalar, tile_panel_scalar};
use crate::scalar::{gemm_w4a8_grouped_panels_scalar, gemm_w4a8_panels_scalar};

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
fn arranging_in_place_gives_the_panel_form_that_new_copies() {
    use qlinear_quant_recipe::Codes;
    for w in [matrix(48, 96, 3), per_channel_matrix(32, 64, 4), matrix(16, 0, 1)] {
        let made = PanelsQ4::new(&w).unwrap();
        let mut bytes = w.packed().to_vec();
        assert!(crate::abi::panel::arrange_in_place(w.n(), w.k(), &mut bytes));
        assert_eq!(bytes, made.codes());
        let arranged = PanelsQ4::from_arranged(w.n(), w.k(), Codes::owned(bytes), w.scales()).unwrap();
        assert_eq!(arranged, made);
        // the natural scales are checked against the shape
        assert!(PanelsQ4::from_arranged(w.n() - 16, w.k(), Codes::owned(vec![0; 1]), w.scales()).is_none());
    }
}

/// Scales arranged where they lie (a file's f16 bytes) give the panel form
/// that copies them, read in place; bytes off a 2-byte boundary are decoded
/// instead, and shapes and values that the copying form refuses are refused.
#[test]
fn scales_arranged_in_place_are_read_where_they_lie() {
    use crate::abi::panel::{arrange_in_place, arrange_scales_in_place};
    use qlinear_quant_recipe::Codes;
    for w in [matrix(48, 96, 5), matrix(16, 32, 6), matrix(16, 0, 1)] {
        let (n, k) = (w.n(), w.k());
        let made = PanelsQ4::new(&w).unwrap();
        let Q4Scales::Grouped { scales, .. } = w.scales() else {
            unreachable!()
        };
        let mut codes = w.packed().to_vec();
        assert!(arrange_in_place(n, k, &mut codes));
        // the scales at offset 1 and 2 of one buffer: off and on a 2-byte boundary
        for offset in [1, 2] {
            let mut file = vec![0xEE; offset];
            file.extend(scales.iter().flat_map(|s| s.to_le_bytes()));
            assert!(arrange_scales_in_place(n, k, &mut file[offset..]));
            let buffer: SharedBuffer = std::sync::Arc::new(file);
            let bytes = Codes::shared(buffer.clone(), offset..(*buffer).as_ref().len()).unwrap();
            let p = PanelsQ4::from_arranged_scales(n, k, Codes::owned(codes.clone()), bytes).unwrap();
            assert_eq!(p, made, "[{n}, {k}] at offset {offset}");
            assert_eq!(p.to_matrix(), w);
            let aligned = ((*buffer).as_ref().as_ptr() as usize + offset).is_multiple_of(2);
            if k > 0 {
                assert_eq!(p.scales_shared(), aligned && cfg!(target_endian = "little"));
            }
            assert_eq!(p.to_scales(), made.to_scales());
            // copying the codes elsewhere (packing) copies the scales too
            let packed = p.with_shared_codes(std::sync::Arc::new(codes.clone()), 0).unwrap();
            assert!(!packed.scales_shared());
            assert_eq!(packed, made);
        }
    }
    // a wrong length, a shape with no panel form: refused, bytes untouched
    let mut bytes = vec![7u8; 2 * 16 * 3 - 2];
    assert!(!arrange_scales_in_place(16, 96, &mut bytes));
    assert!(!arrange_scales_in_place(8, 96, &mut [7u8; 2 * 8 * 3]));
    assert_eq!(bytes, vec![7u8; 2 * 16 * 3 - 2]);
    let codes = || Codes::owned(vec![0x88; 16 * 16]);
    let scale_bytes = |v: f16| Codes::owned(v.to_le_bytes().repeat(16));
    assert!(PanelsQ4::from_arranged_scales(16, 32, codes(), scale_bytes(f16::ONE)).is_some());
    assert!(PanelsQ4::from_arranged_scales(16, 32, codes(), scale_bytes(f16::INFINITY)).is_none());
    assert!(PanelsQ4::from_arranged_scales(16, 32, codes(), scale_bytes(f16::NAN)).is_none());
    assert!(PanelsQ4::from_arranged_scales(16, 64, codes(), scale_bytes(f16::ONE)).is_none());
    assert!(PanelsQ4::from_arranged_scales(16, 32, Codes::owned(vec![0; 3]), scale_bytes(f16::ONE)).is_none());
}

#[test]
fn arranging_refuses_a_shape_without_a_panel_form_and_leaves_the_bytes() {
    use crate::abi::panel::arrange_in_place;
    let original: Vec<u8> = (0..=255u8).cycle().take(24 * 16).collect();
    for (n, k, len) in [
        (24, 32, 24 * 16),
        (16, 48, 16 * 24),
        (0, 32, 0),
        (16, 32, 16 * 16 - 1),
        (16, 32, 16 * 16 + 1),
    ] {
        let mut bytes = original[..len.min(original.len())].to_vec();
        bytes.resize(len, 7);
        let before = bytes.clone();
        assert!(!arrange_in_place(n, k, &mut bytes), "{n} x {k}, {len} bytes");
        assert_eq!(bytes, before);
    }
}

#[test]
fn a_row_of_the_panel_form_is_the_natural_row() {
    for w in [matrix(32, 64, 6), per_channel_matrix(32, 64, 7)] {
        let p = PanelsQ4::new(&w).unwrap();
        let natural = w.dequantize();
        for r in 0..w.n() {
            let row = p.row(r).unwrap();
            assert_eq!(row.row_packed(0), w.row_packed(r), "row {r}");
            assert_eq!(row.dequantize(), &natural[r * w.k()..(r + 1) * w.k()], "row {r}");
        }
        assert!(p.row(w.n()).is_none());
    }
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
    // the shifts against the definition, nibble by nibble, on a million
    // words (every nibble value in every position many times over)
    let mut v = 0x2545_F491u32;
    for _ in 0..1 << 20 {
        v ^= v << 13;
        v ^= v >> 17;
        v ^= v << 5;
        let natural = v.to_le_bytes();
        let nibble = |col: usize| (natural[col / 2] >> (4 * (col % 2))) & 0x0F;
        let want: [u8; 4] = std::array::from_fn(|j| nibble(j) | nibble(j + 4) << 4);
        assert_eq!(repair(natural), want, "{v:#010x}");
        assert_eq!(unpair(want), natural, "{v:#010x}");
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
        QuantizedMatrixQ4::from_parts_biased(n, k, vec![0x88; n * k / 2], Q4Scales::PerChannel(vec![1.0; n])).unwrap()
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
    let refused = |s: Vec<f32>| PanelsQ4::from_panel_parts(48, 96, codes.clone(), Q4Scales::PerChannel(s)).is_none();
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
        // decode over a range inside one panel (no whole panel: no inner
        // panels to write in place) and over ranges ending mid-panel
        (1, 48, 64, 35..40),
        (1, 48, 64, 3..13),
        (1, 48, 64, 5..40),
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
