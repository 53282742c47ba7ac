#!/usr/bin/env python3
"""An independent numpy implementation of the all-MiniLM-L6-v2 encoder (f64),
to keep the f32 path of `examples/minilm` honest.

    minilm_ref.py MODEL.safetensors DUMP.json [--min-cos 0.99999]

DUMP.json is what `qlinear-minilm DIR --dump DUMP.json` writes: for each
sentence its token ids and the Rust f32 embedding. This script recomputes each
embedding from the token ids with numpy alone (BERT embeddings, 6 post-LN
encoder layers with exact-erf GELU, mean pooling, L2 normalisation) and fails
unless every cosine against the Rust embedding is at least --min-cos.
"""
import argparse
import json
import math
import sys

import numpy as np
from safetensors.numpy import load_file

ERF = np.vectorize(math.erf)


def layer_norm(x, w, b, eps=1e-12):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def encode(t, ids, layers, heads):
    g = lambda name: t[name].astype(np.float64)
    n = len(ids)
    x = g("embeddings.word_embeddings.weight")[ids]
    x = x + g("embeddings.position_embeddings.weight")[:n] + g("embeddings.token_type_embeddings.weight")[0]
    x = layer_norm(x, g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"))
    lin = lambda v, p: v @ g(p + ".weight").T + g(p + ".bias")
    for i in range(layers):
        p = f"encoder.layer.{i}."
        q = lin(x, p + "attention.self.query")
        k = lin(x, p + "attention.self.key")
        v = lin(x, p + "attention.self.value")
        h = x.shape[1]
        d = h // heads
        ctx = np.zeros_like(x)
        for a in range(heads):
            c = slice(a * d, (a + 1) * d)
            s = q[:, c] @ k[:, c].T / math.sqrt(d)
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            ctx[:, c] = s @ v[:, c]
        a = layer_norm(lin(ctx, p + "attention.output.dense") + x,
                       g(p + "attention.output.LayerNorm.weight"), g(p + "attention.output.LayerNorm.bias"))
        inter = lin(a, p + "intermediate.dense")
        inter = 0.5 * inter * (1.0 + ERF(inter / math.sqrt(2.0)))
        x = layer_norm(lin(inter, p + "output.dense") + a,
                       g(p + "output.LayerNorm.weight"), g(p + "output.LayerNorm.bias"))
    pooled = x.mean(axis=0)
    return pooled / max(np.linalg.norm(pooled), 1e-12)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("dump")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--min-cos", type=float, default=0.99999)
    args = ap.parse_args()
    t = load_file(args.model)
    rows = json.load(open(args.dump))
    worst = 1.0
    for r in rows:
        ref = encode(t, np.array(r["ids"]), args.layers, args.heads)
        got = np.array(r["embedding"], dtype=np.float64)
        cos = float(ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got)))
        worst = min(worst, cos)
        if cos < args.min_cos:
            print(f"FAIL: {r['sentence']!r}: cosine {cos:.9f} < {args.min_cos}", file=sys.stderr)
    print(f"numpy reference: {len(rows)} sentences, min cosine against the Rust f32 encoder {worst:.9f}")
    sys.exit(0 if worst >= args.min_cos else 1)


if __name__ == "__main__":
    main()
