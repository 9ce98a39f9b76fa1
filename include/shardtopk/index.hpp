#pragma once
/// @file index.hpp
/// ShardedIndex: the collective search protocol over one rank's engine and communicators
/// (DESIGN.md "Data flow"). It knows nothing of files, HTTP or the command line: ingest.hpp
/// builds one from a corpus file or from rows in memory.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardtopk/communicator.hpp"
#include "shardtopk/config.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/shard_plan.hpp"
#include "shardtopk/storage.hpp"

namespace shardtopk {

class Space;  // the data path's memory (shardtopk/space.hpp)
struct WriteOp;  // a planned write (internal: src/index/write_ops.hpp)

/// What start-up did, for logs and timing summaries.
struct IngestStats {
  double read_s = 0;     ///< HDF5 read + validation of this rank's rows (streamed: read + upload overlapped)
  double upload_s = 0;   ///< engine construction (conversion, upload, norms); streamed: includes read_s, do not add them
  double total_s = 0;    ///< whole start-up, max over ranks
  std::int64_t total_rows = 0;
  std::int64_t dim = 0;
  RowRange rows;         ///< this rank's rows
  std::uint64_t engine_resident_bytes = 0;  ///< this rank's engine + index buffers (device or host memory)
  /// Largest float64 norm of a raw corpus row over all ranks and that row's id (-1: none);
  /// bounds every score (src/index/admission.hpp, docs/EXACTNESS.md "Score range").
  double max_row_norm = 0;
  std::int64_t max_row_norm_row = -1;
};

/// What a step of the collective loop does. Rank 0 broadcasts one header per step carrying the
/// op code (and, for a search, batch and k); the followers (ranks 1 .. P-1) act on it.
enum class IndexOp : std::int32_t {
  kSearch = 1,    ///< one collective search of rank 0's admitted batch
  kRejected = 2,  ///< rank 0 rejected the batch: followers in lock step (tests) throw, the loop skips
  kShutdown = 3,  ///< followers leave the loop (follow() returns)
  kStats = 4,     ///< every rank all-gathers its RankStats (metrics; not on the search path)
  kWrite = 5,     ///< apply logged writes (planned on rank 0), then a status check on every rank
  kSnapshot = 6,  ///< every rank sends its live rows to rank 0, which writes a snapshot
  kResolve = 7,   ///< every rank finds its live rows passing a filter (delete by filter)
  kReplayDone = 8,  ///< the start-up replay of the log is over (followers leave it)
  // room for more: a follower that gets an op it does not know ends the job (CommError)
};

/// A write (upsert, delete, snapshot) refused before anything changed: the log and the index
/// are as they were. The service answers kReadOnly 409, kCapacity 507, kInvalid 400.
class WriteError : public Error {
 public:
  enum class Kind {
    kReadOnly,  ///< no storage.dir: the index cannot change
    kCapacity,  ///< the reserved slots of every rank are in use (storage.capacity_rows)
    kInvalid,   ///< bad request: duplicate ids, wrong dim, non-finite value, unknown attribute ...
  };
  WriteError(Kind kind, const std::string& what) : Error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

/// An acknowledged write: its log sequence number (the state that includes it) and its rows.
struct WriteResult {
  std::uint64_t seq = 0;  ///< the write's seq; a delete that matched nothing: the seq it saw
  std::int64_t rows = 0;  ///< rows upserted, or rows deleted (ids that were live)
};

/// A committed snapshot (ShardedIndex::snapshot).
struct SnapshotResult {
  std::string path;       ///< the snapshot file (storage.dir/snapshot-<seq>.h5)
  std::uint64_t seq = 0;  ///< the state it holds: every write with seq <= this
  std::int64_t rows = 0;  ///< live rows in it
};

/// The updatable index's state, for /metrics and logs (rank 0; any thread).
struct UpdateStats {
  bool writable = false;          ///< storage.dir set
  std::int64_t live_rows = 0;     ///< rows a search can return, all ranks
  std::int64_t capacity_rows = 0; ///< slots, all ranks (storage.capacity_rows × ranks, or as built)
  std::int64_t tombstones = 0;    ///< slots freed by deletes and not reused yet
  std::uint64_t applied_seq = 0;  ///< last write applied on every rank (visible to searches)
  std::uint64_t snapshot_seq = 0; ///< seq of the current base snapshot (0: the configured corpus)
  std::string snapshot_path;      ///< "" when none
  std::int64_t log_bytes = 0;     ///< bytes of the log segments
  std::int64_t log_records = 0;   ///< records after the snapshot
};

/// One rank's search counters, for metrics.
struct RankStats {
  double searches = 0;        ///< local searches run
  double search_seconds = 0;  ///< time in the engine's local search (host view), summed
};

/// The engine limits the index builds its engines with: search.batch_max queries of up to
/// search.k_max.
EngineLimits index_engine_limits(const SearchConfig& search);

/// Bytes the index itself allocates in its engine's memory space on a rank of `world_size`
/// (query batch, local, gathered and merged candidates); `shardtopk plan` adds them to the
/// engine's bytes.
std::uint64_t index_buffer_bytes(const SearchConfig& search, int world_size, std::int64_t dim);

/// The K a search may ask for: 1 .. min(search.k_max, total_rows). ShardedIndex::search and the
/// service's request parsing share it, so both refuse alike. @throws Error naming k, the range
/// and the binding limit ("(search.k_max)" or "(the corpus rows)").
void check_k(long long k, std::int64_t k_max, std::int64_t total_rows);

/// The collective search over an already loaded shard, engine and communicators.
///
/// Rank 0 drives: each `search` broadcasts one header (op code, batch, k) and then the data
/// path runs on every rank: queries broadcast → local top-k → all-gather of each rank's
/// candidates and its status → merge → export of the answer. Followers either call `follow()`
/// (the service and CLI loop, until rank 0 calls `shutdown()`) or call `search` in lock step
/// with rank 0 (tests), which runs one step of the same loop.
class ShardedIndex {
 public:
  /// @param cfg        validated config (search.k_max, search.batch_max, comm.timeout_s, testing.fault)
  /// @param metric     the metric the engine was built with
  /// @param total_rows rows of the whole corpus (all ranks)
  /// @param rows       this rank's global rows
  /// @param space      the memory space of the data path (the engine's; its stream is the engine's)
  /// @param engine     this rank's engine, built with index_engine_limits(cfg.search)
  /// @param host_comm  the MPI communicator (header broadcast, start-up checks)
  /// @param data_comm  the communicator of the data path (NCCL, or MPI staged through host
  ///                   memory for device buffers), or nullptr to use host_comm
  /// Collective over host_comm: allocates the index's buffers in `space`; a failure on any rank
  /// (the parts disagree: rows, metric, space, limits; memory refused) throws RemoteError on
  /// every rank, naming the rank and its reason.
  ShardedIndex(const Config& cfg, Metric metric, std::int64_t total_rows, RowRange rows, std::unique_ptr<Space> space,
               std::unique_ptr<Engine> engine, std::unique_ptr<Communicator> host_comm,
               std::unique_ptr<Communicator> data_comm = nullptr);
  ~ShardedIndex();

