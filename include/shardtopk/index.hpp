#pragma once
/// @file index.hpp
/// ShardedIndex: one rank's part of a sharded exact top-k index (DESIGN.md "Data flow"): the
/// collective search over the ranks' shards, and, with a storage directory, their updates. It
/// knows nothing of files, HTTP or the command line: ingest.hpp builds one, complete, from a
/// corpus file or from rows in memory.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardtopk/config.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/search_batch.hpp"
#include "shardtopk/shard_plan.hpp"
#include "shardtopk/storage.hpp"

namespace shardtopk {

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

/// Where a snapshot written in the background stands after one ShardedIndex::snapshot_step().
struct SnapshotProgress {
  bool running = false;     ///< a snapshot is still being written
  bool progressed = false;  ///< the step sent rows or ended the run (false: the file writer is behind)
  std::optional<SnapshotResult> done;  ///< the snapshot committed at this step
  std::string failed;  ///< why the snapshot failed at this step ("" none): the previous snapshot and the log stay
  bool automatic = false;  ///< done or failed: it was started by the snapshot policy
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


/// What an index is, for logs, plans, /v1/info and checks (ShardedIndex::info).
struct IndexInfo {
  int rank = 0;         ///< this rank
  int world_size = 1;   ///< ranks
  int local_ranks = 1;  ///< ranks on this rank's node
  Metric metric = Metric::kInnerProduct;
  std::int64_t rows = 0;    ///< corpus rows over all ranks, as loaded
  std::int64_t dim = 0;     ///< values per row and per query
  int k_max = 0;            ///< search.k_max
  std::int64_t k_rows = 0;  ///< k's other bound: the corpus rows, or an updatable index's slots
  int batch_max = 0;        ///< search.batch_max
  int max_filters = 0;      ///< distinct filters per batch: min(search.max_filters, batch_max)
  AttributeSchema schema;   ///< what filters may name (corpus.attributes), the same on every rank
  bool writable = false;    ///< storage.dir set: upserts, deletes and snapshots are accepted
  std::string storage_dir;  ///< storage.dir: the write-ahead log and snapshots ("" when read-only)
  EngineInfo engine;        ///< this rank's engine
  std::string comm;         ///< the data path's communicator: "mpi" or "nccl"
  IngestStats ingest;       ///< what start-up did (max_row_norm: as of now, writes included)
};

/// One rank's part of the collective search (and updates) over the ranks' shards.
///
/// Rank 0 drives: each search broadcasts one header (op code, batch, k) and then the data path
/// runs on every rank: queries broadcast → local top-k → all-gather of each rank's candidates
/// and its status → merge → export of the answer. The other ranks either call follow() (the
/// service, the command line and the Python module, until rank 0 calls shutdown()) or make the
/// same call as rank 0 in lock step (tests), which runs one step of the same loop.
///
/// Batches are admitted once, on rank 0 (search_batch.hpp): admit() / admit_device() check k,
/// the batch, its filters and its values into a SearchBatch that search() and search_async()
/// take as given; search() on raw queries admits them at the call.
class ShardedIndex {
 public:
  struct Impl;
  /// Made complete by load_index() / build_index() (ingest.hpp).
  explicit ShardedIndex(std::unique_ptr<Impl> impl);
  ~ShardedIndex();
  ShardedIndex(const ShardedIndex&) = delete;
  ShardedIndex& operator=(const ShardedIndex&) = delete;

  /// What the index is (any rank, any thread).
  IndexInfo info() const;

  /// Rank 0 (any thread): admits host queries [batch, dim] float32 with optional filters [batch]
  /// (query q's program, compiled against info().schema, or nullptr: every row) for k results
  /// each. The SearchBatch points at `queries` and the programs: keep them unchanged until the
  /// search has returned. @throws Error naming the first problem (Admission::admit: k outside
  /// 1 .. min(k_max, k_rows), naming the binding limit; batch outside 1 .. batch_max; a filter
  /// that does not fit the schema, or more than max_filters distinct ones; a non-finite value,
  /// naming query and column; a zero norm under cosine; a norm whose scores could overflow).
  SearchBatch admit(const float* queries, int batch, long long k, const FilterProgram* const* filters = nullptr) const;

