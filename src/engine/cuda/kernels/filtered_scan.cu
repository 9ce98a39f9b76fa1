// The filtered batch-1 scan (memory bound; tuned for 10M rows × 768 float16 on H200): the
// candidate blocks of one filter, scanned densely or through a list of the passing rows.
//   list      (gathered only) one thread block per candidate block: its passing, live rows in
//             order, one atomic per block for the block's place in the list
//   dense     the candidate blocks' rows in list order, kR adjacent rows per warp at a time over
//             the whole (persistent) grid, 32 lanes per row, loading only rows that pass
//   gathered  warps take kR listed rows at a time (persistent grid)
// Both scans use scan1's row shapes and the per-row arithmetic of score.cuh (lane l adds chunks
// l, l + 32, … in order, then the xor butterfly), so every score has the unfiltered scan's bits;
// scores and ids go to compact entries, the level-1 histogram to hists, and the last block of the
// scan resolves the threshold as scan1 does (select1.cuh).

#include "engine/cuda/kernels/filtered_scan.hpp"

#include <cub/block/block_scan.cuh>

#include <algorithm>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/launch.hpp"
#include "engine/cuda/kernels/select1.cuh"
#include "engine/cuda/kernels/storage.cuh"
#include "engine/cuda/kernels/window_select.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk::cuda_detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kListThreads = 256;  // 4 rows of a summary block per thread
/// auto: gathered when fewer than this fraction of the shard's rows pass, or fewer than
/// kGatherDensity of the candidate blocks' rows (measured on one H200, 10M × 768 float16:
/// docs/PERFORMANCE.md, "Filtered search").
constexpr float kGatherBelow = 0.3f;
constexpr double kGatherDensity = 0.9;
static_assert(kFilterBlockRows == kListThreads * 4, "the list kernel gives each thread 4 rows of a block");

/// What the kernels read of the query's filter (by value).
struct FilterView {
  FilterState fs;
  const std::int32_t* query_program;
  int q;
  const std::uint32_t* live;
  int path;  // FilterScan
  float gather_below;
  std::int64_t rows;  // shard rows

  __device__ __forceinline__ int program() const { return query_program ? query_program[q] : -1; }
  /// The same answer in every thread of every kernel of one search.
  __device__ __forceinline__ bool gathered(int p) const {
    if (p < 0 || path == static_cast<int>(FilterScan::kDense)) return false;
    if (path == static_cast<int>(FilterScan::kGathered)) return true;
    const FilterStats& s = fs.stats[p];
    const double pass = s.pass_rows;
    return pass < static_cast<double>(gather_below) * static_cast<double>(rows) ||
           pass < kGatherDensity * static_cast<double>(s.cand_blocks) * kFilterBlockRows;
  }
  __device__ __forceinline__ bool is_live(std::int64_t r) const {
    return live == nullptr || ((live[r >> 5] >> (r & 31)) & 1u) != 0u;
  }
};

