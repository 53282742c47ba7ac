//! Hadamard rotations of the projections' inputs, for W8A8.
//!
//! W8A8 quantizes each activation row with one scale (`docs/NUMERICS.md`
//! §3.2), and SmolLM2's activations carry a few columns far above the rest,
//! which that scale flattens. A linear layer computes the same function
//! when its input `x` is rotated by an orthogonal `H` and its weight rows by
//! the same `H`: `W x = (W H) (Hᵀ x)`. A Hadamard matrix (entries ±1,
//! scaled by `1/√n`) spreads every column's outliers over all columns, so
//! the rotated rows quantize with one scale far better (QuaRot, Ashkboos
//! et al. 2024, rotates the inputs the same way). The weights are rotated
//! once, when the model is written (`qlinear-smollm --rotate-out`); the
//! inputs on every call, in `O(n · 12)` additions.
//!
//! The matrix of order `n = 12ᵇ · 2ᵃ` (`b` the largest for which `n / 12ᵇ`
//! is a power of two: 576 = 12² · 4, 1536 = 12 · 2⁷, 64 = 2⁶) is
//! `H_n = (H₁₂ ⊗ … ⊗ H₁₂ ⊗ H₂ ⊗ … ⊗ H₂) / √n` (`b` factors `H₁₂`, then `a`
//! factors `H₂ = [[1, 1], [1, −1]]`; in `A ⊗ B` the index of `A` is the
//! more significant), where `H₁₂ = I + S` is Paley's: `S[0][j] = 1` and
//! `S[j][0] = −1` for `j ≥ 1`, `S[0][0] = 0`, and for `i, j ≥ 1`
//! `S[i][j] = χ(j − i)`, `χ` the quadratic character modulo 11 (1 on the
//! squares 1, 3, 4, 5, 9; −1 on the other non-zero residues; 0 at 0).
//! Powers of two alone would need blocks (576 = 9 · 64): on SmolLM2 a
//! 64-wide block rotation left W8A8 at +0.66 % perplexity over 4096
//! tokens where the whole width's left +0.22 % (a numpy simulation, history).
//!
//! Rows are rotated on the right, as row vectors: [`Hadamard::apply`] is
//! `x ← x H`, [`Hadamard::apply_transposed`] `x ← x Hᵀ`, its inverse. The
//! sums of each factor run in a fixed order, so a row's result does not
//! depend on where or how often it is computed.

use crate::{Error, Result};

/// The metadata key a rotated model carries (`"hadamard"`): every
/// projection's and the LM head's weight rows, and the token table's rows,
/// are multiplied by the [`Hadamard`] matrix of their width, and the model
/// rotates each projection's input the same way.
pub const ROTATION_KEY: &str = "qlinear_smollm.rotation";

/// The value of [`ROTATION_KEY`] for this module's rotation.
pub const HADAMARD: &str = "hadamard";

/// The orthogonal Hadamard matrix of one order (the module's construction),
/// applied to rows of that length without forming it.
#[derive(Debug, Clone, PartialEq)]
pub struct Hadamard {
    n: usize,
    /// Factors `H₁₂` (the most significant indices), then `H₂`.
    twelves: u32,
    twos: u32,
}

/// Paley's `H₁₂` (the module's construction), row `i`, column `j`: built
/// once, not on every rotation of a row.
fn h12() -> &'static [[f32; 12]; 12] {
    static H12: std::sync::OnceLock<[[f32; 12]; 12]> = std::sync::OnceLock::new();
    H12.get_or_init(paley12)
}

/// [`h12`] built from its definition.
fn paley12() -> [[f32; 12]; 12] {
    const SQUARES: [usize; 5] = [1, 3, 4, 5, 9];
    let mut h = [[0f32; 12]; 12];
    for (i, row) in h.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            let s = match (i, j) {
                (0, 0) => 0.0,
                (0, _) => 1.0,
                (_, 0) => -1.0,
                _ if i == j => 0.0,
                _ if SQUARES.contains(&((j + 11 - i) % 11)) => 1.0,
                _ => -1.0,
            };
            *v = s + if i == j { 1.0 } else { 0.0 };
        }
    }
    h
}

