#pragma once
/// @file config.hpp
/// YAML configuration → validated struct.
///
/// Keys (all optional except corpus.path):
/// | key                 | type   | default                         | allowed                         |
/// |---------------------|--------|---------------------------------|---------------------------------|
/// | corpus.path         | string | (required)                      | an HDF5 file                    |
/// | corpus.dataset      | string | train                           | dataset path, e.g. emb/vectors  |
/// | corpus.ids_dataset  | string | "" (ids = row positions)        | int64 [N], unique               |
/// | search.metric       | string | auto: file attr `distance`, else inner_product | inner_product, cosine, l2, auto (¹) |
/// | search.k_max        | int    | 1024                            | 1 .. 1048576                    |
/// | search.batch_max    | int    | 64                              | 1 .. 1048576                    |
/// | engine.backend      | string | auto                            | auto, cpu, cuda                 |
/// | engine.dtype        | string | float32                         | float32, float16, bfloat16      |
/// | engine.threads      | int    | 0 (= cores ÷ ranks on the node) | 0 .. 4096                       |
/// | engine.read_chunk_rows | int | 65536                           | 1 .. 2^31                       |
/// | engine.cuda_graphs  | bool   | true                            | replay searches from CUDA graphs |
/// | engine.scan_l2_hints | bool  | true                            | batch-1 scan L2 hints (CUDA)    |
/// | engine.scan_rows    | string | auto                            | auto, 2 (batch-1 rows per warp) |
/// | engine.scan_schedule | string | auto                           | auto, blocked, persistent       |
/// | engine.search_path  | string | auto                            | auto, scan, gemm (tests)        |
/// | engine.cpu_isa      | string | auto                            | auto, avx512, avx2, portable    |
/// | comm.backend        | string | auto                            | auto, mpi, nccl                 |
/// | comm.timeout_s      | number | 60                              | > 0                             |
/// | service.host        | string | 127.0.0.1                       | address `serve` listens on      |
/// | service.port        | int    | 8080                            | 0 .. 65535 (0: any free port)   |
/// | service.batch_window_us | int | 300                            | 0 .. 1000000 (micro-batching)   |
/// | service.max_body_bytes | int | 67108864                        | 1024 .. 2^32 (larger: 413)      |
/// | service.threads     | int    | 128                             | 1 .. 4096 HTTP worker threads   |
/// | testing.fault       | string | "" (none)                       | stall:R:B:S, exit:R:B, fail:R:B (fault-injection builds only) |
///
/// Booleans: true/false (also yes/no, on/off, 1/0). docs/OPERATIONS.md explains the engine.*
/// tuning keys and testing.fault.
///
/// (¹) search.metric also accepts the ann-benchmarks distance names as deprecated aliases:
///     euclidean = l2, angular = cosine, dot = ip = inner_product. They work, and each use adds a
///     message to Config::warnings (the command line prints it on rank 0). Files keep using these
///     names in their `distance` attribute, which is read as it is, without a warning.

#include <optional>
#include <string>
#include <vector>

#include "shardtopk/engine.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk {

struct CorpusConfig {
  std::string path;
  std::string dataset = "train";
  std::string ids_dataset;  ///< empty: global id = row position
};

struct SearchConfig {
  std::optional<Metric> metric;  ///< unset: taken from the corpus file (`distance` attribute)
  int k_max = 1024;
  int batch_max = 64;
};

struct EngineConfig {
  EngineBackend backend = EngineBackend::kAuto;
  Dtype dtype = Dtype::kFloat32;
  int threads = 0;  ///< 0: hardware cores ÷ ranks on this node
  long long read_chunk_rows = 65536;
  // Tuning and test switches (EngineOptions).
  bool cuda_graphs = true;
  bool scan_l2_hints = true;
  ScanRows scan_rows = ScanRows::kAuto;
  ScanSchedule scan_schedule = ScanSchedule::kAuto;
  SearchPath search_path = SearchPath::kAuto;
  CpuIsa cpu_isa = CpuIsa::kAuto;
};

/// A fault to inject (tests of DESIGN.md invariant 7; builds with SHARDTOPK_FAULT_INJECTION only):
/// rank `rank` stalls `seconds` before, exits (code 17) during, or fails (throws) in its local
/// search of batch number `batch` (0-based, counted per index).
struct FaultSpec {
  enum Kind { kNone, kStall, kExit, kFail } kind = kNone;
  int rank = -1;
  long long batch = -1;
  double seconds = 0;
  std::string text;  ///< as configured, for log lines
};

struct TestingConfig {
  FaultSpec fault;
};

struct CommConfig {
  CommBackend backend = CommBackend::kAuto;
  double timeout_s = 60.0;
};

/// `shardtopk serve` (rank 0's HTTP front end).
struct ServiceConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                         ///< 0: any free port (the bound port is logged)
  int batch_window_us = 300;               ///< a lone request waits at most this long for company
  long long max_body_bytes = 64ll << 20;   ///< larger request bodies get 413
  int threads = 128;                       ///< HTTP worker threads: one per open (keep-alive) connection
};

struct Config {
  CorpusConfig corpus;
  SearchConfig search;
  EngineConfig engine;
  CommConfig comm;
  ServiceConfig service;
  TestingConfig testing;
  std::string source;  ///< where it came from (file name or "<string>"), for messages
  std::vector<std::string> warnings;  ///< deprecated spellings accepted while parsing, one message each
};

/// Parse YAML text. Unknown keys, wrong types and out-of-range values throw Error naming the
/// key, the value and what is allowed. `source` names the text in messages.
Config parse_config(const std::string& yaml_text, const std::string& source = "<string>");

/// Read and parse a YAML file. @throws Error when unreadable or invalid.
Config load_config(const std::string& path);

/// Apply one `key=value` override (same keys and checks as the file), e.g. "search.k_max=100".
/// @throws Error naming the key and value.
void apply_override(Config& cfg, const std::string& key_equals_value);

/// Validate cross-field constraints (e.g. corpus.path set). @throws Error.
void validate(const Config& cfg);

/// The engine options of a config, for the engine on `device` with `threads` workers.
EngineOptions engine_options(const Config& cfg, int device, int threads);

/// Whether this build honours testing.fault (CMake option SHARDTOPK_FAULT_INJECTION).
bool fault_injection_built();

/// Parse a testing.fault value. @throws Error naming `what` and the text.
FaultSpec parse_fault(const std::string& text, const std::string& what);

/// Render the config as YAML (for logs and result attributes).
std::string to_yaml(const Config& cfg);

}  // namespace shardtopk
