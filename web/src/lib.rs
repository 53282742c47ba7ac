//! The browser build of qlinear (`wasm32-unknown-unknown`, built twice: with
//! `+simd128`, and with `+simd128,+relaxed-simd` for browsers that have
//! relaxed SIMD): plain C-ABI exports, no JavaScript glue, for
//! `web/index.html`. The page loads the relaxed build where the browser
//! validates it, runs the selftest (the proof table and the plan, as text in
//! linear memory) and times W8A8 / W4A8 GEMVs on each tier of the build with
//! `performance.now()`.
// every `unsafe` block states why it holds, on the line above it
#![deny(clippy::undocumented_unsafe_blocks)]

use std::sync::Mutex;

use qlinear_dispatch::{autotuned_plan, cpu_features, selftest_report, Int8Tier, Route};
use qlinear_quant_recipe::{GroupSize, QuantizedMatrix, QuantizedMatrixQ4, QuantizedWeight};

static OUTPUT: Mutex<String> = Mutex::new(String::new());

struct Gemv {
    route: Route,
    weights: QuantizedWeight,
    x: Vec<f32>,
    y: Vec<f32>,
}

static GEMV: Mutex<Option<Gemv>> = Mutex::new(None);

fn set_output(text: String) {
    *OUTPUT.lock().unwrap_or_else(|e| e.into_inner()) = text;
}

/// Runs the selftest and the plan; their text is left in the output buffer.
/// Returns 1 if every compiled-in tier passed its proof, else 0.
#[no_mangle]
pub extern "C" fn qlinear_selftest() -> u32 {
    let report = selftest_report();
    let plan = match autotuned_plan() {
        Ok(p) => p.to_string(),
        Err(e) => format!("plan: {e}\n"),
    };
    set_output(format!("cpu features: {}\n{report}{plan}", cpu_features().join(" ")));
    u32::from(report.all_present_passed())
}

/// Address of the output text (UTF-8).
#[no_mangle]
pub extern "C" fn qlinear_output_ptr() -> *const u8 {
    OUTPUT.lock().unwrap_or_else(|e| e.into_inner()).as_ptr()
}

/// Length of the output text in bytes.
#[no_mangle]
pub extern "C" fn qlinear_output_len() -> usize {
    OUTPUT.lock().unwrap_or_else(|e| e.into_inner()).len()
}

/// The tiers the page can time, by index: the scalar tier, then the
/// registry's WebAssembly tiers in its order.
fn page_tiers() -> Vec<Int8Tier> {
    std::iter::once(Int8Tier::Scalar)
        .chain(Int8Tier::of_arch("wasm32"))
        .collect()
}

/// Leaves the names of the tiers the page can time in the output buffer, one
/// a line, in index order (the indices `qlinear_gemv_setup` takes), and
/// returns how many there are.
#[no_mangle]
pub extern "C" fn qlinear_page_tiers() -> u32 {
    let tiers = page_tiers();
    set_output(tiers.iter().map(|t| format!("{t}\n")).collect());
    tiers.len() as u32
}

/// Prepares a GEMV (`family` 0 = W8A8, 1 = W4A8; `tier` an index of the
/// page's tiers, `qlinear_page_tiers`) of an `[n, k]` weight.
/// Returns 1 on success, 0 if the tier is not dispatchable in this build or
/// the shape is refused.
#[no_mangle]
pub extern "C" fn qlinear_gemv_setup(family: u32, tier: u32, n: u32, k: u32) -> u32 {
    let (n, k) = (n as usize, k as usize);
    let Some(&tier) = page_tiers().get(tier as usize) else {
        return 0;
    };
    let Ok(route) = Route::for_tier(tier) else { return 0 };
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 7919 % 2001) as f32 - 1000.0) * 1e-3).collect();
    let weights = match family {
        0 => QuantizedMatrix::quantize(n, k, &w).map(QuantizedWeight::Q8),
        _ => QuantizedMatrixQ4::quantize(n, k, GroupSize::PerChannel, &w).map(QuantizedWeight::Q4),
    };
    let Ok(weights) = weights else { return 0 };
    let x = (0..k).map(|i| ((i * 31 % 101) as f32 - 50.0) * 0.01).collect();
    *GEMV.lock().unwrap_or_else(|e| e.into_inner()) = Some(Gemv {
        route,
        weights,
        x,
        y: vec![0.0; n],
    });
    1
}

/// Runs the prepared GEMV once (M = 1, activations quantized per call) and
/// returns `y[0]` (so the work cannot be optimised away), NaN if none is prepared.
#[no_mangle]
pub extern "C" fn qlinear_gemv_run() -> f32 {
    let mut guard = GEMV.lock().unwrap_or_else(|e| e.into_inner());
    let Some(g) = guard.as_mut() else { return f32::NAN };
    let r = match &g.weights {
        QuantizedWeight::Q8(w) => g.route.linear_q8_dynamic(&g.x, 1, w, &mut g.y),
        QuantizedWeight::Q4(w) => g.route.linear_q4_dynamic(&g.x, 1, w, &mut g.y),
    };
    if r.is_err() {
        return f32::NAN;
    }
    g.y[0]
}
