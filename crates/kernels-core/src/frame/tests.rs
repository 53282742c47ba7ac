//! The frame's sweep, views and layouts against the reference, by hand
//! and at random.

use super::*;
use crate::abi::rows::LayoutCache;
use crate::reference::float::scales_to_f32;

const TILES: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(2, 4), Tile::new(1, 4)];

#[test]
fn a_tiles_row_views_are_its_rows_and_may_reach_into_the_next() {
    let base: Vec<u8> = (0..40).collect();
    let mut views = Views::new();
    // rows 2..5 of stride 8, cut to 6 elements
    let v = views.set_rows(&base, 2, 3, 8, 6);
    assert_eq!(v, [&base[16..22], &base[24..30], &base[32..38]]);
    // cut past the stride: each view runs on into the next row
    let v = views.set_rows(&base, 1, 2, 8, 12);
    assert_eq!(v, [&base[8..20], &base[16..28]]);
    assert!(views.set_rows(&base, 4, 0, 8, 8).is_empty());
    // the last view may end exactly at the end
    assert_eq!(views.set_rows(&base, 3, 2, 8, 8)[1], &base[32..40]);
}

#[test]
fn next_rows_moves_the_views_on_by_their_rows_and_stops_at_the_end() {
    let base: Vec<u8> = (0..64).collect();
    let other: Vec<u8> = (0..64).collect();
    let mut views = Views::new();
    // rows 0..2 of stride 8, cut to 10 (running on into the next row)
    views.set_rows(&base, 0, 2, 8, 10);
    for r0 in [2, 4] {
        let want: Vec<&[u8]> = (r0..r0 + 2).map(|r| &base[8 * r..8 * r + 10]).collect();
        assert_eq!(views.next_rows(&base, 2).map(<[_]>::to_vec), Some(want), "rows {r0}..");
    }
    // rows 6 and 7 would end at 7 · 8 + 10 = 66 > 64
    assert!(views.next_rows(&base, 2).is_none());
    // only after set_rows on the same slice, for the same number of rows
    views.set_rows(&base, 0, 2, 8, 8);
    assert!(views.next_rows(&other, 2).is_none());
    assert!(views.next_rows(&base, 1).is_none());
    assert!(views.next_rows(&base[..56], 2).is_none());
    views.set(2, |d| &base[d..d + 1]);
    assert!(views.next_rows(&base, 2).is_none());
    // a view that ends exactly at the end is allowed
    views.set_rows(&base, 4, 2, 8, 8);
    assert_eq!(views.next_rows(&base, 2), Some(&[&base[48..56], &base[56..64]][..]));
}

// WASI builds abort on a panic, so the refusals run natively only
#[test]
#[should_panic(expected = "out of range")]
#[cfg_attr(target_os = "wasi", ignore)]
fn a_view_past_the_base_panics() {
    let base = [0u8; 40];
    Views::new().set_rows(&base, 3, 2, 8, 9);
}

#[test]
#[should_panic(expected = "overflow")]
#[cfg_attr(target_os = "wasi", ignore)]
fn an_overflowing_span_panics() {
    Views::<u8>::new().set_rows(&[], usize::MAX, 2, 8, 1);
}

#[test]
fn sweep_covers_every_pair_once() {
    let shapes = Shapes { tiles: TILES, chunk: 8 };
    shapes.validate().unwrap();
    for m in 0..11 {
        for (start, end) in [(0, 0), (0, 1), (3, 22), (5, 9)] {
            let mut seen = vec![0u32; m * 30];
            shapes.sweep(m, start..end, |t, r0, i0| {
                assert!(TILES.contains(&t));
                assert!(r0 + t.wr <= end && i0 + t.xr <= m);
                // a tile never straddles a chunk
                assert_eq!((r0 - start) / 8, (r0 + t.wr - 1 - start) / 8);
                for d in 0..t.xr {
                    for q in 0..t.wr {
                        seen[(i0 + d) * 30 + r0 + q] += 1;
                    }
                }
            });
            for i in 0..m {
                for r in 0..30 {
                    assert_eq!(seen[i * 30 + r], u32::from((start..end).contains(&r)), "m {m} row {r}");
                }
            }
        }
    }
}

