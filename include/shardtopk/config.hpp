#pragma once
/// @file config.hpp
/// YAML configuration → validated struct.
///
/// Every key with its type, default and allowed values: docs/CONFIG.md (one table; the config
/// tests check that it lists exactly the keys parse_config knows). configs/example.yaml sets each
/// to its default. Booleans are true or false.
///
/// search.metric also accepts the ann-benchmarks distance names as deprecated aliases:
/// euclidean = l2, angular = cosine, dot = ip = inner_product. They work, and each use adds a
/// message to Config::warnings (the command line prints it on rank 0). Files keep using these
/// names in their `distance` attribute, which is read as it is, without a warning.

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
  FilterScan filter_scan = FilterScan::kAuto;
  bool column_orders = true;
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
  /// The start-up replay applies the log's records in steps of about this many bytes of planned
  /// writes: each step is merged into one engine write and one mask update per rank.
  long long replay_step_bytes = 64ll << 20;
  /// At start-up, wait up to this long for a lock on storage.dir held by another process (the
  /// orphaned ranks of a killed job hold it while they exit); then fail naming the holder.
  double lock_wait_s = 30;
};

struct TestingConfig {
  FaultSpec fault;
  /// Rows of every snapshot block (0: each sized for a step of about 1 ms); tests make a small
  /// corpus take many steps with it.
  long long snapshot_block_rows = 0;
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
  int poll_us = 100;                       ///< the index thread polls for requests this long before it sleeps
  /// An event loop whose only connection waits for a search polls for the answer this long
  /// (µs, from the search's submission) before it suspends the connection; one loop at a time;
  /// 0: it suspends at once; -1: 1000 where rank 0 may use 4 cores or more, else 0.
  int answer_poll_us = -1;
  long long max_body_bytes = 0;            ///< larger request bodies get 413; 0: derived from batch_max × dim
  int io_threads = 0;                      ///< HTTP event-loop threads (each serves many connections); 0: from the usable cores
  int max_connections = 16384;             ///< open client connections; more wait in the listen backlog
  int idle_timeout_s = 30;                 ///< a connection silent this long is closed (keep-alive or mid-request)
  /// How often (ms) every connection's socket is looked at for a client that closed while the
  /// server waits for more of its request (such a connection is then closed; docs/SERVING.md).
  int peer_check_ms = 1000;
  int max_header_bytes = 16384;            ///< request line + headers; larger: 431
  int max_headers = 100;                   ///< header fields per request; more: 431
  long long max_inflight_bytes = 0;        ///< request bodies held at once; over it: 503; 0: derived
  double drain_timeout_s = 1.0;            ///< SIGTERM: how long requests being received may still complete
  int heartbeat_ms = 100;                  ///< followers' liveness heartbeat interval to rank 0
  int heartbeat_timeout_ms = 10000;        ///< no heartbeat this long: the follower is stalled (a dead one is seen at once)
  int threads = 0;                         ///< deprecated (thread-per-connection front end); ignored
  /// HTTPS (libmicrohttpd over GnuTLS, TLS 1.2 and 1.3): both set, or neither (plain HTTP).
  std::string tls_cert_file;               ///< PEM: the server certificate, then its intermediates
  std::string tls_key_file;                ///< PEM: its private key (unencrypted; keep it mode 0600)
  /// API keys (`NAME ROLE SHA256 [rate=R] [burst=B]` per line); "": every route is open.
  std::string auth_keys_file;
  bool auth_open_metrics = false;          ///< with keys: /metrics answers without one
  bool auth_allow_open_writes = false;     ///< a writable service may listen beyond loopback without keys
  std::string audit_log;                   ///< "": no audit log
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
/// Error naming the key, the value and what is allowed, after "<source>:<line>: "; an unknown
/// key also gets the nearest valid name. `source` names the text in messages.
Config parse_config(const std::string& yaml_text, const std::string& source = "<string>");

/// Read and parse a YAML file. @throws Error when unreadable or invalid.
Config load_config(const std::string& path);

/// Apply one `key=value` override (same keys and checks as the file), e.g. "search.k_max=100".
/// @throws Error naming the key and value.
void apply_override(Config& cfg, const std::string& key_equals_value);

/// Every config key, dotted ("search.k_max"), in alphabetical order.
std::vector<std::string> config_keys();

/// Validate cross-field constraints (e.g. corpus.path set). @throws Error.
void validate(const Config& cfg);

/// Whether this build honours testing.fault (CMake option SHARDTOPK_FAULT_INJECTION).
bool fault_injection_built();

/// Parse a testing.fault value. @throws Error naming `what` and the text.
FaultSpec parse_fault(const std::string& text, const std::string& what);

/// Render the config as YAML (for logs and result attributes).
std::string to_yaml(const Config& cfg);

}  // namespace shardtopk
