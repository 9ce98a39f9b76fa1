// The shard's attribute table on the device (its evaluation: filter_blocks.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/filter_table.cuh"
#include "shardtopk/filter_semantics.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {
// ------------------------------------------------------------------------------ the table

std::size_t DeviceFilterTableStorage::bytes_for(std::int64_t rows, int columns) {
  const auto r = static_cast<std::size_t>(rows), c = static_cast<std::size_t>(columns);
  const std::size_t blocks = static_cast<std::size_t>((rows + kFilterBlockRows - 1) / kFilterBlockRows);
  return 8 * (c * r + r + 2 * (c + 1) * blocks);
}

DeviceFilterTableStorage::DeviceFilterTableStorage(const AttributeTable& table, cudaStream_t stream) {
  const std::int64_t rows = table.rows(), blocks = table.blocks();
  const int columns = table.columns();
  bytes_ = bytes_for(rows, columns);
  if (bytes_ > 0) CHECK_CUDA(cudaMalloc(&base_, bytes_));
  try {
    auto* words = static_cast<std::uint64_t*>(base_);
    auto* values = words;
    auto* ids = values + static_cast<std::size_t>(columns) * static_cast<std::size_t>(rows);
    auto* bmin = ids + rows;
    auto* bmax = bmin + static_cast<std::size_t>(columns + 1) * static_cast<std::size_t>(blocks);
    auto put = [&](std::uint64_t* dst, const void* src, std::int64_t count) {
      if (count > 0) CHECK_CUDA(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(count) * 8, cudaMemcpyHostToDevice, stream));
    };
    for (int c = 0; c < columns; ++c) {
      const AttributeColumn& col = table.column(c);
      const BlockBounds& bb = table.bounds(c);
      const bool is_int = col.type == AttributeType::kInt64;
      put(values + static_cast<std::int64_t>(c) * rows, is_int ? static_cast<const void*>(col.ints.data()) : col.reals.data(),
          rows);
      put(bmin + static_cast<std::int64_t>(c) * blocks,
          is_int ? static_cast<const void*>(bb.ints_min.data()) : bb.reals_min.data(), blocks);
      put(bmax + static_cast<std::int64_t>(c) * blocks,
          is_int ? static_cast<const void*>(bb.ints_max.data()) : bb.reals_max.data(), blocks);
    }
    put(reinterpret_cast<std::uint64_t*>(ids), table.global_ids().data(), rows);
    put(bmin + static_cast<std::int64_t>(columns) * blocks, table.bounds(kFilterIdColumn).ints_min.data(), blocks);
    put(bmax + static_cast<std::int64_t>(columns) * blocks, table.bounds(kFilterIdColumn).ints_max.data(), blocks);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    view_.rows = rows;
    view_.blocks = blocks;
    view_.columns = columns;
    view_.values = values;
    view_.global_ids = reinterpret_cast<const std::int64_t*>(ids);
    view_.block_min = bmin;
    view_.block_max = bmax;
  } catch (...) {
    (void)cudaStreamSynchronize(stream);
    cudaFree(base_);
    throw;
  }
}

namespace {

/// dst [columns + 1 word-columns of `rows`] at row slots[i] ← words [c · m + i], every c.
__global__ void scatter_rows_kernel(std::uint64_t* __restrict__ dst, std::int64_t rows, int words_per_row,
                                    const std::int64_t* __restrict__ slots, const std::uint64_t* __restrict__ words,
                                    std::int64_t m) {
  const std::int64_t n = m * words_per_row;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t c = e / m, i = e - c * m;
    dst[c * rows + slots[i]] = words[e];
  }
}

}  // namespace

void DeviceFilterTableStorage::check_shape(const AttributeTable& table, RowRange range) const {
  SHARDTOPK_EXPECTS(table.rows() == view_.rows && table.columns() == view_.columns, "attribute table update: the host "
                    "table has ", table.rows(), " rows and ", table.columns(), " columns, the device table ", view_.rows,
                    " and ", view_.columns);
  SHARDTOPK_EXPECTS(range.lo >= 0 && range.lo <= range.hi && range.hi <= view_.rows, "attribute table update: rows [",
                    range.lo, ", ", range.hi, ") outside [0, ", view_.rows, ")");
}

