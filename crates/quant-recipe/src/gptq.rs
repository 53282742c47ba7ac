//! GPTQ (`docs/NUMERICS.md` §3.9): each row quantized one column at a time,
//! left to right, every column's rounding error spread over the columns not
//! yet quantized in proportion to how the layer's inputs correlate, so that
//! the layer's *outputs* on those inputs move as little as possible.
//!
//! Why: the search recipes (§3.7–§3.8) minimise each block's own error; GPTQ
//! lets later weights absorb it. On SmolLM2-135M, whose published weights are
//! already 4-bit (Q4_1), a q4g32 requantization with the activation-aware
//! search loses 13 % perplexity at W4A8, and the Hadamard-rotated weights
//! (which W4A8 needs) 33 % with the search; GPTQ on the rotated weights
//! 3.8 % (docs/BENCHMARKS.md).
//!
//! Every step is f64 (the stored codes and scales aside) in a fixed order,
//! with no fused multiply-add, so a row's bytes depend on nothing but the row
//! and the hessian: rows may run on any thread, and `tools/gen_recipe_golden.py`
//! recomputes them in Python.

use half::f16;

use crate::recipe::{choose, code_of, signed_max};
use crate::{check_len, pack_codes_biased, packed_row_bytes, GroupSize, Recipe, RecipeError, Q4_MAX_ABS, Q8_MAX_ABS};

/// The dampening added to the hessian's diagonal, as a share of its mean
/// (§3.9 step 2). It keeps the factorisation stable where inputs are nearly
/// collinear, and limits how far one column's error is pushed onto the
/// others. 5 %, not GPTQ's customary 1 %: on SmolLM2-135M (q4g32, rotated,
/// W4A8, hessians of 5120 calibration tokens) 1, 2, 3, 5 and 10 % scored
/// +5.9, +4.8, +2.9, +3.4 and +5.9 %
/// perplexity on the GPL-3 text, and 1, 3, 5 and 10 % +7.1, +5.6, +4.5 and
/// +5.1 % on a held-out one (Apache-2.0): 5 % was best or near it on both.
pub const GPTQ_DAMPING: f64 = 0.05;

/// What GPTQ needs of a layer's input second moment `H = mean(x xᵀ)` (the
/// "hessian", `[k, k]`): the upper-triangular `U` with `(H + λI)⁻¹ = Uᵀ U`,
/// the undamped diagonal (each block's importance, §3.8) and the columns
/// whose inputs are always 0. Computed once per layer, used for every row.
#[derive(Debug, Clone, PartialEq)]
pub struct GptqFactor {
    k: usize,
    /// `U`, row major; only `i <= j` is meaningful.
    u: Vec<f64>,
    /// `f32(H[j][j])`, 0 for a dead column.
    diag: Vec<f32>,
    /// `H[j][j] == 0`: the input is always 0, the weight is written as 0.
    dead: Vec<bool>,
}

/// `Σ a_i·b_i` in four partial sums (`i mod 4`, each in increasing `i` from
/// +0), added as `(p0 + p1) + (p2 + p3)`: §3.9's one dot product. Four
/// chains let the compiler use vector lanes without reordering a sum.
fn dot4(a: &[f64], b: &[f64]) -> f64 {
    let mut p = [0f64; 4];
    let (ac, bc) = (a.chunks_exact(4), b.chunks_exact(4));
    let (at, bt) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..4 {
            p[l] += x[l] * y[l];
        }
    }
    for (l, (x, y)) in at.iter().zip(bt).enumerate() {
        p[l] += x * y;
    }
    (p[0] + p[1]) + (p[2] + p[3])
}