  /// admit() with each query's bounds in the total order (`bounds` [batch], nullptr: none):
  /// pages after a (score, id) and ranges (min_score / max_distance) with their exact counts;
  /// `stats`: search() reports QueryStats for every query (search_batch.hpp).
  /// @throws Error as admit(), and for a bound that is not finite (naming the query and value).
  SearchBatch admit(const float* queries, int batch, long long k, const FilterProgram* const* filters,
                    const QueryBounds* bounds, bool stats) const;

  /// Rank 0 (any thread): admits device queries [batch, dim] float32 on this rank's GPU, written
  /// by work queued on `cuda_stream` (a cudaStream_t): k, batch and filters are checked here, the
  /// values on the device when the search stages them. @throws Error as admit().
  SearchBatch admit_device(const float* d_queries, void* cuda_stream, int batch, long long k,
                           const FilterProgram* const* filters = nullptr) const;

  /// Collective search with the answer in host memory. Rank 0 passes an admitted batch and ids
  /// [batch, k], scores [batch, k] (reported units: similarity, or squared distance for l2),
  /// best first; `counts` (optional) [batch]: the real results per query. A query's row ends
  /// with padding when fewer than k rows pass its filter or are live: ids kPadId (reserved,
  /// never a row's id) and scores −inf (l2: +inf). Device queries are staged and checked on the
  /// device first (a non-finite value or a cosine zero norm throws, naming the query). Other
  /// ranks pass an empty batch and nullptrs (or call follow()).
  /// @throws Error on rank 0 (and on lock-step followers) when the batch is refused at the call
  ///   (device values; host values checked against a norm bound that writes have raised since
  ///   admission); the index stays usable. RemoteError on rank 0 when a rank's local search
  ///   failed (it names the ranks; each failing rank logs its own message); every rank stays
  ///   usable, followers do not throw. CommError when a collective timed out (the job must end).
  /// `stats` (optional) [batch]: what each query saw, summed over the ranks, when the batch was
  /// admitted with bounds or stats (left untouched otherwise).
  void search(const SearchBatch& batch, std::int64_t* ids, float* scores, std::int32_t* counts = nullptr,
              QueryStats* stats = nullptr);

  /// Collective: the exact 1-based rank of each of `ids` [n] for `query` [dim] float32 (host)
  /// among the live rows passing `filter` (nullptr: every row): 1 + the rows ahead of it in the
  /// order (higher score, equal score and smaller id). An id that does not pass the filter gets
  /// the rank it would have. ranks [n] and scores [n] (reported units) out, host memory. Two
  /// collective searches (the ids' scores, then one count per id). Rank 0 passes the values;
  /// other ranks pass nullptrs (or run follow()).
  /// @throws Error on rank 0 for n outside 1 .. min(batch_max, k_max), an id that no live row
  ///   has (naming it), and as admit(); RemoteError / CommError as search().
  void rank(const float* query, const std::int64_t* ids, int n, const FilterProgram* filter, std::int64_t* ranks,
            float* scores);

  /// search() of host queries [batch, dim] float32 (rank 0; other ranks: nullptr, their batch
  /// and k ignored), admitted at the call: a refusal throws Error on rank 0 and on lock-step
  /// followers (a follow() loop skips it). Shapes and errors as admit() and search().
  void search(const float* queries, int batch, int k, std::int64_t* ids, float* scores,
              const FilterProgram* const* filters = nullptr, std::int32_t* counts = nullptr);

  /// Stream-ordered search with queries and answers in device memory: the in-process API whose
  /// data never leaves the GPU (CUDA engine only). Rank 0 passes a batch from admit_device() and
  /// d_ids [batch, k] int64, d_scores [batch, k] float32 (reported units) on this rank's GPU.
  /// The work is ordered on the batch's stream: it starts after the work queued there, and
  /// whatever is queued there afterwards sees the answer. One rank: the call returns without
  /// waiting for the device. Several ranks: it returns once the collectives have completed.
  /// Values are checked on the device without a host round trip: a query with a non-finite
  /// value (or, for cosine, a zero norm) gets ids kPadId and NaN scores in its row instead of an
  /// exception. Other ranks pass an empty batch and nullptrs (or call follow()).
  /// @throws Error without the CUDA engine, or for a host batch or null answer pointers;
  ///   RemoteError / CommError as search().
  void search_async(const SearchBatch& batch, std::int64_t* d_ids, float* d_scores);

  /// Followers (rank != 0): run the collective loop, one step per header from rank 0, until
  /// rank 0 calls shutdown(). Waits for the next header without a time limit (the service may
  /// idle); every collective inside a step keeps comm.timeout_s. A local search failure is
  /// logged here and reported to rank 0 through the all-gather; the loop goes on.
  /// @throws CommError when a collective failed or timed out (the job must end).
  void follow();

