#pragma once
// The CUDA engine's batched search (B ≥ 2; arithmetic bound): per chunk of rows, approximate
// scores from a tensor-core GEMM (cuBLAS; a chunk of gathered rows: kernels/gathered_scores;
// query rounded to the storage type, float32 accumulation) land
// in a [B, R] workspace; every row whose approximate score is within 2Δ of the running k-th
// approximate score enters the query's pool (candidate_pools); the pools are re-scored with the
// exact arithmetic and sorted (rescore). Two streams: the GEMM of chunk c + 1 (tensor cores, on
// the search's stream) overlaps the candidate collection of chunk c (memory, on a side stream
// that forks from and joins back into the search's stream through events, so that the whole
// search can be captured into one CUDA graph). Unfiltered float16/bfloat16 batches on compute
// capability 9.0 score and collect each chunk after the first in one kernel on the side stream
// (kernels/fused_collect), which never writes the [B, R] scores.

#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "core/cuda_raii.cuh"
#include "engine/cuda/kernels/fused_collect.hpp"
#include "engine/cuda/plan.hpp"
#include "shardtopk/engine.hpp"

namespace shardtopk::cuda_detail {

/// One chunk of rows of a batched search.
struct RowChunk {
  std::int64_t row0 = 0;
  int rows = 0;
};

/// The chunks of a filtered batched search and the queries each one scores: chunks no query may
/// return a row of are left out; one that fewer than all queries may GEMMs only those (their
/// queries gathered), and neighbouring such chunks are merged while their GEMM output fits a
/// buffer. The chunks are runs of shard rows, or intervals of a column's order of them.
struct ChunkSchedule {
  std::vector<RowChunk> chunks;        ///< in row (or order) order
  std::vector<int> queries;            ///< [chunks] the batch: all; else the length of a list
  std::vector<std::int64_t> first;     ///< [chunks] where the chunk's list starts in qmap
  const std::int32_t* qmap = nullptr;  ///< device: the lists, one after the other
  bool full = false;                   ///< every chunk of chunks(batch, k), every query
  /// Optional (device, [shard rows]): the chunks are intervals of positions of this order of the
  /// shard's rows (kernels/column_order), chunk position p being shard row order[p]; their rows
  /// are gathered into the GEMM (kernels/gathered_scores). nullptr: chunks are runs of rows.
  const std::int32_t* order = nullptr;
  /// With `order` (device, [batch, 2]): each query's interval [lo, hi) of its positions, the
  /// rows its range passes (ChunkScores::spans).
  const std::int64_t* spans = nullptr;
};

class BatchedSearch {
 public:
  /// For a shard of rows ≥ 1 laid out by `plan` in `ws` (device). Creates the side stream, the
  /// events and a cuBLAS handle bound to `stream` with its workspace in the arena, on the
  /// current device.
  /// `fuse`: chunks of unfiltered batches go through kernels/fused_collect where
  /// fused_collect_supported (false: always cuBLAS and the collect kernel).
  BatchedSearch(Dtype dtype, bool l2, std::int64_t rows, std::int64_t dim, const Plan& plan, const Workspace& ws,
                const EngineLimits& limits, int cap, cudaStream_t stream, bool fuse = true);

  /// Queues the search of queries [batch, dim] (device, float32, validated) into out [batch, k]
  /// (device) on `stream`: no host synchronisation (capturable). A query whose pool overflowed
  /// has overflow[q] ≠ 0 afterwards and its out row untouched: the caller re-runs it through
  /// the batch-1 scan (same bits). max_sq: the shard's largest stored ‖x‖² (Δ's bound).
  /// `schedule` (filtered searches, optional): the chunks' queries (chunks(batch, k) order);
  /// each query's threshold then comes from the first chunk holding k rows it may return.
  void enqueue(const float* queries, int batch, int k, Candidate* out, double max_sq, cudaStream_t stream,
               const RowMasks* masks = nullptr, const ChunkSchedule* schedule = nullptr);

  /// The chunks of rows a search of `batch` queries and `k` goes through, in order: the first
  /// seeds the thresholds (8,192 rows at most), each later one has at most 8 × the rows before
  /// it, up to what one GEMM output buffer holds (`fused`: the fused kernel's chunks, which hold
  /// no GEMM output, up to 196,608 rows or the rows before them, the larger).
  std::vector<RowChunk> chunks(int batch, int k, bool fused = false) const;

  /// Whether a schedule's chunks may be intervals of a column's order (ChunkSchedule::order):
  /// the storage type is one kernels/gathered_scores scores.
  bool gathers_rows() const;

  /// GEMM outputs a merged span of a filtered schedule may hold (a chunk of n queries × rows
  /// needs n · rows): kChunkBudget of one buffer.
  std::int64_t outputs_per_buffer() const;

 private:
  /// Rows per chunk for a batch: the [batch, R] GEMM output fits one ping-pong buffer.
  std::int64_t chunk_rows(int batch, std::uint64_t out_bytes) const;
  /// Points cuBLAS at `stream` (and again at its workspace, which cublasSetStream resets).
  void bind(cudaStream_t stream);

  Dtype dtype_;
  bool l2_;
  std::int64_t rows_, dim_, dpad_;
  std::uint64_t sbuf_bytes_;
  std::int64_t pool_cap_;
  int cap_;
  Workspace ws_;
  cudaStream_t bound_ = nullptr;  // the stream cuBLAS is bound to
  // Declaration order = reverse destruction order: cuBLAS first, then the side stream (which
  // waits for its work) and the events.
  Event ev_scored_[2], ev_pooled_[2];
  Stream side_;
  CublasHandle cublas_;
  std::optional<FusedCollect> fused_;  // the fused scores-and-collect, where supported and wanted
};

}  // namespace shardtopk::cuda_detail
