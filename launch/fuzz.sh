#!/usr/bin/env bash
# libFuzzer run of the config loader, the HDF5 metadata checks and the row reader against
# libhdf5, bounded in time.
#   launch/fuzz.sh                  # install clang if missing, build build-fuzz/, fuzz 50 + 50 + 40 s
#   FUZZ_SECONDS=300 FUZZ_DIFF_SECONDS=300 launch/fuzz.sh  # longer runs (per target)
# Seeds: fuzz/corpus/{config,hdf5} (read-only here: new inputs go to build-fuzz/corpus-*), and
# for fuzz_hdf5_differential the valid files of testing/hdf5_matrix.hpp, written by
# make_hdf5_seeds into build-fuzz/seeds-hdf5_diff.
# A crash, a sanitizer report or a timeout fails the script and leaves the input in
# build-fuzz/artifacts/; turn it into a regular test (see fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian 12: clang is clang-14; libFuzzer's runtime is in libclang-rt-14-dev (libclang-rt-dev).
PACKAGES=(clang libclang-rt-dev)
. launch/apt_install.sh
apt_install_missing "${PACKAGES[@]}"
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_PER_TARGET=${FUZZ_SECONDS:-50}
DIFF_SECONDS=${FUZZ_DIFF_SECONDS:-40}
echo "== configuring $BUILD_DIR (clang, libFuzzer + ASan + UBSan)"
mkdir -p "$BUILD_DIR"
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DSHARDTOPK_CUDA=OFF -DSHARDTOPK_TESTS=OFF \
  -DSHARDTOPK_BENCH=OFF -DSHARDTOPK_FUZZ=ON -DCMAKE_BUILD_TYPE=None >"$BUILD_DIR/configure.log" 2>&1 ||
  { cat "$BUILD_DIR/configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j "$(nproc)" --target fuzz_config fuzz_hdf5_meta fuzz_hdf5_differential make_hdf5_seeds
rm -rf "$BUILD_DIR/seeds-hdf5_diff"
"$BUILD_DIR/fuzz/make_hdf5_seeds" --differential "$BUILD_DIR/seeds-hdf5_diff"
# allocator_may_return_null: a damaged size field makes libhdf5 ask for terabytes; in production
# malloc returns NULL and HDF5 reports an error, so let ASan do the same. max_allocation_size_mb:
# the same for any block of 1 GiB or more (libhdf5 asks for 3–21 GB on damaged superblocks):
# refused before ASan poisons its shadow (2.5 GB for 20 GB), which would take RSS past the
# watchdog's limit with nothing in the report to blame (fuzz/README.md, "How a report is judged");
# shardtopk's own `new` of that size is still reported ("allocator is out of memory"), with its
# stack. fast_unwind_on_malloc=0:
# full stacks through libhdf5 (no frame pointers), for the leak suppressions in fuzz/lsan.supp.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:allocator_may_return_null=1:max_allocation_size_mb=1024:fast_unwind_on_malloc=0"
export LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan.supp"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TMPDIR="$(mktemp -d)"
trap 'rm -rf "$TMPDIR"' EXIT
mkdir -p "$BUILD_DIR/artifacts/libhdf5"
kept_before=$(find "$BUILD_DIR/artifacts/libhdf5" -type f | wc -l)
rc=0
# libhdf5 1.10.8 (Debian 12) has memory errors of its own on damaged files (fuzz/README.md). A
# report whose every stack starts inside libhdf5 is saved under artifacts/libhdf5/ and the run
# goes on (up to 20 restarts within the time budget); so is an RSS out-of-memory report that
# ASan's live-heap profile explains and puts in libhdf5 (fuzz/classify.awk); any other report
# fails the job.
# The HDF5 targets run without leak detection: libhdf5 keeps free lists and metadata-cache state
# between files that LeakSanitizer reports as leaks almost every few seconds, and
# shardtopk's HDF5 handles are RAII-closed; fuzz_config keeps it. fuzz_hdf5_differential aborts
# when the reader and libhdf5 disagree on a file (fuzz/README.md): its report's stack is ours.
for t in "fuzz/corpus/config:fuzz_config:1:$SECONDS_PER_TARGET" "fuzz/corpus/hdf5:fuzz_hdf5_meta:0:$SECONDS_PER_TARGET" \
         "$BUILD_DIR/seeds-hdf5_diff:fuzz_hdf5_differential:0:$DIFF_SECONDS"; do
  IFS=: read -r seed_dir bin leaks budget <<<"$t"
  work="$BUILD_DIR/corpus-${bin#fuzz_}"
  mkdir -p "$work"
  echo "== $bin: ${budget} s from $seed_dir"
  end=$((SECONDS + budget))
  for attempt in $(seq 1 20); do
    left=$((end - SECONDS))
    (( left > 0 )) || break
    log="$BUILD_DIR/$bin.$attempt.log"
    rm -f "$BUILD_DIR"/artifacts/"$bin"-*
    # A fixed seed (FUZZ_SEED; 0 lets libFuzzer choose) on a fresh work corpus: the same start,
    # but not an exactly repeatable run (fuzz/README.md).
    if ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=$leaks" "$BUILD_DIR/fuzz/$bin" "$work" "$seed_dir" -max_total_time="$left" -timeout=10 \
        -seed="$(( ${FUZZ_SEED:-1} + attempt - 1 ))" \
        -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -detect_leaks="$leaks" \
        -artifact_prefix="$BUILD_DIR/artifacts/$bin-" >"$log" 2>&1; then
      grep -E "stat::number_of_executed_units|stat::new_units_added" "$log" || true
      break
    fi
    kind=$(awk -f fuzz/classify.awk "$log")
    grep -E "ERROR: |SUMMARY: " "$log" | head -3 || true
    # A timeout is never judged from its alarm stack alone (classify.awk: "ours"). But
    # fast_unwind_on_malloc=0 makes every malloc slow, so an allocation loop inside libhdf5 can
    # hit -timeout before -rss_limit_mb (stab_name_by_idx_alloc_loop.h5: 40 million small blocks
    # in 6 s with fast unwinding, past 10 s without). Such an input is run once more alone, with fast unwinding
    # and 60 s: if it then ends in an RSS out-of-memory whose live-heap profile puts the memory in
    # libhdf5 (classify.awk's rule), the loop is the library's; any other outcome keeps "ours".
    if [[ $kind == ours ]] && grep -q "ERROR: libFuzzer: timeout" "$log"; then
      for a in "$BUILD_DIR"/artifacts/"$bin"-timeout-*; do
        [[ -e $a ]] || continue
        rerun="$log.rerun"
        ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0:fast_unwind_on_malloc=1" timeout -k 5 90 "$BUILD_DIR/fuzz/$bin" \
          -timeout=60 -rss_limit_mb=2048 -detect_leaks=0 "$a" >"$rerun" 2>&1 || true
        if grep -q "ERROR: libFuzzer: out-of-memory (used:" "$rerun"; then
          kind=$(awk -f fuzz/classify.awk "$rerun")
          echo "   timeout re-run alone with fast unwinding: $(grep -m1 -E 'ERROR: ' "$rerun"), judged: $kind"
        else
          echo "   timeout re-run alone with fast unwinding: $(grep -m1 -E 'ERROR: |Executed' "$rerun" || echo 'no report'), still shardtopk's"
        fi
      done
    fi
    if [[ $kind == libhdf5 ]]; then
      for a in "$BUILD_DIR"/artifacts/"$bin"-*; do [[ -e $a ]] && mv "$a" "$BUILD_DIR/artifacts/libhdf5/"; done
      echo "   (inside libhdf5, not shardtopk's code: input kept in $BUILD_DIR/artifacts/libhdf5/; fuzzing goes on)"
      continue
    fi
    rc=1
    echo "!! $bin found a failure in shardtopk's code; input(s) and log:"
    ls -l "$BUILD_DIR"/artifacts/"$bin"-* 2>/dev/null || true
    # the target's own verdict (a differential disagreement names both sides), then the stack
    grep -E "^fuzz_hdf5_[a-z_]+: " "$log" | head -5 || true
    grep -E "^    #[0-9]+ " "$log" | head -25 || true
    echo "   log: $log; reproduce: $BUILD_DIR/fuzz/$bin <input>"
    break
  done
done
n=$(( $(find "$BUILD_DIR/artifacts/libhdf5" -type f | wc -l) - kept_before ))
echo "== fuzzing done: $n libhdf5 finding(s) this run (kept, not failing CI); shardtopk failures: $rc"
exit $rc
