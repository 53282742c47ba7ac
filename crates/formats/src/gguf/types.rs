//! The ggml tensor types (their block geometry) and GGUF's metadata value
//! types and values.

/// A ggml tensor type that this reader knows the block geometry of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// 32 weights: f16 scale, 16 bytes of 4-bit codes.
    Q4_0,
    /// 32 weights: f16 scale and minimum, 16 bytes of 4-bit codes.
    Q4_1,
    /// 32 weights: f16 scale, 4 bytes of fifth bits, 16 bytes of 4-bit codes.
    Q5_0,
    /// 32 weights: f16 scale and minimum, fifth bits, 4-bit codes.
    Q5_1,
    /// 32 weights: f16 scale, 32 signed bytes.
    Q8_0,
    /// 256 weights in 2 bits with 4-bit sub-block scales.
    Q2_K,
    /// 256 weights in 3 bits.
    Q3_K,
    /// 256 weights in 4 bits: 8 sub-blocks with 6-bit scales and minimums.
    Q4_K,
    /// 256 weights in 5 bits.
    Q5_K,
    /// 256 weights in 6 bits: 16 sub-blocks with 8-bit scales.
    Q6_K,
    /// 256 weights in 8 bits with an f32 scale (intermediate results).
    Q8_K,
    /// 256 weights, importance-quantized 2-bit (extra-extra small).
    IQ2_XXS,
    /// 256 weights, importance-quantized 2-bit (extra small).
    IQ2_XS,
    /// 256 weights, importance-quantized 3-bit (extra-extra small).
    IQ3_XXS,
    /// 256 weights, importance-quantized 1-bit.
    IQ1_S,
    /// 32 weights, non-linear 4-bit.
    IQ4_NL,
    /// 256 weights, importance-quantized 3-bit.
    IQ3_S,
    /// 256 weights, importance-quantized 2-bit.
    IQ2_S,
    /// 256 weights, non-linear 4-bit with sub-block scales.
    IQ4_XS,
    /// 8-bit integer.
    I8,
    /// 16-bit integer.
    I16,
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
    /// 64-bit float.
    F64,
    /// 256 weights, importance-quantized 1-bit with a mask.
    IQ1_M,
    /// bfloat16.
    BF16,
    /// 256 weights, ternary in 1.6 bits.
    TQ1_0,
    /// 256 weights, ternary in 2 bits.
    TQ2_0,
}

/// (type, id, weights per block, bytes per block), as ggml defines them
/// (`ggml_type_traits`; the `gguf` package's `GGML_QUANT_SIZES` agrees,
/// which a test checks). `Q8_1` (id 9), an intermediate of ggml's dot
/// products that no file holds, is left out: ggml and the `gguf` package
/// disagree on its size (36 and 40 bytes), so it is refused as unknown.
pub(super) const GGML_TYPES: [(GgmlType, u32, usize, usize); 30] = {
    use GgmlType::*;
    [
        (F32, 0, 1, 4),
        (F16, 1, 1, 2),
        (Q4_0, 2, 32, 18),
        (Q4_1, 3, 32, 20),
        (Q5_0, 6, 32, 22),
        (Q5_1, 7, 32, 24),
        (Q8_0, 8, 32, 34),
        (Q2_K, 10, 256, 84),
        (Q3_K, 11, 256, 110),
        (Q4_K, 12, 256, 144),
        (Q5_K, 13, 256, 176),
        (Q6_K, 14, 256, 210),
        (Q8_K, 15, 256, 292),
        (IQ2_XXS, 16, 256, 66),
        (IQ2_XS, 17, 256, 74),
        (IQ3_XXS, 18, 256, 98),
        (IQ1_S, 19, 256, 50),
        (IQ4_NL, 20, 32, 18),
        (IQ3_S, 21, 256, 110),
        (IQ2_S, 22, 256, 82),
        (IQ4_XS, 23, 256, 136),
        (I8, 24, 1, 1),
        (I16, 25, 1, 2),
        (I32, 26, 1, 4),
        (I64, 27, 1, 8),
        (F64, 28, 1, 8),
        (IQ1_M, 29, 256, 56),
        (BF16, 30, 1, 2),
        (TQ1_0, 34, 256, 54),
        (TQ2_0, 35, 256, 66),
    ]
};

