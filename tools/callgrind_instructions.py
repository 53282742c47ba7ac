#!/usr/bin/env python3
"""Where a function's instructions go inside one `Linear::forward` call:
each machine instruction of FUNCTION with its count per call, beside the
disassembly (how the frame's per-tile costs in docs/benchmarks/history.md,
"The frame's work per decode tile", were found).

Runs `qlinear-bench --profile-forward CONFIG --shape NxK --m M --calls C`
under `valgrind --tool=callgrind --dump-instr=yes`, collecting only inside
`qlinear::linear::Linear::forward` (the selftest, the plan and the set-up
are not counted), one thread, and prints every instruction of the
functions whose name contains FUNCTION that ran at least --min times a
call, then the total a call and a tile (--per TILES a call divides it).

usage: tools/callgrind_instructions.py CONFIG NxK FUNCTION [--m 1] [--tier avx2]
                                       [--calls 1000] [--per 1] [--min 0.5]
e.g.   tools/callgrind_instructions.py w8a8 576x576 frame::int::gemm_w8a8 --per 36
Needs valgrind and objdump (binutils).
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile


def counts_by_address(out_file, function):
    """Self cost (Ir) per instruction address of the functions whose name
    contains `function`, from a callgrind file made with --dump-instr=yes
    (positions `instr line`, each possibly relative: `+n`, `-n`, `*`)."""
    counts = collections.Counter()
    names, current, addr, after_calls = {}, None, 0, False
    for raw in open(out_file):
        line = raw.rstrip("\n")
        if line.startswith("fn="):
            m = re.match(r"fn=\((\d+)\)(?: (.*))?", line)
            if m.group(2):
                names[m.group(1)] = m.group(2)
            current = names.get(m.group(1))
            continue
        if line.startswith("cfn="):
            m = re.match(r"cfn=\((\d+)\)(?: (.*))?", line)
            if m and m.group(2):
                names[m.group(1)] = m.group(2)
            continue
        if line.startswith("calls="):
            # the next cost line is the call's inclusive cost: not this function's own
            after_calls = True
            continue
        if not line or not (line[0].isdigit() or line[0] in "+-*"):
            continue
        parts = line.split()
        tok = parts[0]
        addr = addr if tok == "*" else addr + int(tok, 0) if tok[0] in "+-" else int(tok, 0)
        if after_calls:
            after_calls = False
            continue
        if current and function in current and len(parts) > 2:
            counts[addr] += int(parts[2])
    return counts


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("shape")
    p.add_argument("function")
    p.add_argument("--bin", default="target/release/qlinear-bench")
    p.add_argument("--tier", default="avx2", help="QLINEAR_INT8_TIER (valgrind has no AVX-512)")
    p.add_argument("--m", type=int, default=1)
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--per", type=int, default=1, help="tiles a call, to divide the counts by")
    p.add_argument("--min", type=float, default=0.5, help="print instructions run at least this often a call (or tile)")
    a = p.parse_args()
    for tool in ("valgrind", "objdump"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            sys.exit(f"callgrind_instructions: {tool} is not installed")
    with tempfile.TemporaryDirectory() as work:
        out = os.path.join(work, "cg.out")
        env = dict(os.environ, RAYON_NUM_THREADS="1", QLINEAR_INT8_TIER=a.tier)
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--dump-instr=yes", "--collect-atstart=no",
             "--toggle-collect=qlinear::linear::Linear::forward*", f"--callgrind-out-file={out}", a.bin,
             "--profile-forward", a.config, "--shape", a.shape, "--m", str(a.m), "--calls", str(a.calls)],
            env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        counts = counts_by_address(out, a.function)
    if not counts:
        sys.exit(f"callgrind_instructions: no instruction of a function containing {a.function!r} ran")
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", a.bin], capture_output=True,
                         text=True, check=True).stdout
    per = a.calls * a.per
    total = 0.0
    for line in asm.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(.*)", line)
        if m and int(m.group(1), 16) in counts:
            c = counts[int(m.group(1), 16)] / per
            total += c
            if c >= a.min:
                print(f"{c:8.2f}  {m.group(1)}  {m.group(2)}")
    unit = "a call" if a.per == 1 else f"a tile ({a.per} a call)"
    print(f"total {total:.1f} instructions {unit} in functions containing {a.function!r}")


if __name__ == "__main__":
    main()
