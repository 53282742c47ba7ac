//! Synthetic Llamas written as converted qlinear files (one builder,
//! `Synthetic`): a tiny one (hidden 8, 2 heads sharing 1 KV head, FFN 16,
//! vocabulary 6, one block) runs, a cached decode step equals the same
//! position run in one batch, and every bad input is one error naming the
//! key, tensor or limit; a small one (hidden 96, two blocks) gives a team
//! decode step the bits of one thread, profiled or not.

use std::borrow::Cow;
use std::collections::HashMap;

use qlinear::format::{write_file, Dtype, OutputTensor};
use qlinear::{ModelFile, QScheme, QuantizedWeight};
use qlinear_smollm::{
    logits_digest, Config, DecodeSplit, Error, Generation, KvCache, Meta, Model, Modes, Phase, Record, Sampler,
    Tokenizer, WeightMemory,
};

mod bytes;
mod f32_memory;
mod kv;
mod transforms;

fn meta(arch: &str) -> HashMap<String, String> {
    [
        ("general.architecture", format!("\"{arch}\"")),
        ("llama.block_count", "1".into()),
        ("llama.embedding_length", "8".into()),
        ("llama.feed_forward_length", "16".into()),
        ("llama.attention.head_count", "2".into()),
        ("llama.attention.head_count_kv", "1".into()),
        ("llama.context_length", "16".into()),
        ("llama.rope.freq_base", "10000.0".into()),
        ("llama.attention.layer_norm_rms_epsilon", "1e-5".into()),
    ]
    .into_iter()
    .map(|(k, v)| (format!("gguf.{k}"), v))
    .collect()
}

fn values(n: usize, k: usize, seed: u32) -> Vec<f32> {
    (0..n * k)
        .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed.wrapping_mul(97)) >> 22) as f32 / 512.0 - 1.0)
        .collect()
}

/// A synthetic Llama written as a converted qlinear file: its
/// hyper-parameters, the scheme of its linear layers, the first feature's
/// norm weight (an infinite one makes the first projection's activations
/// non-finite), the layers left out, and the rows of `blk.0.attn_q`
/// (wrong on purpose in the shape test).
struct Synthetic<'a> {
    name: &'a str,
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    ffn: usize,
    vocab: usize,
    blocks: usize,
    context: usize,
    /// `None`: the linear layers in f32 (`P.weight`), as `Model::write_f32`
    /// writes them.
    scheme: Option<QScheme>,
    first_norm: f32,
    skip: &'a [&'a str],
    q_rows: usize,
    /// An LM head of its own (`output`): the token table negated, so that
    /// its logits are the tied model's negated.
    untied: bool,
}

