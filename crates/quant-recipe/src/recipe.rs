//! Named recipes beside the canonical one, in the same format: any
//! non-negative scale and any code the format holds runs on every tier with
//! the same bits, so a recipe may choose them however it likes
//! (`docs/NUMERICS.md` §3.6–§3.8). Each is deterministic to the bit.

use std::fmt;
use std::str::FromStr;

use half::f16;
use wide::f32x4;

use crate::{
    check_len, pack_codes_biased, packed_row_bytes, quantize_row_q4, quantize_row_q4_grouped, quantize_row_q8,
    GroupSize, RecipeError, Q4_MAX_ABS, Q8_MAX_ABS,
};

/// How scales and codes are chosen. Every recipe writes the same format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Recipe {
    /// `scale = max|w| / qmax`, codes in `[-qmax, qmax]` (§3.2–§3.4): the default.
    #[default]
    Canonical,
    /// Q4 uses the code −8 when the negative side dominates:
    /// `scale = max(max⁺ / 7, max⁻ / 8)` (§3.6). For Q8 the same as canonical
    /// (−128 is never emitted).
    FullRange,
    /// Per row or group, the candidate scale with the least squared
    /// reconstruction error (§3.7).
    Search,
    /// The search with each column's squared error weighted by an importance
    /// (§3.8), e.g. the mean `x²` of that input over calibration activations.
    /// Only through the `*_weighted` functions, which take the importance.
    ActivationAware,
    /// GPTQ (§3.9): each row quantized column by column, every rounding
    /// error spread over the columns still to come by the layer's input
    /// second moment (its "hessian"), each block's scale the activation-aware
    /// search's. Only through the `*_gptq` functions, which take the
    /// hessian's [`crate::GptqFactor`].
    Gptq,
}

impl Recipe {
    /// Every recipe, in the order the CLI lists them.
    pub const ALL: [Recipe; 5] = [
        Recipe::Canonical,
        Recipe::FullRange,
        Recipe::Search,
        Recipe::ActivationAware,
        Recipe::Gptq,
    ];
}

impl fmt::Display for Recipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Recipe::Canonical => "canonical",
            Recipe::FullRange => "full-range",
            Recipe::Search => "search",
            Recipe::ActivationAware => "activation-aware",
            Recipe::Gptq => "gptq",
        })
    }
}

impl FromStr for Recipe {
    type Err = RecipeError;
    /// `canonical`, `full-range`, `search`, `activation-aware` or `gptq`.
    fn from_str(s: &str) -> Result<Self, RecipeError> {
        Recipe::ALL
            .into_iter()
            .find(|r| r.to_string() == s)
            .ok_or_else(|| RecipeError::UnknownRecipe { recipe: s.to_string() })
    }
}

/// The divisors of the search's least-squares probes `max|w| / d` (§3.7):
/// a Q4 row 5.0, 5.5, …, 10.5; a Q4 group of a grouped row (fewer values,
/// so fewer candidates suffice, measured on all-MiniLM-L6-v2) 5.0, 5.5, …,
/// 8.0, 9.0, 10.0; a Q8 row around 127.
const SEARCH_Q4: [f32; 12] = [5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 8.5, 9.0, 9.5, 10.0, 10.5];
const SEARCH_Q4_GROUP: [f32; 9] = [5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 9.0, 10.0];
const SEARCH_Q8: [f32; 5] = [120.0, 124.0, 127.0, 130.0, 134.0];

/// `1.5 · 2²³`: for `|x| ≤ 2²²`, `(x + M) − M` is `x` rounded to the nearest
/// integer, ties to even, with no branch (the loops below vectorise).
const MAGIC: f32 = 12_582_912.0;

