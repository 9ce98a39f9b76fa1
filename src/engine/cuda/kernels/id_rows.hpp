#pragma once
// An `ids_in` allow-list resolved to shard rows on the device (host launchers): the shard's
// global ids sorted once (with their rows) into an IdRowIndex, then each listed id looked up
// there, so that the list's rows are marked directly instead of every row of every block the
// list's id range meets being evaluated against it. A list of 100,000 ids spread over a
// 10M-row shard meets every block: evaluating its rows (filter_blocks.hpp's rows kernel) took
// 175 µs on one H200, about as long as the gathered scan of the rows it lets through.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/cuda_raii.cuh"
#include "engine/cuda/kernels/filter_table.cuh"
#include "engine/cuda/kernels/workspace_types.hpp"

namespace shardtopk::cuda_detail {

/// Whether `program` is one `ids_in` leaf (a sorted list of global ids) and nothing else: the
/// programs launch_id_list_rows resolves.
bool is_id_list_program(const FilterProgram& program);

/// The shard's global ids in ascending order with their rows: ids [rows] (int64) and rows [rows]
/// (int32), device memory. Equal ids (a dead slot beside a live one) sit together, each with
/// its row.
struct IdRowView {
  const std::int64_t* ids = nullptr;
  const std::int32_t* rows = nullptr;
  std::int64_t n = 0;
};

/// Owns an IdRowView's memory: 12 bytes per row plus the sort's scratch (about 8 bytes per row),
/// allocated on the first build (120 MB + scratch for 10M rows).
class IdRowIndex {
 public:
  /// Sorts table.global_ids [table.rows] (device) into the index on `stream` (CUB radix sort of
  /// (id, row) pairs). Returns false, holding no memory and no index, when the device memory it
  /// needs is not free (the caller then evaluates the lists row by row). @throws Error on any
  /// other CUDA failure.
  bool build(const DeviceFilterTable& table, cudaStream_t stream);

  /// The index of the last build (n = 0 before any).
  IdRowView view() const { return view_; }
  /// Bytes held.
  std::size_t bytes() const { return bytes_; }

 private:
  DeviceBuffer mem_;
  std::size_t bytes_ = 0;
  std::int64_t capacity_ = 0;  // rows the allocation holds
  IdRowView view_;
};

/// Row masks of program `p` (is_id_list_program) of the packed programs, as launch_filter_rows
/// with single = p writes them, from the index instead of the rows: after launch_block_verdicts
/// on the same stream, each candidate block of p flagged 1 gets its mask (the rows whose global
/// id is listed, by a binary search of each listed id in `index`) and its flag (0 when no row
/// passes, 2 when every row does), and stats[p].pass_rows counts its passing rows. `index` must
/// be a build of `table`'s current global ids; `members`: the list's length (the host's copy,
/// for the grid). On `stream`, returns at once.
/// @throws Error on bad arguments or a failed launch.
void launch_id_list_rows(const DeviceFilterTable& table, const IdRowView& index, const std::uint8_t* packed_programs,
                         int n_programs, int p, std::int64_t members, const FilterState& fs,
                         cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
