#pragma once
// The batched path's scores and candidate collection in one kernel (host launcher; Hopper,
// sm_90a): per tile of 128 queries × 256 shard rows the products accumulate in registers (wgmma,
// float32 accumulation of exact 16-bit products, operands brought to shared memory by the
// Tensor Memory Accelerator), and the epilogue puts every (query, row) whose approximate score
// reaches the query's threshold into its pool, as candidate_pools.hpp's collect_chunk does from
// a GEMM's output. The [batch, rows] score matrix is never written: per chunk of rows this reads
// the rows once and writes only the pools' entries.

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernels/candidate_pools.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::cuda_detail {

/// Whether this build carries the fused kernel (compiled for sm_90a) and the current device runs
/// it (compute capability 9.0), for rows of `dtype` (float16, bfloat16) padded to `dpad` values
/// (a positive multiple of 8). @throws Error on a CUDA failure.
bool fused_collect_supported(Dtype dtype, std::int64_t dpad);

/// The fused scores-and-collect of one shard and one query buffer: the two tensor maps (the
/// shard's rows, the batched queries) built once, for every search of a BatchedSearch.
class FusedCollect {
 public:
  /// shard [rows, dpad] and queries [batch_max, dpad] of `dtype` (device; 16-byte aligned, the
  /// layouts of Workspace::shard and Workspace::qhat). @throws Error (SHARDTOPK_EXPECTS) when
  /// !fused_collect_supported(dtype, dpad) or a size is out of range, naming the value; Error on
  /// a CUDA or driver failure.
  FusedCollect(Dtype dtype, const void* shard, std::int64_t rows, std::int64_t dpad, const void* queries,
               int batch_max);

  /// Queues the chunk of shard rows [row0, row0 + rows_c) for queries 0 … batch − 1 of the query
  /// buffer (batch ≤ batch_max): every (query q, row r) with approximate score
  /// s̃ = Σ_d q̂_d · x_d · inv_scale(q) (l2: 2·that − row_sq[r] − ‖q‖²) ≥ pools.thr[q] enters
  /// q's pool as PoolEntry{s̃, r}; a full pool sets pools.overflow[q]. The summation order over d
  /// is unspecified, in float32 (docs/EXACTNESS.md's Δ with D_pad = dpad; no rounding to an
  /// output type). A persistent grid of one block of 384 threads per multiprocessor; tiles of 128
  /// queries × 256 rows (batches of at most 64: 64 × 256). On `stream`, returns at once
  /// (capturable). Pools of queries past the batch are not touched. @throws Error
  /// (SHARDTOPK_EXPECTS) for rows outside the shard, batch outside [1, batch_max], l2 without
  /// row_sq, or more tiles than the kernel's int index holds.
  void enqueue(std::int64_t row0, int rows_c, int batch, bool l2, const float* row_sq, const CandidatePools& pools,
               cudaStream_t stream) const;

  /// The most rows one enqueue of `batch` ≥ 1 queries takes: 2^30 tiles (the kernel's int tile
  /// index with room for the grid), 2^38 rows up to 128 queries, 2^29 at 65,535.
  static std::int64_t max_chunk_rows(int batch);

 private:
  struct alignas(64) TensorMap {
    unsigned char bytes[128];  // a CUtensorMap (cuda.h), opaque here
  };
  TensorMap rows_map_{}, query_map_{}, query_map64_{};  // query boxes of 128 and 64 rows
  std::int64_t rows_ = 0, dpad_ = 0;
  int batch_max_ = 0;
  Dtype dtype_;
  int sms_ = 0;
};

}  // namespace shardtopk::cuda_detail
