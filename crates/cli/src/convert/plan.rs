//! Stages 1 and 2: the copied qlinear tensors checked, then the output
//! planned (which weights are quantized, how, and what is kept).

use super::*;

/// The output's plan: its metadata, every tensor's plan in output order
/// (with where its bytes come from), the weights to quantize and how, their
/// importance, the notes on weights kept as they are, and the input bytes
/// to quantize.
pub(super) struct Plan {
    pub(super) meta: HashMap<String, String>,
    pub(super) plans: Vec<(TensorPlan, Entry)>,
    pub(super) jobs: HashMap<String, Job>,
    pub(super) importances: HashMap<String, Vec<f32>>,
    pub(super) sources: HashMap<String, Source>,
    pub(super) notes: String,
    pub(super) total_in: usize,
}

/// Stage 1: qlinear tensors already in the input are copied through only if
/// they validate (the output must pass the same check). Returns whether a
/// copied q4g weight has a negative group scale (the output is then
/// version 2 too).
pub(super) fn check_copied(input: &Input, label: &str) -> Result<bool, String> {
    let mut negative_scale = false;
    if let Input::Safetensors(file) = input {
        for (prefix, result) in file.validate() {
            if let Err(e) = result {
                return Err(format!(
                    "{}: the input already holds qlinear tensors or metadata for {} that do not validate ({}); \
                     convert the original model instead",
                    label,
                    esc(&prefix),
                    esc(&e.to_string())
                ));
            }
            // a version 2 input's negative q4g scales are copied: say 2 too
            if file.metadata_map().get(FORMAT_KEY).map(String::as_str) == Some(FORMAT_VERSION_SIGNED_GROUP_SCALES) {
                if let Ok(qlinear::QuantizedWeight::Q4(w)) = file.load(&prefix) {
                    negative_scale |= w.negative_group_scale().is_some();
                }
            }
        }
    }
    Ok(negative_scale)
}

/// The scheme `src` is quantized with, or `None` when it is kept as it is;
/// a `*.weight` kept by a rule rather than by the filters says why in
/// `notes`.
pub(super) fn selected_scheme(src: &Source, options: &Options, notes: &mut String) -> Option<QScheme> {
    let name = &src.name;
    let rule = options
        .tensor_schemes
        .iter()
        .find(|(r, _)| r.is_match(name))
        .map(|r| r.1);
    let table = options.include.is_none() && rule.is_none() && KEEP_FLOAT.iter().any(|t| name.contains(t));
    let wanted = name.ends_with(".weight")
        && (rule.is_some() || options.include.as_ref().is_none_or(|r| r.is_match(name)))
        && !options.exclude.as_ref().is_some_and(|r| r.is_match(name));
    if wanted && table {
        *notes += &format!(
            "{}  kept in float by the default rule (names containing {}; --include or --tensor-scheme replaces the \
             rule)\n",
            esc(name),
            KEEP_FLOAT.join(", ")
        );
    }
    let wanted = wanted && !table;
    let selected = wanted && src.shape.len() == 2 && src.float;
    if wanted && !selected {
        *notes += &format!(
            "{}  {} {:?}  kept as it is: only 2-D float weights are quantized\n",
            esc(name),
            src.what,
            src.shape,
        );
    }
    selected.then(|| rule.unwrap_or(options.scheme))
}

/// Stage 2: which tensors are quantized, with which scheme and recipe, and
/// which are kept; the output's metadata and tensor plans.
pub(super) fn plan_output(input: &Input, label: &str, options: &Options, negative_scale: bool) -> Result<Plan, String> {
    let Options {
        recipe,
        requantize,
        importance,
        hessian,
        ..
    } = options;
    let mut negative_scale = negative_scale;
    let mut importances: HashMap<String, Vec<f32>> = HashMap::new();
    let mut meta: HashMap<String, String> = input.metadata();
    let mut plans: Vec<(TensorPlan, Entry)> = vec![];
    let mut jobs: HashMap<String, Job> = HashMap::new();
    let mut total_in = 0usize;
    let mut notes = String::new();
    // listed once: the loop plans, the quantizer thread and the writer read it
    let sources: HashMap<String, Source> = input.sources().into_iter().map(|s| (s.name.clone(), s)).collect();
    let mut listed: Vec<&Source> = sources.values().collect();
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    for src in listed {
        let name = src.name.clone();
        let Some(scheme) = selected_scheme(src, options, &mut notes) else {
            plans.push((
                TensorPlan {
                    name: name.clone(),
                    dtype: input.kept_dtype(&name)?,
                    shape: src.shape.clone(),
                },
                Entry::Raw(name),
            ));
            continue;
        };
        let prefix = name.strip_suffix(".weight").unwrap_or(&name).to_string();
        let (n, k) = (src.shape[0], src.shape[1]);
        if let QScheme::Q4Grouped(g) = scheme {
            qlinear::GroupSize::Group(g)
                .validate(k)
                .map_err(|e| format!("{}: {e}", esc(&name)))?;
        }
        for other in ["qweight", "scales"] {
            if sources.contains_key(&format!("{prefix}.{other}")) {
                return Err(format!(
                    "{}: the input already has {}.{other}",
                    esc(&name),
                    esc(&prefix)
                ));
            }
        }
        let lossless = !requantize && scheme == QScheme::Q4Grouped(32) && input.is_q4_0(&name);
        if let (Some((file, flabel)), false) = (importance, lossless) {
            importances.insert(name.clone(), importance_of(file, flabel, &prefix, &name, k)?);
        }
        if let (Some((file, flabel)), false) = (hessian, lossless) {
            // its shape now, its values (k · k, read once) when the weight's turn comes
            hessian_raw(file, flabel, &prefix, &name, k)?;
        }
        negative_scale |= lossless && input.q4_0_has_negative_scale(&name);
        total_in += src.bytes;
        let ([qp, sp], keys) = TensorPlan::quantized(scheme, &prefix, n, k);
        // which recipe chose the codes; readers ignore it (docs/FORMAT.md)
        let how = if lossless {
            format!("gguf:{}", src.what)
        } else {
            recipe.to_string()
        };
        meta.insert(format!("{prefix}.qrecipe"), how);
        meta.extend(keys);
        jobs.insert(name.clone(), Job { scheme, lossless });
        plans.push((qp, Entry::QWeight(name.clone())));
        plans.push((sp, Entry::Scales(name)));
    }
    meta.insert(FORMAT_KEY.into(), format_version(negative_scale).into());
    plans.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    if jobs.is_empty() {
        let kept = notes.lines().count();
        return Err(format!(
            "{label}: nothing to quantize (no 2-D float *.weight tensor matches the filters; {kept} *.weight kept \
             as they are); no output written"
        ));
    }

    Ok(Plan {
        meta,
        plans,
        jobs,
        importances,
        sources,
        notes,
        total_in,
    })
}

