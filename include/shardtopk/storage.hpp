#pragma once
/// @file storage.hpp
/// Durable updates: a write-ahead log of upserts and deletes with group commit, recovery of a
/// log directory after a crash, and atomic base snapshots. docs/STORAGE.md describes the files.
///
/// One directory (`StorageOptions::dir`) holds everything:
///   MANIFEST.json            the current base snapshot and its sequence number (atomic rewrite)
///   snapshot-<seq>.h5        base corpus after record <seq>: train, ids, attributes/<name>
///   wal-<first seq>.log      log segments, append-only, each record checksummed (CRC-32C)
///   LOCK                     flock()ed while a Storage has the directory open
///
/// The state after record s is: the base snapshot (seq S ≤ s, or the configured corpus when
/// there is none and S = 0) followed by every logged record with S < seq ≤ s, in seq order.
/// Sequence numbers are assigned by the log, strictly increasing by one, starting at 1.
///
/// Thread safety: upsert, delete_ids, replay, stats and the accessors may be called from any
/// number of threads at once. One snapshot is written at a time.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shardtopk/config.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk {

/// Every write or snapshot refused because the write-ahead log failed earlier (the log's failed
/// state: docs/STORAGE.md "Errors") says so with this phrase; the service tells those refusals
/// from a failure of the request itself by it.
inline constexpr const char* kAfterLogError = "after a log error";

/// One attribute column of a group of rows: `data` points at [rows] values of `type`
/// (std::int64_t or double). The memory is the caller's (input) or the record's (output).
struct AttributeColumnView {
  std::string name;  ///< 1 .. 255 bytes, no '/' (it becomes a dataset name in snapshots)
  AttributeType type = AttributeType::kInt64;
  const void* data = nullptr;

  const std::int64_t* int64s() const { return static_cast<const std::int64_t*>(data); }
  const double* float64s() const { return static_cast<const double*>(data); }
};

/// Rows to insert or replace (Storage::upsert). Everything is copied into the log record.
struct UpsertRows {
  std::int64_t rows = 0;                        ///< ≥ 1
  const std::int64_t* ids = nullptr;            ///< [rows] global ids
  const float* vectors = nullptr;               ///< [rows, dim] row-major, finite
  std::vector<AttributeColumnView> attributes;  ///< each [rows]; names distinct
};

enum class WalRecordType : std::uint32_t { kUpsert = 1, kDelete = 2 };

/// A record read back from the log (Storage::replay, StorageOptions::on_durable). A view: the
/// pointers are valid only during the callback that receives it.
struct WalRecord {
  std::uint64_t seq = 0;
  WalRecordType type = WalRecordType::kUpsert;
  std::int64_t rows = 0;                        ///< ids in the record
  std::int64_t dim = 0;                         ///< upsert: row width; delete: 0
  const std::int64_t* ids = nullptr;            ///< [rows]
  const float* vectors = nullptr;               ///< upsert: [rows, dim]; delete: nullptr
  std::vector<AttributeColumnView> attributes;  ///< upsert: each [rows]; delete: empty
};

/// The steps of the snapshot protocol, in order (StorageOptions::on_snapshot_step).
enum class SnapshotStep {
  kTempWritten,      ///< snapshot-<seq>.h5.tmp complete and fsynced
  kRenamed,          ///< renamed to snapshot-<seq>.h5, directory fsynced
  kManifestWritten,  ///< MANIFEST.json.tmp complete and fsynced
  kCommitted,        ///< MANIFEST.json names the new snapshot, directory fsynced (the commit point)
  kLogTruncated,     ///< superseded segments and the previous snapshot removed, directory fsynced
};
std::string to_string(SnapshotStep s);

