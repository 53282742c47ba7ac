#!/usr/bin/env python3
"""llama.cpp (PyPI's llama-cpp-python) beside `qlinear-smollm`.

    python tools/llamacpp_smollm.py TOKENS.json EVAL.json MODEL.gguf [...]

scores the models on exactly the tokens that `qlinear-smollm --eval`
scored (the same windows and positions), after checking that they are
llama.cpp's own tokens of the text: the perplexity, each scored token's
-ln p (for intervals), the bits a weight and the share of top-1 tokens
equal to qlinear's f32 path. TOKENS.json is what
`qlinear-smollm --eval ... --json EVAL.json` writes beside EVAL.json; the
rows are printed as a markdown table and appended to EVAL.json (with
"peer": "llama.cpp").

    python tools/llamacpp_smollm.py --bench PROMPT_IDS GEN THREADS OUT.json MODEL.gguf [...]

times one round: the prompt (comma-separated ids) as one batch, then GEN
greedy tokens one at a time (the last logits read with
llama_get_logits_ith), at each thread count of THREADS (e.g. 1,2), with
flash attention off and on, each after an untimed warm-up; rows (tok/s of
this round, the load's seconds (the model mapped, its context made),
the version, llama_print_system_info() and the first 16 tokens) to
OUT.json, for `cargo xtask smollm --bench` to alternate with
qlinear's rounds.

    python tools/llamacpp_smollm.py --greedy PROMPT_IDS N MODEL.gguf

prints the first N greedy tokens after the prompt (to compare with
`qlinear-smollm MODEL.gguf --ids PROMPT_IDS --max-tokens N`).

    python tools/llamacpp_smollm.py --merge OUT.json ROUND.json [...]

merges rounds (of either runner) into rows with the median, min and max.
"""
import json
import sys
import time

import numpy as np

try:
    import llama_cpp
except ImportError:  # --merge needs only json
    llama_cpp = None


def last_logits(llm):
    """The last evaluated token's logits, read with llama_get_logits_ith
    (llama-cpp-python 0.3.36 fills `scores` only with logits_all=True)."""
    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))


def greedy(llm, prompt, gen):
    """The prompt as one batch, then `gen` greedy steps: the tokens, and the
    prefill and decode seconds."""
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    prefill = time.perf_counter() - t0
    nxt = int(np.argmax(last_logits(llm)))
    out = [nxt]
    t0 = time.perf_counter()
    for _ in range(gen):
        llm.eval([nxt])
        nxt = int(np.argmax(last_logits(llm)))
        out.append(nxt)
    return out[:gen], prefill, time.perf_counter() - t0


def system_info():
    return llama_cpp.llama_print_system_info().decode().strip()


def bench(ids, gen, threads, out, models):
    """One round: every model at every thread count, flash attention off and
    on, each after an untimed warm-up (16 prompt tokens, 8 steps)."""
    prompt = [int(t) for t in ids.split(",")]
    gen = int(gen)
    rows = []
    for t in [int(x) for x in threads.split(",")]:
        for path in models:
            for flash in (False, True):
                t0 = time.perf_counter()
                llm = llama_cpp.Llama(model_path=path, n_ctx=len(prompt) + gen + 8, n_batch=512,
                                      n_threads=t, n_threads_batch=t, flash_attn=flash, verbose=False)
                load = time.perf_counter() - t0
                greedy(llm, prompt[:16], 8)
                tokens, prefill, decode = greedy(llm, prompt, gen)
                rows.append({"model": path, "peer": "llama.cpp",
                             "layers": f"llama.cpp {llama_cpp.__version__} flash_attn={'on' if flash else 'off'}",
                             "flash_attn": flash, "llama_cpp_python": llama_cpp.__version__,
                             "system_info": system_info(), "threads": t, "load_s": load,
                             "prefill_tok_s": len(prompt) / prefill, "decode_tok_s": gen / decode,
                             "prompt_tokens": len(prompt), "generated_tokens": gen, "first_tokens": tokens[:16]})
                del llm
    json.dump(rows, open(out, "w"), indent=2)


def greedy_ids(ids, gen, model):
    """Prints the first `gen` greedy tokens after the prompt, comma-separated."""
    llm = llama_cpp.Llama(model_path=model, n_ctx=len(ids.split(",")) + int(gen) + 8, verbose=False)
    tokens, _, _ = greedy(llm, [int(t) for t in ids.split(",")], int(gen))
    print(",".join(map(str, tokens)))