/// The probes of up to `4 · B` candidates at once, one candidate per vector
/// lane (§3.7 step 2): for candidate `c` with probe scale `p`, reciprocal
/// `r` and lowest code `lo`, `q_i = clamp(rte(w_i · r), lo, hi)`, the
/// residual `u_i = w_i − p·q_i`, `v_i = a_i·u_i` and `t_i = a_i·q_i`
/// (`v_i = u_i`, `t_i = q_i` without importance), and the sums
/// `(Σ v_i·u_i, Σ v_i·q_i, Σ t_i·q_i)`, each in f32 in increasing `i` from +0,
/// every product and difference rounded to f32. Residuals, not `Σ w·q`,
/// keep the error exact enough to rank Q8 candidates, whose error is ~10⁻⁵
/// of `Σ w²`. An unused lane has `p = r = 0` (its sums are ignored).
#[inline(always)]
fn probe_sums<const B: usize, const WEIGHTED: bool>(
    w: &[f32],
    a: &[f32],
    p: &[f32x4; B],
    r: &[f32x4; B],
    lo: &[f32x4; B],
    hi: f32,
) -> [[f32x4; B]; 3] {
    let (hiv, magic) = (f32x4::splat(hi), f32x4::splat(MAGIC));
    let mut acc = [[f32x4::splat(0.0); B]; 3];
    for (i, &x) in w.iter().enumerate() {
        let xv = f32x4::splat(x);
        let av = f32x4::splat(if WEIGHTED { a[i] } else { 1.0 });
        for b in 0..B {
            // clamp then round: the bounds are integers, so this is rte then clamp
            let q = ((xv * r[b]).fast_max(lo[b]).fast_min(hiv) + magic) - magic;
            let u = xv - p[b] * q;
            let (v, t) = if WEIGHTED { (av * u, av * q) } else { (u, q) };
            acc[0][b] += v * u;
            acc[1][b] += v * q;
            acc[2][b] += t * q;
        }
    }
    acc
}

/// A scale as it is stored: f32 as it is, or f16 (`None` if it overflows).
type Store = fn(f32) -> Option<f32>;

fn store_f32(s: f32) -> Option<f32> {
    Some(s)
}

#[inline]
fn store_f16(s: f32) -> Option<f32> {
    // f32 → f16 → f32 by bit arithmetic, inlined (a library call per
    // candidate was a tenth of the search); `f16_round_trip_matches_half`
    // checks it against `half` on every f32 class
    if s.is_nan() || s <= 0.0 {
        return Some(s); // 0, negative or NaN: callers keep 0 and skip the rest
    }
    if s >= 65520.0 {
        return None; // rounds to +∞
    }
    if s < 6.103_515_6e-5 {
        // f16 subnormal: a multiple of 2⁻²⁴ (both scalings exact)
        return Some((((s * 16_777_216.0) + MAGIC) - MAGIC) * 5.960_464_5e-8);
    }
    let b = s.to_bits();
    Some(f32::from_bits((b + 0xFFF + ((b >> 13) & 1)) & !0x1FFF))
}

/// `(max⁺, max⁻) = (max(0, max w_i), max(0, max −w_i))` of a block in one
/// pass, or the first non-finite value as an error at column `start + i`.
pub(crate) fn signed_max(w: &[f32], start: usize) -> Result<(f32, f32), RecipeError> {
    let (pos, neg, finite) = w.iter().fold((0f32, 0f32, true), |(p, n, ok), &v| {
        (p.max(v), n.max(-v), ok & v.is_finite())
    });
    if finite {
        return Ok((pos, neg));
    }
    let col = w.iter().position(|v| !v.is_finite()).unwrap_or(0);
    Err(RecipeError::NonFinite {
        row: 0,
        col: start + col,
        value: w[col],
    })
}

/// The stored scale of one block (a row or a group) of finite values with
/// `(max⁺, max⁻) = extremes` ([`signed_max`]), for a non-canonical recipe,
/// and the lowest code its codes use. `hi` is 7 or 127, `lo` is −8 (Q4) or
/// −127 (Q8); `a` is the block's importance (activation-aware search) or
/// `None` (all ones). `None`: the scale overflows its storage (f16).
pub(crate) fn choose(
    recipe: Recipe,
    w: &[f32],
    a: Option<&[f32]>,
    (pos, neg): (f32, f32),
    hi: i8,
    lo: i8,
    grouped: bool,
) -> Option<(f32, i8)> {
    let store: Store = if grouped { store_f16 } else { store_f32 };
    let amax = pos.max(neg);
    let canonical = store(amax / f32::from(hi));
    let full = || store((pos / f32::from(hi)).max(neg / -f32::from(lo)));
    match recipe {
        Recipe::Canonical => canonical.map(|s| (s, -hi)),
        Recipe::FullRange => full().map(|s| (s, lo)),
        Recipe::Search | Recipe::ActivationAware | Recipe::Gptq => {
            let fixed = [(canonical, -hi), (full(), lo)];
            // 2 + divisors candidates in 4 · B lanes
            let best = match (hi, grouped) {
                (Q4_MAX_ABS, false) => search::<4>(w, a, amax, fixed, &SEARCH_Q4, hi, lo, store),
                (Q4_MAX_ABS, true) => search::<3>(w, a, amax, fixed, &SEARCH_Q4_GROUP, hi, lo, store),
                _ => search::<2>(w, a, amax, fixed, &SEARCH_Q8, hi, lo, store),
            };
            best.or(canonical).map(|s| (s, lo))
        }
    }
}

