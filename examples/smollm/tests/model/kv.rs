//! A bfloat16 KV cache: half the bytes, the same bits on every split and
//! between a batch and its positions one by one, and logits near the f32
//! cache's (each key and value rounded once, to 8 significant bits).

use qlinear_smollm::KvPrecision;

use super::*;

#[test]
fn a_bf16_cache_holds_half_the_bytes_and_keeps_the_step_law() {
    let dir = tempfile::tempdir().unwrap();
    let ids = [3u32, 61, 7, 0, 42, 18, 69, 5, 33];
    let file = small(dir.path(), Some(QScheme::Q8), 0.75);
    let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
    let mut model = Model::from_converted(&file, &meta, &Modes::default()).unwrap();
    assert_eq!(model.kv_precision(), KvPrecision::F32);
    let f32_cache = model.cache(32).unwrap();
    model.set_kv_precision(KvPrecision::Bf16);
    let mut batch = model.cache(32).unwrap();
    assert_eq!(batch.precision(), KvPrecision::Bf16);
    // 2 blocks × (keys and values) × 3 KV heads × 16 × 32 positions
    assert_eq!(f32_cache.bytes(), 2 * 2 * 3 * 16 * 32 * 4);
    assert_eq!(batch.bytes() * 2, f32_cache.bytes());
    let bits = |l: &[f32]| l.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    let all = bits(model.forward(&mut batch, &ids, true).unwrap());
    let vocab = model.vocab();
    // position by position, on one thread and on teams: the batch's bits
    for threads in [1, 2, 3] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let mut step = model.cache(32).unwrap();
            for (i, &t) in ids.iter().enumerate() {
                let l = bits(model.forward(&mut step, &[t], false).unwrap());
                assert_eq!(l, all[i * vocab..(i + 1) * vocab], "position {i}, {threads} threads");
            }
        });
    }
    // near the f32 cache's logits, and not equal to them: the cache is read
    let mut exact = KvCache::new(&model.config, 32).unwrap();
    let want = model.forward(&mut exact, &ids, true).unwrap().to_vec();
    let got: Vec<f32> = all.iter().map(|&b| f32::from_bits(b)).collect();
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = want.iter().zip(&got).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst > 0.0, "a bf16 cache gave the f32 cache's logits exactly");
    assert!(worst <= 5e-2 * scale, "worst logit difference {worst} of {scale}");
}
