#pragma once
// The batched path's candidate pools (host launchers): after the tensor-core GEMM of each chunk
// of rows, every (query, row) whose approximate score lies within 2Δ of the query's running k-th
// approximate score enters the query's candidate pool (DESIGN.md "filter then re-score"; Δ
// bounds |approximate − exact|, docs/EXACTNESS.md), and pools are pruned as thresholds rise.
// rescore.hpp then scores the pools exactly. Attribute filters are elsewhere (filter_mask.cuh).

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernels/workspace_types.hpp"

namespace shardtopk::cuda_detail {

/// The GEMM output of one chunk of rows: S[q · ld + i] = (q̂ · scale) · row(row0 + i), the
/// approximate dot product of query q and chunk row i, for i < rows (device).
struct ChunkScores {
  const void* S = nullptr;        ///< [batch, ld]: float, or __half when `half` (float16 shards)
  bool half = false;
  std::int64_t ld = 0;            ///< ≥ rows
  int rows = 0;                   ///< rows of the chunk, ≥ 1
  std::int64_t row0 = 0;          ///< shard row of chunk row 0
  const float* row_sq = nullptr;  ///< [shard rows] ‖x‖² (l2), nullptr otherwise
  bool l2 = false;                ///< approximate score −‖q − x‖² = 2 q·x − ‖x‖² − ‖q‖²
};

/// The per-query candidate pools of a batched search (device).
struct CandidatePools {
  const QueryInfo* qinfo = nullptr;  ///< [batch] Δ, scale, ‖q‖² (prepare_batched_queries)
  PoolEntry* pool = nullptr;         ///< [batch, cap] (approximate score, shard row)
  std::int64_t cap = 0;
  std::uint32_t* count = nullptr;    ///< [batch] entries appended (zero before the first chunk)
  float* thr = nullptr;              ///< [batch] the pool's threshold (approximate score)
  std::uint32_t* overflow = nullptr; ///< [batch] set (bit 0) when a pool overflowed (zero before)
};

/// The first chunk: each query's threshold from the chunk's own k-th approximate score (−inf
/// when the chunk has fewer than k rows) minus 2Δ, and every row of the chunk that reaches it
/// into the query's pool. One block of 1,024 threads per query. On `stream`, returns at once.
/// `masks` (optional): rows a query may not return never enter its pool and do not count for
/// its threshold.
void collect_first_chunk(const ChunkScores& chunk, int batch, int k, const CandidatePools& pools,
                         cudaStream_t stream, const RowMasks* masks = nullptr);

/// A later chunk: every (query, row) whose approximate score reaches the query's threshold
/// enters its pool (one pool atomic per warp). On `stream`, returns at once.
void collect_chunk(const ChunkScores& chunk, int batch, const CandidatePools& pools, cudaStream_t stream,
                   const RowMasks* masks = nullptr);

/// For each query whose pool holds more than `trigger` entries: raises the threshold to the
/// pool's k-th approximate score minus 2Δ (never lowers it) and drops the entries below it,
/// stable, in place. One block of 1,024 threads per query. On `stream`, returns at once.
void compact_pools(int batch, int k, std::uint32_t trigger, const CandidatePools& pools, cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
