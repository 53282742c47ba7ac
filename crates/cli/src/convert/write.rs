//! Stage 3: the planned weights quantized (or imported) and the output
//! written, tensor i + 1 quantized while tensor i is written.

use super::*;

/// Stage 3: quantizes the planned weights and hands the output to `sink`,
/// tensor i + 1 quantized while tensor i is written; the report's lines.
pub(super) fn quantize_and_write(
    input: &Input,
    plan: Plan,
    recipe: qlinear::Recipe,
    hessian: Option<&(QuantizedFile, String)>,
    progress: bool,
    sink: impl FnOnce(HashMap<String, String>, &[TensorPlan], &mut Produce<'_>) -> Result<(), FormatError>,
) -> Result<Report, String> {
    let Plan {
        meta,
        plans,
        jobs,
        importances,
        sources,
        notes,
        total_in,
    } = plan;
    let bar = progress.then(|| progress_bar(total_in)).transpose()?;
    // Quantize tensor i + 1 while tensor i is written: a producer thread walks
    // the quantized tensors in output order and hands each over a channel of
    // depth 1, so at most two tensors' outputs are in memory at once.
    let order = quantized_in_order(&plans);
    let mut lines = String::new();
    let (mut total_out, mut total_q_in) = (0usize, 0usize);
    let just_plans: Vec<TensorPlan> = plans.iter().map(|p| p.0.clone()).collect();
    let result = std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(String, Result<Quantized, String>)>(1);
        let (bar, importances, jobs, sources) = (bar.as_ref(), &importances, &jobs, &sources);
        let work = Work {
            sources,
            jobs,
            importances,
            hessian,
        };
        let producer = scope.spawn(move || produce(input, order, work, recipe, bar, &tx));
        let mut current: Option<(String, Quantized)> = None;
        let written = sink(meta, &just_plans, &mut |i, out| {
            let io = |e: std::io::Error| FormatError::Unsupported {
                tensor: plans[i].0.name.clone(),
                reason: format!("cannot write: {e}"),
            };
            let fail = |tensor: &str, reason: String| FormatError::Unsupported {
                tensor: tensor.to_string(),
                reason,
            };
            match &plans[i].1 {
                Entry::Raw(name) => input.write_kept(name, out),
                Entry::QWeight(name) | Entry::Scales(name) => {
                    if current.as_ref().is_none_or(|c| &c.0 != name) {
                        let (got, q) = rx.recv().map_err(|_| fail(name, "quantizer stopped".into()))?;
                        let q = q.map_err(|reason| fail(&got, reason))?;
                        let (src, job) = match (sources.get(name), jobs.get(name)) {
                            (Some(s), Some(j)) => (s, j),
                            _ => return Err(fail(name, "vanished".into())),
                        };
                        total_out += q.qweight.len() + q.scales.len();
                        total_q_in += src.bytes;
                        lines += &report_line(input, name, src, job, recipe, &q);
                        current = Some((got, q));
                    }
                    let Some((_, q)) = current.as_ref() else {
                        return Err(fail(name, "no tensor".into()));
                    };
                    let is_qweight = matches!(plans[i].1, Entry::QWeight(_));
                    out.write_all(if is_qweight { &q.qweight } else { &q.scales })
                        .map_err(io)
                }
            }
        });
        // The quantizer stops at its next send once the receiver is gone.
        // Joined here, not left to the scope: the scope's end waits only
        // for the thread's closure, while a join waits for the thread
        // itself, its thread-locals' destructors (the channel's wait
        // context) included, so nothing of it outlives the conversion.
        drop(rx);
        if let Err(panic) = producer.join() {
            std::panic::resume_unwind(panic);
        }
        written
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    result.map_err(|e| esc(&e.to_string()))?;
    Ok(Report {
        lines: notes + &lines,
        quantized_in: total_q_in,
        quantized_out: total_out,
    })
}

/// The progress bar of `total_in` input bytes.
fn progress_bar(total_in: usize) -> Result<indicatif::ProgressBar, String> {
    let bar = indicatif::ProgressBar::new(total_in as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {msg}")
            .map_err(|e| e.to_string())?,
    );
    Ok(bar)
}

/// The quantized tensors in the order the output holds them, each once
/// (its codes and its scales are two entries of the plan).
fn quantized_in_order(plans: &[(TensorPlan, Entry)]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    plans
        .iter()
        .filter_map(|p| match &p.1 {
            Entry::QWeight(n) | Entry::Scales(n) => seen.insert(n.clone()).then(|| n.clone()),
            Entry::Raw(_) => None,
        })
        .collect()
}

/// What the quantizer thread reads of the plan.
#[derive(Clone, Copy)]
pub(super) struct Work<'p> {
    sources: &'p HashMap<String, Source>,
    jobs: &'p HashMap<String, Job>,
    importances: &'p HashMap<String, Vec<f32>>,
    /// The hessian file and its label (`--recipe gptq`).
    hessian: Option<&'p (QuantizedFile, String)>,
}

