# Finds the dependencies and wraps each in an interface target, so that the rest of the build
# does not care whether a package came from the system or from the header-only fallback folder
# (SHARDTOPK_VENDOR_DIR, filled by bench/pack_vendor.sh for GPU machines without the packages).
# The folder holds one subfolder per library (cli/, json/, spdlog/ with fmt, httplib/,
# microhttpd/), so a target sees only the fallback headers of the libraries it links: a shared
# folder would let a system nlohmann/json and the fallback one meet in one program (two ABI
# namespaces, undefined nlohmann::json_abi_v3_11_N symbols at link time).
find_package(Threads REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)

find_package(HDF5 REQUIRED COMPONENTS C)
add_library(shardtopk_hdf5 INTERFACE)
target_include_directories(shardtopk_hdf5 INTERFACE ${HDF5_INCLUDE_DIRS})
target_link_libraries(shardtopk_hdf5 INTERFACE ${HDF5_C_LIBRARIES})
target_compile_definitions(shardtopk_hdf5 INTERFACE ${HDF5_C_DEFINITIONS} ${HDF5_DEFINITIONS})

find_package(yaml-cpp REQUIRED)
add_library(shardtopk_yaml INTERFACE)
if(TARGET yaml-cpp::yaml-cpp)      # yaml-cpp 0.8
  target_link_libraries(shardtopk_yaml INTERFACE yaml-cpp::yaml-cpp)
elseif(TARGET yaml-cpp)            # yaml-cpp 0.7 (Debian 12)
  target_link_libraries(shardtopk_yaml INTERFACE yaml-cpp)
else()
  target_include_directories(shardtopk_yaml INTERFACE ${YAML_CPP_INCLUDE_DIR})
  target_link_libraries(shardtopk_yaml INTERFACE ${YAML_CPP_LIBRARIES})
endif()

set(_vendor_ok OFF)
set(SHARDTOPK_USES_VENDOR OFF)
if(EXISTS "${SHARDTOPK_VENDOR_DIR}")
  set(_vendor_ok ON)
endif()
get_filename_component(_vendor_lib "${SHARDTOPK_VENDOR_DIR}/../lib" ABSOLUTE)

# A shared library carried by bench/pack_vendor.sh instead of a system package: `target` (an
# INTERFACE library) links .vendor/lib/SONAME (found at run time through the build's RPATH) with
# the headers of .vendor/include/SUBDIR, whose HEADER must be there. Without them: a fatal error
# saying which Debian package to install (`hint` and any further arguments, joined).
macro(shardtopk_use_vendored target subdir header soname hint)
  if(_vendor_ok AND EXISTS "${SHARDTOPK_VENDOR_DIR}/${subdir}/${header}" AND EXISTS "${_vendor_lib}/${soname}")
    set(SHARDTOPK_USES_VENDOR ON)
    add_library(${target}_vendor SHARED IMPORTED)
    set_target_properties(${target}_vendor PROPERTIES IMPORTED_LOCATION "${_vendor_lib}/${soname}"
                          INTERFACE_INCLUDE_DIRECTORIES "${SHARDTOPK_VENDOR_DIR}/${subdir}")
    target_link_libraries(${target} INTERFACE ${target}_vendor)
    message(STATUS "shardtopk: ${soname} from ${_vendor_lib}")
  else()
    message(FATAL_ERROR "${hint}" ${ARGN} " (or run bench/pack_vendor.sh on a Debian 12 machine and carry .vendor/)")
  endif()
endmacro()

# An INTERFACE target for a library that pkg-config finds (`module`, version spec included, as
# pkg_check_modules takes it; `prefix` its result variables), or else the copy that
# bench/pack_vendor.sh carries (shardtopk_use_vendored, whose arguments follow).
macro(shardtopk_pkg_or_vendored target prefix module label subdir header soname hint)
  if(PkgConfig_FOUND)
    pkg_check_modules(${prefix} QUIET IMPORTED_TARGET ${module})
  endif()
  add_library(${target} INTERFACE)
  if(${prefix}_FOUND)
    target_link_libraries(${target} INTERFACE PkgConfig::${prefix})
    message(STATUS "shardtopk: ${label} ${${prefix}_VERSION} (system library)")
  else()
    shardtopk_use_vendored(${target} ${subdir} ${header} ${soname} "${hint}" ${ARGN})
  endif()
endmacro()

# CLI11 (header-only)
find_package(CLI11 CONFIG QUIET)
add_library(shardtopk_cli INTERFACE)
if(TARGET CLI11::CLI11)
  target_link_libraries(shardtopk_cli INTERFACE CLI11::CLI11)
elseif(_vendor_ok AND EXISTS "${SHARDTOPK_VENDOR_DIR}/cli/CLI/CLI.hpp")
  target_include_directories(shardtopk_cli INTERFACE "${SHARDTOPK_VENDOR_DIR}/cli")
  message(STATUS "shardtopk: CLI11 from ${SHARDTOPK_VENDOR_DIR}/cli")
