//! Named recipes beside the canonical one, in the same format: any
//! non-negative scale and any code the format holds runs on every tier with
//! the same bits, so a recipe may choose them however it likes
//! (`docs/NUMERICS.md` §3.6–§3.8). Each is deterministic to the bit.

use std::fmt;
use std::str::FromStr;

use half::f16;

use crate::{
    check_len, finite_amax, pack_codes_biased, packed_row_bytes, quantize_row_q4, quantize_row_q4_grouped,
    quantize_row_q8, round_ties_even, GroupSize, RecipeError, Q4_MAX_ABS, Q8_MAX_ABS,
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
}

impl Recipe {
    /// Every recipe, in the order the CLI lists them.
    pub const ALL: [Recipe; 3] = [Recipe::Canonical, Recipe::FullRange, Recipe::Search];
}

impl fmt::Display for Recipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Recipe::Canonical => "canonical",
            Recipe::FullRange => "full-range",
            Recipe::Search => "search",
        })
    }
}

impl FromStr for Recipe {
    type Err = RecipeError;
    /// `canonical`, `full-range` or `search`.
    fn from_str(s: &str) -> Result<Self, RecipeError> {
        Recipe::ALL
            .into_iter()
            .find(|r| r.to_string() == s)
            .ok_or_else(|| RecipeError::UnknownRecipe { recipe: s.to_string() })
    }
}

/// The divisors of the search's candidate scales `max|w| / d` (§3.7).
const SEARCH_Q4: [f32; 7] = [6.0, 6.5, 7.0, 7.5, 8.0, 8.5, 9.0];
const SEARCH_Q8: [f32; 5] = [120.0, 124.0, 127.0, 130.0, 134.0];

/// `clamp(rte(v / s), lo, hi)` for a positive finite `s`.
#[inline]
fn code(v: f32, s: f32, lo: i8, hi: i8) -> i8 {
    let q = round_ties_even(v / s);
    let q = if q < f32::from(lo) { f32::from(lo) } else { q };
    let q = if q > f32::from(hi) { f32::from(hi) } else { q };
    q as i8
}

/// `Σ v[i]` in the fixed f32 order of §6.2: 8 lanes, lane ℓ taking
/// positions ℓ, ℓ+8, … in increasing order, combined as
/// `((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))`. Whole chunks first, then the tail
/// into lanes 0.., which is the same order.
#[inline]
fn lane_sum(v: &[f32]) -> f32 {
    let mut l = [0f32; 8];
    let chunks = v.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for j in 0..8 {
            l[j] += c[j];
        }
    }
    for (j, &x) in tail.iter().enumerate() {
        l[j] += x;
    }
    ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
}

/// `q[i] = clamp(rte(w[i] / s), lo, hi)` as f32 (vectorises: no branches).
#[inline]
fn codes_f32(w: &[f32], s: f32, lo: i8, hi: i8, q: &mut [f32]) {
    let (lo, hi) = (f32::from(lo), f32::from(hi));
    for (o, &v) in q.iter_mut().zip(w) {
        let r = round_ties_even(v / s);
        let r = if r < lo { lo } else { r };
        *o = if r > hi { hi } else { r };
    }
}

/// `q[i] = clamp(rte(w[i] · r), lo, hi)` as f32: the probe codes of a
/// least-squares candidate, by one multiplication (`r = 1 / s`, rounded).
#[inline]
fn probe_codes_f32(w: &[f32], r: f32, lo: i8, hi: i8, q: &mut [f32]) {
    let (lo, hi) = (f32::from(lo), f32::from(hi));
    for (o, &v) in q.iter_mut().zip(w) {
        let c = round_ties_even(v * r);
        let c = if c < lo { lo } else { c };
        *o = if c > hi { hi } else { c };
    }
}

/// Scratch buffers of the search, reused across the blocks of a row.
#[derive(Default)]
struct Scratch {
    q: Vec<f32>,
    t: Vec<f32>,
}

impl Scratch {
    fn fit(&mut self, n: usize) {
        self.q.resize(n, 0.0);
        self.t.resize(n, 0.0);
    }
}

/// A scale as it is stored: f32 as it is, or f16 (`None` if it overflows).
type Store = fn(f32) -> Option<f32>;

fn store_f32(s: f32) -> Option<f32> {
    Some(s)
}

fn store_f16(s: f32) -> Option<f32> {
    let h = f16::from_f32(s);
    (!h.is_infinite()).then(|| f32::from(h))
}