/// The quantizer thread of [`quantize_and_write`]: each weight of `order`
/// quantized (or imported) and sent to the writer, until a failure or a
/// closed channel (the writer stopped).
fn produce(
    input: &Input,
    order: Vec<String>,
    work: Work<'_>,
    recipe: qlinear::Recipe,
    bar: Option<&indicatif::ProgressBar>,
    tx: &std::sync::mpsc::SyncSender<(String, Result<Quantized, String>)>,
) {
    let Work {
        sources,
        jobs,
        importances,
        hessian,
    } = work;
    for name in order {
        let (Some(src), Some(job)) = (sources.get(&name), jobs.get(&name)) else {
            break;
        };
        if let Some(bar) = bar {
            bar.set_message(name.clone());
        }
        let (n, k) = (src.shape[0], src.shape[1]);
        let q = if job.lossless {
            import_q4_0(input, &name)
        } else {
            let rows = |r: usize, out: &mut Vec<f32>| input.row_f32(&name, r, k, out);
            let prefix = name.strip_suffix(".weight").unwrap_or(&name);
            let factor = match hessian {
                Some((file, label)) => gptq_factor_of(file, label, prefix, &name, k).map(Some),
                None => Ok(None),
            };
            factor.and_then(|factor| {
                let aid = match (&factor, importances.get(&name)) {
                    (Some(f), _) => Aid::Gptq(f),
                    (None, Some(a)) => Aid::Importance(a),
                    (None, None) => Aid::None,
                };
                quantize_tensor(n, k, &rows, job.scheme, recipe, aid)
            })
        };
        if let Some(bar) = bar {
            bar.inc(src.bytes as u64);
        }
        let failed = q.is_err();
        // a closed channel means the writer stopped: nothing more to do
        if tx.send((name, q)).is_err() || failed {
            break;
        }
    }
}

/// The report's line for one quantized or imported weight.
fn report_line(input: &Input, name: &str, src: &Source, job: &Job, recipe: qlinear::Recipe, q: &Quantized) -> String {
    let (n, k, scheme) = (src.shape[0], src.shape[1], job.scheme);
    let out_bytes = q.qweight.len() + q.scales.len();
    if job.lossless {
        format!(
            "{}  [{n}, {k}]  {scheme} imported losslessly from {} (every code and scale bit kept)  {} -> \
             {out_bytes} bytes\n",
            esc(name),
            src.what,
            src.bytes,
        )
    } else {
        let from = match input {
            Input::Gguf(_) => format!(" from {} (dequantized, then requantized)", src.what),
            Input::Safetensors(_) => String::new(),
        };
        format!(
            "{}  [{n}, {k}]  {scheme} {recipe}{from}  {} -> {out_bytes} bytes  max|err| {:.3e}  SNR {:.1} dB\n",
            esc(name),
            src.bytes,
            q.stats.max_abs_err,
            q.stats.snr_db()
        )
    }
}

