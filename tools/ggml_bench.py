#!/usr/bin/env python3
"""ggml's own matrix multiply, timed the way `qlinear-bench` times qlinear's:
the peer behind issue 20's "W4A8 grouped 32 against ggml's repacked Q4_0".

ggml comes from the PyPI package `llama-cpp-python` (llama.cpp built from
source with the native CPU flags), installed by `cargo xtask bench --ggml`
into a virtual environment under `target/`; this script loads the `libggml*`
shared libraries of that package with ctypes and calls ggml's C API:

* the weights are quantized by `ggml_quantize_chunk` (Q4_0 or Q8_0) from the
  same f32 matrix `qlinear-bench` uses (`data(n·k, 1)`) and uploaded with
  `ggml_backend_tensor_set` into the CPU backend's extra buffer type
  (`CPU_REPACK`, which repacks Q4_0 into the interleaved layout llama.cpp's
  CPU path runs: what llama.cpp does with a model's weights) or, with
  `--plain`, into the plain CPU buffer;
* `ggml_mul_mat(W [K, N], X [K, M])` is one graph per weight copy, computed
  by `ggml_backend_graph_compute` on the CPU backend with 1 or 2 threads
  (ggml quantizes X to Q8_0 inside, as llama.cpp does);
* hot: one copy; cold: copies totalling at least 256 MiB and twice the L3,
  visited in turn, as `qlinear-bench` does. The median of repeated calls
  (at least 5, about `--budget` seconds a row).

Prints one line per row and writes JSON rows in `qlinear-bench`'s form
(family `w4a8_g32` for Q4_0 and `w8a8` for Q8_0, tier `ggml:q4_0` or
`ggml:q8_0`) to `--json`, so `tools/bench_table.py` can set them beside
qlinear's rows of the same run.

With `--alternate BIN --repeat R`, runs R rounds of BIN (a `qlinear-bench`)
on the same slice (`--quick --shape --m --only w8a8,w4a8_g32`) and then
itself, alternated, and prints each ggml row against qlinear's plan row of
the same bytes class (Q4_0 against W4A8 grouped 32, Q8_0 against W8A8):
medians (min–max) over the rounds and their ratio, also written to
`--json` as `rows` and `against`.

Usage: ggml_bench.py --lib DIR [--shape 11008x4096] [--m 1,16,256]
       [--types q4_0,q8_0] [--threads 1,2] [--cache hot,cold] [--plain]
       [--budget 0.12] [--json FILE] [--alternate BIN --repeat R]
"""
import argparse
import ctypes as C
import glob
import json
import os
import statistics
import sys
import time

GGML_TYPE = {"f32": 0, "q4_0": 2, "q8_0": 8}
BLOCK_BYTES = {"q4_0": 18, "q8_0": 34}  # per 32 weights
FAMILY = {"q4_0": "w4a8_g32", "q8_0": "w8a8"}


class InitParams(C.Structure):
    _fields_ = [("mem_size", C.c_size_t), ("mem_buffer", C.c_void_p), ("no_alloc", C.c_bool)]


def load(libdir):
    """The ggml libraries of llama-cpp-python, base first (RTLD_GLOBAL, so
    the CPU backend and ggml find its symbols)."""
    libs = {}
    for name in ("libggml-base", "libggml-cpu", "libggml"):
        found = sorted(glob.glob(os.path.join(libdir, name + ".so*")))
        if not found:
            sys.exit(f"ggml_bench: {name}.so not found in {libdir}")
        libs[name] = C.CDLL(found[0], mode=C.RTLD_GLOBAL)
    return libs


