#!/usr/bin/env node
// Cargo's runner for wasm32-wasip1: runs a WASI command module (a test
// binary, the CLI) under Node's node:wasi with the host's arguments and
// environment, the whole filesystem preopened at `/`, and its exit code.
import { readFile } from "node:fs/promises";
import { argv, env, exit } from "node:process";
import { setFlagsFromString } from "node:v8";
import { WASI } from "node:wasi";

// Relaxed SIMD (the wasm-relaxed-simd build) shipped in V8 11.4; Node.js 20
// has V8 11.3, where it is behind a flag. Set it only where the engine does
// not already validate a relaxed instruction (a newer V8 may drop the flag).
const relaxedProbe = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
  0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7b, // type: () -> v128
  0x03, 0x02, 0x01, 0x00, // one function of type 0
  // code: v128.const 0 (twice), i16x8.relaxed_dot_i8x16_i7x16_s, end
  0x0a, 0x2b, 0x01, 0x29, 0x00,
  0xfd, 0x0c, ...new Array(16).fill(0),
  0xfd, 0x0c, ...new Array(16).fill(0),
  0xfd, 0x92, 0x02, 0x0b,
]);
if (!WebAssembly.validate(relaxedProbe)) {
  setFlagsFromString("--experimental-wasm-relaxed-simd");
}

const [, , wasmPath, ...args] = argv;
const wasi = new WASI({
  version: "preview1",
  args: [wasmPath, ...args],
  env,
  preopens: { "/": "/" },
  returnOnExit: true,
});
const module = await WebAssembly.compile(await readFile(wasmPath));
const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
exit(wasi.start(instance));
