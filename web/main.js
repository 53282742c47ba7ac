// The page: talks to the decoder's worker (worker.js), shows the selftest
// and the plan (run when a model loads, for its census), the model, the
// tokens as they come and the speeds. An error is
// shown on the page, and the page stays usable: another file can be loaded.
//
// `cargo xtask browser` opens it with ?check=URL[,URL…] (model files the
// server offers) &prompt=TEXT&tokens=N[&build=NAME][&weights=W][&kv=bf16][&gemv=0]:
// the page loads each file in turn, generates N greedy tokens with their
// logits' digests from the last, times the GEMVs, and POSTs everything to
// /result as JSON.
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const worker = new Worker("worker.js", { type: "module" });
const pageStart = performance.now();

// one outstanding request at a time: resolves with the worker's answer,
// rejects with its error
let pending = null;
const request = (message, onEvent) =>
  new Promise((resolve, reject) => {
    pending = { resolve, reject, onEvent };
    worker.postMessage(message);
  });
worker.onmessage = (event) => {
  const m = event.data;
  if (!pending) return;
  if (m.kind === "error") {
    const p = pending;
    pending = null;
    p.reject(new Error(`${m.during}: ${m.message}`));
  } else if (m.kind === "token" || m.kind === "prefilled") {
    pending.onEvent && pending.onEvent(m);
  } else {
    const p = pending;
    pending = null;
    p.resolve(m);
  }
};
worker.onerror = (e) => {
  $("error").textContent = `the worker failed: ${e.message}`;
  if (pending) pending.reject(new Error(e.message));
  pending = null;
};

const showError = (e) => {
  $("error").textContent = String(e.message || e);
};
const busy = (on) => {
  for (const id of ["file", "generate", "gemv"]) $(id).disabled = on;
};

let ready = null;
let loaded = null;
const buildLine = () => `build: ${ready.build} (of ${ready.builds.join(", ")})\n`;
// ms from the start of the page's load to the first token on it
let firstTokenAt = null;

async function loadModel(source) {
  $("error").textContent = "";
  $("model").textContent = "reading…";
  loaded = null;
  busy(true);
  try {
    loaded = await request({
      kind: "load",
      modes: $("modes").value.trim(),
      weights: $("weights").value,
      kv: $("kv").value,
      ...source,
    });
    const mib = (b) => (b / 1048576).toFixed(1);
    $("model").textContent =
      `${loaded.description}, decode tier ${loaded.tier}: ${mib(loaded.bytes)} MiB read in ` +
      `${loaded.read_ms.toFixed(0)} ms, loaded in ${loaded.load_ms.toFixed(0)} ms; ` +
      `wasm memory ${mib(loaded.memory_bytes)} MiB (${(loaded.memory_bytes / loaded.bytes).toFixed(2)}× the file)`;
    const s = loaded.selftest;
    if (s) {
      $("selftest").textContent =
        `${buildLine()}selftest of the file's census ${s.selftest_ms.toFixed(1)} ms, ` +
        `plan ${s.plan_ms.toFixed(1)} ms (the page's clock; in the load time)\n${s.text}`;
    }
  } catch (e) {
    $("model").textContent = "no model loaded";
    showError(e);
  } finally {
    busy(false);
  }
  return loaded;
}

async function generate(options) {
  $("error").textContent = "";
  $("output").textContent = "";
  $("speed").textContent = "prefill…";
  busy(true);
  try {
    const done = await request({ kind: "generate", ...options }, (m) => {
      if (m.kind === "token") {
        $("output").textContent += m.text;
        if (firstTokenAt === null) {
          firstTokenAt = performance.now() - pageStart;
          $("status").textContent += `; first token ${firstTokenAt.toFixed(0)} ms after the page began loading`;
        }
      }
    });
    const rate = (n, ms) => (ms > 0 ? ((n * 1000) / ms).toFixed(1) : "–");
    $("speed").textContent =
      `prefill ${done.prompt_tokens} tokens in ${done.prefill_ms.toFixed(0)} ms (${rate(done.prompt_tokens, done.prefill_ms)} tok/s); ` +
      `decode ${done.decode_steps} tokens in ${done.decode_ms.toFixed(0)} ms (${rate(done.decode_steps, done.decode_ms)} tok/s); ` +
      `${ready.threads} thread; wasm memory ${(done.memory_bytes / 1048576).toFixed(1)} MiB`;
    return done;
  } catch (e) {
    $("speed").textContent = "";
    showError(e);
    throw e;
  } finally {
    busy(false);
  }
}

