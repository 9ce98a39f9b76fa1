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
/// | corpus.attributes   | list   | [] (no attributes)              | dataset paths, each [N] integers (int8..int64, uint8..uint32) or floats, read as int64/float64; names (last path component) unique; at most 64 |
/// | search.metric       | string | auto: file attr `distance`, else inner_product | inner_product, cosine, l2, auto (¹) |
/// | search.k_max        | int    | 1024                            | 1 .. 1048576                    |
/// | search.batch_max    | int    | 64                              | 1 .. 1048576                    |
/// | search.max_filters  | int    | 64                              | 1 .. 65536 distinct filters per batch (a row mask each) |
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
/// | io.direct_reads     | bool   | true                            | true, false (false: H5Dread only) |
/// | io.f16c             | bool   | true                            | true, false (false: portable float16 conversion) |
/// | comm.backend        | string | auto                            | auto, mpi, nccl                 |
/// | comm.timeout_s      | number | 60                              | > 0                             |
/// | service.host        | string | 127.0.0.1                       | address `serve` listens on      |
/// | service.port        | int    | 8080                            | 0 .. 65535 (0: any free port)   |
/// | service.batch_window_us | int | 300                            | 0 .. 1000000 (micro-batching)   |
/// | service.max_body_bytes | int | 0 (derived from batch_max × dim) | 0, or 1024 .. 2^32 (larger: 413) |
/// | service.io_threads  | int    | 4                               | 1 .. 64 HTTP event-loop threads |
/// | service.max_connections | int | 16384                          | 1 .. 1048576 open connections   |
/// | service.idle_timeout_s | int | 30                              | 1 .. 86400 (idle/slow: closed)  |
/// | service.max_header_bytes | int | 16384                         | 1024 .. 1048576 (larger: 431)   |
/// | service.max_headers | int    | 100                             | 1 .. 10000 (more: 431)          |
/// | service.max_inflight_bytes | int | 0 (16 × the body limit, ≥ 16 MiB) | 0, or 65536 .. 2^40 (503) |
/// | service.drain_timeout_s | number | 1                           | 0 .. 3600 (SIGTERM drain)       |
/// | service.heartbeat_ms | int   | 100                             | 10 .. 60000 follower heartbeat  |
/// | service.heartbeat_timeout_ms | int | 10000                     | 20 .. 3600000, ≥ 2 × heartbeat_ms |
/// | service.threads     | int    | 0                               | deprecated: accepted, ignored   |
/// | storage.dir         | string | "" (no log: updates refused)    | write-ahead log + snapshots dir |
/// | storage.group_commit_window_us | int | 0                       | 0 .. 1000000 (wait for company) |
/// | storage.segment_bytes | int  | 67108864                        | 4096 .. 2^40 (log segment size) |
/// | storage.max_pending_bytes | int | 268435456                    | 4096 .. 2^40 (queued, unwritten)|
/// | storage.capacity_rows | int  | 0 (= shard rows + max(1024, shard rows / 4)) | 0 .. 2^31-1 slots per rank for updates (≥ its shard rows) |
/// | storage.snapshot_log_bytes | int | 0 (off)                     | 0 .. 2^40: after a write, snapshot once the log holds more bytes |
/// | storage.snapshot_interval_s | number | 0 (off)                  | 0 .. 31536000: after a write, snapshot once the current one is this old |
/// | storage.keep_snapshots | int | 1                               | 1 .. 1000 snapshots kept, with the log from the oldest on |
/// | storage.lock_wait_s | number | 30                              | 0 .. 86400: wait this long for another process's lock on storage.dir (one that is exiting) |
/// | testing.fault       | string | "" (none)                       | stall:R:B:S, exit:R:B, fail:R:B (fault-injection builds only) |
///
/// Booleans: true or false. docs/OPERATIONS.md explains the engine.*
/// tuning keys and testing.fault; docs/SERVING.md ("Limits") the service keys.
///
/// (¹) search.metric also accepts the ann-benchmarks distance names as deprecated aliases:
///     euclidean = l2, angular = cosine, dot = ip = inner_product. They work, and each use adds a
///     message to Config::warnings (the command line prints it on rank 0). Files keep using these
///     names in their `distance` attribute, which is read as it is, without a warning.

#include <optional>
#include <string>
#include <vector>

#include "shardtopk/types.hpp"

