#!/usr/bin/env python3
"""Writes a GGUF file of a model in another ggml type, with the `gguf`
package alone (its reader, dequantizer, quantizer and writer): the fixtures
of qlinear's GGUF import tests (docs/FORMAT.md, "GGUF input").

    python3 tools/gguf_fixtures.py SRC.gguf OUT.gguf TYPE [EMBD_TYPE]

Every 2-D tensor of SRC is dequantized and quantized to TYPE (Q4_0, Q8_0,
...), except `token_embd.weight`, which goes to EMBD_TYPE (default: TYPE),
as llama.cpp keeps its Q4_0 files' embedding at Q8_0; other tensors are
copied as they are. Every metadata key/value is copied.
"""
import sys

import numpy as np
import gguf


def main() -> None:
    src, out, qname = sys.argv[1:4]
    qtype = gguf.GGMLQuantizationType[qname]
    etype = gguf.GGMLQuantizationType[sys.argv[4]] if len(sys.argv) > 4 else qtype
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(out, arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vtype = f.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(f.name, f.contents(), vtype, sub_type=f.types[-1])
        else:
            w.add_key_value(f.name, f.contents(), vtype)
    for t in r.tensors:
        if len(t.shape) == 2:
            ty = etype if t.name == "token_embd.weight" else qtype
            y = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            w.add_tensor(t.name, gguf.quants.quantize(y, ty), raw_dtype=ty)
        else:
            w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
