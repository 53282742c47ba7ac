#!/usr/bin/env python3
"""Independent golden vectors for the qlinear recipes (docs/NUMERICS.md §3).

Written from the spec alone, in numpy float32 arithmetic with np.rint (round
half to even), so the Rust recipe is checked against a second implementation.

Usage: gen_recipe_golden.py OUT         write the fixture
       gen_recipe_golden.py --check F   exit 1 unless F equals what we generate
       gen_recipe_golden.py --gptq OUT, --check-gptq F: the same for GPTQ
       (§3.9), whose cases are written in plain Python f64 from the text

Fixture format, one case per line, fields separated by ' ; ':
  q8 K ; w (f32 bits, hex) ; scale (f32 bits) ; codes (decimal)
  q4 K ; w ; scale (f32 bits) ; packed bytes (hex, biased nibbles, low first)
  q4g G K ; w ; scales (f16 bits) ; packed bytes (hex, biased)
  q4g-overflow G K ; w ; - ; -          (the recipe must refuse this row)
  R-q8 K, R-q4 K, R-q4g G K, R-q4g-overflow G K: the same with the named
  recipe R (full-range or search, docs/NUMERICS.md §3.6-§3.7)
  activation-aware-...: the same, its second field "w | importance" (§3.8)
"""
import sys

import numpy as np

F32 = np.float32


def amax(w):
    return F32(np.max(np.abs(w))) if w.size else F32(0.0)


def q_codes(w, scale, lim):
    if scale == F32(0.0):
        return np.zeros(w.size, dtype=np.int64)
    with np.errstate(over="ignore", divide="ignore"):
        q = np.rint(w / F32(scale)).astype(np.float32)
    return np.clip(q, -lim, lim).astype(np.int64)


def pack_biased(codes):
    nib = [int(c) + 8 for c in codes]
    if len(nib) % 2:
        nib.append(8)
    return bytes(nib[i] | (nib[i + 1] << 4) for i in range(0, len(nib), 2))


def q8(w):
    scale = F32(amax(w) / F32(127.0))
    return scale, q_codes(w, scale, 127)


def q4(w):
    scale = F32(amax(w) / F32(7.0))
    return scale, pack_biased(q_codes(w, scale, 7))


def q4g(w, g):
    scales, codes = [], []
    for i in range(0, w.size, g):
        part = w[i : i + g]
        with np.errstate(over="ignore"):
            s = np.float16(amax(part) / F32(7.0))
        if np.isinf(s):
            return None
        scales.append(s)
        codes.extend(q_codes(part, F32(s), 7))
    return scales, pack_biased(codes)


# --- the named recipes (docs/NUMERICS.md §3.6-§3.7), written from the spec ---

SEARCH = {7: [5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 8.5, 9.0, 9.5, 10.0, 10.5],
          127: [120.0, 124.0, 127.0, 130.0, 134.0]}
SEARCH_Q4_GROUP = [5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 9.0, 10.0]


def codes_lohi(w, s, lo, hi):
    if s == F32(0.0):
        return np.zeros(w.size, dtype=np.int64)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        q = np.rint(w / F32(s)).astype(np.float32)
    return np.clip(q, lo, hi).astype(np.int64)


def lane_sum(v):
    """8 f32 lanes, lane l taking positions l, l+8, ... in order, then
    ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)); lanes start at +0.0."""
    v = np.asarray(v, dtype=np.float32)
    pad = np.zeros((-v.size) % 8, dtype=np.float32)
    rows = np.concatenate([np.zeros(8, dtype=np.float32), v, pad]).reshape(-1, 8)
    with np.errstate(over="ignore", invalid="ignore"):
        l = np.cumsum(rows, axis=0, dtype=np.float32)[-1]
        return F32(F32(F32(l[0] + l[1]) + F32(l[2] + l[3])) + F32(F32(l[4] + l[5]) + F32(l[6] + l[7])))


def seq_sum(v):
    """f32 sum in increasing position order, from +0."""
    with np.errstate(over="ignore", invalid="ignore"):
        return F32(np.add.accumulate(np.concatenate([np.zeros(1, np.float32), v]), dtype=np.float32)[-1])


def store32(s):
    return F32(s)


def store16(s):
    with np.errstate(over="ignore"):
        h = np.float16(F32(s))
    return None if np.isinf(h) else F32(h)


