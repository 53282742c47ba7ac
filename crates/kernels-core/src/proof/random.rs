//! The random-row proof of a matrix family: random codes and scales
//! against the scalar table, in calls shaped by the tiles the table
//! declares.

use half::f16;
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrix, QuantizedMatrixQ4};

use super::inputs::*;
use super::*;
use crate::abi::activations::{ActivationsF32, ActivationsQ8, OutputTile};
use crate::abi::family::{Gemm, Weights};
use crate::abi::rows::LayoutCache;
use crate::reference::group_sums::activation_group_sums;

impl Prover<'_> {
    /// Random rows (random codes and scales) against the scalar table, in
    /// calls shaped by the tiles the table declares for the family
    /// ([`Shapes::proof_calls`](qlinear_kernels_core::abi::tile::Shapes::proof_calls)):
    /// M runs the largest activation-row tile twice and then its largest
    /// leftover, N likewise for weight rows (with a call of its own for a
    /// smaller activation tile that needs more weight rows), and at
    /// [`CHUNK_PROOF_K`] N first fills one whole weight-row chunk; below
    /// [`TAIL_PROOF_BELOW`] every tile once
    /// ([`Shapes::tail_proof_calls`](qlinear_kernels_core::abi::tile::Shapes::tail_proof_calls)).
    /// A new tile is covered the moment it is declared.
    pub(super) fn prove_random(&mut self, k: usize) {
        let shapes = self.table.shapes(self.family);
        let calls = if k < TAIL_PROOF_BELOW {
            shapes.tail_proof_calls()
        } else {
            shapes.proof_calls(CHUNK_PROOF_K.contains(&k))
        };
        let mut rng = Rng::new(0xC0FFEE ^ k as u64 ^ ((self.family as u64) << 32));
        for (m, n) in calls {
            self.prove_random_rows(&mut rng, m, n, k);
        }
    }

    /// One call of the random rows: `m` activation rows against `n` weight rows.
    fn prove_random_rows(&mut self, rng: &mut Rng, m: usize, n: usize, k: usize) {
        use KernelFamily as F;
        let float = self.family.float_activations();
        let xc: Vec<i8> = rng.codes(m * k);
        let xs: Vec<f32> = (0..m).map(|_| rng.unit().abs() * 0.1).collect();
        // f32 activations only where a float family reads them
        let xf: Vec<f32> = if float {
            (0..m * k).map(|_| rng.unit() * 4.0).collect()
        } else {
            Vec::new()
        };
        let case = "random rows";
        let layouts_f = LayoutCache::default();
        // no rows where no float family reads them
        let Some(act_f) = self.built(case, k, ActivationsF32::new(if float { m } else { 0 }, k, &xf)) else {
            return;
        };
        let act_f = act_f.with_layouts(&layouts_f);
        let run = |kernel: &dyn Fn(&mut OutputTile<'_>)| {
            let mut y = vec![f32::NAN; m * n];
            kernel(&mut OutputTile::new(&mut y, n));
            y
        };
        match self.family {
            F::DotI8I8 => {
                let w: Vec<i8> = rng.codes(k);
                self.check(
                    case,
                    k,
                    (SCALAR.dot_i8_i8)(&xc[..k], &w),
                    (self.table.dot_i8_i8)(&xc[..k], &w),
                );
            }
            F::DotI8Q4 => {
                let p = rng.packed(k);
                self.check(
                    case,
                    k,
                    (SCALAR.dot_i8_q4)(&xc[..k], &p),
                    (self.table.dot_i8_q4)(&xc[..k], &p),
                );
            }
            F::QuantizeActivations => {}
            _ if self.family.weights() == Some(Weights::Q8) => {
                let codes: Vec<i8> = rng.codes(n * k);
                let scales: Vec<f32> = (0..n).map(|_| rng.unit().abs() * 0.01).collect();
                let Ok(w) = QuantizedMatrix::from_parts(n, k, codes, scales) else {
                    return;
                };
                let sums = activation_group_sums(&xc, m, k, k);
                let layouts = LayoutCache::default();
                let Some(act) = self.built(case, k, ActivationsQ8::new(m, k, &xc, &xs, &sums, k)) else {
                    return;
                };
                let act = act.with_layouts(&layouts);
                let (entry, reference) = (self.table.gemm(self.family), SCALAR.gemm(self.family));
                let kernel = |rows: std::ops::Range<usize>, t: &mut OutputTile<'_>| {
                    run_gemm(entry, &act, &act_f, Matrix::Q8(&w), rows, t)
                };
                let want = run(&|t| run_gemm(reference, &act, &act_f, Matrix::Q8(&w), 0..n, t));
                self.check(case, k, bits(&want), bits(&run(&|t| kernel(0..n, t))));
                // the outputs from row n / 3 on, as the driver's tasks and
                // `forward_rows` ask for them (a range that starts inside the
                // matrix, off the tiles' multiples): each output's bits are
                // those of the whole call's
                let r0 = n / 3;
                let mut part = vec![f32::NAN; m * (n - r0)];
                kernel(r0..n, &mut OutputTile::new(&mut part, n - r0));
                let want_part: Vec<f32> = want
                    .chunks(n.max(1))
                    .flat_map(|row| row[r0..].iter().copied())
                    .collect();
                self.check("random rows from row n / 3", k, bits(&want_part), bits(&part));
            }
            _ => {
                let grouped = self.family.weights() == Some(Weights::Q4Grouped);
                let g = [64, 32, 8, 2].into_iter().find(|g| k.is_multiple_of(*g)).unwrap_or(0);
                if grouped && g == 0 {
                    return;
                }
                // groups of 32 as well once there are 8 of them: the SIMD
                // tiers' fast path for q4g32, which a group of 64 never takes
                // (K 256, 384 and 1024 reach its 8-group steps, the groups
                // after them and the 8-row batch tile; its code does not
                // change with K beyond that)
                if grouped && g == 64 && (256..=1024).contains(&k) {
                    self.prove_random_q4(rng, m, n, k, 32, &xc, &xs, &act_f, &run, case);
                }
                self.prove_random_q4(rng, m, n, k, g, &xc, &xs, &act_f, &run, case);
            }
        }
    }

    /// The random rows of the Q4 families with group `g` (grouped families).
    #[allow(clippy::too_many_arguments)]
    fn prove_random_q4(
        &mut self,
        rng: &mut Rng,
        m: usize,
        n: usize,
        k: usize,
        g: usize,
        xc: &[i8],
        xs: &[f32],
        act_f: &ActivationsF32<'_>,
        run: &RunTile<'_>,
        case: &'static str,
    ) {
        let grouped = self.family.weights() == Some(Weights::Q4Grouped);
        let packed: Vec<u8> = (0..n).flat_map(|_| rng.packed(k)).collect();
        let scales = if grouped {
            Q4Scales::Grouped {
                group: g,
                // both signs: a group scale may be negative (NUMERICS §4)
                scales: (0..n * k / g).map(|_| f16::from_f32(rng.unit())).collect(),
            }
        } else {
            Q4Scales::PerChannel((0..n).map(|_| rng.unit().abs() * 0.01).collect())
        };
        let Ok(w) = QuantizedMatrixQ4::from_parts_biased(n, k, packed, scales) else {
            return;
        };
        let sum_group = if grouped { g } else { k };
        let sums = activation_group_sums(xc, m, k, sum_group);
        let layouts = LayoutCache::default();
        let Some(act) = self.built(case, k, ActivationsQ8::new(m, k, xc, xs, &sums, sum_group)) else {
            return;
        };
        let act = act.with_layouts(&layouts);
        let (entry, reference) = (self.table.gemm(self.family), SCALAR.gemm(self.family));
        let want = run(&|t| run_gemm(reference, &act, act_f, Matrix::Q4(&w), 0..n, t));
        let got = run(&|t| run_gemm(entry, &act, act_f, Matrix::Q4(&w), 0..n, t));
        self.check(case, k, bits(&want), bits(&got));
    }
}

