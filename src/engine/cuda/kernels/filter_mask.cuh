#pragma once
// GPU evaluation of compiled filter programs (shardtopk/filter.hpp) over a shard's attribute
// columns: one row bitmask and one flag per summary block for each program. Internal header: the
// launcher takes a cudaStream_t; no public header includes this one.
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

 private:
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  DeviceFilterTable view_;
};

/// Evaluates `n_programs` programs over shard rows [rows.lo, rows.hi), in one pass over the
/// attribute columns (one thread block per summary block, the programs in turn; a block whose
/// summaries decide a program is written without reading its rows).
/// @param[in] table            the shard's attribute table on the device
/// @param[in] packed_programs  device copy of pack_filter_programs's output for the programs,
///                             which must fit table's schema (check_filter_fits)
/// @param[in] rows             rows.lo a multiple of kFilterBlockRows; rows.hi <= table.rows
/// @param[out] masks           [n_programs, mask_stride_words], device: bit (i % 32) of word
///                             i / 32 of program p's row is set when row rows.lo + i passes; bits
///                             past the last row are 0; words past filter_mask_words are untouched
/// @param[out] block_flags     optional (nullptr), [n_programs, flag_stride], device: for each
///                             summary block from rows.lo / kFilterBlockRows on, 0 when none of
///                             its rows in the range passes, 2 when all do, 1 otherwise
/// Work is ordered on `stream`; nothing is allocated. @throws Error on bad arguments (named) or
/// a failed launch.
void launch_filter_mask(const DeviceFilterTable& table, const std::uint8_t* packed_programs, int n_programs,
                        RowRange rows, std::uint32_t* masks, std::int64_t mask_stride_words,
                        std::uint8_t* block_flags, std::int64_t flag_stride, cudaStream_t stream);

}  // namespace shardtopk