def merge(out, rounds):
    by = {}
    for path in rounds:
        for r in json.load(open(path)):
            key = (r["model"], r.get("split", ""), r["threads"], r.get("flash_attn"))
            acc = by.setdefault(key, dict(r, prefill=[], decode=[]))
            for name, field in (("prefill", "prefill_tok_s"), ("decode", "decode_tok_s")):
                v = r[field]
                acc[name].append(v["median"] if isinstance(v, dict) else v)
    rows = []
    for acc in by.values():
        for name in ("prefill", "decode"):
            v = sorted(acc.pop(name))
            acc[name + "_tok_s"] = {"median": v[len(v) // 2], "min": v[0], "max": v[-1], "rounds": len(v)}
        rows.append(acc)
    json.dump(rows, open(out, "w"), indent=2)
    print("| model | layers | threads | prefill tok/s | decode tok/s |")
    print("|---|---|--:|--:|--:|")
    for r in rows:
        p, d = r["prefill_tok_s"], r["decode_tok_s"]
        print(f"| {r['model'].rsplit('/', 1)[-1]} | {r['layers']} | {r['threads']} | "
              f"{p['median']:.1f} ({p['min']:.1f}–{p['max']:.1f}) | {d['median']:.1f} ({d['min']:.1f}–{d['max']:.1f}) |")


def check_tokens(llm, meta, path):
    """qlinear's token ids of the scored text (`meta`, the side file of
    `qlinear-smollm --eval --json`) must be llama.cpp's own tokenization of
    it, or the two sides score different things: exits naming the first
    position where they part."""
    text = meta.get("text")
    if text is None:
        return
    ids = llm.tokenize(open(text, "rb").read(), add_bos=False, special=False)
    tokens = meta["tokens"]
    if ids[:len(tokens)] != tokens:
        at = next((i for i, (a, b) in enumerate(zip(ids, tokens)) if a != b), min(len(ids), len(tokens)))
        sys.exit(f"{path}: llama.cpp tokenizes {text} differently from qlinear at token {at} "
                 f"(llama.cpp {ids[at:at + 4]}, qlinear {tokens[at:at + 4]}; {len(ids)} against {len(tokens)} tokens)")
    print(f"{path}: llama.cpp's tokens of {text} are qlinear's ({len(tokens)} tokens)", file=sys.stderr)


def bits_per_weight(llm):
    """The file's tensors' bits a parameter, as llama.cpp reports it (BPW)."""
    return 8 * llama_cpp.llama_model_size(llm.model) / llama_cpp.llama_model_n_params(llm.model)


def main() -> None:
    if sys.argv[1] == "--bench":
        return bench(*sys.argv[2:6], sys.argv[6:])
    if sys.argv[1] == "--merge":
        return merge(sys.argv[2], sys.argv[3:])
    if sys.argv[1] == "--greedy":
        return greedy_ids(*sys.argv[2:5])
    side, out, *models = sys.argv[1:]
    meta = json.load(open(side))
    tokens, window, ref_top1 = meta["tokens"], meta["window"], meta["reference_top1"]
    rows = json.load(open(out))
    f32 = rows[0]["perplexity"]
    for path in models:
        llm = llama_cpp.Llama(model_path=path, n_ctx=window, n_batch=window, logits_all=True, verbose=False)
        check_tokens(llm, meta, path)
        nll, top1, token_nll = 0.0, [], []
        for start in range(0, len(tokens) - window + 1, window):
            chunk = tokens[start:start + window]
            llm.reset()
            llm.eval(chunk)
            logits = np.asarray(llm.scores[:window], dtype=np.float64)
            for j in range(window // 2, window - 1):
                row = logits[j]
                m = row.max()
                p = row[chunk[j + 1]] - m - np.log(np.exp(row - m).sum())
                nll -= p
                token_nll.append(float(-p))
                top1.append(int(row.argmax()))
        ppl = float(np.exp(nll / len(top1)))
        agree = float(np.mean(np.array(top1) == np.array(ref_top1[:len(top1)])))
        name = path.rsplit("/", 1)[-1]
        print(f"| llama.cpp {name} | llama.cpp {llama_cpp.__version__} | {ppl:.4f} | {100 * (ppl / f32 - 1):+.2f} % | {100 * agree:.2f} % |")
        rows.append({"model": path, "peer": "llama.cpp", "layers": f"llama.cpp {llama_cpp.__version__}",
                     "perplexity": ppl, "relative_to_first": ppl / f32 - 1, "top1_agreement": agree,
                     "tokens": len(tokens), "window": window, "scored": len(top1),
                     "bits_per_weight": bits_per_weight(llm), "text": meta.get("text"),
                     "token_nll": token_nll})
        del llm
    json.dump(rows, open(out, "w"), indent=2)


if __name__ == "__main__":
    main()
