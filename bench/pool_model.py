#!/usr/bin/env python3
"""A host model of the batched path's candidate pools for one query (docs/PERFORMANCE.md,
"Filtered search"): what reaches its threshold, what enters its pool and how many compactions
find more than the trigger, unfiltered against a scattered filter of a given selectivity.

Model: N i.i.d. standard-normal scores (Δ = 0: the approximate score is the score), the chunk
plan of a batch of 256 on float16 storage (8,192 rows, then chunks of at most 49,152 rows, each
at most 8 × the rows before it), the threshold seeded from the first chunk's allowed rows,
compactions after each of the first 8 chunks and every 4th after, when the pool holds more than
`--trigger` entries (the threshold rises to the pool's k-th). The flood guard is left out.

usage: bench/pool_model.py [-N 10000000] [-k 100] [--selectivity 0.1] [--queries 3]
needs: numpy
"""
import argparse

import numpy as np


def chunk_plan(n, first=8192, longest=49152, growth=8):
    plan, r = [first], first
    while r < n:
        c = min(longest, growth * r, n - r)
        plan.append(c)
        r += c
    return plan


def one_query(rng, n, k, sel, trigger, plan):
    s = rng.standard_normal(n).astype(np.float32)
    allow = rng.random(n) < sel if sel < 1 else np.ones(n, bool)
    first = s[: plan[0]][allow[: plan[0]]]
    t = np.sort(first)[-k] if len(first) >= k else -np.inf
    pool = first[first >= t]
    r0, entered, reached, active = plan[0], [], [], 0
    for c, rows in enumerate(plan[1:], 1):
        x, m = s[r0 : r0 + rows], allow[r0 : r0 + rows]
        r0 += rows
        hit = x >= t
        reached.append(int(hit.sum()))
        new = x[hit & m]
        entered.append(len(new))
        pool = np.concatenate([pool, new])
        if (c < 8 or c % 4 == 0) and len(pool) > trigger:
            active += 1
            t = max(t, np.sort(pool)[-k])
            pool = pool[pool >= t]
    return np.array(entered), np.array(reached), active


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-N", type=int, default=10_000_000)
    ap.add_argument("-k", type=int, default=100)
    ap.add_argument("--selectivity", type=float, default=0.1)
    ap.add_argument("--trigger", type=int, default=256)
    ap.add_argument("--queries", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    plan = chunk_plan(a.N)
    print(f"# {a.N} rows, {len(plan)} chunks, k {a.k}, trigger {a.trigger}, {a.queries} queries each")
    print("# filter        rows reaching t  entered pool  active compactions  per chunk after the 50th: reaching / entered")
    for sel in (1.0, a.selectivity):
        runs = [one_query(rng, a.N, a.k, sel, a.trigger, plan) for _ in range(a.queries)]
        reach = np.mean([r[1].sum() for r in runs])
        enter = np.mean([r[0].sum() for r in runs])
        act = np.mean([r[2] for r in runs])
        late_r = np.mean([r[1][50:].mean() for r in runs])
        late_e = np.mean([r[0][50:].mean() for r in runs])
        name = "none" if sel >= 1 else f"scattered {100 * sel:g} %"
        print(f"{name:>15} {reach:16.0f} {enter:13.0f} {act:19.1f}  {late_r:10.2f} / {late_e:.2f}")


if __name__ == "__main__":
    main()
