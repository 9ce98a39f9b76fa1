#pragma once
// A search's filters at the cost of their selectivity (host launchers): every program's verdict
// over every summary block from the attribute table's min/max bounds and the list of its
// candidate blocks (those some row may pass), then the row masks of the candidate blocks the
// bounds leave open. Blocks the bounds rule out are never visited again: the scans walk the
// candidate lists (filtered_scan.hpp), and a block the bounds accept whole has no mask at all.

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernels/filter_table.cuh"
#include "engine/cuda/kernels/workspace_types.hpp"

namespace shardtopk::cuda_detail {

/// Verdicts of programs [0, n_programs) over every block of `table`, one thread per (program,
/// block): fs.flags (0 none, 1 some, 2 all), fs.cand (for each program its blocks with a
/// nonzero flag, `cand_blocks` of them in fs.stats; ascending within each run of 1,024 blocks,
/// runs in any order) and fs.stats (zeroed here; pass_rows counts the rows of blocks flagged 2).
/// @param packed_programs device copy of pack_filter_programs's output (fitting table's schema)
/// On `stream`, returns at once. @throws Error on a failed launch.
void launch_block_verdicts(const DeviceFilterTable& table, const std::uint8_t* packed_programs, int n_programs,
                           const FilterState& fs, cudaStream_t stream);

/// Row masks of the blocks flagged 1 by launch_block_verdicts (call it first, on the same
/// stream). A flagged block whose rows all fail becomes 0, one whose rows all pass becomes 2;
/// stats.pass_rows counts its passing rows. `single` ≥ 0: only program `single`, one thread
/// block per block of its candidate list (work follows the candidates, not the shard); −1: every
/// program over every block, one warp per (block, program) for programs of up to 32
/// instructions (a block's attribute values are read once for all of them), the thread block for
/// longer ones. `grid`: thread blocks (filter_rows_grid: all resident).
/// On `stream`, returns at once. @throws Error on bad arguments or a failed launch.
void launch_filter_rows(const DeviceFilterTable& table, const std::uint8_t* packed_programs, int n_programs,
                        int single, const FilterState& fs, int grid, cudaStream_t stream);

/// act [n_programs, chunks] (device) ← 1 where program p flags a block of chunk c (rows
/// [chunk_rows[c], chunk_rows[c + 1]), device [chunks + 1]) after launch_filter_rows, else 0:
/// the chunks of a batched search each query must score. On `stream`, returns at once.
void launch_chunk_activity(const FilterState& fs, int n_programs, const std::int64_t* chunk_rows, int chunks,
                           std::uint8_t* act, cudaStream_t stream);

/// Blocks of launch_filter_rows resident at once on this device (its grid for a whole shard).
int filter_rows_grid(int sms);

}  // namespace shardtopk::cuda_detail
