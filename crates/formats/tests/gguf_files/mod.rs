//! GGUF files built by hand for the reader's tests (`gguf.rs`,
//! `gguf_blocks.rs`): a builder of header, key/values, tensor infos and
//! data, and the small helpers around it.
#![allow(dead_code)] // each test file uses a part

use half::f16;
use qlinear_formats::{FormatError, GgufFile};

/// Builds GGUF bytes: header, key/values, tensor infos, padding, data.
pub struct Builder {
    pub version: u32,
    pub kv: Vec<u8>,
    pub n_kv: u64,
    pub infos: Vec<u8>,
    pub n_tensors: u64,
    pub data: Vec<u8>,
    pub alignment: usize,
}

pub fn string(s: &[u8]) -> Vec<u8> {
    let mut v = (s.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(s);
    v
}

impl Builder {
    pub fn new() -> Self {
        Builder {
            version: 3,
            kv: vec![],
            n_kv: 0,
            infos: vec![],
            n_tensors: 0,
            data: vec![],
            alignment: 32,
        }
    }

    /// A key with a value type id and its raw bytes.
    pub fn kv(mut self, key: &str, ty: u32, value: &[u8]) -> Self {
        self.kv.extend(string(key.as_bytes()));
        self.kv.extend(ty.to_le_bytes());
        self.kv.extend_from_slice(value);
        self.n_kv += 1;
        self
    }

    /// A tensor of `ty` with `dims` (ggml order) and `bytes` of data, placed
    /// at the next aligned offset.
    pub fn tensor(mut self, name: &str, dims: &[u64], ty: u32, bytes: &[u8]) -> Self {
        while !self.data.len().is_multiple_of(self.alignment) {
            self.data.push(0);
        }
        let offset = self.data.len() as u64;
        self.data.extend_from_slice(bytes);
        self.tensor_at(name, dims, ty, offset)
    }

    /// A tensor info alone, with its offset as given.
    pub fn tensor_at(mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Self {
        self.infos.extend(string(name.as_bytes()));
        self.infos.extend((dims.len() as u32).to_le_bytes());
        for d in dims {
            self.infos.extend(d.to_le_bytes());
        }
        self.infos.extend(ty.to_le_bytes());
        self.infos.extend(offset.to_le_bytes());
        self.n_tensors += 1;
        self
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut v = b"GGUF".to_vec();
        v.extend(self.version.to_le_bytes());
        v.extend(self.n_tensors.to_le_bytes());
        v.extend(self.n_kv.to_le_bytes());
        v.extend_from_slice(&self.kv);
        v.extend_from_slice(&self.infos);
        while !v.len().is_multiple_of(self.alignment) {
            v.push(0);
        }
        v.extend_from_slice(&self.data);
        v
    }
}

pub fn open(b: &Builder) -> Result<GgufFile, FormatError> {
    GgufFile::from_bytes(b.bytes())
}

pub fn refusal(b: &Builder) -> String {
    match open(b) {
        Ok(_) => panic!("accepted a bad file"),
        Err(e) => e.to_string(),
    }
}

/// One Q4_0 block: scale `d`, codes `q[j]` in -8..=7.
pub fn q4_0_block(d: f32, q: [i8; 32]) -> Vec<u8> {
    let mut b = f16::from_f32(d).to_le_bytes().to_vec();
    for j in 0..16 {
        b.push(((q[j] + 8) as u8) | (((q[j + 16] + 8) as u8) << 4));
    }
    b
}

pub fn sample() -> Builder {
    let f32s: Vec<u8> = [1.5f32, -2.0, 0.25, 8.0, 0.0, -0.5]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let q: [i8; 32] = std::array::from_fn(|j| (j as i8 % 16) - 8);
    Builder::new()
        .kv("general.architecture", 8, &string(b"llama"))
        .kv("u8", 0, &[200])
        .kv("i8", 1, &[0xFF])
        .kv("u16", 2, &513u16.to_le_bytes())
        .kv("i16", 3, &(-2i16).to_le_bytes())
        .kv("u32", 4, &70000u32.to_le_bytes())
        .kv("i32", 5, &(-70000i32).to_le_bytes())
        .kv("f32", 6, &0.5f32.to_le_bytes())
        .kv("bool", 7, &[1])
        .kv("u64", 10, &(1u64 << 40).to_le_bytes())
        .kv("i64", 11, &(-1i64).to_le_bytes())
        .kv("f64", 12, &0.125f64.to_le_bytes())
        .kv(
            "tokens",
            9,
            &[
                8u32.to_le_bytes().to_vec(),
                2u64.to_le_bytes().to_vec(),
                string(b"a"),
                string("é".as_bytes()),
            ]
            .concat(),
        )
        .kv(
            "nested",
            9,
            &[
                9u32.to_le_bytes().to_vec(),
                1u64.to_le_bytes().to_vec(),
                4u32.to_le_bytes().to_vec(),
                2u64.to_le_bytes().to_vec(),
                7u32.to_le_bytes().to_vec(),
                9u32.to_le_bytes().to_vec(),
            ]
            .concat(),
        )
        .tensor("norm.weight", &[6], 0, &f32s)
        .tensor(
            "blk.0.ffn_up.weight",
            &[32, 2],
            2,
            &[q4_0_block(0.5, q), q4_0_block(-2.0, q)].concat(),
        )
}