impl Synthetic<'_> {
    /// Writes the file into `dir` and opens it.
    fn write(&self, dir: &std::path::Path) -> ModelFile {
        let h = self.hidden;
        let kv = h / self.heads * self.kv_heads;
        let mut pairs = meta("llama");
        for (k, v) in [
            ("block_count", self.blocks),
            ("embedding_length", h),
            ("feed_forward_length", self.ffn),
            ("attention.head_count", self.heads),
            ("attention.head_count_kv", self.kv_heads),
            ("context_length", self.context),
        ] {
            pairs.insert(format!("gguf.llama.{k}"), v.to_string());
        }
        let mut tensors = vec![];
        let mut seed = 0;
        let mut linear = |prefix: String, n: usize, k: usize| {
            seed += 1;
            if !self.skip.contains(&prefix.as_str()) {
                let v = match prefix.as_str() {
                    "output" => values(n, k, 1).iter().map(|x| -x).collect(),
                    _ => values(n, k, seed),
                };
                tensors.push(match self.scheme {
                    Some(scheme) => OutputTensor::Quantized {
                        prefix,
                        tensor: QuantizedWeight::quantize(scheme, n, k, &v).unwrap(),
                    },
                    None => OutputTensor::Raw {
                        name: format!("{prefix}.weight"),
                        dtype: Dtype::F32,
                        shape: vec![n, k],
                        data: Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
                    },
                });
            }
        };
        linear("token_embd".into(), self.vocab, h);
        for b in 0..self.blocks {
            for (name, n, k) in [
                ("attn_q", if b == 0 { self.q_rows } else { h }, h),
                ("attn_k", kv, h),
                ("attn_v", kv, h),
                ("attn_output", h, h),
                ("ffn_gate", self.ffn, h),
                ("ffn_up", self.ffn, h),
                ("ffn_down", h, self.ffn),
            ] {
                linear(format!("blk.{b}.{name}"), n, k);
            }
        }
        // last, so that the blocks' seeds are those of the tied model
        if self.untied {
            linear("output".into(), self.vocab, h);
        }
        let norm = |name: String, first: f32| OutputTensor::Raw {
            name,
            dtype: Dtype::F32,
            shape: vec![h],
            data: Cow::Owned(
                (0..h)
                    .map(|i| {
                        if i == 0 {
                            first
                        } else {
                            0.75 + i as f32 / (2 * h) as f32
                        }
                    })
                    .flat_map(f32::to_le_bytes)
                    .collect(),
            ),
        };
        for b in 0..self.blocks {
            for name in ["attn_norm", "ffn_norm"] {
                tensors.push(norm(format!("blk.{b}.{name}.weight"), self.first_norm));
            }
        }
        tensors.push(norm("output_norm.weight".into(), 0.75));
        let path = dir.join(format!("{}.safetensors", self.name));
        write_file(&path, &pairs, tensors).unwrap();
        ModelFile::open(&path).unwrap()
    }
}

/// The tiny model's file (hidden 8, 2 heads sharing 1 KV head, FFN 16,
/// vocabulary 6, one block, q8), without the tensors named in `skip` and
/// with `attn_q` shaped `[q_rows, 8]`.
fn tiny(dir: &std::path::Path, skip: &[&str], q_rows: usize) -> ModelFile {
    Synthetic {
        name: &format!("tiny-{}-{q_rows}", skip.len()),
        hidden: 8,
        heads: 2,
        kv_heads: 1,
        ffn: 16,
        vocab: 6,
        blocks: 1,
        context: 16,
        scheme: Some(QScheme::Q8),
        first_norm: 0.75,
        skip,
        q_rows,
        untied: false,
    }
    .write(dir)
}

#[test]
fn a_tiny_model_runs_and_decode_steps_equal_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let file = tiny(dir.path(), &[], 8);
    let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
    let model = Model::from_converted(&file, &meta, &Modes::default()).unwrap();
    assert_eq!(model.vocab(), 6);
    assert_eq!(
        (model.config.heads, model.config.kv_heads, model.config.head_dim),
        (2, 1, 4)
    );
    let ids = [1u32, 4, 2, 5, 0];
    let mut batch = KvCache::new(&model.config, 16).unwrap();
    let all = model.forward(&mut batch, &ids, true).unwrap();
    assert_eq!(all.len(), 5 * 6);
    assert!(all.iter().all(|v| v.is_finite()));
    // position by position through the cache: the same logits (the
    // quantized layers are batch invariant, NUMERICS §7)
    let mut step = KvCache::new(&model.config, 16).unwrap();
    for (i, &t) in ids.iter().enumerate() {
        let l = model.forward(&mut step, &[t], false).unwrap();
        assert_eq!(l, &all[i * 6..(i + 1) * 6], "position {i}");
    }
    assert_eq!(step.len(), 5);
    // the context is a hard limit, and an empty or out-of-vocabulary input
    // is refused, each naming the limit
    let e = model.forward(&mut step, &[0; 12], false).unwrap_err().to_string();
    assert_eq!(e, "prompt: 12 tokens after 5 do not fit the context of 16 tokens");
    let e = model.forward(&mut step, &[], false).unwrap_err().to_string();
    assert_eq!(e, "prompt: no tokens to run (an empty prompt?)");
    let e = model.forward(&mut step, &[6], false).unwrap_err().to_string();
    assert_eq!(e, "prompt: token id 6 is past the vocabulary (6)");
    let e = KvCache::new(&model.config, 17).err().unwrap().to_string();
    assert_eq!(
        e,
        "prompt: a cache of 17 positions exceeds the model's context of 16 tokens"
    );
}

