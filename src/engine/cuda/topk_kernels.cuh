#pragma once
// Selection kernels of the CUDA engine. Two paths share the final step:
//
// Batch 1 (memory bound; tuned for 100k–50M rows × 384–1024 dims, float16/float32):
//   scan1      one pass over the shard, exact scores (score.cuh) to scores[rows] and a 4096-bin
//              histogram of the top 12 bits of each score's order-preserving key
//   refine2/3  radix-select refinement (next 12, then last 8 bits) over scores[rows] — each
//              exits at once when the previous level already bounds the candidates by `cap`
//   extract    every row whose key reaches the threshold → candidates (≤ cap, no ties lost)
//   final      one block: sort the candidates by the ordering rule, keep the best k
// Batched (B ≥ 2; arithmetic bound): per chunk of rows, approximate scores from a tensor-core
// GEMM (query rounded to the storage type, float32 accumulation) land in a [B, R] workspace;
// every row whose approximate score is within 2Δ of the running K-th approximate score enters
// the query's pool (DESIGN.md "filter then re-score"; Δ bounds |approx − exact|, derivation in
// docs/EXACTNESS.md); the final kernel re-scores the pool with the exact arithmetic and sorts.

#include <cub/block/block_scan.cuh>

#include "engine/cuda/score.cuh"
#include "shardtopk/ordering.hpp"

