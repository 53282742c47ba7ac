use crate::codes::Codes;
use crate::{check_len, checked_elems, finite_amax, quantize_value, RecipeError, Q8_MAX_ABS};

/// Quantizes one row (a weight output channel or an activation row) with the
/// canonical symmetric Q8 recipe and returns its scale.
///
/// `scale = max|w| / 127`; if the scale is 0 every code is 0, else
/// `codes[i] = clamp(rte(w[i] / scale), -127, 127)`. `codes.len()` must equal
/// `w.len()`. A NaN/±Inf element is an error (reported at row 0) and leaves
/// `codes` untouched.
pub fn quantize_row_q8(w: &[f32], codes: &mut [i8]) -> Result<f32, RecipeError> {
    check_len("Q8 codes", w.len(), codes.len())?;
    let scale = finite_amax(w)? / f32::from(Q8_MAX_ABS);
    if scale == 0.0 {
        codes.fill(0);
        return Ok(0.0);
    }
    for (c, &v) in codes.iter_mut().zip(w) {
        *c = quantize_value(v, scale, Q8_MAX_ABS);
    }
    Ok(scale)
}

/// The index of the first −128 in `codes`, if any: the one i8 value that is
/// not a Q8 code (docs/NUMERICS.md §3.1), in weights and activations alike.
/// Runs at memory speed, because a whole matrix is checked each time one
/// is built from parts (a model file's every Q8 weight, as it loads).
pub fn find_code_out_of_range(codes: &[i8]) -> Option<usize> {
    // Each 4 KiB is compared whole, a fold with no early exit that the
    // compiler vectorises; the position is looked for only in a block known
    // to hold one. `contains` (a word-at-a-time memchr, not vectorised)
    // checked 1.6 GB of codes in 0.10 s, this in 0.05–0.06 (AMD EPYC Zen 4,
    // family 25 model 17; docs/benchmarks/runs/zen4-parallel-read/harness).
    const BLOCK: usize = 4096;
    let block = codes
        .chunks(BLOCK)
        .position(|b| b.iter().fold(false, |any, &c| any | (c == i8::MIN)))?;
    let start = block * BLOCK;
    codes[start..].iter().position(|&c| c == i8::MIN).map(|i| start + i)
}

/// A weight matrix quantized with per-output-channel symmetric Q8 scales:
/// `n` rows (output features) × `k` columns, codes `i8` row-major in
/// `[-127, 127]`, one `f32` scale per row. `W[r, c] ≈ codes[r·k + c] · scales[r]`.
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedMatrix {
    n: usize,
    k: usize,
    codes: Codes<i8>,
    scales: Vec<f32>,
}

impl QuantizedMatrix {
    /// Quantizes a row-major `[n, k]` f32 matrix row by row with [`quantize_row_q8`].
    pub fn quantize(n: usize, k: usize, w: &[f32]) -> Result<Self, RecipeError> {
        Self::quantize_with(crate::Recipe::Canonical, n, k, w)
    }

    /// Quantizes a row-major `[n, k]` f32 matrix row by row with `recipe`
    /// (`docs/NUMERICS.md` §3).
    pub fn quantize_with(recipe: crate::Recipe, n: usize, k: usize, w: &[f32]) -> Result<Self, RecipeError> {
        Self::quantize_rows(recipe, None, n, k, w)
    }

    /// `quantize_with`, with the activation-aware recipe's importance (one
    /// per column, the same for every row).
    pub(crate) fn quantize_rows(
        recipe: crate::Recipe,
        importance: Option<&[f32]>,
        n: usize,
        k: usize,
        w: &[f32],
    ) -> Result<Self, RecipeError> {
        check_len("Q8 weights", checked_elems(n, k)?, w.len())?;
        let mut codes = vec![0i8; w.len()];
        let mut scales = Vec::with_capacity(n);
        if k > 0 {
            for (r, (src, dst)) in w.chunks_exact(k).zip(codes.chunks_exact_mut(k)).enumerate() {
                scales.push(crate::recipe::q8_row(recipe, src, importance, dst).map_err(|e| e.at_row(r))?);
            }
        } else {
            scales.resize(n, 0.0);
        }
        Ok(Self {
            n,
            k,
            codes: Codes::owned(codes),
            scales,
        })
    }

    /// Builds a matrix from pre-quantized parts, validating them: lengths,
    /// codes in `[-127, 127]` (-128 refused: the SIMD tiers' sign trick relies
    /// on its absence), scales finite and `>= 0`.
    pub fn from_parts(n: usize, k: usize, codes: Vec<i8>, scales: Vec<f32>) -> Result<Self, RecipeError> {
        Self::from_codes(n, k, Codes::owned(codes), scales)
    }

    /// [`QuantizedMatrix::from_parts`] on codes owned or read in place from a
    /// shared buffer ([`Codes::shared`]: a model file's memory map), with
    /// the same checks.
    pub fn from_codes(n: usize, k: usize, codes: Codes<i8>, scales: Vec<f32>) -> Result<Self, RecipeError> {
        check_len("Q8 codes", checked_elems(n, k)?, codes.as_slice().len())?;
        check_len("Q8 scales", n, scales.len())?;
        if let Some(i) = find_code_out_of_range(codes.as_slice()) {
            return Err(RecipeError::Q8CodeOutOfRange { row: i / k, col: i % k });
        }
        if let Some((row, &value)) = scales.iter().enumerate().find(|(_, s)| !(s.is_finite() && **s >= 0.0)) {
            return Err(RecipeError::InvalidScale { row, group: 0, value });
        }
        Ok(Self { n, k, codes, scales })
    }

    /// Output features (rows).
    pub fn n(&self) -> usize {
        self.n
    }
    /// Input features (columns).
    pub fn k(&self) -> usize {
        self.k
    }
    /// All codes, row-major `[n, k]`.
    pub fn codes(&self) -> &[i8] {
        self.codes.as_slice()
    }
    /// Whether the codes are read in place from a shared buffer (a model
    /// file's memory map) rather than owned.
    pub fn codes_shared(&self) -> bool {
        self.codes.is_shared()
    }
    /// One scale per row.
    pub fn scales(&self) -> &[f32] {
        &self.scales
    }
    /// The `k` codes of row `r` (panics if `r >= n`, like slice indexing).
    pub fn row(&self, r: usize) -> &[i8] {
        &self.codes()[r * self.k..(r + 1) * self.k]
    }
    /// `codes · scale` as a row-major `[n, k]` f32 matrix.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.codes().len()];
        for (r, o) in out.chunks_exact_mut(self.k.max(1)).enumerate().take(self.n) {
            self.dequantize_row_into(r, o);
        }
        out
    }
    /// Row `r` as `code · scale` into `out` (`out.len() == k`; panics if
    /// `r >= n`, like slice indexing).
    pub fn dequantize_row_into(&self, r: usize, out: &mut [f32]) {
        let s = self.scales[r];
        for (o, &c) in out.iter_mut().zip(self.row(r)) {
            *o = f32::from(c) * s;
        }
    }
    /// The codes and scales, consuming the matrix (the codes copied into a
    /// vector: [`QuantizedMatrix::into_codes`] moves them).
    pub fn into_parts(self) -> (Vec<i8>, Vec<f32>) {
        (self.codes.into_vec(), self.scales)
    }

    /// The codes and scales, moved out without a copy (the inverse of
    /// [`QuantizedMatrix::from_codes`]).
    pub fn into_codes(self) -> (Codes<i8>, Vec<f32>) {
        (self.codes, self.scales)
    }
}
