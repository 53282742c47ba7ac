//! What the facade's test files share.
#![allow(dead_code)] // each test file uses a part

/// `n · k` values in [−0.5, 0.5) from a seed (a linear congruential walk).
pub fn weights(n: usize, k: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n * k)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1 << 24) as f32 - 0.5
        })
        .collect()
}

/// Each value's bits, for comparisons that NaN cannot fool.
pub fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
}
