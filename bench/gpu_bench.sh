#!/usr/bin/env bash
# The GPU benchmarks (batch 1, batched, scaling) in ONE call (≤ 10 minutes): bench_search
# (kernel view) and the PyTorch baseline on the same generated corpus, bench_scaling at -np 1 and
# -np 2 with the torch.distributed baseline, then the joined table (compare.py), the paper model
# (model.py) and plots when matplotlib is there. Builds nothing (build first, e.g. with
# bench/gpu_run.sh's STAGES=build or cmake --build build-gpu).
#
# usage: bench/gpu_bench.sh [OUTDIR]        (default ./results/gpu_bench)
# env:   SWEEP=quick|full   quick (default): ≈ 3-4 min on 2 H200s. full: the whole batch-1 and batched
#                           sweeps; too long for one call, so run it by PART (one call each):
#        PART=all|search|batched|scaling   (default all; with SWEEP=full pick one per call)
#        BUILD_DIR=build-gpu   where bench_search/bench_scaling were built
#        HOST_ROWS=auto|0|1    1: rows made on the host and uploaded (engines without device
#                              generation); auto (default): probe generated=true, fall back to 1
#        ITERS, WARMUP         timed / warm-up batches per configuration (quick: 20 / 5)
#        CHECK_QUERIES         sampled queries checked per configuration (quick: 4)
#        BUDGET_S              whole-call budget in seconds (default 560); steps are cut to fit
#        S_N S_D S_T S_K S_B   override the batch-1 sweep lists (B_* batched, SC_* scaling, SC_WEAK)
#        NP2=0|1               force the 2-rank runs off/on (default: on with >= 2 GPUs)
#        PACK_TO               where the ≤ 8 returned files go (default $OUT when set)
# Every benchmark checks its answers; any #wrong > 0 or failed step makes the script exit 1.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUTDIR=${1:-./results/gpu_bench}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
PACK_TO=${PACK_TO:-${OUT:-}}
SWEEP=${SWEEP:-quick}
PART=${PART:-all}
BUILD=${BUILD_DIR:-build-gpu}
PY=${PYTHON:-python3}
export NCCL_NVLS_ENABLE=0  # always: NVLink SHARP multicast is not available to these jobs
GIT_COMMIT=${SHARDTOPK_GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$( [[ -n "$(git status --porcelain -uno 2>/dev/null)" ]] && echo -dirty)}
T_START=$(date +%s)
status=0
SUMMARY=()
log() { echo "[gpu_bench +$(( $(date +%s) - T_START ))s] $*"; }
fail() { log "FAIL: $*"; status=1; SUMMARY+=("FAIL: $*"); }
part() { [[ "$PART" == all || "$PART" == "$1" ]]; }

pack() {
  [[ -n "$PACK_TO" ]] || return 0
  mkdir -p "$PACK_TO"
  { printf '%s\n' "${SUMMARY[@]}"; echo "status: $status"; } > "$OUTDIR/summary.txt"
  cp "$OUTDIR/summary.txt" "$PACK_TO/" 2>/dev/null
  for f in compare.txt ours.jsonl torch.jsonl scaling.jsonl model.txt; do
    [[ -s "$OUTDIR/$f" ]] && cp "$OUTDIR/$f" "$PACK_TO/"
  done
  tar czf "$PACK_TO/gpu_bench.tgz" -C "$OUTDIR" . 2>/dev/null
  return 0
}
trap pack EXIT

BS=$BUILD/bench/bench_search
BSC=$BUILD/bench/bench_scaling
GD=$BUILD/bench/bench_gen_dump
for b in "$BS" "$BSC" "$GD"; do [[ -x "$b" ]] || { fail "$b not built (build first)"; exit 1; }; done
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
{
  echo "date: $(date -u +%FT%TZ)  host: $(hostname)  cpus: $(nproc)  gpus: $GPUS  sweep: $SWEEP  part: $PART"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>/dev/null
  echo "git: $GIT_COMMIT"
  $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1
} | tee "$OUTDIR/env.txt"
HAVE_TORCH=0
$PY -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && HAVE_TORCH=1
if [[ -z "${NP2:-}" ]]; then NP2=0; (( GPUS >= 2 )) && NP2=1; fi
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE=0)

