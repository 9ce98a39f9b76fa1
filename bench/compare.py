#!/usr/bin/env python3
"""Join shardtopk's benchmark JSON lines (bench_search / bench_scaling) with PyTorch's
(torch_baseline.py eager + graph, torch_sharded.py) into one table: N, D, dtype, K, B,
ranks, our p50/p99 host to host and device-only (µs), PyTorch eager and CUDA-graph p50 (µs,
one GPU) and torch.distributed p50 at the same rank count, ratio (best PyTorch p50 / our p50:
> 1 means we are faster), fraction of the read floor (device-only, per rank) and #wrong.

usage: bench/compare.py --ours ours.jsonl [more.jsonl] --torch torch.jsonl [more.jsonl] [--json OUT]
"""
import argparse
import json
import math
import sys


def load(paths):
    out = []
    for p in paths:
        try:
            with open(p) as f:
                for line in f:
                    line = line.strip()
                    if line and not line.startswith("#"):
                        out.append(json.loads(line))
        except FileNotFoundError:
            print(f"# (no {p})", file=sys.stderr)
    return out


def key(r, ranks=True):
    k = (r.get("rows_total"), r.get("dim"), r.get("dtype"), r.get("metric", "inner_product"), r.get("k"), r.get("batch"))
    return k + ((r.get("ranks", 1),) if ranks else ())


def us(v):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 1e3:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", nargs="+", default=[])
    ap.add_argument("--torch", nargs="+", default=[])
    ap.add_argument("--json", help="write the joined rows as JSON lines too")
    a = ap.parse_args()
    rows = load(a.ours) + load(a.torch)
    ours = [r for r in rows if r.get("bench") in ("bench_search", "bench_scaling")]
    eager, graph, tdist = {}, {}, {}
    for r in rows:
        if r.get("error"):
            continue
        if r.get("impl") == "torch" and r.get("mode") == "eager":
            eager[key(r, False)] = r
        elif r.get("impl") == "torch" and r.get("mode") == "graph":
            graph[key(r, False)] = r
        elif r.get("impl") == "torch-dist":
            tdist[key(r)] = r
    # one row per (shape, ranks): the latest record wins
    latest = {}
    for r in ours:
        latest[key(r) + (r.get("scaling", "strong"), r.get("bench"), r.get("tag", ""))] = r
    hdr = (f"{'run':>9} {'N':>9} {'D':>5} {'dtype':>8} {'K':>5} {'B':>5} {'ranks':>5} | {'p50':>9} {'p99':>9} {'dev p50':>9} | "
           f"{'eager':>9} {'graph':>9} {'dist':>9} | {'ratio':>6} {'floor':>6} {'QPS':>9} {'#wrong':>6}")
    units = (f"{'':>9} {'':>9} {'':>5} {'':>8} {'':>5} {'':>5} {'':>5} | {'(us)':>9} {'(us)':>9} {'(us)':>9} | "
             f"{'(us)':>9} {'(us)':>9} {'(us)':>9} | {'(x)':>6} {'(dev)':>6} {'(q/s)':>9} {'':>6}")
    print("# shardtopk vs PyTorch, same generated corpus (eager/graph: one GPU; dist: torch.distributed at the same ranks)")
    print("# ratio = best PyTorch p50 at these ranks (graph or eager on 1 rank, dist otherwise) / our p50; > 1: we are faster")
    print("#" + hdr[1:])
    print("#" + units[1:])
    joined = []
    total_wrong = 0
    for kk in sorted(latest, key=lambda x: (str(x[-1]), x[0] or 0, x[1] or 0, str(x[2]), x[4] or 0, x[5] or 0, x[6] or 0)):
        r = latest[kk]
        ke = key(r, False)
        e, g, d = eager.get(ke), graph.get(ke), tdist.get(key(r))
        cands = [x["p50_ms"] for x in ([e, g] if r.get("ranks", 1) == 1 else []) + [d] if x and x.get("p50_ms")]
        best = min(cands) if cands else None
        ratio = best / r["p50_ms"] if best and r.get("p50_ms") else None
        w = int(r.get("wrong") or 0)
        total_wrong += w
        fl = r.get("frac_floor_dev")
        qps = f"{r['qps']:.0f}" if r.get("qps") else "-"
        rat = f"{ratio:.2f}" if ratio else "-"
        fls = f"{fl:.3f}" if fl else "-"
        run = (r.get("tag") or r.get("bench", "")).replace("bench_", "")[:9]
        print(f"{run:>9} {r['rows_total']:>9} {r['dim']:>5} {r['dtype']:>8} {r['k']:>5} {r['batch']:>5} {r['ranks']:>5} | "
              f"{us(r.get('p50_ms')):>9} {us(r.get('p99_ms')):>9} {us(r.get('dev_p50_ms')):>9} | "
              f"{us(e and e.get('p50_ms')):>9} {us(g and g.get('p50_ms')):>9} {us(d and d.get('p50_ms')):>9} | "
              f"{rat:>6} {fls:>6} {qps:>9} {w:>6}")
        joined.append(dict(rows_total=r["rows_total"], dim=r["dim"], dtype=r["dtype"], k=r["k"], batch=r["batch"],
                           ranks=r["ranks"], ours_p50_ms=r.get("p50_ms"), ours_p99_ms=r.get("p99_ms"),
                           ours_dev_p50_ms=r.get("dev_p50_ms"), torch_eager_p50_ms=e and e.get("p50_ms"),
                           torch_graph_p50_ms=g and g.get("p50_ms"), torch_dist_p50_ms=d and d.get("p50_ms"),
                           ratio=ratio, frac_floor_dev=fl, qps=r.get("qps"), wrong=w))
    print(f"# {len(joined)} configurations, #wrong total {total_wrong}")
    if a.json:
        with open(a.json, "w") as f:
            for j in joined:
                f.write(json.dumps(j) + "\n")
    return 1 if total_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
