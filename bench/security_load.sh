#!/usr/bin/env bash
# What TLS and API keys cost the service, in one run: one generated corpus, `serve` started twice
# on it (plain HTTP; then HTTPS with a keys file, a read key and an audit log), bench_load against
# each at the same client counts (binary requests, answers checked against the float64 oracle),
# then a table: QPS with TLS + keys / plain QPS, and the p50 difference, per client count.
#
# usage: bench/security_load.sh [OUTDIR]     (default $OUT when set, else ./results/security_load)
# env:   BUILD_DIR (build-gpu), NP ranks (1), ENGINE (cuda; cpu on a machine without GPUs),
#        ROWS (1000000), DIM (768), DTYPE (float16), CLIENTS (1,64), DURATION (5 s), FORMATS (binary)
# needs: BUILD_DIR/shardtopk, BUILD_DIR/bench/bench_load and bench_write_corpus, certtool
#        (Debian gnutls-bin), python3
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
B=${BUILD_DIR:-build-gpu}
NP=${NP:-1}
ENGINE=${ENGINE:-cuda}
ROWS=${ROWS:-1000000}
DIM=${DIM:-768}
DTYPE=${DTYPE:-float16}
CLIENTS=${CLIENTS:-1,64}
DUR=${DURATION:-5}
FORMATS=${FORMATS:-binary}
OUTDIR=${1:-${OUT:-./results/security_load}}
mkdir -p "$OUTDIR"
D=$(mktemp -d /tmp/shardtopk_sec.XXXXXX)
trap 'kill $MP 2>/dev/null; rm -rf "$D"' EXIT
MP=""

$B/bench/bench_write_corpus -o $D/c.h5 -N $ROWS -d $DIM -t $DTYPE -q 2000 --seed 0 --distance dot > $OUTDIR/corpus.log 2>&1 ||
  { cat $OUTDIR/corpus.log; exit 1; }
# A CA and a server certificate for 127.0.0.1 (ECDSA P-256), a read key.
certtool --generate-privkey --key-type ecdsa --no-text --outfile $D/ca.key 2>/dev/null
printf 'cn = "bench CA"\nca\ncert_signing_key\nexpiration_days = 2\n' > $D/ca.tmpl
certtool --generate-self-signed --no-text --load-privkey $D/ca.key --template $D/ca.tmpl --outfile $D/ca.pem 2>/dev/null
certtool --generate-privkey --key-type ecdsa --no-text --outfile $D/srv.key 2>/dev/null
chmod 600 $D/srv.key
printf 'cn = "localhost"\nip_address = "127.0.0.1"\ntls_www_server\nsigning_key\nexpiration_days = 1\n' > $D/srv.tmpl
certtool --generate-certificate --no-text --load-privkey $D/srv.key --load-ca-certificate $D/ca.pem \
  --load-ca-privkey $D/ca.key --template $D/srv.tmpl --outfile $D/srv.pem 2>/dev/null || { echo "certtool failed"; exit 1; }
KEYGEN=$($B/shardtopk keygen --name bench --role read) || exit 1
KEY=$(echo "$KEYGEN" | sed -n 2p)
echo "$KEYGEN" | sed -n 4p > $D/keys

config() {  # $1: extra service lines
  cat <<Y
corpus:
  path: $D/c.h5
search:
  k_max: 128
  batch_max: 64
engine:
  backend: $ENGINE
  dtype: $DTYPE
comm:
  timeout_s: 30
service:
  host: 127.0.0.1
  port: 0
$1
Y
}
config "" > $D/plain.yaml
config "  tls: {cert_file: $D/srv.pem, key_file: $D/srv.key}
  auth: {keys_file: $D/keys}
  audit_log: $D/audit.log" > $D/secure.yaml

run() {  # $1: name, $2: config, $3: scheme, then bench_load's extra flags
  local name=$1 cfg=$2 scheme=$3
  shift 3
  rm -f $D/port
  mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE=0 -np $NP $B/shardtopk serve -c $cfg \
    --port-file $D/port > $OUTDIR/serve_$name.log 2>&1 &
  MP=$!
  for _ in $(seq 1 600); do
    [[ -s $D/port ]] && grep -q "ready: " $OUTDIR/serve_$name.log && break
    kill -0 $MP 2>/dev/null || { cat $OUTDIR/serve_$name.log; exit 1; }
    sleep 0.2
  done
  $B/bench/bench_load --url $scheme://127.0.0.1:$(cat $D/port) "$@" --corpus $D/c.h5 --queries $D/c.h5 \
    --queries-dataset test -k 10 --clients $CLIENTS --formats $FORMATS --duration $DUR --warmup 1 --check 64 \
    -J $OUTDIR/load_$name.jsonl > $OUTDIR/load_$name.log 2>&1 || { echo "bench_load ($name) failed:"; tail -5 $OUTDIR/load_$name.log; }
  tail -n +2 $OUTDIR/load_$name.log | grep -E "^ +(binary|json)" | sed "s/^/$name /"
  local r0
  r0=$(ps -o pid= --ppid $MP | while read -r p; do tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && echo $p; done)
  kill -TERM $r0 2>/dev/null
  wait $MP
  MP=""
}
echo "# corpus $ROWS x $DIM $DTYPE, engine $ENGINE, $NP rank(s); clients $CLIENTS, $DUR s each"
run plain $D/plain.yaml http
run secure $D/secure.yaml https --cacert $D/ca.pem --api-key "$KEY"
python3 - "$OUTDIR" <<'P'
import json, sys
out = sys.argv[1]
rows = {}
for name in ("plain", "secure"):
    for line in open(f"{out}/load_{name}.jsonl"):
        j = json.loads(line)
        rows.setdefault((j["format"], j["clients"]), {})[name] = j
print("#\n# %-7s %8s %12s %12s %9s %12s %12s %10s" % ("format", "clients", "QPS plain", "QPS TLS+key", "ratio",
                                                      "p50 plain", "p50 TLS+key", "p50 +us"))
for (fmt, c), r in sorted(rows.items()):
    if len(r) < 2: continue
    p, s = r["plain"], r["secure"]
    print("  %-7s %8d %12.1f %12.1f %9.3f %12.3f %12.3f %10.1f" % (fmt, c, p["qps"], s["qps"], s["qps"] / p["qps"],
          p["p50_ms"], s["p50_ms"], 1000 * (s["p50_ms"] - p["p50_ms"])))
    if p["wrong"] or s["wrong"]: print("  # wrong answers: plain %d, TLS+key %d" % (p["wrong"], s["wrong"]))
P