/// A weight matrix of either code width, for [`run_gemm`].
#[derive(Clone, Copy)]
pub(super) enum Matrix<'a> {
    Q8(&'a QuantizedMatrix),
    Q4(&'a QuantizedMatrixQ4),
}

/// Runs a family's matrix entry (`KernelTable::gemm`) over `rows` of `w`,
/// on the activations its type takes: the int8 rows `act` or the f32 rows
/// `act_f`. An entry that does not read `w`'s codes, or none, writes
/// nothing: `Prover::prove_at` first checks that the family's entries
/// take its declared operands ([`Gemm::takes`]).
pub(super) fn run_gemm(
    entry: Option<Gemm>,
    act: &ActivationsQ8<'_>,
    act_f: &ActivationsF32<'_>,
    w: Matrix<'_>,
    rows: std::ops::Range<usize>,
    t: &mut OutputTile<'_>,
) {
    match (entry, w) {
        (Some(Gemm::Q8Q8(f)), Matrix::Q8(w)) => f(act, w, rows, t),
        (Some(Gemm::F32Q8(f)), Matrix::Q8(w)) => f(act_f, w, rows, t),
        (Some(Gemm::Q8Q4(f)), Matrix::Q4(w)) => f(act, w, rows, t),
        (Some(Gemm::F32Q4(f)), Matrix::Q4(w)) => f(act_f, w, rows, t),
        _ => {}
    }
}

/// Runs a kernel on a fresh NaN-filled output and returns the output.
type RunTile<'a> = dyn Fn(&dyn Fn(&mut OutputTile<'_>)) -> Vec<f32> + 'a;