async function gemv() {
  busy(true);
  try {
    const r = await request({ kind: "gemv" });
    $("timings").textContent = r.rows.join("\n");
    return r.rows;
  } finally {
    busy(false);
  }
}

$("file").onchange = () => {
  const file = $("file").files[0];
  if (file) loadModel({ file });
};
$("generate").onclick = () => {
  if (!loaded) {
    showError(new Error("pick a model file first"));
    return;
  }
  generate({
    prompt: $("prompt").value,
    chat: $("chat").checked,
    max_tokens: Number($("max").value),
    temperature: Number($("temperature").value),
    seed: 0,
    digests: false,
  }).catch(() => {});
};
$("gemv").onclick = () => gemv().catch(showError);
$("threads").onchange = () => {
  params.set("threads", $("threads").value);
  location.search = params.toString();
};

// ?bench=URL&ids=1,2,…&tokens=N[&rounds=R]: load the file, time it
// (worker.js's bench), POST the runs to /result
async function benchmark(url) {
  const result = { ready };
  try {
    if (params.get("weights")) $("weights").value = params.get("weights");
    if (params.get("kv")) $("kv").value = params.get("kv");
    if (params.get("modes")) $("modes").value = params.get("modes");
    result.loaded = await loadModel({ url });
    if (!result.loaded) throw new Error($("error").textContent);
    const ids = (params.get("ids") || "").split(",").filter((s) => s.length > 0).map(Number);
    const bench = await request({
      kind: "bench",
      ids,
      tokens: Number(params.get("tokens") || 128),
      rounds: Number(params.get("rounds") || 1),
    });
    result.runs = bench.runs;
    result.memory_bytes = bench.memory_bytes;
  } catch (e) {
    result.error = String(e.message || e);
  }
  await fetch("/result", { method: "POST", body: JSON.stringify(result) });
}

async function check(url) {
  const result = { ready };
  if (params.get("weights")) $("weights").value = params.get("weights");
  if (params.get("kv")) $("kv").value = params.get("kv");
  try {
    // each file in turn (a bad one first shows that its error leaves the
    // page able to load the next); generate with the last
    result.attempts = [];
    for (const u of url.split(",")) {
      result.loaded = await loadModel({ url: u });
      result.attempts.push(result.loaded ? { url: u, ok: true } : { url: u, error: $("error").textContent });
    }
    if (!result.loaded) throw new Error($("error").textContent);
    result.generated = await generate({
      prompt: params.get("prompt") || "",
      chat: false,
      max_tokens: Number(params.get("tokens") || 16),
      temperature: 0,
      seed: 0,
      digests: true,
    });
    if (params.get("gemv") !== "0") result.gemv = await gemv();
  } catch (e) {
    result.error = String(e.message || e);
  }
  result.page_ms = performance.now() - pageStart;
  result.first_token_ms = firstTokenAt;
  $("result").textContent = `RESULT: ${result.error ? "FAIL " + result.error : "DONE"}`;
  await fetch("/result", { method: "POST", body: JSON.stringify(result) });
}

(async () => {
  try {
    // one thread unless asked: ?threads=N (the page reloads with it)
    const threads = Math.max(1, Number(params.get("threads") || 1));
    $("threads").value = String(threads);
    ready = await request({ kind: "init", build: params.get("build") || undefined, threads });
    $("selftest").textContent =
      `${buildLine()}cpu features: ${ready.features.join(" ")}\n` +
      "the selftest and the plan run when a model file loads: its layers' kernel families at their K values";
    $("status").textContent =
      `${ready.build} build, ${ready.threads} thread${ready.threads > 1 ? "s" : ""}` +
      (ready.isolated ? "" : " (the page is not cross-origin isolated: one thread, and a coarser clock)") +
      `; ready ${(performance.now() - pageStart).toFixed(0)} ms after the page began loading`;
    busy(false);
  } catch (e) {
    $("selftest").textContent = "";
    showError(e);
    $("result").textContent = `RESULT: FAIL ${e.message || e}`;
    if (params.get("check")) await fetch("/result", { method: "POST", body: JSON.stringify({ error: String(e.message || e) }) });
    return;
  }
  if (params.get("check")) await check(params.get("check"));
  else if (params.get("bench")) await benchmark(params.get("bench"));
})();