struct StorageOptions {
  std::string dir;               ///< created (with parents) when missing
  std::int64_t dim = 0;          ///< row width of every upsert, 1 .. 65536; must match the directory's
  Metric metric = Metric::kInnerProduct;  ///< recorded in the manifest and snapshots; must match
  /// A segment that has reached this size is closed and the next write starts a new one.
  std::int64_t segment_bytes = 64ll << 20;
  /// Group commit: once a record is queued, the writer waits up to this long for more before
  /// it writes and syncs. 0: no wait (records that arrive during a sync still share the next).
  std::int64_t group_commit_window_us = 0;
  /// One write + fdatasync carries at most this many bytes (a larger record goes alone).
  std::int64_t group_commit_max_bytes = 32ll << 20;
  /// Appenders wait while this many bytes of records are queued and not yet written; the log
  /// holds at most this plus one group commit's bytes in memory.
  std::int64_t max_pending_bytes = 256ll << 20;
  /// Larger requests are refused with an Error (the record format allows up to 2^40).
  std::int64_t max_record_bytes = 1ll << 30;
  /// Called on the log's writer thread for every record, in seq order, once it is durable and
  /// before the appender that wrote it returns. It must not call back into this Storage. If
  /// it throws, the log fails as on an I/O error (see Storage::upsert).
  std::function<void(const WalRecord&)> on_durable;
  /// Called after each step of a snapshot commit, on the committing thread (observability, and
  /// the hook the crash tests stop a process at).
  std::function<void(SnapshotStep)> on_snapshot_step;
  /// The corpus file the log's records apply to while the directory has no snapshot (the
  /// configured corpus.path; "" when the rows do not come from a file). Its size and the
  /// CRC-32C of its first and last MiB are recorded in the manifest; opening a directory whose
  /// log holds records with another file is refused (the records were planned against the
  /// recorded one). With an empty log the new file's identity replaces the old.
  std::string base_corpus;
  /// Keep the files a committed snapshot superseded (the previous snapshot, log segments it
  /// holds) when opening, until finish_recovery(): a caller that verifies the snapshot first
  /// (verify_snapshot()) leaves them in place when it refuses to start. Temporary files, a
  /// snapshot never committed and a torn log tail are handled at open either way.
  bool defer_cleanup = false;
  /// When another process holds the directory's lock, wait up to this long (seconds) for it to
  /// be released before failing (storage.lock_wait_s): after a crash of a job's launcher its
  /// orphaned ranks hold it for a few seconds while they exit. 0: fail at once.
  double lock_wait_s = 0;
  /// Called about once a second on the opening thread while it waits for the lock (load_index
  /// keeps the other ranks' collectives alive with it). What it throws ends the wait.
  std::function<void()> on_lock_wait;
  /// Snapshots kept (storage.keep_snapshots, ≥ 1): the current one and the newest older ones,
  /// with the log segments from the oldest kept snapshot on, so that the state at the current
  /// snapshot can be rebuilt from any of them (docs/STORAGE.md, "Retention"). 1: only the current
  /// snapshot, and only the log after it.
  int keep_snapshots = 1;
};

/// The content of a base that is not a snapshot (the rows handed to build_index, or read from
/// corpus.path), to which a directory's log records apply: its shape and two order-sensitive
/// 64-bit digests, one of the ids and one of the float32 rows as the engine takes them (cosine:
/// normalised). The parts of contiguous shards add up (mod 2^64) to the whole's, so the
/// identity does not depend on how many ranks hold the rows.
struct BaseIdentity {
  std::int64_t rows = 0;
  std::int64_t dim = 0;
  std::uint64_t ids_digest = 0;
  std::uint64_t data_digest = 0;
};

/// One shard's part of a BaseIdentity: rows [rows, dim] float32 whose global row positions
/// start at `first_row`, and their ids [rows] (nullptr: the global row positions). Split over
/// `threads` threads (the result does not depend on it). Sum the parts with add_base_parts().
BaseIdentity base_identity_part(const float* rows, const std::int64_t* ids, std::int64_t n, std::int64_t dim,
                                std::int64_t first_row, int threads = 1);
