#pragma once
// The window pass of a bounded batch-1 search (host launcher): ranges, pages, ranks and counts
// (QueryWindow, QueryCounts; ordering.hpp, DESIGN.md invariant 11). It runs between a scan
// (scan_select.hpp, or filtered_scan.hpp's compact entries), which wrote the exact score of every
// row the query may return (−inf for the others), and that scan's select: one pass over the
// scores that counts the rows passing and the rows ahead of the window's floor, rules out the
// rows outside the window (their score becomes −inf, which the masked select never takes), and
// rebuilds the level-1 histogram from the rows left, so that the select returns the best k rows
// inside the window by the ordering rule. Reads 4 bytes per scanned row (a row's global id only
// when its score equals a bound's), against the scan's dim × dtype bytes. −inf marks a row the
// query may not return, so a row the query may return must score finite: the index admits only
// corpora and queries whose scores are (DESIGN.md, docs/EXACTNESS.md "Score range").

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/kernels/scan_select.hpp"

namespace shardtopk::cuda_detail {

/// Queues the window pass of args.window on `stream` (args.window.on; returns at once,
/// capturable): a reset of the select state (hists, the candidate count and the state, keeping
/// the filtered scan's entry and list counts), then one kernel over the entries [max_entries]
/// (or *entries of them, device, when a filtered scan wrote them compactly) of args.scores and
/// args.ids. With args.window.counts (device, [1], zeroed before the first pass that adds to it):
/// passing += the finite scores, within += those ahead of the floor (when the window counts),
/// scanned = args.window.scanned. Then select_compact (scan_select.hpp) picks args.k of what is
/// left. Grid: plan.select_blocks blocks of kSelThreads (any grid is correct).
void window_pass(const ScanSelectPlan& plan, const ScanSelectArgs& args, std::int64_t max_entries,
                 const std::uint32_t* entries, cudaStream_t stream);

}  // namespace shardtopk::cuda_detail
