#!/usr/bin/env python3
"""Alternate bench binaries (ABBA...) on shapes; print medians of VNNI rows per variant."""
import json, subprocess, sys, statistics, collections
variants = sys.argv[1].split(",")
shapes = sys.argv[2].split(",")
fams = sys.argv[3] if len(sys.argv) > 3 else "w4a8_g32"
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
ms = sys.argv[5] if len(sys.argv) > 5 else "1"
res = collections.defaultdict(list)
order = []
for r in range(rounds):
    order += variants if r % 2 == 0 else variants[::-1]
for s in shapes:
    for v in order:
        subprocess.run([f"/tmp/bench-{v}", "--quick", "--repeat", "1", "--only", fams, "--m", ms, "--shape", s],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        d = json.load(open("/work/main/target/qlinear-bench.json"))
        for row in d["rows"]:
            if row["tier"] in ("avx512-vnni", "avx2"):
                res[(row["family"], s, row["tier"], row["threads"], row["cache"], v)].append(row["median_us"])
keys = sorted({k[:5] for k in res})
print("family shape tier t cache | " + " | ".join(variants))
for k in keys:
    cells = []
    for v in variants:
        xs = res[k + (v,)]
        cells.append(f"{statistics.median(xs):8.1f} ({min(xs):.0f}-{max(xs):.0f})")
    print(" ".join(map(str, k)), "|", " | ".join(cells))
