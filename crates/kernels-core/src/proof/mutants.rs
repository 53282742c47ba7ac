//! What a tier's tests share to show that its proof can fail: the families
//! a table fails ([`failing`], [`first_failure`]), a plain-Rust reference a
//! mutant tile may compute with ([`evenodd_dot`]), and tables built on the
//! frame around a test's own tiles ([`crate::w4a8_on_frame!`],
//! [`crate::panel_table!`]). Each kernel crate's `tests/` holds its tiers'
//! mutants: deliberately wrong kernels, each a plausible mistake of a real
//! tier, each of which must fail [`prove_kernel_table`].

use super::Mismatch;
use super::{default_census, prove_kernel_table};
use crate::abi::family::KernelFamily;
use crate::abi::table::KernelTable;

/// The families whose proof fails for `table` over the default census, in
/// the proof's order.
pub fn failing(table: &KernelTable) -> Vec<KernelFamily> {
    prove_kernel_table(table, &default_census())
        .iter()
        .filter(|p| p.mismatch.is_some())
        .map(|p| p.family)
        .collect()
}

/// The first mismatch of `family`'s proof for `table` over the default
/// census; panics if any other family fails (only `family` was mutated).
pub fn first_failure(table: &KernelTable, family: KernelFamily) -> Option<Mismatch> {
    let proofs = prove_kernel_table(table, &default_census());
    for p in &proofs {
        if p.family != family {
            assert!(p.mismatch.is_none(), "only {family} was mutated, {} failed", p.family);
        }
    }
    proofs.into_iter().find(|p| p.family == family).and_then(|p| p.mismatch)
}

/// `Σ x·b` (biased nibbles, uncorrected) of one activation row split even/odd
/// per 32 columns against one packed Q4 row, in plain Rust: the reference a
/// plain-Rust tile on `Layout::EvenOdd` (blocks of 32) computes with.
pub fn evenodd_dot(x: &[i8], w: &[u8]) -> i32 {
    let mut sum = 0;
    for (c, xs) in x.chunks(32).enumerate() {
        for (j, &p) in w[c * 16..c * 16 + 16].iter().enumerate() {
            sum += i32::from(xs[j]) * i32::from(p & 0x0F) + i32::from(xs[16 + j]) * i32::from(p >> 4);
        }
    }
    sum
}

/// `Σ x·b` (biased nibbles, uncorrected) over packed bytes `bytes` of
/// 64-column block `blk` on `Layout::EvenOdd` with blocks of 64 (the x86
/// tiers'): byte j holds column 2j (low nibble, at `x[64·blk + j]`) and
/// 2j + 1 (high nibble, at `x[64·blk + 32 + j]`).
pub fn evenodd64_dot(x: &[i8], w: &[u8], blk: usize, bytes: std::ops::Range<usize>) -> i32 {
    bytes
        .map(|j| {
            let b = w[32 * blk + j];
            i32::from(b & 0x0F) * i32::from(x[64 * blk + j]) + i32::from(b >> 4) * i32::from(x[64 * blk + 32 + j])
        })
        .sum()
}

/// For each `$module => $kernels`, `mod $module` with `TABLE`: the scalar
/// tier with its W4A8 GEMM on the frame, over `tiles` (micro-kernel
/// `kernels[i]` for `tiles[i]`), `chunk`, `block` and `layout` (a `Layout`
/// variant), which all the modules share. Each module sees its parent's
/// items (`use super::*`), so `kernels` may name the test file's functions.
#[macro_export]
macro_rules! w4a8_on_frame {
    (
        tiles: $tiles:expr,
        chunk: $chunk:expr,
        block: $block:expr,
        layout: $layout:ident;
        $($module:ident => $kernels:expr),+ $(,)?
    ) => {
        $(
            mod $module {
                #[allow(unused_imports)]
                use super::*;
                use qlinear_kernels_core::abi::tile::{Family, Layout, Shapes, TileI8Q4};
                const W4A8: Family<TileI8Q4> = Family {
                    shapes: Shapes {
                        tiles: $tiles,
                        chunk: $chunk,
                    },
                    kernels: $kernels,
                    block: $block,
                    layout: Layout::$layout,
                    scales_to_f32: qlinear_kernels_core::reference::float::scales_to_f32,
                };
                qlinear_kernels_core::frame_gemms! { w4a8: W4A8; ..qlinear_kernels_core::GemmShapes::SINGLE }
                pub(crate) static TABLE: qlinear_kernels_core::KernelTable = qlinear_kernels_core::KernelTable {
                    name: stringify!($module),
                    gemm_w4a8,
                    shapes: SHAPES,
                    ..qlinear_kernels_core::SCALAR
                };
            }
        )+
    };
}

