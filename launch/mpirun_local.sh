#!/usr/bin/env bash
# Start shardtopk on this node with sensible mpirun flags:
#   launch/mpirun_local.sh NP search -c configs/glove-100.yaml -q data/glove-100-angular.h5 -k 10
# - one rank per GPU when GPUs are visible (NP larger than the GPU count is refused here, with
#   the advice, instead of failing after start-up);
# - --bind-to none, so each rank's engine.threads (default cores ÷ ranks) can use its cores;
# - --oversubscribe when NP exceeds the cores; root allowed when run as root;
# - NCCL_NVLS_ENABLE=0 exported to every rank (NVLink multicast off).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
NP=$1; shift
[[ "$NP" =~ ^[1-9][0-9]*$ ]] || {
  echo "mpirun_local.sh: NP '$NP' is not a number of ranks (a whole number >= 1), e.g. launch/mpirun_local.sh 2 search ..." >&2
  exit 2
}
BIN=${SHARDTOPK_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build/shardtopk}
[ -x "$BIN" ] || { echo "mpirun_local.sh: $BIN not built: run launch/setup.sh" >&2; exit 1; }
export NCCL_NVLS_ENABLE=0
flags=(--bind-to none -x NCCL_NVLS_ENABLE)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
[ "$NP" -gt "$(nproc)" ] && flags+=(--oversubscribe)
if command -v nvidia-smi >/dev/null 2>&1; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  if [ "${ngpu:-0}" -gt 0 ] && [ "$NP" -gt "$ngpu" ] && [[ "$*" != *"engine.backend=cpu"* ]]; then
    echo "mpirun_local.sh: $NP ranks but $ngpu GPU(s): use at most $ngpu ranks on this node, or add --set engine.backend=cpu" >&2
    exit 2
  fi
fi
exec mpirun "${flags[@]}" -np "$NP" "$BIN" "$@"
