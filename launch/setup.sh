#!/usr/bin/env bash
# Install the build dependencies (Debian 12 / Ubuntu 24.04) and build shardtopk into build/.
#   launch/setup.sh                # apt packages + configure + build everything (tests, benchmarks)
#   launch/setup.sh shardtopk      # ... build only the named targets (the demo needs only shardtopk)
#   launch/setup.sh shardtopk_python   # ... the Python module (build/python), registered for `import shardtopk`
#   SKIP_APT=1 launch/setup.sh     # build only
# One build configuration for every launch script (demo.sh, test.sh and this one), so that none
# rebuilds what another built: Release, ccache when installed, and SHARDTOPK_CUDA=AUTO, which
# compiles the CUDA engine and NCCL communicator wherever nvcc is found (PATH or /usr/local/cuda),
# GPU or not (CI compile-checks them so), and leaves them out without it. A build directory keeps
# the value it was configured with; SHARDTOPK_CUDA=ON|OFF|AUTO changes it (and rebuilds).
# BUILD_DIR defaults to build; CUDA_ARCH (default 90) sets the CUDA architectures.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build
  libopenmpi-dev openmpi-bin libhdf5-dev libyaml-cpp-dev libgtest-dev libgmock-dev
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libmicrohttpd-dev libsimdjson-dev libdeflate-dev libgnutls28-dev libspdlog-dev libfmt-dev zlib1g-dev
  gnutls-bin curl
  dataset-fashion-mnist python3 python3-numpy python3-h5py python3-yaml python3-dev libdlpack-dev)
. launch/apt_install.sh
apt_install_missing "${PACKAGES[@]}"

BUILD_DIR=${BUILD_DIR:-build}
cached=$(sed -n 's/^SHARDTOPK_CUDA:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || true)
cuda=${SHARDTOPK_CUDA:-${cached:-AUTO}}
case "$cuda" in
  ON | OFF | AUTO) ;;
  *) echo "setup.sh: SHARDTOPK_CUDA='$cuda' is not ON, OFF or AUTO" >&2; exit 2 ;;
esac
if [[ -n "$cached" && "$cached" == "$cuda" ]]; then
  echo "== $BUILD_DIR is configured (SHARDTOPK_CUDA=$cuda): building in it"
else
  echo "== configuring $BUILD_DIR (SHARDTOPK_CUDA=$cuda)"
  mkdir -p "$BUILD_DIR"
  launcher=()
  if command -v ccache >/dev/null 2>&1; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDTOPK_CUDA="$cuda" \
    -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" "${launcher[@]}" >"$BUILD_DIR/configure.log" 2>&1 ||
    { cat "$BUILD_DIR/configure.log"; exit 1; }
  grep -E "shardtopk:" "$BUILD_DIR/configure.log" || true
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
echo "== building ${*:-everything} ($(nproc) jobs)"
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
echo "== built in $BUILD_DIR${*:+: $*}"

# The Python interpreter: the one the module is built for (it has numpy; the module loads into
# that Python version only). launch/python.sh runs it with $BUILD_DIR/python on its path. When the
# module is built, `import shardtopk` also works in that interpreter directly, through a .pth file
# in its user site-packages naming $BUILD_DIR/python (remove the file to undo; SHARDTOPK_PTH=0
# skips it); where user site-packages are off (a virtual environment), the PYTHONPATH line to use
# is printed instead.
py=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
if [[ -z "$py" ]]; then
  echo "== Python module: not configured ($(grep -m1 -o 'Python module OFF.*' "$BUILD_DIR/configure.log" 2>/dev/null || echo 'see CMake output'))"
elif ls "$BUILD_DIR"/python/shardtopk*.so >/dev/null 2>&1; then
  moddir=$(cd "$BUILD_DIR/python" && pwd)
  site=""
  if [[ "${SHARDTOPK_PTH:-1}" != 0 ]] && "$py" -c 'import site, sys; sys.exit(0 if site.ENABLE_USER_SITE else 1)'; then
    site=$("$py" -m site --user-site)
  fi
  was=""
  [[ -n "$site" && -f "$site/shardtopk-build.pth" ]] && was=$(head -n 1 "$site/shardtopk-build.pth")
  if [[ -n "$site" ]] && mkdir -p "$site" && echo "$moddir" > "$site/shardtopk-build.pth"; then
    echo "== Python: $py (launch/python.sh runs it); import shardtopk: $site/shardtopk-build.pth names $moddir"
    # One file for the user: another clone's build it named is no longer imported.
    if [[ -n "$was" && "$was" != "$moddir" ]]; then
      echo "   (it named $was, another build, before: that one is no longer what import shardtopk finds; SHARDTOPK_PTH=0 leaves the file alone)"
    fi
  else
    echo "== Python: $py (launch/python.sh runs it); import shardtopk: export PYTHONPATH=$moddir\${PYTHONPATH:+:\$PYTHONPATH}"
  fi
else
  echo "== Python: $py (launch/python.sh runs it; the module: launch/setup.sh shardtopk_python)"
fi
