#pragma once
/// @file index.hpp
/// ShardedIndex: the collective search that ties shard plan, corpus I/O, engine,
/// communicator and merge together (DESIGN.md "Data flow").

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardtopk/communicator.hpp"
#include "shardtopk/config.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/shard_plan.hpp"

namespace shardtopk {

/// What start-up did, for logs and timing summaries.
struct IngestStats {
  double read_s = 0;     ///< HDF5 read + validation of this rank's rows (streamed: read + upload overlapped)
  double upload_s = 0;   ///< engine construction (conversion, upload, norms); streamed: includes read_s, do not add them
  double total_s = 0;    ///< whole constructor, max over ranks
  std::int64_t total_rows = 0;
  std::int64_t dim = 0;
  RowRange rows;         ///< this rank's rows
  std::uint64_t engine_resident_bytes = 0;  ///< this rank's engine memory (device or host)
  /// Largest float64 norm of a raw corpus row over all ranks and its global row (-1: none);
  /// bounds every score (src/index/admission.hpp, README "Score range").
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
  // room for more (health, reload): a follower that gets an op it does not know throws Error
};

/// One rank's search counters, for metrics.
struct RankStats {
  double searches = 0;        ///< local searches run
  double search_seconds = 0;  ///< time in the engine's local search (host view), summed
};

/// The engine limits a ShardedIndex needs for `search` (batch_max, k_max) on `world_size` ranks.
/// Engines given to the ShardedIndex constructor must be built with these limits: one query row
/// more than search.batch_max, which carries each rank's search status through the all-gather
/// (see ShardedIndex::run_data_path).
EngineLimits index_engine_limits(const SearchConfig& search, int world_size);

/// The K a search may ask for: 1 .. min(search.k_max, total_rows). ShardedIndex::search and the
/// service's request parsing share it, so both refuse alike. @throws Error naming k, the range
/// and the binding limit ("(search.k_max)" or "(the corpus rows)").
void check_k(long long k, std::int64_t k_max, std::int64_t total_rows);

/// The collective search over an already loaded shard, engine and communicators. Knows nothing
/// of files, HTTP or the command line: `load_index` reads a corpus and builds one; tests and
/// benchmarks may build one from data in memory.
///
/// Rank 0 drives: each `search` broadcasts one header (op code, batch, k) and then the data
/// path runs on every rank. Followers either call `follow()` (the service and CLI loop, until
/// rank 0 calls `shutdown()`) or call `search` in lock step with rank 0 (tests), which runs one
/// step of the same loop.
class ShardedIndex {
 public:
  /// @param cfg        validated config (search.k_max, search.batch_max, comm.timeout_s are used)
  /// @param metric     the metric the engine was built with
  /// @param total_rows rows of the whole corpus (all ranks)
  /// @param rows       this rank's global rows
  /// @param engine     this rank's engine, built with index_engine_limits(cfg.search, world)
  /// @param host_comm  the MPI communicator (header broadcast, start-up checks)
  /// @param data_comm  the communicator of the data path (NCCL), or nullptr to use host_comm
  /// Not collective. @throws Error when the parts disagree (dimension, metric).
  ShardedIndex(const Config& cfg, Metric metric, std::int64_t total_rows, RowRange rows, std::unique_ptr<Engine> engine,
               std::unique_ptr<Communicator> host_comm, std::unique_ptr<Communicator> data_comm = nullptr);
  ~ShardedIndex();

  ShardedIndex(const ShardedIndex&) = delete;
  ShardedIndex& operator=(const ShardedIndex&) = delete;

  /// Collective search. Rank 0 passes queries [batch, dim] (host, float32); other ranks pass
  /// nullptr and their batch/k are ignored (rank 0's are broadcast). On rank 0, ids [batch, k]
  /// and scores [batch, k] (reported units: similarity, or squared distance for l2) receive the
  /// answer, best first; other ranks may pass nullptr.
  /// @throws Error on every rank when rank 0 rejects the batch (k outside [1, min(k_max, N)],
  ///   batch outside [1, batch_max], a non-finite value: the message names the query index);
  ///   the index stays usable. RemoteError on rank 0 when a rank's local search failed (it names
  ///   the ranks; each failing rank logs its own message); every rank stays usable, followers
  ///   do not throw. CommError when a collective timed out (the job must end).
  void search(const float* queries, int batch, int k, std::int64_t* ids, float* scores);

  /// Like search(), with rank 0's queries already in device memory (`d_queries` [batch, dim],
  /// float32, ordered on `cuda_stream`, a cudaStream_t). No host round trip for the query;
  /// values are validated on the device. Only with the CUDA engine; @throws Error otherwise.
  void search_device(const float* d_queries, void* cuda_stream, int batch, int k,
                     std::int64_t* ids, float* scores);

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

