#!/usr/bin/env bash
# Install dependencies, build, and run the whole test suite (CTest: unit tests, the multi-rank
# tests under mpiexec -n 1/2/3/4, CLI tests; GPU tests skip visibly without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export NCCL_NVLS_ENABLE=0
launch/setup.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j 1
