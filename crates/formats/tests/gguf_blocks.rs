//! GGUF's block decoders on hand examples and, where Python's `gguf`
//! package is installed, bit for bit against `gguf.quants.dequantize`; the
//! lossless Q4_0 import; a file the package writes.

use half::f16;
use proptest::prelude::*;
use qlinear_formats::{dequantize_ggml, GgmlType, GgufFile, GgufValue, GgufValueType, DEQUANTIZABLE};

mod gguf_files;
use gguf_files::*;

/// Hand examples of each decoder against the formulas of the `gguf` package.
#[test]
fn each_block_format_decodes_a_hand_example() {
    let h = |v: f32| f16::from_f32(v).to_le_bytes();
    let mut y = vec![0f32; 32];
    // Q8_0: d · q
    let mut b = h(0.5).to_vec();
    b.extend((0..32).map(|i| (i as i8 - 16) as u8));
    dequantize_ggml("t", GgmlType::Q8_0, &b, &mut y).unwrap();
    assert_eq!(y, (0..32).map(|i| 0.5 * (i as f32 - 16.0)).collect::<Vec<_>>());
    // Q4_1: d · q + m, low nibbles first
    let mut b = [h(2.0), h(-1.0)].concat();
    b.extend((0..16).map(|i| (i as u8) | ((15 - i as u8) << 4)));
    dequantize_ggml("t", GgmlType::Q4_1, &b, &mut y).unwrap();
    let want: Vec<f32> = (0..16)
        .map(|i| 2.0 * i as f32 - 1.0)
        .chain((0..16).map(|i| 2.0 * (15 - i) as f32 - 1.0))
        .collect();
    assert_eq!(y, want);
    // Q5_0: fifth bit j of qh for weight j, minus 16
    let mut b = h(1.0).to_vec();
    b.extend(0x8000_0001u32.to_le_bytes());
    b.extend([0u8; 16]);
    dequantize_ggml("t", GgmlType::Q5_0, &b, &mut y).unwrap();
    assert_eq!((y[0], y[1], y[31]), (0.0, -16.0, 0.0));
    // Q6_K: weight 0 = d · scale[0] · ((ql[0] & 15 | (qh[0] & 3) << 4) - 32)
    let mut b = vec![0u8; 210];
    b[0] = 0x05;
    b[128] = 0x02;
    b[192] = 3;
    b[208..210].copy_from_slice(&h(0.25));
    let mut y = vec![0f32; 256];
    dequantize_ggml("t", GgmlType::Q6_K, &b, &mut y).unwrap();
    assert_eq!(y[0], 0.25 * 3.0 * ((5 | 2 << 4) - 32) as f32);
    assert_eq!(y[16], 0.0 * -32.0);
    // lengths that are not whole blocks, or do not match the output
    assert!(dequantize_ggml("t", GgmlType::Q4_0, &[0; 17], &mut [0.0; 32]).is_err());
    assert!(dequantize_ggml("t", GgmlType::Q4_0, &[0; 18], &mut [0.0; 31]).is_err());
}

/// `python3` with the `gguf` package, or why not. Under `cargo xtask test`
/// (`QLINEAR_REQUIRE_GGUF=1`) its absence is a failure, not a skip.
fn python_gguf() -> Option<()> {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import gguf, numpy"])
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        assert!(
            std::env::var_os("QLINEAR_REQUIRE_GGUF").is_none(),
            "QLINEAR_REQUIRE_GGUF is set but python3 cannot import gguf and numpy"
        );
        eprintln!("skipped: python3 with the gguf package is not installed (pip install gguf)");
        return None;
    }
    Some(())
}

