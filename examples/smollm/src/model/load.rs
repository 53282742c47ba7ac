//! Building a [`Model`] from a GGUF file (the f32 path) or a converted
//! qlinear file.

use super::*;

/// Refuses the f32 path of `file` when its weights dequantized (4 bytes a
/// weight, the LM head's copy of a tied embedding included) need more
/// than `available` bytes: [`Error::F32TooLarge`], before anything is
/// allocated. A GGUF file holds 4.5 to 8.5 bits a weight, so a file that
/// fits in memory may expand past it, where the allocation would stop the
/// process part way (and, in the page, leave its module unusable).
/// `None`: nothing is refused (the memory cannot be read).
pub fn check_f32_path_fits(file: &GgufFile, available: Option<u64>) -> Result<()> {
    let mut elements: u64 = file.tensors().iter().map(|t| t.n_elements() as u64).sum();
    if file.tensor("output.weight").is_none() {
        if let Some(embedding) = file.tensor("token_embd.weight") {
            elements += embedding.n_elements() as u64;
        }
    }
    let needed = elements.saturating_mul(4);
    match available {
        Some(available) if needed > available => Err(Error::F32TooLarge {
            elements,
            needed,
            available,
        }),
        _ => Ok(()),
    }
}

/// The memory this process can still be given: natively what the OS says
/// (`qlinear::format::available_memory`); in WebAssembly what the 32-bit
/// memory can still grow by.
pub fn memory_available() -> Option<u64> {
    #[cfg(target_arch = "wasm32")]
    {
        const PAGE: u64 = 65_536;
        Some((4u64 << 30).saturating_sub(core::arch::wasm32::memory_size::<0>() as u64 * PAGE))
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        qlinear::format::available_memory()
    }
}