namespace shardtopk {

struct CorpusConfig {
  std::string path;
  std::string dataset = "train";
  std::string ids_dataset;  ///< empty: global id = row position
  /// Per-row attribute datasets that filters refer to (docs/FILTERS.md); an attribute's name is
  /// the last component of its path. As an override: comma-separated ("tenant,meta/year").
  std::vector<std::string> attributes;
};

struct SearchConfig {
  std::optional<Metric> metric;  ///< unset: taken from the corpus file (`distance` attribute)
  int k_max = 1024;
  int batch_max = 64;
  int max_filters = 64;  ///< distinct filters in one batch (each keeps a row mask: rows / 8 bytes)
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

/// Durable updates (docs/STORAGE.md): the write-ahead log's directory and its group commit.
struct StorageConfig {
  std::string dir;                             ///< "": no log, the corpus is read-only
  long long group_commit_window_us = 0;        ///< a queued record waits at most this long for company
  long long segment_bytes = 64ll << 20;        ///< a log segment is closed past this size
  long long max_pending_bytes = 256ll << 20;   ///< appenders wait while this much is queued
  /// Slots each rank reserves for rows (its shard's and upserted ones); 0: derived from the
  /// shard (rank_capacity_rows in ingest.hpp). Only with storage.dir set.
  long long capacity_rows = 0;
  /// Snapshot policy: once a write has committed and the log's segments hold more than this
  /// many bytes, the index takes a snapshot (ShardedIndex::snapshot_if_log_exceeds). 0: only
  /// on request (POST /v1/snapshot, snapshot()).
  long long snapshot_log_bytes = 0;
  /// Time policy: once a write has committed and the current snapshot (or, without one, the
  /// open of the directory) is this many seconds old, the index takes a snapshot. 0: off.
  double snapshot_interval_s = 0;
  /// Snapshots kept: the current one and the newest older ones, with the log segments from the
  /// oldest of them on (StorageOptions::keep_snapshots). 1: the current one only.
  long long keep_snapshots = 1;
  /// At start-up, wait up to this long for a lock on storage.dir held by another process (the
  /// orphaned ranks of a killed job hold it while they exit); then fail naming the holder.
  double lock_wait_s = 30;
};

struct TestingConfig {
  FaultSpec fault;
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
  int batch_window_us = 300;               ///< longest wait for company while other requests are being received
  long long max_body_bytes = 0;            ///< larger request bodies get 413; 0: derived from batch_max × dim
  int io_threads = 4;                      ///< HTTP event-loop threads (each serves many connections)
  int max_connections = 16384;             ///< open client connections; more wait in the listen backlog
  int idle_timeout_s = 30;                 ///< a connection silent this long is closed (keep-alive or mid-request)
  int max_header_bytes = 16384;            ///< request line + headers; larger: 431
  int max_headers = 100;                   ///< header fields per request; more: 431
  long long max_inflight_bytes = 0;        ///< request bodies held at once; over it: 503; 0: derived
  double drain_timeout_s = 1.0;            ///< SIGTERM: how long requests being received may still complete
  int heartbeat_ms = 100;                  ///< followers' liveness heartbeat interval to rank 0
  int heartbeat_timeout_ms = 10000;        ///< no heartbeat this long: the follower is stalled (a dead one is seen at once)
  int threads = 0;                         ///< deprecated (thread-per-connection front end); ignored
};

struct Config {
  CorpusConfig corpus;
  SearchConfig search;
  EngineConfig engine;
  IoConfig io;
  CommConfig comm;
  ServiceConfig service;
  StorageConfig storage;
  TestingConfig testing;
  std::string source;  ///< where it came from (file name or "<string>"), for messages
  std::vector<std::string> warnings;  ///< deprecated spellings accepted while parsing, one message each
};

/// Parse YAML text. Unknown keys, a key given twice, wrong types and out-of-range values throw
/// Error naming the key, the value and what is allowed. `source` names the text in messages.
Config parse_config(const std::string& yaml_text, const std::string& source = "<string>");

/// Read and parse a YAML file. @throws Error when unreadable or invalid.
Config load_config(const std::string& path);

/// Apply one `key=value` override (same keys and checks as the file), e.g. "search.k_max=100".
/// @throws Error naming the key and value.
void apply_override(Config& cfg, const std::string& key_equals_value);

/// Validate cross-field constraints (e.g. corpus.path set). @throws Error.
void validate(const Config& cfg);

/// Whether this build honours testing.fault (CMake option SHARDTOPK_FAULT_INJECTION).
bool fault_injection_built();

/// Parse a testing.fault value. @throws Error naming `what` and the text.
FaultSpec parse_fault(const std::string& text, const std::string& what);

/// Render the config as YAML (for logs and result attributes).
std::string to_yaml(const Config& cfg);

}  // namespace shardtopk