/// §3.7 steps 1–3 for up to `4 · B` candidates: the two `fixed` ones
/// (stored scale, lowest code), then one least-squares candidate per
/// divisor. The chosen stored scale, or `None` if every candidate was
/// skipped.
#[allow(clippy::too_many_arguments)]
fn search<const B: usize>(
    w: &[f32],
    a: Option<&[f32]>,
    amax: f32,
    fixed: [(Option<f32>, i8); 2],
    divisors: &[f32],
    hi: i8,
    lo: i8,
    store: Store,
) -> Option<f32> {
    let mut lanes = [[[0f32; 4]; B]; 3]; // p, r, lo of each candidate
    let mut used = [false; 16];
    let probes = fixed.into_iter().chain(divisors.iter().map(|&d| (Some(amax / d), lo)));
    for (c, (p, l)) in probes.enumerate() {
        let (b, j) = (c / 4, c % 4);
        lanes[2][b][j] = f32::from(l);
        let Some(p) = p.filter(|p| *p > 0.0 && p.is_finite()) else {
            continue;
        };
        let r = 1.0 / p;
        if r.is_finite() {
            (lanes[0][b][j], lanes[1][b][j], used[c]) = (p, r, true);
        }
    }
    let vectors = |l: &[[f32; 4]; B]| -> [f32x4; B] { std::array::from_fn(|b| f32x4::from(l[b])) };
    let (pv, rv, lov) = (vectors(&lanes[0]), vectors(&lanes[1]), vectors(&lanes[2]));
    let sums = match a {
        Some(a) => probe_sums::<B, true>(w, a, &pv, &rv, &lov, f32::from(hi)),
        None => probe_sums::<B, false>(w, w, &pv, &rv, &lov, f32::from(hi)),
    };
    let arrays = |v: &[f32x4; B]| -> [[f32; 4]; B] { std::array::from_fn(|b| v[b].to_array()) };
    let (uu, uq, qq) = (arrays(&sums[0]), arrays(&sums[1]), arrays(&sums[2]));
    let mut best: Option<(f32, f64)> = None;
    for c in (0..2 + divisors.len()).filter(|&c| used[c]) {
        let (b, j) = (c / 4, c % 4);
        let p = lanes[0][b][j];
        let (uu, uq, qq) = (uu[b][j], uq[b][j], qq[b][j]);
        // the least-squares scale for these codes: p + Σv·q / Σt·q
        let s = if c < 2 {
            p
        } else {
            match store(p + uq / qq).filter(|s| *s > 0.0 && s.is_finite()) {
                Some(s) => s,
                None => continue,
            }
        };
        // Σ a(w − s·q)² = Σ a(u − d·q)², d = s − p, in f64
        let d = f64::from(s) - f64::from(p);
        let e = f64::from(uu) - 2.0 * d * f64::from(uq) + d * d * f64::from(qq);
        let e = if e.is_nan() { f64::INFINITY } else { e };
        if best.is_none_or(|(_, b)| e < b) {
            best = Some((s, e));
        }
    }
    best.map(|(s, _)| s)
}

fn codes_into(w: &[f32], s: f32, lo: i8, hi: i8, out: &mut [i8]) {
    for (c, &v) in out.iter_mut().zip(w) {
        *c = code_of(v, s, lo, hi);
    }
}

/// `clamp(rte(v / s), lo, hi)` (f32 division), 0 when `s` is 0: §3.7
/// step 5 for one value.
#[inline]
pub(crate) fn code_of(v: f32, s: f32, lo: i8, hi: i8) -> i8 {
    if s == 0.0 {
        return 0;
    }
    let (lo, hi) = (f32::from(lo), f32::from(hi));
    // rte(clamp(v / s)) read off the bits of `x + MAGIC`, which are MAGIC's
    // plus the integer: no saturating float-to-int cast
    let x = v / s;
    let x = if x < lo { lo } else { x };
    let x = if x > hi { hi } else { x };
    ((x + MAGIC).to_bits().wrapping_sub(MAGIC.to_bits())) as i8
}

