#!/usr/bin/env python3
"""An independent forward pass of a GGUF Llama decoder in numpy, written
from the GGUF file alone (the `gguf` package reads and dequantizes it):
the reference the f32 path of `qlinear-smollm` is checked against.

    python3 tools/smollm_reference.py MODEL.gguf IDS OUT_LOGITS OUT_IDS N

IDS is a comma-separated prompt. Writes the logits of every prompt
position (f32 little-endian, [positions, vocab]) to OUT_LOGITS, and the N
tokens a greedy decoder continues the prompt with to OUT_IDS (one line,
comma-separated).

The model, as llama.cpp runs GGUF Llama weights: x = token_embd[ids];
per block, h = rmsnorm(x) * attn_norm; q, k, v = h Wqᵀ, h Wkᵀ, h Wvᵀ;
rotary embedding on adjacent pairs (x[2i], x[2i+1]) of every head with
angle pos · base^(−2i/head_dim) (GGUF's Q and K rows are already permuted
for this "normal" mode); causal softmax(q kᵀ / sqrt(head_dim)) v with each
KV head shared by heads/kv_heads query heads; x += att Woᵀ; h =
rmsnorm(x) * ffn_norm; x += (silu(h Wgᵀ) * (h Wuᵀ)) Wdᵀ; finally
rmsnorm(x) * output_norm times token_embdᵀ (tied) or output.weightᵀ.
"""
import sys

import numpy as np
import gguf


def main() -> None:
    path, ids, out_logits, out_ids, n = sys.argv[1:6]
    ids = [int(t) for t in ids.split(",")]
    r = gguf.GGUFReader(path)

    def field(key):
        f = r.fields[key]
        return f.contents()

    assert field("general.architecture") == "llama"
    layers = int(field("llama.block_count"))
    hidden = int(field("llama.embedding_length"))
    heads = int(field("llama.attention.head_count"))
    kv_heads = int(field("llama.attention.head_count_kv"))
    eps = float(field("llama.attention.layer_norm_rms_epsilon"))
    base = float(field("llama.rope.freq_base")) if "llama.rope.freq_base" in r.fields else 10000.0
    hd = hidden // heads
    tensors = {t.name: t for t in r.tensors}

    def w(name):
        t = tensors[name]
        y = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        # ggml's dims are (ne0 = in, ne1 = out): the row-major array is [out, in]
        return y.reshape([int(d) for d in reversed(t.shape)]) if y.ndim > 1 or len(t.shape) > 1 else y.ravel()

    embd = w("token_embd.weight")
    head = w("output.weight") if "output.weight" in tensors else embd
    blocks = []
    for b in range(layers):
        p = f"blk.{b}."
        blocks.append({k: w(p + k + ".weight") for k in
                       ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]})
    final = w("output_norm.weight")

    def rmsnorm(x, g):
        ms = (x.astype(np.float64) ** 2).mean(axis=-1, keepdims=True)
        return (x * (1.0 / np.sqrt(ms + eps)).astype(np.float32)) * g

    def rope(x, n_heads):
        # x: [T, n_heads * hd]; adjacent pairs rotate
        t = x.shape[0]
        pos = np.arange(t, dtype=np.float64)[:, None]
        inv = base ** (-2.0 * np.arange(hd // 2, dtype=np.float64) / hd)
        ang = pos * inv[None, :]
        cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
        x = x.reshape(t, n_heads, hd // 2, 2)
        a, b = x[..., 0], x[..., 1]
        out = np.empty_like(x)
        out[..., 0] = a * cos[:, None, :] - b * sin[:, None, :]
        out[..., 1] = a * sin[:, None, :] + b * cos[:, None, :]
        return out.reshape(t, n_heads * hd)

    def forward(seq):
        x = embd[seq].astype(np.float32)
        t = len(seq)
        mask = np.triu(np.full((t, t), -np.inf, dtype=np.float32), 1)
        for blk in blocks:
            h = rmsnorm(x, blk["attn_norm"])
            q = rope(h @ blk["attn_q"].T, heads).reshape(t, heads, hd)
            k = rope(h @ blk["attn_k"].T, kv_heads).reshape(t, kv_heads, hd)
            v = (h @ blk["attn_v"].T).reshape(t, kv_heads, hd)
            rep = heads // kv_heads
            k = np.repeat(k, rep, axis=1)
            v = np.repeat(v, rep, axis=1)
            s = np.einsum("thd,uhd->htu", q, k) / np.float32(np.sqrt(hd)) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s = s / s.sum(axis=-1, keepdims=True)
            att = np.einsum("htu,uhd->thd", s, v).reshape(t, heads * hd)
            x = x + att @ blk["attn_output"].T
            h = rmsnorm(x, blk["ffn_norm"])
            g = h @ blk["ffn_gate"].T
            u = h @ blk["ffn_up"].T
            x = x + ((g / (1.0 + np.exp(-g))) * u) @ blk["ffn_down"].T
        return rmsnorm(x, final)

    hs = forward(ids)
    (hs @ head.T).astype("<f4").tofile(out_logits)
    seq = list(ids)
    cont = []
    for _ in range(int(n)):
        nxt = int(np.argmax(forward(seq)[-1] @ head.T))
        cont.append(nxt)
        seq.append(nxt)
    with open(out_ids, "w") as f:
        f.write(",".join(str(t) for t in cont) + "\n")


if __name__ == "__main__":
    main()
