#!/usr/bin/env python3
"""Renders target/qlinear-bench.json (written by `cargo xtask bench`) as the
Markdown tables of docs/BENCHMARKS.md, so no figure there is copied by hand.

Usage: bench_table.py [JSON] [--goals | --candle | --plan | --vnni | --summary [--ggml GGML_JSON]]

--summary prints the one table a user reads first: for each family at
11008 × 4096 (the plan's rows), decode cold at two threads against the
probe, decode hot at one thread, a batch of 16 and a prefill of 256
against the f32 GEMM, and the plan's tiers; with `--ggml`, the JSON of
`cargo xtask bench --ggml`, each ggml row against qlinear's plan row of
the same bytes class, both from that run.

--candle prints, instead of the tables, each candle row against the plan's
row of the same bytes class in the same run (W4A8 grouped 32 against
Q4_0, W8A8 against Q8_0).

--plan prints the plan's tier against the fastest tier of the same run for
every family, M, shape, thread count and cache mode (the run's
`plan_against_best` rows), marking LOSES where the plan is over 5 % slower:
by the alternated re-measurement of the row where the run made one (a row
over 5 % by the matrix's medians is measured again, `CONFIRM_ROUNDS` in
benches/src/main.rs), else by the medians.

--vnni prints the ratios behind issue 20's goals (AVX-512 VNNI against AVX2,
decode against the probe, grouped against per channel, prefill against f32,
the plan against the fastest tier), each from the same run.

--goals prints, instead of the tables, the ratios behind issue 17's goals
(each from the same run: decode share of the probe, W4A16 and W8A16
against W4A8 and W8A8, grouped against per channel at M = 16, prefill
against f32) for both shapes of a `--quick` run.
"""
import json
import sys

# `--ggml FILE` takes a value; every other flag stands alone
argv = sys.argv[1:]
ggml_path = argv[argv.index("--ggml") + 1] if "--ggml" in argv and argv.index("--ggml") + 1 < len(argv) else None
args = [a for i, a in enumerate(argv) if not a.startswith("--") and not (i > 0 and argv[i - 1] == "--ggml")]
path = args[0] if args else "target/qlinear-bench.json"
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
if "revision" in data:
    # a run kept under docs/benchmarks/runs/ says what produced it
    print(f"Run: `{data.get('command', '?')}` on `{data['revision']}`, {data.get('date', '?')}.\n")


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




def row(family, tier, m, n, t, cache, k=4096):
    """The run's row; a tier ending in ':' (e.g. 'plan:') matches its prefix."""
    for r in rows:
        name_ok = r["tier"].startswith(tier) if tier.endswith(":") else r["tier"] == tier
        if name_ok and (r["family"], r["m"], r["n"], r["k"], r["threads"], r["cache"]) == (
                family, m, n, k, t, cache):
            return r
    return None


def span(r):
    return f"{r['median_us']:.1f} ({r['min_us']:.1f}–{r['max_us']:.1f})"


def loses(p):
    """The plan loses the row: the run's verdict, or (a JSON from before the
    re-measurement) the medians' ratio over 1.05."""
    return p.get("loses", p["ratio"] > 1.05)


def plan_table():
    print("| family | M | N×K | thr | cache | plan's tier | its µs | fastest tier | its µs | plan / fastest | "
          "again, alternated |")
    print("|---|--:|---|--:|---|---|--:|---|--:|--:|--:|")
    for p in data.get("plan_against_best", []):
        same = p.get("same_kernel") and p["plan_tier"] != p["fastest_tier"]
        flag = " (the same kernel)" if same else " **LOSES**" if loses(p) else ""
        c = p.get("confirm")
        again = "–" if not c else (f"{c['ratio']:.3f} ({c['rounds']} rounds: "
                                   f"{min(c['plan_us']):.1f}–{max(c['plan_us']):.1f} against "
                                   f"{min(c['fastest_us']):.1f}–{max(c['fastest_us']):.1f} µs)")
        print(f"| {p['family']} | {p['m']} | {p['n']}×{p['k']} | {p['threads']} | {p['cache']} | "
              f"{p['plan_tier']} | {p['plan_us']:.1f} | {p['fastest_tier']} | {p['fastest_us']:.1f} | "
              f"{p['ratio']:.3f} | {again}{flag} |")


