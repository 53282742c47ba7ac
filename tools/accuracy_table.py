#!/usr/bin/env python3
"""The accuracy table of `cargo xtask smollm --accuracy`: each row's
perplexity with a bootstrap interval, its bits a weight, and the pairs the
issue asks about, from the JSON that `qlinear-smollm --eval --json` wrote
and `tools/llamacpp_smollm.py` appended llama.cpp's rows to (each row with
every scored token's -ln p).

    python3 tools/accuracy_table.py EVAL.json [EVAL.json ...]

A qlinear row's bits a weight come from its converted file's header the
first time and are then recorded in its EVAL.json row, so a kept copy
(docs/benchmarks/runs/) reprints the same table without the models.

Interval: 95 %, from 2 000 resamples of the scored positions with
replacement (seeded per file), each resample's perplexity exp(mean -ln p). A pair (qlinear's
row against llama.cpp's) is compared on the same positions: the ratio of
their perplexities with a paired bootstrap interval (the same resampled
positions for both), so a ratio whose interval lies below 1 is lower
beyond the noise of the text's tokens. Positions are resampled one by one,
though neighbours within a window are not independent: the intervals are
the narrow side of the truth.
"""
import json
import struct
import sys

import numpy as np

RESAMPLES = 2000
SEED = 20261207


def bits_per_weight(path):
    """A converted qlinear file's tensors' bits a parameter, counted as
    llama.cpp's BPW counts a GGUF's (every tensor's bytes over every
    parameter; a quantized linear holds out x in_features parameters),
    from the safetensors header alone. `None` for another file."""
    path = path.split("@", 1)[0]
    if not path.endswith(".safetensors"):
        return None
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", {})
    size = sum(t["data_offsets"][1] - t["data_offsets"][0] for t in header.values())
    params = 0
    for name, t in header.items():
        if name.endswith(".qweight"):
            prefix = name[: -len(".qweight")]
            params += t["shape"][0] * int(meta[f"{prefix}.in_features"])
        elif name.endswith(".scales"):
            continue
        else:
            params += int(np.prod(t["shape"]))
    return 8 * size / params


def label(row):
    model = row["model"].rsplit("/", 1)[-1]
    return f"llama.cpp {model}" if row.get("peer") == "llama.cpp" else model


def main() -> None:
    for path in sys.argv[1:]:
        # seeded per file: a text's intervals do not depend on the others
        rng = np.random.default_rng(SEED)
        rows = json.load(open(path))
        scored = len(rows[0]["token_nll"])
        picks = rng.integers(0, scored, size=(RESAMPLES, scored))
        text = rows[0].get("text", "?")
        print(f"\n{text}: {rows[0]['tokens']} tokens, {scored} positions scored "
              f"(windows of {rows[0]['window']}, each one's second half)\n")
        print("| model | bits a weight | perplexity (95 % interval) | vs f32 | top-1 agreement with f32 |")
        print("|---|--:|--:|--:|--:|")
        nll, changed = {}, False
        for r in rows:
            v = np.asarray(r["token_nll"])
            if len(v) != scored:
                sys.exit(f"{path}: {label(r)} scored {len(v)} positions, the first row {scored}")
            nll[label(r)] = v
            boot = np.exp(v[picks].mean(axis=1))
            lo, hi = np.percentile(boot, [2.5, 97.5])
            bpw = r.get("bits_per_weight")
            if bpw is None and (bpw := bits_per_weight(r["model"])) is not None:
                r["bits_per_weight"] = bpw
                changed = True
            bpw = f"{bpw:.2f}" if bpw else "32 (f32 path)"
            print(f"| {label(r)} | {bpw} | {r['perplexity']:.4f} ({lo:.4f}–{hi:.4f}) | "
                  f"{100 * (r['perplexity'] / rows[0]['perplexity'] - 1):+.2f} % | {100 * r['top1_agreement']:.2f} % |")
        if changed:
            # qlinear's rows keep their files' bits a weight, so a kept copy
            # of EVAL.json reprints this table without the model files
            json.dump(rows, open(path, "w"), indent=2)
        pairs = [(a, b) for a in nll for b in nll
                 if not a.startswith("llama.cpp") and "@W4A8" in a and b.startswith("llama.cpp") and "Q4" in b]
        if pairs:
            print("\n| qlinear | llama.cpp | perplexity ratio (95 % paired interval) | qlinear lower beyond the interval |")
            print("|---|---|--:|---|")
        for a, b in pairs:
            ratio = np.exp(nll[a].mean() - nll[b].mean())
            boot = np.exp(nll[a][picks].mean(axis=1) - nll[b][picks].mean(axis=1))
            lo, hi = np.percentile(boot, [2.5, 97.5])
            verdict = "yes" if hi < 1 else ("no: higher beyond it" if lo > 1 else "no: within it")
            print(f"| {a} | {b} | {ratio:.4f} ({lo:.4f}–{hi:.4f}) | {verdict} |")


if __name__ == "__main__":
    main()