/// As above, from rows [n, dim] in `format`: float32 values, or IEEE binary16 bit patterns (each
/// converted exactly to float32 first, `f16c` (io.f16c) choosing F16C or the portable
/// conversion: the same bits), so that a float16 corpus has the identity of the same values
/// given as float32.
BaseIdentity base_identity_part(const void* rows, RowFormat format, const std::int64_t* ids, std::int64_t n,
                                std::int64_t dim, std::int64_t first_row, int threads = 1, bool f16c = true);
/// The identity of the union of two disjoint shards (rows added; dims must agree).
BaseIdentity add_base_parts(const BaseIdentity& a, const BaseIdentity& b);

/// What opening the directory found and repaired.
struct RecoveryReport {
  std::string snapshot_path;         ///< base named by the manifest; "" when none
  std::uint64_t snapshot_seq = 0;    ///< its seq (0: none)
  std::uint64_t last_seq = 0;        ///< highest seq recovered (≥ snapshot_seq)
  std::int64_t segments = 0;         ///< segment files kept
  std::int64_t records = 0;          ///< whole records with seq > snapshot_seq
  std::int64_t log_bytes = 0;        ///< bytes of the segments kept
  /// Torn tail cut from the last segment: bytes removed, and records that began in them (the
  /// torn one plus any whole ones of the same unfinished group commit). A crash tears only
  /// records never acknowledged; a file cut short after the fact loses acknowledged ones,
  /// which `missing_acknowledged` counts.
  std::int64_t dropped_bytes = 0;
  std::int64_t dropped_records = 0;
  /// Records the log had reached when the directory was last closed or snapshotted (so they
  /// were acknowledged) but no longer holds: a segment truncated or deleted since. Logged as
  /// an error naming the seqs; 0 when the manifest records no such seq.
  std::int64_t missing_acknowledged = 0;
  std::vector<std::string> removed_files;  ///< leftovers removed: temp files, superseded files
};

/// Sizes for /metrics and `info`.
struct StorageStats {
  std::uint64_t last_seq = 0;        ///< highest durable seq
  std::uint64_t snapshot_seq = 0;
  std::string snapshot_path;         ///< "" when none
  std::int64_t segments = 0;
  std::int64_t log_bytes = 0;        ///< bytes in the segment files
  std::int64_t records_since_snapshot = 0;
  std::int64_t group_commits = 0;    ///< write + fdatasync rounds since open
  std::int64_t records_written = 0;  ///< records made durable since open
  std::int64_t queued_records = 0;   ///< appended, not yet taken by a group commit
  std::int64_t queued_bytes = 0;     ///< their bytes (≤ max_pending_bytes, or one larger record)
  bool failed = false;               ///< the log refuses writes (see Storage::upsert)
  std::string failure;               ///< why
  /// Seconds since the current snapshot's file was written (its modification time), or, with
  /// no snapshot, since this Storage was opened (the time policy, storage.snapshot_interval_s).
  double seconds_since_snapshot = 0;
  std::int64_t older_snapshots = 0;     ///< older snapshots kept (StorageOptions::keep_snapshots)
  std::int64_t retained_log_bytes = 0;  ///< bytes of the segments kept for them (all records ≤ snapshot_seq)
};

/// What a snapshot holds (Storage::begin_snapshot).
struct SnapshotSpec {
  std::uint64_t seq = 0;          ///< the state after this record; snapshot_seq() ≤ seq ≤ last_seq()
  std::int64_t rows = 0;          ///< live rows, ≥ 0
  Dtype dtype = Dtype::kFloat32;  ///< `train` stored as float32 or float16
  std::vector<std::pair<std::string, AttributeType>> attributes;  ///< columns, in write order
  /// The rows are L2-normalised already (cosine): loading the snapshot must not normalise them
  /// again (a second normalisation may move the last bit). Root attribute `normalized` (0 / 1).
  bool normalized = false;
};

class Storage;

