#!/usr/bin/env python3
"""Renders target/qlinear-bench.json (written by `cargo xtask bench`) as the
Markdown tables of docs/BENCHMARKS.md, so no figure there is copied by hand.

Usage: bench_table.py [JSON]
"""
import json
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "target/qlinear-bench.json"
data = json.load(open(path))
rows = data["rows"]
if "bandwidth_gbps" in data:
    # one run of the matrix (before `--repeat`)
    bw = data["bandwidth_gbps"]
    print(f"Memory-bandwidth probe (1 GiB sequential read, median of 5): "
          f"**{bw['1']:.2f} GB/s** with 1 thread, **{bw['2']:.2f} GB/s** with 2 threads.\n")
else:
    # `--repeat N`: every repeat has its own probe, recorded in each row
    probes = {}
    for r in rows:
        for rep in r.get("repeats", []):
            probes.setdefault((r["threads"], rep["repeat"]), rep["probe_gbps"])
    for t in sorted({t for t, _ in probes}):
        each = ", ".join(f"{probes[(t, i)]:.2f}" for i in sorted(i for tt, i in probes if tt == t))
        print(f"Memory-bandwidth probe, {t} thread{'s' if t > 1 else ''}, per repeat: {each} GB/s.  ")
    print(f"CPU: {data.get('cpu', '?')}; {data.get('repeat', 1)} repeats; median (min–max) over the repeats.\n")


def fmt(v, spec):
    return "–" if v is None else format(v, spec)


def table(title, keep):
    sel = [r for r in rows if keep(r)]
    if not sel:
        return
    print(f"### {title}\n")
    print("| family | tier | M | N×K | thr | cache | median µs | weight GB/s | % of bw | GFLOP/s | × f32 | × scalar |")
    print("|---|---|--:|---|--:|---|--:|--:|--:|--:|--:|--:|")
    for r in sel:
        t = f"{r['median_us']:.1f}"
        if "min_us" in r and len(r.get("repeats", [])) > 1:
            t += f" ({r['min_us']:.1f}–{r['max_us']:.1f})"
        print(f"| {r['family']} | {r['tier']} | {r['m']} | {r['n']}×{r['k']} | {r['threads']} | {r['cache']} | "
              f"{t} | {r['gbps']:.2f} | {r['pct_bw']:.1f} | {r['gflops']:.1f} | "
              f"{fmt(r['ratio_f32'], '.2f')} | {fmt(r['ratio_scalar'], '.2f')} |")
    print()


big = lambda r: (r["n"], r["k"]) == (11008, 4096)
mid = lambda r: (r["n"], r["k"]) == (4096, 4096)
small = lambda r: (r["n"], r["k"]) == (2048, 2048)
table("Decode targets: M = 1, 11008×4096, cold, 2 threads",
      lambda r: big(r) and r["m"] == 1 and r["cache"] == "cold" and r["threads"] == 2)
table("Batch: M = 16, 11008×4096, 2 threads",
      lambda r: big(r) and r["m"] == 16 and r["threads"] == 2)
table("M = 1, 4096×4096 (hot and cold, 1 and 2 threads)", lambda r: mid(r) and r["m"] == 1)
table("M = 16, 4096×4096", lambda r: mid(r) and r["m"] == 16)
table("Prefill: M = 64 and 256, 11008×4096", lambda r: big(r) and r["m"] in (64, 256))
table("Prefill: M = 64 and 256, 4096×4096", lambda r: mid(r) and r["m"] in (64, 256))
table("M = 1, 11008×4096, the rest", lambda r: big(r) and r["m"] == 1 and not (r["cache"] == "cold" and r["threads"] == 2))
table("2048×2048", small)