else()
  message(FATAL_ERROR "CLI11 not found: apt-get install libcli11-dev (or fill SHARDTOPK_VENDOR_DIR)")
endif()

# nlohmann/json (header-only)
find_package(nlohmann_json 3 CONFIG QUIET)
add_library(shardtopk_json INTERFACE)
if(TARGET nlohmann_json::nlohmann_json)
  target_link_libraries(shardtopk_json INTERFACE nlohmann_json::nlohmann_json)
elseif(_vendor_ok AND EXISTS "${SHARDTOPK_VENDOR_DIR}/json/nlohmann/json.hpp")
  target_include_directories(shardtopk_json INTERFACE "${SHARDTOPK_VENDOR_DIR}/json")
  set(SHARDTOPK_USES_VENDOR ON)
  message(STATUS "shardtopk: nlohmann/json from ${SHARDTOPK_VENDOR_DIR}/json")
else()
  message(FATAL_ERROR "nlohmann/json not found: apt-get install nlohmann-json3-dev (or fill SHARDTOPK_VENDOR_DIR)")
endif()

# spdlog + fmt (compiled packages, or header-only from the fallback folder)
find_package(spdlog CONFIG QUIET)
add_library(shardtopk_fmtlog INTERFACE)
if(TARGET spdlog::spdlog)
  target_link_libraries(shardtopk_fmtlog INTERFACE spdlog::spdlog)
elseif(_vendor_ok AND EXISTS "${SHARDTOPK_VENDOR_DIR}/spdlog/spdlog/spdlog.h" AND EXISTS "${SHARDTOPK_VENDOR_DIR}/spdlog/fmt/format.h")
  target_include_directories(shardtopk_fmtlog INTERFACE "${SHARDTOPK_VENDOR_DIR}/spdlog")
  set(SHARDTOPK_USES_VENDOR ON)
  target_compile_definitions(shardtopk_fmtlog INTERFACE SPDLOG_HEADER_ONLY SPDLOG_FMT_EXTERNAL FMT_HEADER_ONLY)
  message(STATUS "shardtopk: spdlog/fmt header-only from ${SHARDTOPK_VENDOR_DIR}/spdlog")
else()
  message(FATAL_ERROR "spdlog not found: apt-get install libspdlog-dev (or fill SHARDTOPK_VENDOR_DIR)")
endif()

# cpp-httplib (the `serve` front end and bench_load). Debian's libcpp-httplib-dev ships a split
# header (declarations only) plus a compiled libcpp-httplib built with OpenSSL, zlib and brotli;
# its pkg-config Cflags define CPPHTTPLIB_{OPENSSL,ZLIB,BROTLI}_SUPPORT, which must match the
# library, so we take them from pkg-config. Without the package: the single-header upstream
# httplib.h of the same version (0.11.4, third_party/cpp-httplib, copied into the fallback folder
# by bench/pack_vendor.sh), header-only, compression off, HTTPS when OpenSSL's headers are found.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(SHARDTOPK_HTTPLIB QUIET IMPORTED_TARGET cpp-httplib)
endif()
add_library(shardtopk_httplib INTERFACE)
if(SHARDTOPK_HTTPLIB_FOUND)
  target_link_libraries(shardtopk_httplib INTERFACE PkgConfig::SHARDTOPK_HTTPLIB Threads::Threads)
  message(STATUS "shardtopk: cpp-httplib ${SHARDTOPK_HTTPLIB_VERSION} (system library)")
else()
  set(_httplib_dir "")
  foreach(_d "${SHARDTOPK_VENDOR_DIR}/httplib" "${CMAKE_SOURCE_DIR}/third_party/cpp-httplib")
    if(EXISTS "${_d}/httplib.h")
      file(STRINGS "${_d}/httplib.h" _impl REGEX "inline bool Server::listen" LIMIT_COUNT 1)
      if(_impl)  # a single header with the implementation, not Debian's split header
        set(_httplib_dir "${_d}")
        break()
      endif()
    endif()
  endforeach()
  if(NOT _httplib_dir)
    message(FATAL_ERROR "cpp-httplib not found: apt-get install libcpp-httplib-dev (or run bench/pack_vendor.sh)")
  endif()
  target_include_directories(shardtopk_httplib SYSTEM INTERFACE "${_httplib_dir}")
  set(SHARDTOPK_USES_VENDOR ON)
  # poll() instead of select(): select cannot watch a descriptor past FD_SETSIZE (1024), so a
  # client holding thousands of sockets (bench_load --idle) failed every new connection.
  target_compile_definitions(shardtopk_httplib INTERFACE CPPHTTPLIB_USE_POLL)
  target_link_libraries(shardtopk_httplib INTERFACE Threads::Threads)
  # HTTPS clients (bench_load, the tests) where OpenSSL's headers are installed (libssl-dev).
  find_package(OpenSSL 1.1.1 QUIET COMPONENTS SSL Crypto)
  if(OPENSSL_FOUND)
    target_compile_definitions(shardtopk_httplib INTERFACE CPPHTTPLIB_OPENSSL_SUPPORT)
    target_link_libraries(shardtopk_httplib INTERFACE OpenSSL::SSL OpenSSL::Crypto)
  endif()
  message(STATUS "shardtopk: cpp-httplib header-only from ${_httplib_dir} (HTTPS ${OPENSSL_FOUND})")
