#pragma once
// The batch-1 search of a filtered query (host launcher): the scan visits only the candidate
// blocks of the query's filter (filter_blocks.hpp), in one of two ways picked on the device from
// the passing count:
//   dense     every row of each candidate block in turn; rows the filter (or the live mask)
//             rules out are not loaded;
//   gathered  the passing rows listed first (4 bytes each), then only those scored, whole rows of
//             contiguous 16-byte chunks (a scattered filter's 1 % costs its 1 % of the bytes).
// Either writes each scanned row's exact score (score.cuh: the bits of the unfiltered scan and of
// the batched re-scoring) and global id compactly, with the level-1 histogram; select1
// (scan_select.hpp, select_compact) then picks the k best.

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernels/scan_select.hpp"
#include "engine/cuda/kernels/workspace_types.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::cuda_detail {

struct FilteredScanArgs;

/// The filtered scan's fixed choices for one shard (plan_filtered_scan): kernels and grids.
struct FilteredScanPlan {
  int list_blocks = 0, dense_blocks = 0, gather_blocks = 0;  ///< persistent grids
  FilterScan path = FilterScan::kAuto;
  /// kAuto: gathered when pass_rows < gather_below × (candidate blocks × 1,024).
  float gather_below = 0.0f;
  void (*launch)(const ScanSelectPlan&, const FilteredScanPlan&, const FilteredScanArgs&, cudaStream_t) = nullptr;
};

/// Plans the filtered scans of the shard `scan` was planned for (same storage, metric, rows,
/// row shape), on the current device of `sms` multiprocessors.
FilteredScanPlan plan_filtered_scan(const ScanSelectPlan& scan, FilterScan path, int sms);

/// One filtered batch-1 search: device pointers.
struct FilteredScanArgs {
  /// The shard, ids, query, k, out and select workspace as for scan_select, with `scores`
  /// [blocks × 1,024] receiving the compact scores and `masks` unused.
  ScanSelectArgs base;
  std::int64_t* cids = nullptr;       ///< [blocks × 1,024] the compact entries' global ids
  std::int32_t* row_list = nullptr;   ///< [rows] the gathered scan's rows
  FilterState fs;                     ///< the search's filter programs (filter_blocks.hpp, done)
  const std::int32_t* query_program = nullptr;  ///< [batch] each query's program, −1: none
  int q = 0;                          ///< this query's position (query_program[q] read on the device)
  const std::uint32_t* live = nullptr;  ///< [mask words] rows not deleted, or nullptr: all
};

/// Queues the search on `stream`: a memset of the select state, the row list (gathered only),
/// the dense or the gathered scan (the other returns at once), with a.base.window.on the window
/// pass (window_select.hpp), the select. The program index is
/// read on the device, so a captured graph serves any filter; a query without one (−1) is
/// scanned densely over every block. Returns at once (capturable).
inline void filtered_scan_select(const ScanSelectPlan& plan, const FilteredScanPlan& fplan, const FilteredScanArgs& a,
                                 cudaStream_t stream) {
  fplan.launch(plan, fplan, a, stream);
}

/// The fraction of a candidate block's rows under which plan_filtered_scan's kAuto gathers.
float filtered_scan_gather_below();

}  // namespace shardtopk::cuda_detail