impl Model {
    /// The f32 path: a GGUF file's weights dequantized exactly. Errors:
    /// [`Error::F32TooLarge`] where they would not fit in memory
    /// ([`check_f32_path_fits`]), besides the metadata and tensors'.
    pub fn from_gguf(file: &GgufFile, meta: &Meta) -> Result<Model> {
        check_f32_path_fits(file, memory_available())?;
        let config = Config::from_meta(meta)?;
        let rotation = Rotation::from_meta(meta, &config)?;
        let tensor = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
            let info = file.tensor(name).ok_or_else(|| Error::Tensor {
                tensor: name.into(),
                reason: "missing from the file".into(),
            })?;
            check_shape(name, &info.shape(), shape)?;
            Ok(file.tensor_f32(name)?)
        };
        let dense = |name: &str, n: usize, k: usize| -> Result<Dense> {
            Ok(Dense::f32(tensor(&format!("{name}.weight"), &[n, k])?, n, k))
        };
        let vocab = vocab_of(file.tensor("token_embd.weight").map(|t| t.shape()))?;
        let embed = tensor("token_embd.weight", &[vocab, config.hidden])?;
        let head = match file.tensor("output.weight") {
            Some(_) => (dense("output", vocab, config.hidden)?, "output"),
            None => (Dense::f32(embed.clone(), vocab, config.hidden), "token_embd"),
        };
        Model::assemble(
            (config, rotation),
            vocab,
            Table::F32(embed),
            head,
            "f32".into(),
            |name, shape| tensor(name, shape),
            dense,
        )
    }

    /// The quantized path: every linear of a converted file as a
    /// [`qlinear::Linear`] (in its mode of `modes`, or its weight's default), the tied
    /// embedding as the LM head; a `token_embd` kept in float is quantized
    /// to q8 for the head (the table itself stays f32 for the lookup). A
    /// projection the file keeps in float runs in f32 (a mode for it is then an
    /// error: it has none); a file with nothing quantized (as
    /// [`Model::write_f32`] writes it) is the f32 path, head included.
    ///
    /// First proves and plans the kernel families of the file's layers at
    /// their K values (`qlinear::init_for(&file.census())`: the start-up a
    /// runtime pays on purpose, cheaper than proving every family at the
    /// default census), kept as [`Model::start_up`].
    pub fn from_converted(file: &ModelFile, meta: &Meta, modes: &Modes) -> Result<Model> {
        let start_up = qlinear::init_for(&file.census())?;
        let config = Config::from_meta(meta)?;
        let rotation = Rotation::from_meta(meta, &config)?;
        let quantized = file.linears();
        let linear = |prefix: &str, n: usize, k: usize| converted_linear(file, &quantized, modes, prefix, n, k);
        let tensor = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
            let found = file.shape(name).ok_or_else(|| Error::Tensor {
                tensor: name.into(),
                reason: "missing from the file".into(),
            })?;
            check_shape(name, &found, shape)?;
            Ok(file.tensor_f32(name)?)
        };
        let embed = file.embedding("token_embd.weight")?;
        let vocab = embed.rows();
        check_shape("token_embd.weight", &[vocab, embed.dim()], &[vocab, config.hidden])?;
        if quantized.is_empty() {
            // nothing quantized: the f32 path, from a safetensors file (as
            // `Model::write_f32` writes it)
            let w = tensor("token_embd.weight", &[vocab, config.hidden])?;
            let head = match file.shape("output.weight") {
                Some(_) => (linear("output", vocab, config.hidden)?, "output"),
                None => (Dense::f32(w.clone(), vocab, config.hidden), "token_embd"),
            };
            let dense = |name: &str, n: usize, k: usize| linear(name, n, k);
            return Model::assemble(
                (config, rotation),
                vocab,
                Table::F32(w),
                head,
                "f32".into(),
                tensor,
                dense,
            )
            .map(|m| Model {
                start_up: Some(start_up),
                ..m
            });
        }
        // the head: `output` where the file has it, else the token table
        let head_name = if quantized.iter().any(|p| p == "output") || file.shape("output.weight").is_some() {
            "output"
        } else {
            "token_embd"
        };
        let head = if quantized.iter().any(|p| p == head_name) {
            linear(head_name, vocab, config.hidden)?
        } else {
            // kept in float beside quantized projections: q8 for the head
            let w = tensor(&format!("{head_name}.weight"), &[vocab, config.hidden])?;
            let mut l = Linear::new(
                head_name,
                QuantizedWeight::quantize(QScheme::Q8, vocab, config.hidden, &w).map_err(qlinear::Error::from)?,
                None,
            )?;
            if let Some(mode) = modes.for_layer(head_name) {
                let m = head_mode(head_name, &l, mode);
                l = l.with_mode(m)?;
            }
            Dense::Q(Box::new(l))
        };
        // named by the first quantized projection (a file may keep some
        // layers in float: `qlinear convert --exclude`)
        let first = quantized.iter().find(|p| p.starts_with("blk."));
        let description = match (&head, first) {
            (Dense::Q(l), Some(first)) => {
                let first = file.linear(first)?;
                let mode = modes.all.unwrap_or(first.mode());
                let overrides: String = modes.by_role.iter().map(|(r, m)| format!(", {r} {m}")).collect();
                let kept = if quantized.iter().filter(|p| p.starts_with("blk.")).count() < 7 * config.layers {
                    ", some layers f32"
                } else {
                    ""
                };
                format!(
                    "{} {mode}{overrides} (head {} {}{kept})",
                    first.scheme(),
                    l.scheme(),
                    l.mode()
                )
            }
            (Dense::Q(l), None) => format!("f32 (head {} {})", l.scheme(), l.mode()),
            (Dense::F32 { .. }, _) => "f32".into(),
        };
        let dense = |name: &str, n: usize, k: usize| linear(name, n, k);
        Model::assemble(
            (config, rotation),
            vocab,
            Table::Q(embed),
            (head, head_name),
            description,
            tensor,
            dense,
        )
        .map(|m| Model {
            start_up: Some(start_up),
            ..m
        })
    }

    pub(super) fn assemble(
        (mut config, rotation): (Config, Option<Rotation>),
        vocab: usize,
        embed: Table,
        (head, head_name): (Dense, &'static str),
        description: String,
        tensor: impl Fn(&str, &[usize]) -> Result<Vec<f32>>,
        dense: impl Fn(&str, usize, usize) -> Result<Dense>,
    ) -> Result<Model> {
        config.vocab = vocab;
        let (h, q_dim, kv_dim) = (
            config.hidden,
            config.heads * config.head_dim,
            config.kv_heads * config.head_dim,
        );
        let mut layers = Vec::with_capacity(config.layers);
        for b in 0..config.layers {
            let p = |n: &str| format!("blk.{b}.{n}");
            layers.push(Layer {
                attn_norm: tensor(&p("attn_norm.weight"), &[h])?,
                q: dense(&p("attn_q"), q_dim, h)?,
                k: dense(&p("attn_k"), kv_dim, h)?,
                v: dense(&p("attn_v"), kv_dim, h)?,
                o: dense(&p("attn_output"), h, q_dim)?,
                ffn_norm: tensor(&p("ffn_norm.weight"), &[h])?,
                gate: dense(&p("ffn_gate"), config.ffn, h)?,
                up: dense(&p("ffn_up"), config.ffn, h)?,
                down: dense(&p("ffn_down"), h, config.ffn)?,
            });
        }
        let norm = tensor("output_norm.weight", &[h])?;
        let rope_freq = rope::frequencies(config.rope_base, config.head_dim);
        Ok(Model {
            config,
            embed,
            layers,
            norm,
            head,
            head_name,
            rope_freq,
            description: if rotation.is_some() {
                format!("{description}, rotated")
            } else {
                description
            },
            split: DecodeSplit::default(),
            kv: crate::KvPrecision::default(),
            rotation,
            start_up: None,
        })
    }
}

/// Layer `prefix` (`[n, k]`) of a converted file: its `qlinear::Linear` in
/// its mode of `modes` (the head's mode where `prefix` is the head, [`head_mode`]), or,
/// where the converter kept it in float (`quantized` does not list it),
/// its f32 weight (an error with a `mode`: it has none).
fn converted_linear(
    file: &ModelFile,
    quantized: &[String],
    modes: &Modes,
    prefix: &str,
    n: usize,
    k: usize,
) -> Result<Dense> {
    let mode = modes.for_layer(prefix);
    if !quantized.iter().any(|p| p == prefix) {
        // a layer the converter kept in float (or an f32 file's)
        let name = format!("{prefix}.weight");
        let Some(shape) = file.shape(&name) else {
            return Err(Error::Tensor {
                tensor: format!("{prefix}.qweight"),
                reason: format!("missing, and no float {name} either: every linear weight of the model must be there"),
            });
        };
        check_shape(&name, &shape, &[n, k])?;
        if let Some(mode) = mode {
            return Err(Error::Tensor {
                tensor: name,
                reason: format!("kept in float: a mode ({mode}) applies to quantized layers only"),
            });
        }
        return Ok(Dense::f32(file.tensor_f32(&name)?, n, k));
    }
    let mut l = file.linear(prefix)?;
    check_shape(prefix, &[l.out_features(), l.in_features()], &[n, k])?;
    if let Some(mode) = mode {
        let m = head_mode(prefix, &l, mode);
        l = l.with_mode(m)?;
    }
    Ok(Dense::Q(Box::new(l)))
}
