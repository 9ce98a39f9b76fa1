#!/usr/bin/env bash
# Restarts of a writable index, as one table (docs/OPERATIONS.md "Restarts"): the time from the
# launch to the first answered search, and the log records replayed per second,
#   1. from a snapshot alone, then with 100k and with 1M single-row records in the log after it
#      (bench_updates over a generated corpus: build, writes, a snapshot written while batch-1
#      searches go on, whose p99 against idle it also reports, then load_index + one search);
#   2. `shardtopk serve` on that directory, one client upserting a row per request, the whole
#      job (mpirun and its ranks) killed with SIGKILL, and the same command started at once (no
#      waiting: the orphaned ranks still hold the directory's lock for a moment); first answer
#      timed from that launch, then every acknowledged write checked present (one binary delete
#      of every acknowledged id must count each of them live).
#
# usage: bench/restart_table.sh [OUTDIR]     (default $OUT when set, else ./results/restart_table)
# env:   GIT_COMMIT (the commit to record; default: git rev-parse), BUILD_DIR (build-gpu), NP ranks (1), ENGINE (cuda; cpu without GPUs), ROWS (10M), DIM (768),
#        DTYPE (float16), LOG_RECORDS (100k,1M), WRITE_S (3: seconds of writes before the kill),
#        WORK (a directory on the disk to measure; default a fresh one under /tmp), THREADS (engine
#        threads of CPU ranks; 0: the machine's cores)
# needs: BUILD_DIR/shardtopk, BUILD_DIR/bench/bench_updates, mpirun, python3
# Disk: the snapshot (ROWS x DIM x 2 bytes for float16) and the log (about 4 x DIM bytes per record).
# Time on one H200 at 10M x 768 float16: about 4 minutes (the snapshot's 15 GB file is the longest step).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
B=${BUILD_DIR:-build-gpu}
NP=${NP:-1}
ENGINE=${ENGINE:-cuda}
ROWS=${ROWS:-10M}
DIM=${DIM:-768}
DTYPE=${DTYPE:-float16}
LOG_RECORDS=${LOG_RECORDS:-100k,1M}
WRITE_S=${WRITE_S:-3}
THREADS=${THREADS:-0}
OUTDIR=${1:-${OUT:-./results/restart_table}}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
W=${WORK:-$(mktemp -d /tmp/shardtopk_restart.XXXXXX)}
mkdir -p "$W"
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE=0 -np "$NP")
GIT=${GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
JOB=0
cleanup() {
  [[ $JOB -gt 0 ]] && kill -KILL -- -$JOB 2>/dev/null
  [[ -z ${WORK:-} ]] && rm -rf "$W"
}
trap cleanup EXIT
now() { date +%s.%N; }
T0=$(now)

# ---- 1. snapshot alone, + each LOG_RECORDS count (bench_updates keeps the directory)
echo "# restart table: $ROWS x $DIM $DTYPE, engine $ENGINE, $NP rank(s), log records $LOG_RECORDS; work $W; git $GIT"
rm -f "$OUTDIR/bench_updates.jsonl"
"${MPI[@]}" "$B/bench/bench_updates" -N "$ROWS" -d "$DIM" -t "$DTYPE" --engine "$ENGINE" --dir "$W" --keep \
  -R 64 --upsert-rows 64k --seconds 2 --delete-every 1000 --delete-ids 10000 -n 300 -w 20 \
  --log-records "$LOG_RECORDS" --set engine.threads=$THREADS --git "$GIT" -J "$OUTDIR/bench_updates.jsonl" \
  > "$OUTDIR/bench_updates.log" 2>&1 || { tail -20 "$OUTDIR/bench_updates.log"; exit 1; }
grep -v '^\[' "$OUTDIR/bench_updates.log" | grep -E '^#|snapshot|restart|log_write' | grep -v '^# upserts'
S="$W/bench_updates"

# ---- 2. serve, writes, kill -9 of the whole job, an immediate restart
SNAP=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["snapshot"])' "$S/MANIFEST.json")
METRIC=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metric"])' "$S/MANIFEST.json")
cat > "$W/serve.yaml" <<Y
corpus:
  path: $S/$SNAP
  ids_dataset: ids
search:
  metric: $METRIC
  k_max: 128
  batch_max: 64
engine:
  backend: $ENGINE
  dtype: $DTYPE
  threads: $THREADS
comm:
  timeout_s: 60
storage:
  dir: $S
  lock_wait_s: 60
