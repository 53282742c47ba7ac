//! Layers built inside a runtime's own rayon loop before anything was
//! proven: each layer's first use proves and plans its family
//! (`docs/NUMERICS.md` §8), and a proof that ran on the pool while holding
//! the process's proof would let the waiting thread take another of the
//! loop's tasks, which waits for that proof: a deadlock. Its own test
//! binary, so that nothing is proven before.

use std::time::Duration;

use qlinear::{Linear, QScheme};
use rayon::prelude::*;

#[test]
#[cfg_attr(target_family = "wasm", ignore = "WASI has no threads: rayon runs inline there")]
fn layers_built_on_the_pool_before_any_proof_finish() {
    // a deadlock fails the test instead of hanging the suite
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(300));
        eprintln!("layers built on the pool did not finish in 300 s: a deadlock");
        std::process::exit(101);
    });
    let (n, k) = (8, 64);
    let w: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.37).sin()).collect();
    let schemes = [QScheme::Q8, QScheme::Q4, QScheme::Q4Grouped(32), QScheme::Q4Grouped(16)];
    let x: Vec<f32> = (0..k).map(|i| (i as f32 * 0.11).cos()).collect();
    for threads in [4, 2, 1] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let outputs: Vec<Vec<f32>> = pool.install(|| {
            (0..16)
                .into_par_iter()
                .map(|i| {
                    let layer = Linear::from_f32(schemes[i % schemes.len()], n, k, &w, None).unwrap();
                    let mut y = vec![0f32; n];
                    layer.forward(&x, 1, &mut y).unwrap();
                    y
                })
                .collect()
        });
        // the same scheme gives the same bits whichever task built it
        for (i, y) in outputs.iter().enumerate() {
            assert_eq!(y, &outputs[i % schemes.len()], "layer {i} on {threads} threads");
            assert!(y.iter().any(|v| *v != 0.0));
        }
    }
}