/// Writes one snapshot: rows in order through write(), then commit(). Destroying it without a
/// commit removes the temporary file and leaves the directory as it was.
class SnapshotWriter {
 public:
  ~SnapshotWriter();
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  /// The next `n` rows: ids [n], vectors [n, dim] float32 (rounded to float16 when the spec
  /// says so), attributes with the spec's names and types in the spec's order, each [n].
  /// @throws Error past spec.rows, on columns that differ from the spec, or on an HDF5 failure.
  void write(std::int64_t n, const std::int64_t* ids, const float* vectors,
             const std::vector<AttributeColumnView>& attributes = {});

  /// Runs the protocol (SnapshotStep): temp file synced, renamed, manifest replaced, superseded
  /// segments and snapshot removed. Returns the snapshot's path.
  /// @throws Error when fewer than spec.rows rows were written or a file operation fails; the
  ///   directory then holds the previous snapshot and the full log (or, after kCommitted, the new
  ///   snapshot with log records ≤ seq left for the next snapshot to remove).
  std::string commit();

 private:
  friend class Storage;
  struct Impl;
  explicit SnapshotWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// An open storage directory: its recovered log, the writer thread and the snapshot protocol.
class Storage {
 public:
  /// Opens `opt.dir` (creating it when missing or empty) and recovers it: checks the manifest,
  /// removes leftovers of an interrupted snapshot, verifies every record of every segment, cuts
  /// a torn tail of the last segment (truncating the file, with a log line saying what was
  /// dropped), and starts the writer thread. A directory it creates is removed again when the
  /// opening fails, or when the Storage is destroyed by an exception in flight (a start-up that
  /// failed), as long as nothing was written to it: it then holds only LOCK and MANIFEST.json.
  /// @throws Error on bad options, a directory in use by another process, a manifest or segment
  ///   header that is unreadable or disagrees with the options (dim, metric), a gap in the
  ///   sequence numbers, or a damaged record followed by valid ones (naming the file and offset).
  explicit Storage(StorageOptions opt);
  /// Waits until every queued record is written (or the log has failed), then stops the writer
  /// and records the log's last seq in the manifest (a later open that finds the log shorter
  /// reports the acknowledged records missing); removes a directory it created and never wrote
  /// to when an exception is in flight (above) instead.
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  const StorageOptions& options() const;
  const RecoveryReport& recovery() const;
  /// Reads the current snapshot file whole and compares its size and CRC-32C with those the
  /// manifest recorded when the snapshot was committed (its size alone is checked at open).
  /// Does nothing when there is no snapshot or the manifest recorded no checksum.
  /// @throws Error naming the file and the recorded and found values.
  void verify_snapshot() const;
  /// Removes the superseded files StorageOptions::defer_cleanup kept (nothing otherwise).
  void finish_recovery();
  /// The row slots over all ranks the directory's index was last started with (the manifest's
  /// `capacity_rows`); 0 when none is recorded (a new directory, or one written before it was).
  std::int64_t recorded_capacity() const;
  /// Records `rows` slots over all ranks as the directory's capacity (rewrites the manifest when
  /// it differs), so that a restart without storage.capacity_rows keeps it.
  /// @throws Error for rows < 1 or a failed manifest write (the old one stays).
  void record_capacity(std::int64_t rows);
  /// Ties the log to its base while the directory has no snapshot: with log records after the
  /// base, `base` must be the identity the manifest recorded; otherwise `base` is recorded
  /// (the manifest rewritten). Does nothing when the manifest names a snapshot.
  /// @throws Error naming the directory, what differs (rows, dim, ids, row values) and both
  ///   values, changing nothing.
  void check_base(const BaseIdentity& base);
  std::string snapshot_path() const;  ///< current base snapshot ("" when none)
  std::uint64_t snapshot_seq() const;
  /// Highest durable seq (written and fdatasynced; on_durable may still be running for it).
  std::uint64_t last_seq() const;
  StorageStats stats() const;

