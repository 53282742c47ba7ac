// Runs while the page loads: instantiates one of the builds of
// qlinear_web.wasm, one per wasm tier of the registry (inlined as base64 by
// qlinear_web.js; plain C-ABI exports, no JS glue): the last this browser
// validates, the relaxed-SIMD build where it has relaxed SIMD. Runs the selftest, times the GEMVs with
// performance.now(), and writes a RESULT line that `cargo xtask browser`
// reads back from the DOM.
(function () {
  const $ = (id) => document.getElementById(id);
  try {
    const decode = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    // QLINEAR_WASM_BUILDS: [tier, base64] in the registry's order, each
    // build containing the tiers before it; take the last one this browser
    // validates (the first needs only SIMD128)
    const builds = QLINEAR_WASM_BUILDS.map(([tier, b64]) => [tier, decode(b64)]);
    let chosen = builds.length - 1;
    while (chosen > 0 && !WebAssembly.validate(builds[chosen][1])) chosen--;
    const [build, bytes] = builds[chosen];
    const q = new WebAssembly.Instance(new WebAssembly.Module(bytes), {}).exports;
    const text = () => new TextDecoder().decode(new Uint8Array(q.memory.buffer, q.qlinear_output_ptr(), q.qlinear_output_len()));

    const proven = q.qlinear_selftest() === 1;
    const report = text();
    $("selftest").textContent = `build: ${build}\n${report}`;

    // the page's tiers, by index, from the module's registry
    q.qlinear_page_tiers();
    const tiers = text().split("\n").filter((t) => t.length > 0);
    const rows = [];
    const [n, k] = [4096, 4096];
    for (const [family, name] of [[0, "w8a8"], [1, "w4a8"]]) {
      for (const [index, tier] of tiers.entries()) {
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
    // every tier the chosen build contains is in the proof table as ok
    const built = builds.slice(0, chosen + 1).map(([tier]) => [tier, new RegExp(`${tier}\\s+ok`).test(report)]);
    const ok = proven && built.every(([, p]) => p);
    const each = built.map(([tier, p]) => `${tier} proven: ${p}`).join(", ");
    $("result").textContent = `RESULT: ${ok ? "PASS" : "FAIL"} build ${build} (all present tiers proven: ${proven}, ${each})`;
  } catch (e) {
    $("result").textContent = `RESULT: FAIL ${e}`;
  }
})();
