#pragma once
/// @file engine.hpp
/// A resident shard that scores query batches and selects a local top-k.
///
/// Engines know nothing of MPI or NCCL. An engine lives in one memory space (host for the CPU
/// engine, device for the CUDA engine); every pointer it takes or returns in `search`/`merge`
/// lives in that space. All buffers an engine needs are allocated at construction from the
/// limits in `EngineLimits` (DESIGN.md invariant 5): a search allocates nothing.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardtopk/ordering.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk {

enum class MemSpace { kHost, kDevice };

/// A rank's rows, float32 on the host, ready for upload. For cosine the rows are already
/// L2-normalised (see `normalize_rows`). `ids` are the global ids of the rows.
struct ShardInput {
  const float* data = nullptr;  ///< [rows, dim], row-major; unused (may be nullptr) when `generated`
  std::int64_t rows = 0;
  std::int64_t dim = 0;
  const std::int64_t* ids = nullptr;  ///< [rows]; nullptr: global ids first_row + i
  /// Generated shard (bench_scaling, tests): row i holds generated_value(seed, first_row + i, j)
  /// (shardtopk/generator.hpp), L2-normalised for cosine with normalize_rows()' arithmetic. The
  /// CUDA engine makes it on its device (no host copy); the CPU engine materialises it.
  bool generated = false;
  std::uint64_t seed = 0;
  std::int64_t first_row = 0;
  /// Streamed shard (CUDA engine; `data` unused): the engine allocates and takes the ids, and the
  /// rows arrive later through upload_buffer() / upload_rows() / finish_upload(), so the caller
  /// can read the next block of a file while the previous one is copied to the device.
  bool streamed = false;
};

/// Sizes fixed at start-up.
struct EngineLimits {
  int batch_max = 64;
  int k_max = 1024;
  int world_size = 1;  ///< sizes the gathered-candidates buffer [world_size, batch_max, k_max]
  int extra_rows = 0;  ///< rows of batch_max that are not queries (the index's status row): messages
                       ///< name search.batch_max as batch_max - extra_rows
};

/// Host↔device traffic counters (bytes), for tests of the data path.
struct TransferCounters {
  std::uint64_t host_to_device = 0;
  std::uint64_t device_to_host = 0;
  /// Queries of batched searches that the CUDA engine re-ran alone through the batch-1 scan
  /// because the batched filter's candidate pool overflowed (same answer, slower); 0 elsewhere.
  std::uint64_t batched_fallbacks = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;

  virtual std::string name() const = 0;  ///< "cpu" or "cuda"
  virtual MemSpace space() const = 0;
  virtual Metric metric() const = 0;
  virtual Dtype dtype() const = 0;
  virtual std::int64_t rows() const = 0;
  virtual std::int64_t dim() const = 0;

  /// Buffers allocated at start-up in this engine's space:
  /// queries [batch_max, dim] float32; local candidates [batch_max, k_max];
  /// gathered candidates [world_size, batch_max, k_max]; merged [batch_max, k_max].
  virtual float* query_buffer() = 0;
  virtual Candidate* local_buffer() = 0;
  virtual Candidate* gathered_buffer() = 0;
  virtual Candidate* merged_buffer() = 0;

  /// Normalise queries [batch, dim] in place for cosine (no-op for other metrics), with the
  /// exact arithmetic of `normalize_rows`, so host and device paths give identical bits.
  /// @throws Error naming the query when its norm is zero.
  virtual void prepare_queries(float* queries, int batch) = 0;

  /// Score queries [batch, dim] against the shard and write the local top-k to out [batch, k],
  /// best first by the ordering rule, padded with pad_candidate() when rows < k. Scores are
  /// ranking scores (l2: negated squared distance). Deterministic: a (query, row) score does
  /// not depend on the batch, the thread count or the shard boundaries.
  virtual void search(const float* queries, int batch, int k, Candidate* out) = 0;

  /// Merge `parts` lists [parts, batch, k] into out [batch, k] with the ordering rule.
  virtual void merge(const Candidate* lists, int parts, int batch, int k, Candidate* out) = 0;

