#!/usr/bin/env python3
"""PyTorch baseline on one GPU: the corpus resident on the device, per batch `torch.mm` (or
`torch.mv` at batch 1) + `torch.topk`, queries copied host->device and results device->host
per batch, as an application that calls PyTorch would do. One JSON line per configuration.

Two corpus sources:
  * an HDF5 file (positional FILE; /train, /test; metric from its `distance` attribute), as
    bench/gpu_run.sh uses it;
  * --generated: the corpus of bench_search/bench_scaling, made on the GPU from the same seeded
    generator (bench/gen_corpus.py, bit-identical to shardtopk::generate_rows), with the same
    sweep flags (-N, -d, -k, -B, -t, -m, -n, -w, --seed; queries are rows 0.. of seed + 1).

Per configuration: eager (host in, host out; wall clock per batch, the .cpu() copies
synchronise) and, with --graph 1, the same steps captured in one CUDA graph with static
pinned host buffers (replay + synchronise; also the device time of a replay from CUDA events).
PyTorch rounds the query to the storage dtype (what `Q.half() @ C.T` does), which shardtopk may
not do (DESIGN.md "Query precision"); the record says so (query_rounded). l2 uses the norm
expansion |x|^2 - 2 q.x, cosine normalises both sides. Also reports the device-to-device copy
bandwidth measured in the same run.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_corpus  # noqa: E402


def copy_bandwidth(dev):
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        b.copy_(a)
    e.record()
    torch.cuda.synchronize()
    del a, b
    return 2 * n * 10 / (s.elapsed_time(e) / 1e3)  # bytes read + written per second


def counts(s):
    out = []
    for x in s.split(","):
        x = x.strip()
        mul = {"k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "g": 1e9, "G": 1e9}.get(x[-1:], 1)
        out.append(int(round(float(x[:-1] if mul != 1 else x) * mul)))
    return out


def pct(v, p):
    return float(np.percentile(np.asarray(v), p)) if v else None


class Searcher:
    """Scores + top-k over a resident corpus xb [N, D] (storage dtype) for one metric."""

    def __init__(self, xb, metric, norms, upcast=False):
        self.xb, self.metric, self.norms, self.upcast = xb, metric, norms, upcast

    def scores_topk(self, q, k):
        if self.metric == "cosine":
            q = torch.nn.functional.normalize(q, dim=1)
        if q.shape[0] == 1:
            s = torch.mv(self.xb, q[0].to(self.xb.dtype)).unsqueeze(0)
        else:
            s = torch.mm(q.to(self.xb.dtype), self.xb.t())
        # The one-liner a user writes selects on the matmul's own dtype; --upcast first converts
        # the [B, N] scores to float32, an extra pass at large B.
        if self.upcast or self.metric == "l2":
            s = s.float()
        if self.metric == "l2":
            s = self.norms.unsqueeze(0) - 2 * s  # + |q|^2 does not change the order
            return torch.topk(s, k, dim=1, largest=False)
        return torch.topk(s, k, dim=1)


def time_eager(srch, qs, b, k, iters, warmup, dev):
    def run(qh):
        v, i = srch.scores_topk(qh.to(dev, non_blocking=True), k)
        return i.cpu(), v.cpu()
    nq = qs.shape[0]
    offs = [((it * b) % nq) if ((it * b) % nq) + b <= nq else 0 for it in range(iters + warmup)]
    for it in range(warmup):
        run(qs[offs[it]:offs[it] + b])
    torch.cuda.synchronize()
    lat = []
    t0 = time.perf_counter()
    for it in range(warmup, warmup + iters):
        tb = time.perf_counter()
        run(qs[offs[it]:offs[it] + b])
        lat.append((time.perf_counter() - tb) * 1e3)
    wall = time.perf_counter() - t0
    return lat, wall


def time_graph(srch, qs, b, k, iters, warmup, dev):
    qh = torch.empty((b, qs.shape[1]), dtype=torch.float32).pin_memory()
    qh.copy_(qs[:b])
    qd = torch.empty((b, qs.shape[1]), dtype=torch.float32, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture (cuBLAS workspaces, topk kernels)
        for _ in range(3):
            qd.copy_(qh, non_blocking=True)
            v, i = srch.scores_topk(qd, k)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    ih = torch.empty((b, k), dtype=torch.int64).pin_memory()
    vh = torch.empty((b, k), dtype=torch.float32).pin_memory()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        qd.copy_(qh, non_blocking=True)
        v, i = srch.scores_topk(qd, k)
        ih.copy_(i, non_blocking=True)
        vh.copy_(v, non_blocking=True)
    nq = qs.shape[0]
    stream = torch.cuda.current_stream()
    for it in range(warmup):
        g.replay()
    stream.synchronize()
    lat, dev_ms = [], []
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    for it in range(iters):
        off = (it * b) % nq
        off = off if off + b <= nq else 0
        tb = time.perf_counter()
        qh.copy_(qs[off:off + b])  # host memcpy into the graph's pinned input
        e0.record(stream)
        g.replay()
        e1.record(stream)
        stream.synchronize()
        lat.append((time.perf_counter() - tb) * 1e3)
        dev_ms.append(e0.elapsed_time(e1))
    wall = time.perf_counter() - t0
    _ = (ih.numpy(), vh.numpy())  # results are on the host now
    del g
    return lat, wall, dev_ms


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", help="HDF5 corpus (/train, /test); omit with --generated")
    ap.add_argument("--generated", action="store_true", help="generated corpus (same as bench_search)")
    ap.add_argument("-N", "--rows", default="1M", help="generated: total rows, comma list")
    ap.add_argument("-d", "--dim", default="768", help="generated: dims, comma list")
    ap.add_argument("-k", "--k", default="100", help="K list")
    ap.add_argument("-B", "--batches", default="1,64", help="batch list")
    ap.add_argument("-t", "--dtype", default="float32", help="storage dtypes, comma list (float32, float16, bfloat16)")
    ap.add_argument("-m", "--metric", default="inner_product", help="generated: inner_product | cosine | l2")
    ap.add_argument("-n", "--iters", type=int, default=None, help="timed batches per configuration")
    ap.add_argument("-w", "--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--graph", type=int, default=1, help="also time a CUDA-graph version (0|1)")
    ap.add_argument("--queries", type=int, default=1000, help="HDF5: queries from /test")
    ap.add_argument("-J", "--json", default="-", help="append JSON lines to FILE ('-': stdout)")
    ap.add_argument("--tag", default="")
    ap.add_argument("--upcast", type=int, default=0,
                    help="1: convert the [B, N] scores to float32 before topk")
    a = ap.parse_args()
    if not a.generated and not a.file:
        ap.error("give an HDF5 FILE or --generated")
    dev = torch.device("cuda:0")
    out = sys.stdout if a.json == "-" else open(a.json, "a")
    bw = copy_bandwidth(dev)
    gpu = torch.cuda.get_device_name(0)
    ks, bs = counts(a.k), counts(a.batches)
    dtypes = a.dtype.split(",")
    bad = 0

    def corpora():
        if a.generated:
            for n in counts(a.rows):
                for d in counts(a.dim):
                    for dt in dtypes:
                        t0 = time.perf_counter()
                        xb = gen_corpus.torch_rows(a.seed, 0, n, d, dev, getattr(torch, dt), normalize=a.metric == "cosine")
                        norms = None
                        if a.metric == "l2":
                            norms = torch.empty(n, dtype=torch.float32, device=dev)
                            for r0 in range(0, n, 1 << 20):
                                x = xb[r0:r0 + (1 << 20)].float()
                                norms[r0:r0 + x.shape[0]] = (x * x).sum(1)
                        torch.cuda.synchronize()
                        gen_s = time.perf_counter() - t0
                        pool = max(2 * max(bs), 64)
                        xq = gen_corpus.numpy_rows(a.seed + 1, 0, pool, d)
                        yield dict(rows_total=n, dim=d, dtype=dt, metric=a.metric, gen_s=gen_s, corpus="generated"), \
                            xb, norms, xq
                        del xb, norms
                        torch.cuda.empty_cache()
        else:
            import h5py
            with h5py.File(a.file, "r") as f:
                xb_np = np.asarray(f["train"][:], dtype="float32")
                xq = np.asarray(f["test"][: a.queries], dtype="float32")
                dist = f.attrs.get("distance", "")
                dist = dist.decode() if isinstance(dist, bytes) else dist
            metric = {"euclidean": "l2", "angular": "cosine"}.get(dist, "inner_product")
            for dt in dtypes:
                xb = torch.from_numpy(xb_np).to(dev)
                if metric == "cosine":
                    xb = torch.nn.functional.normalize(xb, dim=1)
                norms = (xb * xb).sum(1) if metric == "l2" else None
                xb = xb.to(getattr(torch, dt))
                yield dict(rows_total=xb_np.shape[0], dim=xb_np.shape[1], dtype=dt, metric=metric,
                           corpus=os.path.basename(a.file), file=os.path.basename(a.file)), xb, norms, xq

    for info, xb, norms, xq in corpora():
        srch = Searcher(xb, info["metric"], norms, bool(a.upcast))
        qs = torch.from_numpy(np.ascontiguousarray(xq)).pin_memory()
        floor_ms = xb.numel() * xb.element_size() / bw * 1e3
        for k in ks:
            for b in bs:
                if k > info["rows_total"] or b > qs.shape[0]:
                    continue
                iters = a.iters or max(10, (qs.shape[0] // b))
                base = dict(info, impl="torch", ranks=1, np=1, k=k, batch=b, iters=iters, query_rounded=xb.dtype != torch.float32,
                            copy_bw_GBps=bw / 1e9, floor_ms=floor_ms, floor_ms_batch1=floor_ms, torch=torch.__version__,
                            gpu=gpu, device=gpu, tag=a.tag)
                modes = ["eager"] + (["graph"] if a.graph else [])
                for mode in modes:
                    rec = dict(base, mode=mode)
                    try:
                        if mode == "eager":
                            lat, wall = time_eager(srch, qs, b, k, iters, a.warmup, dev)
                            dev_ms = []
                        else:
                            lat, wall, dev_ms = time_graph(srch, qs, b, k, iters, a.warmup, dev)
                        n = b * len(lat)
                        rec.update(queries=n, qps=n / wall, p50_ms=pct(lat, 50), p99_ms=pct(lat, 99),
                                   batch_ms_p50=pct(lat, 50), batch_ms_p99=pct(lat, 99),
                                   dev_p50_ms=pct(dev_ms, 50), frac_floor_h2h=floor_ms / pct(lat, 50),
                                   tflops_h2h=2.0 * b * info["rows_total"] * info["dim"] / (pct(lat, 50) * 1e-3) / 1e12)
                    except torch.cuda.OutOfMemoryError as e:
                        rec.update(error=f"out of memory: {str(e).splitlines()[0]}")
                        torch.cuda.empty_cache()
                    except RuntimeError as e:  # e.g. graph capture refused: say so, keep going
                        rec.update(error=str(e).splitlines()[0])
                        bad += 1
                    print(json.dumps(rec), file=out, flush=True)
        del srch, xb, norms, qs  # free this corpus before the next one is made
        torch.cuda.empty_cache()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