# run NAME TIMEOUT CMD...: one step, its log in OUTDIR/NAME.log, killed at TIMEOUT seconds.
# Every limit is cut to what is left of BUDGET_S (default 560 s), so one call never overruns.
BUDGET_S=${BUDGET_S:-560}
run() {
  local name=$1 t=$2; shift 2
  local left=$(( BUDGET_S - ($(date +%s) - T_START) - 25 ))
  (( t > left )) && t=$left
  if (( t < 15 )); then fail "$name: skipped, the call's time budget is spent"; return 0; fi
  log "$name (limit ${t}s): $*"
  local rc=0 t0=$(date +%s)
  timeout -k 10 "$t" "$@" > "$OUTDIR/$name.log" 2>&1 || rc=$?
  local took=$(( $(date +%s) - t0 ))
  grep -E '^(#|  )' "$OUTDIR/$name.log" | grep -vE '^\[' | tail -40
  SUMMARY+=("$(printf '%-28s rc=%-4s %4ss' "$name" "$rc" "$took")")
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then fail "$name: killed after ${t}s"
  elif [[ $rc -ne 0 ]]; then fail "$name: exit $rc (see $name.log)"; tail -5 "$OUTDIR/$name.log"; fi
  return 0
}

# ---------------------------------------------------------------- sweeps
if [[ "$SWEEP" == quick ]]; then
  : "${ITERS:=20}" "${WARMUP:=5}" "${CHECK_QUERIES:=4}" "${B_ITERS:=5}"
  : "${S_N:=100k,1M,10M}" "${S_D:=768}" "${S_T:=float32,float16}" "${S_K:=1,100,1024}" "${S_B:=1}"
  : "${B_N:=10M}" "${B_D:=768}" "${B_T:=float16,float32}" "${B_K:=100}" "${B_B:=64,256}"
  : "${SC_N:=10M}" "${SC_D:=768}" "${SC_T:=float16}" "${SC_K:=100}" "${SC_B:=1,64}" "${SC_WEAK:=5M}"
else
  : "${ITERS:=20}" "${WARMUP:=3}" "${CHECK_QUERIES:=4}" "${B_ITERS:=10}"
  : "${S_N:=10k,100k,1M,10M}" "${S_D:=384,768,1024}" "${S_T:=float32,float16}" "${S_K:=1,8,100,1024}" "${S_B:=1}"
  : "${B_N:=1M,10M}" "${B_D:=384,768,1024}" "${B_T:=float16,bfloat16,float32}" "${B_K:=10,100}" "${B_B:=8,64,256,1024}"
  : "${SC_N:=10M}" "${SC_D:=768}" "${SC_T:=float16}" "${SC_K:=100}" "${SC_B:=1,64,256}" "${SC_WEAK:=5M}"
fi
CQ=$CHECK_QUERIES
COMMON=(-n "$ITERS" -w "$WARMUP" -c 1 --check-queries "$CQ" -m inner_product)
BCOMMON=(-n "$B_ITERS" -w 1 -c 1 --check-queries "$CQ" -m inner_product)

# ---------------------------------------------------------------- generator: C++ = numpy = torch (GPU)
run generator_check 120 $PY bench/test_generator.py --bin "$GD"

# ---------------------------------------------------------------- generated shards on the device?
HR=${HOST_ROWS:-auto}
if [[ "$HR" == auto ]]; then
  if timeout -k 5 90 "$BS" -N 20000 -d 64 -k 10 -B 1 -t float32 -n 2 -w 1 -c 1 --check-queries 2 \
      > "$OUTDIR/probe_generated.log" 2>&1; then HR=0; else
    HR=1; SUMMARY+=("note: the CUDA engine refused generated=true (probe_generated.log): rows made on the host")
    log "generated shard probe failed: using --host-rows 1"; tail -3 "$OUTDIR/probe_generated.log"
  fi
fi
COMMON+=(--host-rows "$HR"); BCOMMON+=(--host-rows "$HR")

# ---------------------------------------------------------------- batch 1, ranks 1 and 2
OURS=$OUTDIR/ours.jsonl TORCH=$OUTDIR/torch.jsonl SCAL=$OUTDIR/scaling.jsonl
if part search; then
  run search_np1 240 "${MPI[@]}" -np 1 "$BS" -N "$S_N" -d "$S_D" -t "$S_T" -k "$S_K" -B "$S_B" "${COMMON[@]}" -J "$OURS" --tag search
  (( NP2 )) && run search_np2 200 "${MPI[@]}" -np 2 "$BS" -N "$S_N" -d "$S_D" -t "$S_T" -k "$S_K" -B "$S_B" "${COMMON[@]}" -J "$OURS" --tag search
  (( HAVE_TORCH )) && run torch_search 200 $PY bench/torch_baseline.py --generated -N "$S_N" -d "$S_D" -t "$S_T" -k "$S_K" -B "$S_B" -n "$ITERS" -w "$WARMUP" -J "$TORCH" --tag search