impl Hadamard {
    /// The matrix of order `n`. Errors ([`Error::Rotation`]): an `n` that is
    /// not `12ᵇ · 2ᵃ` (no matrix of that order is built here), naming it and
    /// what it is rotating (`what`).
    pub fn new(n: usize, what: &str) -> Result<Hadamard> {
        let mut twelves = 0;
        let mut m = n;
        // the most factors of 12 that leave a power of two
        let mut best = None;
        while m > 0 {
            if m.is_power_of_two() {
                best = Some((twelves, m.trailing_zeros()));
            }
            if !m.is_multiple_of(12) {
                break;
            }
            m /= 12;
            twelves += 1;
        }
        let (twelves, twos) = best.ok_or_else(|| {
            Error::Rotation(format!(
                "{what} is {n} wide: a Hadamard rotation is built for widths 12^b · 2^a only"
            ))
        })?;
        Ok(Hadamard { n, twelves, twos })
    }

    /// The order.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the order is 0 (never: the smallest is 1).
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// `x ← x H` for each row of `x` (`[rows, n]`; a partial last row is
    /// left as it is: the callers pass whole rows).
    pub fn apply(&self, x: &mut [f32]) {
        self.run(x, false);
    }

    /// `x ← x Hᵀ` for each row of `x`: the inverse of [`Hadamard::apply`].
    pub fn apply_transposed(&self, x: &mut [f32]) {
        self.run(x, true);
    }

    /// [`Hadamard::run_portable`], compiled for AVX2 where the CPU has it
    /// (`pulp`'s safe dispatch; the same operations in the same order, so
    /// the same bits: Rust never fuses a multiply and an add).
    fn run(&self, x: &mut [f32], transposed: bool) {
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V3::try_new() {
            struct Run<'a> {
                h: &'a Hadamard,
                x: &'a mut [f32],
                transposed: bool,
            }
            impl pulp::WithSimd for Run<'_> {
                type Output = ();
                #[inline(always)]
                fn with_simd<S: pulp::Simd>(self, _: S) {
                    self.h.run_portable(self.x, self.transposed);
                }
            }
            // the trait's `vectorize` (V3's own takes a closure, not inlined
            // into the AVX2 function)
            return pulp::Simd::vectorize(simd, Run { h: self, x, transposed });
        }
        self.run_portable(x, transposed);
    }

    /// The rotation as written: factor by factor, then `1/√n`.
    #[inline(always)]
    fn run_portable(&self, x: &mut [f32], transposed: bool) {
        let h = h12();
        let norm = (1.0 / (self.n as f64).sqrt()) as f32;
        // the trailing H₂ factors act on contiguous blocks of `t`; the last
        // H₁₂ pass runs over lanes of min(t, 8) consecutive values, and
        // the H₂ factors of strides below that are applied inside those
        // lanes (in registers) instead of as passes of their own, whose
        // pairs at strides 1 and 2 would not vectorize
        let t = 1usize << self.twos;
        let fused = if self.twelves > 0 { t.min(8) } else { 1 };
        for row in x.chunks_exact_mut(self.n) {
            // factor f of the Kronecker product runs along stride `stride`:
            // the product of the orders of the factors after it
            let mut stride = self.n;
            for i in 0..self.twelves {
                stride /= 12;
                along12(row, stride, h, transposed, i + 1 == self.twelves);
            }
            while stride > fused {
                stride /= 2;
                along2(row, stride);
            }
            row.iter_mut().for_each(|v| *v *= norm);
        }
    }
}

/// `H₁₂` (or its transpose) along the index of stride `stride` of `row`:
/// for each value `(outer, lo)` of the other indices (`row[outer · 12 ·
/// stride + c · stride + lo]` is value `c`), `out[d] = Σ_c v[c] · H[c][d]`
/// (`H[d][c]` transposed), `c` in increasing order; `S` consecutive `lo`
/// at a time (the largest of 8, 4, 2, 1 dividing the stride: 12 inputs of
/// 8 lanes fill an AVX2 register file), so that the loads are contiguous
/// and the lanes full. `twos`: each output's `S`
/// lanes then take the `H₂` factors of strides `S/2, …, 1` ([`fwht`]), as
/// the last `H₁₂` pass does for [`Hadamard::run_portable`].
#[inline(always)]
fn along12(row: &mut [f32], stride: usize, h: &[[f32; 12]; 12], transposed: bool, twos: bool) {
    match stride {
        s if s.is_multiple_of(8) => along12_by::<8>(row, stride, h, transposed, twos),
        s if s.is_multiple_of(4) => along12_by::<4>(row, stride, h, transposed, twos),
        s if s.is_multiple_of(2) => along12_by::<2>(row, stride, h, transposed, twos),
        _ => along12_by::<1>(row, stride, h, transposed, twos),
    }
}