/// `mod $module` with `TABLE`: the scalar tier with a panel entry
/// (`gemm_w4a8_grouped_panels`) on the frame's panel sweep, whose tiles of
/// `xr` activation rows (widest first, the last 1) all call `$with(x, sums,
/// panel, scales, out, $slip)`: a panel tile written once with its slips as
/// a parameter. With `per_channel` first, the per-channel panel entry
/// (`gemm_w4a8_panels`), whose tiles call `$with(x, sums, panel, out,
/// $slip)`. With `pair = $pair` last, the family's pair tile
/// (`PanelFamily::pairs`) calls `$pair` with the tiles' arguments (two
/// panels, 32 outputs) and `$slip`. The module sees its parent's items
/// (`use super::*`).
#[macro_export]
macro_rules! panel_table {
    (per_channel $module:ident, $with:path, $slip:expr, [$($xr:expr),+ $(,)?] $(, pair = $pair:path)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            use qlinear_kernels_core::abi::panel::{PanelFamily, TilePanelQ4PerChannel};
            fn tile(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], out: &mut [f32]) {
                $with(x, sums, panel, out, $slip)
            }
            const FAMILY: PanelFamily<TilePanelQ4PerChannel> = PanelFamily {
                tiles: &[$(($xr, tile as TilePanelQ4PerChannel)),+],
                pairs: $crate::panel_table!(@pair per_channel $slip $(, $pair)?),
            };
            qlinear_kernels_core::panel_entry!(per_channel fn entry = FAMILY);
            pub(crate) static TABLE: qlinear_kernels_core::KernelTable = qlinear_kernels_core::KernelTable {
                gemm_w4a8_panels: Some(entry),
                ..qlinear_kernels_core::SCALAR
            };
        }
    };
    ($module:ident, $with:path, $slip:expr, [$($xr:expr),+ $(,)?] $(, pair = $pair:path)?) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            use qlinear_kernels_core::abi::panel::PanelFamily;
            fn tile(x: &[&[i8]], sums: &[&[i32]], panel: &[u8], s: &[half::f16], out: &mut [f32]) {
                $with(x, sums, panel, s, out, $slip)
            }
            const FAMILY: PanelFamily = PanelFamily {
                tiles: &[$(($xr, tile as qlinear_kernels_core::abi::panel::TilePanelQ4)),+],
                pairs: $crate::panel_table!(@pair grouped $slip $(, $pair)?),
            };
            qlinear_kernels_core::panel_entry!(fn entry = FAMILY);
            pub(crate) static TABLE: qlinear_kernels_core::KernelTable = qlinear_kernels_core::KernelTable {
                gemm_w4a8_grouped_panels: Some(entry),
                gemm_w4a8_panels: None,
                ..qlinear_kernels_core::SCALAR
            };
        }
    };
    (@pair $kind:ident $slip:expr) => {
        None
    };
    (@pair per_channel $slip:expr, $pair:path) => {{
        fn pair(x: &[&[i8]], sums: &[&[i32]], panels: &[u8], out: &mut [f32]) {
            $pair(x, sums, panels, out, $slip)
        }
        Some(pair as qlinear_kernels_core::abi::panel::TilePanelQ4PerChannel)
    }};
    (@pair grouped $slip:expr, $pair:path) => {{
        fn pair(x: &[&[i8]], sums: &[&[i32]], panels: &[u8], s: &[half::f16], out: &mut [f32]) {
            $pair(x, sums, panels, s, out, $slip)
        }
        Some(pair as qlinear_kernels_core::abi::panel::TilePanelQ4)
    }};
}

