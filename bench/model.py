#!/usr/bin/env python3
"""A paper model of sharded search time, fitted to bench_scaling's 1- and 2-rank records:

    time per batch(P) = fixed + scan(rows / P) + broadcast(P) + all-gather(P) + merge(P * K)

  fixed        host round trip + per-batch control: p50 - (bcast + scan + skew + gather + merge) at P = 1
  scan(r)      = s0 + s1 * r * D * bytes: s0, s1 from the device scan time at P = 1 and P = 2 (two shard
               sizes); one point only: s0 = 0
  broadcast(P) = (P - 1) * alpha + B * D * 4 / beta                     (ring / pipelined chain)
  all-gather(P)= (P - 1) * (alpha + B * K * 16 / beta)                  (ring; 16-byte candidates)
  merge(P*K)   = merge(2) * P / 2                                        (linear in candidates)

Links (assumptions, stated in the output): up to 8 GPUs per node on NVLink (alpha 5 us per hop,
beta 400 GB/s); beyond a node, a ring crosses InfiniBand, whose hops set the pace (alpha 10 us,
beta 50 GB/s). The measured 2-rank broadcast and all-gather replace the NVLink alpha when they
are larger (NCCL's real per-collective cost). Memory: 141 GB per GPU minus 10% for workspace.

usage: bench/model.py scaling.jsonl [--P 1,2,4,8,16,64] [--gpu-mem-gb 141]
"""
import argparse
import json
import sys

NV_ALPHA, NV_BETA = 5e-6, 400e9
IB_ALPHA, IB_BETA = 10e-6, 50e9
GPUS_PER_NODE = 8
BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def ms(x):
    return x * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl", nargs="+")
    ap.add_argument("--P", default="1,2,4,8,16,64")
    ap.add_argument("--gpu-mem-gb", type=float, default=141.0)
    a = ap.parse_args()
    Ps = [int(x) for x in a.P.split(",")]
    recs = []
    for p in a.jsonl:
        with open(p) as f:
            recs += [json.loads(l) for l in f if l.strip() and not l.startswith("#")]
    recs = [r for r in recs if r.get("bench") == "bench_scaling" and r.get("scaling", "strong") == "strong"
            and r.get("scan_ms") is not None]
    groups = {}
    for r in recs:
        groups.setdefault((r["rows_total"], r["dim"], r["dtype"], r["k"], r["batch"], r.get("engine")), {})[r["ranks"]] = r
    print("# paper model: time(P) = fixed + scan(rows/P) + broadcast(P) + all-gather(P) + merge(P*K)")
    print(f"# links: NVLink within a node of {GPUS_PER_NODE} (alpha {NV_ALPHA*1e6:.0f} us/hop, {NV_BETA/1e9:.0f} GB/s), "
          f"InfiniBand beyond (alpha {IB_ALPHA*1e6:.0f} us/hop, {IB_BETA/1e9:.0f} GB/s); ring collectives; "
          f"{a.gpu_mem_gb:.0f} GB per GPU, 90% usable")
    done = 0
    for (n, d, dt, k, b, eng), by in sorted(groups.items(), key=lambda x: tuple(str(v) for v in x[0])):
        if 1 not in by:
            continue
        r1, r2 = by[1], by.get(2)
        bpe = BYTES.get(dt, 4)
        scan = lambda r: (r.get("dev_p50_ms") or r["scan_ms"]) * 1e-3  # noqa: E731
        bytes1 = r1["rows_per_rank"] * d * bpe
        if r2:
            bytes2 = r2["rows_per_rank"] * d * bpe
            s1 = (scan(r1) - scan(r2)) / max(bytes1 - bytes2, 1)
            s0 = max(0.0, scan(r1) - s1 * bytes1)
            s1 = max(s1, 0.0)
        else:
            s0, s1 = 0.0, scan(r1) / bytes1
        fixed = max(0.0, (r1["p50_ms"] - sum((r1.get(x) or 0) for x in ("bcast_ms", "scan_ms", "skew_ms", "gather_ms",
                                                                            "merge_ms"))) * 1e-3)
        nv_alpha = NV_ALPHA
        if r2:  # measured per-hop cost of one NCCL collective at 2 ranks, if larger than the assumption
            nv_alpha = max(NV_ALPHA, (r2.get("gather_ms") or 0) * 1e-3 - b * k * 16 / NV_BETA,
                           (r2.get("bcast_ms") or 0) * 1e-3 - b * d * 4 / NV_BETA)
        merge2 = (r2.get("merge_ms") or 0) * 1e-3 if r2 else 20e-6
        print(f"\n## N={n} D={d} {dt} K={k} B={b} ({eng}): fit s0={s0*1e6:.1f} us, "
              f"scan rate {1/s1/1e9 if s1 > 0 else float('inf'):.0f} GB/s, fixed {fixed*1e6:.1f} us, "
              f"NVLink hop {nv_alpha*1e6:.1f} us, merge(2) {merge2*1e6:.1f} us; measured p50: "
              f"1 rank {r1['p50_ms']*1e3:.1f} us" + (f", 2 ranks {r2['p50_ms']*1e3:.1f} us" if r2 else ""))
        print(f"{'P':>4} {'nodes':>5} {'scan us':>9} {'bcast us':>9} {'gather us':>9} {'merge us':>9} {'fixed us':>9} "
              f"{'total us':>9} {'QPS':>10} {'eff':>6} {'fits':>5}  first to break")
        t1 = None
        for P in Ps:
            nodes = (P + GPUS_PER_NODE - 1) // GPUS_PER_NODE
            alpha, beta = (nv_alpha, NV_BETA) if nodes == 1 else (IB_ALPHA, IB_BETA)
            rows = -(-n // P)
            t_scan = s0 + s1 * rows * d * bpe if P > 1 or not r1 else scan(r1)
            t_b = 0.0 if P == 1 else (P - 1) * alpha + b * d * 4 / beta
            t_g = 0.0 if P == 1 else (P - 1) * (alpha + b * k * 16 / beta)
            t_m = 0.0 if P == 1 else merge2 * P / 2
            tot = fixed + t_scan + t_b + t_g + t_m
            t1 = t1 or tot
            eff = t1 / (P * tot)
            fits = rows * d * bpe <= 0.9 * a.gpu_mem_gb * 1e9
            comm = t_b + t_g + t_m
            why = []
            if not fits:
                why.append("shard does not fit")
            if comm > t_scan:
                why.append("communication + merge > scan")
            if fixed > t_scan:
                why.append("fixed round trip > scan")
            if eff < 0.9 and P > 1:
                why.append(f"efficiency {eff:.2f} < 0.9")
            print(f"{P:>4} {nodes:>5} {t_scan*1e6:>9.1f} {t_b*1e6:>9.1f} {t_g*1e6:>9.1f} {t_m*1e6:>9.1f} {fixed*1e6:>9.1f} "
                  f"{tot*1e6:>9.1f} {b/tot:>10.0f} {eff:>6.2f} {'yes' if fits else 'no':>5}  {'; '.join(why) or '-'}")
        done += 1
    if not done:
        print("no bench_scaling strong-scaling record with ranks = 1 (and split timings) found")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