namespace shardtopk {
namespace cuda_detail {

constexpr int kScanThreads = 256;
constexpr int kSelThreads = 1024;
constexpr int kHist1Bins = 4096;  // key bits 31..20
constexpr int kHist2Bins = 4096;  // key bits 19..8
constexpr int kHist3Bins = 256;   // key bits 7..0
constexpr int kHistWords = kHist1Bins + kHist2Bins + kHist3Bins;
constexpr int kFilterThreads = 256;

/// A candidate row of one query: its score (exact or approximate, by context) and shard row.
struct PoolEntry {
  float s;
  std::int32_t row;
};

/// Per-query values prepared on the device for the batched path.
struct QueryInfo {
  float delta;      // bound on |approximate − exact| score (docs/EXACTNESS.md)
  float inv_scale;  // the GEMM's query was scaled by 1 / inv_scale (a power of two)
  float qsq;        // ‖q‖² rounded to float (l2)
  float pad;
};

/// The batch-1 selection's progress (the last block of each kernel resolves the threshold from
/// the histograms so far; the next kernels read it).
struct Batch1State {
  std::uint32_t status;        // 0 resolved, 2 / 3: level 2 / 3 histogram needed
  std::uint32_t thr;           // resolved: candidates are keys ≥ thr (> thr with tie_overflow)
  std::uint32_t prefix;        // unresolved: the key prefix the next level refines
  std::uint32_t tie_overflow;  // more rows tie at the k-th key than fit; ties go to the slow path
  std::uint32_t need_ties;     // with tie_overflow: how many tied rows belong to the answer
  std::uint32_t done;          // blocks finished (reset by the last one)
  std::uint32_t bar[2];        // grid_barrier of select1_kernel
};

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

// ---------------------------------------------------------------- batch 1

/// One pass over the shard [rows, nvec chunks] against one query [dim] (float32, read with
/// zero padding to nvec · V): scores[r] = exact ranking score, level-1 histogram += the top 12
/// bits of its key; the last block resolves the threshold. A warp scores kR · (32 / kLanes)
/// adjacent rows at a time, kLanes lanes per row, issuing all of a lane's loads (up to kC chunks
/// per row) before its FMAs: kR · kC = 8 chunks (128 bytes) in flight per lane (4 with 16 lanes
/// per row; enqueue1_m picks the shape from nvec), in the same per-row arithmetic (lane l adds chunks
/// l, l + 32, … in order, then the xor butterfly; docs/EXACTNESS.md). kLanes = 16 (rows of at
/// most 16 chunks, kC = 1): two rows share a warp, lanes l and l + 16 taking chunk l of each; the
/// butterfly's first step (offset 16) would add the +0 partials of lanes ≥ nvec, so it becomes
/// `a + 0`, and the steps 8 … 1 stay within each half: the same bits as 32 lanes per row.
/// Grid: persistent (blocks per SM from the occupancy; rows_per_block 0), or one block per
/// rows_per_block (a multiple of the rows per step) contiguous rows; dynamic shared memory:
/// nvec · V floats.
/// L2 reuse between searches (dir non-null): bit 0 of *dir set reads the shard last row first,
/// and the last block flips it, so consecutive searches sweep in alternate directions; rows
/// before logical row keep_from (in this search's order) load as evict_first, later ones as
/// evict_normal, so the last ≈ 32 MiB a search reads stay in L2 while the rest streams past them,
/// and the next search starts on them. dir null: forward, plain loads (A B runs). Every row's
/// score is the same bits either way (bench/NOTES.md, "Tenth session").
/// Tuned for D = 128–1024 float16/float32 on H200.
template <typename T, bool kL2, int kR, int kC, int kLanes>
__global__ void __launch_bounds__(kScanThreads)
    scan1_kernel(const T* __restrict__ shard, std::int64_t rows, int nvec, const float* __restrict__ query,
                 int dim, float* __restrict__ scores, std::uint32_t* __restrict__ hists, std::uint32_t k,
                 std::uint32_t cap, Batch1State* __restrict__ st, std::int64_t rows_per_block,
                 std::uint32_t* __restrict__ dir, std::int64_t keep_from) {
  constexpr int V = VecTraits<T>::kElems;
  const bool hints = dir != nullptr;
  const bool rev = hints && (*dir & 1u) != 0u;
  const std::uint64_t pol_stream = l2_evict_first(), pol_keep = l2_evict_normal();
  extern __shared__ __align__(16) float qs[];
  __shared__ std::uint32_t h[kHist1Bins];
  for (int i = threadIdx.x; i < nvec * V; i += blockDim.x) qs[i] = i < dim ? query[i] : 0.0f;
  for (int i = threadIdx.x; i < kHist1Bins; i += blockDim.x) h[i] = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const std::int64_t stride = static_cast<std::int64_t>(nvec) * V;
  // rows_per_block 0: persistent grid, warps stride over the whole shard; else block b takes
  // rows [b · rows_per_block, (b + 1) · rows_per_block) and its warps stride over those.
  const bool blocked = rows_per_block > 0;
  const std::int64_t lo = blocked ? static_cast<std::int64_t>(blockIdx.x) * rows_per_block : 0;
  const std::int64_t hi = blocked ? min(rows, lo + rows_per_block) : rows;
  const std::int64_t warp0 = blocked ? (threadIdx.x >> 5)
                                     : static_cast<std::int64_t>(blockIdx.x) * (kScanThreads / 32) + (threadIdx.x >> 5);
  static_assert(kLanes == 32 || (kLanes == 16 && kC == 1 && kR <= 16), "scan1_kernel: unsupported shape");
  constexpr int G = 32 / kLanes;  // rows side by side in a warp
  constexpr int kStepRows = kR * G;
  const int g = lane / kLanes, sl = lane % kLanes;
  const std::int64_t step =
      kStepRows * (blocked ? (kScanThreads / 32) : static_cast<std::int64_t>(gridDim.x) * (kScanThreads / 32));
  // r + j: logical rows, read as rows − 1 − (r + j) when reversed; this lane's row i is
  // j = i · G + g.
  for (std::int64_t r = lo + warp0 * kStepRows; r < hi; r += step) {
    // Row j of this step: first + j · dr (dr = ±1); rows past hi read the first row again.
    const std::int64_t first = rev ? rows - 1 - r : r, dr = rev ? -1 : 1;
    const T* row[kR];
#pragma unroll
    for (int i = 0; i < kR; ++i) row[i] = shard + (r + i * G + g < hi ? first + (i * G + g) * dr : first) * stride;
    const std::uint64_t pol = r >= keep_from ? pol_keep : pol_stream;
    float a[kR];
#pragma unroll
    for (int i = 0; i < kR; ++i) a[i] = 0.0f;
    for (int v0 = 0; v0 < nvec; v0 += 32 * kC) {
      uint4 x[kR][kC];
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int v = v0 + sl + 32 * c;
        if (v < nvec) {
          if (hints) {
#pragma unroll
            for (int i = 0; i < kR; ++i) x[i][c] = load_chunk_hint(row[i], v, pol);
          } else {
#pragma unroll
            for (int i = 0; i < kR; ++i) x[i][c] = load_chunk(row[i], v);
          }
        }
      }
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int v = v0 + sl + 32 * c;
        if (v < nvec) {
#pragma unroll
          for (int i = 0; i < kR; ++i) a[i] = chunk_step<T, kL2>(qs + v * V, x[i][c], a[i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      float si = kLanes == 32 ? warp_tree(a[i]) : half_warp_tree(a[i]);
      if (kL2) si = -si;
      const int j = i * G + g;
      if (sl == i && r + j < hi) {
        scores[first + j * dr] = si;
        atomicAdd(&h[score_key(si) >> 20], 1u);
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kHist1Bins; i += blockDim.x)
    if (h[i]) atomicAdd(&hists[i], h[i]);
  // Every block read *dir before it got here; the last one flips it for the next search.
  if (publish_if_last<kScanThreads>(hists, 1, k, cap, st) && dir != nullptr && threadIdx.x == 0) *dir ^= 1u;
}

/// A barrier across the whole grid. Only for grids whose blocks are all resident at once (the
/// launcher sizes the grid from the occupancy); `bar` [2] = {arrived, generation}, zeroed
/// before the launch (the last arriver resets `arrived`).
__device__ inline void grid_barrier(std::uint32_t* bar) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile std::uint32_t* gen = bar + 1;
    const std::uint32_t g = *gen;
    __threadfence();
    if (atomicAdd(&bar[0], 1u) == gridDim.x - 1) {
      bar[0] = 0;
      __threadfence();
      atomicAdd(&bar[1], 1u);
    } else {
      while (*gen == g) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

/// Level-2 (bits 19..8 of keys whose bits 31..20 equal the level-1 bin) or level-3 (bits 7..0
/// of keys matching bits 31..8) histogram over scores[rows], grid-stride, added to hist_out.
template <int kLevel>
__device__ void refine_pass(const float* __restrict__ scores, std::int64_t rows, std::uint32_t prefix,
                            std::uint32_t* smem_h, std::uint32_t* hist_out) {
  constexpr int kBins = kLevel == 2 ? kHist2Bins : kHist3Bins;
  for (int i = threadIdx.x; i < kBins; i += blockDim.x) smem_h[i] = 0;
  __syncthreads();
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t end = (rows + 31) / 32 * 32;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < end; r += stride) {
    const std::uint32_t key = r < rows ? score_key(scores[r]) : 0u;
    const bool match = r < rows && (kLevel == 2 ? (key >> 20) == prefix : (key >> 8) == prefix);
    hist_add(smem_h, kLevel == 2 ? (key >> 8) & 0xFFFu : key & 0xFFu, match);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kBins; i += blockDim.x)
    if (smem_h[i]) atomicAdd(&hist_out[i], smem_h[i]);
}

__device__ void final1_block(const PoolEntry* __restrict__ cand, std::uint32_t count, const Batch1State& st,
                             const std::int64_t* __restrict__ ids, const float* __restrict__ scores,
                             std::int64_t rows, int cap, int k, Candidate* __restrict__ out, float* ss,
                             std::int64_t* sid);

/// Batch-1 selection after scan1, one launch: the radix refinements the level-1 histogram did not
/// settle (levels 2 and 3, each followed by a grid barrier — only when needed), the extraction of
/// every row whose key reaches the threshold into cand [cap], and, in the last block to finish,
/// the final sort into out [k]. Grid: one block per SM (all resident: grid_barrier); dynamic
/// shared memory: cap × 12 bytes (the final sort).
__global__ void __launch_bounds__(kSelThreads)
    select1_kernel(const float* __restrict__ scores, std::int64_t rows, std::uint32_t* __restrict__ hists,
                   std::uint32_t k, std::uint32_t cap, Batch1State* __restrict__ st, std::uint32_t* __restrict__ bar,
                   PoolEntry* __restrict__ cand, std::uint32_t* __restrict__ count,
                   const std::int64_t* __restrict__ ids, Candidate* __restrict__ out) {
  extern __shared__ __align__(16) unsigned char smem[];
  std::uint32_t* h = reinterpret_cast<std::uint32_t*>(smem);  // refinement histogram (before the sort)
  Resolution res{static_cast<int>(st->status), st->thr, 0u, st->tie_overflow, st->prefix};
  if (res.status == 2) {
    refine_pass<2>(scores, rows, res.prefix, h, hists + kHist1Bins);
    grid_barrier(bar);
    res = resolve<kSelThreads>(hists, 2, k, cap);
  }
  if (res.status == 3) {
    refine_pass<3>(scores, rows, res.prefix, h, hists + kHist1Bins + kHist2Bins);
    grid_barrier(bar);
    res = resolve<kSelThreads>(hists, 3, k, cap);
  }
  const bool strict = res.tie_overflow != 0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t end = (rows + 31) / 32 * 32;  // whole warps iterate together
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < end; r += stride) {
    bool take = false;
    float s = 0.0f;
    if (r < rows) {
      s = scores[r];
      const std::uint32_t key = score_key(s);
      take = strict ? key > res.thr : key >= res.thr;
    }
    (void)warp_append(take, PoolEntry{s, static_cast<std::int32_t>(r)}, cand, count, cap);
  }
  if (!last_block_done(&st->done)) return;  // the last block sorts
  Batch1State fin{};
  fin.thr = res.thr;
  fin.tie_overflow = res.tie_overflow;
  fin.need_ties = res.tie_overflow ? k - res.above : 0u;
  std::int64_t* sid = reinterpret_cast<std::int64_t*>(smem);
  float* ss = reinterpret_cast<float*>(sid + cap);
  final1_block(cand, *reinterpret_cast<volatile std::uint32_t*>(count), fin, ids, scores, rows, static_cast<int>(cap),
               static_cast<int>(k), out, ss, sid);
}

// ---------------------------------------------------------------- shared: block sort

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

/// Writes the best k of entries [0, n) of (ss, sid) (shared memory, room for a power of two ≥ n)
/// to out [k] by the ordering rule, padding when n < k. Up to 1024 entries each entry finds its
/// rank by comparing with all others (n² / threads steps, no barrier per step; ranks are unique
/// because ids are); above that a bitonic sort.
__device__ inline void sort_and_write(float* ss, std::int64_t* sid, int n, int k, Candidate* __restrict__ out) {
  const Candidate pad = pad_candidate();
  if (n <= 1024) {
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const float s = ss[i];
      const std::int64_t id = sid[i];
      int rank = 0;
      for (int j = 0; j < n; ++j) rank += better(ss[j], sid[j], s, id) ? 1 : 0;
      if (rank < k) out[rank] = Candidate{s, id};
    }
    for (int i = n + threadIdx.x; i < k; i += blockDim.x) out[i] = pad;
    return;
  }
  const int p = pow2_at_least(n);
  for (int i = n + threadIdx.x; i < p; i += blockDim.x) {
    ss[i] = pad.score;
    sid[i] = pad.id;
  }
  __syncthreads();
  block_sort(ss, sid, p);
  for (int i = threadIdx.x; i < k; i += blockDim.x) out[i] = i < n ? Candidate{ss[i], sid[i]} : pad;
}

/// Batch-1 final step, one block of kSelThreads: the candidates [count] become the best k,
/// sorted by the ordering rule, in out [k]; (ss, sid) hold cap entries in shared memory.
/// Slow path (tie_overflow: more rows share the k-th score than `cap` holds): the block
/// streams over scores[rows] collecting the tied rows' ids in the upper half of its buffer,
/// keeping the need_ties smallest — linear in rows per pass, for pathological inputs only.
__device__ void final1_block(const PoolEntry* __restrict__ cand, std::uint32_t count, const Batch1State& st,
                             const std::int64_t* __restrict__ ids, const float* __restrict__ scores,
                             std::int64_t rows, int cap, int k, Candidate* __restrict__ out, float* ss,
                             std::int64_t* sid) {
  const int n = static_cast<int>(min(count, static_cast<std::uint32_t>(cap)));
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const PoolEntry e = cand[i];
    ss[i] = e.s;
    sid[i] = ids[e.row];
  }
  int total = n;
  if (st.tie_overflow) {
    // n < k ≤ cap / 2: the upper half [half, cap) is free for the tied rows.
    __shared__ std::uint32_t m;
    const int half = cap / 2;
    const int need = static_cast<int>(st.need_ties);
    const Candidate pad = pad_candidate();
    for (int i = half + threadIdx.x; i < cap; i += blockDim.x) {
      ss[i] = pad.score;
      sid[i] = pad.id;
    }
    if (threadIdx.x == 0) m = 0;
    __syncthreads();
    for (std::int64_t r0 = 0; r0 < rows; r0 += blockDim.x) {
      if (static_cast<int>(m) + static_cast<int>(blockDim.x) > half) {  // full: keep the `need` best
        block_sort(ss + half, sid + half, half);
        for (int i = need + threadIdx.x; i < half; i += blockDim.x) {
          ss[half + i] = pad.score;
          sid[half + i] = pad.id;
        }
        if (threadIdx.x == 0) m = static_cast<std::uint32_t>(need);
        __syncthreads();
      }
      const std::int64_t r = r0 + threadIdx.x;
      if (r < rows && score_key(scores[r]) == st.thr) {
        const std::uint32_t pos = atomicAdd(&m, 1u);
        ss[half + pos] = scores[r];
        sid[half + pos] = ids[r];
      }
      __syncthreads();
    }
    block_sort(ss + half, sid + half, half);
    for (int i = threadIdx.x; i < need; i += blockDim.x) {
      ss[n + i] = ss[half + i];
      sid[n + i] = sid[half + i];
    }
    total = n + need;
  }
  __syncthreads();
  sort_and_write(ss, sid, total, k, out);
}

// ---------------------------------------------------------------- batched

__device__ __forceinline__ float out_to_float(float g) { return g; }
__device__ __forceinline__ float out_to_float(__half g) { return __half2float(g); }

/// The filter's shape per GEMM output type: kVec consecutive values per 16-byte load, four
/// loads per thread (float: 16 values, __half: 32).
template <typename OutT>
struct FilterShape {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(OutT));
  static constexpr int kPerThread = 4 * kVec;
  static constexpr int kPerBlock = kFilterThreads * kPerThread;
};

/// kVec consecutive GEMM outputs from a 16-byte-aligned address: one 16-byte load.
__device__ __forceinline__ void load_vec(const float* p, float* v) {
  const float4 f = __ldg(reinterpret_cast<const float4*>(p));
  v[0] = f.x;
  v[1] = f.y;
  v[2] = f.z;
  v[3] = f.w;
}
__device__ __forceinline__ void load_vec(const __half* p, float* v) {
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[j]));
    v[2 * j] = f.x;
    v[2 * j + 1] = f.y;
  }
}