def vnni_goals():
    v, a = "avx512-vnni", "avx2"
    print("| what | shape | t | cache | figure |")
    print("|---|---|--:|---|---|")
    for n in (11008, 4096):
        shape = f"{n}×4096"
        for fam in ("w8a8", "w4a8", "w4a8_g32"):
            for t in (1, 2):
                for cache in ("cold", "hot"):
                    rv, ra = row(fam, v, 1, n, t, cache), row(fam, a, 1, n, t, cache)
                    if rv and ra:
                        pct = f"{rv['pct_bw']:.1f} % of the probe, " if cache == "cold" else ""
                        print(f"| {fam} M = 1, VNNI {span(rv)} µs | {shape} | {t} | {cache} | "
                              f"{pct}AVX2 / VNNI {ra['median_us'] / rv['median_us']:.2f}× |")
        for m in (16,):
            for fam in ("w8a8", "w4a8", "w4a8_g32", "w8a16", "w4a16", "w4a16_g32"):
                for t in (1, 2):
                    for cache in ("hot", "cold"):
                        rv, ra = row(fam, v, m, n, t, cache), row(fam, a, m, n, t, cache)
                        if rv and ra:
                            print(f"| {fam} M = {m}, VNNI {span(rv)} µs | {shape} | {t} | {cache} | "
                                  f"AVX2 / VNNI {ra['median_us'] / rv['median_us']:.2f}× |")
        for m in (16, 256):
            for t in (1, 2):
                for cache in ("hot", "cold"):
                    g, p = row("w4a8_g32", v, m, n, t, cache), row("w4a8", v, m, n, t, cache)
                    if g and p:
                        print(f"| w4a8_g32 / w4a8 on VNNI, M = {m} | {shape} | {t} | {cache} | "
                              f"{g['median_us'] / p['median_us']:.2f}× |")
        for t in (1, 2):
            f = row("f32", "gemm", 256, n, t, "hot")
            for fam in ("w4a8", "w8a8", "w4a8_g32"):
                r = row(fam, v, 256, n, t, "hot")
                if f and r:
                    print(f"| {fam} M = 256 on VNNI, speed × f32 | {shape} | {t} | hot | "
                          f"{f['median_us'] / r['median_us']:.2f}× |")
        for c in rows:
            if c["tier"].startswith("candle:") and c["n"] == n and c["family"] == "w4a8_g32":
                r = row("w4a8_g32", v, c["m"], n, c["threads"], c["cache"])
                if r:
                    print(f"| w4a8_g32 VNNI against {c['tier']}, M = {c['m']} | {shape} | {c['threads']} | "
                          f"{c['cache']} | candle / VNNI {c['median_us'] / r['median_us']:.2f}× |")
    pairs = data.get("plan_against_best", [])
    if pairs:
        worst = max(p["ratio"] for p in pairs)
        suspects = sum(p["ratio"] > 1.05 for p in pairs)
        losing = sum(loses(p) for p in pairs)
        print(f"| the plan against the fastest tier | all | – | – | worst row by the medians {worst:.3f}×; "
              f"{suspects} of {len(pairs)} rows over 1.05 by the medians, {losing} still over when "
              f"measured again alternated |")


def goals():
    get = row

    def us(r):
        return f"{r['median_us']:.1f} ({r['min_us']:.1f}–{r['max_us']:.1f}) µs"

    plan = "plan:"
    print("| shape | what | figure |")
    print("|---|---|---|")
    for n in (11008, 4096):
        shape = f"{n}×4096"
        for fam in ("w8a8", "w4a8", "w4a8_g32"):
            r = get(fam, plan, 1, n, 2, "cold")
            if r:
                # bytes of one call, then each repeat's share of its own probe
                nbytes = r["gbps"] * r["median_us"] * 1e3
                per = ", ".join(f"{100 * nbytes / (rep['median_us'] * 1e3) / rep['probe_gbps']:.1f}"
                                for rep in r.get("repeats", []))
                print(f"| {shape} | {fam} M = 1 cold 2 t, % of probe | {r['pct_bw']:.1f} {('(' + per + ')') if per else ''}; {us(r)} |")
        for fl, it in (("w8a16", "w8a8"), ("w4a16", "w4a8")):
            for cache, t in (("cold", 2), ("cold", 1), ("hot", 2)):
                a, b = get(fl, plan, 1, n, t, cache), get(it, plan, 1, n, t, cache)
                if a and b:
                    print(f"| {shape} | {fl} / {it}, M = 1 {cache} {t} t | {a['median_us'] / b['median_us']:.2f}× |")
        for cache in ("hot", "cold"):
            for t in (1, 2):
                g, f = get("w4a16_g32", plan, 16, n, t, cache), get("f32", "gemm", 16, n, t, cache)
                if g and f:
                    print(f"| {shape} | w4a16_g32 speed × f32, M = 16 {cache} {t} t | {f['median_us'] / g['median_us']:.2f}× |")
        for cache in ("hot", "cold"):
            for t in (1, 2):
                g, p = get("w4a8_g32", plan, 16, n, t, cache), get("w4a8", plan, 16, n, t, cache)
                if g and p:
                    print(f"| {shape} | w4a8_g32 / w4a8, M = 16 {cache} {t} t | {g['median_us'] / p['median_us']:.2f}× |")
        for m in (64, 256):
            for t in (1, 2):
                f = get("f32", "gemm", m, n, t, "hot")
                for fam in ("w4a8", "w8a8", "w4a8_g32"):
                    r = get(fam, plan, m, n, t, "hot")
                    if f and r:
                        print(f"| {shape} | {fam} speed × f32, M = {m} hot {t} t | {f['median_us'] / r['median_us']:.2f}× |")


