#pragma once
// One attribute column's rows in ascending order of value, on the device (host launchers): a
// batch whose queries each filter one range of that column reads its rows as a run of this
// order. A range's passing rows are then one interval of positions, [lo, hi), however the rows
// are spread over the shard: the batched path's chunks become intervals of positions whose rows
// are gathered (kernels/gathered_scores), and each chunk is scored only for the queries whose
// interval meets it (a hashed tenant attribute reads like a clustered one).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/cuda_raii.cuh"
#include "engine/cuda/kernels/filter_table.cuh"
#include "engine/cuda/kernels/workspace_types.hpp"

namespace shardtopk::cuda_detail {

/// A column's order: keys [n] ascending (each row's value as an order-preserving unsigned key:
/// int64 with its sign bit flipped; float64 with −0 taken as +0, negatives' bits inverted and
/// positives' sign bit set, NaNs beyond ±inf) and rows [n] (int32), the shard row of each key.
struct ColumnOrderView {
  const std::uint64_t* keys = nullptr;
  const std::int32_t* rows = nullptr;
  std::int64_t n = 0;
  int column = -2;    ///< attribute index, or kFilterIdColumn (the global ids); −2 before any build
  bool real = false;  ///< float64 keys (QueryFilter::kRealRange), else int64 (kIntRange)
};

/// Owns a ColumnOrderView's memory: 24 bytes per row plus the sort's scratch (about 12 bytes per
/// row), allocated on the first build (about 360 MB for 10M rows), kept for later builds.
class ColumnOrder {
 public:
  /// Sorts column `column` of `table` (device; kFilterIdColumn: the global ids), read as int64
  /// (real = false) or float64 values, into the order on `stream` (CUB radix sort of (key, row)
  /// pairs). Returns false, holding no order, when the device memory it needs is not free (the
  /// caller then keeps the shard's own order). @throws Error on any other CUDA failure, or for
  /// a column outside the table.
  bool build(const DeviceFilterTable& table, int column, bool real, cudaStream_t stream);

  /// The order of the last build (n = 0, column −2 before any).
  ColumnOrderView view() const { return view_; }
  /// Bytes held.
  std::size_t bytes() const { return bytes_; }

 private:
  DeviceBuffer mem_;
  std::size_t bytes_ = 0;
  ColumnOrderView view_;
};

/// pos [batch, 2] (device, int64) ← for each query q, the interval [lo, hi) of positions of
/// `order` whose rows' values lie in filters[q]'s range (inclusive bounds, as the filter reads
/// them: NaN bounds or lo > hi give an empty interval). filters[q] must be a range
/// (QueryFilter::kIntRange for an int64 order, kRealRange for a float64 one) over the order's
/// column; any other filter gets [0, n) (every position). One thread per query, a binary
/// search each. On `stream`, returns at once. batch ≥ 1.
void range_positions(const ColumnOrderView& order, const QueryFilter* filters, int batch, std::int64_t* pos,
                     cudaStream_t stream);

/// The order-preserving key of an int64 value's bits (host and device).
__host__ __device__ __forceinline__ std::uint64_t int_order_key(std::uint64_t bits) {
  return bits ^ 0x8000000000000000ull;
}

/// The order-preserving key of a float64 value's bits: −0 and +0 share one key; NaNs sort beyond
/// ±inf (host and device).
__host__ __device__ __forceinline__ std::uint64_t real_order_key(std::uint64_t bits) {
  if (bits == 0x8000000000000000ull) bits = 0;  // −0 == +0
  return (bits >> 63) != 0u ? ~bits : bits | 0x8000000000000000ull;
}

}  // namespace shardtopk::cuda_detail