  ShardedIndex(const ShardedIndex&) = delete;
  ShardedIndex& operator=(const ShardedIndex&) = delete;

  /// Collective search. Rank 0 passes queries [batch, dim] (host, float32); other ranks pass
  /// nullptr and their batch/k are ignored (rank 0's are broadcast). On rank 0, ids [batch, k]
  /// and scores [batch, k] (reported units: similarity, or squared distance for l2) receive the
  /// answer, best first; other ranks may pass nullptr.
  /// `filters` (rank 0, optional): [batch] query q's filter (filter.hpp: compiled against
  /// attribute_schema()), or nullptr for every row; the answer of a filtered query is the exact
  /// top k of the rows that pass, and when fewer than k pass its row ends with padding: ids
  /// kPadId (reserved, never a row's id) and scores −inf (l2: +inf). `counts` (rank 0, optional):
  /// [batch] the number of real results per query (k unless filters or deleted rows leave
  /// fewer). Filters travel to the other ranks with the batch.
  /// @throws Error on every rank when rank 0 rejects the batch (k outside [1, min(k_max, N)],
  ///   batch outside [1, batch_max], a non-finite value: the message names the query index; more
  ///   distinct filters than search.max_filters); the index stays usable. RemoteError on rank 0
  ///   when a rank's local search failed (it names the ranks; each failing rank logs its own
  ///   message); every rank stays usable, followers do not throw. CommError when a collective
  ///   timed out (the job must end).
  void search(const float* queries, int batch, int k, std::int64_t* ids, float* scores,
              const FilterProgram* const* filters = nullptr, std::int32_t* counts = nullptr);

