// The page's decoder, in a Web Worker so that a long step never blocks the
// page. It loads the widest build of qlinear_web.wasm this browser
// validates (the registry's wasm tiers, in order, from builds.json; the
// page may force one) and then answers the page's messages (main.js): load a model file, generate,
// time GEMVs. Every reply is { kind, ... }; a failure is
// { kind: "error", during, message } and leaves the worker ready for the
// next request.

let q = null; // the wasm-bindgen module
let decoder = null;
let build = null;

const post = (m) => self.postMessage(m);
const now = () => performance.now();

// A model file read into wasm memory in chunks: a 16 MiB slice at a time,
// so that JavaScript never holds a second copy of the whole file.
const CHUNK = 16 << 20;

// Threads: more than one needs a build with atomics, whose memory is a
// SharedArrayBuffer, which a browser gives only to a cross-origin isolated
// page; there rayon's pool runs on `threads` Web Workers
// (wasm-bindgen-rayon). One thread runs the build without atomics.
async function init(forced, threads) {
  const isolated = self.crossOriginIsolated === true;
  if (threads > 1 && !isolated) threads = 1;
  const builds = await (await fetch("builds.json")).json();
  const names = builds.map((b) => b.name);
  const order = forced ? [forced] : builds.filter((b) => b.threads === threads > 1).map((b) => b.name).reverse();
  for (const [i, name] of order.entries()) {
    if (!names.includes(name)) throw new Error(`no build named ${name}; the builds are ${names.join(", ")}`);
    const bytes = await (await fetch(`pkg/${name}/qlinear_web_bg.wasm`)).arrayBuffer();
    // the first build needs only SIMD128; a wider one may not validate
    if (i === order.length - 1 || WebAssembly.validate(bytes)) {
      q = await import(`./pkg/${name}/qlinear_web.js`);
      await q.default({ module_or_path: bytes });
      build = name;
      break;
    }
  }
  if (q.initThreadPool) {
    if (!isolated) throw new Error(`the ${build} build needs a cross-origin isolated page`);
    await q.initThreadPool(threads);
  }
  decoder = new q.Decoder();
  // no selftest yet: loading a model proves and plans its own census (its
  // layers' families at their K values), which is far less than the
  // whole table at the default census
  return {
    kind: "ready",
    build,
    builds: names,
    features: q.features(),
    tiers: q.page_tiers(),
    isolated,
    threads: q.threads(),
  };
}

async function load({ file, url, modes, weights, kv }) {
  const t0 = now();
  let bytes = 0;
  if (file) {
    decoder.reserve(file.size);
    for (let at = 0; at < file.size; at += CHUNK) {
      const chunk = new Uint8Array(await file.slice(at, at + CHUNK).arrayBuffer());
      decoder.append(chunk);
      bytes += chunk.length;
    }
  } else {
    const response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
    const size = Number(response.headers.get("Content-Length"));
    if (!Number.isFinite(size)) throw new Error(`${url}: the server gave no Content-Length`);
    decoder.reserve(size);
    const reader = response.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      decoder.append(value);
      bytes += value.length;
    }
  }
  const read_ms = now() - t0;
  const description = decoder.load(modes || "", weights || "", kv || "");
  // what loading proved and planned (a converted file; none for a GGUF)
  const s = decoder.start_up();
  const selftest = s ? { text: s.text, passed: s.passed, selftest_ms: s.selftest_ms, plan_ms: s.plan_ms } : null;
  if (s) s.free();
  return {
    kind: "loaded",
    description,
    selftest,
    tier: decoder.tier(),
    bytes,
    read_ms,
    load_ms: now() - t0,
    memory_bytes: q.memory_bytes(),
  };
}

function generate({ prompt, chat, max_tokens, temperature, seed, digests }) {
  const t0 = now();
  const prompt_tokens = decoder.start(prompt, chat, max_tokens, temperature, seed, digests);
  const prefill_ms = now() - t0;
  post({ kind: "prefilled", prompt_tokens, prefill_ms });
  const t1 = now();
  let first_token_ms = null;
  for (;;) {
    const token = decoder.step();
    if (token === undefined) break;
    if (first_token_ms === null) first_token_ms = now() - t0;
    post({ kind: "token", id: token.id, text: token.text });
    token.free();
  }
  const tokens = decoder.generated();
  return {
    kind: "generated",
    prompt_ids: Array.from(decoder.prompt_ids()),
    tokens: Array.from(tokens),
    digests: decoder.digests(),
    prompt_tokens,
    prefill_ms,
    decode_ms: now() - t1,
    // the first token's logits come from the prefill: the decode steps
    // are the tokens after it
    decode_steps: Math.max(tokens.length - 1, 0),
    memory_bytes: q.memory_bytes(),
  };
}

// The bench: an untimed warm-up run, then `rounds` timed ones.
function bench({ ids, tokens, rounds }) {
  decoder.bench(Uint32Array.from(ids.slice(0, 16)), 16);
  const runs = [];
  for (let r = 0; r < rounds; r++) {
    const [prefill, decode] = decoder.bench(Uint32Array.from(ids), tokens);
    runs.push({ prefill_tok_s: prefill, decode_tok_s: decode });
  }
  return { kind: "bench", runs, memory_bytes: q.memory_bytes() };
}

function gemv() {
  const rows = [];
  const [n, k] = [4096, 4096];
  for (const [family, name] of [[0, "w8a8"], [1, "w4a8"]]) {
    for (const [index, tier] of q.page_tiers().entries()) {
      if (!q.gemv_setup(family, index, n, k)) {
        rows.push(`${name} ${tier}: not dispatchable`);
        continue;
      }
      q.gemv_run(); // warm-up
      const times = [];
      for (let i = 0; i < 9; i++) {
        const t0 = now();
        q.gemv_run();
        times.push(now() - t0);
      }
      times.sort((a, b) => a - b);
      rows.push(`${name} ${tier} M=1 ${n}x${k}: median ${(times[4] * 1000).toFixed(0)} us per call (9 calls)`);
    }
  }
  return { kind: "gemv", rows };
}

// one request at a time, in order
let queue = Promise.resolve();
self.onmessage = (event) => {
  const m = event.data;
  queue = queue.then(async () => {
    try {
      if (m.kind === "init") post(await init(m.build, m.threads));
      else if (!q) throw new Error("the module is not loaded");
      else if (m.kind === "load") post(await load(m));
      else if (m.kind === "generate") post(generate(m));
      else if (m.kind === "gemv") post(gemv());
      else if (m.kind === "bench") post(bench(m));
      else throw new Error(`unknown request ${m.kind}`);
    } catch (e) {
      post({ kind: "error", during: m.kind, message: e && e.message ? e.message : String(e) });
    }
  });
};
