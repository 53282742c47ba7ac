//! A model read from bytes in memory (the browser's way) generates the
//! file's tokens and logits.

use super::*;

/// A byte-level tokenizer of `vocab` tokens (`t0`, `t1`, …) with no merges,
/// whose end of sequence is the last token: what [`Generation`] needs of
/// one beside a synthetic model.
fn tokenizer(vocab: usize) -> Tokenizer {
    let tokens: Vec<String> = (0..vocab).map(|i| format!("t{i}")).collect();
    let pairs: HashMap<String, String> = [
        ("tokenizer.ggml.model", "\"gpt2\"".to_string()),
        ("tokenizer.ggml.pre", "\"smollm\"".into()),
        ("tokenizer.ggml.tokens", serde_json::to_string(&tokens).unwrap()),
        ("tokenizer.ggml.merges", "[]".into()),
        ("tokenizer.ggml.eos_token_id", (vocab - 1).to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (format!("gguf.{k}"), v))
    .collect();
    Tokenizer::from_meta(&Meta::from_converted(&pairs).unwrap()).unwrap()
}

/// A model read from bytes (the page's way) in every memory mode emits,
/// through a [`Generation`], the greedy tokens of the file's model run a
/// forward at a time, and the digests of the very logits each was chosen
/// from (in a cache sized to the generation, not the context); the
/// generation's bad inputs are errors that say what is wrong.
#[test]
fn a_model_from_bytes_generates_the_files_tokens_and_logits() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokenizer(70);
    let prompt = [3u32, 61, 7];
    let greedy = || Sampler::new(0.0, 0, 1.0, 0);
    let record = Record {
        digests: true,
        prompt_logits: true,
    };
    for scheme in [QScheme::Q8, QScheme::Q4Grouped(32)] {
        let file = small(dir.path(), Some(scheme), 0.75);
        let path = dir
            .path()
            .join(format!("small-{:?}-0.75-false-160.safetensors", Some(scheme)));
        let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
        let model = Model::from_converted(&file, &meta, &Modes::default()).unwrap();
        let mut cache = KvCache::new(&model.config, 32).unwrap();
        let prompt_logits = model.forward(&mut cache, &prompt, true).unwrap().to_vec();
        let mut logits = prompt_logits[(prompt.len() - 1) * 70..].to_vec();
        let (mut want, mut digests) = (vec![], vec![]);
        // until the end of sequence (token 69) or 6 tokens
        loop {
            digests.push(logits_digest(&logits));
            let t = Sampler::argmax(&logits);
            if t == 69 {
                break;
            }
            want.push(t);
            if want.len() == 6 {
                break;
            }
            logits = model.forward(&mut cache, &[t], false).unwrap().to_vec();
        }
        for memory in [WeightMemory::InPlace, WeightMemory::Copied, WeightMemory::Packed] {
            let bytes = std::fs::read(&path).unwrap();
            let (m, _) = Model::from_bytes(bytes, &Modes::default(), memory).unwrap();
            let mut g = Generation::start(&m, &prompt, 32, 6, greedy(), record).unwrap();
            assert_eq!(g.prompt_len(), 3);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(g.prompt_logits().unwrap()),
                bits(&prompt_logits),
                "{scheme} {memory:?}"
            );
            let mut got = vec![];
            while let Some(t) = g.step(&m, &tokens).unwrap() {
                assert_eq!(t.text, format!("t{}", t.id), "{scheme} {memory:?}");
                got.push(t.id);
            }
            assert!(g.is_done() && g.step(&m, &tokens).unwrap().is_none());
            assert_eq!(got, want, "{scheme} {memory:?}: tokens");
            assert_eq!(g.generated(), &want[..]);
            // a digest per logits row a token was chosen from (the last
            // token of 6 is never run)
            assert_eq!(g.digests().unwrap(), &digests[..], "{scheme} {memory:?}");
        }
    }
    // bad inputs
    let file = small(dir.path(), Some(QScheme::Q8), 0.75);
    let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
    let model = Model::from_converted(&file, &meta, &Modes::default()).unwrap();
    let e = Generation::start(&model, &[], 32, 4, greedy(), Record::default())
        .err()
        .unwrap();
    assert_eq!(e.to_string(), "prompt: the prompt is empty (no tokens)");
    let e = Generation::start(&model, &prompt, 64, 30, greedy(), Record::default())
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        "prompt: 3 prompt tokens and 30 to generate exceed the context of 32 (at most the model's 32)"
    );
    let e = Generation::start(&model, &[70], 32, 1, greedy(), Record::default())
        .err()
        .unwrap();
    assert!(e.to_string().contains("token id 70 is past the vocabulary (70)"), "{e}");
    let mut g = Generation::start(&model, &prompt, 32, 0, greedy(), Record::default()).unwrap();
    assert!(g.step(&model, &tokens).unwrap().is_none() && g.digests().is_none());
    let e = Model::from_bytes(b"not a model".to_vec(), &Modes::default(), WeightMemory::InPlace)
        .err()
        .unwrap();
    assert!(e.to_string().contains("safetensors"), "{e}");
}

