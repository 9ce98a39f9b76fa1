#!/usr/bin/env bash
# Everything a GPU machine run needs, in one call: configure + build (CUDA on), the whole CTest
# suite, the GPU test binaries under mpirun -np 1 and -np 2 (one GPU per rank), then the main
# job and benchmarks (placeholders). Writes logs and gtest JSON to OUTDIR and prints a summary
# table last. Exits non-zero when the build or any test fails, or when GPUs are visible but a
# GPU test was skipped (a skip that only says "needs at least 2 ranks" under -np 1 is expected).
#
# usage: bench/gpu_run.sh [OUTDIR]     (default: $OUT when set, else ./results)
# env:   SKIP_CTEST=1         skip the full CTest pass (saves time when only GPU tests matter)
#        GPU_TEST_TIMEOUT=s   per mpirun limit (default 420 s); a hang is killed, not waited for
#        BUILD_DIR            build folder (default build-gpu; configured on first use)
#        FM_MAX_QUERIES       Fashion-MNIST queries imported on the device (default all; match the
#                             carried truth file, e.g. 2000 for a truth made with --max-queries 2000)
# Header-only fallbacks for machines without CLI11/json/spdlog/fmt: run bench/pack_vendor.sh
# here first and carry .vendor/ along.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Everything is written to OUTDIR; when PACK_TO is set (e.g. $OUT on the device machine, which
# returns at most 8 files), the summary, the JSON lines and one tarball of OUTDIR go there too.
OUTDIR=${1:-./results/gpu_run}
PACK_TO=${PACK_TO:-${OUT:-}}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
STAGES=${STAGES:-build,ctest,gpu_tests,main_job,faults,bench}
stage() { [[ ",$STAGES," == *",$1,"* ]]; }
DATA_CARRY=${DATA_CARRY:-$ROOT/.carry}
cd "$ROOT"
BUILD=${BUILD_DIR:-build-gpu}
export NCCL_NVLS_ENABLE=0  # always: NVLink SHARP multicast is not available to these jobs
GPU_TEST_TIMEOUT=${GPU_TEST_TIMEOUT:-420}
status=0
declare -a SUMMARY=()