/// The approximate ranking score of (query q, chunk-local row i) from the GEMM output, stored
/// as OutT: float, or __half for float16 shards (half the bytes written and read back per
/// chunk; its rounding is charged to Δ, docs/EXACTNESS.md).
template <typename OutT>
struct Approx {
  const OutT* S;             // [batch, ld] dot(q̂ · scale, row)
  std::int64_t ld;
  const float* row_sq;       // [rows] ‖x‖² (l2) or nullptr
  std::int64_t row0;         // shard row of chunk index 0
  bool l2;
  /// The approximate score from the raw GEMM value g = S[q, i].
  __device__ __forceinline__ float finish(float g, std::int64_t i, const QueryInfo& qi) const {
    const float dot = __fmul_rn(g, qi.inv_scale);
    if (!l2) return dot;
    return __fsub_rn(__fsub_rn(__fmul_rn(2.0f, dot), row_sq[row0 + i]), qi.qsq);
  }
  __device__ __forceinline__ float operator()(int q, std::int64_t i, const QueryInfo& qi) const {
    return finish(out_to_float(S[q * ld + i]), i, qi);
  }
};

/// The k-th largest key among n values got(i) (i < n), by a block radix select over 4 × 8 bits;
/// 0 when n < k (then every value passes). All threads of the block call it.
template <typename Get>
__device__ std::uint32_t block_kth_key(const Get& got, int n, std::uint32_t k) {
  __shared__ std::uint32_t h[256];
  if (static_cast<std::uint32_t>(n) < k) return 0u;
  std::uint32_t prefix = 0, need = k;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) h[i] = 0;
    __syncthreads();
    const int end = (n + 31) / 32 * 32;
    for (int i = threadIdx.x; i < end; i += blockDim.x) {
      const std::uint32_t key = i < n ? score_key(got(i)) : 0u;
      hist_add(h, (key >> shift) & 0xFFu, i < n && (pass == 0 || (key >> (shift + 8)) == prefix));
    }
    __syncthreads();
    const BinPick p = find_bin<kSelThreads>(h, 256, need);
    prefix = (prefix << 8) | static_cast<std::uint32_t>(p.bin);
    need -= p.above;
  }
  return prefix;
}