fi
# ---------------------------------------------------------------- batched
if part batched; then
  run batched_np1 200 "${MPI[@]}" -np 1 "$BS" -N "$B_N" -d "$B_D" -t "$B_T" -k "$B_K" -B "$B_B" "${BCOMMON[@]}" -J "$OURS" --tag batched
  (( NP2 )) && run batched_np2 200 "${MPI[@]}" -np 2 "$BS" -N "$B_N" -d "$B_D" -t "$B_T" -k "$B_K" -B "$B_B" "${BCOMMON[@]}" -J "$OURS" --tag batched
  (( HAVE_TORCH )) && run torch_batched 200 $PY bench/torch_baseline.py --generated -N "$B_N" -d "$B_D" -t "$B_T" -k "$B_K" -B "$B_B" -n "$B_ITERS" -w 2 -J "$TORCH" --tag batched
fi
# ---------------------------------------------------------------- scaling, np 1 then 2
if part scaling; then
  run scaling_strong_np1 150 "${MPI[@]}" -np 1 "$BSC" -N "$SC_N" -d "$SC_D" -t "$SC_T" -k "$SC_K" -B "$SC_B" "${COMMON[@]}" -J "$SCAL" --tag strong
  run scaling_weak_np1 150 "${MPI[@]}" -np 1 "$BSC" --rows-per-rank "$SC_WEAK" -d "$SC_D" -t "$SC_T" -k "$SC_K" -B 1 "${COMMON[@]}" -J "$SCAL" --tag weak
  if (( NP2 )); then
    run scaling_strong_np2 150 "${MPI[@]}" -np 2 "$BSC" -N "$SC_N" -d "$SC_D" -t "$SC_T" -k "$SC_K" -B "$SC_B" "${COMMON[@]}" -J "$SCAL" --baseline "$SCAL" --tag strong
    run scaling_weak_np2 150 "${MPI[@]}" -np 2 "$BSC" --rows-per-rank "$SC_WEAK" -d "$SC_D" -t "$SC_T" -k "$SC_K" -B 1 "${COMMON[@]}" -J "$SCAL" --baseline "$SCAL" --tag weak
  fi
  if (( HAVE_TORCH )); then
    for np in 1 $( (( NP2 )) && echo 2 ); do
      run torch_dist_np$np 150 $PY -m torch.distributed.run --standalone --nproc_per_node "$np" bench/torch_sharded.py \
        -N "$SC_N" -d "$SC_D" -t "$SC_T" -k "$SC_K" -B "$SC_B" -n "$ITERS" -w "$WARMUP" -J "$SCAL" --tag strong
    done
  fi
fi

# ---------------------------------------------------------------- tables, model, plots
[[ -s "$OURS" || -s "$SCAL" ]] && $PY bench/compare.py --ours "$OURS" "$SCAL" --torch "$TORCH" "$SCAL" > "$OUTDIR/compare.txt" 2>&1
[[ -s "$OUTDIR/compare.txt" ]] && cat "$OUTDIR/compare.txt"
if [[ -s "$SCAL" ]]; then
  $PY bench/model.py "$SCAL" > "$OUTDIR/model.txt" 2>&1 && cat "$OUTDIR/model.txt"
  $PY bench/plot_scaling.py "$SCAL" -o "$OUTDIR/plots" > "$OUTDIR/plots.log" 2>&1 || log "plots skipped (see plots.log)"
fi
# A non-zero #wrong anywhere fails the run, even when a binary's exit code was lost.
w=$(cat "$OURS" "$SCAL" 2>/dev/null | $PY -c 'import sys,json; print(sum(int(json.loads(l).get("wrong",0) or 0) for l in sys.stdin if l.strip()))')
SUMMARY+=("#wrong total (ours): ${w:-?}")
[[ "${w:-1}" == 0 ]] || fail "#wrong total ${w:-?}"
log "done in $(( $(date +%s) - T_START )) s"
printf '%s\n' "${SUMMARY[@]}"
[[ $status -eq 0 ]] && echo "RESULT: OK" || echo "RESULT: FAILED"
exit $status
