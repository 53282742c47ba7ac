#!/usr/bin/env python3
"""ARM estimates for docs/benchmarks/history.md: the hot loops of the aarch64 micro-kernels,
read from the release assembly, with instructions per weight counted and
cycles per loop iteration estimated by llvm-mca for named cores.

Usage (run by `cargo xtask arm-mca`, which builds the assembly and installs
Debian 12's `llvm-19` for its llvm-mca when missing: LLVM 14's has no
Neoverse scheduling models):

    tools/arm_mca.py ASM_FILE [--mca llvm-mca]

For each registered micro-kernel (`<tier>::entry::<family>_<wr>x<xr>`) it finds
(following the entry's tail call) the innermost loop with the most multiply instructions (`sdot`, `smmla`,
`smull`/`smull2`, `fmul`), counts its instructions and its products (x·w
pairs: an `sdot` is 16, an `smmla` 32, an `smull`/`smull2` 8, an `fmul` 4),
and asks llvm-mca for the cycles of one iteration in steady state on each
core. Instructions per weight divide by the weights the loop reads, the
products over the tile's `xr` activation rows (a batch loop may cover fewer
rows than the tile: the ratio stays right); products per cycle compare tiles
of different shapes. These are estimates from a model of
the core, not measurements: qemu runs the code but does not time it.
"""

import re
import subprocess
import sys

KERNELS = [
    # (label, symbol part, activation rows of the tile)
    ("neon W8A8 4x1", "4neon5entry8w8a8_4x1", 1),
    ("neon W4A8 4x1", "4neon5entry8w4a8_4x1", 1),
    ("neon W4A8 4x4", "4neon5entry8w4a8_4x4", 4),
    ("sdot W8A8 4x1", "4sdot5entry8w8a8_4x1", 1),
    ("sdot W8A8 4x4", "4sdot5entry8w8a8_4x4", 4),
    ("sdot W4A8 4x1", "4sdot5entry8w4a8_4x1", 1),
    ("sdot W4A8 4x4", "4sdot5entry8w4a8_4x4", 4),
    ("i8mm W8A8 4x8", "4i8mm5entry8w8a8_4x8", 8),
    ("i8mm W4A8 4x8", "4i8mm5entry8w4a8_4x8", 8),
    ("neon W8A16 4x1", "5float5entry9w8a16_4x1", 1),
    ("neon W4A16 4x1", "5float5entry9w4a16_4x1", 1),
]
PRODUCTS = {"sdot": 16, "smmla": 32, "smull": 8, "smull2": 8, "fmul": 4}
# Neoverse N1 is the server core built on Cortex-A76's microarchitecture;
# LLVM (19) has a scheduling model for N1 but none for A76 itself (its
# `-mcpu=cortex-a76` falls back to Cortex-A57's), so N1 stands for both.
CORES = ["neoverse-n1", "neoverse-n2", "neoverse-v1"]
NEEDS = {"smmla": {"neoverse-n2", "neoverse-v1"}, "sdot": {"neoverse-n1", "neoverse-n2", "neoverse-v1"}}


def functions(asm):
    """Maps each function symbol to its instruction lines (labels kept)."""
    out, name, body = {}, None, []
    for line in asm.splitlines():
        m = re.match(r"^([A-Za-z_.$][\w.$]*):", line)
        if m and not m.group(1).startswith(".L"):
            if name:
                out[name] = body
            name, body = m.group(1), []
            continue
        if name is not None:
            body.append(line)
    if name:
        out[name] = body
    return out


def instructions(lines):
    ins = []
    for line in lines:
        s = line.split("//")[0].strip()
        if not s or s.startswith(".") and not s.startswith(".L"):
            continue
        ins.append(s)
    return ins


def loops(body):
    """Innermost loops: the instructions from a label to a backward branch
    to it, for each such pair that contains no other."""
    ins = instructions(body)
    spans = []
    for j, s in enumerate(ins):
        m = re.match(r"^b(\.\w+)?\s+(\.L\w+)$|^(cbn?z|tbn?z)\s+.*,\s*(\.L\w+)$", s)
        if not m:
            continue
        target = m.group(2) or m.group(4)
        if target + ":" in ins[:j]:
            spans.append((ins.index(target + ":"), j))
    inner = [(i, j) for (i, j) in spans if not any(i < a and b <= j and (a, b) != (i, j) for (a, b) in spans)]
    return [(i, [x for x in ins[i + 1 : j + 1] if not x.endswith(":")]) for (i, j) in inner]


def products(loop):
    n = 0
    for s in loop:
        op = s.split()[0]
        if op in PRODUCTS and (op != "fmul" or ".4s" in s):
            n += PRODUCTS[op]
    return n


def mca(loop, core, tool):
    text = "\n".join(loop) + "\n"
    r = subprocess.run(
        [tool, "-mtriple=aarch64-linux-gnu", f"-mcpu={core}", "-iterations=200", "-mattr=+dotprod,+i8mm"],
        input=text,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        return None
    m = re.search(r"Total Cycles:\s+(\d+)", r.stdout)
    return int(m.group(1)) / 200 if m else None


def main():
    path = sys.argv[1]
    tool = sys.argv[sys.argv.index("--mca") + 1] if "--mca" in sys.argv else "llvm-mca"
    asm = open(path).read()
    funcs = functions(asm)
    header = ["kernel", "instr/iter", "products/iter", "instr/weight"] + [f"{c} cycles/iter" for c in CORES] + [
        f"{c} products/cycle" for c in CORES
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for label, part, xr in KERNELS:
        names = [n for n in funcs if part in n]
        if not names:
            print(f"| {label} | (not found) |")
            continue
        body = funcs[names[0]]
        # a registered entry is a tail call to its micro-kernel: follow it
        for _ in range(3):
            ins = instructions(body)
            target = next((x.split()[1] for x in ins if re.match(r"^b\s+_Z", x)), None)
            if target is None or target not in funcs or any(x.split()[0] in PRODUCTS for x in ins):
                break
            body = funcs[target]
        best = max(loops(body), key=lambda lp: products(lp[1]), default=None)
        if best is None or products(best[1]) == 0:
            print(f"| {label} | (no multiply loop) |")
            continue
        loop = best[1]
        prods = products(loop)
        cyc = []
        for core in CORES:
            ok = all(core in NEEDS[op] for op in NEEDS if any(s.split()[0] == op for s in loop))
            cyc.append(mca(loop, core, tool) if ok else None)
        row = [label, str(len(loop)), str(prods), f"{len(loop) * xr / prods:.3f}"]
        row += [f"{c:.2f}" if c else "—" for c in cyc]
        row += [f"{prods / c:.1f}" if c else "—" for c in cyc]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