void DeviceFilterTableStorage::update_bounds(const AttributeTable& table, RowRange range, cudaStream_t stream) {
  check_shape(table, range);
  if (range.size() == 0) return;
  const std::int64_t rows = view_.rows, blocks = view_.blocks;
  const int columns = view_.columns;
  const std::int64_t b0 = range.lo / kFilterBlockRows, b1 = (range.hi - 1) / kFilterBlockRows + 1;
  auto* words = static_cast<std::uint64_t*>(base_);
  auto* bmin = words + static_cast<std::size_t>(columns + 1) * static_cast<std::size_t>(rows);
  auto* bmax = bmin + static_cast<std::size_t>(columns + 1) * static_cast<std::size_t>(blocks);
  auto put = [&](std::uint64_t* dst, const void* src) {
    CHECK_CUDA(cudaMemcpyAsync(dst + b0, static_cast<const std::uint64_t*>(src) + b0,
                               static_cast<std::size_t>(b1 - b0) * 8, cudaMemcpyHostToDevice, stream));
  };
  for (int c = 0; c < columns; ++c) {
    const BlockBounds& bb = table.bounds(c);
    const bool is_int = table.column(c).type == AttributeType::kInt64;
    put(bmin + static_cast<std::int64_t>(c) * blocks, is_int ? static_cast<const void*>(bb.ints_min.data()) : bb.reals_min.data());
    put(bmax + static_cast<std::int64_t>(c) * blocks, is_int ? static_cast<const void*>(bb.ints_max.data()) : bb.reals_max.data());
  }
  put(bmin + static_cast<std::int64_t>(columns) * blocks, table.bounds(kFilterIdColumn).ints_min.data());
  put(bmax + static_cast<std::int64_t>(columns) * blocks, table.bounds(kFilterIdColumn).ints_max.data());
}

void DeviceFilterTableStorage::update_rows(const AttributeTable& table, RowRange range, cudaStream_t stream) {
  check_shape(table, range);
  if (range.size() == 0) return;
  const std::int64_t rows = view_.rows;
  const int columns = view_.columns;
  auto* words = static_cast<std::uint64_t*>(base_);
  auto* ids = words + static_cast<std::size_t>(columns) * static_cast<std::size_t>(rows);
  auto put = [&](std::uint64_t* dst, const void* src, std::int64_t first, std::int64_t count) {
    CHECK_CUDA(cudaMemcpyAsync(dst + first, static_cast<const std::uint64_t*>(src) + first,
                               static_cast<std::size_t>(count) * 8, cudaMemcpyHostToDevice, stream));
  };
  for (int c = 0; c < columns; ++c) {
    const AttributeColumn& col = table.column(c);
    const bool is_int = col.type == AttributeType::kInt64;
    put(words + static_cast<std::int64_t>(c) * rows, is_int ? static_cast<const void*>(col.ints.data()) : col.reals.data(),
        range.lo, range.size());
  }
  put(ids, table.global_ids().data(), range.lo, range.size());
  update_bounds(table, range, stream);
}

void DeviceFilterTableStorage::scatter_rows(const std::int64_t* slots, const std::uint64_t* words, std::int64_t m,
                                            cudaStream_t stream) {
  if (m <= 0) return;
  constexpr int kThreads = 256;
  const int columns = view_.columns;
  const std::int64_t n = m * (columns + 1);
  const int grid = static_cast<int>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, 4096));
  scatter_rows_kernel<<<grid, kThreads, 0, stream>>>(static_cast<std::uint64_t*>(base_), view_.rows, columns + 1,
                                                      slots, words, m);
  CHECK_CUDA(cudaGetLastError());
}

DeviceFilterTableStorage::~DeviceFilterTableStorage() {
  if (base_) cudaFree(base_);
}

}  // namespace shardtopk
