#!/usr/bin/env bash
# Run `shardtopk serve` under mpirun (through launch/mpirun_local.sh) for a process manager:
#   launch/serve.sh NP -c configs/example.yaml [--set service.port=9000] ...
# SIGTERM or SIGINT to this script is passed to rank 0 only; rank 0 drains (stops accepting,
# answers what is in flight), shuts the other ranks down, every rank exits 0 and so does this
# script. Signalling mpirun itself also drains every rank, but Open MPI 4.1's mpirun then
# reports exit status 1 for a job it was asked to end. SIGHUP to this script is passed to rank 0
# too: it reloads service.auth.keys_file and reopens service.audit_log (docs/OPERATIONS.md,
# "Security"); connections and requests go on. With service.tls.* set the service speaks HTTPS.
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
NP=$1; shift
"$(dirname "$0")/mpirun_local.sh" "$NP" serve "$@" &
MPIRUN=$!
rank0() {  # mpirun's child with OMPI_COMM_WORLD_RANK=0 in its environment
  local p
  for p in $(ps -o pid= --ppid "$MPIRUN" 2>/dev/null); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=0'; then echo "$p"; return; fi
  done
}
forward() {
  local p
  p=$(rank0)
  if [ -n "$p" ]; then kill -TERM "$p"; else kill -TERM "$MPIRUN" 2>/dev/null; fi
}
reload() {  # to rank 0 alone: mpirun would end the job on a SIGHUP
  local p
  p=$(rank0)
  if [ -n "$p" ]; then kill -HUP "$p"; else echo "serve.sh: SIGHUP before rank 0 started: ignored" >&2; fi
}
trap forward TERM INT
trap reload HUP
while true; do
  wait "$MPIRUN"
  rc=$?
  kill -0 "$MPIRUN" 2>/dev/null || exit "$rc"  # wait returns early when a trapped signal arrives
done
