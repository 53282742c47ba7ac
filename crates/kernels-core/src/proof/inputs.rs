//! The proof's inputs: the period-2 patterns laid out, the memo that
//! shares the large ones between tables, and the panel proof's cases.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

use half::f16;
use qlinear_quant_recipe::{Q4Scales, QuantizedMatrixQ4, RecipeError};

use super::{Rng, RANDOM_PROOF_MAX_K};
use crate::abi::activations::{ActivationsQ8, OutputTile};
use crate::abi::panel::{PanelsQ4, PANEL_GROUP};
use crate::abi::rows::LayoutCache;
use crate::reference::group_sums::activation_group_sums;
use crate::scalar::SCALAR;

/// (what, the pattern's two values as [`sig`] gives them, K, group).
pub(super) type MemoKey = (&'static str, i64, usize, usize);
pub(super) type MemoMap = HashMap<(MemoKey, TypeId), Arc<OnceLock<Arc<dyn Any + Send + Sync>>>>;

/// The proof inputs at large K (past [`RANDOM_PROOF_MAX_K`]), built once per
/// selftest and shared by every tier: a fresh multi-megabyte buffer costs
/// page faults that, in a VM, took longer than the kernels run on it. Keyed
/// by what is built from which pattern values (so proof rows and families
/// laying out the same pattern share it), K and group; small inputs are
/// built each time.
pub(super) static MEMO: Mutex<Option<MemoMap>> = Mutex::new(None);

pub(super) fn memo<T: Any + Send + Sync>(key: MemoKey, build: impl FnOnce() -> T) -> Arc<T> {
    if key.2 <= RANDOM_PROOF_MAX_K {
        return Arc::new(build());
    }
    memo_shared(key, build)
}

/// [`memo`] at any K: for inputs that every table's proof reads alike and
/// whose building costs more than the proof (the panel proof's cases, with
/// their scalar reference outputs).
pub(super) fn memo_shared<T: Any + Send + Sync>(key: MemoKey, build: impl FnOnce() -> T) -> Arc<T> {
    let cell = {
        let mut map = MEMO.lock().unwrap_or_else(|e| e.into_inner());
        let map = map.get_or_insert_with(HashMap::new);
        map.entry((key, TypeId::of::<T>())).or_default().clone()
    };
    match cell.get_or_init(|| Arc::new(build())).clone().downcast() {
        Ok(value) => value,
        Err(_) => unreachable!("the map is keyed by the value's TypeId"),
    }
}

/// A period-2 proof pattern's two values, as one memo key.
pub(super) fn sig<T: Into<i64>>(f: fn(usize) -> T) -> i64 {
    f(0).into() * 65_536 + f(1).into()
}

/// [`periodic`] of `f` at `k`, shared by every proof row (activation or
/// weight) that lays out the same pattern.
pub(super) fn periodic_memo(f: fn(usize) -> i8, k: usize) -> Arc<Vec<i8>> {
    memo(("periodic", sig(f), k, 0), || periodic(f, k))
}

/// The one-row Q4 matrix of nibble pattern `nib` at `k`, per channel
/// (`g = 0`, scale 1) or in groups of `g` (f16 scales 1), shared by the
/// `dot_i8_q4`, W4A8 and W4A16 proofs.
pub(super) fn q4_pattern_memo(nib: fn(usize) -> u8, k: usize, g: usize) -> Arc<Result<QuantizedMatrixQ4, RecipeError>> {
    memo(("q4 row", sig(nib), k, g), || {
        let scales = if g == 0 {
            Q4Scales::PerChannel(vec![1.0])
        } else {
            Q4Scales::Grouped {
                group: g,
                scales: vec![f16::ONE; k / g],
            }
        };
        QuantizedMatrixQ4::from_parts_biased(1, k, pack_periodic(k, nib), scales)
    })
}

/// `[f(0), f(1), f(0), f(1), …]`, `k` long: a proof pattern (every one has
/// period 2) laid out without calling `f` per element, which at the largest
/// K would dominate the selftest.
pub(super) fn periodic(f: fn(usize) -> i8, k: usize) -> Vec<i8> {
    let pair = [f(0), f(1)];
    let mut v = vec![pair[0]; k];
    v.chunks_exact_mut(2).for_each(|c| c.copy_from_slice(&pair));
    v
}

/// The packed row of a period-2 nibble pattern: one repeated byte, and the
/// odd-K pad.
pub(super) fn pack_periodic(k: usize, nib: fn(usize) -> u8) -> Vec<u8> {
    let mut v = vec![nib(0) | nib(1) << 4; k.div_ceil(2)];
    if k % 2 == 1 {
        v[k / 2] = nib(0) | 8 << 4;
    }
    v
}

/// Exact `Σ_{i<k} x(i)·w(i)` in i64 for the proof patterns, which all have
/// period 2 (constant or alternating from an even column): the even columns
/// contribute `ceil(k/2)` times the first product, the odd ones `floor(k/2)`
/// times the second.
pub(super) fn exact_dot(k: usize, x: impl Fn(usize) -> i8, w: impl Fn(usize) -> i64) -> i64 {
    let (even, odd) = (k.div_ceil(2) as i64, (k / 2) as i64);
    even * i64::from(x(0)) * w(0) + if k > 1 { odd * i64::from(x(1)) * w(1) } else { 0 }
}

/// Frees the inputs shared between tables (built once at large K): they are for
/// one selftest run.
pub fn release_shared_inputs() {
    *MEMO.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// One call of the panel proof: its activation rows, the weight's panel
/// form (none if the form refused the matrix, which the proof reports) and
/// the scalar entry's bits on the natural matrix over `rows`.
pub(super) struct PanelCase {
    pub(super) name: &'static str,
    pub(super) m: usize,
    pub(super) rows: Range<usize>,
    pub(super) xc: Vec<i8>,
    pub(super) xs: Vec<f32>,
    pub(super) sums: Vec<i32>,
    /// Columns per activation sum: 32 grouped, `k` per channel.
    pub(super) sum_group: usize,
    pub(super) panels: Option<PanelsQ4>,
    pub(super) want: Vec<u32>,
}

/// The panel proof's calls at `k` (a multiple of 32) for W4A8 grouped by
/// 32 or (`per_channel`) per channel, built once per selftest and shared by
/// every table that has such a panel entry: the scalar reference on the
/// natural matrix costs more than the tiles it checks.
pub(super) fn panel_cases(k: usize, per_channel: bool) -> Arc<Vec<PanelCase>> {
    let sum_group = if per_channel { k } else { PANEL_GROUP };
    memo_shared(("panel cases", i64::from(per_channel), k, PANEL_GROUP), || {
        let mut rng = Rng::new(0x9A4E_1500 ^ k as u64 ^ u64::from(per_channel) << 40);
        // (m, n, output rows, extreme): one row over 5 panels, cut at both
        // ends, reaches a tier's pair tile twice and its 1-row tile on the
        // rest (`PanelFamily::pairs`)
        let calls: [(usize, usize, Range<usize>, bool); 6] = [
            (1, 16, 0..16, false),
            (1, 80, 8..72, false),
            (5, 48, 8..40, false),
            (9, 32, 0..32, false),
            (4, 16, 0..16, true),
            (1, 32, 0..32, true),
        ];
        let mut cases = vec![];
        for (m, n, rows, extreme) in calls {
            let (packed, xc): (Vec<u8>, Vec<i8>) = if extreme {
                (vec![0xFF; n * k / 2], vec![127; m * k])
            } else {
                ((0..n).flat_map(|_| rng.packed(k)).collect(), rng.codes(m * k))
            };
            let scales = if per_channel {
                Q4Scales::PerChannel((0..n).map(|_| rng.unit().abs()).collect())
            } else {
                Q4Scales::Grouped {
                    group: PANEL_GROUP,
                    scales: (0..n * k / PANEL_GROUP).map(|_| f16::from_f32(rng.unit())).collect(),
                }
            };
            let xs: Vec<f32> = (0..m).map(|_| rng.unit().abs() * 0.1).collect();
            let Ok(w) = QuantizedMatrixQ4::from_parts_biased(n, k, packed, scales) else {
                continue;
            };
            let sums = activation_group_sums(&xc, m, k, sum_group);
            let layouts = LayoutCache::default();
            let Ok(act) = ActivationsQ8::new(m, k, &xc, &xs, &sums, sum_group) else {
                continue;
            };
            let act = act.with_layouts(&layouts);
            let width = rows.len();
            let mut want = vec![f32::NAN; m * width];
            let reference = if per_channel {
                SCALAR.gemm_w4a8
            } else {
                SCALAR.gemm_w4a8_grouped
            };
            reference(&act, &w, rows.clone(), &mut OutputTile::new(&mut want, width));
            cases.push(PanelCase {
                name: match (extreme, per_channel) {
                    (true, false) => "panel rows, x=+127 nibble 15",
                    (false, false) => "panel rows",
                    (true, true) => "per-channel panel rows, x=+127 nibble 15",
                    (false, true) => "per-channel panel rows",
                },
                m,
                rows,
                panels: PanelsQ4::new(&w),
                want: bits(&want),
                xc,
                xs,
                sums,
                sum_group,
            });
        }
        cases
    })
}

pub(super) fn bits(y: &[f32]) -> Vec<u32> {
    y.iter().map(|v| v.to_bits()).collect()
}