  /// The final answer to the host: list [batch, k] (this space) → ids [batch, k] and scores
  /// [batch, k] in reported units (similarity; squared distance for l2). Moves k × (8 + 4) bytes
  /// per query device→host on the CUDA engine (counted). Returns when the host arrays are filled.
  virtual void export_results(const Candidate* list, int batch, int k, std::int64_t* ids, float* scores) = 0;

  /// Copies host queries [batch, dim] into query_buffer() and returns at once: the CUDA engine
  /// copies them into its pinned staging buffer and queues the upload on its stream (the host
  /// array may be reused when this returns); the CPU engine copies. Counted as host→device.
  virtual void stage_queries(const float* host_queries, int batch) {
    copy_from_host(query_buffer(), host_queries, sizeof(float) * static_cast<std::size_t>(batch) * dim());
  }

  /// The host copy of the batch of the last stage_queries() [batch, dim], valid until the next
  /// stage_queries(): the CUDA engine's pinned staging buffer (the staged multi-rank path
  /// broadcasts from it instead of copying the queries once more); nullptr where there is none.
  virtual const float* staged_host_queries() const { return nullptr; }

  /// Queues export_results() of list [batch, k] into the engine's own host-side buffers (the
  /// CUDA engine: a split kernel that writes k × 12 bytes per query into mapped pinned memory, on
  /// its stream, no wait). read_export() copies the answer out once the stream has completed
  /// (after synchronize() or a communicator's wait()). The list must stay unchanged until then.
  virtual void enqueue_export(const Candidate* list, int batch, int k) {
    pending_export_list_ = list;
    pending_export_batch_ = batch;
    pending_export_k_ = k;
  }
  /// search() into out [batch, k], then enqueue_export() of it: the answer of a one-rank search,
  /// ready for read_export() after synchronize(). Same errors as search(). The CUDA engine's
  /// batched path (batch ≥ 2) queues the export behind its search before its one wait (its pool
  /// overflow check), so the host waits once per batch instead of twice.
  virtual void search_and_export(const float* queries, int batch, int k, Candidate* out) {
    search(queries, batch, k, out);
    enqueue_export(out, batch, k);
  }
  /// ids [batch, k] and scores [batch, k] of the last enqueue_export().
  virtual void read_export(std::int64_t* ids, float* scores) {
    export_results(pending_export_list_, pending_export_batch_, pending_export_k_, ids, scores);
  }

  /// Copy between this engine's space and the host (plain memcpy for the CPU engine). Counted
  /// in transfer_counters(). Ordered on the engine's stream; returns when the copy is done.
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, std::size_t bytes) = 0;

  /// Host memory of `bytes` bytes for copy_to_host / copy_from_host: page-locked for the CUDA
  /// engine (no bounce buffer: a 100 KB copy takes a few µs instead of tens), ordinary memory
  /// for the CPU engine. Owned by the engine, valid while it lives; allocate at start-up, not
  /// per search. @throws Error when the memory cannot be allocated.
  virtual void* alloc_host_staging(std::size_t bytes) = 0;

  /// Streamed upload (an engine built with ShardInput::streamed; the CUDA engine only).
  /// upload_buffer: page-locked host memory for `rows` rows [rows, dim] float32, one of two
  /// buffers used in turn (each allocated on its first use); it waits until the previous copy
  /// out of that buffer has finished.
  /// `rows` may not exceed the first call's. upload_rows: queues the copy of shard rows
  /// [first, first + rows) (local row numbers) from `data` (inside a buffer from upload_buffer:
  /// returns at once; any other host memory: copied before it returns) and their conversion to the storage
  /// type. finish_upload: waits for the copies, then checks that every row arrived once and
  /// computes the norms. @throws Error when the engine does not stream, a block is out of
  /// range or too large, rows are missing at the end, or a value overflows the storage type.
  virtual float* upload_buffer(std::int64_t rows);
  virtual void upload_rows(std::int64_t first, std::int64_t rows, const float* data);
  virtual void finish_upload();
  /// Copy within the engine's space (e.g. a caller's device query buffer into query_buffer()).
  virtual void copy_within(void* dst, const void* src, std::size_t bytes) = 0;

  /// Wait for all work queued on the engine's stream (no-op on the CPU).
  virtual void synchronize() = 0;
  /// The engine's cudaStream_t as void* (nullptr for the CPU engine).
  virtual void* stream() = 0;

  virtual TransferCounters transfer_counters() const = 0;
  virtual void reset_transfer_counters() = 0;

  /// Bytes the engine holds in its own space (shard + workspace).
  virtual std::uint64_t resident_bytes() const = 0;

 protected:
  const Candidate* pending_export_list_ = nullptr;
  int pending_export_batch_ = 0, pending_export_k_ = 0;
};