  /// Like search(), with rank 0's queries already in device memory (`d_queries` [batch, dim],
  /// float32, written by work queued on `cuda_stream`, a cudaStream_t): the index's stream waits
  /// for that work (no device-wide synchronisation); values are validated on the device. The
  /// answer arrives in host memory. Only with the CUDA engine; @throws Error otherwise.
  void search_device(const float* d_queries, void* cuda_stream, int batch, int k, std::int64_t* ids, float* scores);

  /// Stream-ordered search with queries and answers in device memory: the in-process API whose
  /// data never leaves the GPU (CUDA engine only). Rank 0 passes d_queries [batch, dim] float32,
  /// d_ids [batch, k] int64 and d_scores [batch, k] float32 (reported units), all on this rank's
  /// GPU. The work is ordered on `cuda_stream` (a cudaStream_t): it starts after the work queued
  /// there, and whatever is queued there afterwards sees the answer. One rank: the call returns
  /// without waiting for the device. Several ranks: it returns once the collectives have
  /// completed (their timeouts are watched from the host). Values are checked on the device,
  /// without a host round trip: a query with a non-finite value (or, for cosine, a zero norm)
  /// gets ids kPadId and NaN scores in its row instead of an exception. A row's results past the
  /// rows that pass its filter are padding (ids kPadId, as search()). Other ranks pass nullptrs
  /// (or call follow()). @throws Error (on every rank) for batch or k out of range;
  /// RemoteError / CommError as search().
  void search_async(const float* d_queries, int batch, int k, std::int64_t* d_ids, float* d_scores, void* cuda_stream,
                    const FilterProgram* const* filters = nullptr);

  /// Followers (rank != 0): run the collective loop, one step per header from rank 0, until
  /// rank 0 calls shutdown(). Waits for the next header without a time limit (the service may
  /// idle); every collective inside a step keeps comm.timeout_s. A local search failure is
  /// logged here and reported to rank 0 through the all-gather; the loop goes on.
  /// @throws CommError when a collective failed or timed out (the job must end).
  void follow();

  /// Rank 0: every rank's counters [world_size] (collective: one header broadcast + one
  /// all-gather; followers must be in follow() or calling search in lock step).
  std::vector<RankStats> rank_stats();

  /// Rank 0: end the followers' loops (one header broadcast). Idempotent; no-op on followers
  /// and with one rank.
  void shutdown();

  // ---- updates (docs/STORAGE.md "Updates"). An index built with a storage directory
  // (storage.dir) accepts upserts and deletes; rank 0 validates and plans every write (the
  // placement of new rows), logs it (write-ahead log, rank 0's only), and the write is applied
  // on every rank between searches, so that a search sees all of a request's writes or none.
  // The collective calls below return on rank 0 once the write is durable and applied on every
  // rank (acknowledged); followers call them in lock step (tests: each call is one step, or two
  // for remove_matching) or run follow().

  /// Collective: makes the index updatable over `storage` (rank 0's; nullptr: rank 0 opens
  /// cfg.storage.dir; other ranks pass nullptr) and replays the log's records after `base_seq`
  /// (the seq of the state the engines were built from: the snapshot loaded, or 0 for the
  /// configured corpus). @throws RemoteError on every rank when the directory cannot be used
  /// (held by another process, a snapshot the base does not match, a record that cannot be
  /// applied with this configuration, e.g. too little capacity).
  void enable_updates(std::unique_ptr<Storage> storage = nullptr, std::uint64_t base_seq = 0);
  bool writable() const { return upd_ != nullptr; }

  /// Inserts rows, or replaces those whose id is live (a delete and an insert). Rank 0 passes
  /// the rows: ids [rows], vectors [rows, dim] float32, one attribute column per corpus
  /// attribute (corpus.attributes: every one, by name, of its type; none other). New rows go to
  /// ranks by the placement rule (RowDirectory). Returns once durable and applied.
  /// @throws WriteError on rank 0 (kReadOnly, kCapacity, kInvalid: duplicate id, bad dim,
  ///   non-finite value or storage overflow, zero norm under cosine, missing or unknown
  ///   attribute, each named), and Error on followers in lock step, with nothing changed;
  ///   Error when the log failed (the write's fate is unknown until a restart); CommError when
  ///   a rank failed to apply a logged write (the job must end; a restart replays it).
  WriteResult upsert(const UpsertRows& rows);

