#pragma once
// The largest float64 row norm of rows staged on the device during a streamed load, each row's
// norm the host's row_norm (src/index/admission.hpp) bit for bit: the host reads the corpus
// without a pass over its values.

#include <cuda_runtime.h>

#include <cstdint>

#include "shardtopk/types.hpp"

namespace shardtopk::cuda_detail {

/// One block's running result: the largest norm so far and its row (the smallest row among
/// equal norms); row < 0: no row yet (the bytes 0xFF… read as that: memset to 0xFF to start).
struct RowNormPart {
  double norm;
  std::int64_t row;
};

/// The grid of staged_norm_max: blocks (and so parts) per launch.
constexpr int kLoadNormBlocks = 264;

/// Rows [m, dim] staged in device memory (row-major, `format`: float32 or binary16 bits) are rows
/// row0 .. row0 + m − 1 of the load. For each, the float64 norm as row_norm computes it (four
/// partial sums, element d into sum d mod 4 in order, each product and sum rounded to float64
/// with no fused multiply-add, then sqrt((s0 + s1) + (s2 + s3))); parts[b] (b < kLoadNormBlocks,
/// device memory) takes the largest of its block's rows into its running result, ties to the
/// smaller row. Launches on one stream accumulate; combine the parts on the host (larger norm,
/// then smaller row). Non-finite values give a non-finite norm (the load refuses them itself).
/// Ordered on `stream`; m ≤ 0: nothing.
void staged_norm_max(const void* rows, RowFormat format, std::int64_t m, std::int64_t dim, std::int64_t row0,
                     RowNormPart* parts, cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
