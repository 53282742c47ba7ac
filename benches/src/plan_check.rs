//! The plan's choice against the fastest proven tier of each
//! configuration, with a suspected loss measured again before it is called
//! one.

use std::time::Duration;

use qlinear::tiers::Route;
use qlinear::Int8Tier;
use serde_json::json;

use crate::{median, Case, FAMILIES};

/// The plan's choice against the fastest proven tier of one configuration
/// (family, M, shape, thread count, cache mode) in this run.
pub(crate) struct PlanPair {
    /// The `plan:` case.
    plan: usize,
    /// The chosen tier's own case (the plan case where the run has none).
    chosen: usize,
    /// The fastest tier's case by the matrix's medians.
    fastest: usize,
    /// The two tiers run one kernel for the family: their rows differ by
    /// noise alone, and the ratio is 1.
    same_kernel: bool,
    /// `chosen` over `fastest`, medians over the matrix's repeats.
    ratio: f64,
    /// The re-measurement of a suspected loss ([`confirm_losses`]).
    confirm: Option<Confirmation>,
}

/// A suspected loss measured again: the chosen and the fastest tier's cases
/// alternated for [`CONFIRM_ROUNDS`] rounds, right after the matrix.
pub(crate) struct Confirmation {
    chosen_us: Vec<f64>,
    fastest_us: Vec<f64>,
}

impl Confirmation {
    /// Median over median: the figure that decides `LOSES`.
    fn ratio(&self) -> f64 {
        median(&mut self.chosen_us.clone()) / median(&mut self.fastest_us.clone())
    }
}

impl PlanPair {
    /// The plan loses this configuration: over 5 % slower than the fastest
    /// tier, by the confirmation where there is one.
    fn loses(&self) -> bool {
        self.confirm.as_ref().map_or(self.ratio, Confirmation::ratio) > 1.05
    }
}

/// Rounds of a suspected loss's re-measurement. The fastest of two or
/// three tiers, picked by medians over three repeats, is the one whose
/// noise fell lowest (identical runs here differ by ±30 %, and a forced
/// tier's row and the plan row running the same kernel came out a third
/// apart in one run on the Zen 4 of issue 20): a loss is called only when
/// it holds up in a fresh, alternated A/B of the two tiers.
pub(crate) const CONFIRM_ROUNDS: usize = 7;

/// For every `plan:` case, its chosen tier's and the fastest tier's cases
/// of the same configuration, by the medians `med` of the matrix.
pub(crate) fn plan_pairs(cases: &[Case], med: &dyn Fn(usize) -> f64) -> Vec<PlanPair> {
    let mut out = vec![];
    for (c, case) in cases.iter().enumerate() {
        let Some(plan_tier) = case.tier.strip_prefix("plan:") else {
            continue;
        };
        let same = |o: &Case| {
            (o.family.as_str(), o.m, o.n, o.k, o.threads, o.cache)
                == (case.family.as_str(), case.m, case.n, case.k, case.threads, case.cache)
        };
        let Some(fastest) = (0..cases.len())
            .filter(|&i| same(&cases[i]) && !cases[i].tier.contains(':') && cases[i].tier != "gemm")
            .min_by(|&a, &b| med(a).total_cmp(&med(b)))
        else {
            continue;
        };
        // the chosen tier's own row: the plan row times the same code again,
        // and a choice is judged against the run's fastest, not against noise
        let chosen = cases.iter().position(|o| same(o) && o.tier == plan_tier).unwrap_or(c);
        // a tier running another's kernel for this family ties with it: the
        // difference between their rows is noise
        let family = FAMILIES.iter().find(|(_, f)| *f == case.family).map(|(k, _)| *k);
        let route = |t: &str| t.parse::<Int8Tier>().ok().and_then(|t| Route::for_tier(t).ok());
        let best = &cases[fastest].tier;
        let same_kernel = plan_tier != best
            && match (family, route(plan_tier), route(best)) {
                (Some(f), Some(a), Some(b)) => a.runs_same_kernel(&b, f),
                _ => false,
            };
        out.push(PlanPair {
            plan: c,
            chosen,
            fastest,
            same_kernel,
            ratio: if same_kernel { 1.0 } else { med(chosen) / med(fastest) },
            confirm: None,
        });
    }
    out
}