#[test]
fn bad_models_are_one_error_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let m = |pairs: HashMap<String, String>| Meta::from_converted(&pairs).unwrap();
    let e = Config::from_meta(&m(meta("gpt2"))).unwrap_err();
    assert!(matches!(e, Error::Architecture { .. }));
    assert_eq!(
        e.to_string(),
        "general.architecture is \"gpt2\": qlinear-smollm runs Llama decoders (\"llama\")"
    );
    let mut odd = meta("llama");
    odd.insert("gguf.llama.attention.head_count_kv".into(), "3".into());
    let e = Config::from_meta(&m(odd)).unwrap_err().to_string();
    assert_eq!(
        e,
        "metadata llama.attention.head_count_kv: 3 KV heads do not divide 2 query heads"
    );
    let mut missing = meta("llama");
    missing.remove("gguf.llama.block_count");
    let e = Config::from_meta(&m(missing)).unwrap_err().to_string();
    assert_eq!(e, "metadata llama.block_count: missing");
    let e = Meta::from_converted(&HashMap::new()).err().unwrap().to_string();
    assert!(e.contains("carries no GGUF metadata"), "{e}");
    // a missing layer, and a layer of the wrong shape, name the tensor
    let file = tiny(dir.path(), &["blk.0.ffn_up"], 8);
    let meta_ = Meta::from_converted(file.file().metadata_map()).unwrap();
    let e = Model::from_converted(&file, &meta_, &Modes::default())
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        e,
        "blk.0.ffn_up.qweight: missing, and no float blk.0.ffn_up.weight either: every linear weight of the \
         model must be there"
    );
    let file = tiny(dir.path(), &[], 4);
    let e = Model::from_converted(&file, &meta_, &Modes::default())
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        e,
        "blk.0.attn_q: shape [4, 8] where the model's hyper-parameters need [8, 8]"
    );
}

#[test]
fn the_sampler_is_seeded_and_respects_its_limits() {
    use qlinear_smollm::Sampler;
    let logits = [0.5f32, 3.0, 2.9, -1.0, f32::NAN, 1.0];
    assert_eq!(Sampler::argmax(&logits), 1);
    assert_eq!(Sampler::argmax(&[f32::NAN, 1.0]), 1, "NaN never wins");
    assert_eq!(
        Sampler::new(0.0, 40, 0.95, 1).next(&logits[..4]),
        1,
        "temperature 0 is greedy"
    );
    // top-k 1 is greedy at any temperature
    let mut s = Sampler::new(5.0, 1, 1.0, 7);
    assert!((0..50).all(|_| s.next(&logits[..4]) == 1));
    // top-k 2: only the two most likely, both drawn; the same seed repeats
    let draw = |seed| {
        let mut s = Sampler::new(1.0, 2, 1.0, seed);
        (0..200).map(|_| s.next(&logits[..4])).collect::<Vec<u32>>()
    };
    let a = draw(3);
    assert!(a.iter().all(|&t| t == 1 || t == 2));
    assert!(a.contains(&1) && a.contains(&2));
    assert_eq!(a, draw(3));
    assert_ne!(a, draw(4));
    // top-p: token 1 alone holds more than half the mass at temperature 0.1
    let mut s = Sampler::new(0.1, 0, 0.5, 9);
    assert!((0..50).all(|_| s.next(&logits[..4]) == 1));
}

