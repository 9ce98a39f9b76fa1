#!/usr/bin/env bash
# The sample data the walkthroughs use (docs/TUTORIAL.md, docs/FILTERS.md, docs/SERVING.md,
# docs/PYTHON.md), written into data/sample/ (replaced when it exists):
#   corpus.h5   train [2000, 4] float32 (seed 7) with per-row attributes: tenant int64 0..9,
#               meta/year int64 2015..2025, meta/price float64; the config is configs/sample.yaml
#   q.f32       2 queries [2, 4] little-endian float32, no header: a binary /v1/search body
#   q.json      the same 2 queries as a JSON /v1/search body, k = 5
#   rows.bin    a binary /v1/upsert?n=2 body: ids 9003 and 9004 (int64), 2 x 4 float32 rows, then
#               the attribute columns in configs/sample.yaml's order: tenant and year (int64 each),
#               price (float64)
# and removes data/sample/storage (the write-ahead log of configs/sample.yaml), so the update
# walkthrough starts from the corpus. Needs numpy and h5py in the interpreter of
# launch/python.sh (launch/setup.sh installs them: python3-numpy, python3-h5py).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=data/sample
mkdir -p "$OUT"
rm -rf "$OUT/storage"
launch/python.sh - "$OUT" <<'PY'
import json, os, sys
try:
    import h5py, numpy as np
except ImportError as e:
    sys.exit(f"sample_data.sh: {e} in {sys.executable}: apt-get install python3-numpy python3-h5py "
             f"(or '{sys.executable} -m pip install numpy h5py')")
out = sys.argv[1]
n, d = 2000, 4
rng = np.random.default_rng(7)
train = rng.standard_normal((n, d), dtype=np.float32)
with h5py.File(os.path.join(out, "corpus.h5"), "w") as f:
    f["train"] = train
    f["tenant"] = rng.integers(0, 10, n).astype(np.int64)
    f["meta/year"] = rng.integers(2015, 2026, n).astype(np.int64)
    f["meta/price"] = np.round(rng.uniform(1, 100, n), 2)
q = np.array([[0.1, 0.2, 0.3, 0.4], [-0.5, 0.0, 0.5, 1.0]], dtype="<f4")
q.tofile(os.path.join(out, "q.f32"))
with open(os.path.join(out, "q.json"), "w") as f:
    json.dump({"queries": q.tolist(), "k": 5}, f)
ids = np.array([9003, 9004], dtype="<i8")
rows = np.array([[0.3, 0.1, 0.0, 0.2], [0.9, 0.9, 0.9, 0.9]], dtype="<f4")
tenant = np.array([7, 7], dtype="<i8")
year = np.array([2024, 2025], dtype="<i8")
price = np.array([19.5, 42.0], dtype="<f8")
with open(os.path.join(out, "rows.bin"), "wb") as f:
    for a in (ids, rows, tenant, year, price):
        f.write(a.tobytes())
print(f"sample data in {out}/: corpus.h5 (train [{n}, {d}]; tenant, meta/year, meta/price), q.f32, q.json, rows.bin")
PY
