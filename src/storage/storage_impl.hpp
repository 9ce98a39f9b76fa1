#pragma once
// Storage's state, shared by storage.cpp (recovery, appends, replay) and snapshot.cpp (the
// snapshot protocol). Internal header.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>

#include "shardtopk/storage.hpp"
#include "storage/fs.hpp"
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
};

std::string manifest_json(const Manifest& m);
/// @throws Error naming `path` when the text is not a valid manifest.
Manifest parse_manifest(const std::string& text, const std::string& path);
/// "snapshot-<seq, 20 digits>.h5".
std::string snapshot_name(std::uint64_t seq);
bool parse_snapshot_name(const std::string& name, std::uint64_t* seq);

}  // namespace shardtopk::storage

namespace shardtopk {

struct Storage::Impl {
  StorageOptions opt;
  std::optional<storage::DirLock> lock;
  RecoveryReport report;

  mutable std::mutex state_mu;  // manifest, snapshot_active
  storage::Manifest manifest;
  bool snapshot_active = false;

  /// Replay reads segment files under a shared lock; removing them takes it exclusively.
  mutable std::shared_mutex files_mu;

  std::unique_ptr<storage::LogWriter> writer;

  /// This object made `opt.dir` (mkdir succeeded here, so no other process did), and the count
  /// of exceptions in flight when it did: an end while more are in flight is a failed start-up.
  bool created_dir = false;
  int uncaught_at_open = 0;

  std::string path(const std::string& name) const { return opt.dir + "/" + name; }
};

}  // namespace shardtopk
