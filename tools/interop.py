#!/usr/bin/env python3
"""Interop with Python's safetensors + numpy (docs/FORMAT.md), both directions.

  interop.py fixture OUT          write a quantized file with numpy (the recipe of
                                  gen_recipe_golden.py) for the Rust reader's test
  interop.py fixture --check F    exit 1 unless F holds what `fixture` writes
  interop.py model DIR            write DIR/py_model.safetensors (float weights)
  interop.py check-ours DIR       read DIR/ours_{q8,q4,q4g32}.safetensors written by
                                  `qlinear convert` from py_model: exact dtypes,
                                  shapes, metadata and bytes of docs/FORMAT.md
"""
import os
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_recipe_golden import q4, q4g, q8  # noqa: E402


def to_twos(packed_biased):
    return np.frombuffer(bytes(b ^ 0x88 for b in packed_biased), dtype=np.uint8)


def quantize(w, scheme):
    """On-disk (qweight, scales) of a 2-D f32 array."""
    rows_q, rows_s = [], []
    for row in w:
        if scheme == "q8":
            s, c = q8(row)
            rows_q.append(np.array(c, dtype=np.int8))
            rows_s.append(np.float32(s))
        elif scheme == "q4":
            s, p = q4(row)
            rows_q.append(to_twos(p))
            rows_s.append(np.float32(s))
        else:
            scales, p = q4g(row, int(scheme[3:]))
            rows_q.append(to_twos(p))
            rows_s.append(np.array(scales, dtype=np.float16))
    return np.stack(rows_q), np.stack(rows_s) if scheme.startswith("q4g") else np.array(rows_s, dtype=np.float32)


def weights(n, k, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, k)) * 0.05).astype(np.float32)


FIXTURE = [("q8", "a", 6, 40), ("q4", "b", 5, 33), ("q4g32", "c", 4, 64), ("q4g2", "d", 3, 6)]


def fixture_tensors():
    tensors, meta = {}, {"qlinear.format": "1", "writer": "numpy"}
    for i, (scheme, prefix, n, k) in enumerate(FIXTURE):
        w = weights(n, k, i)
        qw, sc = quantize(w, scheme)
        tensors[f"{prefix}.qweight"], tensors[f"{prefix}.scales"] = qw, sc
        tensors[f"{prefix}.reference"] = w
        meta[f"{prefix}.qscheme"], meta[f"{prefix}.in_features"] = scheme, str(k)
    return tensors, meta


def read(path):
    out = {}
    with safe_open(path, framework="numpy") as f:
        for k in f.keys():
            out[k] = f.get_tensor(k)
        return out, f.metadata() or {}


def main():
    cmd = sys.argv[1]
    if cmd == "fixture":
        tensors, meta = fixture_tensors()
        if sys.argv[2] == "--check":
            got, gmeta = read(sys.argv[3])
            ok = gmeta == meta and got.keys() == tensors.keys() and all(
                got[k].dtype == v.dtype and got[k].shape == v.shape and got[k].tobytes() == v.tobytes()
                for k, v in tensors.items()
            )
            if not ok:
                sys.exit(f"{sys.argv[3]} differs from what tools/interop.py writes")
            print(f"{sys.argv[3]}: matches the numpy writer")
        else:
            save_file(tensors, sys.argv[2], metadata=meta)
    elif cmd == "model":
        d = sys.argv[2]
        save_file(
            {
                "layer.q.weight": weights(16, 64, 10),
                "layer.up.weight": weights(8, 96, 11).astype(np.float16),
                "layer.q.bias": weights(1, 16, 12)[0],
                "steps": np.arange(6, dtype=np.int64).reshape(2, 3),
            },
            os.path.join(d, "py_model.safetensors"),
            metadata={"origin": "python"},
        )
    elif cmd == "check-ours":
        d = sys.argv[2]
        model, _ = read(os.path.join(d, "py_model.safetensors"))
        for scheme in ["q8", "q4", "q4g32"]:
            path = os.path.join(d, f"ours_{scheme}.safetensors")
            got, meta = read(path)
            assert meta.get("qlinear.format") == "1" and meta.get("origin") == "python", meta
            for prefix, n, k in [("layer.q", 16, 64), ("layer.up", 8, 96)]:
                w = model[f"{prefix}.weight"].astype(np.float32)
                qw, sc = quantize(w, scheme)
                gq, gs = got[f"{prefix}.qweight"], got[f"{prefix}.scales"]
                assert meta[f"{prefix}.qscheme"] == scheme and meta[f"{prefix}.in_features"] == str(k), meta
                assert gq.dtype == qw.dtype and gq.shape == qw.shape, (scheme, prefix, gq.dtype, gq.shape)
                assert gs.dtype == sc.dtype and gs.shape == sc.shape, (scheme, prefix, gs.dtype, gs.shape)
                assert gq.tobytes() == qw.tobytes(), f"{path}: {prefix}.qweight bytes differ from numpy's recipe"
                assert gs.tobytes() == sc.tobytes(), f"{path}: {prefix}.scales bytes differ from numpy's recipe"
                assert f"{prefix}.weight" not in got
            for name in ["layer.q.bias", "steps"]:
                assert got[name].dtype == model[name].dtype and np.array_equal(got[name], model[name]), name
            print(f"{path}: read by Python safetensors, dtypes, shapes and bytes as docs/FORMAT.md")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
