#!/usr/bin/env bash
# CPU path vs FAISS's exact CPU index, side by side on the same machine and data.
#
#   bench/cpu_vs_faiss.sh DATA.h5 [DATA2.h5 ...]
#
# For each file: shardtopk `search` at batch 1 and 64, K=100, with -np 1, 2 and 4 (threads per
# rank = cores ÷ ranks, at least 1), then FAISS IndexFlatL2/IndexFlatIP (Debian python3-faiss)
# with all cores as OpenMP threads and OpenBLAS threads. Every configuration is one JSON line in
# $OUT_DIR/cpu_vs_faiss.jsonl (default results/); a table is printed last.
# Environment: QUERIES (default 640 per configuration), KS (default 100), NPS (default "1 2 4"),
# SHARDTOPK_BIN (default build/shardtopk), OPENBLAS_CORETYPE (passed through to FAISS only).
set -euo pipefail
BIN=${SHARDTOPK_BIN:-build/shardtopk}
OUT_DIR=${OUT_DIR:-results}
QUERIES=${QUERIES:-640}
K=${KS:-100}
NPS=${NPS:-"1 2 4"}
CORES=$(nproc)
mkdir -p "$OUT_DIR"
JL="$OUT_DIR/cpu_vs_faiss.jsonl"
: > "$JL"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
[ -x "$BIN" ] || { echo "error: $BIN not built (cmake --build build)" >&2; exit 1; }
[ $# -ge 1 ] || { echo "usage: $0 DATA.h5 [...]" >&2; exit 2; }

for data in "$@"; do
  cfg=$(mktemp --suffix=.yaml)
  printf 'corpus:\n  path: %s\nsearch:\n  k_max: %s\n  batch_max: 64\nengine:\n  backend: cpu\n' "$data" "$K" > "$cfg"
  for np in $NPS; do
    threads=$(( CORES / np )); [ "$threads" -ge 1 ] || threads=1
    for b in 1 64; do
      tj=$(mktemp --suffix=.json)
      mpirun --oversubscribe --bind-to none -np "$np" "$BIN" search -c "$cfg" -q "$data" -k "$K" --batch "$b" \
        --max-queries "$QUERIES" --set engine.threads="$threads" --timings-json "$tj" >/dev/null 2>"$tj.log" ||
        { cat "$tj.log" >&2; exit 1; }
      /usr/bin/python3 - "$tj" "$data" "$np" "$threads" >> "$JL" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[1]))
j.update(impl="shardtopk", file=os.path.basename(sys.argv[2]), np=int(sys.argv[3]), threads_per_rank=int(sys.argv[4]),
         simd=("avx2+fma" if "avx2" in open("/proc/cpuinfo").read() else "portable"))
print(json.dumps(j))
PY
      tail -n 1 "$JL"
      rm -f "$tj" "$tj.log"
    done
  done
  OMP_NUM_THREADS=$CORES OPENBLAS_NUM_THREADS=$CORES /usr/bin/python3 "$(dirname "$0")/faiss_baseline.py" "$data" \
    --k "$K" --batches 1,64 --queries "$QUERIES" --threads "$CORES" | sed 's/"impl": "faiss"/"impl": "faiss", "np": 1/' | tee -a "$JL"
  rm -f "$cfg"
done

echo
/usr/bin/python3 - "$JL" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'file':<34} {'impl':<10} {'np':>3} {'thr/rank':>8} {'batch':>5} {'QPS':>9} {'p50 ms':>9} {'p99 ms':>9} {'ingest s':>9}  blas")
for r in rows:
    thr = r.get("threads_per_rank", r.get("faiss_omp_threads", ""))
    print(f"{r['file']:<34} {r['impl']:<10} {r.get('np', 1):>3} {thr:>8} {r['batch']:>5} {r['qps']:>9.1f} "
          f"{r['batch_ms_p50']:>9.2f} {r['batch_ms_p99']:>9.2f} {r.get('ingest_s', r.get('add_s', 0)):>9.2f}  "
          f"{r.get('blas_core', '')}")
PY
