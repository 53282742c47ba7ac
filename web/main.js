// Runs while the page loads: instantiates qlinear_web.wasm (inlined as base64
// by qlinear_web.js; plain C-ABI exports, no JS glue), runs the selftest,
// times the GEMVs with performance.now(), and writes a RESULT line that
// `cargo xtask browser` reads back from the DOM.
(function () {
  const $ = (id) => document.getElementById(id);
  try {
    const bytes = Uint8Array.from(atob(QLINEAR_WASM_BASE64), (c) => c.charCodeAt(0));
    const q = new WebAssembly.Instance(new WebAssembly.Module(bytes), {}).exports;
    const text = () => new TextDecoder().decode(new Uint8Array(q.memory.buffer, q.qlinear_output_ptr(), q.qlinear_output_len()));

    const proven = q.qlinear_selftest() === 1;
    const report = text();
    $("selftest").textContent = report;

    const rows = [];
    const [n, k] = [4096, 4096];
    for (const [family, name] of [[0, "w8a8"], [1, "w4a8"]]) {
      for (const [simd, tier] of [[0, "scalar"], [1, "wasm-simd128"]]) {
        if (q.qlinear_gemv_setup(family, simd, n, k) !== 1) {
          rows.push(`${name} ${tier}: not dispatchable`);
          continue;
        }
        q.qlinear_gemv_run(); // warm-up
        const times = [];
        for (let i = 0; i < 9; i++) {
          const t0 = performance.now();
          q.qlinear_gemv_run();
          times.push(performance.now() - t0);
        }
        times.sort((a, b) => a - b);
        rows.push(`${name} ${tier} M=1 ${n}x${k}: median ${(times[4] * 1000).toFixed(0)} us per call (9 calls)`);
      }
    }
    $("timings").textContent = rows.join("\n");
    const simdProven = /wasm-simd128\s+ok/.test(report);
    const ok = proven && simdProven;
    $("result").textContent = `RESULT: ${ok ? "PASS" : "FAIL"} (all present tiers proven: ${proven}, simd128 proven: ${simdProven})`;
  } catch (e) {
    $("result").textContent = `RESULT: FAIL ${e}`;
  }
})();
