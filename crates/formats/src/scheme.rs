use std::fmt;
use std::str::FromStr;

use qlinear_quant_recipe::{GroupSize, QuantizedMatrix, QuantizedMatrixQ4};

/// A quantization scheme as written in `P.qscheme`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QScheme {
    /// Q8 per output channel.
    Q8,
    /// Q4 per output channel.
    Q4,
    /// Q4 with one f16 scale per group of this many columns (even, > 0).
    Q4Grouped(usize),
}

impl QScheme {
    /// The recipe's grouping for a Q4 scheme.
    pub fn group_size(self) -> GroupSize {
        match self {
            QScheme::Q4Grouped(g) => GroupSize::Group(g),
            _ => GroupSize::PerChannel,
        }
    }
    /// `[qweight shape, scales shape]` for an `[n, k]` weight.
    pub fn shapes(self, n: usize, k: usize) -> [Vec<usize>; 2] {
        match self {
            QScheme::Q8 => [vec![n, k], vec![n]],
            QScheme::Q4 => [vec![n, k.div_ceil(2)], vec![n]],
            QScheme::Q4Grouped(g) => [vec![n, k / 2], vec![n, k / g.max(1)]],
        }
    }
}

impl fmt::Display for QScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QScheme::Q8 => f.write_str("q8"),
            QScheme::Q4 => f.write_str("q4"),
            QScheme::Q4Grouped(g) => write!(f, "q4g{g}"),
        }
    }
}

impl FromStr for QScheme {
    type Err = String;
    /// `q8`, `q4`, or `q4g<G>` with `G` a decimal, even and > 0.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "q8" => Ok(QScheme::Q8),
            "q4" => Ok(QScheme::Q4),
            _ => {
                let bad =
                    || format!("unknown scheme {s:?}: expected q8, q4 or q4g<G> with G even and > 0 (e.g. q4g32)");
                let g: usize = s
                    .strip_prefix("q4g")
                    .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(bad)?
                    .parse()
                    .map_err(|_| bad())?;
                if g == 0 || g % 2 == 1 {
                    return Err(bad());
                }
                Ok(QScheme::Q4Grouped(g))
            }
        }
    }
}

/// A quantized weight read from (or to be written to) a file.
#[derive(Debug, Clone, PartialEq)]
pub enum QuantizedTensor {
    Q8(QuantizedMatrix),
    Q4(QuantizedMatrixQ4),
}

impl QuantizedTensor {
    /// The scheme that stores this tensor.
    pub fn scheme(&self) -> QScheme {
        match self {
            QuantizedTensor::Q8(_) => QScheme::Q8,
            QuantizedTensor::Q4(m) => match m.group_size() {
                GroupSize::PerChannel => QScheme::Q4,
                GroupSize::Group(g) => QScheme::Q4Grouped(g),
            },
        }
    }
    /// `(n, k)`.
    pub fn shape(&self) -> (usize, usize) {
        match self {
            QuantizedTensor::Q8(m) => (m.n(), m.k()),
            QuantizedTensor::Q4(m) => (m.n(), m.k()),
        }
    }
}