/// The filter threshold for a query whose k-th best approximate score is key_score(kth):
/// every row of the exact top k has approx ≥ kth − 2Δ (docs/EXACTNESS.md), rounded down.
__device__ __forceinline__ float filter_threshold(std::uint32_t kth_key, int n, std::uint32_t k, float delta) {
  if (static_cast<std::uint32_t>(n) < k || kth_key == 0u) return -CUDART_INF_F;
  const double t = static_cast<double>(key_score(kth_key)) - 2.0 * static_cast<double>(delta);
  return __double2float_rd(t);
}

/// First chunk of a batched search, one block per query: its threshold from the chunk's own
/// k-th approximate score, and every row of the chunk that passes it into the query's pool.
template <typename OutT>
__global__ void __launch_bounds__(kSelThreads)
    chunk0_kernel(Approx<OutT> ap, int rows_c, const QueryInfo* __restrict__ qinfo, std::uint32_t k,
                  PoolEntry* __restrict__ pool, std::int64_t pool_cap, std::uint32_t* __restrict__ pool_count,
                  float* __restrict__ thr, std::uint32_t* __restrict__ overflow) {
  const int q = blockIdx.x;
  const QueryInfo qi = qinfo[q];
  const auto got = [&](int i) { return ap(q, i, qi); };
  const std::uint32_t kth = block_kth_key(got, rows_c, k);
  const float t = filter_threshold(kth, rows_c, k, qi.delta);
  PoolEntry* list = pool + q * pool_cap;
  const int end = (rows_c + 31) / 32 * 32;
  bool ok = true;
  for (int i = threadIdx.x; i < end; i += blockDim.x) {
    float s = 0.0f;
    bool take = false;
    if (i < rows_c) {
      s = got(i);
      take = s >= t;
    }
    ok &= warp_append(take, PoolEntry{s, static_cast<std::int32_t>(ap.row0 + i)}, list, &pool_count[q],
                      static_cast<std::uint32_t>(pool_cap));
  }
  if (!ok) atomicOr(&overflow[q], 1u);
  if (threadIdx.x == 0) thr[q] = t;
}

