#!/usr/bin/env bash
# ABBA rounds of two qlinear-smollm builds: every model of $MODELS, the
# bench's own rows (threads, KV) per run; prints build, model, threads, KV,
# prefill tok/s, decode tok/s, one line per row
set -eu
out=$1; shift; A=$1; B=$2; shift 2
: > $out
for r in 1 2 3; do
  for pair in "A $A" "B $B" "B $B" "A $A"; do
    set -- $pair
    name=$1; bin=$2
    $bin --bench /usr/share/common-licenses/GPL-3 $MODELS $ARGS --repeat 1 --json /tmp/kv/ab-run.json > /dev/null 2>&1
    python3 -c "
import json
for row in json.load(open('/tmp/kv/ab-run.json')):
    print('$name', row['model'].split('/')[-1], row['threads'], row['kv'], round(row['prefill_tok_s']['median'],1), round(row['decode_tok_s']['median'],1))
" >> $out
  done
done