/// The slips of a SIMD activation quantizer on the plan of the x86 tiers'
/// (AVX2, AVX-512): `max |x|` on the bits of `|x|`, then `x · (1/s)`
/// rounded, divided near half-integers ([`crate::reference::dot::q8_reciprocal`]).
#[derive(Clone, Copy, PartialEq)]
enum QuantizerSlip {
    /// Never divides: `x · (1/s)` rounded wherever it falls.
    Unsettled,
    /// Divides only where `x · (1/s)` is itself a tie.
    TiesOnly,
    /// Takes `max |x|` in floats, whose `max` passes over NaN.
    NanDropped,
    /// Tests each block of 64 values by the least of their distances from
    /// the integers (`vrangeps` asked for the smaller magnitude): a block
    /// divides only when every value in it is near a half-integer.
    BlockByLeast,
    /// Leaves the divided values to a saturating narrowing (to −128, not
    /// −127), as the kept ones may.
    UnclampedDivide,
    None,
}

/// The plan in plain Rust, with `slip`.
fn quantizer_with(x: &[f32], codes: &mut [i8], slip: QuantizerSlip) -> Option<f32> {
    let bits = match slip {
        QuantizerSlip::NanDropped => x.iter().fold(0f32, |m, v| m.max(v.abs())).to_bits(),
        _ => crate::reference::dot::abs_max_bits(0, x),
    };
    let scale = crate::reference::dot::q8_scale_from_abs_max_bits(bits)?;
    if scale == 0.0 {
        codes.fill(0);
        return Some(0.0);
    }
    let (r, near) = crate::reference::dot::q8_reciprocal(scale);
    let lim = f32::from(qlinear_quant_recipe::Q8_MAX_ABS);
    let far = |v: f32| {
        let y = v * r;
        (y - y.round_ties_even()).abs() > near
    };
    for (i, (o, &v)) in codes.iter_mut().zip(x).enumerate() {
        let y = v * r;
        let n = y.round_ties_even();
        // (a subnormal scale divides every value, slips or not)
        let settle = near < 0.0
            || match slip {
                QuantizerSlip::Unsettled => false,
                QuantizerSlip::TiesOnly => (y - n).abs() == 0.5,
                QuantizerSlip::BlockByLeast => match x.get(i / 64 * 64..i / 64 * 64 + 64) {
                    Some(block) => block.iter().all(|&v| far(v)),
                    None => far(v),
                },
                _ => far(v),
            };
        *o = match (settle, slip) {
            (true, QuantizerSlip::UnclampedDivide) => (v / scale).round_ties_even() as i8,
            (true, _) => (v / scale).round_ties_even().clamp(-lim, lim) as i8,
            // |y| < 127.5: within [−127, 127] already
            (false, _) => n as i8,
        };
    }
    Some(scale)
}

/// Panics unless every slip of the x86 quantizers' plan fails the
/// quantizer's proof and the plan done right passes it: so the proof's
/// rows reach what each step of the plan could get wrong.
pub fn assert_quantizer_slips_fail() {
    fn with(f: crate::abi::table::QuantizeRow) -> KernelTable {
        KernelTable {
            quantize_row_q8: f,
            ..crate::scalar::SCALAR
        }
    }
    let slips: [(crate::abi::table::QuantizeRow, &str); 5] = [
        (
            |x, c| quantizer_with(x, c, QuantizerSlip::Unsettled),
            "x · (1/s) never settled",
        ),
        (
            |x, c| quantizer_with(x, c, QuantizerSlip::TiesOnly),
            "settling only exact ties",
        ),
        (
            |x, c| quantizer_with(x, c, QuantizerSlip::NanDropped),
            "a float maximum passing over NaN",
        ),
        (
            |x, c| quantizer_with(x, c, QuantizerSlip::UnclampedDivide),
            "divided values narrowed to −128",
        ),
        (
            |x, c| quantizer_with(x, c, QuantizerSlip::BlockByLeast),
            "a block of 64 tested by its least distance",
        ),
    ];
    assert_activation_slips_fail(with, &slips, |x, c| quantizer_with(x, c, QuantizerSlip::None));
}