/// Later chunks: every (query, row) whose approximate score reaches the query's threshold
/// enters the pool. Grid: (ceil(rows_c / FilterShape<OutT>::kPerBlock), batch). A warp reads 512
/// contiguous bytes per load (16-byte loads when the row stride allows: thread t of the block
/// takes values V (j · kFilterThreads + t) … + V − 1, V = FilterShape::kVec, j < 4), and makes
/// at most ONE pool atomic for all its passing values (a warp scan of the per-thread counts): a
/// global atomic per passing value made the first chunks latency bound (bench/NOTES.md,
/// "Batched filter").
template <typename OutT>
__global__ void __launch_bounds__(kFilterThreads)
    filter_kernel(Approx<OutT> ap, int rows_c, const QueryInfo* __restrict__ qinfo, const float* __restrict__ thr,
                  PoolEntry* __restrict__ pool, std::int64_t pool_cap, std::uint32_t* __restrict__ pool_count,
                  std::uint32_t* __restrict__ overflow) {
  constexpr int V = FilterShape<OutT>::kVec, P = FilterShape<OutT>::kPerThread;
  const int q = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int base = blockIdx.x * FilterShape<OutT>::kPerBlock;
  const OutT* src = ap.S + q * ap.ld;
  // Value m of this thread: V consecutive values per 16-byte load, loads kFilterThreads apart.
  auto index = [&](int m) { return base + V * ((m / V) * kFilterThreads + static_cast<int>(threadIdx.x)) + (m % V); };
  float v[P];
  const bool vec = ap.ld % V == 0;
#pragma unroll
  for (int j = 0; j < P / V; ++j) {
    const int i = index(V * j);
    if (vec && i + V <= rows_c) {
      load_vec(src + i, v + V * j);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) v[V * j + e] = i + e < rows_c ? out_to_float(src[i + e]) : 0.0f;
    }
  }
  const QueryInfo qi = qinfo[q];
  const float t = thr[q];
  unsigned takes = 0;  // bit m: value m passes
