#!/usr/bin/env python3
"""Writes a Llama decoder of another size with seeded random weights, as a
GGUF file of one ggml type, with the `gguf` package alone: the big model of
the load and decode benchmarks (issues 61 and 63), SmolLM2-1.7B's shapes by
default. The tokenizer, chat template and every other metadata key are
SRC's (SmolLM2-135M's GGUF); the `llama.*` shape keys are replaced.

    python3 tools/make_big_llama.py SRC.gguf OUT.gguf TYPE [--layers 24]
        [--hidden 2048] [--ffn 8192] [--heads 32] [--kv-heads 32] [--seed 0]

Weights are N(0, 0.02²) from numpy's PCG64 seeded with SEED and the
tensor's index, quantized to TYPE (Q4_0, Q8_0, F16, ...); as llama.cpp
does for its Q4_0 files, `token_embd.weight` (the tied LM head) is Q8_0
when TYPE is a 4-bit type. Norm weights are 1.0 in F32.
"""
import argparse

import numpy as np
import gguf


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("type")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ffn", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    qtype = gguf.GGMLQuantizationType[a.type]
    four_bit = a.type in ("Q4_0", "Q4_1", "Q4_K")
    etype = gguf.GGMLQuantizationType.Q8_0 if four_bit else qtype
    r = gguf.GGUFReader(a.src)
    arch = r.fields["general.architecture"].contents()
    if arch != "llama":
        raise SystemExit(f"{a.src}: general.architecture is {arch!r}, not llama")
    shape = {
        "llama.block_count": a.layers,
        "llama.embedding_length": a.hidden,
        "llama.feed_forward_length": a.ffn,
        "llama.attention.head_count": a.heads,
        "llama.attention.head_count_kv": a.kv_heads,
        "llama.rope.dimension_count": a.hidden // a.heads,
    }
    w = gguf.GGUFWriter(a.out, arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        if f.name in shape:
            w.add_key_value(f.name, shape[f.name], f.types[0])
            continue
        vtype = f.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(f.name, f.contents(), vtype, sub_type=f.types[-1])
        else:
            w.add_key_value(f.name, f.contents(), vtype)
    vocab = len(r.fields["tokenizer.ggml.tokens"].contents())
    hd = a.hidden // a.heads
    kv = a.kv_heads * hd
    tensors = [("token_embd.weight", (vocab, a.hidden))]
    for i in range(a.layers):
        p = f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", (a.hidden,)),
            (p + "attn_q.weight", (a.hidden, a.hidden)),
            (p + "attn_k.weight", (kv, a.hidden)),
            (p + "attn_v.weight", (kv, a.hidden)),
            (p + "attn_output.weight", (a.hidden, a.hidden)),
            (p + "ffn_norm.weight", (a.hidden,)),
            (p + "ffn_gate.weight", (a.ffn, a.hidden)),
            (p + "ffn_up.weight", (a.ffn, a.hidden)),
            (p + "ffn_down.weight", (a.hidden, a.ffn)),
        ]
    tensors.append(("output_norm.weight", (a.hidden,)))
    for index, (name, dims) in enumerate(tensors):
        if len(dims) == 1:
            w.add_tensor(name, np.ones(dims, dtype=np.float32))
            continue
        rng = np.random.default_rng([a.seed, index])
        x = (rng.standard_normal(dims, dtype=np.float32) * np.float32(0.02)).astype(np.float32)
        ty = etype if name == "token_embd.weight" else qtype
        w.add_tensor(name, gguf.quants.quantize(x, ty), raw_dtype=ty)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