def bind(libs):
    base, cpu = libs["libggml-base"], libs["libggml-cpu"]
    p = C.c_void_p
    sig = {
        (base, "ggml_init"): (p, [InitParams]),
        (base, "ggml_free"): (None, [p]),
        (base, "ggml_tensor_overhead"): (C.c_size_t, []),
        (base, "ggml_graph_overhead"): (C.c_size_t, []),
        (base, "ggml_new_tensor_2d"): (p, [p, C.c_int, C.c_int64, C.c_int64]),
        (base, "ggml_mul_mat"): (p, [p, p, p]),
        (base, "ggml_new_graph"): (p, [p]),
        (base, "ggml_build_forward_expand"): (None, [p, p]),
        (base, "ggml_quantize_chunk"): (C.c_size_t, [C.c_int, p, p, C.c_int64, C.c_int64, C.c_int64, p]),
        (base, "ggml_backend_alloc_ctx_tensors_from_buft"): (p, [p, p]),
        (base, "ggml_backend_tensor_set"): (None, [p, p, C.c_size_t, C.c_size_t]),
        (base, "ggml_backend_graph_compute"): (C.c_int, [p, p]),
        (base, "ggml_backend_buft_name"): (C.c_char_p, [p]),
        (base, "ggml_backend_reg_dev_get"): (p, [p, C.c_size_t]),
        (base, "ggml_backend_reg_get_proc_address"): (p, [p, C.c_char_p]),
        (base, "ggml_backend_buffer_free"): (None, [p]),
        (cpu, "ggml_backend_cpu_init"): (p, []),
        (cpu, "ggml_backend_cpu_set_n_threads"): (None, [p, C.c_int]),
        (cpu, "ggml_backend_cpu_buffer_type"): (p, []),
        (cpu, "ggml_backend_cpu_reg"): (p, []),
    }
    g = {}
    for (lib, name), (res, args) in sig.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            # some builds export the backend API from the other library
            other = cpu if lib is base else base
            f = getattr(other, name)
        f.restype, f.argtypes = res, args
        g[name] = f
    return g


def repack_buft(g):
    """The CPU backend's extra buffer type that repacks Q4_0 (CPU_REPACK)."""
    reg = g["ggml_backend_cpu_reg"]()
    dev = g["ggml_backend_reg_dev_get"](reg, 0)
    addr = g["ggml_backend_reg_get_proc_address"](reg, b"ggml_backend_dev_get_extra_bufts")
    if not addr:
        return None
    fn = C.CFUNCTYPE(C.POINTER(C.c_void_p), C.c_void_p)(addr)
    bufts = fn(dev)
    i = 0
    while bufts and bufts[i]:
        name = g["ggml_backend_buft_name"](bufts[i]).decode()
        if "REPACK" in name or "AARCH64" in name:
            return bufts[i]
        i += 1
    return None


def data(n, seed):
    """qlinear-bench's `data`: an LCG, (s >> 8) / 2^24 − 0.5, as f32."""
    import numpy as np
    out = np.empty(n, dtype=np.float32)
    s = seed
    # vectorised in chunks: the LCG is sequential, so step it in Python
    # once and jump with the affine map's powers per lane of a chunk
    lanes = 1 << 16
    a, c, mod = 1664525, 1013904223, 1 << 32
    seq = np.empty(lanes, dtype=np.uint64)
    for i in range(min(lanes, n)):
        s = (s * a + c) % mod
        seq[i] = s
    # a^lanes and c·(a^lanes − 1)/(a − 1), mod 2^32, to advance a whole chunk
    al, cl = 1, 0
    for _ in range(lanes):
        al, cl = (al * a) % mod, (cl * a + c) % mod
    done = 0
    cur = seq[: min(lanes, n)].copy()
    while done < n:
        take = min(lanes, n - done)
        out[done:done + take] = ((cur[:take] >> np.uint64(8)).astype(np.float64) / float(1 << 24) - 0.5)
        done += take
        cur = (cur * np.uint64(al) + np.uint64(cl)) % np.uint64(mod)
    return out