/// Measures every suspected loss of `pairs` (over 5 % by the matrix's
/// medians) again: the chosen and the fastest tier's cases alternated for
/// [`CONFIRM_ROUNDS`] rounds, each round in the other order.
pub(crate) fn confirm_losses(cases: &mut [Case], pairs: &mut [PlanPair], budget: Duration) {
    for p in pairs.iter_mut().filter(|p| p.ratio > 1.05) {
        let (mut chosen_us, mut fastest_us) = (vec![], vec![]);
        for round in 0..CONFIRM_ROUNDS {
            let order = if round % 2 == 0 {
                [p.chosen, p.fastest]
            } else {
                [p.fastest, p.chosen]
            };
            for c in order {
                let t = (cases[c].run)(budget);
                if c == p.chosen { &mut chosen_us } else { &mut fastest_us }.push(t);
            }
        }
        let c = Confirmation { chosen_us, fastest_us };
        eprintln!(
            "confirming {} against {} ({} M={} {}x{} t={} {}): {:.3} by the matrix, {:.3} alternated",
            cases[p.chosen].tier,
            cases[p.fastest].tier,
            cases[p.plan].family,
            cases[p.plan].m,
            cases[p.plan].n,
            cases[p.plan].k,
            cases[p.plan].threads,
            cases[p.plan].cache,
            p.ratio,
            c.ratio()
        );
        p.confirm = Some(c);
    }
}

/// Prints `pairs` (a configuration the plan loses, [`PlanPair::loses`], is
/// marked `LOSES`) and returns them as JSON rows.
pub(crate) fn plan_against_best(
    cases: &[Case],
    pairs: &[PlanPair],
    med: &dyn Fn(usize) -> f64,
) -> Vec<serde_json::Value> {
    println!(
        "\nthe plan's tier against the fastest tier of this run (medians; a row over 5 % is measured again, \
         {CONFIRM_ROUNDS} alternated rounds, and LOSES when the plan is still over 5 % slower)"
    );
    println!(
        "{:<10} {:>3} {:>6} {:>5} {:>2} {:<5} {:<18} {:>10} {:<18} {:>10} {:>6} {:>9}",
        "family", "m", "n", "k", "t", "cache", "plan", "us", "fastest", "us", "ratio", "again"
    );
    let mut out = vec![];
    for p in pairs {
        let case = &cases[p.plan];
        let plan_tier = case.tier.trim_start_matches("plan:");
        let best = &cases[p.fastest].tier;
        let (plan_us, best_us) = (med(p.chosen), med(p.fastest));
        let again = p.confirm.as_ref().map(Confirmation::ratio);
        println!(
            "{:<10} {:>3} {:>6} {:>5} {:>2} {:<5} {:<18} {:>10.1} {:<18} {:>10.1} {:>6.3} {:>9}{}",
            case.family,
            case.m,
            case.n,
            case.k,
            case.threads,
            case.cache,
            plan_tier,
            plan_us,
            best,
            best_us,
            p.ratio,
            again.map_or("-".to_string(), |r| format!("{r:.3}")),
            if p.same_kernel {
                "  (the same kernel)"
            } else if p.loses() {
                "  LOSES"
            } else {
                ""
            }
        );
        let confirm = p.confirm.as_ref().map(|c| {
            json!({ "rounds": CONFIRM_ROUNDS, "plan_us": c.chosen_us, "fastest_us": c.fastest_us, "ratio": c.ratio() })
        });
        out.push(json!({
            "family": case.family, "m": case.m, "n": case.n, "k": case.k, "threads": case.threads,
            "cache": case.cache, "plan_tier": plan_tier, "plan_us": plan_us, "fastest_tier": best,
            "fastest_us": best_us, "ratio": p.ratio, "same_kernel": p.same_kernel, "confirm": confirm,
            "loses": p.loses(),
        }));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Confirmation, PlanPair};

    #[test]
    fn a_loss_is_called_by_the_alternated_rounds_where_there_are_some() {
        let pair = |ratio: f64, confirm: Option<(Vec<f64>, Vec<f64>)>| PlanPair {
            plan: 0,
            chosen: 1,
            fastest: 2,
            same_kernel: false,
            ratio,
            confirm: confirm.map(|(chosen_us, fastest_us)| Confirmation { chosen_us, fastest_us }),
        };
        assert!(pair(1.06, None).loses());
        assert!(!pair(1.05, None).loses());
        // the matrix's 1.3 was noise: the rounds' medians are 63 against 84
        assert!(!pair(1.3, Some((vec![63.0, 90.0, 62.0], vec![84.0, 83.0, 60.0]))).loses());
        // and a real loss holds up: medians 110 against 100
        let real = pair(1.3, Some((vec![110.0, 200.0, 105.0], vec![100.0, 99.0, 150.0])));
        assert!((real.confirm.as_ref().unwrap().ratio() - 1.1).abs() < 1e-12);
        assert!(real.loses());
    }
}