  /// Rank 0: end the followers' loops (one header broadcast). Idempotent; no-op on followers.
  void shutdown();

  /// Rank 0: every rank's counters [world_size] (collective: one header broadcast + one
  /// all-gather; followers must be in follow() or making the same call in lock step).
  std::vector<RankStats> rank_stats();

  // ---- updates (docs/STORAGE.md "Updates"). An index built with a storage directory
  // (storage.dir) accepts upserts and deletes; rank 0 validates and plans every write (the
  // placement of new rows), logs it (write-ahead log, rank 0's only), and the write is applied
  // on every rank between searches, so that a search sees all of a request's writes or none.
  // The collective calls below return on rank 0 once the write is durable and applied on every
  // rank (acknowledged); followers make the same call in lock step (tests: each call is one
  // step, or two for remove_matching) or run follow().

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

  /// Deletes every live row that passes `filter` (compiled against info().schema): two
  /// collective steps (find the rows on every rank, then delete them). Errors as upsert().
  WriteResult remove_matching(const FilterProgram& filter);

  /// Collective: writes a snapshot of the state after every write so far, and returns once it is
  /// committed (start_snapshot(), then snapshot_step() until done; rank 0 writes the
  /// file from every rank's live rows, then the log records it holds are removed). A snapshot
  /// with nothing new since the last one returns that one. The rows are stored as the engines
  /// hold them (float16 storage: float16; cosine: normalised), so that loading the snapshot
  /// reproduces every score bit for bit. It holds the
  /// calling thread until the file is committed (no search runs meanwhile); to go on searching
  /// while it is written, use start_snapshot() and snapshot_step() (what serve does).
  /// @throws WriteError (kReadOnly) or Error (a file failure: the previous snapshot and the full
  ///   log stay) on rank 0; RemoteError on every rank when a rank failed to read its rows.
  SnapshotResult snapshot();

  /// The snapshot policy (storage.snapshot_log_bytes or storage.snapshot_interval_s > 0):
  /// collective, like snapshot(). Rank 0 takes a snapshot when the log's segments hold more than
  /// storage.snapshot_log_bytes (after applying what was submitted), else broadcasts a step that
  /// does nothing; followers in lock step call it too (or run follow()). With the policy off it
  /// returns at once on every rank, communicating nothing. Returns the snapshot when one was
  /// taken (rank 0). A snapshot that fails is logged, not thrown (the writes before it are
  /// durable whatever happens to it): the log stays whole, and the next try waits until the log
  /// has grown by another storage.snapshot_log_bytes. @throws CommError as upsert().
  std::optional<SnapshotResult> snapshot_if_log_exceeds();

  /// A snapshot written while searches and writes go on (what the service does). Collective:
  /// rank 0 drives, followers run follow(). start_snapshot() takes the view in one step: every
  /// submitted write is applied, and each rank notes its live slots at that seq. Each later
  /// snapshot_step() sends one block of rows (about 4 MiB) to rank 0, whose thread writes and
  /// commits the file off the index thread; a write applied meanwhile first keeps the rows it
  /// replaces that the snapshot has not sent yet, so the file holds exactly the state at the
  /// seq, and the writes after it stay in the log. Returns the current snapshot at once when
  /// nothing is new (nullopt: started). A running snapshot is finished first (its steps run
  /// here). @throws as snapshot(); a failure after the start is reported by snapshot_step().
  std::optional<SnapshotResult> start_snapshot();
  /// The snapshot policy as snapshot_if_log_exceeds(), starting the snapshot (start_snapshot())
  /// instead of writing it; nothing while one runs. True when one was started (rank 0).
  bool start_snapshot_if_due();
  /// Rank 0, collective when a snapshot runs and the file writer has room (one step): the
  /// running snapshot's next block, or its end. Not running: returns at once, communicating
  /// nothing. @throws CommError as upsert().
  SnapshotProgress snapshot_step();
  /// Rank 0: a snapshot is being written (started and neither committed nor failed).
  bool snapshot_running() const;

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

  /// The update counters (rank 0, any thread; zeros and writable = false on a read-only index,
  /// whose live and capacity rows are the corpus rows).
  UpdateStats update_stats() const;

 private:
  friend struct IndexAccess;  // src/index/index_impl.hpp: the library's loaders, tests, benchmarks
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardtopk
