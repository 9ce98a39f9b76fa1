#!/usr/bin/env bash
# The service and the `search` CLI on a GPU machine, in one device call (≈ 80 s after the build):
# writes a 1M × 768 float16 HDF5 corpus (random normal rows, seed 0, 2,000 float32 queries),
# starts `serve` on SERVICE_NP ranks (default 2), runs bench_load at 1/16/64/256 clients (binary and JSON requests, 5 s
# each, answers checked against the float64 oracle), then 64 binary clients beside 10,000 idle
# keep-alive connections, stops the service with SIGTERM (and times it), then times the `search`
# CLI on 1 .. SERVICE_NP ranks at batch 1 and 64. docs/PERFORMANCE.md ("Two GPUs") has the numbers.
#
# usage: bench/gpu_service_load.sh [OUTDIR]   (default $OUT when set, else ./results/service_load)
# needs: build-gpu/shardtopk, bench/bench_load and bench/bench_write_corpus (BUILD_DIR), SERVICE_NP GPUs, curl
# env:   SERVICE_NP (2), CLIENTS (1,16,64,256), DURATION (5 s)
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0  # always: NVLink SHARP multicast is not available to these jobs
B=${BUILD_DIR:-build-gpu}
NP=${SERVICE_NP:-2}               # serve on NP ranks (one GPU each); the CLI on 1 .. NP
CLIENTS=${CLIENTS:-1,16,64,256}   # bench_load client counts
DUR=${DURATION:-5}                # seconds per configuration
OUTDIR=${1:-${OUT:-./results/service_load}}
mkdir -p "$OUTDIR"
D=$(mktemp -d /tmp/shardtopk_svc.XXXXXX)
trap 'rm -rf "$D"' EXIT
$B/bench/bench_write_corpus -o $D/svc.h5 -N 1000000 -d 768 -t float16 -q 2000 --seed 0 --distance dot > $OUTDIR/corpus.log 2>&1 \
  || { cat $OUTDIR/corpus.log; exit 1; }
echo "corpus written"
cat > $D/svc.yaml <<Y
corpus:
  path: $D/svc.h5
search:
  k_max: 128
  batch_max: 64
engine:
  backend: cuda
  dtype: float16
comm:
  timeout_s: 30
service:
  port: 0
  batch_window_us: 300
Y
rm -f $D/port
mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE=0 -np $NP $B/shardtopk serve -c $D/svc.yaml --port-file $D/port > $OUTDIR/serve.log 2>&1 &
MP=$!
for i in $(seq 1 120); do [[ -s $D/port ]] && curl -sf http://127.0.0.1:$(cat $D/port)/readyz > /dev/null && break; sleep 0.5; done
PORT=$(cat $D/port); echo "serve ready on $PORT"
$B/bench/bench_load --url http://127.0.0.1:$PORT --corpus $D/svc.h5 --queries $D/svc.h5 --queries-dataset test -k 10 \
  --clients $CLIENTS --formats binary,json --duration $DUR --warmup 1 --check 64 -J $OUTDIR/load.jsonl 2>&1 | tail -16
ulimit -n | sed 's/^/open-file limit: /'
echo "64 binary clients beside 10,000 idle connections (p99 target: 1.2 x the 64-client row above):"
$B/bench/bench_load --url http://127.0.0.1:$PORT --corpus $D/svc.h5 --queries $D/svc.h5 --queries-dataset test -k 10 \
  --clients 64 --formats binary --duration 5 --warmup 1 --check 64 --idle 10000 -J $OUTDIR/load_idle.jsonl 2>&1 \
  | tee $OUTDIR/load_idle.log | tail -12
grep -E "first error|error:" $OUTDIR/load_idle.log | head -3
grep -E "\[(warning|error|critical)\]" $OUTDIR/serve.log | head -5
curl -s http://127.0.0.1:$PORT/metrics | grep -E "batch_size|shardtopk_requests_total" | head -12
R0=$(ps -o pid= --ppid $MP | while read p; do tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && echo $p; done)
t0=$(date +%s.%N); kill -TERM $R0; wait $MP; rc=$?; echo "serve exit rc=$rc after $(python3 -c "print(round($(date +%s.%N)-$t0,2))") s"
for np in $(seq 1 $NP); do for b in 1 64; do
  mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE=0 -np $np $B/shardtopk search -c $D/svc.yaml \
    -q $D/svc.h5 --queries-dataset test -k 10 --batch $b --max-queries $((b==1?1000:2000)) --timings-json $D/t.json > $D/cli.log 2>&1 || tail -3 $D/cli.log
  python3 -c "import json;j=json.load(open('$D/t.json'));print('CLI np$np batch $b: QPS', round(j['qps']), 'p50 ms', j['batch_ms_p50'], 'p99 ms', j['batch_ms_p99'])"
done; done
