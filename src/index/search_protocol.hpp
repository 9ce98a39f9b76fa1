#pragma once
// The rank protocol of a collective search: one header broadcast per step from rank 0, then the
// data path on every rank (queries broadcast → local top-k → all-gather of each rank's status
// and candidates → merge → export of rank 0's answer), and the followers' loop that acts on each
// header. Update steps are handed to the update coordinator (UpdateSteps). Internal header.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardtopk/communicator.hpp"
#include "shardtopk/config.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/search_batch.hpp"
#include "shardtopk/space.hpp"

namespace shardtopk {

/// What a step of the collective loop does. Rank 0 broadcasts one header per step carrying the
/// op code (and, for a search, batch and k); the followers (ranks 1 .. P-1) act on it.
enum class IndexOp : std::int32_t {
  kSearch = 1,    ///< one collective search of rank 0's admitted batch
  kRejected = 2,  ///< rank 0 refused the batch or the write: followers in lock step (tests) throw, the loop skips
  kShutdown = 3,  ///< followers leave the loop (follow() returns)
  kStats = 4,     ///< every rank all-gathers its RankStats (metrics; not on the search path)
  kWrite = 5,     ///< apply logged writes (planned on rank 0), then a status check on every rank
  kSnapshot = 6,  ///< every rank takes the view of a snapshot (its live slots); k = 1: nothing new
  kResolve = 7,   ///< every rank finds its live rows passing a filter (delete by filter)
  kReplayDone = 8,  ///< the start-up replay of the log is over (followers leave it)
  kSnapshotBlock = 9,  ///< the running snapshot's next block of rows to rank 0; k = 1: the run is dropped
  // room for more: a follower that gets an op it does not know ends the job (CommError)
};

/// The header of one step.
struct StepHeader {
  std::int32_t op = 0;  // IndexOp
  std::int32_t batch = 0;         // kSearch: queries; kSnapshotBlock: the block's rows at most
  std::int32_t k = 0;             // kSearch: k; kSnapshot: 1 = nothing new (a step that does nothing)
  std::int32_t filter_bytes = 0;  // kSearch: > 0 when the batch's filters follow in a second broadcast
  std::int32_t windows = 0;       // kSearch: 1 when each query's QueryWindow [batch] follows in a broadcast
  std::int32_t stats = 0;         // kSearch: 1 when every rank sends its QueryCounts [batch] with its candidates
};

/// The update steps of the loop (kWrite, kSnapshot, kSnapshotBlock, kResolve, kReplayDone), on followers.
class UpdateSteps {
 public:
  virtual ~UpdateSteps() = default;
  /// One step from rank 0's header. Returns false when the loop must end.
  virtual bool follow_step(const StepHeader& h, bool lock_step) = 0;
};

class SearchProtocol {
 public:
  /// Collective over host_comm: checks that the parts agree (rows, metric, space, limits) and
  /// allocates the data path's buffers in `space`; a failure on any rank throws RemoteError on
  /// every rank, naming the rank and its reason. `schema`: the attributes filters are compiled
  /// against (followers rebuild rank 0's programs with it). `data_comm` nullptr: host_comm
  /// carries the data.
  SearchProtocol(const Config& cfg, Metric metric, RowRange rows, AttributeSchema schema, std::unique_ptr<Space> space,
                 std::unique_ptr<Engine> engine, std::unique_ptr<Communicator> host_comm,
                 std::unique_ptr<Communicator> data_comm);
  ~SearchProtocol();
  SearchProtocol(const SearchProtocol&) = delete;
  SearchProtocol& operator=(const SearchProtocol&) = delete;

  int rank() const { return host_->rank(); }
  int world_size() const { return host_->world_size(); }
  std::int64_t dim() const { return dim_; }
  Metric metric() const { return metric_; }
  /// The engine's bytes plus the protocol's buffers beside it.
  std::uint64_t resident_bytes() const { return resident_bytes_; }
  Space& space() { return *space_; }
  Engine& engine() { return *engine_; }
  const Engine& engine() const { return *engine_; }
  Communicator& host() { return *host_; }
  const Communicator& host() const { return *host_; }
  Communicator& data() { return data_ ? *data_ : *host_; }
  const Communicator& data() const { return data_ ? *data_ : *host_; }

  /// The admission whose norm bound searches re-check against (Admission::recheck_norms).
  void set_admission(const Admission* admission) { admission_ = admission; }
  /// The handler of update steps on followers (nullptr: a read-only index).
  void set_update_steps(UpdateSteps* steps) { updates_ = steps; }

