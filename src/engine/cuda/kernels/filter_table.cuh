#pragma once
// A shard's attribute table in device memory (shardtopk/filter.hpp): its columns, global ids and
// per-block bounds, which the filter kernels (filter_blocks.hpp) evaluate programs over.
// Internal header; no public header includes this one.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "shardtopk/filter.hpp"

namespace shardtopk {

/// Device memory layout of one shard's attribute table (all pointers are device memory).
/// Column values and bounds are 8-byte words: int64 values, or float64 bit patterns, as the
/// schema says; the compiled program knows which (its leaf opcodes carry the type).
struct DeviceFilterTable {
  std::int64_t rows = 0;    ///< shard rows
  std::int64_t blocks = 0;  ///< ceil(rows / kFilterBlockRows)
  int columns = 0;          ///< attribute columns
  const std::uint64_t* values = nullptr;     ///< [columns, rows]: column c, row r at c · rows + r
  const std::int64_t* global_ids = nullptr;  ///< [rows]
  const std::uint64_t* block_min = nullptr;  ///< [columns + 1, blocks]; row `columns`: the global ids
  const std::uint64_t* block_max = nullptr;  ///< [columns + 1, blocks]
};

/// Owns the device memory behind a DeviceFilterTable (one allocation on the current device).
class DeviceFilterTableStorage {
 public:
  /// Bytes the table of `rows` rows and `columns` columns takes on the device.
  static std::size_t bytes_for(std::int64_t rows, int columns);

  /// Allocates and uploads `table` (columns, global ids, block bounds) on `stream`, and waits
  /// for the copies. @throws Error on a CUDA failure (nothing stays allocated).
  DeviceFilterTableStorage(const AttributeTable& table, cudaStream_t stream);
  ~DeviceFilterTableStorage();
  DeviceFilterTableStorage(const DeviceFilterTableStorage&) = delete;
  DeviceFilterTableStorage& operator=(const DeviceFilterTableStorage&) = delete;

  const DeviceFilterTable& table() const { return view_; }
  std::size_t bytes() const { return bytes_; }

  /// Copies rows [rows.lo, rows.hi) of `table` (the host table this one was made from, with the
  /// same shape, after AttributeTable::write_rows): their column values and global ids, and the
  /// block bounds of every block they touch. Ordered on `stream`; returns once the host memory
  /// has been read (pageable copies). @throws Error on a shape mismatch or a CUDA failure.
  void update_rows(const AttributeTable& table, RowRange rows, cudaStream_t stream);

  /// Writes m listed rows (a batch of Engine::write_rows) with one scatter kernel, nothing from
  /// the host: slots [m] (device, distinct rows of the table), words [columns + 1, m] (device:
  /// row i's value of column c at c · m + i as an 8-byte word, int64 or float64 bits as the
  /// schema says, then the global ids at columns · m + i). The block bounds follow with
  /// update_bounds. Ordered on `stream`. @throws Error on a CUDA failure.
  void scatter_rows(const std::int64_t* slots, const std::uint64_t* words, std::int64_t m, cudaStream_t stream);

  /// Copies the block bounds of every block that rows [rows.lo, rows.hi) touch from `table` (the
  /// host table after AttributeTable::write_rows), every column and the ids: pageable copies of
  /// 16 · (columns + 1) bytes per block, ordered on `stream`, read before it returns.
  /// @throws Error on a shape mismatch or a CUDA failure.
  void update_bounds(const AttributeTable& table, RowRange rows, cudaStream_t stream);

 private:
  void check_shape(const AttributeTable& table, RowRange rows) const;

  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  DeviceFilterTable view_;
};

}  // namespace shardtopk
