#pragma once
// Padding of candidate lists (host launcher).

#include <cuda_runtime.h>

#include <cstdint>

#include "shardtopk/ordering.hpp"

namespace shardtopk::cuda_detail {

/// out [n] (device) ← pad_candidate(), on `stream`; returns at once (capturable). n = 0: nothing.
void fill_pad(Candidate* out, std::int64_t n, cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