def rounds(args, here, qjson, qrows, grows):
    """The R alternated rounds: qlinear's slice, then ggml's, rows appended."""
    import subprocess
    for r in range(args.repeat):
        # qlinear's slice: every M of the quick matrix (its rows at other M are not compared)
        subprocess.run([args.alternate, "--quick", "--shape", args.shape, "--only", "w8a8,w4a8_g32"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for row in json.load(open(qjson))["rows"]:
            row["round"] = r
            qrows.append(row)
        out = os.path.join(os.path.dirname(qjson), f"ggml-round-{r}.json")
        cmd = [sys.executable, here, "--lib", args.lib, "--shape", args.shape, "--m", args.m, "--types", args.types,
               "--threads", args.threads, "--cache", args.cache, "--budget", str(args.budget), "--json", out]
        if args.plain:
            cmd.append("--plain")
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        for row in json.load(open(out))["rows"]:
            row["round"] = r
            grows.append(row)
        print(f"round {r + 1}/{args.repeat} done", file=sys.stderr, flush=True)


def alternate(args):
    """R rounds of qlinear-bench then this script on the same slice; the
    medians of each row over the rounds, and ggml against qlinear."""
    here = os.path.abspath(__file__)
    qrows, grows = [], []
    qjson = os.path.join(os.path.dirname(here), "..", "target", "qlinear-bench.json")
    # each round's runner writes qjson: the full matrix a user ran before
    # (`cargo xtask bench`) is put back afterwards, not left overwritten by
    # the last round's slice
    kept = open(qjson, "rb").read() if os.path.exists(qjson) else None
    try:
        rounds(args, here, qjson, qrows, grows)
    finally:
        if kept is not None:
            open(qjson, "wb").write(kept)
    key = lambda x: (x["family"], x["m"], x["n"], x["k"], x["threads"], x["cache"])
    ms = [int(v) for v in args.m.split(",")]
    against = []
    print("| family | M | N×K | thr | cache | qlinear plan µs (range) | ggml tier | ggml µs (range) | ggml / qlinear |")
    print("|---|--:|---|--:|---|--:|---|--:|--:|")
    for gk in sorted({key(x) + (x["tier"],) for x in grows}):
        if gk[1] not in ms:
            continue
        g = sorted(x["median_us"] for x in grows if key(x) + (x["tier"],) == gk)
        q = sorted(x["median_us"] for x in qrows if key(x) == gk[:6] and x["tier"].startswith("plan:"))
        if not q:
            continue
        qm, gm = statistics.median(q), statistics.median(g)
        plan = next(x["tier"] for x in qrows if key(x) == gk[:6] and x["tier"].startswith("plan:"))
        print(f"| {gk[0]} ({plan[5:]}) | {gk[1]} | {gk[2]}×{gk[3]} | {gk[4]} | {gk[5]} | {qm:.1f} ({q[0]:.1f}–{q[-1]:.1f}) | "
              f"{gk[6]} | {gm:.1f} ({g[0]:.1f}–{g[-1]:.1f}) | {gm / qm:.2f} |")
        against.append({"family": gk[0], "m": gk[1], "n": gk[2], "k": gk[3], "threads": gk[4], "cache": gk[5],
                        "qlinear_tier": plan, "qlinear_us": q, "ggml_tier": gk[6], "ggml_us": g, "ggml_over_qlinear": gm / qm})
    if args.json:
        json.dump({"rows": grows, "qlinear_rows": qrows, "against": against}, open(args.json, "w"), indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="the directory holding libggml*.so")
    ap.add_argument("--shape", default="11008x4096")
    ap.add_argument("--m", default="1,16,256")
    ap.add_argument("--types", default="q4_0,q8_0")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--cache", default="hot,cold")
    ap.add_argument("--plain", action="store_true", help="no repacking: the plain CPU buffer")
    ap.add_argument("--budget", type=float, default=0.12)
    ap.add_argument("--json", default=None)
    ap.add_argument("--alternate", default=None, help="a qlinear-bench binary to alternate with")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    if args.alternate:
        return alternate(args)
    n, k = (int(v) for v in args.shape.split("x"))
    g = bind(load(args.lib))
    backend = g["ggml_backend_cpu_init"]()
    repack = None if args.plain else repack_buft(g)
    if not args.plain and repack is None:
        sys.exit("ggml_bench: this ggml build has no CPU_REPACK buffer type (use --plain)")
    plain = g["ggml_backend_cpu_buffer_type"]()
    l3 = 0
    try:
        s = open("/sys/devices/system/cpu/cpu0/cache/index3/size").read().strip()
        l3 = int(s[:-1]) << (10 if s.endswith("K") else 20)
    except (OSError, ValueError):
        pass
    cold_bytes = max(256 << 20, 2 * l3)
    wf = data(n * k, 1)
    rows = []
    for typ in args.types.split(","):
        nbytes = n * k // 32 * BLOCK_BYTES[typ]
        q = C.create_string_buffer(nbytes)
        g["ggml_quantize_chunk"](GGML_TYPE[typ], wf.ctypes.data, q, 0, n, k, None)
        for cache in args.cache.split(","):
            copies = 1 if cache == "hot" else max(2, -(-cold_bytes // nbytes))
            # the weight copies, each in its own buffer of the chosen type
            wctx = g["ggml_init"](InitParams(g["ggml_tensor_overhead"]() * (copies + 1), None, True))
            ws = [g["ggml_new_tensor_2d"](wctx, GGML_TYPE[typ], k, n) for _ in range(copies)]
            wbuf = g["ggml_backend_alloc_ctx_tensors_from_buft"](wctx, repack if typ == "q4_0" and repack else plain)
            for w in ws:
                g["ggml_backend_tensor_set"](w, q, 0, nbytes)
            for m in (int(v) for v in args.m.split(",")):
                if m >= 64 and cache == "cold":
                    continue
                x = data(m * k, 3)
                size = g["ggml_tensor_overhead"]() * (2 * copies + 4) + copies * g["ggml_graph_overhead"]()
                cctx = g["ggml_init"](InitParams(size, None, True))
                xt = g["ggml_new_tensor_2d"](cctx, GGML_TYPE["f32"], k, m)
                graphs = []
                for w in ws:
                    out = g["ggml_mul_mat"](cctx, w, xt)
                    gf = g["ggml_new_graph"](cctx)
                    g["ggml_build_forward_expand"](gf, out)
                    graphs.append(gf)
                cbuf = g["ggml_backend_alloc_ctx_tensors_from_buft"](cctx, plain)
                g["ggml_backend_tensor_set"](xt, x.ctypes.data, 0, x.nbytes)
                for t in (int(v) for v in args.threads.split(",")):
                    g["ggml_backend_cpu_set_n_threads"](backend, t)
                    for i in range(2):
                        g["ggml_backend_graph_compute"](backend, graphs[i % copies])
                    times, start, i = [], time.perf_counter(), 2
                    while (len(times) < 5 or time.perf_counter() - start < args.budget) and len(times) < 400:
                        t0 = time.perf_counter()
                        status = g["ggml_backend_graph_compute"](backend, graphs[i % copies])
                        times.append(time.perf_counter() - t0)
                        if status != 0:
                            sys.exit(f"ggml_bench: graph compute failed with status {status}")
                        i += 1
                    us = statistics.median(times) * 1e6
                    tier = f"ggml:{typ}" + ("" if args.plain or typ != "q4_0" else "_repack")
                    print(f"{FAMILY[typ]:<10} {tier:<18} {m:>3} {n:>6} {k:>5} {t:>2} {cache:<5} {us:>10.1f}", flush=True)
                    rows.append({"family": FAMILY[typ], "tier": tier, "m": m, "n": n, "k": k, "threads": t,
                                 "cache": cache, "median_us": us, "weight_bytes": nbytes})
                g["ggml_backend_buffer_free"](cbuf)
                g["ggml_free"](cctx)
            g["ggml_backend_buffer_free"](wbuf)
            g["ggml_free"](wctx)
    if args.json:
        json.dump({"rows": rows}, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
