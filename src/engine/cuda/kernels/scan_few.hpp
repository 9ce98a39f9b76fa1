#pragma once
// The search of a few queries (2 ≤ batch ≤ kFewQueries, no row masks) in one pass over the shard
// (host launcher): every row is read once and scored against each query with the batch-1
// arithmetic (score.cuh), so each query's scores — and its answer — have the bits of a batch-1
// search of it; a level-1 histogram per query; then select_few (scan_select.hpp), the batch-1
// radix select and final sort of each query, in one launch. Memory bound like batch 1: a batch of
// up to 8 reads the shard once where the tensor-core path reads it once per chunk of rows and
// re-scores (docs/PERFORMANCE.md, "Batches of 2 to 8").

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/kernels/scan_select.hpp"
#include "engine/cuda/kernels/workspace_types.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::cuda_detail {

/// The few-query scan's fixed choices for one shard, made once by plan_scan_few().
struct ScanFewPlan {
  int max_batch = 0;        ///< the largest batch it serves by default (0: none; the batched path serves them)
  int fit_batch = 0;        ///< the largest batch its kernels fit (shared memory; SearchPath::kFew)
  int blocks = 0;           ///< scan grid: one block per multiprocessor at most
};

/// Plans the few-query scan of the shard that `scan` (plan_scan_select) plans the batch-1 scan of,
/// for batches up to `max_batch` (≤ kFewQueries; the workspace's FewQueryState count), on the
/// current device with `sms` multiprocessors and `smem_optin` bytes of shared memory per block:
/// a batch whose kernel's shared memory (a 4,096-bin histogram and the zero-padded query per
/// query slot) does not fit is left to the batched path (max_batch lowered), and so are, on a
/// float16/bfloat16 shard, batches above 4 past 512 MiB and every batch past 2 GiB (measured
/// slower there than the tensor-core path; fit_batch keeps them for SearchPath::kFew).
ScanFewPlan plan_scan_few(const ScanSelectPlan& scan, int max_batch, int sms, std::size_t smem_optin);

/// One few-query search: device pointers.
struct ScanFewArgs {
  const void* shard = nullptr;        ///< [rows, dpad] storage type, zero-padded
  const std::int64_t* ids = nullptr;  ///< [rows] global ids (ties go to the smaller)
  const float* queries = nullptr;     ///< [batch, dim] float32, validated (finite)
  int batch = 0;                      ///< 2 .. plan.max_batch
  int k = 0;                          ///< 1 .. cap / 2
  Candidate* out = nullptr;           ///< [batch, k] best first by the ordering rule; padding when rows < k
  float* scores = nullptr;            ///< [batch, rows] workspace: exact ranking scores
  FewQueryState* states = nullptr;    ///< [batch] workspace, zeroed by the launcher
  PoolEntry* cand = nullptr;          ///< [batch, cap] workspace: candidates of the final sorts
  /// With scan.l2_hints: the batch-1 scan's direction word (ScanSelectArgs::dir), flipped by
  /// each search, so that batch-1 and few-query searches alternate their sweeps alike.
  std::uint32_t* dir = nullptr;
  /// Optional direct export of the answers (ids and reported scores [batch, k] beside out).
  ExportTarget exp;
};

/// Queues the search of args.queries on `stream`: a memset of the states, the scan, the selects.
/// Returns at once (capturable). Query q's answer has the same bits as scan_select() of query q.
void scan_few(const ScanSelectPlan& scan, const ScanFewPlan& plan, const ScanFewArgs& args, cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