  /// Logs rows to insert or replace and returns the record's seq once it is durable (written
  /// and fdatasynced; on_durable has run). Concurrent calls share group commits.
  /// @throws Error, changing nothing, on bad input: rows < 1, null pointers, a non-finite value
  ///   (naming row and column), bad or duplicate attribute names, a record over
  ///   max_record_bytes. @throws Error when the log has failed: a write, sync or on_durable
  ///   error fails every appender waiting on it and every later one, until the directory is
  ///   reopened. Such an error means "not known to be durable": the record may or may not be
  ///   found after a restart (only an acknowledgement is a promise).
  std::uint64_t upsert(const UpsertRows& rows);

  /// Logs the deletion of ids [n] (n ≥ 1); as upsert.
  std::uint64_t delete_ids(const std::int64_t* ids, std::int64_t n);

  /// upsert() and delete_ids() in two halves, for a caller that must know a record's seq (and
  /// order its own state by it) before the record is durable: submit_* validates and queues the
  /// record (waiting only for queue space) and returns its seq; wait_durable(seq) returns once
  /// that record is durable and on_durable has run for it. Records submitted by one thread get
  /// increasing seqs in submission order, and several submitted before one wait share group
  /// commits. @throws Error as upsert() (bad input: nothing queued; a failed log).
  std::uint64_t submit_upsert(const UpsertRows& rows);
  std::uint64_t submit_delete(const std::int64_t* ids, std::int64_t n);
  void wait_durable(std::uint64_t seq);

  /// Calls fn for every durable record with seq > after_seq, in seq order, re-verifying each
  /// checksum. @throws Error when records after `after_seq` were already removed by a snapshot
  ///   (after_seq < snapshot_seq() of the time they were removed) or a record fails its check.
  void replay(std::uint64_t after_seq, const std::function<void(const WalRecord&)>& fn) const;

  /// Starts a snapshot of the state after record spec.seq (the caller captures that state).
  /// Appends go on meanwhile. @throws Error for a seq outside [snapshot_seq(), last_seq()], a
  ///   dtype other than float32/float16, bad attribute names, another snapshot in progress, or a
  ///   failed log.
  std::unique_ptr<SnapshotWriter> begin_snapshot(const SnapshotSpec& spec);

  struct Impl;  ///< opaque (src/storage)

 private:
  std::unique_ptr<Impl> impl_;
};

/// Options from the config's storage section (storage.dir must be set) for rows of width
/// `dim` under `metric`. @throws Error when storage.dir is empty.
StorageOptions storage_options(const StorageConfig& cfg, std::int64_t dim, Metric metric);

/// What a storage directory's MANIFEST.json says (the base to load before replaying the log).
struct StorageManifest {
  std::int64_t dim = 0;
  Metric metric = Metric::kInnerProduct;
  std::string snapshot_path;  ///< "" when the base is the configured corpus
  std::uint64_t seq = 0;      ///< the snapshot's seq (0: none)
  std::int64_t capacity_rows = 0;  ///< Storage::recorded_capacity(): slots over all ranks (0: none recorded)
};

/// Reads `dir`/MANIFEST.json without opening the directory (no lock, no recovery): for choosing
/// the base to load before the directory is opened. nullopt when there is no manifest.
/// @throws Error for a manifest that cannot be read or parsed.
std::optional<StorageManifest> read_storage_manifest(const std::string& dir);

/// Root attributes of a snapshot file (for `info` and for loading it as a corpus).
struct SnapshotInfo {
  std::uint64_t seq = 0;
  std::int64_t rows = 0;
  std::int64_t dim = 0;
  Metric metric = Metric::kInnerProduct;
  Dtype dtype = Dtype::kFloat32;
  std::vector<std::pair<std::string, AttributeType>> attributes;  ///< datasets attributes/<name>, by name
  bool normalized = false;  ///< rows stored L2-normalised (SnapshotSpec::normalized)
};

/// Reads a snapshot's attributes and checks its datasets' shapes.
/// @throws Error naming the file and what is missing or inconsistent.
SnapshotInfo inspect_snapshot(const std::string& path);

}  // namespace shardtopk
