#!/usr/bin/env python3
"""Writes a synthetic f32 model of SIZE GiB (default 1) for measuring
`qlinear convert`: 16 · SIZE weights of [4096, 4096] plus a bias each; with
--importance IMP, also an importance file for `--recipe activation-aware`
(one `layers.i.proj.importance` of [4096] per weight, u⁴ · 10 with u uniform
in [0, 1): values spread over decades, as mean x² over activations are).

Usage: make_big_model.py OUT [SIZE_GIB] [--importance IMP]
"""
import sys

import numpy as np
from safetensors.numpy import save_file

args = sys.argv[1:]
imp = None
if "--importance" in args:
    i = args.index("--importance")
    imp = args[i + 1]
    del args[i : i + 2]
out, gib = args[0], int(args[1]) if len(args) > 1 else 1
rng = np.random.default_rng(0)
tensors = {}
for i in range(16 * gib):
    tensors[f"layers.{i}.proj.weight"] = (rng.standard_normal((4096, 4096), dtype=np.float32) * 0.02)
    tensors[f"layers.{i}.proj.bias"] = np.zeros(4096, dtype=np.float32)
save_file(tensors, out, metadata={"synthetic": "qlinear convert benchmark"})
if imp is not None:
    rng = np.random.default_rng(1)
    save_file(
        {f"layers.{i}.proj.importance": (rng.uniform(0, 1, 4096) ** 4 * 10).astype(np.float32) for i in range(16 * gib)},
        imp,
    )