#[test]
fn sweep_prefers_the_largest_tiles() {
    let shapes = Shapes { tiles: TILES, chunk: 0 };
    let mut used = Vec::new();
    shapes.sweep(5, 0..5, |t, r0, i0| used.push((t, r0, i0)));
    assert_eq!(
        used,
        [
            (Tile::new(2, 4), 0, 0),
            (Tile::new(2, 4), 2, 0),
            (Tile::new(1, 4), 4, 0),
            (Tile::new(4, 1), 0, 4),
            (Tile::ONE, 4, 4),
        ]
    );
}

#[test]
fn validation_names_what_is_missing() {
    const NO_ONE: &[Tile] = &[Tile::new(4, 1)];
    const NO_LEFTOVER: &[Tile] = &[Tile::ONE, Tile::new(2, 4)];
    const TOO_BIG: &[Tile] = &[Tile::ONE, Tile::new(17, 1)];
    let shapes = |tiles| Shapes { tiles, chunk: 0 };
    assert_eq!(shapes(NO_ONE).validate().unwrap_err(), "no 1×1 tile");
    assert!(shapes(NO_LEFTOVER).validate().unwrap_err().contains("no 1×4 tile"));
    assert!(shapes(TOO_BIG).validate().unwrap_err().contains("17×1"));
}

/// The (activation, weight) lengths each call of [`tile_q4_recorded`]
/// received (one test uses it).
static TILE_LENS: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());

/// `Σ x·b` per pair of rows in natural order (the `Aligned` layout),
/// recording the lengths it was handed.
fn tile_q4_recorded(x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]) {
    TILE_LENS.lock().unwrap().push((x[0].len(), w[0].len()));
    for (i, xr) in x.iter().enumerate() {
        for (q, wr) in w.iter().enumerate() {
            acc[i * w.len() + q] = dot_i8_q4_biased(xr, wr);
        }
    }
}

#[test]
fn q4_tiles_read_the_padded_block_where_the_weight_rows_reach_it() {
    // K = 40 in blocks of 32: kb = 32, kp = 64; rows of 20 packed bytes,
    // so a row cut to 32 bytes runs 12 into the next row's codes
    let (n, k) = (9, 40);
    let wf: Vec<f32> = (0..n * k).map(|i| ((i * 37 % 29) as f32 - 14.0) / 7.0).collect();
    let w = QuantizedMatrixQ4::quantize(n, k, qlinear_quant_recipe::GroupSize::PerChannel, &wf).unwrap();
    let codes: Vec<i8> = (0..k).map(|c| ((c * 53 % 255) as i32 - 127) as i8).collect();
    let sum = codes.iter().map(|&c| i32::from(c)).sum::<i32>();
    let sums = [sum];
    let x = ActivationsQ8::new(1, k, &codes, &[0.5], &sums, k).unwrap();
    const FAMILY: Family<TileI8Q4> = Family {
        shapes: Shapes {
            tiles: &[Tile::ONE, Tile::new(4, 1)],
            chunk: 4,
        },
        kernels: &[tile_q4_recorded, tile_q4_recorded],
        block: 32,
        layout: Layout::Aligned,
        scales_to_f32,
    };
    let (mut got, mut want) = (vec![0f32; n], vec![0f32; n]);
    let mut y = OutputTile::new(&mut got, n);
    gemm_w4a8(&FAMILY, &x, &w, 0..n, &mut y);
    let mut y = OutputTile::new(&mut want, n);
    crate::reference::int::gemm_w4a8(&x, &w, 0..n, &mut y);
    assert_eq!(
        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    // rows 0..4 and 4..8 end inside the codes (7 · 20 + 32 <= 180); the
    // tile holding row 8 takes the whole block, then the padded block alone
    // against a copy of row 8's tail
    assert_eq!(*TILE_LENS.lock().unwrap(), [(64, 32), (64, 32), (32, 16), (32, 16)]);
}

#[test]
fn a_tiles_tail_rows_are_copies_cut_or_filled_to_the_padded_block() {
    // K = 40 in blocks of 32: rows of 20 bytes, of which 4 lie past the
    // whole blocks; the padded block is 16 bytes a row
    let (n, k) = (3, 40);
    let wf: Vec<f32> = (0..n * k).map(|i| ((i * 11 % 17) as f32 - 8.0) / 3.0).collect();
    let w = QuantizedMatrixQ4::quantize(n, k, qlinear_quant_recipe::GroupSize::PerChannel, &wf).unwrap();
    let codes = vec![1i8; k];
    let x = ActivationsQ8::new(1, k, &codes, &[1.0], &[40], k).unwrap();
    let xs = IntRows::copied(&x, 32, Layout::Aligned, Vec::new());
    let reach = PaddedReach::new(&xs, &w);
    let (mut scratch, mut views) = (Vec::new(), Views::new());
    let rows = reach.tail_rows(&mut scratch, &mut views, 1, 2);
    assert_eq!(rows.len(), 2);
    for (q, row) in rows.iter().enumerate() {
        assert_eq!(row.len(), 16);
        assert_eq!(&row[..4], &w.row_packed(1 + q)[16..20]);
        assert!(row[4..].iter().all(|&b| b == 0), "row {q} filled with zeros");
    }
    // the activations' padded block alone: columns 32..40, then zeros
    let tail = xs.tail_view(1, 0, 0);
    assert_eq!(tail.len(), 32);
    assert!(tail[..8].iter().all(|&c| c == 1) && tail[8..].iter().all(|&c| c == 0));
}

#[test]
fn paired_layouts_put_each_row_beside_the_next() {
    // two rows of 40 codes (k = 40, blocks of 16: kb = 32), code = 50·row + column
    let codes: Vec<i8> = (0..2).flat_map(|r| (0..40).map(move |c| (r * 50 + c) as i8)).collect();
    let x = ActivationsQ8::new(2, 40, &codes, &[1.0, 1.0], &[0, 0], 40).unwrap();
    let v = |r: i8, cols: &[i8]| -> Vec<i8> { cols.iter().map(|&c| r * 50 + c).collect() };
    let seq = |from: i8, step: i8| -> Vec<i8> { (0..8).map(|j| from + step * j).collect() };
    let natural = IntRows::new(&x, 16, Layout::Pairs8);
    let even_odd = IntRows::new(&x, 16, Layout::Pairs8EvenOdd);
    let mut want_natural = Vec::new();
    let mut want_even_odd = Vec::new();
    for c in [0i8, 16] {
        for (cols_n, cols_e) in [(seq(c, 1), seq(c, 2)), (seq(c + 8, 1), seq(c + 1, 2))] {
            want_natural.extend(v(0, &cols_n));
            want_natural.extend(v(1, &cols_n));
            want_even_odd.extend(v(0, &cols_e));
            want_even_odd.extend(v(1, &cols_e));
        }
    }
    assert_eq!(natural.view(1, 0, 0, false), &want_natural[..]);
    assert_eq!(even_odd.view(1, 0, 0, false), &want_even_odd[..]);
    // the padded block: columns 32..40, then zeros to 48, beside the next row's
    let padded = natural.view(1, 0, 0, true);
    assert_eq!(padded.len(), 96);
    assert_eq!(&padded[..64], &want_natural[..]);
    assert_eq!(&padded[64..72], &v(0, &seq(32, 1))[..]);
    assert_eq!(&padded[72..80], &v(1, &seq(32, 1))[..]);
    assert!(padded[80..].iter().all(|&b| b == 0));
    // the last row is paired with zeros
    let last: Vec<i8> = even_odd
        .view(1, 1, 0, false)
        .chunks(8)
        .skip(1)
        .step_by(2)
        .flatten()
        .copied()
        .collect();
    assert!(last.iter().all(|&b| b == 0) && last.len() == 32);
    assert_eq!(&even_odd.view(1, 1, 0, false)[..8], &v(1, &seq(0, 2))[..]);
}

#[test]
fn paired_layouts_match_their_definition_at_every_shape() {
    // byte `at` of row i's padded view, from the layouts' definitions: per
    // 16 columns (32 bytes), Pairs8 holds row i's first 8, the next row's
    // first 8, row i's last 8 and the next row's last 8; Pairs8EvenOdd the
    // same with the 8 even columns in place of the first 8 and the 8 odd in
    // place of the last; past k, and past the last row, zeros
    let code = |r: usize, c: usize| (((7 * r + 3 * c) % 251) as i32 - 125) as i8;
    for m in 1..=4 {
        for k in [16, 24, 32, 40, 56, 64, 72] {
            let codes: Vec<i8> = (0..m).flat_map(|r| (0..k).map(move |c| code(r, c))).collect();
            let (scales, sums) = (vec![1.0; m], vec![0; m]);
            let x = ActivationsQ8::new(m, k, &codes, &scales, &sums, k).unwrap();
            for (layout, even_odd) in [(Layout::Pairs8, false), (Layout::Pairs8EvenOdd, true)] {
                let rows = IntRows::new(&x, 16, layout);
                for i in 0..m {
                    let view = rows.view(1, i, 0, true);
                    assert_eq!(view.len(), 2 * k.div_ceil(16) * 16, "{layout:?} m {m} k {k}");
                    for (at, &got) in view.iter().enumerate() {
                        let (block, place) = (at / 32, at % 32);
                        let (half, next) = (place / 16, place % 16 >= 8);
                        let j = place % 8;
                        let col = 16 * block + if even_odd { 2 * j + half } else { 8 * half + j };
                        let r = i + usize::from(next);
                        let want = if r < m && col < k { code(r, col) } else { 0 };
                        assert_eq!(got, want, "{layout:?} m {m} k {k} row {i} byte {at}");
                    }
                }
            }
        }
    }
}

#[test]
fn quads16_interleave_16_rows_per_4_bytes_with_the_sign_flipped() {
    // 17 rows of 130 codes (blocks of 128: kb = 128), code = row + 3·column
    let (m, k) = (17, 130);
    let code = |r: usize, c: usize| ((r + 3 * c) % 251) as i8;
    let codes: Vec<i8> = (0..m).flat_map(|r| (0..k).map(move |c| code(r, c))).collect();
    let x = ActivationsQ8::new(m, k, &codes, &[1.0; 17], &[0; 17], k).unwrap();
    let xs = IntRows::new(&x, 128, Layout::EvenOddQuads16);
    // the even/odd rows, 64-byte aligned, for tiles under 16 rows
    for i in [0, 16] {
        let row = xs.view(4, i.min(13), i - i.min(13), false);
        assert_eq!(row.as_ptr().align_offset(64), 0);
        let want: Vec<i8> = (0..64)
            .map(|j| code(i, 2 * j))
            .chain((0..64).map(|j| code(i, 2 * j + 1)))
            .collect();
        assert_eq!(row, &want[..]);
        // the padded block: columns 128 and 129 split even/odd, zeros elsewhere
        let padded = xs.view(4, i.min(13), i - i.min(13), true);
        assert_eq!(padded.len(), 256);
        assert_eq!(&padded[..128], &want[..]);
        for (j, &b) in padded[128..].iter().enumerate() {
            let want = match j {
                0 => code(i, 128),
                64 => code(i, 129),
                _ => 0,
            };
            assert_eq!(b, want, "row {i} padded byte {j}");
        }
    }
    // a 16-row tile: every view is the block of rows 0..16
    let block = xs.view(16, 0, 5, false);
    assert_eq!(block.len(), 16 * 128);
    assert_eq!(xs.view(16, 0, 5, true).len(), 16 * 256);
    assert_eq!(block.as_ptr().align_offset(64), 0);
    for l in 0..16 {
        for j in 0..128 {
            let even_odd = if j < 64 {
                code(l, 2 * j)
            } else {
                code(l, 2 * (j - 64) + 1)
            };
            assert_eq!(
                block[64 * (j / 4) + 4 * l + j % 4],
                even_odd ^ i8::MIN,
                "row {l} byte {j}"
            );
        }
    }
}

#[test]
fn proof_calls_reach_every_tile_and_leftover() {
    // TILES: 1×1, 4×1, 2×4, 1×4; the 4-row tiles' 2 × 2 + 1 weight rows
    // do not reach the 4 × 1 tile twice, so xr = 1 has a call of its own
    let shapes = Shapes { tiles: TILES, chunk: 8 };
    assert_eq!(shapes.proof_calls(false), [(11, 5), (1, 11)]);
    assert_eq!(shapes.proof_calls(true), [(11, 13), (1, 19)]);
    assert_eq!(Shapes::SINGLE.proof_calls(true), [(3, 3)]);
    const WIDE: &[Tile] = &[Tile::ONE, Tile::new(16, 1), Tile::new(16, 4), Tile::new(1, 4)];
    let wide = Shapes { tiles: WIDE, chunk: 16 };
    assert_eq!(wide.proof_calls(false), [(11, 47)]);
    // every tile runs at least twice
    let mut used = std::collections::HashMap::new();
    for (m, n) in shapes.proof_calls(false) {
        shapes.sweep(m, 0..n, |t, _, _| *used.entry(t).or_insert(0) += 1);
    }
    assert!(TILES.iter().all(|t| used.get(t).copied().unwrap_or(0) >= 2), "{used:?}");
}

#[test]
fn tail_proof_calls_run_every_tile_once() {
    // TILES: 1×1, 4×1, 2×4, 1×4
    let shapes = Shapes { tiles: TILES, chunk: 8 };
    assert_eq!(shapes.tail_proof_calls(), [(1, 7), (4, 3)]);
    assert_eq!(Shapes::SINGLE.tail_proof_calls(), [(1, 1)]);
    let mut used = std::collections::HashSet::new();
    for (m, n) in shapes.tail_proof_calls() {
        shapes.sweep(m, 0..n, |t, _, _| {
            used.insert(t);
        });
    }
    assert_eq!(used.len(), TILES.len(), "{used:?}");
}

/// `quads_in_turn` stores quad `p`'s sum for activation row `i` and weight
/// row `q` at `acc[i · 4·QUADS + 4p + q]`.
#[test]
fn quads_in_turn_stores_each_quad_at_its_rows_columns() {
    // a 4 × 4 "tile" whose sum names its activation row and weight row
    let tile = |x: &[&[i8]], w: &[&[u8]], acc: &mut [i32]| {
        for (i, xr) in x.iter().enumerate() {
            for (q, wr) in w.iter().enumerate() {
                acc[i * 4 + q] = 1000 * i32::from(xr[0]) + i32::from(wr[0]);
            }
        }
    };
    let xs: Vec<[i8; 1]> = (0..4).map(|i| [i as i8]).collect();
    let ws: Vec<[u8; 1]> = (0..12).map(|r| [r as u8]).collect();
    let x: Vec<&[i8]> = xs.iter().map(|r| &r[..]).collect();
    let w: Vec<&[u8]> = ws.iter().map(|r| &r[..]).collect();
    let mut acc = [0i32; 48];
    super::quads_in_turn::<3>(&x, &w, &mut acc, tile);
    for i in 0..4 {
        for r in 0..12 {
            assert_eq!(acc[i * 12 + r], 1000 * i as i32 + r as i32, "row {i}, weight row {r}");
        }
    }
}

#[test]
#[should_panic(expected = "assertion failed")]
#[cfg_attr(target_os = "wasi", ignore)]
fn quads_in_turn_refuses_rows_that_are_not_its_quads() {
    let x: [&[i8]; 4] = [&[0], &[0], &[0], &[0]];
    let w: [&[u8]; 12] = [&[0]; 12];
    let mut acc = [0i32; 32];
    super::quads_in_turn::<2>(&x, &w, &mut acc, |_, _, _| {});
}

#[test]
fn one_activation_step_sweeps_its_chunks_tiles_as_one_range() {
    // m = 1..3 take one step of 1-row tiles (4 × 1 the widest), which
    // divides the chunk of 8: the range is swept whole, with the tiles the
    // chunks would have given
    const DECODE: &[Tile] = &[Tile::ONE, Tile::new(4, 1), Tile::new(2, 4), Tile::new(1, 4)];
    for (chunk, rows) in [(8, 0..30), (8, 3..22), (4, 5..9), (12, 0..40)] {
        let shapes = Shapes { tiles: DECODE, chunk };
        let whole = Shapes {
            tiles: DECODE,
            chunk: 0,
        };
        let mut got = Vec::new();
        shapes.sweep(1, rows.clone(), |t, r0, i0| got.push((t, r0, i0)));
        let mut want = Vec::new();
        for c0 in rows.clone().step_by(chunk) {
            whole.sweep(1, c0..(c0 + chunk).min(rows.end), |t, r0, i0| want.push((t, r0, i0)));
        }
        assert_eq!(got, want, "chunk {chunk} rows {rows:?}");
    }
    // a chunk the widest tile does not divide keeps its chunks
    let shapes = Shapes {
        tiles: DECODE,
        chunk: 6,
    };
    let mut got = Vec::new();
    shapes.sweep(1, 0..12, |t, r0, _| got.push((t.wr, r0)));
    assert_eq!(got, [(4, 0), (1, 4), (1, 5), (4, 6), (1, 10), (1, 11)]);
}

#[test]
fn activation_views_are_remade_only_for_other_rows() {
    let rows: Vec<Vec<i8>> = (0..4).map(|i| vec![i as i8; 8]).collect();
    let made = std::cell::Cell::new(0);
    let mut views = Views::new();
    let mut set = |key: ViewKey| {
        let v: Vec<Vec<i8>> = views
            .set_for(key, |d| {
                made.set(made.get() + 1);
                &rows[key.0 + d][..if key.2 { 8 } else { 4 }]
            })
            .iter()
            .map(|r| r.to_vec())
            .collect();
        v
    };
    assert_eq!(set((1, 2, false)), [vec![1; 4], vec![2; 4]]);
    assert_eq!(made.get(), 2);
    // the same rows again: nothing remade
    assert_eq!(set((1, 2, false)), [vec![1; 4], vec![2; 4]]);
    assert_eq!(made.get(), 2);
    // other rows, another height, the padded reach: each remade
    assert_eq!(set((2, 2, false)), [vec![2; 4], vec![3; 4]]);
    assert_eq!(set((2, 1, false)), [vec![2; 4]]);
    assert_eq!(set((2, 1, true)), [vec![2; 8]]);
    assert_eq!(made.get(), 6);
}

#[test]
fn a_run_adds_the_bias_four_at_a_time_and_the_rest_one_by_one() {
    for width in [1, 4, 7, 16] {
        let bias: Vec<f32> = (0..width).map(|j| j as f32 * 0.5 - 3.0).collect();
        let values: Vec<f32> = (0..width).map(|j| 1.0 / (j as f32 + 1.0)).collect();
        let (mut run, mut one) = (vec![9f32; 2 * width], vec![9f32; 2 * width]);
        let mut y = OutputTile::new(&mut run, width);
        y.bias = &bias;
        y.set_run(1, 0, &values);
        let mut y = OutputTile::new(&mut one, width);
        y.bias = &bias;
        for (j, &v) in values.iter().enumerate() {
            y.set(1, j, v);
        }
        assert_eq!(run, one, "width {width}");
        // row 0 untouched; output 0 of row 1 is 1 / 1 + (−3)
        assert!(run[..width].iter().all(|&v| v == 9.0) && run[width] == -2.0);
    }
}

#[test]
fn an_array_run_is_stored_as_one_value_at_a_time_with_and_without_bias() {
    let bias: Vec<f32> = (0..20).map(|j| j as f32 * 0.5 - 3.0).collect();
    let values: [f32; 16] = std::array::from_fn(|j| 1.0 / (j as f32 + 1.0));
    for with_bias in [false, true] {
        // 16 outputs from feature 3 of row 1, in rows of 20
        let (mut array, mut one) = (vec![9f32; 40], vec![9f32; 40]);
        let mut y = OutputTile::new(&mut array, 20);
        if with_bias {
            y.bias = &bias;
        }
        y.set_array(1, 3, &values);
        let mut y = OutputTile::new(&mut one, 20);
        if with_bias {
            y.bias = &bias;
        }
        for (j, &v) in values.iter().enumerate() {
            y.set(1, 3 + j, v);
        }
        assert_eq!(array, one, "bias {with_bias}");
        assert_eq!(array[23], if with_bias { 1.0 + bias[3] } else { 1.0 });
        assert!(array[..23].iter().chain(&array[39..]).all(|&v| v == 9.0));
    }
}

#[test]
fn a_cache_writes_its_rows_into_the_buffer_it_was_given_and_hands_it_back() {
    // K = 40 in blocks of 32 (a padded block past the codes), 3 rows: the
    // rows laid out in a given, dirty allocation are those laid out fresh,
    // zeros in the padding included, and the allocation comes back
    let (m, k) = (3, 40);
    let codes: Vec<i8> = (0..m * k).map(|i| (i as i32 * 7 % 255 - 127) as i8).collect();
    let x = ActivationsQ8::new(m, k, &codes, &[1.0; 3], &[0; 3], k).unwrap();
    let dirty = vec![0x55i8; 4096];
    let at = dirty.as_ptr();
    let cache = LayoutCache::with_buffer(dirty);
    let fresh = IntRows::copied(&x, 32, Layout::Aligned, Vec::new());
    {
        let x = x.with_layouts(&cache);
        let view = IntView::of(&x, 32, Layout::Aligned);
        let rows = view.rows();
        for i in 0..m {
            assert_eq!(rows.row(i), fresh.row(i), "row {i}");
            assert!(rows.row(i)[k..].iter().all(|&c| c == 0), "row {i}'s padding is zeros");
        }
    }
    let back = cache.into_buffer();
    assert_eq!(back.as_ptr(), at, "the same allocation");
    // a cache whose rows were never laid out hands back the buffer it got
    assert_eq!(LayoutCache::with_buffer(vec![1, 2, 3]).into_buffer(), vec![1, 2, 3]);
}
