//! The peer comparison (feature `candle`): the same shapes through
//! candle-core's `QMatMul` with ggml `Q4_0` and `Q8_0` weights (blocks of 32
//! with an f16 scale; candle quantizes the activations to `Q8_0` per call, so
//! these sit beside qlinear's grouped W4A8 and W8A8). Candle sizes its own
//! worker pool once per process (`CANDLE_NUM_THREADS`, else
//! `RAYON_NUM_THREADS`, else every CPU), so its rows have that one thread count.

use std::time::Duration;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

/// The thread count candle's pool takes in this process.
pub(crate) fn threads() -> usize {
    ["CANDLE_NUM_THREADS", "RAYON_NUM_THREADS"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok().filter(|&t: &usize| t > 0))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |t| t.get()))
}

/// `(family it sits beside, tier label, ggml type, weight bytes per 32 weights)`.
pub(crate) const TYPES: [(&str, &str, GgmlDType, usize); 2] = [
    ("w4a8_g32", "candle:q4_0", GgmlDType::Q4_0, 18),
    ("w8a8", "candle:q8_0", GgmlDType::Q8_0, 34),
];

/// Median µs of `QMatMul::forward` for `y = x · Wᵀ` (`x`: m × k, `W`: n × k),
/// cycling through `copies` distinct quantized copies of `W`.
pub(crate) fn median_us(
    w: &[f32],
    (n, k): (usize, usize),
    x: &[f32],
    m: usize,
    dtype: GgmlDType,
    copies: usize,
    budget: Duration,
) -> candle_core::Result<f64> {
    let dev = Device::Cpu;
    let wt = Tensor::from_slice(w, (n, k), &dev)?;
    let mats = (0..copies)
        .map(|_| QMatMul::from_qtensor(QTensor::quantize(&wt, dtype)?))
        .collect::<candle_core::Result<Vec<_>>>()?;
    let xt = Tensor::from_slice(x, (m, k), &dev)?;
    // One call per copy first: whatever candle does on a tensor's first use is
    // paid once per layer in decoding, not per token.
    for mat in &mats {
        mat.forward(&xt)?;
    }
    let mut failed = None;
    let t = super::median_time(budget, |i| {
        if let Err(e) = mats[i % mats.len()].forward(&xt) {
            failed = Some(e);
        }
    });
    failed.map_or(Ok(t), Err)
}