impl GgmlType {
    /// Every type this reader knows.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        GGML_TYPES.iter().map(|t| t.0)
    }

    /// The type with ggml's numeric id, if this reader knows it.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GGML_TYPES.iter().find(|t| t.1 == id).map(|t| t.0)
    }

    pub(super) fn entry(self) -> (GgmlType, u32, usize, usize) {
        // every variant has its row: `all()` iterates the table itself
        GGML_TYPES
            .iter()
            .copied()
            .find(|t| t.0 == self)
            .unwrap_or((self, u32::MAX, 1, 0))
    }

    /// ggml's numeric id.
    pub fn id(self) -> u32 {
        self.entry().1
    }

    /// Weights per block (1 for the plain number types).
    pub fn block_weights(self) -> usize {
        self.entry().2
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        self.entry().3
    }

    /// ggml's name of the type (`"Q4_0"`, `"F16"`, …).
    pub fn name(self) -> String {
        format!("{self:?}")
    }

    /// Stored bits per weight.
    pub fn bits_per_weight(self) -> f64 {
        (self.block_bytes() * 8) as f64 / self.block_weights() as f64
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

/// The type of a metadata value (GGUF's `gguf_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufValueType {
    /// `u8`.
    U8,
    /// `i8`.
    I8,
    /// `u16`.
    U16,
    /// `i16`.
    I16,
    /// `u32`.
    U32,
    /// `i32`.
    I32,
    /// `f32`.
    F32,
    /// A byte that is 0 or 1.
    Bool,
    /// A UTF-8 string with a `u64` length.
    String,
    /// An array: item type, `u64` count, items.
    Array,
    /// `u64`.
    U64,
    /// `i64`.
    I64,
    /// `f64`.
    F64,
}

impl GgufValueType {
    pub(super) fn from_id(id: u32) -> Option<GgufValueType> {
        use GgufValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The fewest bytes a value of this type takes: what a count is checked
    /// against before anything is allocated for it.
    pub(super) fn min_bytes(self) -> u64 {
        use GgufValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// A string.
    String(String),
    /// An array of items of one type (arrays may hold arrays).
    Array {
        /// The items' type.
        item: GgufValueType,
        /// The items.
        values: Vec<GgufValue>,
    },
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

impl GgufValue {
    /// The value as an unsigned integer, if it is an integer type holding a
    /// value ≥ 0.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            GgufValue::U8(v) => Some(v.into()),
            GgufValue::U16(v) => Some(v.into()),
            GgufValue::U32(v) => Some(v.into()),
            GgufValue::U64(v) => Some(v),
            GgufValue::I8(v) => u64::try_from(v).ok(),
            GgufValue::I16(v) => u64::try_from(v).ok(),
            GgufValue::I32(v) => u64::try_from(v).ok(),
            GgufValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a float, if it is `f32` or `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(f64::from(v)),
            GgufValue::F64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as JSON text, as `qlinear convert` carries GGUF metadata
    /// (`docs/FORMAT.md`, "GGUF input"): strings quoted and escaped,
    /// integers in decimal, floats in the shortest decimal that reads back
    /// to the same `f32` or `f64` (NaN and ±infinity, which JSON lacks, as
    /// the strings `"NaN"`, `"inf"`, `"-inf"`), bools `true` / `false`,
    /// arrays as JSON arrays.
    pub fn to_json(&self) -> String {
        fn float(x: f64, text: String) -> String {
            if x.is_nan() {
                "\"NaN\"".into()
            } else if x.is_infinite() {
                if x > 0.0 { "\"inf\"" } else { "\"-inf\"" }.into()
            } else {
                text
            }
        }
        match self {
            GgufValue::U8(x) => x.to_string(),
            GgufValue::I8(x) => x.to_string(),
            GgufValue::U16(x) => x.to_string(),
            GgufValue::I16(x) => x.to_string(),
            GgufValue::U32(x) => x.to_string(),
            GgufValue::I32(x) => x.to_string(),
            GgufValue::U64(x) => x.to_string(),
            GgufValue::I64(x) => x.to_string(),
            GgufValue::F32(x) => float(f64::from(*x), format!("{x:?}")),
            GgufValue::F64(x) => float(*x, format!("{x:?}")),
            GgufValue::Bool(x) => x.to_string(),
            GgufValue::String(s) => serde_json::Value::String(s.clone()).to_string(),
            GgufValue::Array { values, .. } => {
                let items: Vec<String> = values.iter().map(GgufValue::to_json).collect();
                format!("[{}]", items.join(","))
            }
        }
    }
}
