#pragma once
// The batched path's last step (host launcher): every pool entry that passes the pool's final
// threshold is scored exactly (score.cuh, the batch-1 arithmetic, so every batch size reports
// the same bits), and the best k are sorted by the ordering rule.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/kernels/candidate_pools.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::cuda_detail {

/// Opts the re-scoring kernels into the shared memory of a final sort of `cap` candidates
/// (cap × 12 bytes), on the current device; once per device and size (call at start-up).
void prepare_rescore(int cap);

/// Re-scores the pools of a batched search into out [batch, k] (device), best first by the
/// ordering rule, padding when a pool holds fewer than k rows. shard [rows, nvec · V] (storage
/// `dtype`, V = 16 bytes of it), qpad [batch, nvec · V] the exact queries zero-padded, ids
/// [rows] the global ids. A query whose pool overflowed (pools.overflow bit 0) is skipped (out
/// untouched: the caller re-runs it through the batch-1 scan); one whose final candidates
/// exceed `cap` gets bit 1 in pools.overflow and is skipped too. One block of 1,024 threads per
/// query, cap × 12 bytes of dynamic shared memory (prepare_rescore). On `stream`, returns at once.
void rescore_pools(Dtype dtype, bool l2, const void* shard, int nvec, const float* qpad, int k,
                   const CandidatePools& pools, int cap, const std::int64_t* ids, int batch, Candidate* out,
                   cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
