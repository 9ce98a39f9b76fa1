#pragma once
// The batch-1 threshold (device code): the radix-select levels over the 4096 + 4096 + 256-bin
// histograms of score keys, resolved by the last block of a scan or select grid. Shared by the
// unfiltered scan (scan_select.cu) and the filtered scans (filtered_scan.cu), whose selections
// then run the same select1 kernel.

#include <cstdint>

#include "engine/cuda/kernels/select_primitives.cuh"
#include "engine/cuda/kernels/workspace_types.hpp"

namespace shardtopk::cuda_detail {

struct Resolution {
  int status;              // 0 resolved, 2 needs level 2, 3 needs level 3
  std::uint32_t thr;       // resolved: candidates are keys ≥ thr (> thr with tie_overflow)
  std::uint32_t above;     // with tie_overflow: keys strictly above thr
  std::uint32_t tie_overflow;
  std::uint32_t prefix;    // unresolved: the key prefix the next level refines
};

/// Resolves the batch-1 threshold from the histograms available (levels 1 .. `levels`), stopping
/// at the first level whose candidate count (keys at or above the threshold) is at most `cap`.
template <int NT>
__device__ Resolution resolve(const std::uint32_t* hists, int levels, std::uint32_t k, std::uint32_t cap) {
  const std::uint32_t* h1 = hists;
  const std::uint32_t* h2 = hists + kHist1Bins;
  const std::uint32_t* h3 = h2 + kHist2Bins;
  Resolution r{0, 0u, 0u, 0u, 0u};
  const BinPick p1 = find_bin<NT>(h1, kHist1Bins, k);
  if (p1.bin < 0) return r;  // fewer rows than k: take them all (every key ≥ 0)
  const std::uint32_t b1 = static_cast<std::uint32_t>(p1.bin);
  if (p1.above + h1[b1] <= cap) {
    r.thr = b1 << 20;
    return r;
  }
  if (levels < 2) {
    r.status = 2;
    r.prefix = b1;
    return r;
  }
  const BinPick p2 = find_bin<NT>(h2, kHist2Bins, k - p1.above);
  const std::uint32_t b2 = static_cast<std::uint32_t>(p2.bin);
  if (p1.above + p2.above + h2[b2] <= cap) {
    r.thr = (b1 << 20) | (b2 << 8);
    return r;
  }
  if (levels < 3) {
    r.status = 3;
    r.prefix = (b1 << 12) | b2;
    return r;
  }
  const BinPick p3 = find_bin<NT>(h3, kHist3Bins, k - p1.above - p2.above);
  const std::uint32_t b3 = static_cast<std::uint32_t>(p3.bin);
  r.thr = (b1 << 20) | (b2 << 8) | b3;
  r.above = p1.above + p2.above + p3.above;
  r.tie_overflow = r.above + h3[b3] > cap ? 1u : 0u;
  return r;
}

/// Called by every thread of a block after it flushed its histogram: the last block of the grid
/// to finish resolves the threshold from levels 1 .. `levels` and publishes it in *st. Returns
/// true in that block.
template <int NT>
__device__ bool publish_if_last(const std::uint32_t* hists, int levels, std::uint32_t k, std::uint32_t cap,
                                Batch1State* st) {
  if (!last_block_done(&st->done)) return false;
  const Resolution r = resolve<NT>(hists, levels, k, cap);
  if (threadIdx.x == 0) {
    st->status = static_cast<std::uint32_t>(r.status);
    st->thr = r.thr;
    st->prefix = r.prefix;
    st->tie_overflow = r.tie_overflow;
    st->need_ties = r.tie_overflow ? k - r.above : 0u;
    st->done = 0;
  }
  return true;
}

}  // namespace shardtopk::cuda_detail
