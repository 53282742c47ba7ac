//! `qlinear-bench --activations`: the activation side of a W8A8 or W4A8 call
//! on every proven tier, at the small models' K (384, 576, 1536) and 4096:
//! `Route::quantize_activations` of one row (its finiteness check, maximum
//! and codes), the same after a 64 KiB read of other data (the row in L2,
//! as a small layer's call finds it; the read's own time taken off), the
//! tier's `group_sums` of that row by 32 and per channel,
//! and the float families' layout of one row (`chunked_f32`, Q4 order by 32
//! and natural per channel), which is the same code on every tier. These
//! are the pieces of a call's fixed time that `--per-call` reports only
//! together ("outside the kernels"); the scalar tier's rows are the
//! portable code's.
//!
//! Each figure is the median of 15 batches of 2 000 calls (a call is well
//! under a microsecond, so one clock read per call would weigh on it), in
//! µs a call; rows are timed in turn, three rounds, and the median of the
//! rounds' medians is printed with their range.

use std::hint::black_box;
use std::time::Instant;

use qlinear::selftest_report;
use qlinear::tiers::Route;
use qlinear_kernels_core::activation_group_sums_with;
use qlinear_kernels_core::frame::layout::chunked_f32;

use crate::data;

/// One row of the table: its piece, its tier and what times it.
type Row = (String, String, Box<dyn FnMut() -> f64>);

/// µs a call of `f`: the median of 15 batches of 2 000 calls.
fn per_call_us(mut f: impl FnMut()) -> f64 {
    f();
    let mut batches: Vec<f64> = (0..15)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..2000 {
                f();
            }
            t.elapsed().as_secs_f64() * 1e6 / 2000.0
        })
        .collect();
    crate::median(&mut batches)
}

/// Prints the table (module documentation).
pub fn run() {
    const ROUNDS: usize = 3;
    println!("the activation side of a call, one row, µs a call: median of {ROUNDS} rounds (min–max)");
    println!("| K | piece | tier | µs |");
    println!("|--:|---|---|--:|");
    for k in [384usize, 576, 1536, 4096] {
        let x = data(k, 2);
        let mut rows: Vec<Row> = Vec::new();
        for tier in selftest_report().proven_tiers() {
            let route = Route::for_tier(tier).expect("a proven tier has a route");
            let table = route.table().expect("a proven tier has a table");
            let xq = x.clone();
            let (mut codes, mut scales) = (vec![0i8; k], vec![0f32; 1]);
            rows.push((
                "quantize_activations".into(),
                tier.to_string(),
                Box::new(move || {
                    per_call_us(|| {
                        route
                            .quantize_activations(black_box(&xq), 1, &mut codes, &mut scales)
                            .expect("finite activations")
                    })
                }),
            ));
            // the row as a decode call finds it: read 64 KiB of other data
            // first (a small layer's weights pass through L1 between two
            // calls), and take that read's own time off
            let xq = x.clone();
            let (mut codes_l2, mut scales_l2) = (vec![0i8; k], vec![0f32; 1]);
            let other = vec![1u8; 64 << 10];
            let read_other = move || {
                let mut t = 0u8;
                for i in (0..other.len()).step_by(64) {
                    t = t.wrapping_add(black_box(other[i]));
                }
                black_box(t);
            };
            rows.push((
                "quantize_activations, row from L2".into(),
                tier.to_string(),
                Box::new(move || {
                    let both = per_call_us(|| {
                        read_other();
                        route
                            .quantize_activations(black_box(&xq), 1, &mut codes_l2, &mut scales_l2)
                            .expect("finite activations")
                    });
                    both - per_call_us(&read_other)
                }),
            ));
            let mut codes = vec![0i8; k];
            route
                .quantize_activations(&x, 1, &mut codes, &mut [0f32])
                .expect("finite activations");
            for (label, group) in [("group_sums by 32", 32), ("group_sums per channel", k)] {
                let (codes, f) = (codes.clone(), table.group_sums);
                let mut sums = Vec::new();
                rows.push((
                    label.into(),
                    tier.to_string(),
                    Box::new(move || {
                        per_call_us(|| activation_group_sums_with(f, black_box(&codes), 1, k, group, &mut sums))
                    }),
                ));
            }
        }
        for (label, group, q4) in [
            ("float layout, Q4 order by 32", 32, true),
            ("float layout per channel", k, false),
        ] {
            let x = x.clone();
            rows.push((
                label.into(),
                "every tier".into(),
                Box::new(move || {
                    per_call_us(|| {
                        black_box(chunked_f32(black_box(&x), group, q4));
                    })
                }),
            ));
        }
        let mut times = vec![Vec::new(); rows.len()];
        for _ in 0..ROUNDS {
            for (row, t) in rows.iter_mut().zip(&mut times) {
                t.push((row.2)());
            }
        }
        for ((label, who, _), mut t) in rows.into_iter().zip(times) {
            let (lo, hi) = (
                t.iter().copied().fold(f64::MAX, f64::min),
                t.iter().copied().fold(0f64, f64::max),
            );
            println!(
                "| {k} | {label} | {who} | {:.3} ({lo:.3}–{hi:.3}) |",
                crate::median(&mut t)
            );
        }
    }
}
