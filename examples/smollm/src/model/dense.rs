//! A linear layer of the model: f32 (the reference path) or a
//! `qlinear::Linear`, and the token table.

use super::*;

/// One linear layer: f32 (the reference path) or a qlinear layer.
pub(super) enum Dense {
    F32 {
        w: Vec<f32>,
        n: usize,
        k: usize,
        /// What the input columns held, while calibrating.
        stats: Option<std::sync::Mutex<Calibration>>,
    },
    Q(Box<Linear>),
}

impl Dense {
    /// An f32 layer of `[n, k]` weights, not calibrating.
    pub(super) fn f32(w: Vec<f32>, n: usize, k: usize) -> Dense {
        Dense::F32 { w, n, k, stats: None }
    }

    pub(super) fn n(&self) -> usize {
        match self {
            Dense::F32 { n, .. } => *n,
            Dense::Q(l) => l.out_features(),
        }
    }

    /// The f32 weight (`[n, k]`, row major) of layer `name`.
    pub(super) fn weights(&self, name: &str) -> Result<&[f32]> {
        match self {
            Dense::F32 { w, .. } => Ok(w),
            Dense::Q(_) => Err(Error::Smooth(format!(
                "{name} is quantized: smoothing needs the f32 path (a GGUF file, or an f32 one)"
            ))),
        }
    }

    /// The f32 weight to change in place (a quantized layer has none: the
    /// callers read [`Dense::weights`] first, which says so).
    pub(super) fn weights_mut(&mut self) -> &mut [f32] {
        match self {
            Dense::F32 { w, .. } => w,
            Dense::Q(_) => &mut [],
        }
    }

    /// Each input column's `max |x|` over the calibration rows of layer
    /// `name`.
    pub(super) fn input_max(&self, name: &str) -> Result<Vec<f32>> {
        let none = || {
            Error::Smooth(format!(
                "{name} has no calibration rows: run the f32 path over a text first"
            ))
        };
        match self {
            Dense::Q(_) => self.weights(name).map(|_| vec![]),
            Dense::F32 { stats: Some(s), .. } => {
                let c = s.lock().map_err(|_| Error::Smooth("calibration poisoned".into()))?;
                if c.rows == 0 {
                    return Err(none());
                }
                Ok(c.max.clone())
            }
            _ => Err(none()),
        }
    }

    /// `y[m, n] = x[m, k] · Wᵀ`.
    pub(super) fn forward(&self, x: &[f32], m: usize, y: &mut [f32]) -> Result<()> {
        match self {
            Dense::F32 { w, n, k, stats } => {
                if let Some(stats) = stats {
                    let mut acc = stats.lock().map_err(|_| Error::Prompt("calibration poisoned".into()))?;
                    acc.add(&x[..(m * k).min(x.len())], *k);
                }
                // blocks of 16 weight rows, each read once for all m
                // activation rows (it stays in L1/L2 meanwhile)
                const ROWS: usize = 16;
                let blocks: Vec<Vec<f32>> = w
                    .par_chunks(ROWS * k)
                    .map(|wb| {
                        let rows = wb.len() / k;
                        let mut out = vec![0f32; m * rows];
                        for (i, xr) in x.chunks_exact(*k).take(m).enumerate() {
                            for (r, wr) in wb.chunks_exact(*k).enumerate() {
                                out[i * rows + r] = dot(xr, wr);
                            }
                        }
                        out
                    })
                    .collect();
                for (b, out) in blocks.iter().enumerate() {
                    let rows = out.len() / m.max(1);
                    for i in 0..m {
                        y[i * n + b * ROWS..i * n + b * ROWS + rows].copy_from_slice(&out[i * rows..(i + 1) * rows]);
                    }
                }
                Ok(())
            }
            Dense::Q(l) => Ok(l.forward(x, m, y)?),
        }
    }

    /// Outputs `rows` of one activation row `x` (`[k]`) into `y`
    /// (`[rows.len()]`), on the calling thread: the bits of the same
    /// outputs of [`Dense::forward`]. Records no calibration statistics.
    pub(super) fn forward_rows(&self, x: &[f32], rows: Range<usize>, y: &mut [f32]) -> Result<()> {
        match self {
            Dense::F32 { w, k, .. } => {
                for (j, out) in rows.zip(y) {
                    *out = dot(x, &w[j * k..(j + 1) * k]);
                }
                Ok(())
            }
            Dense::Q(l) => Ok(l.forward_rows(x, 1, rows, y)?),
        }
    }
}

pub(super) enum Table {
    F32(Vec<f32>),
    Q(Embedding),
}
