#!/usr/bin/env bash
# compute-sanitizer over the GPU test binaries: memcheck (out-of-bounds and
# misaligned device accesses, leaks of device allocations), racecheck (shared-memory races),
# synccheck (illegal __syncthreads) and initcheck (reads of uninitialised device memory).
# Run it on the GPU machine (not in CI: no GPU there):
#   bench/compute_sanitizer.sh [OUTDIR]      # default results/compute_sanitizer
# Env: BUILD_DIR (default build-gpu; configured and built here when missing), TOOLS (default
# "memcheck racecheck synccheck initcheck"), GTEST_FILTER (default: every case; racecheck and
# initcheck are slow, so narrow it for a quick look), NP (ranks for test_mpi_index, default 2).
# Every run's log is in OUTDIR/<binary>.<tool>.log; the summary table comes last; the script
# exits non-zero when any tool reports an error or a binary fails.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${1:-results/compute_sanitizer}
BUILD=${BUILD_DIR:-build-gpu}
TOOLS=${TOOLS:-memcheck racecheck synccheck initcheck}
NP=${NP:-2}
mkdir -p "$OUTDIR"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[[ -x "$CS" ]] || { echo "compute-sanitizer not found (CUDA toolkit bin/ on PATH?)"; exit 2; }
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export NCCL_NVLS_ENABLE=0
if [[ ! -f "$BUILD/build.ninja" ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDTOPK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DSHARDTOPK_VENDOR_DIR="$PWD/.vendor/include" || exit 1
fi
cmake --build "$BUILD" -j "$(nproc)" || exit 1

# Binaries with GPU work. test_nccl_comm and the multi-rank index test run under mpirun with one
# compute-sanitizer per rank (each checks its own process's kernels). Device-side leak checking
# is on for memcheck. test_mpi_index uses the CUDA engine when a GPU is visible.
SINGLE=(test_cuda_engine)
[[ -x "$BUILD/tests/test_device_api" ]] && SINGLE+=(test_device_api)
declare -a SUMMARY
rc=0
cs_args() {  # tool log -> the compute-sanitizer flags for one process
  local extra=()
  [[ $1 == memcheck ]] && extra=(--leak-check full)
  # --report-api-errors no: libnccl probes cudaFuncGetAttributes on kernels built for other
  # architectures and handles the cudaErrorNoKernelImageForDevice it gets (every report of a
  # memcheck run on an H200 is one of these, none a memory error). Our own CUDA API errors fail
  # the tests through CHECK_CUDA anyway.
  echo --tool "$1" "${extra[@]}" --report-api-errors no --error-exitcode 99 --print-limit 50 --log-file "$2.%p"
}
run_one() {  # name tool cmd... (cmd already starts compute-sanitizer, per process)
  local name=$1 tool=$2; shift 2
  local log="$OUTDIR/$name.$tool.log"
  echo "== $name under $tool"
  "$@" >"$log" 2>&1
  local r=$?
  cat "$log".* >>"$log" 2>/dev/null; rm -f "$log".*
  local errs
  errs=$(grep -hoE "ERROR SUMMARY: [0-9]+ error" "$log" | awk '{s += $3} END {print s + 0}')
  local verdict=ok
  if [[ $r -ne 0 || ${errs:-0} -ne 0 ]]; then verdict="FAIL (exit $r, $errs errors)"; rc=1; fi
  SUMMARY+=("$(printf '%-24s %-10s %s' "$name" "$tool" "$verdict")")
}
F=${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER}
for tool in $TOOLS; do
  for b in "${SINGLE[@]}"; do
    # shellcheck disable=SC2046
    run_one "$b" "$tool" "$CS" $(cs_args "$tool" "$OUTDIR/$b.$tool.log") "$BUILD/tests/$b" $F
  done
  for b in test_nccl_comm test_mpi_index; do
    # shellcheck disable=SC2046
    run_one "${b}_np$NP" "$tool" mpirun -np "$NP" --bind-to none -x SHARDTOPK_LOG_LEVEL=warn -x NCCL_NVLS_ENABLE \
      "$CS" $(cs_args "$tool" "$OUTDIR/${b}_np$NP.$tool.log") "$BUILD/tests/$b" $F
  done
done
echo
printf '%-24s %-10s %s\n' binary tool verdict
printf '%s\n' "${SUMMARY[@]}"
exit $rc
