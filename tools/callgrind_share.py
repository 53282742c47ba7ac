#!/usr/bin/env python3
"""The share of a `Linear::forward` call's instructions spent outside the
micro-kernels, counted by callgrind (issue 21's "<= 15 %" goal).

For each shape and configuration, runs
`qlinear-bench --profile-forward CONFIG --shape NxK --m M --calls C` under
`valgrind --tool=callgrind` at two call counts, one thread, and takes the
difference of the exclusive instruction counts per function, divided by
the extra calls: the selftest, the plan, the set-up and the process cancel.
A function counts as a micro-kernel when its name is in an ISA tier's crate
(`qlinear_kernels_x86::`, `qlinear_kernels_neon::`, `qlinear_kernels_wasm::`;
intrinsics inlined into a tile carry the tile's name); everything else (the
frame, its scalar tails, the checks, the activation quantizer's caller, the
driver, the bias) is outside.

usage: tools/callgrind_share.py [--tier avx2] [--m 1] [--shapes 576x576,...]
                               [--configs w8a8,...] [--bin target/release/qlinear-bench]
Needs valgrind (Debian: apt-get install valgrind). Prints a markdown table.
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

KERNEL_CRATES = ("qlinear_kernels_x86::", "qlinear_kernels_neon::", "qlinear_kernels_wasm::")
SHAPES = "192x576,384x384,1536x384,576x576,1536x576,576x1536"
CONFIGS = "w8a8,w4a8,w4a8_g32,w8a16,w4a16_g32"


def exclusive_counts(out_file):
    """Exclusive Ir per function name from callgrind_annotate."""
    text = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--inclusive=no", "--auto=no", out_file],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    counts = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*)", line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        # "file:function [binary]": the function is after the last ':' of the
        # file part, which may itself hold '::' paths, so split on ':q' etc.
        where = m.group(2).split(" [")[0]
        function = where.split(":", 1)[1] if ":" in where else where
        counts[function] += int(m.group(1).replace(",", ""))
    return counts


def run(binary, tier, config, n, k, m, calls, work):
    out = os.path.join(work, f"cg.{config}.{n}x{k}.{m}.{calls}")
    env = dict(os.environ, RAYON_NUM_THREADS="1")
    if tier:
        env["QLINEAR_INT8_TIER"] = tier
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", binary,
         "--profile-forward", config, "--shape", f"{n}x{k}", "--m", str(m), "--calls", str(calls)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return exclusive_counts(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="target/release/qlinear-bench")
    p.add_argument("--tier", default="", help="QLINEAR_INT8_TIER for every run (default: the plan's per configuration)")
    p.add_argument("--m", type=int, default=1)
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--configs", default=CONFIGS)
    p.add_argument("--calls", type=int, default=20, help="extra calls between the two runs")
    p.add_argument("--detail", type=int, default=0, help="list this many of the largest outside functions")
    a = p.parse_args()
    if subprocess.run(["which", "valgrind"], capture_output=True).returncode != 0:
        sys.exit("callgrind_share: valgrind is not installed (apt-get install valgrind)")
    def planned_tier(config):
        # the plan's tier for this configuration at M, pinned for the measured
        # runs: the plan times its candidates for a while, which would not
        # cancel between two runs (and a plan may pick a tier per family)
        probe = subprocess.run([a.bin, "--profile-forward", config, "--shape", "8x64", "--m", str(a.m),
                                "--calls", "1"], capture_output=True, text=True, check=True)
        return re.search(r" on (\S+) \(", probe.stderr).group(1)
    tiers = {c: a.tier or planned_tier(c) for c in a.configs.split(",")}
    print(f"instructions per Linear::forward call, M = {a.m}, one thread, on the tier the plan picks for "
          f"each configuration (callgrind, {a.calls} extra calls)")
    print("| N × K | config | tier | instructions per call | in micro-kernels | outside | outside share |")
    print("|---|---|---|--:|--:|--:|--:|")
    with tempfile.TemporaryDirectory() as work:
        for shape in a.shapes.split(","):
            n, k = map(int, shape.split("x"))
            for config in a.configs.split(","):
                base = run(a.bin, tiers[config], config, n, k, a.m, 2, work)
                more = run(a.bin, tiers[config], config, n, k, a.m, 2 + a.calls, work)
                diff = {f: (more[f] - base[f]) / a.calls for f in set(base) | set(more)}
                total = sum(diff.values())
                inside = sum(v for f, v in diff.items() if f.startswith(KERNEL_CRATES))
                outside = total - inside
                print(f"| {n} × {k} | {config} | {tiers[config]} | {total:,.0f} | {inside:,.0f} | {outside:,.0f} | "
                      f"{100 * outside / max(total, 1):.0f} % |", flush=True)
                rest = sorted(((v, f) for f, v in diff.items() if not f.startswith(KERNEL_CRATES)), reverse=True)
                for v, f in rest[: a.detail]:
                    print(f"|   | {f[:90]} | | {v:,.0f} | | | |")


if __name__ == "__main__":
    main()