/// [`along12`] over `S` lanes (`S` divides `stride`).
#[inline(always)]
fn along12_by<const S: usize>(row: &mut [f32], stride: usize, h: &[[f32; 12]; 12], transposed: bool, twos: bool) {
    // m[d][c]: what input c adds into output d
    let m: [[f32; 12]; 12] =
        std::array::from_fn(|d| std::array::from_fn(|c| if transposed { h[d][c] } else { h[c][d] }));
    for block in row.chunks_exact_mut(12 * stride) {
        for lo in (0..stride).step_by(S) {
            let mut v = [[0f32; S]; 12];
            for (c, vc) in v.iter_mut().enumerate() {
                vc.copy_from_slice(&block[c * stride + lo..][..S]);
            }
            for d in 0..12 {
                let mut out = [0f32; S];
                for (&s, vc) in m[d].iter().zip(&v) {
                    for (o, &x) in out.iter_mut().zip(vc) {
                        *o += s * x;
                    }
                }
                if twos {
                    fwht(&mut out);
                }
                block[d * stride + lo..][..S].copy_from_slice(&out);
            }
        }
    }
}

/// The `H₂` factors of strides `S/2, …, 1` on `S` values in registers:
/// `(a, b) ← (a + b, a − b)` at each stride, the largest first.
#[inline(always)]
fn fwht<const S: usize>(x: &mut [f32; S]) {
    let mut half = S / 2;
    while half > 0 {
        for start in (0..S).step_by(2 * half) {
            for i in start..start + half {
                (x[i], x[i + half]) = (x[i] + x[i + half], x[i] - x[i + half]);
            }
        }
        half /= 2;
    }
}

