#!/usr/bin/env bash
# Copies the dependencies installed here that a GPU machine may lack into .vendor/ (git-ignored),
# to be carried there; CMake uses them through SHARDTOPK_VENDOR_DIR (bench/gpu_run.sh passes it):
#   .vendor/include (one subfolder per library): the header-only CLI11, nlohmann/json, spdlog, fmt (spdlog and fmt then used
#     header-only: SPDLOG_HEADER_ONLY, FMT_HEADER_ONLY; see cmake/Dependencies.cmake), cpp-httplib's
#     httplib.h (the test and benchmark client), and libmicrohttpd's microhttpd.h;
#   .vendor/lib: libmicrohttpd.so.12 (the `serve` front end; Debian 12's 0.9.75, which needs
#     libgnutls.so.30: Ubuntu 24.04 has it) and libsimdjson.so.14 (its JSON reader; Debian 12's
#     3.0.1, with its header in .vendor/include/simdjson) and libdeflate.so.0 (the HDF5 reader's
#     inflater; Debian 12's 1.14, header in .vendor/include/libdeflate), found at run time through
#     the build's RPATH;
#   .vendor/include/gnutls: GnuTLS's headers (the service's TLS checks and key digests link the
#     system's libgnutls.so.30, the library libmicrohttpd needs anyway).
#
# usage: bench/pack_vendor.sh            (about 3 MB)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST="$ROOT/.vendor/include"
SRC=${VENDOR_SRC:-/usr/include}
mkdir -p "$DEST"
# One subfolder per library (cmake/Dependencies.cmake says why): cli/CLI, json/nlohmann,
# spdlog/{spdlog,fmt}, httplib/httplib.h, microhttpd/microhttpd.h, simdjson/simdjson.h, libdeflate/libdeflate.h,
# gnutls/gnutls.
rm -rf "${DEST:?}"/*
for pair in cli:CLI json:nlohmann spdlog:spdlog spdlog:fmt; do
  sub=${pair%%:*} d=${pair#*:}
  if [[ ! -d "$SRC/$d" ]]; then
    echo "pack_vendor: $SRC/$d is missing; install libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev" >&2
    exit 1
  fi
  mkdir -p "$DEST/$sub"
  cp -a "$SRC/$d" "$DEST/$sub/"
done
# Header-only fmt needs its implementation header; spdlog header-only needs its -inl.h files.
for f in spdlog/fmt/format-inl.h spdlog/spdlog/spdlog-inl.h; do
  [[ -f "$DEST/$f" ]] || { echo "pack_vendor: $DEST/$f missing: header-only build impossible" >&2; exit 1; }
done
# cpp-httplib: Debian's /usr/include/httplib.h is a split header whose implementation lives in
# libcpp-httplib.so (built with OpenSSL/brotli), useless without that library; carry the single
# header of the same version (0.11.4) from third_party/, which CMake uses header-only.
HTTPLIB=$ROOT/third_party/cpp-httplib/httplib.h
if [[ -f "$SRC/httplib.h" ]] && grep -q "inline bool Server::listen" "$SRC/httplib.h"; then HTTPLIB=$SRC/httplib.h; fi
grep -q "inline bool Server::listen" "$HTTPLIB" || { echo "pack_vendor: $HTTPLIB is not a single-header httplib" >&2; exit 1; }
mkdir -p "$DEST/httplib" && cp "$HTTPLIB" "$DEST/httplib/httplib.h"
# A library carried as its header and its shared library (the soname file, not the -dev
# symlink): carry_lib SUBDIR HEADER SONAME PACKAGE.
LIBDIR=${VENDOR_LIBDIR:-/usr/lib/x86_64-linux-gnu}
mkdir -p "$ROOT/.vendor/lib"
carry_lib() {
  local sub=$1 header=$2 soname=$3 package=$4 so
  so=$(readlink -f "$LIBDIR/$soname" 2>/dev/null || true)
  if [[ ! -f "$SRC/$header" || -z "$so" || ! -f "$so" ]]; then
    echo "pack_vendor: $SRC/$header or $LIBDIR/$soname is missing; install $package" >&2
    exit 1
  fi
  mkdir -p "$DEST/$sub" && cp "$SRC/$header" "$DEST/$sub/$header"
  cp "$so" "$ROOT/.vendor/lib/$soname"
}
grep -q "MHD_VERSION 0x0009" "$SRC/microhttpd.h" 2>/dev/null \
  || { echo "pack_vendor: $SRC/microhttpd.h is missing or not libmicrohttpd 0.9.x; install libmicrohttpd-dev" >&2; exit 1; }
carry_lib microhttpd microhttpd.h libmicrohttpd.so.12 libmicrohttpd-dev
carry_lib simdjson simdjson.h libsimdjson.so.14 libsimdjson-dev
carry_lib libdeflate libdeflate.h libdeflate.so.0 libdeflate-dev
# GnuTLS headers (3.7, Debian 12's libgnutls28-dev; the ABI of libgnutls.so.30).
[[ -f "$SRC/gnutls/gnutls.h" ]] || { echo "pack_vendor: $SRC/gnutls/gnutls.h is missing; install libgnutls28-dev" >&2; exit 1; }
mkdir -p "$DEST/gnutls" && cp -a "$SRC/gnutls" "$DEST/gnutls/"
echo "pack_vendor: $(du -sh "$ROOT/.vendor" | cut -f1) in $ROOT/.vendor (include: cli/ json/ spdlog/ httplib/ microhttpd/ simdjson/ libdeflate/ gnutls/; lib: libmicrohttpd.so.12 libsimdjson.so.14 libdeflate.so.0)"
