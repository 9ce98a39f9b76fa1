#!/usr/bin/env bash
# Copies the header-only dependencies installed here (CLI11, nlohmann/json, spdlog, fmt, and
# cpp-httplib's httplib.h) into
# .vendor/include (git-ignored), so they can be carried to a GPU machine that lacks the packages;
# CMake uses them through SHARDTOPK_VENDOR_DIR (bench/gpu_run.sh passes it). spdlog and fmt are
# then used header-only (SPDLOG_HEADER_ONLY, FMT_HEADER_ONLY; see cmake/Dependencies.cmake).
#
# usage: bench/pack_vendor.sh            (about 2.5 MB)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST="$ROOT/.vendor/include"
SRC=${VENDOR_SRC:-/usr/include}
mkdir -p "$DEST"
for d in CLI nlohmann spdlog fmt; do
  if [[ ! -d "$SRC/$d" ]]; then
    echo "pack_vendor: $SRC/$d is missing; install libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev" >&2
    exit 1
  fi
  rm -rf "${DEST:?}/$d"
  cp -a "$SRC/$d" "$DEST/"
done
# Header-only fmt needs its implementation header; spdlog header-only needs its -inl.h files.
for f in fmt/format-inl.h spdlog/spdlog-inl.h; do
  [[ -f "$DEST/$f" ]] || { echo "pack_vendor: $DEST/$f missing: header-only build impossible" >&2; exit 1; }
done
# cpp-httplib: Debian's /usr/include/httplib.h is a split header whose implementation lives in
# libcpp-httplib.so (built with OpenSSL/brotli), useless without that library; carry the single
# header of the same version (0.11.4) from third_party/, which CMake uses header-only.
HTTPLIB=$ROOT/third_party/cpp-httplib/httplib.h
if [[ -f "$SRC/httplib.h" ]] && grep -q "inline bool Server::listen" "$SRC/httplib.h"; then HTTPLIB=$SRC/httplib.h; fi
grep -q "inline bool Server::listen" "$HTTPLIB" || { echo "pack_vendor: $HTTPLIB is not a single-header httplib" >&2; exit 1; }
cp "$HTTPLIB" "$DEST/httplib.h"
echo "pack_vendor: $(du -sh "$ROOT/.vendor" | cut -f1) in $DEST (CLI nlohmann spdlog fmt httplib.h)"
