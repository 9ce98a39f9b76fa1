// An attribute column's rows sorted by value, and each range filter's interval of that order.
//
// order: CUB's device radix sort of (key, row) pairs (Merrill and Grimshaw, "High performance
//   and scalable radix sorting", Parallel Processing Letters 21(2), 2011) over order-preserving
//   unsigned keys of the values (the usual sign-flip transform of two's-complement and IEEE 754
//   bit patterns).
// intervals: a lower and an upper binary search per query over the sorted keys.

#include "engine/cuda/kernels/column_order.hpp"

#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/launch.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk::cuda_detail {
namespace {

constexpr int kThreads = 256;


/// keys[r] ← the order key of row r's value, rows[r] ← r.
__global__ void keys_kernel(const std::uint64_t* __restrict__ values, const std::int64_t* __restrict__ ids, bool real,
                            std::uint64_t* __restrict__ keys, std::int32_t* __restrict__ rows, std::int64_t n) {
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; r < n;
       r += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t bits = values ? values[r] : static_cast<std::uint64_t>(ids[r]);
    keys[r] = real ? real_order_key(bits) : int_order_key(bits);
    rows[r] = static_cast<std::int32_t>(r);
  }
}

/// The first position whose key is > key (upper) or ≥ key (lower).
__device__ std::int64_t search(const std::uint64_t* keys, std::int64_t n, std::uint64_t key, bool upper) {
  std::int64_t lo = 0, hi = n;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    const std::uint64_t k = keys[mid];
    if (upper ? k <= key : k < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

__global__ void positions_kernel(ColumnOrderView order, const QueryFilter* __restrict__ filters, int batch,
                                 std::int64_t* __restrict__ pos) {
  const int q = blockIdx.x * blockDim.x + threadIdx.x;
  if (q >= batch) return;
  const QueryFilter f = filters[q];
  std::int64_t a = 0, b = order.n;
  const bool ranged = f.column == order.column &&
                      (order.real ? f.kind == QueryFilter::kRealRange : f.kind == QueryFilter::kIntRange);
  if (ranged) {
    bool empty;
    std::uint64_t klo, khi;
    if (order.real) {
      const double lo = __longlong_as_double(static_cast<long long>(f.lo));
      const double hi = __longlong_as_double(static_cast<long long>(f.hi));
      empty = !(lo <= hi);  // NaN bounds included
      klo = real_order_key(f.lo);
      khi = real_order_key(f.hi);
    } else {
      empty = static_cast<std::int64_t>(f.lo) > static_cast<std::int64_t>(f.hi);
      klo = int_order_key(f.lo);
      khi = int_order_key(f.hi);
    }
    if (empty) {
      a = b = 0;
    } else {
      a = search(order.keys, order.n, klo, false);
      b = search(order.keys, order.n, khi, true);
    }
  }
  pos[2 * q] = a;
  pos[2 * q + 1] = b;
}

}  // namespace

bool ColumnOrder::build(const DeviceFilterTable& table, int column, bool real, cudaStream_t stream) {
  const std::int64_t n = table.rows;
  SHARDTOPK_EXPECTS(n >= 0 && n <= INT32_MAX, "ColumnOrder: ", n, " rows outside 0 .. 2^31 - 1");
  SHARDTOPK_EXPECTS(column == kFilterIdColumn || (column >= 0 && column < table.columns), "ColumnOrder: column ",
                    column, " outside the table's ", table.columns, " columns");
  view_ = ColumnOrderView{};
  if (n == 0) {
    view_.column = column;
    view_.real = real;
    return true;
  }
  std::size_t scratch = 0;
  CHECK_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, scratch, static_cast<const std::uint64_t*>(nullptr),
                                             static_cast<std::uint64_t*>(nullptr),
                                             static_cast<const std::int32_t*>(nullptr),
                                             static_cast<std::int32_t*>(nullptr), static_cast<int>(n)));
  const auto align = [](std::size_t b) { return (b + 255) / 256 * 256; };
  const std::size_t keys_bytes = align(sizeof(std::uint64_t) * static_cast<std::size_t>(n));
  const std::size_t rows_bytes = align(sizeof(std::int32_t) * static_cast<std::size_t>(n));
  const std::size_t need = 2 * keys_bytes + 2 * rows_bytes + scratch;
  if (bytes_ < need) {
    if (mem_.try_allocate(need) != cudaSuccess) {
      bytes_ = 0;
      return false;
    }
    bytes_ = need;
  }
  char* base = mem_.as<char>();
  auto* keys = reinterpret_cast<std::uint64_t*>(base);
  auto* keys_in = reinterpret_cast<std::uint64_t*>(base + keys_bytes);
  auto* rows = reinterpret_cast<std::int32_t*>(base + 2 * keys_bytes);
  auto* rows_in = reinterpret_cast<std::int32_t*>(base + 2 * keys_bytes + rows_bytes);
  void* tmp = base + 2 * keys_bytes + 2 * rows_bytes;
  const std::uint64_t* values =
      column == kFilterIdColumn ? nullptr : table.values + static_cast<std::int64_t>(column) * table.rows;
  keys_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(values, table.global_ids, real, keys_in, rows_in, n);
  CHECK_CUDA_LAUNCH();
  CHECK_CUDA(cub::DeviceRadixSort::SortPairs(tmp, scratch, keys_in, keys, rows_in, rows, static_cast<int>(n), 0, 64,
                                             stream));
  view_ = ColumnOrderView{keys, rows, n, column, real};
  return true;
}

void range_positions(const ColumnOrderView& order, const QueryFilter* filters, int batch, std::int64_t* pos,
                     cudaStream_t stream) {
  SHARDTOPK_EXPECTS(batch >= 1, "range_positions: batch must be >= 1 (got ", batch, ")");
  positions_kernel<<<(batch + kThreads - 1) / kThreads, kThreads, 0, stream>>>(order, filters, batch, pos);
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