endif()

# libmicrohttpd (the `serve` HTTP front end: event loops, limits; src/service/http_front_end.hpp
# says why not evhttp). Debian's libmicrohttpd-dev through pkg-config; without it (a GPU machine
# without the -dev package): the header and the shared library that bench/pack_vendor.sh copies
# from a Debian 12 machine into .vendor/include and .vendor/lib (found through the build's RPATH;
# the library needs libgnutls.so.30, present on Debian 12 and Ubuntu 24.04).
shardtopk_pkg_or_vendored(shardtopk_mhd SHARDTOPK_MHD libmicrohttpd>=0.9.75 libmicrohttpd microhttpd microhttpd.h
                          libmicrohttpd.so.12 "libmicrohttpd not found: apt-get install libmicrohttpd-dev")
if(NOT SHARDTOPK_MHD_FOUND)
  target_link_libraries(shardtopk_mhd INTERFACE Threads::Threads)
endif()

# simdjson (the `serve` front end reads JSON search bodies with it; src/service/json_search.cpp).
# Debian's libsimdjson-dev through its CMake package; without it (a GPU machine without the -dev
# package): the header and the shared library that bench/pack_vendor.sh copies from a Debian 12
# machine into .vendor/include/simdjson and .vendor/lib (found through the build's RPATH).
find_package(simdjson CONFIG QUIET)
add_library(shardtopk_simdjson INTERFACE)
if(TARGET simdjson::simdjson)
  target_link_libraries(shardtopk_simdjson INTERFACE simdjson::simdjson)
  message(STATUS "shardtopk: simdjson ${simdjson_VERSION} (system library)")
else()
  shardtopk_use_vendored(shardtopk_simdjson simdjson simdjson.h libsimdjson.so.14
                         "simdjson not found: apt-get install libsimdjson-dev (Debian 12, Ubuntu 24.04; the `serve` "
                         "front end parses JSON request bodies with it)")
  # the ABI the library was built with (Debian's CMake package sets it)
  target_compile_definitions(shardtopk_simdjson INTERFACE SIMDJSON_THREADS_ENABLED=1)
endif()

# libdeflate (the HDF5 reader inflates deflate-compressed chunks with it; src/io/row_reader.cpp).
# Debian's libdeflate-dev through pkg-config; without it (a GPU machine without the -dev package):
# the header and the shared library that bench/pack_vendor.sh copies from a Debian 12 machine into
# .vendor/include/libdeflate and .vendor/lib (found through the build's RPATH).
shardtopk_pkg_or_vendored(shardtopk_deflate SHARDTOPK_DEFLATE libdeflate libdeflate libdeflate libdeflate.h
                          libdeflate.so.0 "libdeflate not found: apt-get install libdeflate-dev (Debian 12, Ubuntu 24.04; "
                          "the HDF5 reader inflates compressed chunks with it)")

# GnuTLS (the service's TLS checks, SHA-256 of API keys, random keys; libmicrohttpd does the TLS
# itself through the same library). Debian's libgnutls28-dev through pkg-config; without it: the
# headers that bench/pack_vendor.sh copies into .vendor/include/gnutls and the system's
# libgnutls.so.30, which libmicrohttpd.so.12 needs anyway.
if(PkgConfig_FOUND)
  pkg_check_modules(SHARDTOPK_GNUTLS QUIET IMPORTED_TARGET gnutls>=3.6)
endif()
add_library(shardtopk_gnutls INTERFACE)
if(SHARDTOPK_GNUTLS_FOUND)
  target_link_libraries(shardtopk_gnutls INTERFACE PkgConfig::SHARDTOPK_GNUTLS)
  message(STATUS "shardtopk: GnuTLS ${SHARDTOPK_GNUTLS_VERSION} (system library)")
else()
  find_library(_gnutls_so NAMES libgnutls.so.30 gnutls)
  if(_vendor_ok AND EXISTS "${SHARDTOPK_VENDOR_DIR}/gnutls/gnutls/gnutls.h" AND _gnutls_so)
    target_include_directories(shardtopk_gnutls SYSTEM INTERFACE "${SHARDTOPK_VENDOR_DIR}/gnutls")
    target_link_libraries(shardtopk_gnutls INTERFACE "${_gnutls_so}")
    set(SHARDTOPK_USES_VENDOR ON)
    message(STATUS "shardtopk: GnuTLS headers from ${SHARDTOPK_VENDOR_DIR}/gnutls, library ${_gnutls_so}")
  else()
    message(FATAL_ERROR "GnuTLS not found: apt-get install libgnutls28-dev (or run bench/pack_vendor.sh on a Debian 12 "
                        "machine and carry .vendor/)")
  endif()
endif()
