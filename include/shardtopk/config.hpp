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
/// | search.metric       | string | from file attr `distance`, else inner_product | inner_product, cosine, l2 |
/// | search.k_max        | int    | 1024                            | 1 .. 1048576                    |
/// | search.batch_max    | int    | 64                              | 1 .. 1048576                    |
/// | engine.backend      | string | auto                            | auto, cpu, cuda                 |
/// | engine.dtype        | string | float32                         | float32, float16, bfloat16      |
/// | engine.threads      | int    | 0 (= cores ÷ ranks on the node) | 0 .. 4096                       |
/// | engine.read_chunk_rows | int | 65536                           | 1 .. 2^31                       |
/// | io.direct_reads     | bool   | true                            | true, false (false: H5Dread only) |
/// | io.f16c             | bool   | true                            | true, false (false: portable float16 conversion) |
/// | comm.backend        | string | auto                            | auto, mpi, nccl                 |
/// | comm.timeout_s      | number | 60                              | > 0                             |
/// | service.host        | string | 127.0.0.1                       | address `serve` listens on      |
/// | service.port        | int    | 8080                            | 0 .. 65535 (0: any free port)   |
/// | service.batch_window_us | int | 300                            | 0 .. 1000000 (micro-batching)   |
/// | service.max_body_bytes | int | 67108864                        | 1024 .. 2^32 (larger: 413)      |
/// | service.threads     | int    | 128                             | 1 .. 4096 HTTP worker threads   |

#include <optional>
#include <string>
#include <vector>

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
};

/// Corpus reading (ReadOptions in corpus_io.hpp). The read threads are engine.threads.
struct IoConfig {
  bool direct_reads = true;  ///< pread of proven contiguous/chunked bytes; false: every read through H5Dread
  bool f16c = true;          ///< F16C float16 conversion where the CPU has it (same bits either way)
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
  IoConfig io;
  CommConfig comm;
  ServiceConfig service;
  std::string source;  ///< where it came from (file name or "<string>"), for messages
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

/// Render the config as YAML (for logs and result attributes).
std::string to_yaml(const Config& cfg);

}  // namespace shardtopk