  /// Deletes ids [n] (n >= 1, distinct); ids that are not live are ignored (rows counts those
  /// that were). Errors as upsert().
  WriteResult remove(const std::int64_t* ids, std::int64_t n);

  /// Deletes every live row that passes `filter` (compiled against attribute_schema()): two
  /// collective steps (find the rows on every rank, then delete them). Errors as upsert().
  WriteResult remove_matching(const FilterProgram& filter);

  /// Collective: writes a snapshot of the state after every write so far (rank 0 writes the
  /// file from every rank's live rows, then the log records it holds are removed). A snapshot
  /// with nothing new since the last one returns that one. The rows are stored as the engines
  /// hold them (float16 storage: float16; cosine: normalised), so that loading the snapshot
  /// reproduces every score bit for bit. Searches wait while it is written.
  /// @throws WriteError (kReadOnly) or Error (a file failure: the previous snapshot and the full
  ///   log stay) on rank 0; RemoteError on every rank when a rank failed to read its rows.
  SnapshotResult snapshot();

  /// The snapshot policy (storage.snapshot_log_bytes > 0): collective, one step, like
  /// snapshot(). Rank 0 takes a snapshot when the log's segments hold more than
  /// storage.snapshot_log_bytes (after applying what was submitted), else broadcasts a step that
  /// does nothing; followers in lock step call it too (or run follow()). With the policy off it
  /// returns at once on every rank, communicating nothing. Returns the snapshot when one was
  /// taken (rank 0). A snapshot that fails is logged, not thrown (the writes before it are
  /// durable whatever happens to it): the log stays whole, and the next try waits until the log
  /// has grown by another storage.snapshot_log_bytes. @throws CommError as upsert().
  std::optional<SnapshotResult> snapshot_if_log_exceeds();

  /// Rank 0, not collective: validates and plans a write and queues it in the log, returning
  /// its seq (rows: as upsert()/remove()) at once; the write is neither durable nor visible
  /// until apply_writes(). Writes submitted by one thread are applied in submission order, and
  /// several submitted before one apply_writes() share a group commit. Errors as upsert(), before
  /// anything is queued.
  WriteResult submit_upsert(const UpsertRows& rows);
  WriteResult submit_remove(const std::int64_t* ids, std::int64_t n);

  /// Rank 0, collective when writes are waiting (one step; none otherwise): waits until every
  /// submitted write is durable, then applies them on every rank. @throws Error when the log
  /// failed (the writes' fate is unknown until a restart), CommError as upsert().
  void apply_writes();
  /// Writes submitted and not yet applied (rank 0).
  std::size_t pending_writes() const;

  /// The update counters (rank 0, any thread; zeros and writable = false on a read-only index).
  UpdateStats update_stats() const;

  /// The largest k a search may ask for is min(search.k_max, this): the corpus rows of a
  /// read-only index, the capacity of an updatable one (rows past the live ones are padding).
  std::int64_t k_limit_rows() const;

  int rank() const;
  int world_size() const;
  Metric metric() const { return metric_; }
  std::int64_t total_rows() const { return stats_.total_rows; }
  std::int64_t dim() const { return stats_.dim; }
  const IngestStats& ingest_stats() const { return stats_; }
  void set_ingest_stats(const IngestStats& s) { stats_ = s; }
  const Config& config() const { return cfg_; }
  /// The attributes filters may use (corpus.attributes), the same on every rank.
  const AttributeSchema& attribute_schema() const { return schema_; }
  void set_attribute_schema(AttributeSchema schema) { schema_ = std::move(schema); }
  Engine& engine() { return *engine_; }
  EngineInfo engine_info() const { return engine_->info(); }
  Communicator& host_comm() { return *host_comm_; }
  Communicator& data_comm() { return data_comm_ ? *data_comm_ : *host_comm_; }
  Space& space() { return *space_; }

  /// Host↔device bytes moved by this rank's data path (queries in, answers out), plus the
  /// engine's batched fallbacks; reset with reset_transfer_counters().
  TransferCounters transfer_counters() const;
  void reset_transfer_counters();

