# Sourced by launch/test.sh and launch/sanitize.sh: ctest_with_progress ARGS... runs
# `ctest ARGS...` and, while one CTest entry runs longer than 30 s, prints a line every 30 s with
# its name and time so far (ctest itself prints nothing between an entry's start and its end, and
# some entries run for minutes). Returns ctest's exit status.
ctest_with_progress() {
  local out rc=0
  out=$(mktemp)
  (set -o pipefail; ctest "$@" 2>&1 | tee "$out") &
  local ctest_pid=$!
  (
    cur="" start=$SECONDS next=30
    while sleep 5; do
      name=$(sed -n 's/^ *Start *[0-9]*: //p' "$out" | tail -n 1)
      if [ "$name" != "$cur" ]; then cur=$name start=$SECONDS next=30; continue; fi
      if [ -n "$cur" ] && [ $((SECONDS - start)) -ge "$next" ]; then
        echo "      ... $cur still running: $((SECONDS - start)) s"
        next=$((next + 30))
      fi
    done
  ) &
  local watch_pid=$!
  wait "$ctest_pid" || rc=$?
  kill "$watch_pid" 2>/dev/null || true
  wait "$watch_pid" 2>/dev/null || true
  rm -f "$out"
  return $rc
}
