#pragma once
// Block- and warp-level selection primitives of the CUDA engine's kernels (device code): bin
// search in a histogram, warp-aggregated appends and histogram updates, the last block of a
// grid, block sorts by the ordering rule, the batched path's radix selects and pool threshold.

#include <cub/block/block_scan.cuh>
#include <math_constants.h>

#include <cstdint>

#include "engine/cuda/kernels/score.cuh"
#include "engine/cuda/kernels/workspace_types.hpp"
#include "shardtopk/ordering.hpp"

namespace shardtopk {
namespace cuda_detail {

/// Threads of the block-wide selection kernels (select1, chunk0, compact, the re-scoring).
constexpr int kSelThreads = 1024;

struct BinPick {
  int bin;              // −1: the histogram holds fewer than `need` entries
  std::uint32_t above;  // entries in bins above `bin`
  std::uint32_t total;
};

/// Finds, in histogram h [nbins] (any memory), the bin that holds the need-th largest entry
/// counting from the top bin down. Every thread of the block (kSelThreads or kScanThreads, a
/// multiple of 32, NT template) must call it; all get the same answer.
template <int NT>
__device__ BinPick find_bin(const std::uint32_t* h, int nbins, std::uint32_t need) {
  using Scan = cub::BlockScan<std::uint32_t, NT>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ BinPick pick;
  const int per = nbins >= NT ? nbins / NT : 1;
  const int j = threadIdx.x;
  const int top = nbins - 1 - j * per;  // this thread's bins: top, top − 1, …, top − per + 1
  std::uint32_t sum = 0;
  if (top >= 0)
    for (int i = 0; i < per; ++i) sum += h[top - i];
  std::uint32_t excl = 0, total = 0;
  Scan(tmp).ExclusiveSum(sum, excl, total);
  if (j == 0) pick = BinPick{-1, total, total};
  __syncthreads();
  if (top >= 0 && total >= need && excl < need && excl + sum >= need) {
    std::uint32_t above = excl;
    for (int i = 0; i < per; ++i) {
      const std::uint32_t c = h[top - i];
      if (above + c >= need) {
        pick = BinPick{top - i, above, total};
        break;
      }
      above += c;
    }
  }
  __syncthreads();
  const BinPick r = pick;
  __syncthreads();  // `pick` and `tmp` may be reused by the next call
  return r;
}

/// Warp-aggregated append of `e` (when `take`) to list[count...], capacity `cap`. All lanes of
/// the warp must call it. Returns false when an entry did not fit.
__device__ __forceinline__ bool warp_append(bool take, const PoolEntry& e, PoolEntry* list, std::uint32_t* count,
                                            std::uint32_t cap) {
  const unsigned m = __ballot_sync(kFullMask, take);
  if (m == 0) return true;
  const int lane = threadIdx.x & 31;
  const int leader = __ffs(m) - 1;
  std::uint32_t base = 0;
  if (lane == leader) base = atomicAdd(count, static_cast<std::uint32_t>(__popc(m)));
  base = __shfl_sync(kFullMask, base, leader);
  bool ok = true;
  if (take) {
    const std::uint32_t pos = base + static_cast<std::uint32_t>(__popc(m & ((1u << lane) - 1u)));
    if (pos < cap) list[pos] = e;
    else ok = false;
  }
  return __all_sync(kFullMask, ok);
}

/// Appends to list[count...] (capacity cap) the values of the calling thread that `takes` marks
/// (bit j < kHeld: its value j, entry(j)), with ONE global atomic per block (a block scan of the
/// threads' counts gives each its place): a warp-aggregated append per load waited on a global
/// atomic's round trip for each of them. All NT threads of the block call it. Returns false in a
/// thread when one of its entries did not fit.
template <int NT, int kHeld, typename Entry>
__device__ bool block_append(unsigned takes, const Entry& entry, PoolEntry* list, std::uint32_t* count,
                             std::uint32_t cap) {
  using Scan = cub::BlockScan<int, NT>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ std::uint32_t base;
  int excl = 0, total = 0;
  Scan(tmp).ExclusiveSum(__popc(takes), excl, total);
  if (total == 0) return true;  // block-uniform
  if (threadIdx.x == 0) base = atomicAdd(count, static_cast<std::uint32_t>(total));
  __syncthreads();
  std::uint32_t at = base + static_cast<std::uint32_t>(excl);
  bool ok = true;
#pragma unroll
  for (int j = 0; j < kHeld; ++j) {  // j known at compile time: held values stay in registers
    if (takes & (1u << j)) {
      if (at < cap) list[at] = entry(j);
      else ok = false;
      ++at;
    }
  }
  return ok;
}

/// Adds 1 to h[bin] for every active lane, one shared-memory atomic per distinct bin of the warp
/// (scores crowd a few bins: plain atomics would serialise). All lanes of the warp must call it.
__device__ __forceinline__ void hist_add(std::uint32_t* h, std::uint32_t bin, bool active) {
  const unsigned act = __ballot_sync(kFullMask, active);
  if (!active) return;
  const unsigned peers = __match_any_sync(act, bin);
  if (static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&h[bin], static_cast<std::uint32_t>(__popc(peers)));
}

/// Called by every thread of a block when its global writes are done: true in the last block of
/// the grid to get here (which then sees every block's writes), false elsewhere. Counts in *done,
/// which the caller resets after use.
__device__ __forceinline__ bool last_block_done(unsigned* done) {
  __shared__ unsigned ticket;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) ticket = atomicAdd(done, 1u);
  __syncthreads();
  if (ticket != gridDim.x - 1) return false;
  __threadfence();
  return true;
}

/// Bitonic sort of (ss, sid) [n] in shared memory, n a power of two, best first by better().
/// Correct for any strict weak order (0-1 principle), so equal padding entries are harmless.
__device__ inline void block_sort(float* ss, std::int64_t* sid, int n) {
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
        const int lo = 2 * i - (i & (stride - 1));
        const int hi = lo + stride;
        const bool best_first = (lo & size) == 0;
        const float s_lo = ss[lo], s_hi = ss[hi];
        const std::int64_t i_lo = sid[lo], i_hi = sid[hi];
        const bool swap = best_first ? better(s_hi, i_hi, s_lo, i_lo) : better(s_lo, i_lo, s_hi, i_hi);
        if (swap) {
          ss[lo] = s_hi;
          ss[hi] = s_lo;
          sid[lo] = i_hi;
          sid[hi] = i_lo;
        }
      }
      __syncthreads();
    }
  }
}

