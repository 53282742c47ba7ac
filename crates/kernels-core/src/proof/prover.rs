//! The proof rows of each family, run through a table's entries.

use std::fmt;
use std::sync::Arc;

use qlinear_quant_recipe::QuantizedMatrix;

use super::inputs::*;
use super::*;
use crate::abi::activations::{ActivationsF32, ActivationsQ8, KernelError, OutputTile};
use crate::abi::family::{Gemm, Weights};
use crate::abi::panel::{GemmQ8Panels, PANEL_GROUP};
use crate::abi::rows::LayoutCache;
use crate::abi::table::GemmQ8Q8;
use crate::reference::group_sums::activation_group_sums;

impl Prover<'_> {
    pub(super) fn check<T: PartialEq + fmt::Debug>(&mut self, case: &str, k: usize, expected: T, got: T) {
        self.checks += 1;
        if self.mismatch.is_none() && expected != got {
            self.mismatch = Some(Mismatch {
                case: case.to_string(),
                k,
                expected: format!("{expected:?}"),
                got: format!("{got:?}"),
            });
        }
    }

    /// The layout cache for the all-extreme activation rows of pattern
    /// `x_sig`, `m` rows of `k`: past [`RANDOM_PROOF_MAX_K`] one per tier,
    /// shared by its families and proof rows that lay the same rows out
    /// alike (the cache checks the rows and the layout, and lays them out
    /// anew for any other). At the integer bounds each layout is a fresh
    /// megabyte, and its page faults were half of the selftest's in a VM.
    pub(super) fn layouts(&self, x_sig: i64, k: usize, m: usize) -> Arc<LayoutCache> {
        memo((self.table.name, x_sig, k, m), LayoutCache::default)
    }

    /// Activation rows a proof builds, or a recorded failure when the
    /// builder refuses them (a defect of the prover's own shapes).
    pub(super) fn built<T>(&mut self, case: &str, k: usize, rows: Result<T, KernelError>) -> Option<T> {
        match rows {
            Ok(rows) => Some(rows),
            Err(e) => {
                self.check(case, k, "activation rows accepted".to_string(), e.to_string());
                None
            }
        }
    }

    pub(super) fn prove_at(&mut self, k: usize) {
        use KernelFamily as F;
        if self.family.max_k().is_none() && k > FLOAT_PROOF_MAX_K {
            return;
        }
        if !self.entries_take_declared_operands(k) {
            return;
        }
        match self.family {
            F::DotI8I8 => {
                for (case, x, w) in patterns(&Q8_PATTERNS, k, [1, 4]) {
                    let (xa, wa) = (periodic_memo(x, k), periodic_memo(w, k));
                    let exact = exact_dot(k, x, |i| i64::from(w(i)));
                    self.check(case, k, exact, i64::from((self.table.dot_i8_i8)(&xa, &wa)));
                }
            }
            F::DotI8Q4 => {
                for (case, x, nib) in patterns(&Q4_PATTERNS, k, [0, 1]) {
                    let xa = periodic_memo(x, k);
                    // the packed row of the W4A8 proof's matrix
                    let w = q4_pattern_memo(nib, k, 0);
                    let Ok(w) = w.as_ref() else {
                        continue;
                    };
                    let exact = exact_dot(k, x, |i| i64::from(nib(i)) - 8);
                    let got = (self.table.dot_i8_q4)(&xa, w.packed());
                    self.check(case, k, exact, i64::from(got));
                }
            }
            F::QuantizeActivations => self.prove_quantizer(k),
            _ if self.family.weights() == Some(Weights::Q8) => {
                for (case, x, w) in patterns(&Q8_PATTERNS, k, [1, 4]) {
                    let wm = memo(("w, -w", sig(w), k, 0), || {
                        let mut codes = periodic(w, k);
                        codes.extend(periodic(w, k).iter().map(|&c| -c));
                        QuantizedMatrix::from_parts(2, k, codes, vec![1.0, 1.0])
                    });
                    let Ok(wm) = wm.as_ref() else {
                        continue;
                    };
                    let exact = exact_dot(k, x, |i| i64::from(w(i)));
                    self.prove_gemm_q8(case, k, x, sig(w), wm, [exact, -exact]);
                }
            }
            _ => {
                for (case, x, nib) in patterns(&Q4_PATTERNS, k, [0, 1]) {
                    self.prove_q4_pattern(case, k, x, nib);
                }
            }
        }
        if self.random && k <= RANDOM_PROOF_MAX_K {
            self.prove_random(k);
        }
        if let Some(panels) = self.table.panels(self.family) {
            if k <= RANDOM_PROOF_MAX_K && k.is_multiple_of(PANEL_GROUP) {
                self.prove_panels(panels, k, self.family.weights() == Some(Weights::Q4));
            }
        }
    }

    /// Whether the matrix entries of the family, the table's and the scalar
    /// one's, take the operands its row of `FAMILIES` declares
    /// ([`Gemm::takes`]); a mismatch is recorded as the proof's failure.
    fn entries_take_declared_operands(&mut self, k: usize) -> bool {
        let spec = self.family.spec();
        let Some(weights) = spec.weights else {
            return true;
        };
        for table in [&SCALAR, self.table] {
            let entry = table.gemm(self.family);
            if entry.is_some_and(|e| !e.takes(weights, spec.activations)) {
                let declared = format!("{weights:?} weights and {:?} activations", spec.activations);
                self.check(&format!("{}'s entry", table.name), k, declared, format!("{entry:?}"));
                return false;
            }
        }
        true
    }

    /// A table's W4A8 entry on the panel form ([`PanelsQ4`], grouped by 32
    /// or `per_channel`) against the scalar entry on the natural matrix,
    /// every table the scalar one included (its panel entries are other
    /// code): random rows with group scales of both signs (per channel,
    /// scales ≥ 0), then all-extreme rows; over 1 to 3 panels,
    /// M = 1 to 9 (the 4-row and 1-row tiles and their mixes), and ranges
    /// that start and end inside a panel (the driver splits by 8 rows). The
    /// cases and their reference outputs are built once per K and shared by
    /// every table ([`panel_cases`]).
    fn prove_panels(&mut self, panels: GemmQ8Panels, k: usize, per_channel: bool) {
        for case in panel_cases(k, per_channel).iter() {
            let PanelCase {
                name,
                m,
                rows,
                xc,
                xs,
                sums,
                panels: p,
                want,
                sum_group,
            } = case;
            let Some(p) = p else {
                self.check(name, k, "a panel form".to_string(), "none".to_string());
                return;
            };
            let layouts = LayoutCache::default();
            let Some(act) = self.built(name, k, ActivationsQ8::new(*m, k, xc, xs, sums, *sum_group)) else {
                return;
            };
            let act = act.with_layouts(&layouts);
            let width = rows.len();
            let mut got = vec![f32::NAN; m * width];
            panels(&act, p, rows.clone(), &mut OutputTile::new(&mut got, width));
            self.check(name, k, want.clone(), bits(&got));
        }
    }

    fn prove_quantizer(&mut self, k: usize) {
        let mut rng = Rng::new(k as u64);
        let rows: [Vec<f32>; 10] = [
            (0..k).map(|i| f32::from(alt(i)) * 0.5).collect(),
            (0..k).map(|i| (i % 255) as f32 - 127.0 + 0.5).collect(), // ties at .5 with scale 1
            (0..k).map(|_| rng.unit() * 1e-3).collect(),
            (0..k).map(|i| if i == 0 { 0.0 } else { rng.unit() * 3e38 }).collect(),
            near_ties(k),
            sparse_near_ties(k),
            // a subnormal scale: 190 · 2⁻¹⁴⁹ / 127 rounds to 2⁻¹⁴⁹, so the
            // quotients reach ±190 and the clamp acts at both ends
            (0..k)
                .map(|i| {
                    let n = if i == 0 { 190 } else { (i * 37 % 381) as i32 - 190 };
                    n as f32 * f32::from_bits(1)
                })
                .collect(),
            // NaN and ±∞ first, in the middle and last (a SIMD quantizer's
            // tail): the row is refused, whatever the codes
            (0..k).map(|i| if i == k - 1 { f32::NAN } else { rng.unit() }).collect(),
            (0..k)
                .map(|i| if i == k / 2 { f32::NEG_INFINITY } else { rng.unit() })
                .collect(),
            (0..k).map(|i| if i == 0 { f32::INFINITY } else { -f32::NAN }).collect(),
        ];
        // the scalar codes of every finite row, then rows of the extreme
        // codes: the group sums' input, many rows in one call as the
        // dispatch layer hands them
        let mut codes = Vec::new();
        for (n, row) in rows.iter().enumerate() {
            let (mut want, mut got) = (vec![0i8; k], vec![0i8; k]);
            let sw = (SCALAR.quantize_row_q8)(row, &mut want);
            let sg = (self.table.quantize_row_q8)(row, &mut got);
            if sw.is_none() {
                // a refused row's codes are unspecified
                (want, got) = (Vec::new(), Vec::new());
            }
            codes.extend_from_slice(&want);
            self.check(
                &format!("activation row {n}"),
                k,
                (sw.map(f32::to_bits), want),
                (sg.map(f32::to_bits), got),
            );
        }
        // (an odd count of rows: 9, with 6 finite rows above, so that an
        // odd K / 32 leaves an odd count of groups of 32)
        codes.extend((0..3 * k).map(|i| match i / k.max(1) {
            0 => 127,
            1 => -127,
            _ => ((i * 37 % 255) as i32 - 127) as i8,
        }));
        let mut groups = vec![1, 2, 32, k];
        groups.dedup();
        for g in groups.into_iter().filter(|&g| g > 0 && k.is_multiple_of(g)) {
            let (mut want, mut got) = (vec![0i32; codes.len() / g], vec![0i32; codes.len() / g]);
            (SCALAR.group_sums)(&codes, g, &mut want);
            (self.table.group_sums)(&codes, g, &mut got);
            self.check(&format!("activation sums by {g}"), k, want, got);
        }
    }

    /// Runs a 2-row Q8 matrix (pattern row, negated row) against the pattern
    /// activation (and its negation) through the family's entry: int8
    /// activations against the exact sums (W8A8), f32 ones against the
    /// scalar entry (W8A16).
    fn prove_gemm_q8(
        &mut self,
        case: &'static str,
        k: usize,
        x: fn(usize) -> i8,
        w_sig: i64,
        w: &QuantizedMatrix,
        exact: [i64; 2],
    ) {
        let xc = periodic_memo(x, k);
        let mut y = vec![f32::NAN; 2];
        let (entry, reference) = (self.table.gemm(self.family), SCALAR.gemm(self.family));
        if let Some(Gemm::Q8Q8(kernel)) = entry {
            let sums = activation_group_sums(&xc, 1, k, k);
            let layouts = self.layouts(sig(x), k, 1);
            let Some(act) = self.built(case, k, ActivationsQ8::new(1, k, &xc, &[1.0], &sums, k)) else {
                return;
            };
            let act = act.with_layouts(&layouts);
            kernel(&act, w, 0..2, &mut OutputTile::new(&mut y, 2));
            self.check(
                case,
                k,
                exact.map(|e| (e as f32).to_bits()),
                [y[0].to_bits(), y[1].to_bits()],
            );
            // a table with no batch tile (the scalar one) would only
            // repeat the rows above, 16 times over at the largest K
            if self.table.shapes(self.family).max_xr() > 1 {
                self.prove_w8a8_tile(kernel, case, &xc, (sig(x), w_sig), w, exact);
            }
        } else if let (Some(Gemm::F32Q8(kernel)), Some(Gemm::F32Q8(reference))) = (entry, reference) {
            let xf: Vec<f32> = xc.iter().map(|&c| f32::from(c)).collect();
            let layouts = LayoutCache::default();
            let Some(act) = self.built(case, k, ActivationsF32::new(1, k, &xf)) else {
                return;
            };
            let act = act.with_layouts(&layouts);
            let mut want = vec![f32::NAN; 2];
            reference(&act, w, 0..2, &mut OutputTile::new(&mut want, 2));
            kernel(&act, w, 0..2, &mut OutputTile::new(&mut y, 2));
            self.check(case, k, bits(&want), bits(&y));
        } else {
            // refused before: `entries_take_declared_operands`
            self.check(case, k, "a Q8 entry".to_string(), format!("{entry:?}"));
        }
    }

    /// The batch regime at the same K: 4 activation rows `x, -x, x, -x`
    /// against 4 weight rows `w, -w, w, -w` (the pattern matrix's two rows
    /// twice), which SIMD tiers run through a 4 × 4 register tile with its own
    /// arithmetic (biased operands, wrapping partial sums).
    fn prove_w8a8_tile(
        &mut self,
        kernel: GemmQ8Q8,
        case: &'static str,
        xc: &[i8],
        sigs: (i64, i64),
        w: &QuantizedMatrix,
        exact: [i64; 2],
    ) {
        let k = xc.len();
        let w4 = memo(("w, -w, w, -w", sigs.1, k, 0), || {
            let mut codes = Vec::with_capacity(4 * k);
            (0..4).for_each(|q| codes.extend_from_slice(w.row(q % 2)));
            QuantizedMatrix::from_parts(4, k, codes, vec![1.0; 4])
        });
        let Ok(w4) = w4.as_ref() else {
            return;
        };
        let sign = [1i8, -1, 1, -1];
        let x4 = memo(("x, -x, x, -x", sigs.0, k, 0), || {
            let mut x4 = Vec::with_capacity(4 * k);
            for s in sign {
                x4.extend(xc.iter().map(|&v| s * v));
            }
            x4
        });
        let sums = memo(("sums of x, -x, x, -x", sigs.0, k, 0), || {
            activation_group_sums(&x4, 4, k, k)
        });
        let layouts = self.layouts(sigs.0, k, 4);
        let Some(act) = self.built(case, k, ActivationsQ8::new(4, k, &x4, &[1.0; 4], &sums, k)) else {
            return;
        };
        let act = act.with_layouts(&layouts);
        let mut y = vec![f32::NAN; 16];
        kernel(&act, w4, 0..4, &mut OutputTile::new(&mut y, 4));
        let want: Vec<u32> = (0..16)
            .map(|t| ((i64::from(sign[t / 4]) * exact[t % 2]) as f32).to_bits())
            .collect();
        self.check(&format!("{case}, 4 x 4 tile"), k, want, bits(&y));
    }

    fn prove_q4_pattern(&mut self, case: &'static str, k: usize, x: fn(usize) -> i8, nib: fn(usize) -> u8) {
        let grouped = self.family.weights() == Some(Weights::Q4Grouped);
        let (entry, reference) = (self.table.gemm(self.family), SCALAR.gemm(self.family));
        if grouped && k % 2 == 1 {
            return;
        }
        let xc = periodic_memo(x, k);
        // Grouped: the smallest group (2) and the largest (one group of K); at
        // large K only the largest, which carries the i32 bound.
        let groups: &[usize] = if !grouped {
            &[0]
        } else if k == 0 {
            &[2]
        } else if k > FLOAT_PROOF_MAX_K {
            &[k]
        } else {
            &[2, k]
        };
        for &g in groups {
            let w = q4_pattern_memo(nib, k, if grouped { g } else { 0 });
            let Ok(w) = w.as_ref() else {
                continue;
            };
            let sum_group = if grouped { g } else { k };
            let sums = memo(("sums of x", sig(x), k, sum_group), || {
                activation_group_sums(&xc, 1, k, sum_group)
            });
            let mut y = [f32::NAN];
            let mut want = [f32::NAN];
            let case = format!("{case} group {g}");
            match (entry, reference) {
                (Some(Gemm::Q8Q4(kernel)), _) => {
                    let layouts = self.layouts(sig(x), k, 1);
                    let Some(act) = self.built(&case, k, ActivationsQ8::new(1, k, &xc, &[1.0], &sums, sum_group))
                    else {
                        continue;
                    };
                    let act = act.with_layouts(&layouts);
                    kernel(&act, w, 0..1, &mut OutputTile::new(&mut y, 1));
                    // exact per-group i64 sums, accumulated in f32 in increasing g as docs/NUMERICS.md §6
                    let g_len = if grouped { g } else { k.max(1) };
                    let mut sum = 0f32;
                    for start in (0..k).step_by(g_len) {
                        let acc = exact_dot(
                            g_len.min(k - start),
                            |i| x(start + i),
                            |i| i64::from(nib(start + i)) - 8,
                        );
                        sum += acc as f32 * 1.0;
                    }
                    want[0] = if grouped {
                        sum * 1.0
                    } else {
                        (exact_dot(k, x, |i| i64::from(nib(i)) - 8) as f32) * 1.0
                    };
                }
                (Some(Gemm::F32Q4(kernel)), Some(Gemm::F32Q4(reference))) => {
                    let xf: Vec<f32> = xc.iter().map(|&c| f32::from(c)).collect();
                    let layouts = LayoutCache::default();
                    let Some(act) = self.built(&case, k, ActivationsF32::new(1, k, &xf)) else {
                        continue;
                    };
                    let act = act.with_layouts(&layouts);
                    reference(&act, w, 0..1, &mut OutputTile::new(&mut want, 1));
                    kernel(&act, w, 0..1, &mut OutputTile::new(&mut y, 1));
                }
                // a Q4 family whose entry takes other operands (refused
                // before: `entries_take_declared_operands`)
                _ => self.check(&case, k, "a Q4 entry".to_string(), format!("{entry:?}")),
            }
            self.check(&case, k, bits(&want), bits(&y));
        }
    }
}

