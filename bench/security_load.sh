#!/usr/bin/env bash
# What TLS and API keys cost the service, in one run: one generated corpus served by two `serve`
# jobs at once (plain HTTP; HTTPS with a keys file, a read key and an audit log), bench_load
# against each in turn, ROUNDS times (binary requests, answers checked against the float64
# oracle; alternating cancels drifts of a shared machine's load), then a table of the medians
# over the rounds: QPS with TLS + keys / plain QPS, and the p50 difference, per client count.
#
# usage: bench/security_load.sh [OUTDIR]     (default $OUT when set, else ./results/security_load)
# env:   BUILD_DIR (build-gpu), NP ranks per job (1), ENGINE (cuda; cpu on a machine without GPUs),
#        ROWS (1000000), DIM (768), DTYPE (float16), CLIENTS (1,64), DURATION (5 s), ROUNDS (3),
#        FORMATS (binary)
# needs: BUILD_DIR/shardtopk, BUILD_DIR/bench/bench_load and bench_write_corpus, certtool
#        (Debian gnutls-bin) or openssl, python3
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
ROUNDS=${ROUNDS:-3}
FORMATS=${FORMATS:-binary}
OUTDIR=${1:-${OUT:-./results/security_load}}
mkdir -p "$OUTDIR"
D=$(mktemp -d /tmp/shardtopk_sec.XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -TERM $p 2>/dev/null; done; sleep 1; rm -rf "$D"' EXIT

$B/bench/bench_write_corpus -o $D/c.h5 -N $ROWS -d $DIM -t $DTYPE -q 2000 --seed 0 --distance dot > $OUTDIR/corpus.log 2>&1 ||
  { cat $OUTDIR/corpus.log; exit 1; }
# A CA and a server certificate for 127.0.0.1 (ECDSA P-256), a read key: GnuTLS's certtool, or
# openssl where certtool is missing (Ubuntu images without gnutls-bin).
if command -v certtool >/dev/null; then
  certtool --generate-privkey --key-type ecdsa --no-text --outfile $D/ca.key 2>/dev/null
  printf 'cn = "bench CA"\nca\ncert_signing_key\nexpiration_days = 2\n' > $D/ca.tmpl
  certtool --generate-self-signed --no-text --load-privkey $D/ca.key --template $D/ca.tmpl --outfile $D/ca.pem 2>/dev/null
  certtool --generate-privkey --key-type ecdsa --no-text --outfile $D/srv.key 2>/dev/null
  chmod 600 $D/srv.key
  printf 'cn = "localhost"\nip_address = "127.0.0.1"\ntls_www_server\nsigning_key\nexpiration_days = 1\n' > $D/srv.tmpl
  certtool --generate-certificate --no-text --load-privkey $D/srv.key --load-ca-certificate $D/ca.pem \
    --load-ca-privkey $D/ca.key --template $D/srv.tmpl --outfile $D/srv.pem 2>/dev/null || { echo "certtool failed"; exit 1; }
elif command -v openssl >/dev/null; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $D/ca.key -out $D/ca.pem -days 2 \
    -subj "/CN=bench CA" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign 2>/dev/null &&
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $D/srv.key -out $D/srv.csr \
      -subj "/CN=localhost" 2>/dev/null &&
    printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature\n' > $D/srv.ext &&
    openssl x509 -req -in $D/srv.csr -CA $D/ca.pem -CAkey $D/ca.key -CAcreateserial -days 1 -extfile $D/srv.ext \
      -out $D/srv.pem 2>/dev/null || { echo "openssl failed"; exit 1; }
  chmod 600 $D/srv.key
else
  echo "security_load.sh: neither certtool (gnutls-bin) nor openssl is installed" >&2; exit 1
fi
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

start() {  # $1: name, $2: config; the job in the background, its port in $D/port_$1
  rm -f $D/port_$1
  mpirun --allow-run-as-root --oversubscribe --bind-to none -x NCCL_NVLS_ENABLE=0 -np $NP $B/shardtopk serve -c $2 \
    --port-file $D/port_$1 > $OUTDIR/serve_$1.log 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 900); do
    [[ -s $D/port_$1 ]] && grep -q "ready: " $OUTDIR/serve_$1.log && return
    kill -0 ${PIDS[-1]} 2>/dev/null || { cat $OUTDIR/serve_$1.log; exit 1; }
    sleep 0.2
  done
  echo "serve ($1) not ready"; exit 1
}
load() {  # $1: name, $2: scheme, then bench_load's extra flags
  local name=$1 scheme=$2
  shift 2
  $B/bench/bench_load --url $scheme://127.0.0.1:$(cat $D/port_$name) "$@" --corpus $D/c.h5 --queries $D/c.h5 \
    --queries-dataset test -k 10 --clients $CLIENTS --formats $FORMATS --duration $DUR --warmup 1 --check 64 \
    -J $D/load.jsonl > $OUTDIR/load_$name.log 2>&1 || { echo "bench_load ($name) failed:"; tail -5 $OUTDIR/load_$name.log; }
  cat $D/load.jsonl >> $OUTDIR/load_$name.jsonl
}
echo "# corpus $ROWS x $DIM $DTYPE, engine $ENGINE, $NP rank(s) per job; clients $CLIENTS, $DUR s each, $ROUNDS rounds"
rm -f $OUTDIR/load_plain.jsonl $OUTDIR/load_secure.jsonl
start plain $D/plain.yaml
start secure $D/secure.yaml
for r in $(seq 1 $ROUNDS); do
  load plain http
  load secure https --cacert $D/ca.pem --api-key "$KEY"
  echo "round $r done"
done
python3 - "$OUTDIR" <<'P'
import json, statistics, sys
out = sys.argv[1]
runs = {}
for name in ("plain", "secure"):
    for line in open(f"{out}/load_{name}.jsonl"):
        j = json.loads(line)
        runs.setdefault((j["format"], j["clients"]), {}).setdefault(name, []).append(j)
print("#\n# medians over the rounds")
print("# %-7s %8s %12s %12s %9s %12s %12s %10s %7s" % ("format", "clients", "QPS plain", "QPS TLS+key", "ratio",
                                                       "p50 plain", "p50 TLS+key", "p50 +us", "#wrong"))
for (fmt, c), r in sorted(runs.items()):
    if len(r) < 2: continue
    med = lambda name, key: statistics.median(x[key] for x in r[name])
    qp, qs, pp, ps = med("plain", "qps"), med("secure", "qps"), med("plain", "p50_ms"), med("secure", "p50_ms")
    wrong = sum(x["wrong"] for name in r for x in r[name])
    print("  %-7s %8d %12.1f %12.1f %9.3f %12.3f %12.3f %10.1f %7d" % (fmt, c, qp, qs, qs / qp, pp, ps,
                                                                      1000 * (ps - pp), wrong))
P