/// Opening a converted file proves and plans its census before any layer
/// is built (`Model::start_up`): every family its layers run is proven on
/// the scalar tier and held by the plan.
#[test]
fn a_converted_file_is_proven_and_planned_for_its_census_when_opened() {
    use qlinear::tiers::TierStatus;
    let dir = tempfile::tempdir().unwrap();
    let file = small(dir.path(), Some(QScheme::Q4Grouped(32)), 0.75);
    let census = file.census();
    assert!(!census.families.is_empty(), "{census:?}");
    let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
    let model = Model::from_converted(&file, &meta, &Modes::default()).unwrap();
    let init = model.start_up().expect("a converted file's start-up report");
    let scalar = init
        .selftest
        .tiers
        .iter()
        .find(|t| t.tier == qlinear::Int8Tier::Scalar)
        .expect("the scalar tier's line");
    let TierStatus::Proven(proofs) = &scalar.status else {
        panic!("the scalar tier is not proven: {:?}", scalar.status)
    };
    for family in &census.families {
        assert!(
            proofs.iter().any(|p| p.family == *family),
            "{family} not proven: {proofs:?}"
        );
        assert!(init.plan.holds(*family), "{family} not planned:\n{}", init.plan);
    }
}

/// `score` keeps each scored token's `−ln p` beside the sum: as many as
/// the top-1 tokens (each window's second half but its last position),
/// summed in order to exactly `nll`, each equal to the log-softmax of its
/// logits row computed here, and the perplexity is `exp` of their mean.
#[test]
fn scores_keep_every_scored_tokens_nll() {
    let dir = tempfile::tempdir().unwrap();
    let file = small(dir.path(), Some(QScheme::Q8), 0.75);
    let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
    let model = Model::from_converted(&file, &meta, &Modes::default()).unwrap();
    let tokens: Vec<u32> = (0..24u32).map(|i| (i * 7 + 3) % 70).collect();
    let window = 8;
    let s = qlinear_smollm::score(&model, &tokens, window).unwrap();
    // 3 windows, positions 4, 5, 6 of each
    assert_eq!((s.token_nll.len(), s.top1.len()), (9, 9));
    let sum = s.token_nll.iter().fold(0.0f64, |a, &v| a + v);
    assert_eq!(sum.to_bits(), s.nll.to_bits());
    let mean = sum / 9.0;
    assert!((s.perplexity() - mean.exp()).abs() <= 1e-12 * mean.exp());
    // the first window's first scored position, from its logits
    let mut cache = KvCache::new(&model.config, window).unwrap();
    let logits = model.forward(&mut cache, &tokens[..window], true).unwrap();
    let row = &logits[4 * 70..5 * 70];
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse: f64 = row.iter().map(|&v| f64::from(v - max).exp()).sum::<f64>().ln();
    let want = -(f64::from(row[tokens[5] as usize] - max) - lse);
    assert_eq!(s.token_nll[0].to_bits(), want.to_bits());
    assert!(
        s.token_nll.iter().all(|&v| v.is_finite() && v >= 0.0),
        "{:?}",
        s.token_nll
    );
}
