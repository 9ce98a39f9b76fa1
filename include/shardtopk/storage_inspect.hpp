#pragma once
/// @file storage_inspect.hpp
/// Reading a storage directory without the service (`shardtopk storage info`, `storage verify`):
/// nothing is locked, written, cut or removed, so both may run beside a service that holds the
/// directory. docs/STORAGE.md ("Inspecting and verifying a directory") describes the output.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardtopk/storage.hpp"

namespace shardtopk {

/// One log segment as found on disk (records counted by their headers, checksums not read).
struct StorageSegmentSummary {
  std::string name;              ///< wal-<first seq>.log
  std::uint64_t first_seq = 0;   ///< from the name
  std::uint64_t last_seq = 0;    ///< the last whole record's seq; first_seq - 1 when none
  std::int64_t bytes = 0;        ///< file size
  std::int64_t records = 0;      ///< records whose headers follow each other from the header on
  std::int64_t tail_bytes = 0;   ///< bytes after them that are no record (a torn tail, or damage)
  /// "log": holds records after the snapshot, or is the last segment and starts after it (the
  /// one the next write goes into, empty after a snapshot); "retained": every record ≤ the snapshot's seq,
  /// kept for an older snapshot (storage.keep_snapshots); "superseded": every record ≤ the
  /// oldest snapshot kept (a start-up removes it unread).
  std::string role;
};

/// What `shardtopk storage info DIR` reports.
struct StorageDirSummary {
  std::string dir;
  std::string manifest_error;  ///< why MANIFEST.json could not be read ("" when it was)
  /// Not a storage directory: no MANIFEST.json, no log segment, no snapshot (nothing in it is
  /// storage data; a start-up with it as storage.dir makes a fresh one).
  bool empty = false;
  std::int64_t dim = 0;
  Metric metric = Metric::kInnerProduct;
  std::string snapshot;              ///< the manifest's snapshot file name ("" none: the base is the corpus)
  std::uint64_t snapshot_seq = 0;
  std::int64_t snapshot_bytes = -1;  ///< recorded size (-1: not recorded)
  std::uint32_t snapshot_crc32c = 0;
  std::optional<SnapshotInfo> snapshot_info;  ///< its own attributes, when readable
  std::string snapshot_error;                 ///< why not
  /// Without a snapshot: the corpus file the log's records apply to (bytes -1: not recorded).
  std::string corpus_path;
  std::int64_t corpus_bytes = -1;
  std::uint32_t corpus_sample_crc32c = 0;
  /// Without a snapshot: the rows the log's records apply to (Storage::check_base; rows -1: not
  /// recorded).
  BaseIdentity base{-1, 0, 0, 0};
  std::int64_t capacity_rows = 0;  ///< recorded slots over all ranks (0: not recorded)
  /// The seq the log had reached at the last clean close or snapshot (0: not recorded): every
  /// record up to it was acknowledged.
  std::uint64_t recorded_log_seq = 0;
  std::vector<std::string> older_snapshots;  ///< snapshot files before the current one (retention)
  std::vector<std::string> leftovers;        ///< temp files, uncommitted snapshots: a start-up removes them
  /// Snapshot files while MANIFEST.json is missing or unreadable: a start-up refuses the
  /// directory and removes nothing, and one of them may hold the only copy of the rows.
  std::vector<std::string> unclaimed_snapshots;
  std::vector<StorageSegmentSummary> segments;  ///< every segment, in seq order
  std::uint64_t last_seq = 0;        ///< the last whole record's seq (the snapshot's when none after it)
  std::int64_t log_records = 0;      ///< records after the snapshot
  std::int64_t log_bytes = 0;        ///< bytes of the segments that hold them
  std::string lock_holder;           ///< who holds or last held LOCK ("" when nobody recorded)
  std::string lock_error;            ///< why LOCK could not be read ("LOCK is not a regular file (a FIFO)")
};

/// Reads `dir`'s manifest, its snapshot's attributes and its segments' record headers.
/// A manifest that cannot be read is reported in manifest_error, not thrown.
/// @throws Error when `dir` is not a readable directory.
StorageDirSummary inspect_storage_dir(const std::string& dir);

/// One finding of verify_storage_dir.
struct StorageProblem {
  enum class Kind {
    kDamage,    ///< a start-up refuses the directory, or a file it keeps is damaged
    kTornTail,  ///< bytes a start-up cuts from the last segment (after a crash: never acknowledged)
  };
  Kind kind = Kind::kDamage;
  std::string file;  ///< the file's name in the directory ("" for the directory as a whole)
  std::string what;
};

/// What `shardtopk storage verify DIR` reports.
struct StorageVerifyReport {
  std::vector<std::string> checked;        ///< one line per file that passed its checks
  std::vector<std::string> notes;          ///< what a start-up would tidy, what was not checked
  std::vector<StorageProblem> problems;
  /// Not a storage directory: no MANIFEST.json, no log segment, no snapshot. Nothing was
  /// checked and nothing is damaged (`shardtopk storage verify` exits 4, not 1).
  bool empty = false;
  bool damaged() const;    ///< any kDamage problem
  bool clean() const { return problems.empty(); }
};

/// Checks everything a start-up checks, without changing anything: the manifest (strictly), the
/// snapshot it names (size and CRC-32C against the manifest's record, its seq, dim and metric
/// attributes), older snapshots kept by retention (readable, seq), every record of every
/// segment (checksum, seq order, payload structure, dim), that the segments continue the
/// snapshot without a gap, that it reaches the seq the manifest recorded at the last clean close
/// (else acknowledged records are missing), and, without a snapshot, the corpus file's identity:
/// `corpus`, or the path the manifest recorded when that exists. Each problem names its file.
/// @throws Error when `dir` is not a readable directory.
StorageVerifyReport verify_storage_dir(const std::string& dir, const std::string& corpus = "");

}  // namespace shardtopk
