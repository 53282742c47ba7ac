//! `qlinear-bench --load FILE [--in-place]`: what loading a converted model
//! costs, the two ways `ModelFile` offers. Opens FILE (copying, or with
//! `--in-place` reading the codes in place), builds a `Linear` of every
//! quantized prefix and reads every plain float tensor, keeps them all, and
//! prints the time and the peak RSS (`VmHWM`) beyond what the process held
//! before (the selftest and the plan run first, outside the timing).

use std::time::Instant;

use qlinear::ModelFile;

/// `VmHWM` (peak resident set) or `VmRSS` of this process, MiB.
fn status_mib(key: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Loads `path` and prints one line: file size, load time, peak RSS before
/// and after, and the peak's growth over the file size.
pub fn run(path: &str, in_place: bool) -> Result<(), String> {
    qlinear::init().map_err(|e| e.to_string())?;
    let size = std::fs::metadata(path).map_err(|e| format!("{path}: {e}"))?.len() as f64 / (1 << 20) as f64;
    let before = status_mib("VmHWM:").ok_or("no /proc/self/status")?;
    let t = Instant::now();
    let file = if in_place {
        ModelFile::open_in_place(path)
    } else {
        ModelFile::open(path)
    }
    .map_err(|e| e.to_string())?;
    let layers: Vec<_> = file
        .linears()
        .iter()
        .map(|p| file.linear(p))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let floats: Vec<Vec<f32>> = file
        .file()
        .tensor_names()
        .iter()
        .filter(|n| !n.ends_with(".qweight") && !n.ends_with(".scales"))
        .filter_map(|n| file.tensor_f32(n).ok())
        .collect();
    drop(file);
    let seconds = t.elapsed().as_secs_f64();
    let peak = status_mib("VmHWM:").ok_or("no /proc/self/status")?;
    // not `weight()`, which rebuilds a panel-form layer's natural form
    let shared = layers.iter().filter(|l| l.codes_shared()).count();
    println!(
        "{path}: {size:.1} MiB, {} layers ({shared} read in place), {} float tensors; {} in {seconds:.3} s; peak RSS \
         {before:.1} MiB before, {peak:.1} after: +{:.1} MiB, {:.2}× the file",
        layers.len(),
        floats.len(),
        if in_place { "in place" } else { "copied" },
        peak - before,
        (peak - before) / size
    );
    Ok(())
}
