#!/usr/bin/env python3
"""Prints the per-round ratios of SmolLM2's decode and prefill, qlinear
over llama.cpp, for the pairs of matched accuracy that docs/BENCHMARKS.md
compares, from the round files `cargo xtask smollm --bench --llamacpp`
writes (and that are kept under docs/benchmarks/runs/):

    python3 tools/smollm_ratios.py DIR

DIR holds bench-qlinear-R.json and bench-llamacpp-R.json for rounds R =
0, 1, ...; llama.cpp's faster row of flash attention off and on is the one
compared in each round (the row says which). Also prints each side's
tok/s per round, the weight bytes per token of qlinear's rows against
the same run's read probe, and both sides' load times (qlinear's in its
bench process, after the selftest; llama.cpp's the fastest of its rows in
the round, each a `Llama(...)` with the file mapped).
"""
import glob
import json
import os
import sys

# qlinear configuration (file stem, mode) -> llama.cpp file of matched accuracy
PAIRS = [
    (("q8-rotated", "W8A8"), "SmolLM2-135M-Instruct.Q8_0.gguf"),
    (("q4g32-gptq", "W4A8"), "SmolLM2-135M-Instruct.Q4_0.gguf"),
    # the big model (`--bench --big`): same weights on both sides
    (("big.q8", "W8A8"), "big.Q8_0.gguf"),
    (("big.q4g32", "W4A8"), "big.Q4_0.gguf"),
]


def value(v):
    return v["median"] if isinstance(v, dict) else v


def main() -> None:
    d = sys.argv[1]
    rounds = sorted(glob.glob(os.path.join(d, "bench-qlinear-*.json")))
    if not rounds:
        raise SystemExit(f"{d}: no bench-qlinear-R.json round files")
    print("| qlinear | llama.cpp | threads | round | qlinear decode tok/s | llama.cpp decode tok/s (flash attention) "
          "| decode ratio | prefill ratio | qlinear % of probe | load s qlinear / llama.cpp |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for path in rounds:
        r = path.rsplit("-", 1)[-1].split(".")[0]
        ours = json.load(open(path))
        theirs = json.load(open(os.path.join(d, f"bench-llamacpp-{r}.json")))
        for (stem, mode), peer in PAIRS:
            for t in sorted({row["threads"] for row in ours}):
                q = [row for row in ours if row["threads"] == t
                     and os.path.basename(row["model"]) == f"{stem}.safetensors@{mode}"]
                l = [row for row in theirs if row["threads"] == t and os.path.basename(row["model"]) == peer]
                if not q or not l:
                    continue
                q = q[0]
                best = max(l, key=lambda row: value(row["decode_tok_s"]))
                qd, ld = value(q["decode_tok_s"]), value(best["decode_tok_s"])
                qp = value(q["prefill_tok_s"])
                lp = max(value(row["prefill_tok_s"]) for row in l)
                share = 100 * qd * q["weight_bytes_per_token"] / 1e9 / q["probe_gb_s"]
                fa = "on" if best.get("flash_attn") else "off"
                loads = [row["load_s"] for row in l if "load_s" in row]
                load = f"{q['load_s']:.2f} / {min(loads):.2f}" if loads else f"{q['load_s']:.2f} / –"
                print(f"| {stem} {mode} | {peer} | {t} | {r} | {qd:.1f} | {ld:.1f} ({fa}) | {qd / ld:.2f} | "
                      f"{qp / lp:.2f} | {share:.0f} % | {load} |")


if __name__ == "__main__":
    main()
