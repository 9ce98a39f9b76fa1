#!/usr/bin/env bash
# Waits until a `serve` job answers /readyz with 200 (every rank has loaded its shard):
#   launch/wait_ready.sh [PID [LOG]]        e.g.  launch/serve.sh 2 -c C.yaml > serve.log 2>&1 &
#                                                 launch/wait_ready.sh $! serve.log
# PID: the job started in the background ($!); when it exits first, this prints the last lines
# of LOG and exits 1 instead of waiting on. Prints the ready answer, or a line every 10 s while
# the job loads. env: URL (default http://localhost:8080/readyz; curl -k is used for https),
# TIMEOUT_S (default 600: exit 1 after it).
set -uo pipefail
PID=${1:-} LOG=${2:-}
URL=${URL:-http://localhost:8080/readyz} TIMEOUT_S=${TIMEOUT_S:-600}
k=(); [[ "$URL" == https://* ]] && k=(-k)
start=$SECONDS
while :; do
  if out=$(curl -sf "${k[@]}" "$URL" 2>/dev/null); then echo "$out"; exit 0; fi
  if [ -n "$PID" ] && ! kill -0 "$PID" 2>/dev/null; then
    echo "wait_ready: the job (pid $PID) exited before it was ready" >&2
    [ -n "$LOG" ] && [ -f "$LOG" ] && { echo "--- last lines of $LOG:" >&2; tail -n 15 "$LOG" >&2; }
    exit 1
  fi
  waited=$((SECONDS - start))
  if [ "$waited" -ge "$TIMEOUT_S" ]; then
    echo "wait_ready: $URL not ready after ${TIMEOUT_S} s" >&2; exit 1
  fi
  if [ "$waited" -gt 0 ] && [ $((waited % 10)) -eq 0 ] && [ "${said:-}" != "$waited" ]; then
    said=$waited; echo "wait_ready: not ready after ${waited} s ($URL)" >&2
  fi
  sleep 0.5
done