/// A row of quotients `x / s` a quarter from the integers (no quantizer
/// settles them) but at every 23rd column, which holds a value a few ulps
/// from a half-integer whose product `x · fl(1/s)` rounds to the other
/// integer than its quotient: a quantizer that tests a block of values for
/// the need to divide by anything short of each value's own distance (the
/// least of a block's distances, or only its first vector's) keeps one of
/// them wrong. ([`near_ties`] is near a half-integer throughout, so any
/// block of it divides.)
fn sparse_near_ties(k: usize) -> Vec<f32> {
    let amax = 3.0f32;
    let s = amax / f32::from(qlinear_quant_recipe::Q8_MAX_ABS);
    let r = 1.0 / s;
    // about one in 17 of these (`near_ties`' values) round the other way
    let wrong: Vec<f32> = near_ties(253 * 7)
        .into_iter()
        .skip(1)
        .filter(|x| (x * r).round_ties_even() != (x / s).round_ties_even())
        .collect();
    (0..k)
        .map(|i| match i {
            0 => amax,
            _ if i % 23 == 5 && !wrong.is_empty() => wrong[(i / 23) % wrong.len()],
            _ => ((i * 37 % 253) as f32 - 126.0 + 0.25) * s,
        })
        .collect()
}

/// A row whose quotients `x / s` fall on and a few ulps either side of
/// half-integers, at a scale (`s = 3 / 127`) whose reciprocal is far from
/// exact: a quantizer that multiplies by `1 / s` instead of dividing, without
/// settling the quotients near a half-integer by division, rounds about one
/// value in 17 of these to the other integer.
fn near_ties(k: usize) -> Vec<f32> {
    let amax = 3.0f32;
    let s = amax / f32::from(qlinear_quant_recipe::Q8_MAX_ABS);
    (0..k)
        .map(|i| {
            if i == 0 {
                return amax;
            }
            let n = (i * 37 % 253) as f32 - 126.0;
            let x = (n + 0.5) * s;
            // its magnitude nudged by (i mod 7) − 3 ulps
            f32::from_bits(x.to_bits().wrapping_add_signed((i % 7) as i32 - 3))
        })
        .collect()
}