/// Random blocks of every decodable type, with the f16 scales drawn from
/// every class (subnormal, ±0, NaN, ±inf, ordinary), decoded here and by
/// `gguf.quants.dequantize`: the same bits.
#[test]
fn every_decoder_matches_the_gguf_package_bit_for_bit() {
    if python_gguf().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // subnormals, ±0, a quiet and a signalling NaN with payloads, ±inf, 1
    let special: [u16; 10] = [
        0x0001, 0x03FF, 0x0000, 0x8000, 0x7E01, 0xFD55, 0x7C00, 0xFC00, 0x3C00, 0x83FF,
    ];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for ty in DEQUANTIZABLE {
        let blocks = 64;
        let mut data: Vec<u8> = (0..blocks * ty.block_bytes()).map(|_| next() as u8).collect();
        // f16 fields at the offsets each format keeps them: a special value
        // in every other block
        let f16_at: &[usize] = match ty {
            GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 => &[0],
            GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
            GgmlType::Q6_K => &[208],
            _ => &[],
        };
        for (i, block) in data.chunks_exact_mut(ty.block_bytes()).enumerate() {
            for &at in f16_at {
                let v = if i % 2 == 0 {
                    special[(i / 2) % special.len()]
                } else {
                    0x3000 | (next() as u16 & 0x0FFF)
                };
                block[at..at + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        if ty == GgmlType::F16 || ty == GgmlType::BF16 {
            for (i, &v) in special.iter().enumerate() {
                data[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        let n = blocks * ty.block_weights();
        let mut ours = vec![0f32; n];
        dequantize_ggml("t", ty, &data, &mut ours).unwrap();
        let (inp, out) = (dir.path().join("in.bin"), dir.path().join("out.bin"));
        std::fs::write(&inp, &data).unwrap();
        let script = format!(
            "import numpy as np, gguf\n\
             np.seterr(all='ignore')\n\
             t = gguf.GGMLQuantizationType['{ty}']\n\
             b = np.fromfile('{}', dtype=np.uint8)\n\
             bs, ts = gguf.GGML_QUANT_SIZES[t]\n\
             assert (bs, ts) == ({}, {}), (bs, ts)\n\
             y = gguf.quants.dequantize(b.reshape(1, -1), t).astype(np.float32)\n\
             y.tofile('{}')\n",
            inp.display(),
            ty.block_weights(),
            ty.block_bytes(),
            out.display()
        );
        let st = std::process::Command::new("python3")
            .args(["-c", &script])
            .status()
            .unwrap();
        assert!(st.success(), "{ty}: the gguf package failed");
        let theirs: Vec<f32> = std::fs::read(&out)
            .unwrap()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(theirs.len(), n, "{ty}");
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            // the bits, NaN payloads included
            assert_eq!(a.to_bits(), b.to_bits(), "{ty} weight {i}: {a:e} against {b:e}");
        }
    }
}

/// Every block size this reader knows is the `gguf` package's.
#[test]
fn the_block_table_is_the_gguf_packages() {
    if python_gguf().is_none() {
        return;
    }
    let rows: String = GgmlType::all()
        .map(|t| format!("({}, '{t}', {}, {}),", t.id(), t.block_weights(), t.block_bytes()))
        .collect();
    let script = format!(
        "import gguf\n\
         for i, name, bs, ts in [{rows}]:\n\
         \x20   t = gguf.GGMLQuantizationType(i)\n\
         \x20   assert t.name == name, (i, t.name, name)\n\
         \x20   assert gguf.GGML_QUANT_SIZES[t] == (bs, ts), (name, gguf.GGML_QUANT_SIZES[t], bs, ts)\n"
    );
    let st = std::process::Command::new("python3")
        .args(["-c", &script])
        .status()
        .unwrap();
    assert!(st.success(), "the block table differs from gguf.GGML_QUANT_SIZES");
}

/// Q4_0 → q4g32 by hand: a block whose extreme is positive gets ggml's
/// negative `d` and the code −8 for it, kept as they are.
#[test]
fn q4_0_imports_into_q4g32_by_hand() {
    // ggml would quantize [16, -2, 0, …] as d = 16 / -8 = -2, codes -8, 1, 0, …
    let mut q = [0i8; 32];
    (q[0], q[1], q[16], q[31]) = (-8, 1, 7, -3);
    let b = Builder::new().tensor("w", &[32, 1], 2, &q4_0_block(-2.0, q));
    let f = open(&b).unwrap();
    let w = f.q4g32_from_q4_0("w").unwrap();
    assert_eq!(
        (w.n(), w.k(), w.group_size()),
        (1, 32, qlinear_quant_recipe::GroupSize::Group(32))
    );
    let codes: Vec<i8> = (0..32).map(|c| w.code(0, c)).collect();
    assert_eq!(codes, q.to_vec());
    assert_eq!(w.negative_group_scale(), Some((0, 0, -2.0)));
    let mut y = w.dequantize();
    assert_eq!((y[0], y[1], y[16], y[31], y[2]), (16.0, -2.0, -14.0, 6.0, -0.0));
    // the same bits as the Q4_0 decoder (the gguf package's, tested above)
    let mut theirs = vec![0f32; 32];
    dequantize_ggml("w", GgmlType::Q4_0, &q4_0_block(-2.0, q), &mut theirs).unwrap();
    y.iter_mut()
        .zip(&theirs)
        .for_each(|(a, b)| assert_eq!(a.to_bits(), b.to_bits()));
    // refusals name what is wrong
    let e = f.q4g32_from_q4_0("missing").unwrap_err().to_string();
    assert_eq!(e, "missing: no such tensor");
    let f32s = Builder::new().tensor("v", &[2, 1], 0, &[0; 8]);
    let e = open(&f32s).unwrap().q4g32_from_q4_0("v").unwrap_err().to_string();
    assert_eq!(
        e,
        "v: F32 [1, 2] is not a 2-D Q4_0 tensor, which alone has a lossless q4g32 image"
    );
    let mut nan = q4_0_block(1.0, q);
    nan[..2].copy_from_slice(&0x7E00u16.to_le_bytes());
    let bad = Builder::new().tensor("w", &[32, 2], 2, &[q4_0_block(1.0, q), nan].concat());
    let e = open(&bad).unwrap().q4g32_from_q4_0("w").unwrap_err().to_string();
    assert_eq!(
        e,
        "GGUF tensor w: row 1, block 0 (columns 0..32) has the scale d = NaN (f16 bits 0x7e00); q4g32 holds finite \
         scales only, so this tensor cannot be imported"
    );
    let e = qlinear_formats::q4_0_to_q4g32("w", 1, 48, &[0; 18])
        .unwrap_err()
        .to_string();
    assert!(e.contains("18 bytes of Q4_0 for [1, 48]"), "{e}");
}

proptest! {
    /// Random Q4_0 tensors (every nibble, scales of every finite class:
    /// negative, ±0, subnormal) import with each code and scale bit kept,
    /// and dequantize to the Q4_0 decoder's bits.
    #[test]
    fn q4_0_import_is_lossless(seed in any::<u64>(), rows in 1usize..5, blocks in 1usize..4) {
        let mut s = seed | 1;
        let mut next = || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s };
        let specials = [0x0001u16, 0x8001, 0x0000, 0x8000, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF];
        let mut data = vec![];
        for i in 0..rows * blocks {
            let d = if i % 2 == 0 { specials[(next() % 8) as usize] } else { next() as u16 & 0xBFFF };
            data.extend(d.to_le_bytes());
            data.extend((0..16).map(|_| next() as u8));
        }
        let k = 32 * blocks;
        let w = qlinear_formats::q4_0_to_q4g32("w", rows, k, &data).unwrap();
        let qlinear_quant_recipe::Q4Scales::Grouped { scales, .. } = w.scales() else { panic!("grouped") };
        for (i, b) in data.chunks_exact(18).enumerate() {
            prop_assert_eq!(scales[i].to_bits(), u16::from_le_bytes([b[0], b[1]]));
            for j in 0..32 {
                let raw = if j < 16 { b[2 + j] & 15 } else { b[2 + j - 16] >> 4 };
                prop_assert_eq!(w.code(i / blocks, i % blocks * 32 + j), raw as i8 - 8);
            }
        }
        let mut theirs = vec![0f32; rows * k];
        dequantize_ggml("w", GgmlType::Q4_0, &data, &mut theirs).unwrap();
        for (a, b) in w.dequantize().iter().zip(&theirs) {
            prop_assert_eq!(a.to_bits(), b.to_bits());
        }
    }
}

/// A file the `gguf` package writes (its `GGUFWriter`): metadata of every
/// scalar type, string and integer arrays, and one `[3, 512]` tensor of
/// every decodable type (values the package quantizes itself where it can,
/// random blocks for the K quants, which it only decodes). This reader
/// reads it back, and decodes every tensor to the package's bits.
#[test]
fn a_file_the_gguf_package_writes_reads_back() {
    if python_gguf().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("every_type.gguf");
    let names: Vec<String> = DEQUANTIZABLE.iter().map(|t| t.to_string()).collect();
    let script = format!(
        "import sys, numpy as np, gguf\n\
         T, V = gguf.GGMLQuantizationType, gguf.GGUFValueType\n\
         rng = np.random.default_rng(7)\n\
         w = gguf.GGUFWriter(sys.argv[1], 'llama')\n\
         w.add_uint8('u8', 200); w.add_int8('i8', -3); w.add_uint16('u16', 513); w.add_int16('i16', -2)\n\
         w.add_uint32('u32', 70000); w.add_int32('i32', -70000); w.add_float32('f32', 0.1)\n\
         w.add_uint64('u64', 1 << 40); w.add_int64('i64', -1); w.add_float64('f64', 0.1); w.add_bool('bool', True)\n\
         w.add_string('s', 'é \"q\"'); w.add_array('ints', [1, 2, 3]); w.add_array('strs', ['a', 'bc'])\n\
         for name in {names:?}:\n\
         \x20   t = T[name]\n\
         \x20   x = (rng.standard_normal((3, 512)) * 3).astype(np.float32)\n\
         \x20   if t == T.F32: w.add_tensor(name, x)\n\
         \x20   elif t == T.F16: w.add_tensor(name, x.astype(np.float16))\n\
         \x20   elif t in (T.Q4_K, T.Q5_K, T.Q6_K):\n\
         \x20       bs, ts = gguf.GGML_QUANT_SIZES[t]\n\
         \x20       w.add_tensor(name, rng.integers(0, 256, (3, 512 // bs * ts), dtype=np.uint8), raw_dtype=t)\n\
         \x20   else: w.add_tensor(name, gguf.quants.quantize(x, t), raw_dtype=t)\n\
         w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()\n\
         np.seterr(all='ignore')\n\
         for t in gguf.GGUFReader(sys.argv[1]).tensors:\n\
         \x20   y = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).ravel()\n\
         \x20   b = y.view(np.uint32).astype(np.uint64)\n\
         \x20   k = np.arange(b.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)\n\
         \x20   print(t.name, b.size, int((b * k).sum(dtype=np.uint64)))\n"
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let f = GgufFile::open(&path).unwrap();
    let get = |k: &str| f.get(k).unwrap_or_else(|| panic!("{k}")).clone();
    assert_eq!(get("general.architecture"), GgufValue::String("llama".into()));
    assert_eq!(get("u8"), GgufValue::U8(200));
    assert_eq!(get("i8"), GgufValue::I8(-3));
    assert_eq!(get("u16"), GgufValue::U16(513));
    assert_eq!(get("i16"), GgufValue::I16(-2));
    assert_eq!(get("u32"), GgufValue::U32(70000));
    assert_eq!(get("i32"), GgufValue::I32(-70000));
    assert_eq!(get("f32"), GgufValue::F32(0.1));
    assert_eq!(get("u64"), GgufValue::U64(1 << 40));
    assert_eq!(get("i64"), GgufValue::I64(-1));
    assert_eq!(get("f64"), GgufValue::F64(0.1));
    assert_eq!(get("bool"), GgufValue::Bool(true));
    assert_eq!(get("s"), GgufValue::String("é \"q\"".into()));
    let GgufValue::Array { values, .. } = get("strs") else {
        panic!("strs")
    };
    assert_eq!(values, [GgufValue::String("a".into()), GgufValue::String("bc".into())]);
    let GgufValue::Array { values, .. } = get("ints") else {
        panic!("ints")
    };
    assert_eq!(values.len(), 3);
    let mut seen = 0;
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let v: Vec<&str> = line.split(' ').collect();
        let t = f.tensor(v[0]).unwrap();
        assert_eq!((t.ggml_type.to_string().as_str(), t.shape()), (v[0], vec![3, 512]));
        let ours = f.tensor_f32(v[0]).unwrap();
        assert_eq!(ours.len().to_string(), v[1]);
        let h = ours.iter().enumerate().fold(0u64, |h, (i, x)| {
            h.wrapping_add(u64::from(x.to_bits()).wrapping_mul(2 * i as u64 + 1))
        });
        assert_eq!(h.to_string(), v[2], "{}: the decoded bits differ", v[0]);
        seen += 1;
    }
    assert_eq!(seen, DEQUANTIZABLE.len());
}

#[test]
fn values_as_json_text() {
    let s = |v: GgufValue| v.to_json();
    assert_eq!(s(GgufValue::U8(200)), "200");
    assert_eq!(s(GgufValue::I64(-1)), "-1");
    assert_eq!(s(GgufValue::F32(1e-5)), "1e-5");
    assert_eq!(s(GgufValue::F32(100000.0)), "100000.0");
    assert_eq!(s(GgufValue::F64(0.1)), "0.1");
    assert_eq!(s(GgufValue::F32(f32::NAN)), "\"NaN\"");
    assert_eq!(s(GgufValue::F64(f64::NEG_INFINITY)), "\"-inf\"");
    assert_eq!(s(GgufValue::Bool(false)), "false");
    assert_eq!(s(GgufValue::String("a\"b\n".into())), "\"a\\\"b\\n\"");
    let nested = GgufValue::Array {
        item: GgufValueType::Array,
        values: vec![GgufValue::Array {
            item: GgufValueType::U8,
            values: vec![GgufValue::U8(1)],
        }],
    };
    assert_eq!(s(nested), "[[1]]");
    // every float text reads back to the same value
    for x in [1e-5f32, 0.1, 3.4028235e38, f32::MIN_POSITIVE, 1.0e-45] {
        assert_eq!(s(GgufValue::F32(x)).parse::<f32>().unwrap(), x);
    }
}
