#!/usr/bin/env python3
"""llama.cpp (PyPI's llama-cpp-python) scored on exactly the tokens that
`qlinear-smollm --eval` scored: the same windows, the same positions, the
perplexity and the share of top-1 tokens equal to qlinear's f32 path.

    python tools/llamacpp_smollm.py TOKENS.json EVAL.json MODEL.gguf [...]

TOKENS.json is what `qlinear-smollm --eval ... --json EVAL.json` writes
beside EVAL.json; the rows are printed as a markdown table and appended to
EVAL.json (with "peer": "llama.cpp").
"""
import json
import sys

import numpy as np
import llama_cpp


def main() -> None:
    side, out, *models = sys.argv[1:]
    meta = json.load(open(side))
    tokens, window, ref_top1 = meta["tokens"], meta["window"], meta["reference_top1"]
    rows = json.load(open(out))
    f32 = rows[0]["perplexity"]
    for path in models:
        llm = llama_cpp.Llama(model_path=path, n_ctx=window, n_batch=window, logits_all=True, verbose=False)
        nll, top1 = 0.0, []
        for start in range(0, len(tokens) - window + 1, window):
            chunk = tokens[start:start + window]
            llm.reset()
            llm.eval(chunk)
            logits = np.asarray(llm.scores[:window], dtype=np.float64)
            for j in range(window // 2, window - 1):
                row = logits[j]
                m = row.max()
                nll -= row[chunk[j + 1]] - m - np.log(np.exp(row - m).sum())
                top1.append(int(row.argmax()))
        ppl = float(np.exp(nll / len(top1)))
        agree = float(np.mean(np.array(top1) == np.array(ref_top1[:len(top1)])))
        name = path.rsplit("/", 1)[-1]
        print(f"| llama.cpp {name} | llama.cpp {llama_cpp.__version__} | {ppl:.4f} | {100 * (ppl / f32 - 1):+.2f} % | {100 * agree:.2f} % |")
        rows.append({"model": path, "peer": "llama.cpp", "layers": f"llama.cpp {llama_cpp.__version__}",
                     "perplexity": ppl, "relative_to_first": ppl / f32 - 1, "top1_agreement": agree,
                     "tokens": len(tokens), "window": window, "scored": len(top1)})
        del llm
    json.dump(rows, open(out, "w"), indent=2)


if __name__ == "__main__":
    main()