#pragma unroll
  for (int m = 0; m < P; ++m) {
    const int i = index(m);
    if (i < rows_c) {
      v[m] = ap.finish(v[m], i, qi);
      if (v[m] >= t) takes |= 1u << m;
    }
  }
  if (__ballot_sync(kFullMask, takes != 0) == 0) return;
  // one atomic per warp: exclusive scan of the per-thread counts
  const int n = __popc(takes);
  int incl = n;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += y;
  }
  std::uint32_t at = 0;
  if (lane == 31) at = atomicAdd(&pool_count[q], static_cast<std::uint32_t>(incl));
  at = __shfl_sync(kFullMask, at, 31) + static_cast<std::uint32_t>(incl - n);
  PoolEntry* list = pool + q * pool_cap;
  bool ok = true;
#pragma unroll
  for (int m = 0; m < P; ++m) {
    if (takes & (1u << m)) {
      const int i = index(m);
      if (at < static_cast<std::uint32_t>(pool_cap)) list[at] = PoolEntry{v[m], static_cast<std::int32_t>(ap.row0 + i)};
      else ok = false;
      ++at;
    }
  }
  if (!__all_sync(kFullMask, ok) && lane == 0) atomicOr(&overflow[q], 1u);
}

/// Raises a query's threshold from its pool's k-th approximate score and drops the entries below
/// it (stable, in place), when the pool holds more than `trigger` entries. Block per query.
__global__ void __launch_bounds__(kSelThreads)
    compact_kernel(const QueryInfo* __restrict__ qinfo, std::uint32_t k, PoolEntry* __restrict__ pool,
                   std::int64_t pool_cap, std::uint32_t* __restrict__ pool_count, float* __restrict__ thr,
                   std::uint32_t trigger) {
  const int q = blockIdx.x;
  const int n = static_cast<int>(min(pool_count[q], static_cast<std::uint32_t>(pool_cap)));
  if (n <= static_cast<int>(trigger)) return;
  PoolEntry* list = pool + q * pool_cap;
  const auto got = [&](int i) { return list[i].s; };
  const std::uint32_t kth = block_kth_key(got, n, k);
  const float t = fmaxf(thr[q], filter_threshold(kth, n, k, qinfo[q].delta));
  using Scan = cub::BlockScan<int, kSelThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int kept;
  if (threadIdx.x == 0) kept = 0;
  __syncthreads();
  for (int t0 = 0; t0 < n; t0 += blockDim.x) {
    const int i = t0 + threadIdx.x;
    PoolEntry e{0.0f, 0};
    int keep = 0;
    if (i < n) {
      e = list[i];
      keep = e.s >= t ? 1 : 0;
    }
    int pos = 0, tile_kept = 0;
    Scan(tmp).ExclusiveSum(keep, pos, tile_kept);
    const int base = kept;
    __syncthreads();  // every read of this tile precedes the writes (positions ≤ reads)
    if (keep) list[base + pos] = e;
    if (threadIdx.x == 0) kept = base + tile_kept;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    pool_count[q] = static_cast<std::uint32_t>(kept);
    thr[q] = t;
  }
}

