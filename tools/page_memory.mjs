#!/usr/bin/env node
// The page's wasm memory, stage by stage, under Node.js: the same Decoder
// the page's worker drives (web/worker.js), from a build that `cargo xtask
// browser` made (target/web-pkg/NAME, a build without threads), on a model
// file read in 16 MiB chunks, then a 16-token warm-up and a bench of 128
// prompt tokens and 128 decode steps, as `cargo xtask browser --bench`
// times them, its KV cache in `KV` (`f32`, the page's default, or `bf16`).
// Prints the memory in MiB after each stage and, last, the memory over the
// file's size.
//
//   node --experimental-wasm-relaxed-simd tools/page_memory.mjs wasm-relaxed-simd target/smollm/q4g32-gptq.safetensors [MODES [KV]]
//
// (Node 20 needs the flag for the relaxed-SIMD build; `wasm-simd128` runs
// without it.)
import { open, readFile } from "node:fs/promises";
import { argv, exit } from "node:process";
import { resolve } from "node:path";

const [, , build, file, modes = "", kv = ""] = argv;
if (!build || !file) {
  console.error("usage: page_memory.mjs BUILD MODEL [MODES [KV]]");
  exit(2);
}
const pkg = resolve(`target/web-pkg/${build}`);
const q = await import(`${pkg}/qlinear_web.js`);
await q.default({ module_or_path: await readFile(`${pkg}/qlinear_web_bg.wasm`) });
const mib = () => (q.memory_bytes() / 1048576).toFixed(1);
const decoder = new q.Decoder();
const handle = await open(file);
const size = (await handle.stat()).size;
decoder.reserve(size);
console.log(`reserved ${mib()} MiB`);
const CHUNK = 16 << 20;
const chunk = Buffer.alloc(CHUNK);
for (let at = 0; at < size; at += CHUNK) {
  const { bytesRead } = await handle.read(chunk, 0, CHUNK, at);
  decoder.append(new Uint8Array(chunk.buffer, chunk.byteOffset, bytesRead));
}
await handle.close();
console.log(`read ${mib()} MiB (the file: ${(size / 1048576).toFixed(1)} MiB)`);
decoder.load(modes, "", kv);
console.log(`loaded ${mib()} MiB`);
const ids = Array.from({ length: 128 }, (_, i) => 100 + i);
decoder.bench(Uint32Array.from(ids.slice(0, 16)), 16);
const [prefill, decode] = decoder.bench(Uint32Array.from(ids), 128);
console.log(`after the bench ${mib()} MiB (prefill ${prefill.toFixed(1)} tok/s, decode ${decode.toFixed(1)} tok/s)`);
console.log(`wasm memory / file: ${(q.memory_bytes() / size).toFixed(3)}`);
