#!/usr/bin/env bash
# Install dependencies, build everything, and run the whole test suite (CTest: unit tests, the
# multi-rank tests under mpiexec -n 1/2/3/4, CLI tests; GPU tests skip visibly without a GPU).
# The CUDA sources are compiled whenever nvcc is found, GPU or not (SHARDTOPK_CUDA=AUTO unless
# set), so that they are compile-checked. A CTest entry running longer than 30 s says so every 30 s.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export NCCL_NVLS_ENABLE=0
SHARDTOPK_CUDA=${SHARDTOPK_CUDA:-AUTO} launch/setup.sh
. launch/ctest_progress.sh
rc=0
ctest_with_progress --test-dir "${BUILD_DIR:-build}" --output-on-failure -j 1 || rc=$?
# ctest hides a passing binary's output: list the GoogleTest cases that skipped, with reasons.
log="${BUILD_DIR:-build}/Testing/Temporary/LastTest.log"
if [ -f "$log" ]; then
  n=$(grep -c '^\[  SKIPPED \] .*([0-9]* ms)$' "$log" || true)
  if [ "${n:-0}" -gt 0 ]; then
    echo "== $n GoogleTest case(s) skipped; reasons:"
    grep -hE 'skipped|test skipped' "$log" | grep -v '^\[' | sed 's/^ */   /' | sort | uniq -c | sort -rn | head -20
  fi
fi
exit $rc
