#!/usr/bin/env bash
# `shardtopk knn-graph` against a chunked PyTorch loop (mm + topk) on one GPU, in one call:
# writes a generated float16 corpus (bench_write_corpus, seed 1), runs knn-graph under
# mpirun -np NP, then bench/torch_knn_graph.py times PyTorch on the same corpus (made on the
# GPU by the same generator, bit-identical) and checks a sample of both answers against float64.
# Prints JSON lines (OUTDIR/knn_graph.jsonl) and a table with the ratio; exit 1 when a shardtopk
# list is wrong or a step fails. Builds shardtopk and bench_write_corpus in BUILD_DIR when missing.
#
# usage: bench/knn_graph_gpu.sh [OUTDIR]         (default ./results/knn_graph)
# env:   ROWS=1000000 DIM=768 K=10 METRIC=inner_product|l2 NP=1
#        BATCH=1024         knn-graph --batch; a list ("256,1024") runs each, and their files must
#                           be identical byte for byte
#        CHECK=200          sampled rows checked against float64
#        TORCH_CHUNKS=auto  PyTorch chunk sizes (comma-separated; 0: no PyTorch run;
#                           auto: 1024 and the largest whose float16 scores fit in 8 GiB)
#        EXCLUDE_SELF=0|1   knn-graph --exclude-self (PyTorch always includes the row itself)
#        CORPUS_ONLY=1      build and write the corpus, then stop (a first call before a long graph)
#        RESUME=1           no --overwrite: a graph file left by a call cut at its time limit is
#                           continued (its timings then cover the remaining rows: start_row > 0)
#        BUILD_DIR=build-gpu  PYTHON=python3
#        BACKEND=cuda       engine.backend (cpu: a trial of the script on a small corpus; DEVICE=cpu
#                           for the PyTorch side then)
# 1M x 768: about a minute after the build. 10M x 768 (a 15 GB corpus file; PyTorch's loop would
# take longer than the call), in two calls on one warm machine:
#   ROWS=10000000 CORPUS_ONLY=1 bench/knn_graph_gpu.sh; ROWS=10000000 TORCH_CHUNKS=0 bench/knn_graph_gpu.sh
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUTDIR=${1:-./results/knn_graph}
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)
ROWS=${ROWS:-1000000} DIM=${DIM:-768} K=${K:-10} METRIC=${METRIC:-inner_product} BATCH=${BATCH:-1024}
NP=${NP:-1} CHECK=${CHECK:-200} TORCH_CHUNKS=${TORCH_CHUNKS:-auto} EXCLUDE_SELF=${EXCLUDE_SELF:-0}
BUILD=${BUILD_DIR:-build-gpu} PY=${PYTHON:-python3} BACKEND=${BACKEND:-cuda} DEVICE=${DEVICE:-cuda}
export NCCL_NVLS_ENABLE=0
T0=$(date +%s)
log() { echo "[knn_graph_gpu +$(( $(date +%s) - T0 ))s] $*"; }
die() { log "FAIL: $*"; exit 1; }

if [[ ! -x "$BUILD/shardtopk" || ! -x "$BUILD/bench/bench_write_corpus" || ! -x "$BUILD/bench/bench_graph_rows" ]]; then
  # As bench/gpu_run.sh configures it (header-only fallbacks from .vendor/, bench/pack_vendor.sh).
  [[ -f "$BUILD/build.ninja" ]] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDTOPK_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90} -DSHARDTOPK_VENDOR_DIR="$PWD/.vendor/include" \
    > "$OUTDIR/configure.log" 2>&1 || die "configure ($OUTDIR/configure.log)"
  log "building shardtopk, bench_write_corpus and bench_graph_rows in $BUILD"
  cmake --build "$BUILD" -j "$(nproc)" --target shardtopk bench_write_corpus bench_graph_rows > "$OUTDIR/build.log" 2>&1 \
    || die "build ($OUTDIR/build.log)"
fi

CORPUS=$OUTDIR/corpus-${ROWS}x${DIM}-f16.h5
distance=dot; [[ "$METRIC" == l2 ]] && distance=euclidean
if [[ ! -s "$CORPUS" ]]; then
  log "writing $CORPUS"
  "$BUILD/bench/bench_write_corpus" -o "$CORPUS.tmp" -N "$ROWS" -d "$DIM" -t float16 -q 0 --seed 1 \
    --distance "$distance" 2>&1 | tail -1 && mv "$CORPUS.tmp" "$CORPUS" || die "bench_write_corpus"
fi
[[ "${CORPUS_ONLY:-0}" == 1 ]] && { log "corpus written: $CORPUS"; exit 0; }
CFG=$OUTDIR/knn_graph.yaml
cat > "$CFG" <<EOF
corpus:
  path: $CORPUS
search:
  metric: $METRIC
engine:
  backend: $BACKEND
  dtype: float16
