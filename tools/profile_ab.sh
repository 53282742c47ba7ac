#!/usr/bin/env bash
# Alternated A/B of `qlinear-bench --profile` builds: each round runs every
# binary once, in turn, with the same arguments, and each run prints the
# fastest of its calls (`µs per call: min ...`). Prints, per binary, that
# minimum for every round, then the median over the rounds. On a noisy
# machine the minimum of a hot run is the least disturbed figure, and the
# alternation spreads a slow spell over every binary alike.
#
#   ROUNDS=5 tools/profile_ab.sh A=path/to/qlinear-bench B=other/qlinear-bench -- \
#       --profile w4a8_g32 --shape 4096x4096 --m 16 --calls 40
#
# Set QLINEAR_INT8_TIER and RAYON_NUM_THREADS in the environment as needed
# (callgrind-style runs force both: the plan is timing-based).
set -euo pipefail
rounds=${ROUNDS:-5}
names=() bins=()
while [[ $# -gt 0 && $1 != -- ]]; do
    names+=("${1%%=*}") bins+=("${1#*=}")
    shift
done
[[ ${1:-} == -- ]] || { echo "usage: $0 NAME=BIN... -- PROFILE-ARGS" >&2; exit 2; }
shift
declare -A mins
for ((r = 0; r < rounds; r++)); do
    for i in "${!bins[@]}"; do
        line=$("${bins[$i]}" "$@" 2>/dev/null | grep '^µs per call')
        mins[$i]+=" $(awk '{print $5}' <<<"$line")"
    done
done
for i in "${!bins[@]}"; do
    sorted=$(tr ' ' '\n' <<<"${mins[$i]}" | grep . | sort -g)
    median=$(awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}' <<<"$sorted")
    echo "${names[$i]}: min per run${mins[$i]}; median $median"
done