def choose(recipe, w, hi, lo, store, a=None):
    """(stored scale, lowest code) or None when the scale overflows (§3.6-§3.8).
    a: the importance (activation-aware), or None (every weight 1)."""
    amax_ = amax(w)
    pos = F32(max(F32(0.0), F32(np.max(w)) if w.size else F32(0.0)))
    neg = F32(max(F32(0.0), F32(np.max(-w)) if w.size else F32(0.0)))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        full = store(F32(max(F32(pos / F32(hi)), F32(neg / F32(-lo)))))
        canon = store(F32(amax_ / F32(hi)))
    if recipe == "full-range":
        return None if full is None else (full, lo)
    probes = [(canon, -hi, False), (full, lo, False)]
    for d in SEARCH_Q4_GROUP if store is store16 else SEARCH[hi]:
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            probes.append((F32(amax_ / F32(d)), lo, True))
    best = None
    for p, plo, least_squares in probes:
        if p is None or not (p > 0 and np.isfinite(p)):
            continue
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            r = F32(F32(1.0) / p)
            if not np.isfinite(r):
                continue
            q = np.rint(np.clip((w * r).astype(np.float32), plo, hi)).astype(np.float32)
            u = (w - (p * q).astype(np.float32)).astype(np.float32)
            v, t = (u, q) if a is None else ((a * u).astype(np.float32), (a * q).astype(np.float32))
            uu = seq_sum((v * u).astype(np.float32))
            uq = seq_sum((v * q).astype(np.float32))
            qq = seq_sum((t * q).astype(np.float32))
            if least_squares:
                s = store(F32(p + F32(uq / qq)))
                if s is None or not (s > 0 and np.isfinite(s)):
                    continue
            else:
                s = p
            d = float(s) - float(p)
            e = float(uu) - 2.0 * d * float(uq) + d * d * float(qq)
        if np.isnan(e):
            e = float("inf")
        if best is None or e < best[1]:
            best = (s, e)
    if best is not None:
        return (best[0], lo)
    return None if canon is None else (canon, lo)


def q8_r(recipe, w, a=None):
    c = choose(recipe, w, 127, -127, store32, a)
    s, lo = c if c is not None else (F32(0.0), -127)
    return s, codes_lohi(w, s, lo, 127)


def q4_r(recipe, w, a=None):
    c = choose(recipe, w, 7, -8, store32, a)
    s, lo = c if c is not None else (F32(0.0), -7)
    return s, pack_biased(codes_lohi(w, s, lo, 7))


def q4g_r(recipe, w, g, a=None):
    scales, codes = [], []
    for i in range(0, w.size, g):
        part = w[i : i + g]
        c = choose(recipe, part, 7, -8, store16, None if a is None else a[i : i + g])
        if c is None:
            return None
        s, lo = c
        scales.append(np.float16(s))
        codes.extend(codes_lohi(part, s, lo, 7))
    return scales, pack_biased(codes)


def hexw(w):
    return " ".join(f"{int(b):08x}" for b in w.view(np.uint32))


def rows(rng):
    f = lambda xs: np.array(xs, dtype=np.float32)
    out = [
        f([]), f([0.0]), f([0.0, -0.0, 0.0]), f([1.0]), f([-1.0]), f([-3.5, 1.0, 2.0]),
        # ties at exactly .5 with scale 1 (Q8: amax 127; Q4: amax 7)
        f([127.0, 0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 125.5, -126.5]),
        f([7.0, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, -0.5, -6.5]),
        f([-7.0, 0.5, -1.5, 2.5]),
        f([1e-45, -1e-45, 0.0]), f([1e-40, 3e-39, -2e-38]), f([3.0e38, -3.4e38, 1.0, 0.0]),
        f([65504.0 * 7, 1.0, -2.0, 3.0]), f([6e-8, 1e-7, -3e-8, 0.0]),
        f([-100.0, 50.0, 25.0, 12.5, 6.25, 3.125, 1.5625]),
    ]
    for k in [1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 67, 96, 128, 200]:
        for mag in [1e-6, 1e-2, 1.0, 37.0, 1e4]:
            out.append((rng.standard_normal(k) * mag).astype(np.float32))
    for k in [4, 6, 8, 12, 64, 128]:
        out.append(rng.integers(-127, 128, k).astype(np.float32) * F32(0.25))
        out.append((rng.uniform(-1, 1, k) ** 3).astype(np.float32))
    return out


