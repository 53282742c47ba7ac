//! Criterion benches of the kernel families on every proven tier, M = 1 and
//! 16, (N, K) = (4096, 4096) (hot cache). `cargo xtask bench` runs the wider
//! hot/cold matrix with the bandwidth probe.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use qlinear::tiers::Route;
use qlinear::{selftest_report, GroupSize, QuantizedMatrix, QuantizedMatrixQ4};

fn kernels(c: &mut Criterion) {
    let (n, k) = (4096, 4096);
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 2001) as f32 - 1000.0) * 1e-3).collect();
    let q8 = QuantizedMatrix::quantize(n, k, &w).unwrap();
    let q4 = QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).unwrap();
    let q4g = QuantizedMatrixQ4::quantize(n, k, GroupSize::Group(32), &w).unwrap();
    for m in [1usize, 16] {
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 31 % 101) as f32 - 50.0) * 0.01).collect();
        let mut y = vec![0f32; m * n];
        let mut g = c.benchmark_group(format!("gemv_m{m}_4096x4096"));
        g.sample_size(20);
        for tier in selftest_report().proven_tiers() {
            let r = Route::for_tier(tier).unwrap();
            g.throughput(Throughput::Bytes((n * k) as u64));
            g.bench_function(BenchmarkId::new("w8a8", tier), |b| {
                b.iter(|| r.linear_q8_dynamic(black_box(&x), m, &q8, &mut y))
            });
            g.bench_function(BenchmarkId::new("w8a16", tier), |b| {
                b.iter(|| r.linear_w8a16(black_box(&x), m, &q8, &mut y))
            });
            g.throughput(Throughput::Bytes((n * k / 2) as u64));
            g.bench_function(BenchmarkId::new("w4a8", tier), |b| {
                b.iter(|| r.linear_q4_dynamic(black_box(&x), m, &q4, &mut y))
            });
            g.bench_function(BenchmarkId::new("w4a8_g32", tier), |b| {
                b.iter(|| r.linear_q4_dynamic(black_box(&x), m, &q4g, &mut y))
            });
            g.bench_function(BenchmarkId::new("w4a16", tier), |b| {
                b.iter(|| r.linear_w4a16(black_box(&x), m, &q4, &mut y))
            });
            g.bench_function(BenchmarkId::new("w4a16_g32", tier), |b| {
                b.iter(|| r.linear_w4a16(black_box(&x), m, &q4g, &mut y))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, kernels);
criterion_main!(benches);