/// The importance of a row (`None` for every recipe but activation-aware),
/// checked: one finite, non-negative value per column.
fn checked_importance(recipe: Recipe, a: Option<&[f32]>, k: usize) -> Result<Option<&[f32]>, RecipeError> {
    match (recipe, a) {
        (Recipe::ActivationAware, None) => Err(RecipeError::ImportanceRequired),
        (Recipe::Gptq, _) => Err(RecipeError::HessianRequired),
        (Recipe::ActivationAware, Some(a)) => {
            check_len("importance", k, a.len())?;
            if let Some((col, &value)) = a.iter().enumerate().find(|(_, v)| !(v.is_finite() && **v >= 0.0)) {
                return Err(RecipeError::BadImportance { col, value });
            }
            Ok(Some(a))
        }
        (_, _) => Ok(None),
    }
}

/// [`quantize_row_q8`] with `recipe`: returns the scale, writes codes in
/// `[-127, 127]`. `Canonical` is exactly `quantize_row_q8`;
/// `ActivationAware` needs [`quantize_row_q8_weighted`]
/// ([`RecipeError::ImportanceRequired`]).
pub fn quantize_row_q8_with(recipe: Recipe, w: &[f32], codes: &mut [i8]) -> Result<f32, RecipeError> {
    q8_row(recipe, w, None, codes)
}

/// The activation-aware search (§3.8) of one Q8 row: as
/// [`quantize_row_q8_with`], with column `i`'s squared error weighted by
/// `importance[i]` (finite, `>= 0`, one per column; e.g. the mean `x²` of
/// that input over calibration activations).
pub fn quantize_row_q8_weighted(w: &[f32], importance: &[f32], codes: &mut [i8]) -> Result<f32, RecipeError> {
    q8_row(Recipe::ActivationAware, w, Some(importance), codes)
}

pub(crate) fn q8_row(recipe: Recipe, w: &[f32], a: Option<&[f32]>, codes: &mut [i8]) -> Result<f32, RecipeError> {
    let a = checked_importance(recipe, a, w.len())?;
    if recipe == Recipe::Canonical {
        return quantize_row_q8(w, codes);
    }
    check_len("Q8 codes", w.len(), codes.len())?;
    let (s, lo) = choose(recipe, w, a, signed_max(w, 0)?, Q8_MAX_ABS, -Q8_MAX_ABS, false).unwrap_or((0.0, -Q8_MAX_ABS));
    codes_into(w, s, lo, Q8_MAX_ABS, codes);
    Ok(s)
}

/// [`quantize_row_q4`] with `recipe`: returns the f32 scale, writes packed
/// biased nibbles (codes in `[-8, 7]` for the non-canonical recipes).
/// `Canonical` is exactly `quantize_row_q4`; `ActivationAware` needs
/// [`quantize_row_q4_weighted`].
pub fn quantize_row_q4_with(recipe: Recipe, w: &[f32], packed: &mut [u8]) -> Result<f32, RecipeError> {
    q4_row(recipe, w, None, packed)
}

/// The activation-aware search (§3.8) of one Q4 row: as
/// [`quantize_row_q4_with`], weighted by `importance` (see
/// [`quantize_row_q8_weighted`]).
pub fn quantize_row_q4_weighted(w: &[f32], importance: &[f32], packed: &mut [u8]) -> Result<f32, RecipeError> {
    q4_row(Recipe::ActivationAware, w, Some(importance), packed)
}

pub(crate) fn q4_row(recipe: Recipe, w: &[f32], a: Option<&[f32]>, packed: &mut [u8]) -> Result<f32, RecipeError> {
    let a = checked_importance(recipe, a, w.len())?;
    if recipe == Recipe::Canonical {
        return quantize_row_q4(w, packed);
    }
    check_len("Q4 packed bytes", packed_row_bytes(w.len()), packed.len())?;
    let (s, lo) =
        choose(recipe, w, a, signed_max(w, 0)?, Q4_MAX_ABS, -Q4_MAX_ABS - 1, false).unwrap_or((0.0, -Q4_MAX_ABS));
    let mut codes = vec![0i8; w.len()];
    codes_into(w, s, lo, Q4_MAX_ABS, &mut codes);
    pack_codes_biased(&codes, packed);
    Ok(s)
}