def importance(rng, k, i):
    """A varied importance row: spread over decades, with zeros; every 7th
    row all zero, every 11th with huge values (sums overflow to inf)."""
    if i % 7 == 3:
        return np.zeros(k, dtype=np.float32)
    a = (rng.uniform(0, 1, k) ** 4 * F32(10.0) ** rng.uniform(-3, 3)).astype(np.float32)
    a[rng.uniform(0, 1, k) < 0.2] = 0
    if i % 11 == 5:
        a[: (k + 1) // 2] = F32(3e38)
    return a


def generate():
    rng = np.random.default_rng(20261129)
    rng_a = np.random.default_rng(20261130)
    lines = []
    for i, w in enumerate(rows(rng)):
        k = w.size
        s, c = q8(w)
        lines.append(f"q8 {k} ; {hexw(w)} ; {int(F32(s).view(np.uint32)):08x} ; {' '.join(map(str, c))}")
        s, p = q4(w)
        lines.append(f"q4 {k} ; {hexw(w)} ; {int(F32(s).view(np.uint32)):08x} ; {p.hex()}")
        for g in [2, 4, 8, 16, 32, 64]:
            if k == 0 or k % g:
                continue
            r = q4g(w, g)
            if r is None:
                lines.append(f"q4g-overflow {g} {k} ; {hexw(w)} ; - ; -")
            else:
                scales, p = r
                sb = " ".join(f"{int(np.float16(x).view(np.uint16)):04x}" for x in scales)
                lines.append(f"q4g {g} {k} ; {hexw(w)} ; {sb} ; {p.hex()}")
        for recipe in ["full-range", "search"]:
            s, c = q8_r(recipe, w)
            lines.append(
                f"{recipe}-q8 {k} ; {hexw(w)} ; {int(F32(s).view(np.uint32)):08x} ; {' '.join(map(str, c))}"
            )
            s, p = q4_r(recipe, w)
            lines.append(f"{recipe}-q4 {k} ; {hexw(w)} ; {int(F32(s).view(np.uint32)):08x} ; {p.hex()}")
            for g in [2, 8, 32]:
                if k == 0 or k % g:
                    continue
                r = q4g_r(recipe, w, g)
                if r is None:
                    lines.append(f"{recipe}-q4g-overflow {g} {k} ; {hexw(w)} ; - ; -")
                else:
                    scales, p = r
                    sb = " ".join(f"{int(np.float16(x).view(np.uint16)):04x}" for x in scales)
                    lines.append(f"{recipe}-q4g {g} {k} ; {hexw(w)} ; {sb} ; {p.hex()}")
        # activation-aware: field 2 is "w | importance"
        a = importance(rng_a, k, i)
        wa = f"{hexw(w)} | {hexw(a)}"
        recipe = "activation-aware"
        s, c = q8_r(recipe, w, a)
        lines.append(f"{recipe}-q8 {k} ; {wa} ; {int(F32(s).view(np.uint32)):08x} ; {' '.join(map(str, c))}")
        s, p = q4_r(recipe, w, a)
        lines.append(f"{recipe}-q4 {k} ; {wa} ; {int(F32(s).view(np.uint32)):08x} ; {p.hex()}")
        for g in [2, 8, 32]:
            if k == 0 or k % g:
                continue
            r = q4g_r(recipe, w, g, a)
            if r is None:
                lines.append(f"{recipe}-q4g-overflow {g} {k} ; {wa} ; - ; -")
            else:
                scales, p = r
                sb = " ".join(f"{int(np.float16(x).view(np.uint16)):04x}" for x in scales)
                lines.append(f"{recipe}-q4g {g} {k} ; {wa} ; {sb} ; {p.hex()}")
    return "\n".join(lines) + "\n"


DAMPING = 0.05


def dot4(a, b):
    """§3.9's dot product: four partial sums by index mod 4, each in
    increasing index from +0, added as (p0 + p1) + (p2 + p3)."""
    p = [0.0, 0.0, 0.0, 0.0]
    for i, (x, y) in enumerate(zip(a, b)):
        p[i % 4] += x * y
    return (p[0] + p[1]) + (p[2] + p[3])


def gptq_factor(h, k):
    """§3.9 steps 1-4: (U as a list of rows, the diagonal as f32, dead), or
    ("not-pd", column)."""
    import math
    hv = [[float(h[i * k + j]) for j in range(k)] for i in range(k)]
    dead = [hv[j][j] == 0.0 for j in range(k)]
    a = [[0.0] * k for _ in range(k)]
    for i in range(k):
        for j in range(i, k):
            v = 0.0 if dead[i] or dead[j] else hv[i][j]
            a[i][j] = v
            a[j][i] = v
        if dead[i]:
            a[i][i] = 1.0
    total = 0.0
    for j in range(k):
        total += a[j][j]
    lam = DAMPING * (total / float(k))
    for j in range(k):
        a[j][j] += lam
    r = [[0.0] * k for _ in range(k)]
    for j in range(k - 1, -1, -1):
        d = a[j][j] - dot4(r[j][j + 1:], r[j][j + 1:])
        if not (d > 0.0 and math.isfinite(d)):
            return ("not-pd", j)
        rjj = math.sqrt(d)
        r[j][j] = rjj
        for i in range(j):
            r[i][j] = (a[i][j] - dot4(r[i][j + 1:], r[j][j + 1:])) / rjj
    u = [[0.0] * k for _ in range(k)]
    for i in range(k):
        u[i][i] = 1.0 / r[i][i]
        for j in range(i + 1, k):
            s = dot4(u[i][i:j], [r[m][j] for m in range(i, j)])
            u[i][j] = -s / r[j][j]
    diag = np.array([0.0 if dead[j] else h[j * k + j] for j in range(k)], dtype=np.float32)
    return u, diag, dead


def gptq_row(w, factor, block, hi, lo, store):
    """§3.9 steps 5-6: (scales, codes) or None on a scale overflow."""
    u, diag, dead = factor
    k = w.size
    v = [0.0 if dead[j] else float(w[j]) for j in range(k)]
    scales, codes = [], []
    for start in range(0, k, block):
        cur = np.array(v[start:start + block], dtype=np.float32)
        c = choose("activation-aware", cur, hi, lo, store, diag[start:start + block])
        if c is None:
            return None
        s, l = c
        scales.append(s)
        for j in range(start, start + block):
            q = int(codes_lohi(np.array([v[j]], dtype=np.float32), s, l, hi)[0])
            codes.append(q)
            e = (v[j] - float(s) * float(q)) / u[j][j]
            for m in range(j + 1, k):
                v[m] -= e * u[j][m]
    return scales, codes


def gptq_cases():
    """Hessians with their rows: correlated inputs (a random walk), nearly
    collinear ones (the dampening at work), a dead input, a diagonal
    hessian; rows from tiny to huge."""
    rng = np.random.default_rng(20261204)
    cases = []
    for k in [2, 4, 8, 16, 32]:
        for kind in ["walk", "collinear", "dead", "diagonal"]:
            t = 3 * k
            z = rng.standard_normal((t, k))
            if kind == "walk":
                x = np.cumsum(z, axis=1)
            elif kind == "collinear":
                x = z[:, :1] + 1e-3 * z
            else:
                x = z * rng.uniform(0.1, 3.0, k)
            if kind == "dead":
                x[:, k // 2] = 0.0
            h = (x.T @ x / t).astype(np.float32)
            if kind == "diagonal":
                h = np.diag(np.diag(h)).astype(np.float32)
            mags = [1e-3, 1.0, 300.0] + ([1e6] if kind == "walk" else [])  # 1e6: f16 overflows
            rows = [(rng.standard_normal(k) * mag).astype(np.float32) for mag in mags]
            cases.append((h.ravel(), rows))
    # a hessian that is not positive definite
    cases.append((np.array([1.0, 2.0, 2.0, 1.0], dtype=np.float32), [np.array([0.5, -0.25], dtype=np.float32)]))
    return cases


def generate_gptq():
    """One "gptq-hessian ID K ; h" line per hessian, then its rows' cases,
    each naming the hessian by ID."""
    lines = []
    for hid, (h, rows) in enumerate(gptq_cases()):
        k = rows[0].size
        lines.append(f"gptq-hessian {hid} {k} ; {hexw(h)} ; - ; -")
        f = gptq_factor(h, k)
        if f[0] == "not-pd":
            lines.append(f"gptq-not-pd {hid} {k} ; {hexw(rows[0])} ; {f[1]} ; -")
            continue
        for w in rows:
            s, c = gptq_row(w, f, k, 127, -127, store32)
            lines.append(f"gptq-q8 {hid} {k} ; {hexw(w)} ; {int(F32(s[0]).view(np.uint32)):08x} ; {' '.join(map(str, c))}")
            s, c = gptq_row(w, f, k, 7, -8, store32)
            lines.append(f"gptq-q4 {hid} {k} ; {hexw(w)} ; {int(F32(s[0]).view(np.uint32)):08x} ; {pack_biased(c).hex()}")
            for g in [2, 8, 32]:
                if k % g:
                    continue
                r = gptq_row(w, f, g, 7, -8, store16)
                if r is None:
                    lines.append(f"gptq-q4g-overflow {hid} {g} {k} ; {hexw(w)} ; - ; -")
                    continue
                sb = " ".join(f"{int(np.float16(x).view(np.uint16)):04x}" for x in r[0])
                lines.append(f"gptq-q4g {hid} {g} {k} ; {hexw(w)} ; {sb} ; {pack_biased(r[1]).hex()}")
    return "\n".join(lines) + "\n"


def main():
    gptq = sys.argv[1:2] in (["--gptq"], ["--check-gptq"])
    text = generate_gptq() if gptq else generate()
    if gptq:
        sys.argv = [sys.argv[0]] + (["--check"] if sys.argv[1] == "--check-gptq" else []) + sys.argv[2:]
    if sys.argv[1:2] == ["--check"]:
        with open(sys.argv[2]) as fh:
            if fh.read() != text:
                print(f"{sys.argv[2]} differs from what {sys.argv[0]} generates", file=sys.stderr)
                sys.exit(1)
        print(f"{sys.argv[2]}: matches the Python recipe ({text.count(chr(10))} cases)")
        return
    with open(sys.argv[1], "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
