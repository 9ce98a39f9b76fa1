#pragma once
// The batched path's candidate pools (host launchers): after the tensor-core GEMM of each chunk
// of rows, every (query, row) whose approximate score lies within 2Δ of the query's running k-th
// approximate score enters the query's candidate pool (DESIGN.md "filter then re-score"; Δ
// bounds |approximate − exact|, docs/EXACTNESS.md), and pools are pruned as thresholds rise.
// rescore.hpp then scores the pools exactly. Attribute filters are elsewhere (filter_blocks.hpp):
// a filtered query's rows come in through RowMasks.

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernels/workspace_types.hpp"

namespace shardtopk::cuda_detail {

/// The GEMM output of one chunk of rows: S[q · ld + i] = (q̂ · scale) · row(row0 + i) (gathered:
/// row(order[row0 + i])), the approximate dot product of query q and chunk row i, for i < rows
/// (device).
struct ChunkScores {
  const void* S = nullptr;        ///< [batch, ld]: float, or __half when `half` (float16 shards)
  bool half = false;
  std::int64_t ld = 0;            ///< ≥ rows
  int rows = 0;                   ///< rows of the chunk, ≥ 1
  std::int64_t row0 = 0;          ///< shard row of chunk row 0 (with `order`: its position there)
  const float* row_sq = nullptr;  ///< [shard rows] ‖x‖² (l2), nullptr otherwise
  bool l2 = false;                ///< approximate score −‖q − x‖² = 2 q·x − ‖x‖² − ‖q‖²
  /// Optional (device): a gathered chunk's rows, chunk row i being shard row order[row0 + i]
  /// (kernels/column_order); nullptr: shard row row0 + i.
  const std::int32_t* order = nullptr;
  /// Optional (device, with `order`): [batch, 2] each query's interval [lo, hi) of positions of
  /// the order, exactly the positions of the rows its range passes (range_positions). Seeding
  /// samples a query's rows within it (their live bits read, not their values); the collect
  /// still asks the masks of each candidate (a position test there cost it registers).
  const std::int64_t* spans = nullptr;
};

/// The per-query candidate pools of a batched search (device).
struct CandidatePools {
  const QueryInfo* qinfo = nullptr;  ///< [batch] Δ, scale, ‖q‖² (prepare_batched_queries)
  PoolEntry* pool = nullptr;         ///< [batch, cap] (approximate score, shard row)
  std::int64_t cap = 0;
  std::uint32_t* count = nullptr;    ///< [batch] entries appended (zero before the first chunk)
  float* thr = nullptr;              ///< [batch] the pool's threshold (approximate score)
  std::uint32_t* overflow = nullptr; ///< [batch] set (bit 0) when a pool overflowed (zero before)
  /// [batch] per-query seeding (ChunkQueries::seeded_per_query): the rows each query may return
  /// that its threshold has seen.
  std::uint32_t* seen = nullptr;
};

/// Which queries a chunk's GEMM scored and what they may return.
struct ChunkQueries {
  /// [n] device: row j of the chunk's GEMM output is query qmap[j]; nullptr: row j is query j
  /// (every query of the batch).
  const std::int32_t* qmap = nullptr;
  /// Optional: rows a query may not return never enter its pool and do not count for its
  /// threshold.
  const RowMasks* masks = nullptr;
  /// The thresholds were set to −inf by init_thresholds, and each query's is raised by
  /// seed_chunk (not first) from a sample of each chunk holding rows it may return, while it has
  /// seen few of them (pools.seen), before collect_chunk takes the chunk; false: the first chunk
  /// seeds every query and collect_chunk takes every query after it.
  bool seeded_per_query = false;
};

/// `first`: for each of the chunk's n GEMM rows, the query's threshold from the chunk's own k-th
/// approximate score (−inf when fewer than k of its rows are allowed) minus 2Δ, and every row of
/// the chunk that reaches it into the query's pool. Not `first` (cq.seeded_per_query): only the
/// queries whose threshold came from fewer than 1/8 of the chunk's rows, from a strided sample of
/// at most 32,768 of the chunk's rows (the larger of the two thresholds); nothing enters a pool
/// (collect_chunk next). One block of 1,024 threads per query. On `stream`, returns at once.
void seed_chunk(const ChunkScores& chunk, int n, int k, const CandidatePools& pools, const ChunkQueries& cq,
                bool first, cudaStream_t stream);

/// A chunk after the first (every chunk with cq.seeded_per_query, after seed_chunk): every
/// (query, row) of its n GEMM rows whose approximate score reaches the query's threshold enters
/// its pool (one pool atomic per warp); a threshold of −inf takes every allowed row. With
/// cq.masks, a block of 8,192 (__half output; float: 4,096) rows that holds more than
/// max(512, 2k) allowed rows reaching a query's threshold adds only those within 2Δ of the k-th
/// of them (the flood guard: sound by seed_chunk's argument). On `stream`.
void collect_chunk(const ChunkScores& chunk, int n, int k, const CandidatePools& pools, const ChunkQueries& cq,
                   cudaStream_t stream);

/// Whether the flood guard alone keeps a pool of `pool_cap` entries from overflowing while
/// `chunks` chunks of `rows` rows (GEMM output __half when `half`) are collected between two
/// compactions: at most max(512, 2k) entries per block of the collect, for every block, within
/// three quarters of the pool (the rest for what the last compaction kept). When it does not,
/// a filtered batch keeps seeding young queries per chunk (seed_chunk, not first).
bool guard_bounds_chunks(int rows, bool half, int k, int chunks, std::int64_t pool_cap);

/// Opts the seeding kernels into their dynamic shared memory on the current device (the first
/// call per device; seed_chunk calls it too) and returns the seeding grid (blocks resident at
/// once). @throws Error on a CUDA failure.
int prepare_candidate_pools();

/// thr [batch] = −inf and seen [batch] = 0 (before the first chunk of a search with
/// ChunkQueries::seeded_per_query).
void init_thresholds(const CandidatePools& pools, int batch, cudaStream_t stream);

/// For each query whose pool holds more than `trigger` entries: raises the threshold to the
/// pool's k-th approximate score minus 2Δ (never lowers it) and drops the entries below it,
/// stable, in place. One block of 1,024 threads per query. On `stream`, returns at once.
void compact_pools(int batch, int k, std::uint32_t trigger, const CandidatePools& pools, cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