/// [`quantize_row_q4_grouped`] with `recipe`: one f16 scale per group,
/// codes computed from the stored (rounded) scale. A group whose scale
/// overflows f16 is a [`RecipeError::ScaleOverflow`]; on error nothing is
/// written. `Canonical` is exactly `quantize_row_q4_grouped`;
/// `ActivationAware` needs [`quantize_row_q4_grouped_weighted`].
pub fn quantize_row_q4_grouped_with(
    recipe: Recipe,
    w: &[f32],
    group: usize,
    packed: &mut [u8],
    scales: &mut [f16],
) -> Result<(), RecipeError> {
    q4_grouped_row(recipe, w, None, group, packed, scales)
}

/// The activation-aware search (§3.8) of one grouped Q4 row: as
/// [`quantize_row_q4_grouped_with`], weighted by `importance` (one per
/// column of the row; see [`quantize_row_q8_weighted`]).
pub fn quantize_row_q4_grouped_weighted(
    w: &[f32],
    importance: &[f32],
    group: usize,
    packed: &mut [u8],
    scales: &mut [f16],
) -> Result<(), RecipeError> {
    q4_grouped_row(Recipe::ActivationAware, w, Some(importance), group, packed, scales)
}

pub(crate) fn q4_grouped_row(
    recipe: Recipe,
    w: &[f32],
    a: Option<&[f32]>,
    group: usize,
    packed: &mut [u8],
    scales: &mut [f16],
) -> Result<(), RecipeError> {
    let a = checked_importance(recipe, a, w.len())?;
    if recipe == Recipe::Canonical {
        return quantize_row_q4_grouped(w, group, packed, scales);
    }
    let k = w.len();
    GroupSize::Group(group).validate(k)?;
    check_len("Q4 packed bytes", k / 2, packed.len())?;
    check_len("Q4 group scales", k / group, scales.len())?;
    let mut chosen = Vec::with_capacity(k / group);
    for (g, src) in w.chunks_exact(group).enumerate() {
        let extremes = signed_max(src, g * group)?;
        let amax = extremes.0.max(extremes.1);
        let ga = a.map(|a| &a[g * group..(g + 1) * group]);
        let c =
            choose(recipe, src, ga, extremes, Q4_MAX_ABS, -Q4_MAX_ABS - 1, true).ok_or(RecipeError::ScaleOverflow {
                row: 0,
                group: g,
                col_start: g * group,
                col_end: (g + 1) * group,
                amax,
            })?;
        chosen.push(c);
    }
    let mut codes = vec![0i8; group];
    for ((src, dst), &(s, lo)) in w
        .chunks_exact(group)
        .zip(packed.chunks_exact_mut(group / 2))
        .zip(&chosen)
    {
        codes_into(src, s, lo, Q4_MAX_ABS, &mut codes);
        pack_codes_biased(&codes, dst);
    }
    for (out, &(s, _)) in scales.iter_mut().zip(&chosen) {
        *out = f16::from_f32(s);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn via_half(s: f32) -> Option<f32> {
        let h = f16::from_f32(s);
        (!h.is_infinite()).then(|| f32::from(h))
    }

    #[test]
    fn f16_round_trip_matches_half() {
        let check = |s: f32| {
            let (got, want) = (store_f16(s), via_half(s));
            if s > 0.0 {
                assert_eq!(
                    got.map(f32::to_bits),
                    want.map(f32::to_bits),
                    "{s:e} ({:#x})",
                    s.to_bits()
                );
            } else {
                assert!(s.is_nan() || got == Some(s), "{s}");
            }
        };
        // every f32 around the f16 range and its boundaries, then a stride
        for bits in (0x3300_0000u32..0x3900_0000).step_by(97) {
            check(f32::from_bits(bits));
            // the ties and their neighbours at this exponent
            let tie = (bits & !0x1FFF) | 0x1000;
            for b in [tie - 1, tie, tie + 1, tie + 0x2000] {
                check(f32::from_bits(b));
            }
        }
        for bits in (0..=0x7F80_0000u32).step_by(4093).chain(0x477F_E000..0x4780_2000) {
            check(f32::from_bits(bits));
        }
        for s in [
            0.0,
            -1.0,
            f32::NAN,
            65504.0,
            65519.99,
            65520.0,
            5.960_464_5e-8,
            2.980_232_2e-8,
            1e-45,
        ] {
            check(s);
        }
    }
}
