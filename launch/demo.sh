#!/usr/bin/env bash
# The main job end to end on a real dataset, from a fresh Debian 12 / Ubuntu 24.04 machine:
#   1. installs the build dependencies and Fashion-MNIST (apt: dataset-fashion-mnist), builds the
#      shardtopk binary alone into build/ (launch/setup.sh's one configuration: launch/test.sh
#      later builds the rest there, without building this again);
#   2. imports Fashion-MNIST (60,000 x 784 corpus, l2) into data/ with float64 ground truth for
#      the first $QUERIES test images (default 1000; QUERIES=10000 for all of them);
#   3. runs `mpirun -np $NP shardtopk search` on it (default NP=2; CPU ranks here, one GPU per
#      rank where GPUs are visible), K=100;
#   4. prints recall@1/10/100 against the ground truth and a few answers with class labels.
set -euo pipefail
cd "$(dirname "$0")/.."
QUERIES=${QUERIES:-1000}
NP=${NP:-2}
BUILD_DIR=${BUILD_DIR:-build}
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export NCCL_NVLS_ENABLE=0

launch/setup.sh shardtopk
BIN=$BUILD_DIR/shardtopk
DATA=data/fashion-mnist-784-euclidean-q$QUERIES.h5
mkdir -p data results
if [ ! -s "$DATA" ]; then
  echo "== importing Fashion-MNIST -> $DATA (ground truth for $QUERIES queries)"
  "$BIN" import fashion-mnist -o "$DATA" --max-queries "$QUERIES"
fi
"$BIN" info "$DATA"

# One GPU per rank where GPUs exist; never more ranks than GPUs then.
if command -v nvidia-smi >/dev/null 2>&1; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [ "${ngpu:-0}" -gt 0 ] && [ "$ngpu" -lt "$NP" ]; then NP=$ngpu; fi
fi
echo "== mpirun -np $NP $BIN search (K=100)"
mpirun --oversubscribe --bind-to none -np "$NP" "$BIN" search -c configs/fashion-mnist.yaml \
  --set corpus.path="$DATA" -q "$DATA" -k 100 -o results/fashion-mnist-np$NP.h5 \
  --timings-json results/fashion-mnist-np$NP.timings.json
echo "== recall against the float64 ground truth"
"$BIN" eval -r results/fashion-mnist-np$NP.h5 -t "$DATA" --show 5
echo "== next: launch/test.sh (the test suite); docs/TUTORIAL.md (serve this corpus, filters, updates, Python)"
