#pragma once
// Storage's state, shared by storage.cpp (recovery, appends, replay) and snapshot.cpp (the
// snapshot protocol). Internal header.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "shardtopk/storage.hpp"
#include "storage/fs.hpp"
#include "storage/lock.hpp"
#include "storage/log_writer.hpp"

namespace shardtopk::storage {

inline constexpr const char* kManifestName = "MANIFEST.json";
inline constexpr const char* kLockName = "LOCK";
inline constexpr const char* kTempSuffix = ".tmp";

/// What MANIFEST.json says.
struct Manifest {
  std::int64_t dim = 0;
  Metric metric = Metric::kInnerProduct;
  std::string snapshot;  ///< file name in the directory; "" when none
  std::uint64_t seq = 0;
  /// The snapshot file's size in bytes and CRC-32C of all of it (bytes -1: not recorded).
  std::int64_t snapshot_bytes = -1;
  std::uint32_t snapshot_crc32c = 0;
  /// While there is no snapshot, the corpus file the log's records were planned against:
  /// its path (as configured, for messages), size in bytes and corpus_sample_crc32c() (bytes
  /// -1: not recorded).
  std::string corpus_path;
  std::int64_t corpus_bytes = -1;
  std::uint32_t corpus_sample_crc32c = 0;
  /// Row slots over all ranks the index was last started with (0: not recorded).
  std::int64_t capacity_rows = 0;
  /// While there is no snapshot, the content of the base the log's records were planned
  /// against (Storage::check_base; rows -1: not recorded).
  BaseIdentity base{-1, 0, 0, 0};
  /// A seq the log is known to have reached: its last durable seq when the directory was last
  /// closed or snapshotted (0: not recorded). Every record up to it was acknowledged, so a log
  /// that ends before it has lost acknowledged records.
  std::uint64_t log_seq = 0;
};

/// Bytes at each end of a corpus file that its identity's checksum covers (1 MiB).
inline constexpr std::uint64_t kCorpusSampleBytes = 1u << 20;
/// CRC-32C of the first and the last kCorpusSampleBytes of a file of `bytes` bytes (the whole
/// file when it is smaller than twice that). @throws Error naming the file.
std::uint32_t corpus_sample_crc32c(const std::string& path, std::uint64_t bytes);

std::string manifest_json(const Manifest& m);
/// @throws Error naming `path` when the text is not a valid manifest.
Manifest parse_manifest(const std::string& text, const std::string& path);
/// A 64-bit digest as 16 hex digits (JSON numbers that large lose bits in many readers).
std::string digest_text(std::uint64_t d);
/// A temporary file of an interrupted write: MANIFEST.json.tmp or snapshot-<seq>.h5.tmp.
bool is_temp_leftover(const std::string& name);
/// "snapshot-<seq, 20 digits>.h5".
std::string snapshot_name(std::uint64_t seq);
bool parse_snapshot_name(const std::string& name, std::uint64_t* seq);

}  // namespace shardtopk::storage

namespace shardtopk {

struct Storage::Impl {
  StorageOptions opt;
  std::optional<storage::DirLock> lock;
  RecoveryReport report;

  /// Held across each read-modify-write of MANIFEST.json (a snapshot's commit, record_capacity)
  /// so that neither loses the other's change.
  std::mutex manifest_mu;
  mutable std::mutex state_mu;  // manifest, snapshot_active, older_snapshots, retained
  storage::Manifest manifest;
  bool snapshot_active = false;
  /// Retention (StorageOptions::keep_snapshots): older snapshots kept (file names, oldest
  /// first) and the segments whose records are all ≤ the current snapshot's seq kept for them
  /// (oldest first; not part of the writer's log).
  std::vector<std::string> older_snapshots;
  std::vector<storage::SegmentInfo> retained;
  /// When the base was written: the snapshot file's modification time, or the open.
  std::chrono::system_clock::time_point base_time = std::chrono::system_clock::now();

  /// Replay reads segment files under a shared lock; removing them takes it exclusively.
  mutable std::shared_mutex files_mu;

  std::unique_ptr<storage::LogWriter> writer;

  /// This object made `opt.dir` (mkdir succeeded here, so no other process did), and the count
  /// of exceptions in flight when it did: an end while more are in flight is a failed start-up.
  /// Superseded files kept for finish_recovery() (StorageOptions::defer_cleanup): name, why.
  std::vector<std::pair<std::string, std::string>> superseded;
  bool created_dir = false;
  std::vector<std::string> created_parents;  ///< parents of dir the constructor created, deepest first
  int uncaught_at_open = 0;

  std::string path(const std::string& name) const { return opt.dir + "/" + name; }
};

}  // namespace shardtopk

namespace shardtopk::storage {

/// Removes the older snapshots beyond StorageOptions::keep_snapshots and the retained segments
/// whose records the oldest kept snapshot holds, then fsyncs the directory; returns the removed
/// paths. Called with state_mu held (and files_mu, once the writer runs).
std::vector<std::string> apply_retention(Storage::Impl& st);

}  // namespace shardtopk::storage
