#!/usr/bin/env bash
# Run the Python interpreter the shardtopk module is built for (Python3_EXECUTABLE in
# ${BUILD_DIR:-build}/CMakeCache.txt, chosen at configure time because it imports numpy; the
# module loads into that Python version only), with the build's python/ folder on its path:
#   launch/python.sh examples/agent_tool.py "how do I run on two GPUs?"
#   launch/python.sh -c "import shardtopk; print(shardtopk.__version__)"
#   mpirun -np 2 launch/python.sh app.py
#   launch/python.sh --which       # print the interpreter's path
# `python3` may be another interpreter (a virtual environment, conda) without numpy or the module.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-build}
[[ "$build" = /* ]] || build="$root/$build"
py=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
if [[ -z "$py" ]]; then
  echo "python.sh: no Python interpreter recorded in $build/CMakeCache.txt: run launch/setup.sh first" >&2
  exit 1
fi
if [[ "${1:-}" == "--which" ]]; then echo "$py"; exit 0; fi
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" "$@"
