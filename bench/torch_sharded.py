#!/usr/bin/env python3
"""The hand-written sharding a PyTorch user would write (the baseline of bench_scaling):
every rank holds a contiguous slice of the same generated corpus as bench_scaling (same seed,
same balanced row plan as shardtopk::shard_rows), and per batch
    rank 0: query host -> device;  broadcast;  every rank: mm/mv + topk on its slice (+ row offset);
    all_gather of K (score, id) per rank;  rank 0: topk over P*K + gather ids -> host.
Rank 0 times each batch host to host (wall clock; the .cpu() copy synchronises) and, in extra
instrumented iterations, the broadcast / scan / all-gather / merge steps (synchronised).
One JSON line per configuration from rank 0.

Launch:  torchrun --nproc_per_node 2 bench/torch_sharded.py -N 10M -d 768 -t float16 -k 100 -B 1,64
   or:   mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0 python3 bench/torch_sharded.py ...
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_corpus  # noqa: E402
from torch_baseline import counts, pct  # noqa: E402


def shard_rows(n, world, rank):
    base, extra = divmod(n, world)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def init():
    if "OMPI_COMM_WORLD_RANK" in os.environ and "RANK" not in os.environ:  # under mpirun
        os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
        os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
        os.environ["LOCAL_RANK"] = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return dist.get_rank(), dist.get_world_size(), torch.device("cuda", local)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-N", "--rows", default="10M", help="total rows (strong scaling), comma list")
    ap.add_argument("--rows-per-rank", default="", help="weak scaling: rows per rank, comma list")
    ap.add_argument("-d", "--dim", default="768")
    ap.add_argument("-k", "--k", default="100")
    ap.add_argument("-B", "--batches", default="1,64")
    ap.add_argument("-t", "--dtype", default="float16")
    ap.add_argument("-m", "--metric", default="inner_product", choices=["inner_product", "cosine"])
    ap.add_argument("-n", "--iters", type=int, default=50)
    ap.add_argument("-w", "--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-J", "--json", default="-")
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    rank, world, dev = init()
    out = sys.stdout if (a.json == "-" or rank != 0) else open(a.json, "a")
    ks, bs = counts(a.k), counts(a.batches)
    sizes = [n * world for n in counts(a.rows_per_rank)] if a.rows_per_rank else counts(a.rows)
    for n in sizes:
        for d in counts(a.dim):
            for dt in a.dtype.split(","):
                lo, hi = shard_rows(n, world, rank)
                xb = gen_corpus.torch_rows(a.seed, lo, hi - lo, d, dev, getattr(torch, dt),
                                           normalize=a.metric == "cosine")
                pool = max(2 * max(bs), 64)
                qs = torch.from_numpy(gen_corpus.numpy_rows(a.seed + 1, 0, pool, d)).pin_memory()
                for k in ks:
                    for b in bs:
                        kk = min(k, hi - lo)
                        qd = torch.empty((b, d), dtype=torch.float32, device=dev)
                        gv = torch.empty((world, b, kk), dtype=torch.float32, device=dev)
                        gi = torch.empty((world, b, kk), dtype=torch.int64, device=dev)
                        steps = {"bcast": [], "scan": [], "gather": [], "merge": []}

                        def one(off, timed=None):
                            t = time.perf_counter
                            if rank == 0:
                                qd.copy_(qs[off:off + b], non_blocking=True)
                            if timed is not None:
                                torch.cuda.synchronize(); t0 = t()
                            dist.broadcast(qd, src=0)
                            if timed is not None:
                                torch.cuda.synchronize(); timed["bcast"].append((t() - t0) * 1e3); t0 = t()
                            q = torch.nn.functional.normalize(qd, dim=1) if a.metric == "cosine" else qd
                            if b == 1:
                                s = torch.mv(xb, q[0].to(xb.dtype)).float().unsqueeze(0)
                            else:
                                s = torch.mm(q.to(xb.dtype), xb.t()).float()
                            v, i = torch.topk(s, kk, dim=1)
                            i = i + lo
                            if timed is not None:
                                torch.cuda.synchronize(); timed["scan"].append((t() - t0) * 1e3)
                                dist.barrier(); t0 = t()
                            dist.all_gather_into_tensor(gv, v.contiguous())
                            dist.all_gather_into_tensor(gi, i.contiguous())
                            if timed is not None:
                                torch.cuda.synchronize(); timed["gather"].append((t() - t0) * 1e3); t0 = t()
                            if rank == 0:
                                allv = gv.permute(1, 0, 2).reshape(b, world * kk)
                                alli = gi.permute(1, 0, 2).reshape(b, world * kk)
                                fv, pos = torch.topk(allv, min(k, world * kk), dim=1)
                                fi = torch.gather(alli, 1, pos)
                                r = (fi.cpu(), fv.cpu())
                                if timed is not None:
                                    timed["merge"].append((t() - t0) * 1e3)
                                return r
                            return None

                        offs = [((it * b) % pool) if ((it * b) % pool) + b <= pool else 0 for it in range(a.iters)]
                        for it in range(a.warmup):
                            one(offs[it % len(offs)])
                        torch.cuda.synchronize()
                        dist.barrier()
                        lat = []
                        t0 = time.perf_counter()
                        for it in range(a.iters):
                            tb = time.perf_counter()
                            one(offs[it])
                            lat.append((time.perf_counter() - tb) * 1e3)
                        wall = time.perf_counter() - t0
                        torch.cuda.synchronize()
                        dist.barrier()
                        for it in range(a.iters):
                            one(offs[it], steps)
                        dist.barrier()
                        if rank == 0:
                            rec = dict(impl="torch-dist", bench="torch_sharded", ranks=world, rows_total=n,
                                       rows_per_rank=shard_rows(n, world, 0)[1], dim=d, dtype=dt, metric=a.metric, k=k,
                                       batch=b, iters=a.iters, scaling="weak" if a.rows_per_rank else "strong",
                                       p50_ms=pct(lat, 50), p99_ms=pct(lat, 99), qps=b * a.iters / wall,
                                       bcast_ms=pct(steps["bcast"], 50), scan_ms=pct(steps["scan"], 50),
                                       gather_ms=pct(steps["gather"], 50), merge_ms=pct(steps["merge"], 50),
                                       query_rounded=dt != "float32", torch=torch.__version__,
                                       device=torch.cuda.get_device_name(dev), tag=a.tag)
                            print(json.dumps(rec), file=out, flush=True)
                del xb
                torch.cuda.empty_cache()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
