#!/usr/bin/env python3
"""The aarch64 tiers' instructions per `Linear::forward` call, counted under
qemu-user: callgrind_share.py's table for the tiers this project can only
emulate (issue 21). Instruction counts are not time (qemu's are the guest's
instructions, not a core's cycles), so this answers "how much of a call is
outside the micro-kernels" and "how many more instructions grouped decode
runs than per channel" on each aarch64 tier, not how fast either is.

For each tier, shape and configuration, runs the aarch64 build of
`qlinear-bench --profile-forward CONFIG --shape NxK --m M --calls C` under
`qemu-aarch64` with the plugin tools/qemu-insn/insn_by_symbol.c at two call
counts, the tier forced (`QLINEAR_INT8_TIER`) on the CPU model that has it,
and takes the difference per symbol divided by the extra calls: the
selftest, the plan, the set-up and the process cancel. A symbol counts as a
micro-kernel when it is in the NEON tiers' crate (`qlinear_kernels_neon`);
everything else (the frame, the checks, the quantizer's caller, the driver,
the bias, libc) is outside.

usage: tools/qemu_insn_share.py [--tiers neon,neon-sdot,neon-i8mm] [--m 1]
                                [--shapes 192x576,...] [--configs w4a8,w4a8_g32]
                                [--detail N]
Needs qemu-user and gcc (which `cargo xtask test` installs for the aarch64
suite) and the aarch64 build: `cargo build --release --target
aarch64-unknown-linux-gnu -p qlinear-benches`. Prints markdown tables.
"""

import argparse
import collections
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target/aarch64-unknown-linux-gnu/release/qlinear-bench")
PLUGIN_SRC = os.path.join(ROOT, "tools/qemu-insn/insn_by_symbol.c")
KERNEL_CRATE = "qlinear_kernels_neon"
SHAPES = "192x576,384x384,1536x384,576x576,1536x576,576x1536"
CONFIGS = "w8a8,w4a8,w4a8_g32"
# the CPU model that has each tier (`-cpu max` has FEAT_DotProd and FEAT_I8MM)
CPU = {"neon": "cortex-a72", "neon-sdot": "neoverse-n1", "neon-i8mm": "max"}


def counts(plugin, tier, config, n, k, m, calls, work):
    out = os.path.join(work, f"q.{tier}.{config}.{n}x{k}.{m}.{calls}")
    subprocess.run(
        ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu", "-cpu", CPU[tier], "-plugin", f"{plugin},out={out}",
         BIN, "--profile-forward", config, "--shape", f"{n}x{k}", "--m", str(m), "--calls", str(calls)],
        env=dict(os.environ, RAYON_NUM_THREADS="1", QLINEAR_INT8_TIER=tier),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    c = collections.Counter()
    with open(out) as f:
        for line in f:
            count, symbol = line.rstrip("\n").split(" ", 1)
            c[symbol] += int(count)
    return c


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tiers", default="neon,neon-sdot,neon-i8mm")
    p.add_argument("--m", type=int, default=1)
    p.add_argument("--shapes", default=SHAPES)
    p.add_argument("--configs", default=CONFIGS)
    p.add_argument("--calls", type=int, default=20, help="extra calls between the two runs")
    p.add_argument("--detail", type=int, default=0, help="list this many of the largest outside symbols")
    a = p.parse_args()
    for tool in ("qemu-aarch64", "gcc"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            sys.exit(f"qemu_insn_share: {tool} is not installed")
    if not os.path.exists(BIN):
        sys.exit("qemu_insn_share: build it first: cargo build --release --target aarch64-unknown-linux-gnu "
                 "-p qlinear-benches")
    with tempfile.TemporaryDirectory() as work:
        plugin = os.path.join(work, "insn_by_symbol.so")
        subprocess.run(["gcc", "-shared", "-fPIC", "-O2", "-o", plugin, PLUGIN_SRC], check=True)
        per_call = {}
        print(f"guest instructions per Linear::forward call under qemu-aarch64, M = {a.m}, one thread "
              f"({a.calls} extra calls)")
        print("| tier | N × K | config | instructions per call | in micro-kernels | outside | outside share |")
        print("|---|---|---|--:|--:|--:|--:|")
        for tier in a.tiers.split(","):
            for shape in a.shapes.split(","):
                n, k = map(int, shape.split("x"))
                for config in a.configs.split(","):
                    base = counts(plugin, tier, config, n, k, a.m, 2, work)
                    more = counts(plugin, tier, config, n, k, a.m, 2 + a.calls, work)
                    diff = {s: (more[s] - base[s]) / a.calls for s in set(base) | set(more)}
                    total = sum(diff.values())
                    inside = sum(v for s, v in diff.items() if KERNEL_CRATE in s)
                    per_call[(tier, shape, config)] = total
                    print(f"| {tier} | {n} × {k} | {config} | {total:,.0f} | {inside:,.0f} | {total - inside:,.0f} | "
                          f"{100 * (total - inside) / max(total, 1):.0f} % |", flush=True)
                    outside = sorted(((v, s) for s, v in diff.items() if KERNEL_CRATE not in s), reverse=True)
                    for v, s in outside[: a.detail]:
                        print(f"|   |   | {s} | {v:,.0f} | | | |")
        if "w4a8" in a.configs.split(",") and "w4a8_g32" in a.configs.split(","):
            print()
            print("grouped W4A8 against per channel, instructions per call")
            print("| tier | " + " | ".join(s.replace("x", " × ") for s in a.shapes.split(",")) + " |")
            print("|---|" + "--:|" * len(a.shapes.split(",")))
            for tier in a.tiers.split(","):
                cells = [f"{per_call[(tier, s, 'w4a8_g32')] / per_call[(tier, s, 'w4a8')]:.2f}×"
                         for s in a.shapes.split(",")]
                print(f"| {tier} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
