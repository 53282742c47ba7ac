#!/usr/bin/env bash
# ABBA rounds of two qlinear-smollm builds on one model: decode and prefill tok/s per run
set -eu
out=$1; shift; A=$1; B=$2; shift 2
: > $out
for r in 1 2 3; do
  for pair in "A $A" "B $B" "B $B" "A $A"; do
    set -- $pair
    name=$1; bin=$2
    $bin --bench /usr/share/common-licenses/GPL-3 /work/main/target/smollm/q4g32-gptq.safetensors $ARGS --repeat 1 --json /tmp/kv/ab-run.json > /dev/null 2>&1
    python3 -c "
import json,sys
for row in json.load(open('/tmp/kv/ab-run.json')):
    print('$name', row['threads'], row['kv'], round(row['prefill_tok_s']['median'],1), round(row['decode_tok_s']['median'],1))
" >> $out
  done
done