/// The CPU engine: AVX2/FMA scoring when the processor has it (a portable path with the same
/// arithmetic order otherwise), `threads` worker threads (0 = hardware concurrency).
std::unique_ptr<Engine> make_cpu_engine(const ShardInput& shard, Metric metric, Dtype dtype,
                                        int threads, const EngineLimits& limits);

/// Bytes the CPU engine will allocate in host memory for a shard (shard storage, ids, query and
/// candidate buffers, per-thread selection buffers; equals its resident_bytes()). `threads` as
/// for make_cpu_engine (0 = hardware concurrency). Saturates at UINT64_MAX. make_cpu_engine
/// refuses, before allocating, limits whose buffers exceed the machine's physical memory,
/// naming the largest buffer and its bytes.
std::uint64_t cpu_engine_host_bytes(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& limits,
                                    int threads);

/// This machine's physical memory in bytes: what the CPU engine's buffers are checked against.
std::uint64_t host_memory_bytes();

/// make_cpu_engine's own refusal, without building anything: @throws Error naming the largest
/// buffer, its bytes and the total when cpu_engine_host_bytes() exceeds host_memory_bytes().
void check_cpu_engine_fits(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& limits, int threads);

/// Checks, before any row is read, that the engine `backend` (kCpu or kCuda) for a shard of
/// [rows, dim] fits this machine: cpu_engine_host_bytes() against host_memory_bytes(), or
/// cuda_engine_device_bytes() against the free memory of GPU `device` (skipped when that
/// cannot be queried; the engine checks again when it allocates). `threads` as for make_cpu_engine.
/// @throws Error naming the bytes needed and the memory there is (what `shardtopk plan` shows).
void check_engine_fits(EngineBackend backend, std::int64_t rows, std::int64_t dim, Dtype dtype,
                       const EngineLimits& limits, int threads, int device);

/// The CUDA engine on device `device`. @throws Error when shardtopk was built without CUDA,
/// when the device does not exist, or when the shard does not fit (bytes needed and free).
std::unique_ptr<Engine> make_cuda_engine(const ShardInput& shard, Metric metric, Dtype dtype,
                                         int device, const EngineLimits& limits);

/// True when built with CUDA and at least one GPU is visible.
bool cuda_available();
/// Number of visible GPUs (0 when built without CUDA or none visible).
int cuda_device_count();
/// True when shardtopk was compiled with CUDA support.
bool built_with_cuda();

/// Free and total memory of GPU `device` in bytes. Returns false when built without CUDA or the
/// device does not exist.
bool cuda_device_memory(int device, std::uint64_t* free_bytes, std::uint64_t* total_bytes);

/// Bytes the CUDA engine will allocate on its device for a shard (shard storage + workspace).
std::uint64_t cuda_engine_device_bytes(std::int64_t rows, std::int64_t dim, Dtype dtype,
                                       const EngineLimits& limits);

/// L2-normalise rows [rows, dim] in place: norm = sqrt(Σ x² in float64, in index order), then
/// x ← float(x · (1 / norm)) in float64. Used for corpus rows at ingest and for host queries;
/// the CUDA engine's device query normalisation does the same arithmetic.
/// @throws Error naming `label` and row (first_row + i) when a norm is zero.
void normalize_rows(float* data, std::int64_t rows, std::int64_t dim, std::int64_t first_row,
                    const char* label);

}  // namespace shardtopk