__device__ __forceinline__ int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

/// out[i] = c, and with an export target its id and reported score (the split's values).
__device__ __forceinline__ void write_answer(Candidate* __restrict__ out, const ExportTarget& ex, int i,
                                             const Candidate& c) {
  out[i] = c;
  if (ex.ids != nullptr) ex.write(i, c);
}

/// Writes the best k of entries [0, n) of (ss, sid) (shared memory, room for a power of two ≥ n)
/// to out [k] by the ordering rule, padding when n < k (and to `ex`, when it has a target). Up to
/// 1024 entries each entry finds its rank by comparing with all others (n² / threads steps, no
/// barrier per step; ranks are unique because ids are); above that a bitonic sort.
__device__ inline void sort_and_write(float* ss, std::int64_t* sid, int n, int k, Candidate* __restrict__ out,
                                      const ExportTarget& ex = ExportTarget{}) {
  const Candidate pad = pad_candidate();
  if (n <= 1024) {
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const float s = ss[i];
      const std::int64_t id = sid[i];
      int rank = 0;
      for (int j = 0; j < n; ++j) rank += better(ss[j], sid[j], s, id) ? 1 : 0;
      if (rank < k) write_answer(out, ex, rank, Candidate{s, id});
    }
    for (int i = n + threadIdx.x; i < k; i += blockDim.x) write_answer(out, ex, i, pad);
    return;
  }
  const int p = pow2_at_least(n);
  for (int i = n + threadIdx.x; i < p; i += blockDim.x) {
    ss[i] = pad.score;
    sid[i] = pad.id;
  }
  __syncthreads();
  block_sort(ss, sid, p);
  for (int i = threadIdx.x; i < k; i += blockDim.x) write_answer(out, ex, i, i < n ? Candidate{ss[i], sid[i]} : pad);
}

