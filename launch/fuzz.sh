#!/usr/bin/env bash
# libFuzzer run of the config loader and the HDF5 metadata checks, bounded in time.
#   launch/fuzz.sh                  # install clang if missing, build build-fuzz/, fuzz 2 × 50 s
#   FUZZ_SECONDS=300 launch/fuzz.sh # longer runs (per target)
# Seeds: fuzz/corpus/{config,hdf5} (read-only here: new inputs go to build-fuzz/corpus-*).
# A crash, a sanitizer report or a timeout fails the script and leaves the input in
# build-fuzz/artifacts/; turn it into a regular test (see fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
# Debian 12: clang is clang-14; libFuzzer's runtime is in libclang-rt-14-dev (libclang-rt-dev).
PACKAGES=(clang libclang-rt-dev)
if [ "${SKIP_APT:-0}" != "1" ]; then
  missing=()
  for p in "${PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_PER_TARGET=${FUZZ_SECONDS:-50}
echo "== configuring $BUILD_DIR (clang, libFuzzer + ASan + UBSan)"
mkdir -p "$BUILD_DIR"
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DSHARDTOPK_CUDA=OFF -DSHARDTOPK_TESTS=OFF \
  -DSHARDTOPK_BENCH=OFF -DSHARDTOPK_FUZZ=ON -DCMAKE_BUILD_TYPE=None >"$BUILD_DIR/configure.log" 2>&1 ||
  { cat "$BUILD_DIR/configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j "$(nproc)" --target fuzz_config fuzz_hdf5_meta
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TMPDIR="$(mktemp -d)"
trap 'rm -rf "$TMPDIR"' EXIT
mkdir -p "$BUILD_DIR/artifacts"
rc=0
for t in config:fuzz_config hdf5:fuzz_hdf5_meta; do
  seeds=${t%%:*} bin=${t##*:}
  work="$BUILD_DIR/corpus-$seeds"
  mkdir -p "$work"
  echo "== $bin: ${SECONDS_PER_TARGET} s from fuzz/corpus/$seeds"
  if ! "$BUILD_DIR/fuzz/$bin" "$work" "fuzz/corpus/$seeds" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 \
      -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$BUILD_DIR/artifacts/$bin-" \
      >"$BUILD_DIR/$bin.log" 2>&1; then
    rc=1
    echo "!! $bin found a failure; input(s) in $BUILD_DIR/artifacts/:"
    ls -l "$BUILD_DIR/artifacts/" || true
    grep -E "ERROR|SUMMARY|==[0-9]+==|runtime error|round trip|does not parse" "$BUILD_DIR/$bin.log" | head -20 || true
  fi
  grep -E "stat::number_of_executed_units|stat::new_units_added|cov: " "$BUILD_DIR/$bin.log" | tail -3 || true
done
exit $rc