/// Scores rows row[0 .. kR) (those with live[i]; every lane of the warp calls it with the same
/// rows and flags) against the query qs [nvec · V] in shared memory: score.cuh's arithmetic. The
/// rows are read once: evict-first loads (`pol`), so that they do not push the scan's own
/// outputs out of L2.
template <typename T, bool kL2, int kR, int kC>
__device__ __forceinline__ void score_rows(const T* const (&row)[kR], const bool (&live)[kR], int nvec,
                                           const float* qs, int lane, std::uint64_t pol, float (&s)[kR]) {
  constexpr int V = VecTraits<T>::kElems;
  float a[kR];
#pragma unroll
  for (int i = 0; i < kR; ++i) a[i] = 0.0f;
  for (int v0 = 0; v0 < nvec; v0 += 32 * kC) {
    uint4 x[kR][kC];
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int v = v0 + lane + 32 * c;
      if (v < nvec) {
#pragma unroll
        for (int i = 0; i < kR; ++i)
          if (live[i]) x[i][c] = load_chunk_hint(row[i], v, pol);
      }
    }
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int v = v0 + lane + 32 * c;
      if (v < nvec) {
#pragma unroll
        for (int i = 0; i < kR; ++i)
          if (live[i]) a[i] = chunk_step<T, kL2>(qs + v * V, x[i][c], a[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kR; ++i) {
    const float t = warp_tree(a[i]);
    s[i] = kL2 ? -t : t;
  }
}

/// Loads the query into shared memory (zero-padded to nvec · V) and clears the histogram.
__device__ __forceinline__ void scan_prologue(const float* __restrict__ query, int dim, int padded, float* qs,
                                              std::uint32_t* h) {
  for (int i = threadIdx.x; i < padded; i += blockDim.x) qs[i] = i < dim ? query[i] : 0.0f;
  for (int i = threadIdx.x; i < kHist1Bins; i += blockDim.x) h[i] = 0;
  __syncthreads();
}

/// Flushes the block's histogram; the last block resolves the threshold (select1.cuh).
__device__ __forceinline__ void scan_epilogue(const std::uint32_t* h, std::uint32_t* __restrict__ hists,
                                              std::uint32_t k, std::uint32_t cap, Batch1State* st) {
  __syncthreads();
  for (int i = threadIdx.x; i < kHist1Bins; i += blockDim.x)
    if (h[i]) atomicAdd(&hists[i], h[i]);
  (void)publish_if_last<kThreads>(hists, 1, k, cap, st);
}

/// The passing, live rows of the filter's candidate blocks into row_list (gathered scans only).
__global__ void __launch_bounds__(kListThreads)
    list_kernel(std::int64_t rows, FilterView fv, Batch1State* __restrict__ st, std::int32_t* __restrict__ row_list) {
  const int p = fv.program();
  if (!fv.gathered(p)) return;
  using Scan = cub::BlockScan<int, kListThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ std::uint32_t base;
  const std::int64_t nb = fv.fs.stats[p].cand_blocks;
  const std::int32_t* cand = fv.fs.cand + static_cast<std::int64_t>(p) * fv.fs.blocks;
  const std::uint8_t* flags = fv.fs.flags + static_cast<std::int64_t>(p) * fv.fs.blocks;
  const std::uint32_t* mask = fv.fs.masks + static_cast<std::int64_t>(p) * fv.fs.mask_words;
  const int j0 = 4 * static_cast<int>(threadIdx.x);
  for (std::int64_t i = blockIdx.x; i < nb; i += gridDim.x) {
    const std::int64_t b = cand[i];
    const std::uint8_t flag = flags[b];
    const std::int64_t r0 = b * kFilterBlockRows;
    const std::int64_t w = (r0 + j0) >> 5;
    const int sh = j0 & 31;
    std::uint32_t bits = flag == 2u ? 0xFu : flag == 1u ? (mask[w] >> sh) & 0xFu : 0u;
    if (fv.live) bits &= (fv.live[w] >> sh) & 0xFu;
    const std::int64_t left = rows - (r0 + j0);
    if (left < 4) bits &= left <= 0 ? 0u : (1u << left) - 1u;
    int pos = 0, total = 0;
    Scan(tmp).ExclusiveSum(__popc(bits), pos, total);
    if (threadIdx.x == 0) base = total > 0 ? atomicAdd(&st->list_rows, static_cast<std::uint32_t>(total)) : 0u;
    __syncthreads();
    for (int e = 0; e < 4; ++e)
      if ((bits >> e) & 1u) row_list[base + static_cast<std::uint32_t>(pos++)] = static_cast<std::int32_t>(r0 + j0 + e);
    __syncthreads();  // tmp and base are reused by the next block
  }
}

/// The dense scan: row j of candidate block i goes to entry i · 1024 + j; a row the query may
/// not return (or past the shard) scores −inf and is not counted. Warps take kR entries at a time
/// across the grid (a few candidate blocks still keep every warp busy). Query without a filter:
/// every block, every live row.
template <typename T, bool kL2, int kR, int kC>
__global__ void __launch_bounds__(kThreads)
    dense_kernel(const T* __restrict__ shard, std::int64_t rows, int nvec, const float* __restrict__ query, int dim,
                 const std::int64_t* __restrict__ ids, FilterView fv, float* __restrict__ scores,
                 std::int64_t* __restrict__ cids, std::uint32_t* __restrict__ hists, std::uint32_t k, std::uint32_t cap,
                 Batch1State* __restrict__ st) {
  constexpr int V = VecTraits<T>::kElems;
  static_assert(kFilterBlockRows % kR == 0, "a warp's rows lie in one block");
  const int p = fv.program();
  if (fv.gathered(p)) return;
  extern __shared__ __align__(16) float qs[];
  __shared__ std::uint32_t h[kHist1Bins];
  const std::int64_t nb = p < 0 ? fv.fs.blocks : static_cast<std::int64_t>(fv.fs.stats[p].cand_blocks);
  const std::int64_t n = nb * kFilterBlockRows;
  if (blockIdx.x == 0 && threadIdx.x == 0) st->entries = static_cast<std::uint32_t>(n);
  scan_prologue(query, dim, nvec * V, qs, h);
  const std::uint64_t pol = l2_evict_first();
  const int lane = threadIdx.x & 31;
  const std::int64_t stride = static_cast<std::int64_t>(nvec) * V;
  const std::int32_t* cand = p < 0 ? nullptr : fv.fs.cand + static_cast<std::int64_t>(p) * fv.fs.blocks;
  const std::uint8_t* flags = p < 0 ? nullptr : fv.fs.flags + static_cast<std::int64_t>(p) * fv.fs.blocks;
  const std::uint32_t* mask = p < 0 ? nullptr : fv.fs.masks + static_cast<std::int64_t>(p) * fv.fs.mask_words;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarps;
  for (std::int64_t l = (static_cast<std::int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kR; l < n;
       l += warps * kR) {
    const std::int64_t i = l >> kFilterBlockShift;
    const std::int64_t b = p < 0 ? i : cand[i];
    const std::uint8_t flag = p < 0 ? 2u : flags[b];
    const std::int64_t first = b * kFilterBlockRows, r0 = first + (l & (kFilterBlockRows - 1));
    const T* row[kR];
    bool live[kR];
#pragma unroll
    for (int e = 0; e < kR; ++e) {
      const std::int64_t r = r0 + e;
      bool ok = r < rows && flag != 0u;
      if (ok && flag == 1u) ok = ((mask[r >> 5] >> (r & 31)) & 1u) != 0u;
      live[e] = ok && fv.is_live(r);
      row[e] = shard + (live[e] ? r : first) * stride;
    }
    float s[kR];
    score_rows<T, kL2, kR, kC>(row, live, nvec, qs, lane, pol, s);
#pragma unroll
    for (int e = 0; e < kR; ++e) {
      if (lane == e) {
        if (live[e]) {
          scores[l + e] = s[e];
          cids[l + e] = ids[r0 + e];
          atomicAdd(&h[score_key(s[e]) >> 20], 1u);
        } else {
          scores[l + e] = -CUDART_INF_F;  // never selected (select1<true> skips −inf)
        }
      }
    }
  }
  scan_epilogue(h, hists, k, cap, st);
}

/// The gathered scan: listed row L goes to entry L.
template <typename T, bool kL2, int kR, int kC>
__global__ void __launch_bounds__(kThreads)
    gathered_kernel(const T* __restrict__ shard, int nvec, const float* __restrict__ query, int dim,
                    const std::int64_t* __restrict__ ids, FilterView fv, const std::int32_t* __restrict__ row_list,
                    float* __restrict__ scores, std::int64_t* __restrict__ cids, std::uint32_t* __restrict__ hists,
                    std::uint32_t k, std::uint32_t cap, Batch1State* __restrict__ st) {
  constexpr int V = VecTraits<T>::kElems;
  if (!fv.gathered(fv.program())) return;
  extern __shared__ __align__(16) float qs[];
  __shared__ std::uint32_t h[kHist1Bins];
  const std::int64_t n = st->list_rows;
  if (blockIdx.x == 0 && threadIdx.x == 0) st->entries = static_cast<std::uint32_t>(n);
  scan_prologue(query, dim, nvec * V, qs, h);
  const std::uint64_t pol = l2_evict_first();
  const int lane = threadIdx.x & 31;
  const std::int64_t stride = static_cast<std::int64_t>(nvec) * V;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarps;
  for (std::int64_t l = (static_cast<std::int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kR; l < n;
       l += warps * kR) {
    const T* row[kR];
    bool live[kR];
    std::int64_t r[kR];
#pragma unroll
    for (int e = 0; e < kR; ++e) {
      live[e] = l + e < n;
      r[e] = row_list[live[e] ? l + e : l];
      row[e] = shard + r[e] * stride;
    }
    float s[kR];
    score_rows<T, kL2, kR, kC>(row, live, nvec, qs, lane, pol, s);
#pragma unroll
    for (int e = 0; e < kR; ++e) {
      if (lane == e && live[e]) {
        scores[l + e] = s[e];
        cids[l + e] = ids[r[e]];
        atomicAdd(&h[score_key(s[e]) >> 20], 1u);
      }
    }
  }
  scan_epilogue(h, hists, k, cap, st);
}

template <typename T, bool kL2, int kR, int kC>
void launch(const ScanSelectPlan& p, const FilteredScanPlan& f, const FilteredScanArgs& a, cudaStream_t stream) {
  const ScanSelectArgs& b = a.base;
  CHECK_CUDA(cudaMemsetAsync(b.hists, 0, b.clear_bytes, stream));
  const FilterView fv{a.fs, a.query_program, a.q, a.live, static_cast<int>(f.path), f.gather_below, p.rows};
  const std::uint32_t uk = static_cast<std::uint32_t>(b.k), ucap = static_cast<std::uint32_t>(p.cap);
  const std::size_t qsmem = static_cast<std::size_t>(p.dpad) * sizeof(float);
  const T* shard = static_cast<const T*>(b.shard);
  list_kernel<<<f.list_blocks, kListThreads, 0, stream>>>(p.rows, fv, b.state, a.row_list);
  CHECK_CUDA_LAUNCH();
  dense_kernel<T, kL2, kR, kC><<<f.dense_blocks, kThreads, qsmem, stream>>>(
      shard, p.rows, p.nvec, b.query, static_cast<int>(p.dim), b.ids, fv, b.scores, a.cids, b.hists, uk, ucap, b.state);
  CHECK_CUDA_LAUNCH();
  gathered_kernel<T, kL2, kR, kC><<<f.gather_blocks, kThreads, qsmem, stream>>>(
      shard, p.nvec, b.query, static_cast<int>(p.dim), b.ids, fv, a.row_list, b.scores, a.cids, b.hists, uk, ucap,
      b.state);
  CHECK_CUDA_LAUNCH();
  ScanSelectArgs sel = b;
  sel.ids = a.cids;
  if (b.window.on) window_pass(p, sel, a.fs.blocks * kFilterBlockRows, &b.state->entries, stream);
  select_compact(p, sel, a.fs.blocks * kFilterBlockRows, &b.state->entries, stream);
}

template <typename T, bool kL2, int kR, int kC>
void plan_shape(const ScanSelectPlan& p, FilteredScanPlan& f, int sms) {
  const std::size_t qsmem = static_cast<std::size_t>(p.dpad) * sizeof(float);
  f.list_blocks = persistent_grid(reinterpret_cast<const void*>(list_kernel), kListThreads, 0, sms);
  f.dense_blocks =
      persistent_grid(reinterpret_cast<const void*>(dense_kernel<T, kL2, kR, kC>), kThreads, qsmem, sms);
  f.gather_blocks =
      persistent_grid(reinterpret_cast<const void*>(gathered_kernel<T, kL2, kR, kC>), kThreads, qsmem, sms);
  f.launch = launch<T, kL2, kR, kC>;
}

/// scan1's rows per warp from the row's 16-byte chunks (32 lanes per row at every width).
template <typename T, bool kL2>
void plan_rows(const ScanSelectPlan& p, FilteredScanPlan& f, int sms) {
  if (p.nvec > 64) return plan_shape<T, kL2, 2, 4>(p, f, sms);
  if (p.nvec > 32) return plan_shape<T, kL2, 4, 2>(p, f, sms);
  return plan_shape<T, kL2, 8, 1>(p, f, sms);
}

}  // namespace

float filtered_scan_gather_below() { return kGatherBelow; }

FilteredScanPlan plan_filtered_scan(const ScanSelectPlan& scan, FilterScan path, int sms) {
  FilteredScanPlan f;
  f.path = path;
  f.gather_below = kGatherBelow;
  with_storage_type(scan.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (scan.l2) plan_rows<T, true>(scan, f, sms);
    else plan_rows<T, false>(scan, f, sms);
  });
  return f;
}

}  // namespace shardtopk::cuda_detail