log() { echo "[gpu_run $(date +%H:%M:%S)] $*"; }
# Copy what matters to PACK_TO on any exit, also when killed at the call's time limit.
pack_out() {
  [[ -n "$PACK_TO" && "$PACK_TO" != "$OUTDIR" ]] || return 0
  mkdir -p "$PACK_TO"
  printf '%s\n' "${SUMMARY[@]}" > "$PACK_TO/summary.txt"
  [[ -s "$OUTDIR/main_job.jsonl" ]] && cp "$OUTDIR/main_job.jsonl" "$PACK_TO/"
  [[ -f "$OUTDIR/bench_table.txt" ]] && cp "$OUTDIR/bench_table.txt" "$PACK_TO/"
  tar czf "$PACK_TO/gpu_run_logs.tgz" -C "$OUTDIR" --exclude='*.results.h5' . 2>/dev/null || true
  local f
  for f in "$OUTDIR"/*_np1.results.h5; do [[ -f "$f" ]] && cp "$f" "$PACK_TO/"; done
  return 0
}
trap pack_out EXIT
fail() { log "FAIL: $*"; status=1; }

# ---------------------------------------------------------------- environment
GPUS=0
if command -v nvidia-smi >/dev/null 2>&1; then
  GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname)  cpus: $(nproc)"
  echo "gpus visible: $GPUS"
  nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not available"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>/dev/null || true
  /usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -2 || echo "nvcc: not found"
  grep -hE '#define NCCL_(MAJOR|MINOR|PATCH) ' /usr/local/cuda/include/nccl.h /usr/include/nccl.h 2>/dev/null || true
  { command -v mpirun >/dev/null && mpirun --version 2>/dev/null | head -1; } || true
  echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo none) $(git status --porcelain 2>/dev/null | wc -l) changed file(s)"
} > "$OUTDIR/env.txt" 2>&1
cat "$OUTDIR/env.txt"

# ---------------------------------------------------------------- configure + build
if [[ ! -f "$BUILD/build.ninja" ]]; then
  log "configuring $BUILD"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDTOPK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DSHARDTOPK_VENDOR_DIR="$PWD/.vendor/include" 2>&1 | tee "$OUTDIR/configure.log"
fi
log "building"
build_rc=0
stage build || log "(build stage not requested; incremental build anyway)"
cmake --build "$BUILD" -j "$(nproc)" 2>&1 | tee "$OUTDIR/build.log" || build_rc=$?
SUMMARY+=("$(printf '%-34s %4s %7s %7s %8s %10s' build "$build_rc" - - - -)")
if [[ $build_rc -ne 0 ]]; then
  fail "build failed (see $OUTDIR/build.log)"
  printf '%s\n' "${SUMMARY[@]}"
  exit 1
fi

# ---------------------------------------------------------------- whole suite
if [[ "${SKIP_CTEST:-0}" != 1 ]] && stage ctest; then
  log "ctest (whole suite)"
  ctest_rc=0
  (cd "$BUILD" && ctest --output-on-failure) 2>&1 | tee "$OUTDIR/ctest.log" || ctest_rc=$?
  # "100% tests passed, 0 tests failed out of 12" (CMake 3) or "100% tests passed out of 12" (4)
  line=$(grep -E 'tests passed.* out of [0-9]+' "$OUTDIR/ctest.log" | tail -1 || true)
  total=$(sed -nE 's/.* out of ([0-9]+).*/\1/p' <<<"$line")
  failed=$(sed -nE 's/.*, ([0-9]+) tests failed.*/\1/p' <<<"$line")
  [[ -n "$failed" || -z "$line" ]] || failed=0
  SUMMARY+=("$(printf '%-34s %4s %7s %7s %8s %10s' "ctest (binaries)" "$ctest_rc" \
    "$(( ${total:-0} - ${failed:-0} ))" "${failed:-?}" - -)")
  [[ $ctest_rc -eq 0 ]] || fail "ctest reported failures (see $OUTDIR/ctest.log)"
fi

# ---------------------------------------------------------------- GPU tests under mpirun
find_bin() { find "$BUILD" -type f -name "$1" -perm -u+x 2>/dev/null | head -1; }

# Counts per-test result lines of a gtest log ("[  FAILED  ] Suite.Name (12 ms)").
count_results() {  # log kind -> number
  grep -cE "^\[ +$2 +\] .*\([0-9]+ ms\)\$" "$1" || true
}

# run_gtest BINARY NP TAG: one gtest log and JSON per rank, results added to SUMMARY.
run_gtest() {
  local bin=$1 np=$2 tag=$3 rc=0
  log "$tag: $(basename "$bin") under mpirun -np $np"
  if ! command -v mpirun >/dev/null 2>&1; then
    fail "mpirun not found: cannot run $tag"
    return
  fi
  # bash -c expands the rank per process; each rank gets its own log and JSON.
  # shellcheck disable=SC2016  # expanded by the per-rank shell, not here
  timeout -k 15 "$GPU_TEST_TIMEOUT" mpirun --allow-run-as-root --oversubscribe --bind-to none \
    -x NCCL_NVLS_ENABLE=0 -x SHARDTOPK_TEST_ENGINE -x SHARDTOPK_TEST_COMM -np "$np" \
    bash -c 'r=${OMPI_COMM_WORLD_RANK:-0}; exec "$0" --gtest_output=json:"$1/$2.rank$r.json" > "$1/$2.rank$r.log" 2>&1' \
    "$bin" "$OUTDIR" "$tag" || rc=$?
  [[ $rc -eq 124 || $rc -eq 137 ]] && fail "$tag: killed after ${GPU_TEST_TIMEOUT} s (hang?)"
  local r
  for ((r = 0; r < np; ++r)); do
    local lg="$OUTDIR/$tag.rank$r.log"
    [[ -f "$lg" ]] || { fail "$tag rank $r: no log"; continue; }
    local ok failed skipped allowed unexpected
    ok=$(count_results "$lg" OK)
    failed=$(count_results "$lg" FAILED)
    skipped=$(count_results "$lg" SKIPPED)
    allowed=$(grep -cE "${ALLOWED_SKIP:-needs at least 2 ranks}" "$lg" || true)
    unexpected=$(( skipped - allowed ))
    (( unexpected < 0 )) && unexpected=0
    SUMMARY+=("$(printf '%-34s %4s %7s %7s %8s %10s' "$tag rank $r" "$rc" "$ok" "$failed" "$skipped" "$unexpected")")
    if (( failed > 0 )); then
      fail "$tag rank $r: $failed test(s) failed:"
      grep -E "^\[  FAILED  \] .*\([0-9]+ ms\)\$" "$lg" | head -40 || true
    fi
    if (( GPUS > 0 && unexpected > 0 )); then
      fail "$tag rank $r: $GPUS GPU(s) visible but $unexpected test(s) skipped:"
      grep -B3 -E "^\[  SKIPPED \] .*\([0-9]+ ms\)\$" "$lg" | grep -vE '^\[ RUN|^--' | head -20 || true
    fi
    if ! grep -qE '^\[==========\] [0-9]+ tests? from .* ran\.' "$lg"; then
      fail "$tag rank $r: the binary did not finish (crash or kill); last lines:"
      tail -15 "$lg" || true
    fi
  done
  [[ $rc -eq 0 ]] || fail "$tag: mpirun exited with $rc"
}

if (( GPUS == 0 )); then
  log "no GPU visible: the GPU tests will only report skips"
fi
CUDA_BIN=$(find_bin test_cuda_engine)
NCCL_BIN=$(find_bin test_nccl_comm)
INDEX_BIN=$(find_bin test_mpi_index)
if stage gpu_tests; then
  [[ -n "$CUDA_BIN" ]] || fail "test_cuda_engine was not built"
  [[ -n "$NCCL_BIN" ]] || fail "test_nccl_comm was not built"
  [[ -n "$INDEX_BIN" ]] || fail "test_mpi_index was not built"
  NPS_GPU="1"
  if (( GPUS >= 2 )); then NPS_GPU="1 2"; else
    log "fewer than 2 GPUs: -np 2 runs skipped (NCCL needs one GPU per rank)"
    SUMMARY+=("$(printf '%-34s %4s %7s %7s %8s %10s' "np 2 (needs 2 GPUs)" - - - - -)")
  fi
  for np in $NPS_GPU; do
    [[ -n "$CUDA_BIN" ]] && run_gtest "$CUDA_BIN" "$np" "gpu_np$np"
    [[ -n "$NCCL_BIN" ]] && run_gtest "$NCCL_BIN" "$np" "nccl_np$np"
    DEVAPI_BIN=$(find_bin test_device_api)
    if [[ -n "$DEVAPI_BIN" ]]; then run_gtest "$DEVAPI_BIN" "$np" "device_api_np$np"; else fail "test_device_api was not built"; fi
    # The ShardedIndex suite (the same binary CI runs on CPUs) with the CUDA engine + NCCL, and
    # CUDA + MPI (staged through host memory). Its one GPU-less test skips by design.
    if [[ -n "$INDEX_BIN" ]]; then
      SHARDTOPK_TEST_ENGINE=cuda SHARDTOPK_TEST_COMM=nccl ALLOWED_SKIP='needs at least 2 ranks|a GPU is visible: nothing to refuse' \
        run_gtest "$INDEX_BIN" "$np" "index_cuda_nccl_np$np"
      SHARDTOPK_TEST_ENGINE=cuda SHARDTOPK_TEST_COMM=mpi ALLOWED_SKIP='needs at least 2 ranks|a GPU is visible: nothing to refuse' \
        run_gtest "$INDEX_BIN" "$np" "index_cuda_mpi_np$np"
    fi
  done
fi

# ---------------------------------------------------------------- main job on real data
# Real data travels as raw files (Fashion-MNIST IDX.gz, imported here with the project's own
# importer) or as prepared HDF5 (a GloVe float16 subset); ground truth is computed beforehand
# on the CPU machine and carried (DATA_CARRY/*truth*.h5 or inside the prepared file).
BIN=$BUILD/shardtopk
JL="$OUTDIR/main_job.jsonl"
DATASETS=()
if stage main_job || stage bench || stage faults; then
  mkdir -p "$ROOT/data"
  if [[ -d "$DATA_CARRY/fashion-mnist" && -f "$DATA_CARRY/fm_truth.h5" ]]; then
    FM="$ROOT/data/fashion-mnist-784-euclidean-notruth.h5"
    if [[ ! -s "$FM" ]]; then
      log "importing Fashion-MNIST from $DATA_CARRY/fashion-mnist (no truth: carried)"
      "$BIN" import fashion-mnist --dir "$DATA_CARRY/fashion-mnist" --truth-k 0 --max-queries "${FM_MAX_QUERIES:--1}" -o "$FM" 2>&1 | tail -2
    fi
    DATASETS+=("fashion-mnist|$FM|$DATA_CARRY/fm_truth.h5|l2")
  fi
  for g in "$DATA_CARRY"/glove-*.h5; do
    [[ -f "$g" ]] && DATASETS+=("$(basename "$g" .h5)|$g|$g|cosine")
  done
  (( ${#DATASETS[@]} > 0 )) || log "no real data carried (DATA_CARRY=$DATA_CARRY): main job skipped"
fi

# search_run NAME CORPUS NP BATCH DTYPE EXTRA...: one main-job run; JSON line appended to $JL.
search_run() {
  local name=$1 corpus=$2 np=$3 batch=$4 dtype=$5; shift 5
  local tag="${name}_np${np}_b${batch}_${dtype}"
  local cfg="$OUTDIR/$tag.yaml"
  printf 'corpus:\n  path: %s\nsearch:\n  k_max: 1024\n  batch_max: 64\nengine:\n  backend: cuda\n  dtype: %s\ncomm:\n  backend: auto\n  timeout_s: 60\n' \
    "$corpus" "$dtype" > "$cfg"
  local rc=0
  timeout -k 15 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE=0 -np "$np" \
    "$BIN" search -c "$cfg" -q "$corpus" -k 100 --batch "$batch" --timings-json "$OUTDIR/$tag.timings.json" "$@" \
    > "$OUTDIR/$tag.log" 2>&1 || rc=$?
  if [[ $rc -ne 0 ]]; then fail "$tag: search exited $rc"; tail -5 "$OUTDIR/$tag.log"; return; fi
  python3 - "$OUTDIR/$tag.timings.json" "$name" "$np" "$tag" >> "$JL" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); j.update(impl="shardtopk", dataset=sys.argv[2], np=int(sys.argv[3]), tag=sys.argv[4])
print(json.dumps(j))
PY
}

if stage main_job; then
  for ds in "${DATASETS[@]}"; do
    IFS='|' read -r name corpus truth metric <<<"$ds"
    for np in $( (( GPUS >= 2 )) && echo "1 2" || echo 1 ); do
      out="$OUTDIR/${name}_np${np}.results.h5"
      search_run "$name" "$corpus" "$np" 64 float32 --out "$out"
      [[ -f "$out" ]] || continue
      "$BIN" eval -r "$out" -t "$truth" --json "$OUTDIR/${name}_np${np}.eval.json" | tee "$OUTDIR/${name}_np${np}.eval.txt"
      r10=$(python3 -c "import json;print(json.load(open('$OUTDIR/${name}_np${np}.eval.json'))['recall@10'])")
      r100=$(python3 -c "import json;print(json.load(open('$OUTDIR/${name}_np${np}.eval.json'))['recall@100'])")
      SUMMARY+=("$(printf '%-34s %4s %7s %7s %8s %10s' "$name np$np recall@10/@100" 0 "$r10" "$r100" - -)")
      [[ "$r10" == "1.0" && "$r100" == "1.0" ]] || fail "$name np$np: recall below 1.0"
    done
    # `plan` predicts each rank's device bytes without loading: compare with what rank 0 allocated.
    np_plan=$( (( GPUS >= 2 )) && echo 2 || echo 1 )
    tj="$OUTDIR/${name}_np${np_plan}_b64_float32.timings.json"
    if [[ -f "$tj" ]]; then
      "$BIN" plan -c "$OUTDIR/${name}_np${np_plan}_b64_float32.yaml" --ranks "$np_plan" | tee "$OUTDIR/${name}_plan.txt"
      planned=$(awk '$1 == "0" {print $5}' "$OUTDIR/${name}_plan.txt")
      actual=$(python3 -c "import json;print(json.load(open('$tj'))['resident_bytes_rank0'])")
      SUMMARY+=("$(printf '%-34s %4s %7s %7s %8s %10s' "$name plan vs actual dev bytes" - "$planned" "$actual" - -)")
      [[ "$planned" == "$actual" ]] || fail "$name: plan predicted $planned device bytes for rank 0, engine holds $actual"
    fi
    if [[ -f "$OUTDIR/${name}_np1.results.h5" && -f "$OUTDIR/${name}_np2.results.h5" ]]; then
      same=$(python3 - "$OUTDIR/${name}_np1.results.h5" "$OUTDIR/${name}_np2.results.h5" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
ids = np.array_equal(a["ids"][:], b["ids"][:])
sc = np.array_equal(a["scores"][:].view(np.uint32), b["scores"][:].view(np.uint32))
print("identical" if ids and sc else f"DIFFER ids_equal={ids} scores_bit_equal={sc}")
PY
)
      SUMMARY+=("$(printf '%-34s %4s %7s %7s %8s %10s' "$name np1 vs np2" - "$same" - - -)")
      [[ "$same" == identical ]] || fail "$name: np1 and np2 answers differ ($same)"
    fi
  done
fi

# ---------------------------------------------------------------- fault injection (2 GPUs)
# Invariant 7 on the NCCL path and on the staged MPI path: one rank stalls past comm.timeout_s,
# or exits, mid-batch; the job must end within the timeout plus a few seconds, non-zero, with a
# message naming a rank.
if stage faults && (( GPUS >= 2 )) && (( ${#DATASETS[@]} > 0 )); then
  IFS='|' read -r name corpus truth metric <<<"${DATASETS[0]}"
  for cb in nccl mpi; do
  fcfg="$OUTDIR/fault_$cb.yaml"
  printf 'corpus:\n  path: %s\nsearch:\n  k_max: 100\n  batch_max: 64\nengine:\n  backend: cuda\ncomm:\n  backend: %s\n  timeout_s: 5\n' "$corpus" "$cb" > "$fcfg"
  for fault in stall:1:3:60 exit:1:3; do
    t0=$(date +%s.%N)
    frc=0
    SHARDTOPK_FAULT=$fault timeout -k 5 60 mpirun --allow-run-as-root --oversubscribe --bind-to none \
      -x NCCL_NVLS_ENABLE=0 -x SHARDTOPK_FAULT -np 2 "$BIN" search -c "$fcfg" -q "$corpus" -k 10 \
      > "$OUTDIR/fault_${cb}_${fault%%:*}.log" 2>&1 || frc=$?
    took=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')")
    named=$(grep -cE 'rank [0-9]+: .*(did not complete|aborted)|exits during batch|Process name' "$OUTDIR/fault_${cb}_${fault%%:*}.log" || true)
    SUMMARY+=("$(printf '%-34s %4s %7s %7s %8s %10s' "fault $fault ($cb, timeout 5 s)" "$frc" "${took}s" "named:$named" - -)")
    if [[ $frc -eq 0 || $frc -eq 124 || $frc -eq 137 || "$named" == 0 ]] || ! python3 -c "import sys; sys.exit(0 if $took < 20 else 1)"; then
      fail "fault $fault ($cb): rc=$frc after ${took}s (want non-zero within 20 s, naming a rank)"; tail -8 "$OUTDIR/fault_${cb}_${fault%%:*}.log"
    fi
  done
  done
fi

# ---------------------------------------------------------------- benchmarks
# Batch-1 latency and batch-64 QPS of the main job (host queries, host results) per dataset,
# rank count and storage dtype, then the PyTorch baseline on the same GPU.
if stage bench; then
  for ds in "${DATASETS[@]}"; do
    IFS='|' read -r name corpus truth metric <<<"$ds"
    for np in $( (( GPUS >= 2 )) && echo "1 2" || echo 1 ); do
      for dtype in float32 float16; do
        search_run "$name" "$corpus" "$np" 1 "$dtype" --max-queries "${BENCH_QUERIES_B1:-2000}"
        search_run "$name" "$corpus" "$np" 64 "$dtype"
      done
    done
    if python3 -c 'import torch' 2>/dev/null; then
      for dtype in float32 float16; do
        python3 "$ROOT/bench/torch_baseline.py" "$corpus" --k 100 --batches 1,64 --queries 2000 --dtype "$dtype" \
          2>>"$OUTDIR/torch.log" | sed "s/\"impl\": \"torch\"/\"impl\": \"torch\", \"dataset\": \"$name\", \"np\": 1/" >> "$JL" ||
          fail "torch baseline on $name failed (see torch.log)"
      done
    fi
  done
  if [[ -s "$JL" ]]; then
    echo
    python3 - "$JL" <<'PY' | tee "$OUTDIR/bench_table.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'dataset':<30} {'impl':<9} {'np':>2} {'dtype':<8} {'batch':>5} {'queries':>7} {'QPS':>10} {'p50 ms':>8} {'p99 ms':>8} {'ingest s':>8} {'dev MiB/rank':>12}")
for r in rows:
    print(f"{r.get('dataset','?'):<30} {r['impl']:<9} {r.get('np',1):>2} {r.get('dtype','?'):<8} {r['batch']:>5} {r['queries']:>7} "
          f"{r['qps']:>10.1f} {r['batch_ms_p50']:>8.3f} {r['batch_ms_p99']:>8.3f} {r.get('ingest_s',0):>8.2f} "
          f"{r.get('resident_bytes_rank0',0)/2**20:>12.1f}")
PY
  fi
fi

# ---------------------------------------------------------------- summary
echo
echo "== gpu_run summary ($GPUS GPU(s) visible; logs in $OUTDIR) =="
printf '%-34s %4s %7s %7s %8s %10s\n' run rc passed failed skipped unexpected
printf '%s\n' "${SUMMARY[@]}"
if [[ $status -eq 0 ]]; then echo "RESULT: OK"; else echo "RESULT: FAILED"; fi
exit $status