/// Batched final step, block per query: the pool's final threshold, exact re-scoring of the rows
/// that pass it (score.cuh, warp per row: the batch-1 bits), sort, best k into out [k]. A query
/// whose pool overflowed is left for the host's batch-1 fallback. Dynamic shared memory:
/// cap × 12 bytes.
template <typename T, bool kL2>
__global__ void __launch_bounds__(kSelThreads)
    final_batched_kernel(const T* __restrict__ shard, int nvec, const float* __restrict__ qpad,
                         const QueryInfo* __restrict__ qinfo, std::uint32_t k, const PoolEntry* __restrict__ pool,
                         std::int64_t pool_cap, const std::uint32_t* __restrict__ pool_count,
                         std::uint32_t* __restrict__ overflow, const std::int64_t* __restrict__ ids, int cap,
                         Candidate* __restrict__ out, int out_k) {
  constexpr int V = VecTraits<T>::kElems;
  extern __shared__ __align__(16) unsigned char smem[];
  std::int64_t* sid = reinterpret_cast<std::int64_t*>(smem);
  float* ss = reinterpret_cast<float*>(sid + cap);
  __shared__ int m;
  const int q = blockIdx.x;
  if (overflow[q]) return;
  const int n = static_cast<int>(min(pool_count[q], static_cast<std::uint32_t>(pool_cap)));
  const PoolEntry* list = pool + q * pool_cap;
  const auto got = [&](int i) { return list[i].s; };
  const std::uint32_t kth = block_kth_key(got, n, k);
  const float t = filter_threshold(kth, n, k, qinfo[q].delta);
  if (threadIdx.x == 0) m = 0;
  __syncthreads();
  // rows that pass: their shard rows into sid (as a scratch list)
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const PoolEntry e = list[i];
    if (e.s >= t) {
      const int pos = atomicAdd(&m, 1);
      if (pos < cap) sid[pos] = e.row;
    }
  }
  __syncthreads();
  const int cnt = m;
  if (cnt > cap) {
    if (threadIdx.x == 0) atomicOr(&overflow[q], 2u);
    return;
  }
  const float* qv = qpad + static_cast<std::int64_t>(q) * nvec * V;
  const int lane = threadIdx.x & 31;
  for (int j = threadIdx.x >> 5; j < cnt; j += blockDim.x >> 5) {
    const std::int64_t row = sid[j];
    const float s = exact_score<T, kL2>(qv, shard + row * static_cast<std::int64_t>(nvec) * V, nvec, lane);
    __syncwarp();
    if (lane == 0) {
      ss[j] = s;
      sid[j] = ids[row];
    }
  }
  __syncthreads();
  sort_and_write(ss, sid, cnt, out_k, out + static_cast<std::int64_t>(q) * out_k);
}

}  // namespace cuda_detail
}  // namespace shardtopk