/// A small Llama (hidden 96, 6 heads of 16 sharing 3 KV heads, FFN 160,
/// vocabulary 70, two blocks) in `scheme`, so that every thread of a team
/// gets a share of each layer that starts inside a KV head and ends inside
/// a weight panel or at a row tail.
fn small(dir: &std::path::Path, scheme: Option<QScheme>, first_norm: f32) -> ModelFile {
    small_with_head(dir, scheme, first_norm, false)
}

/// [`small`], with an LM head of its own where `untied`.
fn small_with_head(dir: &std::path::Path, scheme: Option<QScheme>, first_norm: f32, untied: bool) -> ModelFile {
    small_shaped(dir, scheme, first_norm, untied, 160)
}

/// [`small_with_head`] with an FFN of `ffn`.
fn small_shaped(
    dir: &std::path::Path,
    scheme: Option<QScheme>,
    first_norm: f32,
    untied: bool,
    ffn: usize,
) -> ModelFile {
    Synthetic {
        name: &format!("small-{scheme:?}-{first_norm}-{untied}-{ffn}"),
        hidden: 96,
        heads: 6,
        kv_heads: 3,
        ffn,
        vocab: 70,
        blocks: 2,
        context: 32,
        scheme,
        first_norm,
        skip: &[],
        q_rows: 96,
        untied,
    }
    .write(dir)
}

/// A decode step gives the same logits, bit for bit, on one thread, on a
/// team of 2 and 3 threads and split layer by layer over a pool of 2, in
/// every scheme (the q4g32 layers in the panel form where a tier has panel
/// tiles), and equal to the same positions run in one batch; and again
/// with the layers' codes packed into one region (`Model::pack_weights`).
#[test]
fn a_team_step_has_the_bits_of_one_thread() {
    let dir = tempfile::tempdir().unwrap();
    let ids = [3u32, 61, 7, 0, 42, 18, 69, 5, 33];
    for scheme in [QScheme::Q8, QScheme::Q4, QScheme::Q4Grouped(32)] {
        let file = small(dir.path(), Some(scheme), 0.75);
        let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
        let mut model = Model::from_converted(&file, &meta, &Modes::default()).unwrap();
        assert_eq!(model.decode_split(), DecodeSplit::Team);
        let mut batch = KvCache::new(&model.config, 32).unwrap();
        let all = model.forward(&mut batch, &ids, true).unwrap().to_vec();
        let one = decode_steps(&mut model, &ids, 1, DecodeSplit::Team);
        for (i, row) in one.iter().enumerate() {
            let want: Vec<u32> = all[i * 70..(i + 1) * 70].iter().map(|v| v.to_bits()).collect();
            assert_eq!(row, &want, "{scheme}: position {i} against the batch");
        }
        for (threads, split) in [(2, DecodeSplit::Team), (3, DecodeSplit::Team), (2, DecodeSplit::Pool)] {
            assert!(
                decode_steps(&mut model, &ids, threads, split) == one,
                "{scheme}: {threads} threads, {split:?}"
            );
        }
        let packed = model.pack_weights().unwrap().expect("quantized layers");
        assert_eq!(packed.layers, 2 * 7 + 1, "{scheme}: every projection and the head");
        let mut batch = KvCache::new(&model.config, 32).unwrap();
        assert!(
            model.forward(&mut batch, &ids, true).unwrap() == &all[..],
            "{scheme} packed"
        );
        for (threads, split) in [(1, DecodeSplit::Team), (2, DecodeSplit::Team), (2, DecodeSplit::Pool)] {
            assert!(
                decode_steps(&mut model, &ids, threads, split) == one,
                "{scheme} packed: {threads} threads, {split:?}"
            );
        }
    }
}

