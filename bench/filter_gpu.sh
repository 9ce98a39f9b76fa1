#!/usr/bin/env bash
# Filtered search on one GPU, in one call: builds the filter kernels' tests and bench_filter,
# runs the tests (kernels against the float64 oracle and the host evaluator, the filtered-search
# oracle suite on one rank), then bench_filter's target table (docs/PERFORMANCE.md, "Filtered
# search") and the dense/gathered sweep that sets the filtered scan's crossover. Logs and JSON
# lines go to OUTDIR; the last lines printed are the tables.
#
# usage: bench/filter_gpu.sh OUTDIR
# env:   STAGES (build,tests,bench,sweep)  N (10M)  ITERS (30)  BUILD_DIR (build-filter)
#        TESTS (the kernel suites run; test_filtered_search always)  CHECK (1: bench_filter checks
#        its sampled answers against float64, about 2 minutes at 10M rows on 16 cores)
#        VENDOR (.vendor/include of this tree: bench/pack_vendor.sh)  TESTS_TIMEOUT (120 s)
#        PACK_TO: also copy the JSON lines, the bench log and a tarball of OUTDIR there on exit
#        (the device machine returns at most 8 files)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUTDIR=${1:?usage: bench/filter_gpu.sh OUTDIR}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
STAGES=${STAGES:-build,tests,bench,sweep}
stage() { [[ ",$STAGES," == *",$1,"* ]]; }
BUILD=${BUILD_DIR:-$ROOT/build-filter}
VENDOR=${VENDOR:-$ROOT/.vendor/include}
N=${N:-10M} ITERS=${ITERS:-30}
t0=$(date +%s)
log() { echo "[filter_gpu $(( $(date +%s) - t0 )) s] $*"; }
status=0
pack() {
  [[ -n "${PACK_TO:-}" ]] || return 0
  mkdir -p "$PACK_TO"
  for f in filter_speed.jsonl filter_sweep.jsonl bench.log; do [[ -f "$OUTDIR/$f" ]] && cp "$OUTDIR/$f" "$PACK_TO/"; done
  tar czf "$PACK_TO/filter_gpu_logs.tgz" -C "$OUTDIR" . 2>/dev/null || true
}
trap pack EXIT
GIT=${GIT_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}

if stage build; then
  if [[ ! -f "$BUILD/build.ninja" ]]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDTOPK_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DSHARDTOPK_VENDOR_DIR="$VENDOR" >"$OUTDIR/configure.log" 2>&1 ||
      { log "configure failed"; tail -30 "$OUTDIR/configure.log"; exit 1; }
  fi
  cmake --build "$BUILD" -j "$(nproc)" --target test_filter_blocks test_filtered_scan test_filtered_batches \
    test_filtered_search test_scan_select test_batched test_column_order test_gathered_scores bench_filter >"$OUTDIR/build.log" 2>&1 ||
    { log "build failed"; grep -E "error|FAILED" "$OUTDIR/build.log" | head -40; exit 1; }
  log "built"
fi

bin() { find "$BUILD" -type f -name "$1" -perm -u+x | head -1; }

if stage tests; then
  T=${TESTS_TIMEOUT:-120}
  for t in ${TESTS:-test_column_order test_gathered_scores test_filter_blocks test_filtered_scan test_filtered_batches test_scan_select test_batched}; do
    timeout -k 10 "$T" mpirun --allow-run-as-root -np 1 "$(bin $t)" >"$OUTDIR/$t.log" 2>&1
    rc=$?
    log "$t: rc $rc, $(grep -c '^\[       OK \]' "$OUTDIR/$t.log") ok, $(grep -c '^\[  FAILED  \]' "$OUTDIR/$t.log") failed lines"
    [[ $rc -eq 0 ]] || { status=1; grep -E "Failure|FAILED|error" "$OUTDIR/$t.log" | head -20; }
  done
  SHARDTOPK_TEST_ENGINE=cuda timeout -k 10 "$T" mpirun --allow-run-as-root -np 1 "$(bin test_filtered_search)" \
    >"$OUTDIR/test_filtered_search.log" 2>&1
  rc=$?
  log "test_filtered_search (cuda, np 1): rc $rc, $(grep -c '^\[       OK \]' "$OUTDIR/test_filtered_search.log") ok"
  [[ $rc -eq 0 ]] || { status=1; grep -E "Failure|FAILED" "$OUTDIR/test_filtered_search.log" | head -20; }
fi

BF=$(bin bench_filter)
if stage bench; then
  mpirun --allow-run-as-root -np 1 "$BF" -N "$N" -d 768 -k 100 -t float16 -B 1,256 --selectivities 1,10,50,100 \
    --batched-selectivities 10 --shared-selectivities 10 --ids-in 100000 -n "$ITERS" -w 5 -c "${CHECK:-1}" --check-queries 4 \
    --git "$GIT" -J "$OUTDIR/filter_speed.jsonl" >"$OUTDIR/bench.log" 2>&1 || status=1
  log "bench_filter done"
fi

if stage sweep; then
  # The filtered scan's crossover: each scan forced, scattered (rows spread over every block) and
  # clustered; same bits either way (tests), so unchecked.
  for path in dense gathered; do
    mpirun --allow-run-as-root -np 1 "$BF" -N "$N" -d 768 -k 100 -t float16 -B 1 --layouts scattered,clustered \
      --selectivities 1,5,10,25,50,75 -n 15 -w 3 -c 0 --set engine.filter_scan=$path --tag "sweep-$path" \
      --git "$GIT" -J "$OUTDIR/filter_sweep.jsonl" >"$OUTDIR/sweep_$path.log" 2>&1 || status=1
  done
  log "sweep done"
fi

stage bench && cat "$OUTDIR/bench.log"
if stage sweep; then
  python3 - "$OUTDIR/filter_sweep.jsonl" <<'EOF'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["layout"] == "none":
        continue
    rows.setdefault((r["layout"], r["selectivity_pct"]), {})[r["filter_scan"]] = r["time_ratio_p50"]
print("# filtered scan sweep (time / unfiltered, p50): layout, selectivity, dense, gathered")
for (lay, sel), v in sorted(rows.items()):
    print("%10s %6.1f %8.3f %8.3f" % (lay, sel, v.get("dense", float("nan")), v.get("gathered", float("nan"))))
EOF
fi
log "status $status"
exit $status
