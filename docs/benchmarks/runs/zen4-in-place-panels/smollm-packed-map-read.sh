#!/usr/bin/env bash
# packed (copied, then pack_weights) vs in-place from a private map vs in-place read into anonymous huge pages;
# rounds in the order A B C C B A, after an untimed warm-up of each
set -u
P="Once upon a time, in a small village by the sea,"
run() { # bin weights file t tokens
  "$1" target/smollm/$3.safetensors --prompt "$P" --max-tokens $5 --threads $4 --weights $2 2>&1 | tail -1
}
for f in q4g32-gptq q8-rotated; do
 for t in 1 2; do
  run /tmp/ab/qs-map packed $f $t 32 >/dev/null; run /tmp/ab/qs-map in-place $f $t 32 >/dev/null; run /tmp/ab/qs-read in-place $f $t 32 >/dev/null
  for r in 1 2 3; do
   for v in packed map read read map packed; do
    case $v in packed) b=/tmp/ab/qs-map; w=packed;; map) b=/tmp/ab/qs-map; w=in-place;; read) b=/tmp/ab/qs-read; w=in-place;; esac
    line=$(run $b $w $f $t 128)
    dec=$(sed -E 's/.*decode [0-9]+ tokens in [0-9.]+ ms \(([0-9.]+) tok\/s\).*/\1/' <<<"$line")
    load=$(sed -E 's/.*loaded in ([0-9.]+) s.*/\1/' <<<"$line")
    rss=$(sed -E 's/.*peak RSS ([0-9.]+) MiB.*/\1/' <<<"$line")
    echo "$f t=$t round=$r $v decode=$dec load=$load rss=$rss"
   done
  done
 done
done
