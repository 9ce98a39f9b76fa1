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
  double read_s = 0;     ///< HDF5 read + validation of this rank's rows
  double upload_s = 0;   ///< engine construction (conversion, upload, norms)
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

class ShardedIndex {
 public:
  /// Collective over MPI_COMM_WORLD: plans the shards, reads this rank's rows (hyperslab),
  /// validates them, builds the engine and the communicator. An error on any rank throws
  /// RemoteError on every rank (naming the rank and its message).
  /// @param log_progress  rank 0 logs read progress for long reads.
  explicit ShardedIndex(const Config& cfg, bool log_progress = true);
  ~ShardedIndex();

  ShardedIndex(const ShardedIndex&) = delete;
  ShardedIndex& operator=(const ShardedIndex&) = delete;

  /// Collective search. Rank 0 passes queries [batch, dim] (host, float32); other ranks pass
  /// nullptr and their batch/k are ignored (rank 0's are broadcast). On rank 0, ids [batch, k]
  /// and scores [batch, k] (reported units: similarity, or squared distance for l2) receive the
  /// answer, best first; other ranks may pass nullptr.
  /// @throws Error on every rank when rank 0 rejects the batch (k outside [1, min(k_max, N)],
  ///   batch outside [1, batch_max], a non-finite value: the message names the query index);
  ///   the index stays usable. RemoteError when a rank failed during the search.
  ///   CommError when a collective timed out (the job must end).
  void search(const float* queries, int batch, int k, std::int64_t* ids, float* scores);

  /// Like search(), with rank 0's queries already in device memory (`d_queries` [batch, dim],
  /// float32, ordered on `cuda_stream`, a cudaStream_t). No host round trip for the query;
  /// values are validated on the device. Only with the CUDA engine; @throws Error otherwise.
  void search_device(const float* d_queries, void* cuda_stream, int batch, int k,
                     std::int64_t* ids, float* scores);

  int rank() const;
  int world_size() const;
  Metric metric() const { return metric_; }
  std::int64_t total_rows() const { return stats_.total_rows; }
  std::int64_t dim() const { return stats_.dim; }
  const IngestStats& ingest_stats() const { return stats_; }
  const Config& config() const { return cfg_; }
  Engine& engine() { return *engine_; }
  Communicator& host_comm() { return *host_comm_; }
  Communicator& data_comm() { return data_comm_ ? *data_comm_ : *host_comm_; }

  /// This rank's local candidates of the last search [batch, k] (copied to the host), for tests
  /// that check each rank's candidates come from its own rows.
  std::vector<Candidate> last_local_candidates() const;

 private:
  void admit_batch(int batch, int k, const std::function<void()>& stage_queries);
  void run_search(int batch, int k, std::int64_t* ids, float* scores);

  Config cfg_;
  Metric metric_ = Metric::kInnerProduct;
  IngestStats stats_;
  std::unique_ptr<Communicator> host_comm_;
  std::unique_ptr<Communicator> data_comm_;  // nccl, when used
  std::unique_ptr<Engine> engine_;
  std::vector<float> host_queries_;          // [batch_max, dim] staging
  std::vector<Candidate> host_candidates_;   // staging for mpi-over-device and results
  std::vector<Candidate> host_gathered_;
  std::vector<std::int64_t> host_ids_;       // results when the caller passes no ids/scores
  std::vector<float> host_scores_;
  int last_batch_ = 0, last_k_ = 0;
  long batches_ = 0;
  int pending_batch_ = 0, pending_k_ = 0;  // rank 0's admitted batch, broadcast to all  // searches run, for SHARDTOPK_FAULT (test-only fault injection)
};

/// Choose the metric: cfg.search.metric when set, else the corpus file's `distance` attribute
/// (angular → cosine, euclidean → l2, dot/ip → inner_product), else inner_product.
Metric resolve_metric(const Config& cfg);

/// Number of worker threads for the CPU engine: cfg value, or hardware cores ÷ ranks on the node.
int resolve_threads(const Config& cfg, int local_size);

}  // namespace shardtopk
