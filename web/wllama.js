// The peer in the same Chromium: wllama (npm @wllama/wllama, which xtask
// installs pinned and serves at /wllama/) on a GGUF file, timed by
// llama.cpp's own counters (the completion's `timings`). Opened as
// wllama.html?model=URL&text=PROMPT&tokens=N&threads=T: loads the file,
// runs an untimed warm-up, then one completion of the prompt (text: the
// ids qlinear times, decoded; wllama 3.8.1 garbles a prompt given as ids)
// and N greedy tokens (the end of text ignored, nothing cached from the
// warm-up), and POSTs the timings and wllama's thread mode to /result.
import { Wllama } from "/wllama/index.js";

const params = new URLSearchParams(location.search);
const threads = Number(params.get("threads") || 1);
const text = params.get("text") || "";
const tokens = Number(params.get("tokens") || 128);
const result = { threads_asked: threads };
try {
  const wllama = new Wllama({ default: "/wllama/wasm/wllama.wasm" });
  // the file as one Blob (wllama's own ranged download is not needed on
  // loopback)
  const response = await fetch(params.get("model"));
  if (!response.ok) throw new Error(`${params.get("model")}: HTTP ${response.status}`);
  const blob = await response.blob();
  await wllama.loadModel([blob], { n_threads: threads, n_ctx: 512, n_batch: 512, n_gpu_layers: 0 });
  result.multithread = wllama.isMultithread();
  result.threads = wllama.getNumThreads();
  result.libllama = Wllama.getLibllamaVersion();
  const run = (prompt, max_tokens) =>
    wllama.createCompletion({ prompt, max_tokens, temp: 0, ignore_eos: true, cache_prompt: false });
  await run(text.slice(0, 64), 16);
  const r = await run(text, tokens);
  result.timings = r.timings;
  result.usage = r.usage;
} catch (e) {
  result.error = String((e && e.message) || e);
  result.stack = e && e.stack ? String(e.stack) : undefined;
}
document.getElementById("result").textContent = `RESULT: ${result.error ? "FAIL " + result.error : "DONE"}`;
await fetch("/result", { method: "POST", body: JSON.stringify(result) });
