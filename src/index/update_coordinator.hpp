#pragma once
// The update coordinator of a ShardedIndex (docs/STORAGE.md "Updates"): write planning on rank 0,
// the write-ahead log, the application of logged writes on every rank between searches,
// snapshots, the start-up replay and deletes by filter. It drives the ranks through the search
// protocol's step headers and handles the update steps of the followers' loop. Internal header.
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "index/row_directory.hpp"
#include "index/search_protocol.hpp"
#include "index/write_ops.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/storage.hpp"

namespace shardtopk {

/// Broadcasts buf (resized on the receivers) from `root`: its size, then the bytes in chunks.
void broadcast_bytes(Communicator& comm, std::vector<std::uint8_t>& buf, int root);

class UpdateCoordinator final : public UpdateSteps {
 public:
  /// Read-only until enable_updates(). `cfg`, `schema` and `protocol` are the index's and
  /// outlive the coordinator. `stats`: dim, this rank's rows, the corpus rows and the norm bound
  /// at start-up (the coordinator's copy of the bound follows the writes; the admission gets it).
  UpdateCoordinator(const Config& cfg, Metric metric, const AttributeSchema& schema, const IngestStats& stats,
                    SearchProtocol& protocol);
  ~UpdateCoordinator() override;

  /// Collective: makes the index updatable over `storage` (rank 0's; nullptr: rank 0 opens
  /// cfg.storage.dir; other ranks pass nullptr) and replays the log's records after `base_seq`
  /// (the seq of the state the engines were built from: the snapshot loaded, or 0 for the
  /// configured corpus). @throws RemoteError on every rank when the directory cannot be used
  /// (held by another process, a snapshot the base does not match, a record that cannot be
  /// applied with this configuration, e.g. too little capacity).
  void enable_updates(std::unique_ptr<Storage> storage, std::uint64_t base_seq);
  bool writable() const { return upd_ != nullptr; }
  /// The admission whose norm bound follows the writes (rank 0).
  void set_admission(Admission* admission) { admission_ = admission; }
  /// The norm bound as the writes applied so far left it (max_row_norm, max_row_norm_row).
  const IngestStats& norm_bound() const { return stats_; }

  // ShardedIndex's update calls (index.hpp), with their semantics.
  WriteResult upsert(const UpsertRows& rows);
  WriteResult remove(const std::int64_t* ids, std::int64_t n);
  WriteResult remove_matching(const FilterProgram& filter);
  SnapshotResult snapshot();
  std::optional<SnapshotResult> snapshot_if_log_exceeds();
  std::optional<SnapshotResult> start_snapshot();
  bool start_snapshot_if_due();
  SnapshotProgress snapshot_step();
  bool snapshot_running() const { return snap_ != nullptr; }
  WriteResult submit_upsert(const UpsertRows& rows);
  WriteResult submit_remove(const std::int64_t* ids, std::int64_t n);
  void apply_writes();
  std::size_t pending_writes() const;
  UpdateStats update_stats() const;
  /// k's bound besides search.k_max: the corpus rows of a read-only index, the capacity of an
  /// updatable one (rows past the live ones are padding).
  std::int64_t k_limit_rows() const;

  bool follow_step(const StepHeader& h, bool lock_step) override;

 private:
  struct Updates {
    // ---- every rank
    std::vector<std::int64_t> capacities;  // [ranks] slots per rank
    std::int64_t capacity_total = 0;
    Dtype dtype = Dtype::kFloat32;         // the engine's storage type (planning checks overflow of it)
    std::vector<std::uint8_t> live;        // [this rank's slots] 1: live
    bool replay_done = false;              // followers: the start-up replay is over
    // The last group's merged op and its bytes (rank 0: encoded; followers: received, decoded),
    // whose buffers the next group reuses (a replay's steps are tens of MB each); freed when the
    // replay ends.
    std::vector<WriteOp> group;
    std::vector<std::uint8_t> group_bytes;
    // Rank 0 during the replay: the ops of the last step, whose buffers the next records' ops
    // reuse (a record's op allocated afresh costs five allocations and, step after step, the
    // page faults of a heap grown again).
    std::vector<WriteOp> spare;
    bool recycle = false;