/// `ids` decoded one step at a time on a pool of `threads`, split as
/// `split`: each step's logits' bits.
fn decode_steps(model: &mut Model, ids: &[u32], threads: usize, split: DecodeSplit) -> Vec<Vec<u32>> {
    model.set_decode_split(split);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    pool.install(|| {
        let mut cache = KvCache::new(&model.config, 32).unwrap();
        ids.iter()
            .map(|&t| {
                let l = model.forward(&mut cache, &[t], false).unwrap();
                l.iter().map(|v| v.to_bits()).collect()
            })
            .collect()
    })
}

/// A step that fails on a team (an infinite norm weight makes the first
/// projection's activations non-finite) reports the layer's own error on
/// every thread count, never the team's abort, and leaves no thread
/// waiting.
#[test]
fn a_failing_team_step_reports_the_layers_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = small(dir.path(), Some(QScheme::Q4Grouped(32)), f32::INFINITY);
    let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
    let model = Model::from_converted(&file, &meta, &Modes::default()).unwrap();
    for threads in [1, 2, 3] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        let e = pool.install(|| {
            let mut cache = KvCache::new(&model.config, 32).unwrap();
            model.forward(&mut cache, &[5], false).unwrap_err()
        });
        assert!(!matches!(e, Error::TeamAborted), "{threads} threads: {e}");
        assert!(e.to_string().starts_with("blk.0.attn_q"), "{threads} threads: {e}");
    }
}

/// A file with an `output` weight runs it as the LM head, not the token
/// table: its head here is the table negated, so the logits are the tied
/// model's negated (exactly in f32, where negation commutes with every sum;
/// in q8 too, as its rounding is symmetric), in f32, q8 and q4g32, and
/// after `write_f32` the head is still its own.
#[test]
fn an_untied_head_is_the_files_output_weight() {
    let dir = tempfile::tempdir().unwrap();
    let ids = [3u32, 61, 7, 0, 42];
    let logits = |file: &ModelFile| {
        let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
        let m = Model::from_converted(file, &meta, &Modes::default()).unwrap();
        let mut cache = KvCache::new(&m.config, 32).unwrap();
        m.forward(&mut cache, &ids, true).unwrap().to_vec()
    };
    for scheme in [None, Some(QScheme::Q8), Some(QScheme::Q4Grouped(32))] {
        let tied = logits(&small_with_head(dir.path(), scheme, 0.75, false));
        let untied = logits(&small_with_head(dir.path(), scheme, 0.75, true));
        assert!(tied.iter().any(|&v| v != 0.0));
        let scale = tied.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (i, (t, u)) in tied.iter().zip(&untied).enumerate() {
            match scheme {
                None | Some(QScheme::Q8) => assert_eq!(*u, -t, "{scheme:?}: logit {i}"),
                // a q4g32 table quantizes -w to other codes than w
                _ => assert!(
                    (u + t).abs() <= 0.25 * scale,
                    "{scheme:?}: logit {i}: {t} tied, {u} untied"
                ),
            }
        }
    }
    // the f32 model written out keeps its own head
    let file = small_with_head(dir.path(), None, 0.75, true);
    let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
    let model = Model::from_converted(&file, &meta, &Modes::default()).unwrap();
    let path = dir.path().join("written.safetensors");
    model.write_f32(&path, &meta).unwrap();
    assert_eq!(logits(&ModelFile::open(&path).unwrap()), logits(&file));
}