big = lambda r: (r["n"], r["k"]) == (11008, 4096)
mid = lambda r: (r["n"], r["k"]) == (4096, 4096)
small = lambda r: (r["n"], r["k"]) == (2048, 2048)
def candle():
    print("| family vs peer | M | N×K | cache | qlinear µs (range) | candle µs (range) | candle / qlinear |")
    print("|---|--:|---|---|--:|--:|--:|")
    for c in rows:
        if not c["tier"].startswith("candle:") or c["threads"] != 2:
            continue
        q = next((r for r in rows if r["tier"].startswith("plan:") and all(
            r[f] == c[f] for f in ("family", "m", "n", "k", "threads", "cache"))), None)
        if q:
            span = lambda r: f"{r['median_us']:.1f} ({r['min_us']:.1f}–{r['max_us']:.1f})"
            print(f"| {c['family']} vs {c['tier']} | {c['m']} | {c['n']}×{c['k']} | {c['cache']} | "
                  f"{span(q)} | {span(c)} | {c['median_us'] / q['median_us']:.2f} |")


def summary():
    n, k = 11008, 4096
    names = {"f32": "f32 (`gemm` crate)", "w8a8": "W8A8", "w4a8": "W4A8", "w4a8_g32": "W4A8 g32",
             "w8a16": "W8A16", "w4a16": "W4A16", "w4a16_g32": "W4A16 g32"}
    print(f"{n} × {k} (one FFN matrix of a 7B model), the plan's tier; median µs over the repeats, "
          "each repeat a median of repeated calls.\n")
    print("| family | bits a weight | decode (M = 1), cold, 2 threads | decode, hot, 1 thread | "
          "M = 16, cold, 2 threads | M = 256, hot, 2 threads | plan's tier, M = 1 / 16 |")
    print("|---|--:|--:|--:|--:|--:|---|")
    f256 = row("f32", "gemm", 256, n, 2, "hot", k)
    for fam, name in names.items():
        tier = "gemm" if fam == "f32" else "plan:"
        d = row(fam, tier, 1, n, 2, "cold", k)
        if d is None:
            continue
        bits = d["gbps"] * d["median_us"] * 1e3 * 8 / (n * k)
        cells = [f"{d['median_us']:.0f} µs ({d['pct_bw']:.0f} % of the probe)"]
        h = row(fam, tier, 1, n, 1, "hot", k)
        cells.append(f"{h['median_us']:.0f} µs" if h else "–")
        b = row(fam, tier, 16, n, 2, "cold", k)
        cells.append(f"{b['median_us']:.0f} µs" if b else "–")
        p = row(fam, tier, 256, n, 2, "hot", k)
        if p and f256 and fam != "f32":
            cells.append(f"{p['median_us'] / 1e3:.1f} ms ({f256['median_us'] / p['median_us']:.1f}× f32)")
        else:
            cells.append(f"{p['median_us'] / 1e3:.1f} ms" if p else "–")
        if fam == "f32":
            tiers = "–"
        else:
            t1 = row(fam, "plan:", 1, n, 2, "cold", k)["tier"].split(":", 1)[1]
            t16 = b["tier"].split(":", 1)[1] if b else "–"
            tiers = t1 if t1 == t16 else f"{t1} / {t16}"
        bits_s = "32" if fam == "f32" else f"{bits:.2f}"
        print(f"| {name} | {bits_s} | " + " | ".join(cells) + f" | {tiers} |")
    if ggml_path:
        g = json.load(open(ggml_path))
        print("\nBeside ggml (llama.cpp's CPU matrix multiply, `cargo xtask bench --ggml`), the same bytes class, "
              "alternated in one run; medians (min–max) of its rounds:\n")
        print("| qlinear | ggml | M | threads | cache | qlinear µs | ggml µs | qlinear's speed × ggml |")
        print("|---|---|--:|--:|---|--:|--:|--:|")
        for a in g.get("against", []):
            q, gg = sorted(a["qlinear_us"]), sorted(a["ggml_us"])
            med = lambda v: v[len(v) // 2]
            print(f"| {names.get(a['family'], a['family'])} ({a['qlinear_tier'].split(':', 1)[1]}) | "
                  f"{a['ggml_tier'].split(':', 1)[1]} | {a['m']} | {a['threads']} | {a['cache']} | "
                  f"{med(q):.0f} ({q[0]:.0f}–{q[-1]:.0f}) | {med(gg):.0f} ({gg[0]:.0f}–{gg[-1]:.0f}) | "
                  f"{a['ggml_over_qlinear']:.2f}× |")


if "--summary" in sys.argv:
    summary()
elif "--goals" in sys.argv:
    goals()
elif "--plan" in sys.argv:
    plan_table()
elif "--vnni" in sys.argv:
    vnni_goals()
elif "--candle" in sys.argv:
    candle()
else:
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