  int rank() const;
  int world_size() const;
  Metric metric() const { return metric_; }
  std::int64_t total_rows() const { return stats_.total_rows; }
  std::int64_t dim() const { return stats_.dim; }
  const IngestStats& ingest_stats() const { return stats_; }
  void set_ingest_stats(const IngestStats& s) { stats_ = s; }
  const Config& config() const { return cfg_; }
  Engine& engine() { return *engine_; }
  Communicator& host_comm() { return *host_comm_; }
  Communicator& data_comm() { return data_comm_ ? *data_comm_ : *host_comm_; }

  /// Searches run on this rank (successful or not) and this rank's local search time, summed
  /// (seconds), for metrics.
  long searches() const { return batches_; }
  double local_search_seconds() const { return local_search_s_; }

  /// This rank's local candidates of the last search [batch, k] (copied to the host), for tests
  /// that check each rank's candidates come from its own rows.
  std::vector<Candidate> last_local_candidates() const;

 private:
  struct Header {
    std::int32_t op = 0;  // IndexOp
    std::int32_t batch = 0;
    std::int32_t k = 0;
    std::int32_t pad = 0;
  };
  void admit_batch(int batch, int k, bool prepare_on_device, const std::function<void()>& stage_queries);
  bool follow_one(bool lock_step);
  void run_search(int batch, int k, std::int64_t* ids, float* scores);
  std::string run_data_path(int batch, int k, bool* ok);

  Config cfg_;
  Metric metric_ = Metric::kInnerProduct;
  IngestStats stats_;
  std::unique_ptr<Communicator> host_comm_;
  std::unique_ptr<Communicator> data_comm_;  // nccl, when used
  std::unique_ptr<Engine> engine_;
  std::vector<float> host_queries_;          // [batch_max, dim] cosine queries, normalised
  // CUDA engine + MPI (staged through host memory), from Engine::alloc_host_staging (pinned):
  float* staged_queries_ = nullptr;          // [batch_max, dim]
  Candidate* staged_candidates_ = nullptr;   // [batch_max + 1, k_max]
  Candidate* staged_gathered_ = nullptr;     // [world, batch_max + 1, k_max]
  std::vector<Candidate> host_status_;       // [k_max] this rank's status row
  std::vector<std::int64_t> host_ids_;       // [batch_max + 1, k_max] answer + status row
  std::vector<float> host_scores_;
  int last_batch_ = 0, last_k_ = 0;
  long batches_ = 0;                        // searches run, for SHARDTOPK_FAULT (test-only fault injection)
  double local_search_s_ = 0;
  bool shut_down_ = false;
  bool queries_on_host_ = false;  // search() staged host queries (the engine keeps a host copy); false: search_device()
};

/// Build this rank's index from a config (collective over MPI_COMM_WORLD; MPI must be
/// initialised, see MpiSession): sets up logging, plans the shards, reads this rank's rows
/// (hyperslab), validates them, chooses the engine backend and builds the engine and the
/// communicators. An error on any rank throws RemoteError on every rank (naming the rank and
/// its message). @param log_progress rank 0 logs read progress for long reads.
std::unique_ptr<ShardedIndex> load_index(const Config& cfg, bool log_progress = true);

/// Build this rank's index from rows already in memory (or a generated shard: ShardInput's
/// `generated`): chooses the engine backend, builds the engine (index_engine_limits) and the
/// data communicator. Collective over host_comm's ranks; an error on any rank throws RemoteError
/// on every rank. `stats` (read times) is completed with upload time and resident bytes.
std::unique_ptr<ShardedIndex> build_index(const Config& cfg, Metric metric, std::int64_t total_rows, RowRange rows,
                                          const ShardInput& shard, std::unique_ptr<Communicator> host_comm,
                                          IngestStats stats = {});

/// The engine backend for cfg.engine.backend (auto: CUDA when a GPU is visible). @throws Error
/// when CUDA is asked for but unavailable, or more ranks share a node than it has GPUs.
EngineBackend choose_backend(const Config& cfg, const Communicator& host_comm);

/// Choose the metric: cfg.search.metric when set, else the corpus file's `distance` attribute
/// (angular → cosine, euclidean → l2, dot/ip → inner_product), else inner_product.
Metric resolve_metric(const Config& cfg);

/// Number of worker threads for the CPU engine: cfg value, or hardware cores ÷ ranks on the node.
int resolve_threads(const Config& cfg, int local_size);

/// Whether load_index streams a shard into the engine (blocks through pinned buffers, no host
/// copy of the shard): the CUDA engine with inner product or l2. Cosine rows are normalised on
/// the host first, so they are read into one host array.
bool streams_shard(bool cuda_engine, Metric metric);

/// Host bytes held at the peak of loading `rows` rows of `dim` columns (not counting the CPU
/// engine's own buffers): streamed, the ids (8 B/row) and one or two pinned float32 blocks of
/// min(read_chunk_rows, rows) rows (two when the shard spans more than one block); otherwise
/// the float32 rows and their ids, rows · (4 · dim + 8). Estimate used by `shardtopk plan`.
std::uint64_t load_peak_host_bytes(std::int64_t rows, std::int64_t dim, bool streamed, long long read_chunk_rows);

}  // namespace shardtopk
