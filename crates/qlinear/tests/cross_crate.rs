//! The cross-crate byte-for-byte test: what the runtime computes on equals
//! what an artifact converter writes through `qlinear-quant-recipe` alone —
//! including every proven tier's activation quantizer — and what survives a
//! write-then-read through the formats crate.

use std::collections::HashMap;

use qlinear::format::*;
use qlinear::tiers::*;
use qlinear::*;

/// Converter's view: the recipe crate, row by row.
mod converter {
    pub use qlinear_quant_recipe::{quantize_row_q4, quantize_row_q4_grouped, quantize_row_q8};
}

fn battery() -> Vec<(usize, usize, Vec<f32>)> {
    let mut v = vec![];
    for (n, k) in [(1, 1), (3, 7), (4, 64), (5, 66), (2, 129), (7, 256)] {
        let mut s = (n * 1000 + k) as u32;
        let mut w: Vec<f32> = (0..n * k)
            .map(|_| {
                s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                (s >> 8) as f32 / (1 << 24) as f32 * 2.0 - 1.0
            })
            .collect();
        // tricky values: exact ties, zeros, a huge row, a tiny row
        if k >= 4 {
            w[..4].copy_from_slice(&[127.0, 0.5, -1.5, 2.5]);
        }
        if n >= 3 {
            w[k..2 * k].fill(0.0);
            for x in &mut w[2 * k..3 * k] {
                *x *= 1e4; // large, yet within an f16 group scale (65504 · 7)
            }
        }
        v.push((n, k, w));
    }
    v
}

#[test]
fn facade_matrices_equal_the_converters_rows() {
    for (n, k, w) in battery() {
        let q8 = QuantizedMatrix::quantize(n, k, &w).unwrap();
        for r in 0..n {
            let mut codes = vec![0i8; k];
            let s = converter::quantize_row_q8(&w[r * k..(r + 1) * k], &mut codes).unwrap();
            assert_eq!((q8.row(r), q8.scales()[r].to_bits()), (&codes[..], s.to_bits()));
        }
        let q4 = QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).unwrap();
        for r in 0..n {
            let mut packed = vec![0u8; k.div_ceil(2)];
            let s = converter::quantize_row_q4(&w[r * k..(r + 1) * k], &mut packed).unwrap();
            let Q4Scales::PerChannel(ss) = q4.scales() else {
                panic!()
            };
            assert_eq!((q4.row_packed(r), ss[r].to_bits()), (&packed[..], s.to_bits()));
        }
        if k % 2 == 0 {
            let q4g = QuantizedMatrixQ4::quantize(n, k, GroupSize::Group(2), &w).unwrap();
            for r in 0..n {
                let mut packed = vec![0u8; k / 2];
                let mut sc = vec![half::f16::ZERO; k / 2];
                converter::quantize_row_q4_grouped(&w[r * k..(r + 1) * k], 2, &mut packed, &mut sc).unwrap();
                let Q4Scales::Grouped { scales, .. } = q4g.scales() else {
                    panic!()
                };
                assert_eq!(q4g.row_packed(r), &packed[..]);
                assert_eq!(&scales[r * k / 2..(r + 1) * k / 2], &sc[..]);
            }
        }
    }
}

#[test]
fn every_tiers_activation_quantizer_equals_the_converters() {
    for tier in selftest_report().proven_tiers() {
        let route = Route::for_tier(tier).unwrap();
        for (m, k, x) in battery() {
            let mut codes = vec![0i8; m * k];
            let mut scales = vec![0f32; m];
            route.quantize_activations(&x, m, &mut codes, &mut scales).unwrap();
            for i in 0..m {
                let mut want = vec![0i8; k];
                let s = converter::quantize_row_q8(&x[i * k..(i + 1) * k], &mut want).unwrap();
                assert_eq!(&codes[i * k..(i + 1) * k], &want[..], "{tier} row {i} of [{m}, {k}]");
                assert_eq!(scales[i].to_bits(), s.to_bits(), "{tier}");
            }
        }
    }
}

#[test]
fn write_then_read_preserves_every_byte() {
    // std::env::temp_dir() is unavailable on WASI, where this test also runs
    let base = std::env::var_os("TMPDIR").map_or_else(|| std::path::PathBuf::from("/tmp"), Into::into);
    let dir = tempfile::tempdir_in(base).unwrap();
    for (n, k, w) in battery() {
        let mut tensors = vec![
            (
                "a".to_string(),
                QuantizedWeight::Q8(QuantizedMatrix::quantize(n, k, &w).unwrap()),
            ),
            (
                "b".to_string(),
                QuantizedWeight::Q4(QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).unwrap()),
            ),
        ];
        if k % 2 == 0 {
            let q = QuantizedMatrixQ4::quantize(n, k, GroupSize::Group(2), &w).unwrap();
            tensors.push(("c".to_string(), QuantizedWeight::Q4(q)));
        }
        let path = dir.path().join(format!("{n}x{k}.safetensors"));
        let out = tensors
            .iter()
            .map(|(p, t)| OutputTensor::Quantized {
                prefix: p.clone(),
                tensor: t.clone(),
            })
            .collect();
        write_file(&path, &HashMap::new(), out).unwrap();
        for (p, t) in &tensors {
            assert_eq!(&load_quantized(&path, p).unwrap(), t, "{p} [{n}, {k}]");
        }
        // and the loaded weights compute exactly what the in-memory ones do
        let x: Vec<f32> = (0..2 * k).map(|i| (i % 13) as f32 - 6.0).collect();
        let QuantizedWeight::Q8(a) = load_quantized(&path, "a").unwrap() else {
            panic!()
        };
        let QuantizedWeight::Q8(a0) = &tensors[0].1 else {
            panic!()
        };
        let (mut y1, mut y2) = (vec![0f32; 2 * n], vec![0f32; 2 * n]);
        linear_q8_dynamic(&x, 2, &a, &mut y1).unwrap();
        linear_q8_dynamic(&x, 2, a0, &mut y2).unwrap();
        assert_eq!(y1, y2);
    }
}
