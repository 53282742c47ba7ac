//! Throughput of the recipes at k = 4096, in bytes of f32 input per second.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use half::f16;
use qlinear_quant_recipe::{quantize_row_q4, quantize_row_q4_grouped, quantize_row_q8};

fn recipes(c: &mut Criterion) {
    const K: usize = 4096;
    let w: Vec<f32> = (0..K).map(|i| ((i * 7919 % 1000) as f32 - 500.0) * 0.01).collect();
    let mut g = c.benchmark_group("recipe_k4096");
    g.throughput(Throughput::Bytes((K * 4) as u64));
    let mut codes = vec![0i8; K];
    g.bench_function("quantize_row_q8", |b| {
        b.iter(|| quantize_row_q8(black_box(&w), &mut codes).unwrap())
    });
    let mut packed = vec![0u8; K / 2];
    g.bench_function("quantize_row_q4", |b| {
        b.iter(|| quantize_row_q4(black_box(&w), &mut packed).unwrap())
    });
    let mut scales = vec![f16::ZERO; K / 32];
    g.bench_function("quantize_row_q4_grouped_g32", |b| {
        b.iter(|| quantize_row_q4_grouped(black_box(&w), 32, &mut packed, &mut scales).unwrap())
    });
    g.finish();
}

criterion_group!(benches, recipes);
criterion_main!(benches);