/// Panics unless each of `slips` (an entry and its mistake's name) fails
/// the quantizer family's proof in the table `with` builds around it, and
/// `right` passes it.
fn assert_activation_slips_fail<F: Copy>(with: impl Fn(F) -> KernelTable, slips: &[(F, &str)], right: F) {
    for &(f, what) in slips {
        assert!(
            first_failure(&with(f), KernelFamily::QuantizeActivations).is_some(),
            "{what} passed the proof"
        );
    }
    let right = first_failure(&with(right), KernelFamily::QuantizeActivations);
    assert!(right.is_none(), "{right:?}");
}

/// A group-sums plan's slips: groups of 32 taken `per_step` at a time, and
/// other groups in loads of `load` codes with the rest one by one (none:
/// masked loads, nothing left over).
#[derive(Clone, Copy, PartialEq)]
enum SumsSlip {
    /// A step's first two groups stored in each other's place.
    Swapped,
    /// The groups of 32 after the last whole step left unwritten.
    LastStepDropped,
    /// A group's codes after its last whole load left out.
    RestDropped,
    None,
}

fn sums_with(codes: &[i8], group: usize, sums: &mut [i32], per_step: usize, load: Option<usize>, slip: SumsSlip) {
    let sum = |g: &[i8]| g.iter().map(|&c| i32::from(c)).sum::<i32>();
    sums.fill(0);
    if group == 32 {
        for (step, g) in sums.chunks_mut(per_step).zip(codes.chunks(32 * per_step)) {
            let whole = step.len() == per_step;
            if !whole && slip == SumsSlip::LastStepDropped {
                continue;
            }
            for (s, g32) in step.iter_mut().zip(g.chunks(32)) {
                *s = sum(g32);
            }
            if whole && slip == SumsSlip::Swapped {
                step.swap(0, 1);
            }
        }
        return;
    }
    for (s, g) in sums.iter_mut().zip(codes.chunks_exact(group)) {
        *s = match (load, slip) {
            (Some(l), SumsSlip::RestDropped) => sum(&g[..g.len() / l * l]),
            _ => sum(g),
        };
    }
}

/// A plan's entry with one slip (`SLIP` indexes [`SumsSlip`]'s variants in
/// order), as the plain `fn` a table holds.
fn sums_entry<const PER_STEP: usize, const LOAD: usize, const SLIP: usize>(
    codes: &[i8],
    group: usize,
    sums: &mut [i32],
) {
    let slip = [
        SumsSlip::Swapped,
        SumsSlip::LastStepDropped,
        SumsSlip::RestDropped,
        SumsSlip::None,
    ][SLIP];
    sums_with(codes, group, sums, PER_STEP, Some(LOAD).filter(|&l| l > 0), slip);
}

/// Panics unless every slip of a tier's group-sums plan (`PER_STEP` groups
/// of 32 a step; other groups in loads of `LOAD` codes, or masked loads
/// when `LOAD` is 0) fails the quantizer family's proof, and the plan done
/// right passes it.
pub fn assert_group_sums_slips_fail<const PER_STEP: usize, const LOAD: usize>() {
    let with = |f: crate::abi::table::GroupSums| KernelTable {
        group_sums: f,
        ..crate::scalar::SCALAR
    };
    let mut slips: Vec<(crate::abi::table::GroupSums, &str)> = vec![
        (sums_entry::<PER_STEP, LOAD, 0>, "a step's groups swapped"),
        (
            sums_entry::<PER_STEP, LOAD, 1>,
            "the groups after the last whole step dropped",
        ),
    ];
    if LOAD > 0 {
        slips.push((
            sums_entry::<PER_STEP, LOAD, 2>,
            "a group's codes after its last whole load dropped",
        ));
    }
    assert_activation_slips_fail(with, &slips, sums_entry::<PER_STEP, LOAD, 3>);
}
