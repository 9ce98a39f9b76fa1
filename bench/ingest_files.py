#!/usr/bin/python3
"""Writes the corpora ingest_bench reads (h5py, Debian's python3-h5py): OUT/f32.h5 and OUT/f16.h5
(N x D contiguous, standard normal) and OUT/f32_gz.h5, OUT/f16_gz.h5 (N_GZ x D, chunks of 1024
rows, shuffle + deflate level 1). About 4.9 GB for the defaults; files, not commits.

    /usr/bin/python3 bench/ingest_files.py [OUT=/tmp/ingest] [N=1000000] [D=768] [N_GZ=200000]
    build/bench/ingest_bench -f /tmp/ingest/f16.h5 -t 2 --blocks
"""
import os
import sys

import h5py
import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ingest"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
d = int(sys.argv[3]) if len(sys.argv) > 3 else 768
n_gz = int(sys.argv[4]) if len(sys.argv) > 4 else 200_000
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(1)
step = 100_000
for dt, name, rows, gz in ((np.float32, "f32.h5", n, False), (np.float16, "f16.h5", n, False),
                           (np.float32, "f32_gz.h5", n_gz, True), (np.float16, "f16_gz.h5", n_gz, True)):
    with h5py.File(os.path.join(out, name), "w") as f:
        kw = dict(chunks=(min(1024, rows), d), compression="gzip", compression_opts=1, shuffle=True) if gz else {}
        ds = f.create_dataset("train", (rows, d), dtype=dt, **kw)
        for lo in range(0, rows, step):
            hi = min(rows, lo + step)
            ds[lo:hi] = rng.standard_normal((hi - lo, d), dtype=np.float32).astype(dt)
    print(os.path.join(out, name))