/// The radix selects of the batched path's thresholds (block_kth_key_offered): the keys' range
/// over the block first (their common top bits need no histogram, and the first pass's bins
/// spread the values instead of crowding them into a few, so plain shared-memory atomics serve),
/// then two passes of 2,048 bins over the next 22 bits. The result is the lower edge of the bin
/// that holds the k-th largest key: the k-th key with the bits below those 22 cleared (none when
/// the keys differ only in their low 22 bits), so a threshold taken from it is sound (the rows of
/// the top k pass it) and lower by less than 2⁻¹³ of the k-th's magnitude (docs/EXACTNESS.md):
/// the pools keep that much more than the 2Δ band below the k-th. Against four passes of 256
/// bins with warp-aggregated histogram updates: docs/PERFORMANCE.md, "Threshold selects".
constexpr int kKthBits = 11;
constexpr int kKthBins = 1 << kKthBits;
/// score_key(−inf): keys below it decode to no float (a bin's lower edge may be one).
constexpr std::uint32_t kNegInfKey = 0x007FFFFFu;

/// The k-th largest key among values the threads of a block offer, each thread its own (any
/// number, k ≤ their total), as described above (0 for a lower edge below score_key(−inf): no
/// threshold): each(f) calls f(score) for every value of the calling thread, three times. All NT
/// threads of the block call it; a second call needs a barrier between the two (when every key
/// is equal it returns without one after reading the block's range).
template <int NT, typename Each>
__device__ std::uint32_t block_kth_key_offered(const Each& each, std::uint32_t k) {
  static_assert(kKthBins % NT == 0, "block_kth_key_offered: find_bin takes the same number of bins in every thread");
  __shared__ std::uint32_t h[kKthBins];
  __shared__ std::uint32_t s_lo, s_hi;
  std::uint32_t lo = ~0u, hi = 0u;
  each([&](float s) {
    const std::uint32_t key = score_key(s);
    lo = min(lo, key);
    hi = max(hi, key);
  });
  lo = __reduce_min_sync(kFullMask, lo);
  hi = __reduce_max_sync(kFullMask, hi);
  if (threadIdx.x == 0) {
    s_lo = ~0u;
    s_hi = 0u;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    atomicMin(&s_lo, lo);
    atomicMax(&s_hi, hi);
  }
  __syncthreads();
  lo = s_lo;
  hi = s_hi;
  if (lo == hi) return lo;  // every value has this key
  // The bits from `start` up are common to every key; the passes take [start − 22, start). The
  // k-th key's bits found so far: `want` under `mask`.
  const int start = max(32 - __clz(static_cast<int>(lo ^ hi)), 2 * kKthBits);
  std::uint32_t mask = start == 32 ? 0u : ~0u << start;
  std::uint32_t want = lo & mask, need = k;
  for (int shift = start - kKthBits; shift >= start - 2 * kKthBits; shift -= kKthBits) {
    for (int i = threadIdx.x; i < kKthBins; i += NT) h[i] = 0;
    __syncthreads();
    each([&](float s) {
      const std::uint32_t key = score_key(s);
      if ((key & mask) == want) atomicAdd(&h[(key >> shift) & (kKthBins - 1u)], 1u);
    });
    __syncthreads();
    const BinPick p = find_bin<NT>(h, kKthBins, need);
    want |= static_cast<std::uint32_t>(p.bin) << shift;
    mask |= (kKthBins - 1u) << shift;
    need -= p.above;
  }
  return want < kNegInfKey ? 0u : want;
}

/// block_kth_key_offered over the n values got(i) (i < n), thread t offering i = t, t + NT, …;
/// 0 when n < k (then every value passes). All NT threads of the block call it.
template <int NT = kSelThreads, typename Get>
__device__ std::uint32_t block_kth_key(const Get& got, int n, std::uint32_t k) {
  if (static_cast<std::uint32_t>(n) < k) return 0u;
  return block_kth_key_offered<NT>(
      [&](auto&& f) {
        for (int i = threadIdx.x; i < n; i += NT) f(got(i));
      },
      k);
}

/// The candidate-pool threshold for a query whose k-th best approximate score is at least
/// key_score(kth_key) (block_kth_key): every row of the exact top k has approx ≥ k-th − 2Δ
/// (docs/EXACTNESS.md), so ≥ key_score(kth_key) − 2Δ, rounded down; −inf for a key of 0.
__device__ __forceinline__ float pool_threshold(std::uint32_t kth_key, int n, std::uint32_t k, float delta) {
  if (static_cast<std::uint32_t>(n) < k || kth_key == 0u) return -CUDART_INF_F;
  const double t = static_cast<double>(key_score(kth_key)) - 2.0 * static_cast<double>(delta);
  return __double2float_rd(t);
}

}  // namespace cuda_detail
}  // namespace shardtopk
