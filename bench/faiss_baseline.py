#!/usr/bin/env python3
"""FAISS exact CPU baseline (IndexFlatL2 / IndexFlatIP) on an ann-benchmarks HDF5 file.

Prints one JSON line per configuration (batch size), measured like `shardtopk search`:
queries are searched in consecutive batches of B, QPS = queries / wall time of all batches,
and per-batch latency p50/p99 in ms. Run it with Debian's own python3 (python3-faiss,
OpenBLAS from libopenblas0-pthread). The JSON names the BLAS build and core type in use and
the thread counts (OpenMP for FAISS, pthreads for OpenBLAS).
"""
import argparse
import ctypes
import json
import os
import sys
import time

import h5py
import numpy as np


def blas_info():
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_config.restype = ctypes.c_char_p
        lib.openblas_get_corename.restype = ctypes.c_char_p
        lib.openblas_get_num_threads.restype = ctypes.c_int
        return {
            "blas": lib.openblas_get_config().decode(),
            "blas_core": lib.openblas_get_corename().decode(),
            "blas_threads": lib.openblas_get_num_threads(),
        }
    except OSError:
        return {"blas": "unknown (libopenblas.so.0 not loadable)"}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("file", help="HDF5 with train/test (ann-benchmarks layout)")
    ap.add_argument("--metric", choices=["l2", "inner_product", "cosine"], default=None,
                    help="default: from the file's distance attribute")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--batches", default="1,64", help="comma-separated batch sizes")
    ap.add_argument("--queries", type=int, default=640, help="queries per configuration")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--truth", action="store_true", help="check ids against the file's neighbors")
    a = ap.parse_args()

    import faiss  # imported after OPENBLAS_* / OMP_* are set by the caller

    faiss.omp_set_num_threads(a.threads)
    with h5py.File(a.file, "r") as f:
        xb = np.ascontiguousarray(f["train"][:], dtype="float32")
        xq = np.ascontiguousarray(f["test"][: a.queries], dtype="float32")
        dist = f.attrs.get("distance", "")
        if isinstance(dist, bytes):
            dist = dist.decode()
    metric = a.metric or {"euclidean": "l2", "angular": "cosine"}.get(dist, "inner_product")
    if metric == "cosine":
        xb /= np.linalg.norm(xb, axis=1, keepdims=True)
        xq /= np.linalg.norm(xq, axis=1, keepdims=True)
    t0 = time.perf_counter()
    index = faiss.IndexFlatL2(xb.shape[1]) if metric == "l2" else faiss.IndexFlatIP(xb.shape[1])
    index.add(xb)
    build_s = time.perf_counter() - t0
    info = blas_info()
    rows = []
    for b in [int(x) for x in a.batches.split(",")]:
        index.search(xq[: min(b, len(xq))], a.k)  # warm-up
        lat = []
        t0 = time.perf_counter()
        for s in range(0, len(xq), b):
            tb = time.perf_counter()
            index.search(xq[s:s + b], a.k)
            lat.append((time.perf_counter() - tb) * 1e3)
        wall = time.perf_counter() - t0
        rec = {"impl": "faiss", "index": type(index).__name__, "file": os.path.basename(a.file),
               "rows": int(xb.shape[0]), "dim": int(xb.shape[1]), "metric": metric, "k": a.k, "batch": b,
               "queries": int(len(xq)), "qps": len(xq) / wall, "batch_ms_p50": float(np.percentile(lat, 50)),
               "batch_ms_p99": float(np.percentile(lat, 99)), "faiss_omp_threads": a.threads,
               "faiss_version": faiss.__version__, "add_s": build_s, **info}
        rows.append(rec)
        print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