/// A profiled cache (`KvCache::profile_steps`) runs every decode step as a
/// team, at one thread too, with the logits' bits of an unprofiled one; it
/// counts each step once and times every thread's phases, and taking the
/// times zeroes them.
#[test]
fn profiled_steps_keep_the_bits_and_time_every_thread() {
    let dir = tempfile::tempdir().unwrap();
    let ids = [3u32, 61, 7, 0, 42];
    let file = small(dir.path(), Some(QScheme::Q8), 0.75);
    let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
    let model = Model::from_converted(&file, &meta, &Modes::default()).unwrap();
    let bits = |l: &[f32]| l.iter().map(|v| v.to_bits()).collect::<Vec<u32>>();
    for threads in [1, 2, 3] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let (mut plain, mut profiled) = (
                KvCache::new(&model.config, 32).unwrap(),
                KvCache::new(&model.config, 32).unwrap(),
            );
            assert_eq!(plain.take_step_times(), None);
            // the prompt as one batch is not a decode step
            model.forward(&mut plain, &ids[..2], false).unwrap();
            profiled.profile_steps();
            model.forward(&mut profiled, &ids[..2], false).unwrap();
            for &t in &ids[2..] {
                let want = bits(model.forward(&mut plain, &[t], false).unwrap());
                assert_eq!(
                    bits(model.forward(&mut profiled, &[t], false).unwrap()),
                    want,
                    "{threads} threads"
                );
            }
            let times = profiled.take_step_times().unwrap();
            assert_eq!(times.steps, 3, "{threads} threads");
            assert_eq!(times.threads.len(), threads);
            for (t, phases) in times.threads.iter().enumerate() {
                // every thread streams its share of every weight phase
                for p in Phase::WEIGHTS {
                    assert!(
                        phases[p as usize] > 0,
                        "{} thread {t} of {threads}: {phases:?}",
                        p.name()
                    );
                }
                assert!(phases[Phase::Norms as usize] > 0, "thread {t} of {threads}: {phases:?}");
            }
            let again = profiled.take_step_times().unwrap();
            assert_eq!((again.steps, again.threads), (0, vec![[0; Phase::ALL.len()]; threads]));
        });
    }
}

/// Modes by layer role: `W8A8,ffn_down=W8A16` runs `ffn_down` with float
/// activations and the rest W8A8, so its logits are neither all-W8A8's nor
/// all-W8A16's; the description names the override; a mode the weight
/// cannot run names the layer.
#[test]
fn modes_by_role_reach_their_layers() {
    let dir = tempfile::tempdir().unwrap();
    let file = small(dir.path(), Some(QScheme::Q8), 0.75);
    let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
    let ids = [3u32, 61, 7, 0, 42];
    let logits = |modes: &str| -> (Vec<u32>, String) {
        let model = Model::from_converted(&file, &meta, &modes.parse().unwrap()).unwrap();
        let mut cache = KvCache::new(&model.config, 32).unwrap();
        let l = model.forward(&mut cache, &ids, true).unwrap();
        (l.iter().map(|v| v.to_bits()).collect(), model.description.clone())
    };
    let (w8a8, _) = logits("W8A8");
    let (w8a16, _) = logits("W8A16");
    let (mixed, description) = logits("W8A8,ffn_down=W8A16");
    assert_eq!(description, "q8 w8a8, ffn_down w8a16 (head q8 w8a8)");
    assert_ne!(mixed, w8a8);
    assert_ne!(mixed, w8a16);
    // every role overridden to the mode for all is that mode
    let every: String = qlinear_smollm::ROLES.iter().map(|r| format!(",{r}=W8A16")).collect();
    assert_eq!(logits(&format!("W8A8{every}")).0, w8a16);
    assert_eq!(logits("W8A8,ffn_down=W8A8").0, w8a8);

    let e = Model::from_converted(&file, &meta, &"W8A8,ffn_down=W4A8".parse().unwrap())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("blk.0.ffn_down"), "{e}");
}

/// A model with no quantized layer has nothing to pack.
#[test]
fn an_f32_model_has_nothing_to_pack() {
    let dir = tempfile::tempdir().unwrap();
    let file = small(dir.path(), None, 0.75);
    let meta = Meta::from_converted(file.file().metadata_map()).unwrap();
    let mut model = Model::from_converted(&file, &meta, &Modes::default()).unwrap();
    assert_eq!(model.description, "f32");
    assert_eq!(model.pack_weights().unwrap(), None);
}
