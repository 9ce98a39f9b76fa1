#!/usr/bin/env python3
"""PyTorch baseline on one GPU: the corpus resident on the device, per batch `torch.mm` (or
`torch.mv` at batch 1) + `torch.topk`, queries copied host->device and results device->host
per batch, as an application that calls PyTorch would do. One JSON line per batch size.

Times with CUDA synchronisation around each batch (host wall clock, like `shardtopk search`),
after a warm-up. l2 uses the norm expansion |x|^2 - 2 q.x (PyTorch's usual route), cosine
normalises both sides once. Also reports the memory-bandwidth floor of one pass over the
corpus at the measured device-to-device copy bandwidth (DESIGN.md "The physical floor").
"""
import argparse
import json
import os
import sys
import time

import h5py
import numpy as np
import torch


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
    return 2 * n * 10 / (s.elapsed_time(e) / 1e3)  # bytes read + written per second


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("file")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    a = ap.parse_args()
    dev = torch.device("cuda:0")
    with h5py.File(a.file, "r") as f:
        xb = np.asarray(f["train"][:], dtype="float32")
        xq = np.asarray(f["test"][: a.queries], dtype="float32")
        dist = f.attrs.get("distance", "")
        dist = dist.decode() if isinstance(dist, bytes) else dist
    metric = {"euclidean": "l2", "angular": "cosine"}.get(dist, "inner_product")
    tdt = getattr(torch, a.dtype)
    xb_t = torch.from_numpy(xb).to(dev)
    if metric == "cosine":
        xb_t = torch.nn.functional.normalize(xb_t, dim=1)
    norms = (xb_t * xb_t).sum(1) if metric == "l2" else None
    xb_t = xb_t.to(tdt)
    bw = copy_bandwidth(dev)
    # one read pass over the corpus at the copy's rate (bytes read + written per second: a read
    # stream runs at about that rate on HBM)
    floor_s = xb_t.numel() * xb_t.element_size() / bw
    for b in [int(x) for x in a.batches.split(",")]:
        def run(q_host):
            q = q_host.to(dev, non_blocking=True)
            if metric == "cosine":
                q = torch.nn.functional.normalize(q, dim=1)
            if q.shape[0] == 1:
                s = torch.mv(xb_t, q[0].to(tdt)).float().unsqueeze(0)
            else:
                s = torch.mm(q.to(tdt), xb_t.t()).float()
            if metric == "l2":
                s = norms.unsqueeze(0) - 2 * s  # + |q|^2 does not change the order
                v, i = torch.topk(s, a.k, dim=1, largest=False)
            else:
                v, i = torch.topk(s, a.k, dim=1)
            return i.cpu(), v.cpu()
        qs = torch.from_numpy(xq).pin_memory()
        for _ in range(5):
            run(qs[:b])
        torch.cuda.synchronize()
        lat = []
        t0 = time.perf_counter()
        n = 0
        for s in range(0, len(xq) - b + 1, b):
            tb = time.perf_counter()
            run(qs[s:s + b])
            lat.append((time.perf_counter() - tb) * 1e3)
            n += b
        wall = time.perf_counter() - t0
        print(json.dumps({"impl": "torch", "file": os.path.basename(a.file), "rows": xb.shape[0], "dim": xb.shape[1],
                          "metric": metric, "dtype": a.dtype, "k": a.k, "batch": b, "queries": n,
                          "qps": n / wall, "batch_ms_p50": float(np.percentile(lat, 50)),
                          "batch_ms_p99": float(np.percentile(lat, 99)), "copy_bw_GBps": bw / 1e9,
                          "floor_ms_batch1": floor_s * 1e3, "torch": torch.__version__,
                          "gpu": torch.cuda.get_device_name(0)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