service:
  host: 127.0.0.1
  port: 0
Y
serve() {  # $1: log name; the job in its own process group, its pid in JOB
  rm -f "$W/port"
  setsid "${MPI[@]}" "$B/shardtopk" serve -c "$W/serve.yaml" --port-file "$W/port" > "$OUTDIR/$1.log" 2>&1 &
  JOB=$!
  disown $JOB  # its SIGKILL is the point, not news
}
records_of() {  # the log records a start replayed, from its log
  grep -o 'snapshot seq [0-9]*, [0-9]* log record(s) replayed' "$OUTDIR/$1.log" | head -1 | awk '{print $4}'
}
t=$(now)
serve serve_first
first=$(python3 bench/restart_client.py first-answer "$W/port" "$DIM" "$t") || { tail -20 "$OUTDIR/serve_first.log"; exit 1; }
echo "# serve started (snapshot + $(records_of serve_first) records) and answered in $first s; writing for $WRITE_S s"
rm -f "$W/acked"
python3 bench/restart_client.py write "$W/port" "$DIM" "$W/acked" 1000000000000 2> "$OUTDIR/writer.log" &
WRITER=$!
sleep "$WRITE_S"
kill -KILL -- -$JOB  # mpirun and every rank, mid-write
t=$(now)
serve serve_after_kill  # at once: the killed ranks may still be exiting
wait $WRITER
acked=$(wc -l < "$W/acked")
after=$(python3 bench/restart_client.py first-answer "$W/port" "$DIM" "$t") || { tail -20 "$OUTDIR/serve_after_kill.log"; exit 1; }
present=$(python3 bench/restart_client.py check "$W/port" "$W/acked")
check_rc=$?
kill -KILL -- -$JOB 2>/dev/null
JOB=0

# ---- the table (markdown), from bench_updates' JSON lines, the start-ups' replay lines and the kill run
python3 - "$OUTDIR" "$after" "$present" "$ROWS" "$DIM" "$DTYPE" "$ENGINE" "$NP" "$GIT" <<'P' | tee "$OUTDIR/restart_table.md"
import json, re, sys
out, after, present, rows, dim, dtype, engine, np_, git = sys.argv[1:]
recs = [json.loads(l) for l in open(f"{out}/bench_updates.jsonl")]
first = recs[0]
line = re.compile(r"replayed (\d+) log record\(s\) in ([0-9.]+) s \((\d+) records/s")
def replays(log):
    return [(int(a), float(b), int(c)) for a, b, c in line.findall(open(log).read())]
bench_replays = replays(f"{out}/bench_updates.log")
print(f"restart table: {rows} x {dim} {dtype}, engine {engine} ({first['device']}), {np_} rank(s); "
      f"{first['time']}; git {git}; host {first['host']}")
print()
print("| start | log records | first answer (s) | replay (s) | replay records/s | acknowledged writes present |")
print("|---|---:|---:|---:|---:|---|")
for r in recs:
    if r["phase"] != "restart":
        continue
    n = r["log_records"]
    rep = next((x for x in bench_replays if x[0] == n), None) if n else None
    what = "snapshot only" if n == 0 else f"snapshot + {n:,} records"
    print(f"| {what} | {n:,} | {r['seconds_to_first_answer']:.2f} | {rep[1] if rep else 0:.2f} | "
          f"{f'{rep[2]:,}' if rep else '-'} | - |")
k = replays(f"{out}/serve_after_kill.log")
n, s, rate = k[0] if k else (0, 0.0, 0)
print(f"| after kill -9, immediate restart | {n:,} | {float(after):.2f} | {s:.2f} | {rate:,} | {present} |")
snap = next((r for r in recs if r["phase"] == "snapshot"), None)
if snap:
    print()
    print(f"snapshot of {snap['rows']:,} rows while batch-1 searches go on: {snap['seconds']:.1f} s; "
          f"{snap['searches_during']} searches meanwhile, p99 {snap['p99_ms']:.3f} ms against idle "
          f"{snap['idle_p99_ms']:.3f} ms (x{snap['p99_ratio']:.2f}; a step's p99 {snap['step_p99_ms']:.3f} ms)")
P
echo "# total $(python3 -c "import sys; print('%.0f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$T0" "$(now)") s; files in $OUTDIR"
[[ $check_rc -eq 0 ]] || { echo "FAILED: acknowledged writes missing after the restart ($present)"; exit 1; }
