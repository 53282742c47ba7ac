#!/usr/bin/env python3
"""An independent forward pass of a GGUF Llama decoder in numpy, written
from the GGUF file alone (the `gguf` package reads and dequantizes it):
the reference the f32 path of `qlinear-smollm` is checked against.

    python3 tools/smollm_reference.py MODEL.gguf IDS OUT_LOGITS OUT_IDS N

MODEL may also be an f32 safetensors file as `qlinear-smollm --smooth-out`
or `--rotate-out` writes it (tensors under their GGUF names, `[out, in]`;
the GGUF metadata as `gguf.KEY` JSON entries). Where its metadata says
`qlinear_smollm.rotation = "hadamard"`, every projection's and the head's
weight rows and the token table's rows are multiplied by the Hadamard
matrix H of their width, and the forward pass multiplies each projection's
input by the same H (and a table row by Hᵀ), as examples/smollm/src/
rotate.rs documents: H_n = (H12 ⊗ … ⊗ H12 ⊗ H2 ⊗ … ⊗ H2) / √n, as many
Paley H12 factors as leave a power of two, built here with np.kron.

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


def paley12():
    """H12 = I + S: S[0][j] = 1, S[j][0] = -1 (j >= 1), and for i, j >= 1
    S[i][j] = chi(j - i), chi the quadratic character mod 11."""
    squares = {(i * i) % 11 for i in range(1, 11)}
    s = np.zeros((12, 12))
    s[0, 1:] = 1
    s[1:, 0] = -1
    for i in range(1, 12):
        for j in range(1, 12):
            d = (j - i) % 11
            s[i, j] = 0 if d == 0 else (1 if d in squares else -1)
    return np.eye(12) + s


def hadamard(n):
    """The rotation of order n = 12^b * 2^a (b the largest possible), f64."""
    b = max(i for i in range(0, 8) if n % 12 ** i == 0 and (n // 12 ** i) & (n // 12 ** i - 1) == 0)
    a = (n // 12 ** b).bit_length() - 1
    h = np.ones((1, 1))
    for f in [paley12()] * b + [np.array([[1.0, 1.0], [1.0, -1.0]])] * a:
        h = np.kron(h, f)
    assert np.allclose(h @ h.T, n * np.eye(n))
    return h / np.sqrt(n)


def safetensors_model(path):
    """An f32 safetensors file: its tensors and its GGUF metadata."""
    import json
    import struct
    from safetensors.numpy import load_file
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    meta = {k[len("gguf."):]: json.loads(v) for k, v in header.get("__metadata__", {}).items() if k.startswith("gguf.")}
    return load_file(path), meta


def main() -> None:
    path, ids, out_logits, out_ids, n = sys.argv[1:6]
    ids = [int(t) for t in ids.split(",")]
    if path.endswith(".safetensors"):
        stored, meta = safetensors_model(path)

        def field(key):
            return meta[key]

        def w(name):
            return stored[name].astype(np.float32)

        tensors = stored
    else:
        r = gguf.GGUFReader(path)

        def field(key):
            f = r.fields[key]
            return f.contents()

        tensors = {t.name: t for t in r.tensors}

        def w(name):
            t = tensors[name]
            y = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            # ggml's dims are (ne0 = in, ne1 = out): the row-major array is [out, in]
            return y.reshape([int(d) for d in reversed(t.shape)]) if y.ndim > 1 or len(t.shape) > 1 else y.ravel()

    assert field("general.architecture") == "llama"
    layers = int(field("llama.block_count"))
    hidden = int(field("llama.embedding_length"))
    heads = int(field("llama.attention.head_count"))
    kv_heads = int(field("llama.attention.head_count_kv"))
    eps = float(field("llama.attention.layer_norm_rms_epsilon"))
    try:
        base = float(field("llama.rope.freq_base"))
    except KeyError:
        base = 10000.0
    hd = hidden // heads
    try:
        rotation = field("qlinear_smollm.rotation")
    except KeyError:
        rotation = None
    assert rotation in (None, "hadamard"), rotation

    embd = w("token_embd.weight")
    head = w("output.weight") if "output.weight" in tensors else embd
    blocks = []
    for b in range(layers):
        p = f"blk.{b}."
        blocks.append({k: w(p + k + ".weight") for k in
                       ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]})
    final = w("output_norm.weight")
    if rotation:
        ffn = blocks[0]["ffn_down"].shape[1]
        rot_h, rot_f = hadamard(hidden), hadamard(ffn)
        # the table holds E H: E = (E H) Hᵀ
        embd = (embd.astype(np.float64) @ rot_h.T).astype(np.float32)
        rot_h, rot_f = rot_h.astype(np.float32), rot_f.astype(np.float32)
    else:
        rot_h = rot_f = None

    def mix(x, h):
        return x if h is None else x @ h

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
            h = mix(rmsnorm(x, blk["attn_norm"]), rot_h)
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
            x = x + mix(att, rot_h) @ blk["attn_output"].T
            h = mix(rmsnorm(x, blk["ffn_norm"]), rot_h)
            g = h @ blk["ffn_gate"].T
            u = h @ blk["ffn_up"].T
            x = x + mix((g / (1.0 + np.exp(-g))) * u, rot_f) @ blk["ffn_down"].T
        return mix(rmsnorm(x, final), rot_h)

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