  // ---- rank 0
  /// One collective search of an admitted batch (ShardedIndex::search / search_async).
  /// `stats` [batch] (optional): filled when batch.wants_stats().
  void search(const SearchBatch& batch, std::int64_t* ids, float* scores, std::int32_t* counts,
              QueryStats* stats = nullptr);
  void search_async(const SearchBatch& batch, std::int64_t* d_ids, float* d_scores);
  /// ShardedIndex::search's host path under inner product and L2: copies `queries`
  /// [batch, dim] float32 into the staging buffer and queues its upload, so that admission
  /// checks the staged copy (in cache) while the copy runs. Returns the staged copy; a batch
  /// admitted from it is not copied again by search(). Cosine queries are normalised when
  /// staged, so they take the ordinary path (nullptr returned, nothing staged).
  const float* stage_early(const float* queries, int batch);
  /// Rank 0 refused a batch or a write: lock-step followers throw, a follow() loop skips it.
  void reject();
  std::vector<RankStats> rank_stats();
  void shutdown();
  bool shut_down() const { return shut_down_; }

  // ---- followers
  /// One step of the loop: waits (untimed) for rank 0's header and acts on it. Returns false
  /// when the loop must end. lock_step: the step mirrors a call rank 0 makes (tests), which
  /// throws where rank 0 throws.
  bool follow_one(bool lock_step);

  // ---- tests and benchmarks (src/index/index_impl.hpp)
  std::vector<Candidate> last_local_candidates();
  TransferCounters transfer_counters() const;
  void reset_transfer_counters();
  long searches() const { return batches_; }

 private:
  class Exporter;
  /// Rank 0's answer into device memory (search_async), else into the host arrays of search().
  struct DeviceAnswer {
    std::int64_t* ids = nullptr;
    float* scores = nullptr;
    void* stream = nullptr;
  };
  void init(const Config& cfg);
  void stage(const SearchBatch& batch, bool device_answer);
  void start(const SearchBatch& batch, bool device_answer);
  std::int32_t encode_filters(const SearchBatch& batch);
  void decode_filters(int batch);
  void use_filters(const FilterProgram* const* programs, int count, const std::int32_t* query_program);
  void run_search(int batch, int k, std::int64_t* ids, float* scores);
  std::string run_data_path(int batch, int k, bool* ok);
  void local_search(int batch, int k);
  void set_status(bool ok);
  void read_stats(int batch, int k, QueryStats* out);

  Metric metric_;
  RowRange rows_;
  AttributeSchema schema_;
  int batch_max_ = 0, k_max_ = 0;
  FaultSpec fault_;
  std::int64_t dim_ = 0;
  std::uint64_t resident_bytes_ = 0;
  std::unique_ptr<Space> space_;
  std::unique_ptr<Communicator> host_;
  std::unique_ptr<Communicator> data_;  // nccl or staged mpi, when used
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Exporter> export_;
  const Admission* admission_ = nullptr;
  UpdateSteps* updates_ = nullptr;
  // Buffers in the space, allocated once (DESIGN.md invariant 5):
  float* queries_ = nullptr;        // [batch_max, dim] the batch being searched
  float* host_queries_ = nullptr;   // [batch_max, dim] host staging (page-locked on a GPU)
  Candidate* local_ = nullptr;      // [1 + batch_max * k_max]: this rank's status, then its candidates
  Candidate* gathered_ = nullptr;   // [world, 1 + batch_max * k_max]
  Candidate* merged_ = nullptr;     // [batch_max, k_max]
  std::uint8_t* invalid_ = nullptr; // [batch_max] queries rejected on the device (search_async)
  int last_batch_ = 0, last_k_ = 0;
  long batches_ = 0;                // searches run (numbers the batches for testing.fault)
  double local_search_s_ = 0;
  bool shut_down_ = false;
  bool queries_on_host_ = false;    // host_queries_ holds the batch; false: device queries
  int early_staged_ = 0;            // rows stage_early() staged and queued (0: none)
  // The current batch's filters: rank 0 packs its admitted programs once for the other ranks
  // (filter_bytes_) and gives the engine those it admitted; a follower rebuilds them from the
  // bytes (programs_, program_ptrs_, query_program_).
  std::vector<std::uint8_t> filter_bytes_;
  std::vector<FilterProgram> programs_;
  std::vector<const FilterProgram*> program_ptrs_;
  std::vector<std::int32_t> query_program_;
  FilterBatch filters_;  // the engine's view of the current batch's filters (count 0: none)
  // The current batch's windows (rank 0: the admitted batch's; followers: windows_buf_) and
  // whether its ranks send their QueryCounts after their candidates.
  std::vector<QueryWindow> windows_buf_;
  const QueryWindow* windows_ = nullptr;
  bool stats_ = false;
  std::vector<QueryCounts> counts_host_;  // [batch_max] one rank's counts, read on rank 0
  DeviceAnswer device_answer_;      // set for the duration of one search_async
};

}  // namespace shardtopk
