#!/usr/bin/env bash
# Install the build dependencies (Debian 12 / Ubuntu 24.04) and build shardtopk into build/.
#   launch/setup.sh            # apt packages + configure + build
#   SKIP_APT=1 launch/setup.sh # build only
# CUDA: the CUDA engine and NCCL communicator are built when nvcc is found (PATH or
# /usr/local/cuda); force with SHARDTOPK_CUDA=ON|OFF. BUILD_DIR defaults to build.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build
  libopenmpi-dev openmpi-bin libhdf5-dev libyaml-cpp-dev libgtest-dev libgmock-dev
  libcli11-dev nlohmann-json3-dev libcpp-httplib-dev libspdlog-dev libfmt-dev zlib1g-dev
  dataset-fashion-mnist python3 python3-numpy python3-h5py python3-matplotlib)
. launch/apt_install.sh
apt_install_missing "${PACKAGES[@]}"

BUILD_DIR=${BUILD_DIR:-build}
echo "== configuring $BUILD_DIR (SHARDTOPK_CUDA=${SHARDTOPK_CUDA:-AUTO})"
mkdir -p "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSHARDTOPK_CUDA="${SHARDTOPK_CUDA:-AUTO}" \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" >"$BUILD_DIR/configure.log" 2>&1 ||
  { cat "$BUILD_DIR/configure.log"; exit 1; }
grep -E "shardtopk:" "$BUILD_DIR/configure.log" || true
echo "== building ($(nproc) jobs)"
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "== built $BUILD_DIR/shardtopk"