  /// Searches run on this rank (successful or not) and this rank's local search time, summed
  /// (seconds), for metrics.
  long searches() const { return batches_; }
  double local_search_seconds() const { return local_search_s_; }

  /// This rank's local candidates of the last search [batch, k] (copied to the host), for tests
  /// that check each rank's candidates come from its own rows.
  std::vector<Candidate> last_local_candidates();

 private:
  struct Header {
    std::int32_t op = 0;  // IndexOp
    std::int32_t batch = 0;
    std::int32_t k = 0;
    std::int32_t filter_bytes = 0;  // > 0: the batch's filters follow in a second broadcast
  };
  class Exporter;
  struct Updates;  // src/index/updates.cpp
  void init();
  // updates (src/index/updates.cpp)
  bool follow_update_op(const Header& h, bool lock_step);
  void reject_write(const std::string& why);
  WriteResult plan_and_submit_upsert(const UpsertRows& rows, bool replay, std::uint64_t seq);
  WriteResult plan_and_submit_remove(const std::int64_t* ids, std::int64_t n, bool replay, std::uint64_t seq);
  void broadcast_and_apply(std::vector<WriteOp>* ops);
  void apply_ops(const std::uint8_t* bytes, std::size_t size);
  std::vector<std::int64_t> resolve_filter(const FilterProgram* filter);
  SnapshotResult write_snapshot();
  void replay_log(std::uint64_t base_seq);
  void admit_batch(int batch, int k, bool prepare_on_device, const std::function<void()>& stage_queries,
                   const FilterProgram* const* filters = nullptr);
  /// Rank 0: the batch's filters as bytes (distinct programs packed, each query's index);
  /// every rank: the programs and per-query pointers from those bytes (filters_for_batch_).
  void encode_filters(const FilterProgram* const* filters, int batch);
  void decode_filters(int batch);
  bool follow_one(bool lock_step);
  void run_search(int batch, int k, std::int64_t* ids, float* scores);
  std::string run_data_path(int batch, int k, bool* ok);
  void local_search(int batch, int k);
  void set_status(bool ok);
  /// Rank 0's answer into device memory (search_async), else into the host arrays of search().
  struct DeviceAnswer {
    std::int64_t* ids = nullptr;
    float* scores = nullptr;
    void* stream = nullptr;
  };

  Config cfg_;
  Metric metric_ = Metric::kInnerProduct;
  IngestStats stats_;
  std::unique_ptr<Space> space_;
  std::unique_ptr<Communicator> host_comm_;
  std::unique_ptr<Communicator> data_comm_;  // nccl or staged mpi, when used
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Exporter> export_;
  // Buffers in the space, allocated once (DESIGN.md invariant 5):
  float* queries_ = nullptr;        // [batch_max, dim] the batch being searched
  float* host_queries_ = nullptr;   // [batch_max, dim] host staging (page-locked on a GPU)
  Candidate* local_ = nullptr;      // [1 + batch_max * k_max]: this rank's status, then its candidates
  Candidate* gathered_ = nullptr;   // [world, 1 + batch_max * k_max]
  Candidate* merged_ = nullptr;     // [batch_max, k_max]
  std::vector<float> normalized_;   // [batch_max, dim] cosine host queries, normalised
  int last_batch_ = 0, last_k_ = 0;
  long batches_ = 0;                // searches run (numbers the batches for testing.fault)
  double local_search_s_ = 0;
  bool shut_down_ = false;
  bool queries_on_host_ = false;    // host_queries_ holds the batch (search()); false: device queries
  std::uint8_t* invalid_ = nullptr; // [batch_max] queries rejected on the device (search_async)
  AttributeSchema schema_;
  // The current batch's filters: the broadcast bytes, the distinct programs rebuilt from them
  // (and their addresses, for the engine's FilterBatch), and each query's program index (-1: none).
  std::vector<std::uint8_t> filter_bytes_;
  std::vector<FilterProgram> filter_programs_;
  std::vector<const FilterProgram*> filter_batch_programs_;
  std::vector<std::int32_t> query_program_;
  bool filtered_ = false;
  DeviceAnswer device_answer_;      // set for the duration of one search_async
  std::unique_ptr<Updates> upd_;    // nullptr: read-only
};

}  // namespace shardtopk
