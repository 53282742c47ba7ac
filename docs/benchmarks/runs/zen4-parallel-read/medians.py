#!/usr/bin/env python3
"""Medians and ranges of the load times in an abba_load.sh round file:
python3 medians.py FILE"""
import re
import statistics
import sys

times = {}
for block in open(sys.argv[1]).read().split("== ")[1:]:
    head, body = block.split("\n", 1)
    _, variant, model = head.split()
    seconds = float(re.search(r"in place in ([\d.]+) s", body).group(1))
    times.setdefault((model, variant), []).append(seconds)
for (model, variant), ts in sorted(times.items()):
    print(f"{model} {variant}: median {statistics.median(ts):.3f} s, "
          f"range {min(ts):.3f}-{max(ts):.3f} s, {len(ts)} loads")
