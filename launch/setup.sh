#!/usr/bin/env bash
# Install the build dependencies (Debian 12 / Ubuntu 24.04) and build shardtopk into build/.
#   launch/setup.sh                # apt packages + configure + build everything (tests, benchmarks)
#   launch/setup.sh shardtopk      # ... build only the named targets (the demo needs only shardtopk)
#   launch/setup.sh shardtopk_python   # ... the Python module (build/python), registered for `import shardtopk`
#   SKIP_APT=1 launch/setup.sh     # build only
# CUDA: the CUDA engine and NCCL communicator are built when a GPU is visible (nvidia-smi -L lists
# one) and nvcc is found (PATH or /usr/local/cuda). SHARDTOPK_CUDA=ON|OFF forces it either way;
# SHARDTOPK_CUDA=AUTO builds them whenever nvcc is found, GPU or not (CI compile-checks them so).
# BUILD_DIR defaults to build.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build
  libopenmpi-dev openmpi-bin libhdf5-dev libyaml-cpp-dev libgtest-dev libgmock-dev
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libmicrohttpd-dev libsimdjson-dev libgnutls28-dev libspdlog-dev libfmt-dev zlib1g-dev
  gnutls-bin curl
  dataset-fashion-mnist python3 python3-numpy python3-h5py python3-yaml python3-dev libdlpack-dev)
. launch/apt_install.sh
apt_install_missing "${PACKAGES[@]}"

BUILD_DIR=${BUILD_DIR:-build}
cuda=${SHARDTOPK_CUDA:-}
case "$cuda" in
  ON | OFF | AUTO) ;;
  "")
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
      cuda=AUTO
    else
      cuda=OFF
      echo "== no GPU visible: building without the CUDA sources (SHARDTOPK_CUDA=AUTO or ON compiles them anyway)"
    fi
    ;;
  *) echo "setup.sh: SHARDTOPK_CUDA='$cuda' is not ON, OFF or AUTO" >&2; exit 2 ;;
esac
echo "== configuring $BUILD_DIR (SHARDTOPK_CUDA=$cuda)"
mkdir -p "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDTOPK_CUDA="$cuda" \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" >"$BUILD_DIR/configure.log" 2>&1 ||
  { cat "$BUILD_DIR/configure.log"; exit 1; }
grep -E "shardtopk:" "$BUILD_DIR/configure.log" || true
targets=()
for t in "$@"; do targets+=(--target "$t"); done
echo "== building ${*:-everything} ($(nproc) jobs)"
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
echo "== built in $BUILD_DIR${*:+: $*}"

# The Python module, when built: make `import shardtopk` work for the interpreter it was built for,
# with a .pth file in that interpreter's user site-packages naming $BUILD_DIR/python (remove the
# file to undo; SHARDTOPK_PTH=0 skips it). Where user site-packages are off (a virtual
# environment), the PYTHONPATH line to use is printed instead.
if ls "$BUILD_DIR"/python/shardtopk*.so >/dev/null 2>&1; then
  py=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
  moddir=$(cd "$BUILD_DIR/python" && pwd)
  site=""
  if [[ "${SHARDTOPK_PTH:-1}" != 0 ]] && "$py" -c 'import site, sys; sys.exit(0 if site.ENABLE_USER_SITE else 1)'; then
    site=$("$py" -m site --user-site)
  fi
  if [[ -n "$site" ]] && mkdir -p "$site" && echo "$moddir" > "$site/shardtopk-build.pth"; then
    echo "== import shardtopk: $site/shardtopk-build.pth names $moddir (for $py)"
  else
    echo "== import shardtopk: export PYTHONPATH=$moddir\${PYTHONPATH:+:\$PYTHONPATH}   (for $py)"
  fi
fi
