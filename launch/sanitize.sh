#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer build of the CPU path (SHARDTOPK_CUDA=OFF) into
# build-asan/, then the whole CTest suite under it (the multi-rank tests under mpiexec too).
# Any sanitizer report ends the process that made it (halt_on_error) and fails its test.
#   launch/sanitize.sh                 # configure + build + ctest
#   SAN_BUILD_DIR=dir launch/sanitize.sh
# Open MPI allocates at MPI_Init and keeps it until exit (and its helper libraries leak by
# design), so LeakSanitizer is off: detect_leaks=0. allocator_may_return_null=1: an impossible
# allocation fails as it does without ASan (std::bad_alloc, or NULL inside libhdf5 on a damaged
# file) instead of ending the process. Everything else is on.
# Expects the packages of launch/setup.sh (it is run after it by .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
BUILD_DIR=${SAN_BUILD_DIR:-build-asan}
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
echo "== configuring $BUILD_DIR (ASan + UBSan, -O1, CPU only)"
mkdir -p "$BUILD_DIR"
# The Python module is left out: an interpreter not built with ASan cannot load an ASan module
# (the runtime must come first); its tests run in the plain build.
cmake -S . -B "$BUILD_DIR" -G Ninja -DSHARDTOPK_CUDA=OFF -DSHARDTOPK_BENCH=OFF -DSHARDTOPK_PYTHON=OFF -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_C_FLAGS="-O1 -g $SAN" -DCMAKE_CXX_FLAGS="-O1 -g $SAN" \
  -DCMAKE_EXE_LINKER_FLAGS="$SAN" -DCMAKE_SHARED_LINKER_FLAGS="$SAN" >"$BUILD_DIR/configure.log" 2>&1 ||
  { cat "$BUILD_DIR/configure.log"; exit 1; }
echo "== building ($(nproc) jobs)"
cmake --build "$BUILD_DIR" -j "$(nproc)"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0:allocator_may_return_null=1:check_initialization_order=1:strict_init_order=1${ASAN_EXTRA_OPTIONS:+:$ASAN_EXTRA_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export NCCL_NVLS_ENABLE=0
echo "== ctest under ASan + UBSan (ASAN_OPTIONS=$ASAN_OPTIONS)"
. launch/ctest_progress.sh
ctest_with_progress --test-dir "$BUILD_DIR" --output-on-failure -j 1
