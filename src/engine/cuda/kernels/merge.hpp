#pragma once
// The device k-way merge of candidate lists (host launcher).

#include <cuda_runtime.h>

#include <cstdint>

#include "shardtopk/ordering.hpp"

namespace shardtopk::cuda_detail {

/// Merges `parts` candidate lists per query into out [batch, k] (device), best first by the
/// ordering rule; padding where the lists hold fewer than k real candidates in total.
/// List p of query q starts at lists + p · list_stride + q · k and holds k candidates, best
/// first (list_stride = batch · k for lists [parts, batch, k]). Each candidate's output rank
/// is computed from the candidates alone, so the result does not depend on the order of the
/// lists, and equal candidates keep a deterministic order. `out` must not overlap the lists.
/// On `stream`, returns at once (capturable). batch = 0: nothing.
/// Requires parts ≥ 1, k ≥ 1 (checked by the callers).
void merge_lists(const Candidate* lists, int parts, std::int64_t list_stride, int batch, int k, Candidate* out,
                 cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
