#!/usr/bin/env python3
"""Writes a synthetic f32 model of SIZE GiB (default 1) for measuring
`qlinear convert`: 16 · SIZE weights of [4096, 4096] plus a bias each.

Usage: make_big_model.py OUT [SIZE_GIB]
"""
import sys

import numpy as np
from safetensors.numpy import save_file

out, gib = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
rng = np.random.default_rng(0)
tensors = {}
for i in range(16 * gib):
    tensors[f"layers.{i}.proj.weight"] = (rng.standard_normal((4096, 4096), dtype=np.float32) * 0.02)
    tensors[f"layers.{i}.proj.bias"] = np.zeros(4096, dtype=np.float32)
save_file(tensors, out, metadata={"synthetic": "qlinear convert benchmark"})
