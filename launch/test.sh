#!/usr/bin/env bash
# Install dependencies, build everything, and run the whole test suite (CTest: unit tests, the
# multi-rank tests under mpiexec -n 1/2/3/4, CLI tests; GPU tests skip visibly without a GPU).
# The build is launch/setup.sh's, in the same build directory as launch/demo.sh's: nothing it
# built is built again. A CTest entry running longer than 30 s says so every 30 s; at the end,
# the test cases that skipped are listed with their reasons.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export NCCL_NVLS_ENABLE=0
launch/setup.sh
. launch/ctest_progress.sh
BUILD_DIR=${BUILD_DIR:-build}
rc=0
ctest_with_progress --test-dir "$BUILD_DIR" --output-on-failure -j 1 || rc=$?
# ctest hides a passing binary's output: list the test cases that skipped, with their reasons:
# GoogleTest's "file:line: Skipped" and the message after it, and Python unittest's
# "... skipped 'reason'" (other programs' output, CMake's included, is not looked at).
log="$BUILD_DIR/Testing/Temporary/LastTest.log"
if [ -f "$log" ]; then
  reasons=$(awk -f launch/skip_reasons.awk "$log")
  if [ -n "$reasons" ]; then
    echo "== $(printf '%s\n' "$reasons" | wc -l) test case(s) skipped; reasons:"
    printf '%s\n' "$reasons" | sort | uniq -c | sort -rn | head -20
  fi
fi
exit $rc
