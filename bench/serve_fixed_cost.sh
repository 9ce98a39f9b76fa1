#!/usr/bin/env bash
# One client's fixed cost of `shardtopk serve` on CPU ranks: a corpus small enough that the search
# is tens of µs, so the front end's own time (read, parse, queue, resume, write, and what lies
# outside the service's stage counters) dominates. For each `serve` binary in SERVE_BINS, ROUNDS
# interleaved rounds of: bench_load with one binary client through cpp-httplib and through
# `--client raw`, then 64 and 256 clients; answers checked against the float64 oracle. Then the
# `search` CLI's in-process batch-1 p50 on the same corpus. Every JSON line gets "serve_bin"; a
# summary (medians over the rounds) is printed last. docs/PERFORMANCE.md ("One client's fixed
# cost") has the figures.
#
# usage: bench/serve_fixed_cost.sh [OUTDIR]   (default ./results/serve_fixed_cost)
# env:   BUILD_DIR (build-cpu: bench_load, bench_write_corpus, shardtopk), SERVE_BINS (the
#        build's shardtopk; several, space-separated, for a before/after), SERVE_SETS (config
#        overrides, space-separated, each KEY=VALUE[,KEY=VALUE] or - for none: every binary runs
#        with each, e.g. "service.answer_poll_us=0 -"), ROWS (1000), DIM (768),
#        ROUNDS (4), DURATION (4 s), NP (1), MANY (64,256: "" skips the many-client rows),
#        ENGINE (cpu; cuda: one GPU per rank) and DTYPE (float32; the corpus file's and the
#        engine's storage type)
set -uo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build-cpu}
BINS=${SERVE_BINS:-$B/shardtopk}
SETS=${SERVE_SETS:--}
ENGINE=${ENGINE:-cpu}; DTYPE=${DTYPE:-float32}
export NCCL_NVLS_ENABLE=0  # always: NVLink SHARP multicast is not available to these jobs
ROWS=${ROWS:-1000}; DIM=${DIM:-768}; ROUNDS=${ROUNDS:-4}; DUR=${DURATION:-4}; NP=${NP:-1}; MANY=${MANY-64,256}
OUTDIR=${1:-./results/serve_fixed_cost}
mkdir -p "$OUTDIR"; OUTDIR=$(cd "$OUTDIR" && pwd)
D=$(mktemp -d /tmp/shardtopk_fixed.XXXXXX)
trap 'rm -rf "$D"' EXIT
$B/bench/bench_write_corpus -o $D/c.h5 -N $ROWS -d $DIM -t $DTYPE -q 200 --seed 0 --distance dot > $D/corpus.log 2>&1 \
  || { cat $D/corpus.log; exit 1; }
printf 'corpus:\n  path: %s\nsearch:\n  k_max: 128\n  batch_max: 64\nengine:\n  backend: %s\n  dtype: %s\n  threads: 1\ncomm:\n  timeout_s: 30\nservice:\n  port: 0\n' \
  $D/c.h5 $ENGINE $DTYPE > $D/c.yaml
: > $OUTDIR/load.jsonl
one() {  # $1: serve binary, $2: its overrides (- for none); then bench_load's flags
  local bin=$1 set=$2; shift 2
  local sets=()
  [[ "$set" != - ]] && for kv in ${set//,/ }; do sets+=(--set "$kv"); done
  rm -f $D/port
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np $NP $bin serve -c $D/c.yaml "${sets[@]}" --port-file $D/port > $D/serve.log 2>&1 &
  local mp=$!
  for i in $(seq 1 120); do [[ -s $D/port ]] && curl -sf http://127.0.0.1:$(cat $D/port)/readyz > /dev/null && break; sleep 0.5; done
  $B/bench/bench_load --url http://127.0.0.1:$(cat $D/port) --corpus $D/c.h5 --queries $D/c.h5 --queries-dataset test -k 10 \
    --formats binary --duration $DUR --warmup 1 --check 64 -J $D/l.jsonl "$@" > $D/bench.log 2>&1 || tail -3 $D/bench.log
  local label=$bin
  [[ "$set" != - ]] && label="$bin $set"
  sed "s|^{|{\"serve_bin\":\"$label\",|" $D/l.jsonl >> $OUTDIR/load.jsonl
  local r0
  r0=$(ps -o pid= --ppid $mp | while read p; do tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && echo $p; done)
  kill -TERM $r0; wait $mp
}
for r in $(seq 1 $ROUNDS); do
  for bin in $BINS; do
    for set in $SETS; do
      one $bin $set --clients 1 --client httplib
      one $bin $set --clients 1 --client raw
      [[ -n "$MANY" ]] && one $bin $set --clients $MANY
    done
  done
  echo "round $r of $ROUNDS done"
done
mpirun --allow-run-as-root --oversubscribe --bind-to none -np $NP ${BINS%% *} search -c $D/c.yaml -q $D/c.h5 --queries-dataset test -k 10 \
  --batch 1 --max-queries 200 --timings-json $OUTDIR/cli.json > $D/cli.log 2>&1 || tail -3 $D/cli.log
python3 - "$OUTDIR/load.jsonl" "$OUTDIR/cli.json" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("CLI in-process batch-1 p50 %.1f us" % (1000 * json.load(open(sys.argv[2]))["batch_ms_p50"]))
print("%-44s %-8s %7s %6s %9s %8s  %s" % ("serve_bin", "client", "clients", "runs", "p50_us", "QPS", "stage means (us, medians over runs)"))
seen = []
for r in rows:
    key = (r["serve_bin"], r["client"], r["clients"])
    if key in seen: continue
    seen.append(key)
    rs = [x for x in rows if (x["serve_bin"], x["client"], x["clients"]) == key]
    med = lambda f: st.median(f(x) for x in rs)
    stages = " ".join("%s %.1f" % (s, med(lambda x: x["stage_us"].get(s, 0)))
                      for s in ("read", "parse", "queue", "search", "resume", "write"))
    print("%-44s %-8s %7d %6d %9.1f %8.0f  %s   #wrong %d" % (key[0][-44:], key[1], key[2], len(rs),
          1000 * med(lambda x: x["p50_ms"]), med(lambda x: x["qps"]), stages, sum(x["wrong"] for x in rs)))
PY