/// `H₂` (symmetric) along the index of stride `stride`: `(a, b) ← (a + b,
/// a − b)`.
#[inline(always)]
fn along2(row: &mut [f32], stride: usize) {
    for pair in row.chunks_exact_mut(2 * stride) {
        let (a, b) = pair.split_at_mut(stride);
        for (a, b) in a.iter_mut().zip(b) {
            (*a, *b) = (*a + *b, *a - *b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The matrix written out densely, from the construction as stated
    /// (Kronecker products of the factors, in f64).
    fn dense(n: usize) -> Vec<f64> {
        let hd = Hadamard::new(n, "test").unwrap();
        let mut m = vec![1.0f64];
        let mut order = 1;
        let h = h12();
        let factors = (0..hd.twelves)
            .map(|_| h.iter().flatten().map(|&v| f64::from(v)).collect::<Vec<_>>())
            .chain((0..hd.twos).map(|_| vec![1.0, 1.0, 1.0, -1.0]));
        for f in factors {
            let fo = (f.len() as f64).sqrt() as usize;
            let next = order * fo;
            let mut k = vec![0.0; next * next];
            for (i, j) in (0..next).flat_map(|i| (0..next).map(move |j| (i, j))) {
                k[i * next + j] = m[(i / fo) * order + j / fo] * f[(i % fo) * fo + j % fo];
            }
            (m, order) = (k, next);
        }
        let norm = 1.0 / (n as f64).sqrt();
        m.iter().map(|v| v * norm).collect()
    }

    #[test]
    fn paleys_matrix_of_order_12_is_a_hadamard_matrix() {
        let h = h12();
        for (i, j) in (0..12).flat_map(|i| (0..12).map(move |j| (i, j))) {
            let dot: f32 = (0..12).map(|c| h[i][c] * h[j][c]).sum();
            assert_eq!(dot, if i == j { 12.0 } else { 0.0 }, "rows {i}, {j}");
            assert!(h[i][j] == 1.0 || h[i][j] == -1.0);
        }
        // the first row is all ones, the first column ones then minus ones
        assert!(h[0].iter().all(|&v| v == 1.0));
        assert!((1..12).all(|i| h[i][0] == -1.0));
    }

    #[test]
    fn orders_factor_into_twelves_and_twos_or_are_refused() {
        let f = |n| Hadamard::new(n, "x").map(|h| (h.twelves, h.twos));
        assert_eq!(f(576).unwrap(), (2, 2));
        assert_eq!(f(1536).unwrap(), (1, 7));
        assert_eq!(f(64).unwrap(), (0, 6));
        assert_eq!(f(12).unwrap(), (1, 0));
        assert_eq!(f(1).unwrap(), (0, 0));
        for bad in [0, 3, 9, 20, 36, 100, 576 * 5] {
            let e = f(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("is {bad} wide")) && e.contains("x "), "{e}");
        }
    }

    #[test]
    fn the_fast_rotation_is_the_dense_matrix_and_its_transpose_undoes_it() {
        for n in [1, 2, 12, 24, 48, 64, 96, 144, 192, 576, 1536] {
            let m = dense(n);
            // orthogonal: M Mᵀ = I
            for (i, j) in [(0, 0), (0, n - 1), (n / 2, n / 3), (n - 1, n - 1)] {
                let dot: f64 = (0..n).map(|c| m[i * n + c] * m[j * n + c]).sum();
                assert!(
                    (dot - if i == j { 1.0 } else { 0.0 }).abs() < 1e-12,
                    "{n}: {i} {j} {dot}"
                );
            }
            let hd = Hadamard::new(n, "test").unwrap();
            let x: Vec<f32> = (0..2 * n).map(|i| ((i * 7919 % 1013) as f32 - 500.0) / 37.0).collect();
            let mut y = x.clone();
            hd.apply(&mut y);
            let mut back = y.clone();
            hd.apply_transposed(&mut back);
            let mut yt = x.clone();
            hd.apply_transposed(&mut yt);
            for r in 0..2 {
                let xr = &x[r * n..(r + 1) * n];
                let amax = xr.iter().fold(0f32, |a, v| a.max(v.abs())) as f64;
                for j in 0..n {
                    let want: f64 = (0..n).map(|i| f64::from(xr[i]) * m[i * n + j]).sum();
                    let want_t: f64 = (0..n).map(|i| f64::from(xr[i]) * m[j * n + i]).sum();
                    let tol = 1e-5 * amax * (n as f64).sqrt();
                    assert!((f64::from(y[r * n + j]) - want).abs() <= tol, "{n} row {r} col {j}");
                    assert!(
                        (f64::from(yt[r * n + j]) - want_t).abs() <= tol,
                        "{n} row {r} col {j} (T)"
                    );
                    assert!(
                        (back[r * n + j] - xr[j]).abs() <= 1e-5 * amax as f32,
                        "{n} row {r} col {j} (back)"
                    );
                }
            }
        }
    }

    #[test]
    fn the_dispatched_rotation_gives_the_portable_bits() {
        for n in [12, 576, 1536] {
            let hd = Hadamard::new(n, "test").unwrap();
            let x: Vec<f32> = (0..3 * n)
                .map(|i| ((i * 104_729 % 2039) as f32 - 1000.0) / 7.0)
                .collect();
            for transposed in [false, true] {
                let (mut a, mut b) = (x.clone(), x.clone());
                hd.run(&mut a, transposed);
                hd.run_portable(&mut b, transposed);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&a), bits(&b), "{n} {transposed}");
            }
        }
    }

    #[test]
    fn a_rotation_spreads_one_large_column_over_the_row() {
        // what W8A8 gains: one outlier becomes n values of |v| / √n
        let hd = Hadamard::new(576, "test").unwrap();
        let mut x = vec![0.0f32; 576];
        x[100] = 24.0;
        hd.apply(&mut x);
        assert!(x.iter().all(|v| (v.abs() - 1.0).abs() < 1e-5), "{:?}", &x[..8]);
    }
}