/// A GGUF `Q4_0` weight as q4g32 bytes, bit for bit (`docs/FORMAT.md`,
/// "GGUF input"): the error statistics are zero by construction.
pub(super) fn import_q4_0(input: &Input, name: &str) -> Result<Quantized, String> {
    let Input::Gguf(f) = input else {
        return Err(format!("{}: not a GGUF tensor", esc(name)));
    };
    let w = f.q4g32_from_q4_0(name).map_err(|e| esc(&e.to_string()))?;
    let [qweight, scales] = encode::quantized(&qlinear::QuantizedWeight::Q4(w));
    Ok(Quantized {
        qweight,
        scales,
        stats: Stats::default(),
    })
}

/// Decodes row `r` of a weight into f32 values (cleared first).
pub(super) type RowSource<'a> = dyn Fn(usize, &mut Vec<f32>) -> Result<(), String> + Sync + 'a;

/// What a recipe reads beside the weight: nothing, an importance per
/// column (activation-aware) or the factor of the layer's hessian (GPTQ).
#[derive(Clone, Copy)]
pub(super) enum Aid<'a> {
    None,
    Importance(&'a [f32]),
    Gptq(&'a GptqFactor),
}

/// Quantizes one `[n, k]` tensor, whose row `r` `rows` decodes to f32, with
/// `recipe` (weighted by an importance for activation-aware, spread by the
/// hessian's factor for gptq: `aid`), rows in parallel, into its on-disk
/// `qweight` and `scales` bytes.
pub(super) fn quantize_tensor(
    n: usize,
    k: usize,
    rows: &RowSource<'_>,
    scheme: QScheme,
    recipe: Recipe,
    aid: Aid<'_>,
) -> Result<Quantized, String> {
    let [qshape, sshape] = scheme.shapes(n, k);
    let q_row = qshape[1];
    let s_row =
        if sshape.len() == 2 { sshape[1] } else { 1 } * if matches!(scheme, QScheme::Q4Grouped(_)) { 2 } else { 4 };
    let mut qweight = zeroed(n, q_row, "its qweight")?;
    let mut scales = zeroed(n, s_row, "its scales")?;
    if n == 0 || k == 0 {
        return Ok(Quantized {
            qweight,
            scales,
            stats: Stats::default(),
        });
    }
    let tasks: Vec<Result<Stats, String>> = qweight
        .par_chunks_mut((q_row * ROWS_PER_TASK).max(1))
        .zip(scales.par_chunks_mut((s_row * ROWS_PER_TASK).max(1)))
        .enumerate()
        .map(|(t, (qw, sc))| {
            let mut w = Vec::with_capacity(k);
            let mut stats = Stats::default();
            let mut codes = vec![0i8; k];
            let mut gscales = vec![f16::ZERO; if let QScheme::Q4Grouped(g) = scheme { k / g } else { 0 }];
            let mut deq: Vec<f32> = Vec::with_capacity(k + 1);
            for j in 0..ROWS_PER_TASK.min(n - t * ROWS_PER_TASK) {
                let r = t * ROWS_PER_TASK + j;
                rows(r, &mut w)?;
                let at = |e: RecipeError| match e {
                    RecipeError::NonFinite { col, value, .. } => format!("non-finite value {value} at row {r}, column {col}"),
                    RecipeError::ScaleOverflow { group, col_start, col_end, amax, .. } => format!(
                        "f16 scale overflow at row {r}, group {group} (columns {col_start}..{col_end}): max |w| = {amax}"
                    ),
                    e => format!("row {r}: {e}"),
                };
                let qw = &mut qw[j * q_row..(j + 1) * q_row];
                let sc = &mut sc[j * s_row..(j + 1) * s_row];
                match scheme {
                    QScheme::Q8 => {
                        // the recipe alone: a converter needs no selftest or plan
                        let s = match aid {
                            Aid::Importance(a) => quantize_row_q8_weighted(&w, a, &mut codes),
                            Aid::Gptq(f) => quantize_row_q8_gptq(&w, f, &mut codes),
                            Aid::None => quantize_row_q8_with(recipe, &w, &mut codes),
                        }
                        .map_err(at)?;
                        encode::q8_row(&codes, s, qw, sc).map_err(|e| e.to_string())?;
                        deq.clear();
                        deq.extend(codes.iter().map(|&c| f32::from(c) * s));
                        stats = stats.merge(row_stats(&w, &deq));
                    }
                    QScheme::Q4 => {
                        let s = match aid {
                            Aid::Importance(a) => quantize_row_q4_weighted(&w, a, qw),
                            Aid::Gptq(f) => quantize_row_q4_gptq(&w, f, qw),
                            Aid::None => quantize_row_q4_with(recipe, &w, qw),
                        }
                        .map_err(at)?;
                        unpack_row_f32(qw, k, &mut deq);
                        deq.iter_mut().for_each(|d| *d *= s);
                        stats = stats.merge(row_stats(&w, &deq));
                        encode::q4_row(s, qw, sc).map_err(|e| e.to_string())?;
                    }
                    QScheme::Q4Grouped(g) => {
                        match aid {
                            Aid::Importance(a) => quantize_row_q4_grouped_weighted(&w, a, g, qw, &mut gscales),
                            Aid::Gptq(f) => quantize_row_q4_grouped_gptq(&w, f, g, qw, &mut gscales),
                            Aid::None => quantize_row_q4_grouped_with(recipe, &w, g, qw, &mut gscales),
                        }
                        .map_err(at)?;
                        unpack_row_f32(qw, k, &mut deq);
                        for (d, s) in deq.chunks_mut(g).zip(&gscales) {
                            let s = s.to_f32();
                            d.iter_mut().for_each(|d| *d *= s);
                        }
                        stats = stats.merge(row_stats(&w, &deq));
                        encode::q4_grouped_row(&gscales, qw, sc).map_err(|e| e.to_string())?;
                    }
                }
            }
            Ok(stats)
        })
        .collect();
    let mut stats = Stats::default();
    for t in tasks {
        stats = stats.merge(t?); // the first failing row range, in row order
    }
    Ok(Quantized { qweight, scales, stats })
}

/// Error statistics of one row against its dequantized values: the maximum
/// absolute error exactly, and the sums of squares in eight f32 lanes
/// (vectorised) widened to f64 per row — ample for a figure in dB.
pub(super) fn row_stats(w: &[f32], deq: &[f32]) -> Stats {
    let (mut max_err, mut sig, mut noise) = (0f32, [0f32; 8], [0f32; 8]);
    for (wc, dc) in w.chunks(8).zip(deq.chunks(8)) {
        for (l, (&v, &d)) in wc.iter().zip(dc).enumerate() {
            let e = d - v;
            max_err = max_err.max(e.abs());
            sig[l] += v * v;
            noise[l] += e * e;
        }
    }
    let sum = |a: [f32; 8]| a.iter().map(|&x| f64::from(x)).sum::<f64>();
    Stats {
        max_abs_err: f64::from(max_err),
        signal: sum(sig),
        noise: sum(noise),
    }
}

/// The codes of a biased packed row as f32 (two per byte), into `out`.
pub(super) fn unpack_row_f32(packed: &[u8], k: usize, out: &mut Vec<f32>) {
    out.clear();
    out.resize(2 * packed.len(), 0.0);
    for (pair, &b) in out.chunks_exact_mut(2).zip(packed) {
        pair[0] = f32::from(b & 0x0F) - 8.0;
        pair[1] = f32::from(b >> 4) - 8.0;
    }
    out.truncate(k);
}

/// `rows * row_bytes` zero bytes, or "too large for this machine" when the
/// product overflows or the allocation fails (nothing is allocated then).
pub(super) fn zeroed(rows: usize, row_bytes: usize, what: &str) -> Result<Vec<u8>, String> {
    let too_large = || format!("{what} ([{rows}] rows of {row_bytes} bytes) is too large for this machine");
    let len = rows.checked_mul(row_bytes).ok_or_else(too_large)?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| too_large())?;
    v.resize(len, 0);
    Ok(v)
}
