#pragma once
// The final answer's split into ids and reported scores (host launcher).

#include <cuda_runtime.h>

#include <cstdint>

#include "shardtopk/ordering.hpp"

namespace shardtopk::cuda_detail {

/// Splits list [n] (device) into ids [n] and reported scores [n] (l2: the squared distance
/// −score; otherwise the score), so that only n × (8 + 4) bytes cross to the host. ids and
/// scores may be device memory or mapped pinned host memory (pass its device address): the
/// kernel writes through the mapping, with no copy after it. On `stream`, returns at once
/// (capturable). n = 0: nothing.
void split_results(const Candidate* list, std::int64_t n, bool l2, std::int64_t* ids, float* scores,
                   cudaStream_t stream);

/// split_results() where query q's row of k results is written as ids kPadId and scores NaN when
/// invalid[q] != 0 (queries rejected on the device by the stream-ordered search path).
void split_results_marked(const Candidate* list, std::int64_t n, bool l2, std::int64_t* ids, float* scores,
                          const std::uint8_t* invalid, int k, cudaStream_t stream);

/// split_results() plus, in the same launch, the copy of `status_count` 16-byte slots, slot i
/// from status_src + i · status_stride, to status_dst [status_count] (device or mapped host
/// memory): the ranks' statuses of a multi-rank search travel with its answer. n may be 0.
void split_results_with_status(const Candidate* list, std::int64_t n, bool l2, std::int64_t* ids, float* scores,
                               const Candidate* status_src, std::int64_t status_stride, int status_count,
                               Candidate* status_dst, cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
