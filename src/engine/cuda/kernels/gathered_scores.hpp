#pragma once
// Tensor-core scores of a gathered set of shard rows against a batch of queries (host launcher):
// the batched GEMM's arithmetic (float32 accumulation of exact 16-bit products, one rounding of
// the sum to the output type) and output layout, for rows listed by index instead of a
// contiguous chunk, each read once per group of 32 queries from wherever it lies.

#include <cuda_runtime.h>

#include <cstdint>

#include "shardtopk/types.hpp"

namespace shardtopk::cuda_detail {

/// The tensor-core scores of a gathered set of shard rows: S[j · ld + i] = Σ_d queries[j, d] · shard[rows[i], d]
/// for j < n, i < count, float32 accumulation (mma.sync m16n8k16), written as __half (round to nearest) for float16
/// shards and as float for bfloat16 shards. Rows are read once per group of queries from wherever they lie.
/// The layout is the batched GEMM's (column-major [count, n], leading dimension ld): query j's scores are the
/// contiguous run out[j · ld, j · ld + count), which candidate_pools.hpp's ChunkScores reads.
/// The summation order over d is unspecified but always float32, with no partial sums rounded to the
/// output type (the bound Δ of docs/EXACTNESS.md holds with D_pad = dpad).
struct GatheredScores {
  const void* shard = nullptr;          ///< [shard rows, dpad] float16 or bfloat16 (device; 16-byte aligned)
  std::int64_t dpad = 0;                ///< padded dimension: a multiple of 8 (16 bytes), ≥ 8
  const std::int32_t* rows = nullptr;   ///< [count] shard rows to score, any order, repeats allowed (device)
  int count = 0;                        ///< ≥ 1
  const void* queries = nullptr;        ///< [n, dpad] in the storage type (device; 16-byte aligned rows)
  int n = 0;                            ///< ≥ 1
  void* out = nullptr;                  ///< [n, ld]: __half (float16 shards) or float (bfloat16) (device)
  std::int64_t ld = 0;                  ///< ≥ count; cells i ≥ count of a query's run are left untouched
};

/// Queries one thread block of gathered_scores scores together: each further group reads the
/// rows again (from L2).
constexpr int kGatheredQueryGroup = 32;

/// The largest padded dimension gathered_scores takes: a group's queries stay in 96 KiB of
/// shared memory.
constexpr std::int64_t kGatheredMaxDpad = 1536;

/// Whether gathered_scores handles shards of `dtype` (float16, bfloat16).
bool gathered_scores_supported(Dtype dtype);
/// ... and rows of `dpad` values (a positive multiple of 8 up to kGatheredMaxDpad).
bool gathered_scores_supported(Dtype dtype, std::int64_t dpad);

/// Queues the scores on `stream`; returns at once (capturable: no allocation, no synchronisation).
/// Blocks of 128 threads, each 128 gathered rows × 32 queries (ceil(count / 128) · ceil(n / 32) blocks, the groups
/// of one block of rows neighbours in the grid), the group's queries in 2 KiB of shared memory per 32 values; tuned for the memory-bound case
/// of a few dozen queries and random rows (each row's bytes are read from memory once, and again from L2 per
/// further 32 queries). Entries of `rows` must be valid shard rows (not checked: device data).
/// @throws Error (SHARDTOPK_EXPECTS) for an unsupported dtype or bad sizes (dpad not a positive multiple of 8 up to kGatheredMaxDpad,
///   count < 1, n < 1, more than 2³¹ − 1 blocks, ld < count, null or misaligned pointers), naming
///   the value; nothing is queued then. Error from CHECK_CUDA if the launch fails.
void gathered_scores(Dtype dtype, const GatheredScores& a, cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