EOF
# One knn-graph run per batch size; the files must be identical byte for byte (the answer does
# not depend on the batch), so the first one is checked against float64.
GRAPH=
OURS=()
for b in ${BATCH//,/ }; do
  g=$OUTDIR/graph-${ROWS}x${DIM}-k${K}-b$b.h5
  flags=(-c "$CFG" -k "$K" -o "$g" --batch "$b" --timings-json "$OUTDIR/ours-b$b.json")
  [[ "${RESUME:-0}" == 1 ]] || flags+=(--overwrite)
  [[ "$EXCLUDE_SELF" == 1 ]] && flags+=(--exclude-self)
  log "knn-graph: mpirun -np $NP shardtopk knn-graph ${flags[*]}"
  t=$(date +%s%N)
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$NP" "$BUILD/shardtopk" knn-graph "${flags[@]}" 2>&1 \
    | tee "$OUTDIR/knn_graph-b$b.log" | grep -E "knn-graph|error" ; rc=${PIPESTATUS[0]}
  wall=$(( ($(date +%s%N) - t) / 1000000 ))  # ms
  [[ $rc -eq 0 ]] || die "knn-graph exit $rc ($OUTDIR/knn_graph-b$b.log)"
  OURS+=("$OUTDIR/ours-b$b.json:$wall")
  if [[ -z "$GRAPH" ]]; then GRAPH=$g; else
    cmp -s "$GRAPH" "$g" || die "the graph of batch $b differs from $(basename "$GRAPH")"
    rm -f "$g"
  fi
done

pyflags=(--rows "$ROWS" --dim "$DIM" -k "$K" --metric "$METRIC" --graph "$GRAPH" --check "$CHECK" --chunks "$TORCH_CHUNKS"
         --graph-rows "$BUILD/bench/bench_graph_rows" --device "$DEVICE")
[[ "$EXCLUDE_SELF" == 1 ]] && pyflags+=(--exclude-self)
log "PyTorch and the float64 check: $PY bench/torch_knn_graph.py ${pyflags[*]}"
"$PY" bench/torch_knn_graph.py "${pyflags[@]}" > "$OUTDIR/check.jsonl"; prc=$?
[[ -s "$OUTDIR/check.jsonl" ]] || die "torch_knn_graph.py exit $prc, no records"
"$PY" - "$OUTDIR/check.jsonl" "$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" "${OURS[@]}" \
  > "$OUTDIR/knn_graph.jsonl" <<'EOF'
import datetime, json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
stamp = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "commit": sys.argv[2]}
out = []
for r in recs:
    if r["name"] != "shardtopk":
        out.append(r)
        continue
    for arg in sys.argv[3:]:  # one record per batch size, each with the check of the (identical) file
        path, wall_ms = arg.rsplit(":", 1)
        ours = json.load(open(path))
        out.append(dict(r, seconds=ours["search_s"], rows_per_s=ours["rows_per_s"], wall_s=float(wall_ms) / 1e3,
                        ingest_s=ours["ingest_s"], batch=ours["batch"], world_size=ours["world_size"]))
for r in out:
    r.update(stamp)
    print(json.dumps(r))
EOF
"$PY" - "$OUTDIR/knn_graph.jsonl" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ours_runs = [r for r in recs if r["name"] == "shardtopk"]
torch_runs = [r for r in recs if r["name"] == "torch"]
r0 = recs[0]
print(f"# knn-graph {r0['rows']} x {r0['dim']} float16, {r0['metric']}, k={r0['k']}, {r0['gpu']}, {r0['date']} {r0['commit']}")
print(f"# {'name':<22} {'s':>9} {'rows/s':>11} {'#wrong':>7} {'ids':>7} {'exact':>7} {'swaps':>6} {'wall s':>7}")
print(f"# {'':<22} {'(graph)':>9} {'':>11} {'(of ' + str(r0['checked']) + ')':>7} {'wrong':>7}")
for r in ours_runs + torch_runs:
    name = f"shardtopk np{r['world_size']} b{r['batch']}" if r["name"] == "shardtopk" else f"torch mm+topk c{r['chunk']}"
    wall = f"{r['wall_s']:>7.1f}" if "wall_s" in r else ""
    print(f"  {name:<22} {r['seconds']:>9.2f} {r['rows_per_s']:>11.0f} {r['wrong']:>7} {r['id_wrong']:>7} {r['exact_lists']:>7} "
          f"{r['near_tie_swaps']:>6} {wall}")
print("(#wrong: lists failing the float64 check, ids or scores; ids wrong: by their ids alone; exact: lists equal "
      "to the float64 order; shardtopk wall: start-up, ingest, graph and file; s: the graph alone, as PyTorch's)")
if ours_runs and ours_runs[0]["wrong"]:
    print("first wrong shardtopk list:", json.dumps(ours_runs[0]["first_wrong"]))
if ours_runs and torch_runs:
    best = min(torch_runs, key=lambda r: r["seconds"])
    ours = min(ours_runs, key=lambda r: r["seconds"])
    print(f"PyTorch best (chunk {best['chunk']}) / shardtopk best (batch {ours['batch']}): "
          f"{best['seconds'] / ours['seconds']:.2f}x")
EOF
[[ $prc -eq 0 ]] || die "torch_knn_graph.py exit $prc (a wrong shardtopk list, or an error: $OUTDIR/check.jsonl)"
log "done: $OUTDIR/knn_graph.jsonl"
