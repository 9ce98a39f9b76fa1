#!/usr/bin/env python3
"""The k-NN graph baseline and check for bench/knn_graph_gpu.sh, on one GPU.

1. Makes the corpus bench_write_corpus wrote (bench/gen_corpus.py: the same generator, float16
   rounded to nearest even, bit-identical) on the GPU.
2. PyTorch: a chunked loop over the corpus rows, `Q @ C.T` on the storage dtype (float16 in,
   float16 scores, as the one-liner a user writes) then `torch.topk`, the [C, k] answers kept on
   the device and copied to the host at the end; timed per chunk size (best reported). The
   query is the float16 row itself, so only the scores are rounded (to float16).
3. Checks a seeded sample of rows of shardtopk's graph file (read by bench_graph_rows) and of PyTorch's answers
   against float64 scores over the whole corpus (DESIGN.md "Correctness terms": every id within
   ε of the true k-th, every score within ε of its float64 score, in order within ε, no
   repeats: `wrong` counts the lists that fail any of these, `id_wrong` those whose ids fail);
   counts lists equal to the float64 order (ties: smaller id) and near-tie swaps.

One JSON line per measurement on stdout (name: shardtopk | torch), then nothing else; the
shell script prints the table. Exit 1 when a shardtopk list is wrong.
Metrics: inner_product and l2 (the stored values are the file's, so the check is on them).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_corpus  # noqa: E402


def eps(best, kth):
    return 1e-5 * (torch.maximum(best.abs(), kth.abs()) + 1.0)


def float64_scores(xb, rows, metric, chunk=1 << 20):
    """[S, N] float64 scores of corpus rows `rows` (as queries) against every row."""
    q = xb[rows].double()
    out = torch.empty((len(rows), xb.shape[0]), dtype=torch.float64, device=xb.device)
    for r0 in range(0, xb.shape[0], chunk):
        x = xb[r0:r0 + chunk].double()
        s = q @ x.t()
        if metric == "l2":
            s = (q * q).sum(1, keepdim=True) + (x * x).sum(1)[None, :] - 2.0 * s
        out[:, r0:r0 + chunk] = s
        del x, s
    return out


def check(name, ids, scores, truth, rows, k, metric, exclude_self):
    """ids, scores: [S, k] tensors (cpu) of the sampled rows; truth: [S, N] float64 (cuda)."""
    larger = metric != "l2"
    wrong = id_wrong = exact = swaps = 0
    first_bad = None
    for s, row in enumerate(rows):
        t = truth[s].clone()
        if exclude_self:
            t[row] = -float("inf") if larger else float("inf")
        # The float64 order: score, then the smaller id (exact sort of a few more than k).
        top_v, top_i = torch.topk(t, min(k + 16, t.shape[0]), largest=larger)
        cand = sorted(zip(top_v.tolist(), top_i.tolist()), key=lambda c: (-c[0] if larger else c[0], c[1]))
        true_ids = [c[1] for c in cand[:k]]
        true_v = [c[0] for c in cand[:k]]
        best, kth = torch.tensor(true_v[0]), torch.tensor(true_v[-1])
        e = eps(best, kth).item()
        got = ids[s].tolist()
        gs = scores[s].double().tolist()
        ok = len(set(got)) == k and all(0 <= g < t.shape[0] for g in got)
        ids_ok = ok
        if ok:
            tv = truth[s][torch.tensor(got, device=truth.device)].tolist()
            for j in range(k):
                hit = tv[j] >= true_v[-1] - e if larger else tv[j] <= true_v[-1] + e
                ids_ok = ids_ok and hit
                ok = ok and hit and abs(gs[j] - tv[j]) <= e
                if j > 0:
                    ok = ok and (gs[j] <= gs[j - 1] + e if larger else gs[j] >= gs[j - 1] - e)
                if got[j] != true_ids[j] and abs(tv[j] - true_v[j]) <= e:
                    swaps += 1
        exact += int(got == true_ids)
        id_wrong += int(not ids_ok)
        if not ok:
            wrong += 1
            if first_bad is None:
                first_bad = {"row": int(row), "got": got, "got_scores": gs, "float64_ids": true_ids,
                             "float64_scores": true_v}
    return {"checked": len(rows), "wrong": wrong, "id_wrong": id_wrong, "exact_lists": exact, "near_tie_swaps": swaps,
            "first_wrong": first_bad}


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def torch_graph(xb, metric, k, chunk, norms):
    n = xb.shape[0]
    ids = torch.empty((n, k), dtype=torch.int64, device=xb.device)
    vals = torch.empty((n, k), dtype=torch.float32, device=xb.device)

    def step(r0):
        q = xb[r0:r0 + chunk]
        s = q @ xb.t()
        if metric == "l2":
            s = norms[None, :] - 2.0 * s.float()  # |q|^2 is the same along a row: left out
            v, i = torch.topk(s, k, dim=1, largest=False)
            v = v + norms[r0:r0 + chunk, None]
        else:
            v, i = torch.topk(s, k, dim=1)
        ids[r0:r0 + q.shape[0]] = i
        vals[r0:r0 + q.shape[0]] = v.float()

    step(0)  # warm-up: cuBLAS handles and workspaces, topk kernels
    sync(xb.device)
    t0 = time.perf_counter()
    for r0 in range(0, n, chunk):
        step(r0)
    ids_h, vals_h = ids.cpu(), vals.cpu()
    sync(xb.device)
    return time.perf_counter() - t0, ids_h, vals_h


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1, help="bench_write_corpus --seed")
    ap.add_argument("--metric", default="inner_product", choices=["inner_product", "l2"])
    ap.add_argument("--graph", help="shardtopk's knn-graph output to check")
    ap.add_argument("--graph-rows", default="build-gpu/bench/bench_graph_rows",
                    help="the bench_graph_rows binary (reads the graph file's rows)")
    ap.add_argument("--exclude-self", action="store_true", help="the graph was made with --exclude-self")
    ap.add_argument("--check", type=int, default=200, help="sampled rows checked against float64")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a trial run of the script on a small corpus")
    ap.add_argument("--chunks", default="auto",
                    help="PyTorch query chunk sizes to time, comma-separated; 0 or none: no PyTorch run; "
                         "auto: 1024 and the largest power of two whose float16 scores fit in 8 GiB")
    a = ap.parse_args()
    dev = torch.device(a.device)
    xb = gen_corpus.torch_rows(a.seed, 0, a.rows, a.dim, dev, out_dtype=torch.float16)
    norms = (xb.float() ** 2).sum(1) if a.metric == "l2" else None
    g = torch.Generator().manual_seed(12345)
    rows = torch.randperm(a.rows, generator=g)[:min(a.check, a.rows)].sort().values.tolist()
    truth = float64_scores(xb, rows, a.metric) if rows else None
    status = 0
    common = {"rows": a.rows, "dim": a.dim, "k": a.k, "metric": a.metric, "dtype": "float16",
              "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "torch": torch.__version__}

    if a.graph:
        got = json.loads(subprocess.run([a.graph_rows, a.graph] + [str(r) for r in rows], check=True,
                                        capture_output=True, text=True).stdout)
        done = got["rows_done"]
        ids = torch.tensor(got["ids"], dtype=torch.int64)
        sc = torch.tensor(got["scores"], dtype=torch.float32)
        rec = dict(common, name="shardtopk", rows_done=done, exclude_self=a.exclude_self,
                   **check("shardtopk", ids, sc, truth, rows, a.k, a.metric, a.exclude_self))
        if rec["wrong"] > 0 or done != a.rows:
            status = 1
        print(json.dumps(rec), flush=True)

    chunks = []
    if a.chunks == "auto":
        big = 1 << max(8, min(14, ((8 << 30) // (2 * a.rows)).bit_length() - 1))
        chunks = sorted({min(1024, big), big})
    elif a.chunks not in ("0", "none", ""):
        chunks = [int(c) for c in a.chunks.split(",")]
    for c in chunks:
        secs, ids, vals = torch_graph(xb, a.metric, a.k, c, norms)
        rec = dict(common, name="torch", chunk=c, seconds=secs, rows_per_s=a.rows / secs,
                   scores="float16 (mm on float16 in, float16 out)" if a.metric != "l2" else "float32 from float16 mm",
                   **check("torch", ids[rows], vals[rows], truth, rows, a.k, a.metric, False))
        print(json.dumps(rec), flush=True)
        del ids, vals
        torch.cuda.empty_cache()
    return status


if __name__ == "__main__":
    sys.exit(main())