/// The stored scale and the lowest code of one block (a row or a group) of
/// finite values with `max|w| = amax`, for a non-canonical recipe. `hi` is 7
/// or 127; `lo` is −8 for Q4 and −127 for Q8. `None`: every candidate's
/// scale overflows its storage (f16).
fn choose(recipe: Recipe, w: &[f32], amax: f32, hi: i8, lo: i8, store: Store, x: &mut Scratch) -> Option<(f32, i8)> {
    let full = || {
        let (pos, neg) = w.iter().fold((0f32, 0f32), |(p, n), &v| (p.max(v), n.max(-v)));
        store((pos / f32::from(hi)).max(neg / -f32::from(lo)))
    };
    match recipe {
        Recipe::Canonical => store(amax / f32::from(hi)).map(|s| (s, -hi)),
        Recipe::FullRange => full().map(|s| (s, lo)),
        Recipe::Search => {
            x.fit(w.len());
            // at most 2 + 7 candidates, in a fixed order
            let mut candidates = [(0f32, 0i8); 2 + SEARCH_Q4.len()];
            let mut count = 0;
            for c in [store(amax / f32::from(hi)).map(|s| (s, -hi)), full().map(|s| (s, lo))]
                .into_iter()
                .flatten()
            {
                candidates[count] = c;
                count += 1;
            }
            let divisors: &[f32] = if hi == Q4_MAX_ABS { &SEARCH_Q4 } else { &SEARCH_Q8 };
            for &d in divisors {
                let s = amax / d;
                if !(s > 0.0 && s.is_finite()) {
                    continue;
                }
                // the least-squares scale for the codes this scale gives
                probe_codes_f32(w, 1.0 / s, lo, hi, &mut x.q);
                x.t.iter_mut().zip(w).zip(&x.q).for_each(|((t, &v), &q)| *t = v * q);
                let wq = lane_sum(&x.t);
                x.t.iter_mut().zip(&x.q).for_each(|(t, &q)| *t = q * q);
                let qq = lane_sum(&x.t);
                if let Some(stored) = store(wq / qq).filter(|v| *v > 0.0 && v.is_finite()) {
                    candidates[count] = (stored, lo);
                    count += 1;
                }
            }
            // the first candidate with the least squared error (canonical wins ties)
            let mut best: Option<((f32, i8), f32)> = None;
            for &(s, l) in &candidates[..count] {
                if s == 0.0 {
                    x.t.iter_mut().zip(w).for_each(|(t, &v)| *t = v * v);
                } else {
                    codes_f32(w, s, l, hi, &mut x.q);
                    x.t.iter_mut().zip(w).zip(&x.q).for_each(|((t, &v), &q)| {
                        let e = v - s * q;
                        *t = e * e;
                    });
                }
                let e = lane_sum(&x.t);
                if best.is_none_or(|(_, b)| e < b) {
                    best = Some(((s, l), e));
                }
            }
            best.map(|(c, _)| c)
        }
    }
}

fn codes_into(w: &[f32], s: f32, lo: i8, hi: i8, out: &mut [i8]) {
    if s == 0.0 {
        out.fill(0);
    } else {
        for (c, &v) in out.iter_mut().zip(w) {
            *c = code(v, s, lo, hi);
        }
    }
}

/// [`quantize_row_q8`] with `recipe`: returns the scale, writes codes in
/// `[-127, 127]`. `Canonical` is exactly `quantize_row_q8`.
pub fn quantize_row_q8_with(recipe: Recipe, w: &[f32], codes: &mut [i8]) -> Result<f32, RecipeError> {
    if recipe == Recipe::Canonical {
        return quantize_row_q8(w, codes);
    }
    check_len("Q8 codes", w.len(), codes.len())?;
    let amax = finite_amax(w)?;
    let mut x = Scratch::default();
    let (s, lo) = choose(recipe, w, amax, Q8_MAX_ABS, -Q8_MAX_ABS, store_f32, &mut x).unwrap_or((0.0, -Q8_MAX_ABS));
    codes_into(w, s, lo, Q8_MAX_ABS, codes);
    Ok(s)
}

/// [`quantize_row_q4`] with `recipe`: returns the f32 scale, writes packed
/// biased nibbles (codes in `[-8, 7]` for the non-canonical recipes).
/// `Canonical` is exactly `quantize_row_q4`.
pub fn quantize_row_q4_with(recipe: Recipe, w: &[f32], packed: &mut [u8]) -> Result<f32, RecipeError> {
    if recipe == Recipe::Canonical {
        return quantize_row_q4(w, packed);
    }
    check_len("Q4 packed bytes", packed_row_bytes(w.len()), packed.len())?;
    let amax = finite_amax(w)?;
    let mut x = Scratch::default();
    let (s, lo) = choose(recipe, w, amax, Q4_MAX_ABS, -Q4_MAX_ABS - 1, store_f32, &mut x).unwrap_or((0.0, -Q4_MAX_ABS));
    let mut codes = vec![0i8; w.len()];
    codes_into(w, s, lo, Q4_MAX_ABS, &mut codes);
    pack_codes_biased(&codes, packed);
    Ok(s)
}

/// [`quantize_row_q4_grouped`] with `recipe`: one f16 scale per group,
/// codes computed from the stored (rounded) scale. A group whose every
/// candidate scale overflows f16 is a [`RecipeError::ScaleOverflow`]; on
/// error nothing is written. `Canonical` is exactly `quantize_row_q4_grouped`.
pub fn quantize_row_q4_grouped_with(
    recipe: Recipe,
    w: &[f32],
    group: usize,
    packed: &mut [u8],
    scales: &mut [f16],
) -> Result<(), RecipeError> {
    if recipe == Recipe::Canonical {
        return quantize_row_q4_grouped(w, group, packed, scales);
    }
    let k = w.len();
    GroupSize::Group(group).validate(k)?;
    check_len("Q4 packed bytes", k / 2, packed.len())?;
    check_len("Q4 group scales", k / group, scales.len())?;
    let mut chosen = Vec::with_capacity(k / group);
    let mut x = Scratch::default();
    for (g, src) in w.chunks_exact(group).enumerate() {
        let amax = crate::q4::group_amax(src, g * group)?;
        let c = choose(recipe, src, amax, Q4_MAX_ABS, -Q4_MAX_ABS - 1, store_f16, &mut x).ok_or(
            RecipeError::ScaleOverflow {
                row: 0,
                group: g,
                col_start: g * group,
                col_end: (g + 1) * group,
                amax,
            },
        )?;
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