impl GptqFactor {
    /// The factor of `hessian`, `[k, k]` row major, of which only the upper
    /// triangle (`i <= j`) is read (the matrix is symmetric; a sum computed
    /// in another order may differ below it in the last bit). §3.9 steps
    /// 1–4. Errors: a length that is not `k · k`, a non-finite element or a
    /// negative diagonal ([`RecipeError::BadHessian`]), and a matrix that is
    /// not positive definite even after dampening
    /// ([`RecipeError::HessianNotPositiveDefinite`]): no second moment of
    /// real inputs is either.
    pub fn from_hessian(hessian: &[f32], k: usize) -> Result<GptqFactor, RecipeError> {
        let len = k.checked_mul(k).ok_or(RecipeError::ShapeOverflow { n: k, k })?;
        check_len("hessian", len, hessian.len())?;
        for i in 0..k {
            for j in i..k {
                let v = hessian[i * k + j];
                if !v.is_finite() || (i == j && v < 0.0) {
                    return Err(RecipeError::BadHessian {
                        row: i,
                        col: j,
                        value: v,
                    });
                }
            }
        }
        // 1. f64, upper triangle mirrored; a dead column's row and column 0,
        //    its diagonal 1
        let dead: Vec<bool> = (0..k).map(|j| hessian[j * k + j] == 0.0).collect();
        let mut a = vec![0f64; len];
        for i in 0..k {
            for j in i..k {
                let v = if dead[i] || dead[j] {
                    0.0
                } else {
                    f64::from(hessian[i * k + j])
                };
                a[i * k + j] = v;
                a[j * k + i] = v;
            }
            if dead[i] {
                a[i * k + i] = 1.0;
            }
        }
        // 2. dampening: λ = 1 % of the mean diagonal, summed in order
        let mean = (0..k).fold(0f64, |s, j| s + a[j * k + j]) / k as f64;
        let lambda = GPTQ_DAMPING * mean;
        for j in 0..k {
            a[j * k + j] += lambda;
        }
        // 3. A = R Rᵀ with R upper triangular, from the last column back:
        //    R[i][j] = (A[i][j] − Σ_{m>j} R[i][m]·R[j][m]) / R[j][j]
        let mut r = vec![0f64; len];
        for j in (0..k).rev() {
            let d = a[j * k + j] - dot4(&r[j * k + j + 1..(j + 1) * k], &r[j * k + j + 1..(j + 1) * k]);
            if !(d > 0.0 && d.is_finite()) {
                return Err(RecipeError::HessianNotPositiveDefinite { col: j });
            }
            let rjj = d.sqrt();
            r[j * k + j] = rjj;
            for i in 0..j {
                let s = dot4(&r[i * k + j + 1..(i + 1) * k], &r[j * k + j + 1..(j + 1) * k]);
                r[i * k + j] = (a[i * k + j] - s) / rjj;
            }
        }
        drop(a);
        // 4. U = R⁻¹ (upper): U[i][i] = 1 / R[i][i], and for j > i
        //    U[i][j] = −(Σ_{m=i}^{j−1} U[i][m]·R[m][j]) / R[j][j]; then
        //    A⁻¹ = R⁻ᵀ R⁻¹ = Uᵀ U. R's columns are read from a transposed copy.
        let mut rt = vec![0f64; len];
        for i in 0..k {
            for j in i..k {
                rt[j * k + i] = r[i * k + j];
            }
        }
        drop(r);
        let mut u = vec![0f64; len];
        for i in 0..k {
            u[i * k + i] = 1.0 / rt[i * k + i];
            for j in i + 1..k {
                let s = dot4(&u[i * k + i..i * k + j], &rt[j * k + i..j * k + j]);
                u[i * k + j] = -s / rt[j * k + j];
            }
        }
        let diag = (0..k).map(|j| if dead[j] { 0.0 } else { hessian[j * k + j] }).collect();
        Ok(GptqFactor { k, u, diag, dead })
    }

    /// Input features (columns) of the layer the factor belongs to.
    pub fn k(&self) -> usize {
        self.k
    }

    /// `U` (step 4), `[k, k]` row major, zero below the diagonal:
    /// `(A + λI)⁻¹ = Uᵀ U` for the hessian `A` with its dead columns set
    /// apart (step 1).
    pub fn u(&self) -> &[f64] {
        &self.u
    }
}

