// The window pass of a bounded batch-1 search (memory bound: 4 bytes per scanned row, about
// 10 µs per 10M rows on H200 against the scan's milliseconds): see window_select.hpp.

#include "engine/cuda/kernels/window_select.hpp"

#include <math_constants.h>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/select1.cuh"
#include "engine/cuda/kernels/select_primitives.cuh"
#include "shardtopk/engine.hpp"

namespace shardtopk::cuda_detail {
namespace {

/// A fresh select state for the pass (one block): the histograms and the candidate count
/// zeroed, the state's counters reset; the filtered scan's entries and list rows kept (the pass
/// and the select read them).
__global__ void window_reset_kernel(std::uint32_t* __restrict__ hists, std::uint32_t* __restrict__ count,
                                    Batch1State* __restrict__ st) {
  for (int i = threadIdx.x; i < kHistWords; i += blockDim.x) hists[i] = 0;
  if (threadIdx.x == 0) {
    *count = 0;
    Batch1State fresh{};
    fresh.entries = st->entries;
    fresh.list_rows = st->list_rows;
    *st = fresh;
  }
}

/// Whether (s, id) comes strictly after `after` and strictly ahead of `floor`, and whether it is
/// ahead of `floor` (ordering.hpp's inside / ahead_of_floor), reading the id only on a tie with a
/// bound's score.
struct WindowTest {
  QueryWindow w;
  const std::int64_t* ids;
  __device__ __forceinline__ void operator()(float s, std::int64_t r, bool* ahead, bool* in) const {
    bool a = s > w.floor.score, b = s < w.after.score;
    if (s == w.floor.score || s == w.after.score) {
      const Candidate c{s, ids[r]};
      a = ahead_of_floor(w, c);
      b = better(w.after, c);
    }
    *ahead = a;
    *in = a && b;
  }
};

__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

/// The pass (see window_select.hpp): every block takes a grid-stride share of the entries, adds
/// its counts to *counts with one atomic each, flushes its histogram; the last block resolves the
/// threshold for select1 (select1.cuh).
__global__ void __launch_bounds__(kSelThreads)
    window_kernel(float* __restrict__ scores, const std::int64_t* __restrict__ ids, std::int64_t max_entries,
                  const std::uint32_t* __restrict__ entries, QueryWindow w, QueryCounts* __restrict__ counts,
                  std::int64_t scanned, std::uint32_t* __restrict__ hists, std::uint32_t k, std::uint32_t cap,
                  Batch1State* __restrict__ st) {
  __shared__ std::uint32_t h[kHist1Bins];
  __shared__ unsigned long long block_pass, block_within;
  for (int i = threadIdx.x; i < kHist1Bins; i += blockDim.x) h[i] = 0;
  if (threadIdx.x == 0) {
    block_pass = 0;
    block_within = 0;
  }
  __syncthreads();
  const std::int64_t n = entries ? min(max_entries, static_cast<std::int64_t>(*entries)) : max_entries;
  const WindowTest test{w, ids};
  unsigned long long pass = 0, within = 0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < n; r += stride) {
    const float s = scores[r];
    if (s == -CUDART_INF_F) continue;  // a row the query may not return (filter, deleted, padding)
    ++pass;
    bool ahead = false, in = false;
    test(s, r, &ahead, &in);
    within += (w.count != 0 && ahead) ? 1 : 0;
    if (in) atomicAdd(&h[score_key(s) >> 20], 1u);
    else scores[r] = -CUDART_INF_F;
  }
  pass = warp_sum(pass);
  within = warp_sum(within);
  if ((threadIdx.x & 31) == 0 && (pass | within) != 0) {
    atomicAdd(&block_pass, pass);
    atomicAdd(&block_within, within);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kHist1Bins; i += blockDim.x)
    if (h[i]) atomicAdd(&hists[i], h[i]);
  if (counts != nullptr && threadIdx.x == 0) {
    static_assert(sizeof(unsigned long long) == sizeof(std::int64_t), "counts are 64-bit");
    if (block_pass) atomicAdd(reinterpret_cast<unsigned long long*>(&counts->passing), block_pass);
    if (block_within) atomicAdd(reinterpret_cast<unsigned long long*>(&counts->within), block_within);
    if (blockIdx.x == 0) counts->scanned = scanned;
  }
  (void)publish_if_last<kSelThreads>(hists, 1, k, cap, st);
}

}  // namespace

void window_pass(const ScanSelectPlan& p, const ScanSelectArgs& a, std::int64_t max_entries,
                 const std::uint32_t* entries, cudaStream_t stream) {
  window_reset_kernel<<<1, kSelThreads, 0, stream>>>(a.hists, a.count, a.state);
  CHECK_CUDA_LAUNCH();
  window_kernel<<<p.select_blocks, kSelThreads, 0, stream>>>(
      a.scores, a.ids, max_entries, entries, a.window.window, a.window.counts, a.window.scanned, a.hists,
      static_cast<std::uint32_t>(a.k), static_cast<std::uint32_t>(p.cap), a.state);
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
