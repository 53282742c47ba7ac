//! Rotary position embedding (RoPE) as llama.cpp applies it to GGUF Llama
//! weights, with the same `cos` and `sin` bits on every target.

use std::ops::Range;

/// RoPE's frequencies, `base^(−2i / head_dim)` for each pair `i` of a head,
/// in f64. `libm`'s `pow` (a Rust port of musl's) rather than the
/// platform's: the same bits on every target, the browser's included.
pub(super) fn frequencies(base: f32, head_dim: usize) -> Vec<f64> {
    (0..head_dim / 2)
        .map(|i| libm::pow(f64::from(base), -2.0 * i as f64 / head_dim as f64))
        .collect()
}

/// `cos` and `sin` of `p · freq[i]` for the positions `p` in `base..base +
/// m`, pair `i` at `(p − base) · freq.len() + i`: in f64, then rounded once
/// to f32, with `libm`'s `cos` and `sin` (the same bits on every target).
/// Worked out for a call's own positions, once a call: a table of the
/// whole context (8 192 positions for SmolLM2) was 2 MiB and half a million
/// calls at load, for the few hundred positions a session reaches.
pub(super) fn rows(freq: &[f64], base: usize, m: usize, cos: &mut Vec<f32>, sin: &mut Vec<f32>) {
    cos.clear();
    sin.clear();
    for p in base..base + m {
        for &f in freq {
            let theta = p as f64 * f;
            cos.push(libm::cos(theta) as f32);
            sin.push(libm::sin(theta) as f32);
        }
    }
}

/// RoPE in llama.cpp's "normal" mode (the pairs adjacent, `(x[2i],
/// x[2i+1])`, in every head of `head_dim` features) on the features `cols`
/// (even bounds) of one position's heads `x`, with that position's `cos`
/// and `sin` rows ([`rows`]).
pub(super) fn rotate(head_dim: usize, x: &mut [f32], cols: Range<usize>, cos: &[f32], sin: &[f32]) {
    for j in cols.step_by(2) {
        let i = (j % head_dim) / 2;
        let (a, b) = (x[j], x[j + 1]);
        x[j] = a * cos[i] - b * sin[i];
        x[j + 1] = a * sin[i] + b * cos[i];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frequencies_fall_from_one_by_the_base() {
        let f = frequencies(10_000.0, 8);
        assert_eq!(f.len(), 4);
        assert_eq!(f[0], 1.0);
        // 10000^(-2/8) = 0.1, 10000^(-4/8) = 0.01
        assert!((f[1] - 0.1).abs() < 1e-15 && (f[2] - 0.01).abs() < 1e-15, "{f:?}");
    }

    #[test]
    fn rows_of_a_span_are_the_rows_of_each_position() {
        let freq = frequencies(10_000.0, 64);
        let (mut cos, mut sin) = (vec![], vec![]);
        rows(&freq, 5, 3, &mut cos, &mut sin);
        assert_eq!(cos.len(), 3 * 32);
        for i in 0..3 {
            let (mut c1, mut s1) = (vec![7.0], vec![7.0]);
            rows(&freq, 5 + i, 1, &mut c1, &mut s1);
            assert_eq!(c1[..], cos[i * 32..(i + 1) * 32], "position {}", 5 + i);
            assert_eq!(s1[..], sin[i * 32..(i + 1) * 32], "position {}", 5 + i);
        }
        // position 0 turns nothing; position 1's first pair by 1 radian
        rows(&freq, 0, 2, &mut cos, &mut sin);
        assert!(cos[..32].iter().all(|&c| c == 1.0) && sin[..32].iter().all(|&s| s == 0.0));
        assert_eq!((cos[32], sin[32]), (1f64.cos() as f32, 1f64.sin() as f32));
    }

    #[test]
    fn rotate_turns_each_adjacent_pair_of_the_columns_asked() {
        // head_dim 4: pairs (0, 1), (2, 3) in each head; two heads
        let (cos, sin) = ([0.0f32, 1.0], [1.0f32, 0.0]);
        let mut x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        rotate(4, &mut x, 0..8, &cos, &sin);
        // pair 0 by a quarter turn, (a, b) → (−b, a); pair 1 not at all
        assert_eq!(x, [-2.0, 1.0, 3.0, 4.0, -6.0, 5.0, 7.0, 8.0]);
        let mut y = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        rotate(4, &mut y, 4..6, &cos, &sin);
        assert_eq!(y, [1.0, 2.0, 3.0, 4.0, -6.0, 5.0, 7.0, 8.0]);
    }
}
