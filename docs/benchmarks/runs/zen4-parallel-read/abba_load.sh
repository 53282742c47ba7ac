#!/bin/bash
# Rounds of in-place loads by qlinear-bench binaries, alternated:
#   abba_load.sh OUT ROUNDS V1 V2 ... (each round runs V1..Vn then Vn..V1;
#   binaries are /tmp/bench-V), on both 1.7B-shaped files.
out=$1; rounds=$2; shift 2
order=("$@"); for ((i=$#-1; i>=0; i--)); do order+=("${order[i]}"); done
: > "$out"
for r in $(seq "$rounds"); do
  for v in "${order[@]}"; do
    for f in big.q8 big.q4g32; do
      echo "== $r $v $f" >> "$out"
      /tmp/bench-$v --load target/big/$f.safetensors --in-place 2>&1 | tail -1 >> "$out"
    done
  done
done
