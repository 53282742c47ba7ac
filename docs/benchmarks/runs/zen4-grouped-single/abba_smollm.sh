#!/bin/bash
# ABBA of qlinear-smollm binaries: abba_smollm.sh OUT FILE@MODE THREADS A B [rounds]
out=$1; model=$2; t=$3; a=$4; b=$5; rounds=${6:-2}
: > $out
for r in $(seq $rounds); do
  for v in $a $b $b $a; do
    line=$(/tmp/smollm-$v $model --bench /usr/share/common-licenses/GPL-3 --repeat 1 --bench-threads $t 2>&1 | grep "^| $(echo $model | cut -c1-10)")
    echo "$v $t $line" >> $out
  done
done