/// `PREFIX.importance` from the importance file: `[k]` floats, finite and
/// `>= 0` (checked again by the recipe, which names the column).
pub(super) fn importance_of(
    file: &QuantizedFile,
    label: &str,
    prefix: &str,
    weight: &str,
    k: usize,
) -> Result<Vec<f32>, String> {
    let name = format!("{prefix}.importance");
    let raw = calibration_tensor(
        file,
        (label, weight, &name),
        &[k],
        (
            &format!("a [{k}] float vector for the activation-aware recipe"),
            &format!("a float vector of [{k}] (the weight's in_features)"),
        ),
    )?;
    let mut v = Vec::with_capacity(k);
    decode_row(&raw, raw.data, &mut v);
    if let Some((col, x)) = v.iter().enumerate().find(|(_, x)| !(x.is_finite() && **x >= 0.0)) {
        return Err(format!(
            "{}: {} in {} holds {x} at column {col}; importance must be finite and >= 0",
            esc(weight),
            esc(&name),
            esc(label)
        ));
    }
    Ok(v)
}

/// `PREFIX.hessian` in the hessian file, its shape checked: a float `[k, k]`.
pub(super) fn hessian_raw<'f>(
    file: &'f QuantizedFile,
    label: &str,
    prefix: &str,
    weight: &str,
    k: usize,
) -> Result<RawTensor<'f>, String> {
    let name = format!("{prefix}.hessian");
    calibration_tensor(
        file,
        (label, weight, &name),
        &[k, k],
        (
            &format!("a [{k}, {k}] float matrix for the gptq recipe"),
            &format!("a float matrix of [{k}, {k}] (the weight's in_features twice)"),
        ),
    )
}

/// The GPTQ factor of `PREFIX.hessian` (docs/NUMERICS.md §3.9); a refusal
/// names the weight, the tensor and the row and column at fault.
pub(super) fn gptq_factor_of(
    file: &QuantizedFile,
    label: &str,
    prefix: &str,
    weight: &str,
    k: usize,
) -> Result<GptqFactor, String> {
    let raw = hessian_raw(file, label, prefix, weight, k)?;
    let mut h = Vec::with_capacity(k * k);
    decode_row(&raw, raw.data, &mut h);
    GptqFactor::from_hessian(&h, k)
        .map_err(|e| format!("{}: {}.hessian in {}: {e}", esc(weight), esc(prefix), esc(label)))
}

/// Tensor `name` of a calibration file (`label`, the importance or hessian
/// file, read for `weight`): present, of a float dtype and of `shape`.
/// `(missing, expected)` describe it in the two refusals.
fn calibration_tensor<'f>(
    file: &'f QuantizedFile,
    (label, weight, name): (&str, &str, &str),
    shape: &[usize],
    (missing, expected): (&str, &str),
) -> Result<RawTensor<'f>, String> {
    let kind = if name.ends_with(".hessian") {
        "hessian"
    } else {
        "importance"
    };
    let raw = file.raw(name).ok_or_else(|| {
        format!(
            "{}: the {kind} file {} has no tensor {} ({missing})",
            esc(weight),
            esc(label),
            esc(name)
        )
    })?;
    if !matches!(raw.dtype, Dtype::F32 | Dtype::F16 | Dtype::BF16) || raw.shape != shape {
        return Err(format!(
            "{}: {} in {} is {:?} {:?}; expected {expected}",
            esc(weight),
            esc(name),
            esc(label),
            raw.dtype,
            raw.shape
        ));
    }
    Ok(raw)
}
