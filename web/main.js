// Runs while the page loads: instantiates one of the two builds of
// qlinear_web.wasm (inlined as base64 by qlinear_web.js; plain C-ABI exports,
// no JS glue): the relaxed-SIMD build where this browser validates it, else
// the SIMD128 build. Runs the selftest, times the GEMVs with
// performance.now(), and writes a RESULT line that `cargo xtask browser`
// reads back from the DOM.
(function () {
  const $ = (id) => document.getElementById(id);
  try {
    const decode = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const relaxedBytes = decode(QLINEAR_WASM_RELAXED_BASE64);
    const relaxed = WebAssembly.validate(relaxedBytes);
    const bytes = relaxed ? relaxedBytes : decode(QLINEAR_WASM_BASE64);
    const build = relaxed ? "relaxed-simd" : "simd128";
    const q = new WebAssembly.Instance(new WebAssembly.Module(bytes), {}).exports;
    const text = () => new TextDecoder().decode(new Uint8Array(q.memory.buffer, q.qlinear_output_ptr(), q.qlinear_output_len()));

    const proven = q.qlinear_selftest() === 1;
    const report = text();
    $("selftest").textContent = `build: ${build}\n${report}`;

    const rows = [];
    const [n, k] = [4096, 4096];
    for (const [family, name] of [[0, "w8a8"], [1, "w4a8"]]) {
      const tiers = [[0, "scalar"], [1, "wasm-simd128"]];
      if (relaxed) tiers.push([2, "wasm-relaxed-simd"]);
      for (const [index, tier] of tiers) {
        if (q.qlinear_gemv_setup(family, index, n, k) !== 1) {
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
    const relaxedProven = /wasm-relaxed-simd\s+ok/.test(report);
    const ok = proven && simdProven && (!relaxed || relaxedProven);
    $("result").textContent = `RESULT: ${ok ? "PASS" : "FAIL"} build ${build} (all present tiers proven: ${proven}, simd128 proven: ${simdProven}, relaxed-simd proven: ${relaxedProven})`;
  } catch (e) {
    $("result").textContent = `RESULT: FAIL ${e}`;
  }
})();