/// §3.9 step 5 for one row: `block` columns per scale (a group, or the
/// whole row for per-channel schemes), codes in `[lo, hi]` as the search
/// chooses them, scales stored as f16 when `grouped`. Writes `codes` (one
/// per column) and `scales` (one per block, as f32 values of the stored
/// scale).
#[allow(clippy::too_many_arguments)]
fn gptq_row(
    w: &[f32],
    f: &GptqFactor,
    block: usize,
    hi: i8,
    lo: i8,
    grouped: bool,
    codes: &mut [i8],
    scales: &mut [f32],
) -> Result<(), RecipeError> {
    let k = f.k;
    check_len("GPTQ row", k, w.len())?;
    signed_max(w, 0)?;
    let mut v: Vec<f64> = w
        .iter()
        .zip(&f.dead)
        .map(|(&x, &dead)| if dead { 0.0 } else { f64::from(x) })
        .collect();
    let mut cur = vec![0f32; block];
    for (b, scale) in scales.iter_mut().enumerate().take(k / block) {
        let start = b * block;
        // the block's scale from its columns as they are now, each
        // rounded to f32, weighted by its inputs' mean square (§3.8)
        for (c, &x) in cur.iter_mut().zip(&v[start..start + block]) {
            *c = x as f32;
        }
        let extremes = signed_max(&cur, start)?;
        let (s, l) = choose(
            Recipe::ActivationAware,
            &cur,
            Some(&f.diag[start..start + block]),
            extremes,
            hi,
            lo,
            grouped,
        )
        .ok_or(RecipeError::ScaleOverflow {
            row: 0,
            group: b,
            col_start: start,
            col_end: start + block,
            amax: extremes.0.max(extremes.1),
        })?;
        *scale = s;
        for j in start..start + block {
            let q = code_of(v[j] as f32, s, l, hi);
            codes[j] = q;
            let urow = &f.u[j * k..(j + 1) * k];
            let e = (v[j] - f64::from(s) * f64::from(q)) / urow[j];
            for (x, &uj) in v[j + 1..].iter_mut().zip(&urow[j + 1..]) {
                *x -= e * uj;
            }
        }
    }
    Ok(())
}

fn check_factor(w: &[f32], f: &GptqFactor) -> Result<(), RecipeError> {
    check_len("GPTQ row (the hessian's k)", f.k, w.len())
}

/// GPTQ (§3.9) of one Q8 row against the factor of its layer's hessian:
/// returns the f32 scale, writes codes in `[-127, 127]`. The scale is the
/// activation-aware search's (§3.8) on the row as given, weighted by the
/// hessian's diagonal.
pub fn quantize_row_q8_gptq(w: &[f32], f: &GptqFactor, codes: &mut [i8]) -> Result<f32, RecipeError> {
    check_factor(w, f)?;
    check_len("Q8 codes", w.len(), codes.len())?;
    let mut s = [0f32];
    gptq_row(w, f, w.len().max(1), Q8_MAX_ABS, -Q8_MAX_ABS, false, codes, &mut s)?;
    Ok(s[0])
}

/// GPTQ (§3.9) of one per-channel Q4 row: returns the f32 scale, writes
/// packed biased nibbles (codes in `[-8, 7]`).
pub fn quantize_row_q4_gptq(w: &[f32], f: &GptqFactor, packed: &mut [u8]) -> Result<f32, RecipeError> {
    check_factor(w, f)?;
    check_len("Q4 packed bytes", packed_row_bytes(w.len()), packed.len())?;
    let mut codes = vec![0i8; w.len()];
    let mut s = [0f32];
    gptq_row(
        w,
        f,
        w.len().max(1),
        Q4_MAX_ABS,
        -Q4_MAX_ABS - 1,
        false,
        &mut codes,
        &mut s,
    )?;
    pack_codes_biased(&codes, packed);
    Ok(s[0])
}

/// GPTQ (§3.9) of one grouped Q4 row: one f16 scale per group, chosen when
/// the row's quantization reaches the group, from the group's values as the
/// earlier columns' errors have left them. A group whose scale overflows
/// f16 is a [`RecipeError::ScaleOverflow`]; on error nothing is written.
pub fn quantize_row_q4_grouped_gptq(
    w: &[f32],
    f: &GptqFactor,
    group: usize,
    packed: &mut [u8],
    scales: &mut [f16],
) -> Result<(), RecipeError> {
    check_factor(w, f)?;
    let k = w.len();
    GroupSize::Group(group).validate(k)?;
    check_len("Q4 packed bytes", k / 2, packed.len())?;
    check_len("Q4 group scales", k / group, scales.len())?;
    let mut codes = vec![0i8; k];
    let mut chosen = vec![0f32; k / group];
    gptq_row(w, f, group, Q4_MAX_ABS, -Q4_MAX_ABS - 1, true, &mut codes, &mut chosen)?;
    pack_codes_biased(&codes, packed);
    for (out, &s) in scales.iter_mut().zip(&chosen) {
        *out = f16::from_f32(s);
    }
    Ok(())
}
