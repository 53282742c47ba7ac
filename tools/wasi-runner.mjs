#!/usr/bin/env node
// Cargo's runner for wasm32-wasip1: runs a WASI command module (a test
// binary, the CLI) under Node's node:wasi with the host's arguments and
// environment, the whole filesystem preopened at `/`, and its exit code.
import { readFile } from "node:fs/promises";
import { argv, env, exit } from "node:process";
import { WASI } from "node:wasi";

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
