#!/usr/bin/env bash
# Runs a command and reports its peak resident memory, split into anonymous
# memory (heap: what the program itself holds) and the total (which also
# counts the clean, file-backed pages of a memory-mapped input), by sampling
# /proc/PID/status every 10 ms.
# Usage: tools/peak_rss.sh COMMAND [ARGS...]
set -u
"$@" > /dev/null &
pid=$!
anon=0; total=0
while kill -0 "$pid" 2>/dev/null; do
  if s=$(cat "/proc/$pid/status" 2>/dev/null); then
    a=$(awk '/^RssAnon:/ {print $2}' <<<"$s"); t=$(awk '/^VmHWM:/ {print $2}' <<<"$s")
    [ -n "$a" ] && [ "$a" -gt "$anon" ] && anon=$a
    [ -n "$t" ] && [ "$t" -gt "$total" ] && total=$t
  fi
  sleep 0.01
done
wait "$pid"; rc=$?
echo "peak anonymous RSS: $((anon / 1024)) MiB; peak total RSS (incl. mapped input): $((total / 1024)) MiB; exit $rc"
exit $rc