    // ---- rank 0
    std::unique_ptr<Storage> storage;
    std::unique_ptr<RowDirectory> dir;     // the state after every submitted write
    std::vector<WriteOp> pending;          // submitted, not yet applied, in seq order
    std::size_t pending_bytes = 0;
    std::uint64_t submitted_seq = 0;       // seq of the last submitted write (or the base's)
    std::string failure;                   // set when the log failed with writes pending
    std::int64_t auto_snapshot_after_bytes = 0;  // a failed automatic snapshot: retry past this log size
    double auto_snapshot_after_s = 0;            // ... or, by age, once the snapshot is this old

    // counters for update_stats (any thread)
    std::atomic<std::uint64_t> applied_seq{0};
    std::atomic<std::int64_t> live_rows{0}, tombstones{0};
  };

  int rank() const { return protocol_.rank(); }
  int world_size() const { return protocol_.world_size(); }
  void reject_write(const std::string& why);
  WriteResult plan_and_submit_upsert(const UpsertRows& rows, bool replay, std::uint64_t seq);
  WriteResult plan_and_submit_remove(const std::int64_t* ids, std::int64_t n, bool replay, std::uint64_t seq);
  // update_apply.cpp: a group of ops merged, broadcast and applied as one; the replay.
  /// Seconds a group spent in each stage of broadcast_and_apply (the replay's summary line).
  struct ApplySeconds {
    double merge = 0, send = 0, apply = 0;
  };
  void broadcast_and_apply(std::vector<WriteOp>* ops, ApplySeconds* seconds = nullptr);
  /// A planned op to fill: one of Updates::spare while the replay recycles them, else a new one.
  WriteOp take_op();
  /// Frees the buffers the replay's groups kept (Updates::group, group_bytes, spare).
  void release_group_buffers();
  /// Followers: a kWrite step's bytes, decoded and applied.
  void receive_and_apply(const std::vector<std::uint8_t>& bytes);
  /// Every rank: this rank's part of each op, then a status check (CommError when any rank
  /// failed). `failed`: this rank's error before it could apply anything ("" none).
  void apply_ops(const std::vector<WriteOp>& ops, const std::string& failed = "");
  void publish_norm_bound();
  std::vector<std::int64_t> resolve_filter(const FilterProgram* filter);

  // update_snapshot.cpp: snapshots written from a consistent view while searches go on.
  struct SnapshotRun;
  /// Rank 0: why the snapshot policy wants a snapshot now ("" when it does not).
  std::string snapshot_due();
  /// Rank 0: the begin step (a kSnapshot header: nothing new, or begin). Returns the current
  /// snapshot when nothing is new; nullopt once a run has begun on every rank.
  std::optional<SnapshotResult> begin_snapshot_step(const std::string& why);
  /// Every rank: a kSnapshot begin step's work (the view: this rank's live slots at the seq).
  void begin_snapshot_run();
  /// Every rank: one kSnapshotBlock step of at most `rows` rows (abort: drop the run).
  void snapshot_block_step(bool abort, std::int64_t rows = 0);
  /// Every rank: before rows are written into `slots`, keeps the rows the running snapshot has
  /// not sent yet, as they were at its seq.
  void preserve_for_snapshot(const std::vector<std::int64_t>& slots);
  /// Rank 0: a finished run's bookkeeping (an automatic one's log line or retry point).
  void end_snapshot_run(const SnapshotProgress& p);
  /// Rank 0: the running snapshot's steps until it is committed or failed.
  SnapshotProgress finish_snapshot();
  void replay_log(std::uint64_t base_seq);

  const Config& cfg_;
  const Metric metric_;
  const AttributeSchema& schema_;
  IngestStats stats_;
  SearchProtocol& protocol_;
  Engine* const engine_;
  Communicator* const host_comm_;
  Admission* admission_ = nullptr;
  std::unique_ptr<Updates> upd_;  // nullptr: read-only
  std::unique_ptr<SnapshotRun> snap_;  // the snapshot being written (declared last: it goes first)
};

}  // namespace shardtopk
