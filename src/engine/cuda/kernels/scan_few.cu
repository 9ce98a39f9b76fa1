// The few-query search (scan_few.hpp):
//   scan_few   one pass over the shard; a warp takes kFewRows adjacent rows at a time, each lane
//              loading chunks lane, lane + 32, … of each row (few_chunks() per row in
//              flight), and advances one accumulator per (query, row) in the batch-1 order
//              (score.cuh); the warp's kQ · kFewRows partial sums are then reduced by a
//              reduce-scatter over the same xor butterfly, so each lane ends with whole sums of
//              some (query, row) pairs, bit for bit warp_tree's; exact scores to
//              scores[q, rows], a 4,096-bin level-1 histogram per query; the last block flips
//              *dir (the sweep direction)
//   select_few the batch-1 select of each query (scan_select.cu), one grid row per query, which
//              first resolves the query's level-1 threshold (select1.cuh).

#include "engine/cuda/kernels/scan_few.hpp"

#include <algorithm>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/launch.hpp"
#include "engine/cuda/kernels/score.cuh"
#include "engine/cuda/kernels/select1.cuh"
#include "engine/cuda/kernels/select_primitives.cuh"
#include "engine/cuda/kernels/storage.cuh"

namespace shardtopk::cuda_detail {
namespace {

constexpr int kFewThreads = 512;  // one block per multiprocessor (its histograms fill shared memory)
constexpr int kFewRows = 4;       // adjacent rows per warp step
// Float16/bfloat16 shards: the scan does twice the FMAs per byte of float32 and stops hiding
// them behind the reads as the batch grows, so above these sizes the tensor-core path serves
// batches of 5 to 8 (above kFewMidBytes) and every batch (above kFewWideBytes). One H200, 768
// dims, host p50, the scan against the tensor-core path: 100k rows B = 8 100.1 against
// 125.6 µs; 1M rows B = 4 431.9 against 450.7 µs, B = 8 627.8 against 459.9 µs; 10M rows B = 2
// 3.73 against 3.58 ms (docs/PERFORMANCE.md, "Batches of 2 to 8"). Float32 shards: the scan is
// ahead at every size measured (10M rows B = 8 7.79 against 9.30 ms).
constexpr std::uint64_t kFewMidBytes = 512ull << 20;
constexpr std::uint64_t kFewWideBytes = 2ull << 30;

/// Chunks of a row per tile: 2 for 2 queries and for float32 rows, 1 for 3 to 8 queries of
/// 2-byte rows (a lane holds two tiles, the one it scores and the next one in flight; there, the
/// accumulators and query chunks leave no registers for more: two chunks for 4 queries of
/// float16 spill 24 bytes and measured 1.10 × one at 100k and 1M rows, one H100).
template <typename T, int kQ>
constexpr int few_chunks() {
  return kQ <= 2 || sizeof(T) == 4 ? 2 : 1;
}

/// Reduce-scatter of kN partial sums per lane over the warp, by the xor butterfly's steps
/// (offsets kO, kO / 2, … 1): at each step a lane keeps the upper half of its values when its
/// offset bit is set, else the lower half, and adds its partner's partial of each kept value
/// (own + partner, as warp_tree adds; a + b = b + a exactly). Each value's sum is thus formed by
/// the same additions, in the same tree, as warp_tree of that value alone. Afterwards v[0 ..
/// max(1, kN / 32)) hold the sums of values lane · (kN / 32) + t when kN ≥ 32; below 32 values,
/// once one value is left the remaining steps are warp_tree's, and lane l holds value
/// l / (32 / kN) (lanes l ≡ 0 mod 32 / kN write it).
template <int kN, int kO>
__device__ __forceinline__ void reduce_scatter(float* v, int lane) {
  if constexpr (kO > 0) {
    if constexpr (kN > 1) {
      const bool up = (lane & kO) != 0;
#pragma unroll
      for (int j = 0; j < kN / 2; ++j) {
        const float send = up ? v[j] : v[j + kN / 2];
        const float keep = up ? v[j + kN / 2] : v[j];
        v[j] = __fadd_rn(keep, __shfl_xor_sync(kFullMask, send, kO));
      }
      reduce_scatter<kN / 2, kO / 2>(v, lane);
    } else {
      v[0] = __fadd_rn(v[0], __shfl_xor_sync(kFullMask, v[0], kO));
      reduce_scatter<1, kO / 2>(v, lane);
    }
  }
}

/// Where float c (< nvec · V) of a query sits in its nvec · V floats of shared memory: in planes
/// of 4 floats, float e of chunk v at (e / 4) · nvec · 4 + v · 4 + e % 4. A warp's lanes take
/// consecutive chunks, so each float4 they read comes from consecutive 16-byte words and a
/// quarter-warp's 8 lanes cover 32 distinct banks. In chunk order a 16-bit chunk's 8 floats are
/// 32 bytes, and lanes l and l + 4 of each quarter-warp would read the same banks: two
/// wavefronts per quarter, twice the shared-memory traffic of the scan's query reads (CUDA C++
/// Programming Guide, "Shared Memory" of compute capability 5.x and later).
template <int V>
__device__ __forceinline__ int few_query_slot(int c, int nvec) {
  const int v = c / V, e = c - v * V;
  return (e >> 2) * nvec * 4 + v * 4 + (e & 3);
}

/// One pass over the shard [rows, nvec chunks] against `batch` ≤ kQ queries [batch, dim]
/// (float32; query slots past the batch are zero and never written): scores[q · rows + r] =
/// query q's exact ranking score of row r (score.cuh's per-lane order, then warp_tree's additions
/// by reduce_scatter), histogram q += the top 12 bits of its key (each query's select resolves
/// its threshold). Persistent grid; warps stride over steps of kFewRows rows, each step read in
/// tiles of kC chunks per lane and row, the loads of the next tile (of this step or the next)
/// issued before the FMAs of this one. L2 hints and alternating direction as scan1_kernel
/// (scan_select.cu): the last block flips *dir. Dynamic shared memory: kQ × (kHist1Bins words +
/// nvec · V floats).
template <typename T, bool kL2, int kQ>
__global__ void __launch_bounds__(kFewThreads, 1)
    scan_few_kernel(const T* __restrict__ shard, std::int64_t rows, int nvec, const float* __restrict__ queries,
                    int batch, int dim, float* __restrict__ scores, FewQueryState* __restrict__ states,
                    std::uint32_t* __restrict__ dir, std::int64_t keep_from) {
  constexpr int V = VecTraits<T>::kElems;
  constexpr int kC = few_chunks<T, kQ>();
  constexpr int kG = kQ < 4 ? kQ : 4;  // queries whose chunks a lane holds at once
  constexpr int kN = kQ * kFewRows;    // partial sums per lane: value q · kFewRows + i
  static_assert(kN >= 8 && kN <= 32, "scan_few_kernel: 2, 4 or 8 queries");
  const bool hints = dir != nullptr;
  const bool rev = hints && (*dir & 1u) != 0u;
  extern __shared__ __align__(16) unsigned char smem[];
  std::uint32_t* h = reinterpret_cast<std::uint32_t*>(smem);  // [kQ][kHist1Bins]
  float* qs = reinterpret_cast<float*>(h + kQ * kHist1Bins);  // [kQ][nvec · V], few_query_slot order
  const int qstride = nvec * V;
  // The queries to shared memory: each thread takes columns c and c + kFewThreads of every
  // query, their 2 · kQ loads in flight together (a block's 8 × 768 floats in one round trip to
  // L2 before its first row), and no division per float.
  for (int c0 = threadIdx.x; c0 < qstride; c0 += 2 * kFewThreads) {
    float qv[2][kQ];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int c = c0 + u * kFewThreads;
#pragma unroll
      for (int q = 0; q < kQ; ++q)
        qv[u][q] = q < batch && c < dim ? queries[static_cast<std::int64_t>(q) * dim + c] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int c = c0 + u * kFewThreads;
      if (c < qstride) {
        const int slot = few_query_slot<V>(c, nvec);
#pragma unroll
        for (int q = 0; q < kQ; ++q) qs[q * qstride + slot] = qv[u][q];
      }
    }
  }
  // The histograms cleared and (below) flushed four bins per access: one bin per access, a
  // block's kQ · 4,096 bins are 64 passes of 512 threads each way, most of a small shard's
  // instructions.
  uint4* const h4 = reinterpret_cast<uint4*>(h);
  for (int i = threadIdx.x; i < kQ * kHist1Bins / 4; i += kFewThreads) h4[i] = make_uint4(0u, 0u, 0u, 0u);
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * (kFewThreads / 32) * kFewRows;
  const int tiles = (nvec + 32 * kC - 1) / (32 * kC);  // tiles per step of rows
  // Where the loads read: row i of the step at logical row r (logical r + i, read as
  // rows − 1 − (r + i) when reversed; rows past the end read the step's first row again) is
  // chunk row0 + off[i] + lane; set once per step, so that a tile's loads cost an add each.
  const uint4* const shard4 = reinterpret_cast<const uint4*>(shard);
  const uint4* row0 = shard4;
  int off[kFewRows];
  std::uint64_t pol = 0;  // L2 policy of the step's loads (evict_normal without hints)
  auto aim = [&](std::int64_t r) {
    row0 = shard4 + (rev ? rows - 1 - r : r) * nvec + lane;
#pragma unroll
    for (int i = 0; i < kFewRows; ++i) off[i] = r + i < rows ? (rev ? -i : i) * nvec : 0;
    pol = hints && r < keep_from ? l2_evict_first() : l2_evict_normal();
  };
  // Loads tile t of the step aimed at into x.
  auto load = [&](int t, uint4 (&x)[kFewRows][kC]) {
#pragma unroll
    for (int i = 0; i < kFewRows; ++i) {
      const uint4* p = row0 + (off[i] + t * 32 * kC);
#pragma unroll
      for (int c = 0; c < kC; ++c)
        if (t * 32 * kC + lane + 32 * c < nvec) x[i][c] = load_chunk_hint(p, 32 * c, pol);
    }
  };
  std::int64_t r = (static_cast<std::int64_t>(blockIdx.x) * (kFewThreads / 32) + (threadIdx.x >> 5)) * kFewRows;
  int t = 0;
  float a[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) a[j] = 0.0f;
  // Scores tile t of step r from x, the next tile's loads (of this step or the next) into xn
  // issued first; after the step's last tile, reduces, writes and counts the step's scores.
  auto tile = [&](const uint4 (&x)[kFewRows][kC], uint4 (&xn)[kFewRows][kC]) {
    const bool last = t + 1 == tiles;
    const std::int64_t rn = last ? r + step : r;
    const int tn = last ? 0 : t + 1;
    if (rn < rows) {
      if (last) aim(rn);
      load(tn, xn);
    }
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int v = t * 32 * kC + lane + 32 * c;
      if (v >= nvec) continue;
#pragma unroll
      for (int g = 0; g < kQ; g += kG) {
        float qv[kG][V];
#pragma unroll
        for (int gq = 0; gq < kG; ++gq) query_floats<T>(qs + (g + gq) * qstride, qv[gq], nvec * 4, v);
        // score.cuh's chunk_step, its conversion shared by the kG queries
#pragma unroll
        for (int i = 0; i < kFewRows; ++i) {
          float xf[V];
          chunk_floats<T>(x[i][c], xf);
#pragma unroll
          for (int gq = 0; gq < kG; ++gq)
            a[(g + gq) * kFewRows + i] = chunk_fma<T, kL2>(qv[gq], xf, a[(g + gq) * kFewRows + i]);
        }
      }
    }
    if (last) {  // the step's rows are scored: reduce, write, histogram
      reduce_scatter<kN, 16>(a, lane);
      // This lane's value: kN = 32 → lane; kN < 32 → lane / (32 / kN), written by the first lane.
      constexpr int kSpread = 32 / kN;
      const int value = lane / kSpread;
      const int q = value / kFewRows, i = value % kFewRows;
      const bool writer = lane % kSpread == 0 && q < batch && r + i < rows;
      float sc = a[0];
      if (kL2) sc = -sc;
      const std::int64_t at = rev ? rows - 1 - (r + i) : r + i;
      if (writer) scores[static_cast<std::int64_t>(q) * rows + at] = sc;
      hist_add(h, static_cast<std::uint32_t>(q) * kHist1Bins + (score_key(sc) >> 20), writer);
#pragma unroll
      for (int j = 0; j < kN; ++j) a[j] = 0.0f;
    }
    r = rn;
    t = tn;
  };
  uint4 x[kFewRows][kC];
  if (r < rows) {
    aim(r);
    load(0, x);
  }
  while (r < rows) {  // warp-uniform
    uint4 xn[kFewRows][kC];
    tile(x, xn);
#pragma unroll
    for (int i = 0; i < kFewRows; ++i)
#pragma unroll
      for (int c = 0; c < kC; ++c) x[i][c] = xn[i][c];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kQ * kHist1Bins / 4; i += kFewThreads) {
    const uint4 w = h4[i];
    std::uint32_t* g = states[i / (kHist1Bins / 4)].hists + (i % (kHist1Bins / 4)) * 4;
    if (w.x) atomicAdd(g, w.x);
    if (w.y) atomicAdd(g + 1, w.y);
    if (w.z) atomicAdd(g + 2, w.z);
    if (w.w) atomicAdd(g + 3, w.w);
  }
  // Every block read *dir before it got here; the last one flips it for the next search.
  if (dir != nullptr && last_block_done(&states[0].state.done) && threadIdx.x == 0) {
    states[0].state.done = 0;
    *dir ^= 1u;
  }
}

template <int kQ>
std::size_t few_smem(const ScanSelectPlan& s) {
  return static_cast<std::size_t>(kQ) * (kHist1Bins * sizeof(std::uint32_t) + static_cast<std::size_t>(s.dpad) * sizeof(float));
}

template <typename T, bool kL2, int kQ>
void launch_few(const ScanSelectPlan& s, const ScanFewPlan& p, const ScanFewArgs& a, cudaStream_t stream) {
  const std::size_t smem = few_smem<kQ>(s);
  scan_few_kernel<T, kL2, kQ><<<p.blocks, kFewThreads, smem, stream>>>(
      static_cast<const T*>(a.shard), s.rows, s.nvec, a.queries, a.batch, static_cast<int>(s.dim), a.scores,
      a.states, s.l2_hints ? a.dir : nullptr, s.keep_from);
  CHECK_CUDA_LAUNCH();
}

/// Index of the kernel for a batch: 1 (2 queries), 2 (3–4), 3 (5–8).
int few_slot(int batch) { return batch <= 2 ? 1 : batch <= 4 ? 2 : 3; }

template <typename T, bool kL2>
void launch_slot(int slot, const ScanSelectPlan& s, const ScanFewPlan& p, const ScanFewArgs& a, cudaStream_t stream) {
  if (slot == 1) launch_few<T, kL2, 2>(s, p, a, stream);
  else if (slot == 2) launch_few<T, kL2, 4>(s, p, a, stream);
  else launch_few<T, kL2, 8>(s, p, a, stream);
}

template <typename T, bool kL2>
const void* kernel_of(int slot) {
  if (slot == 1) return reinterpret_cast<const void*>(scan_few_kernel<T, kL2, 2>);
  if (slot == 2) return reinterpret_cast<const void*>(scan_few_kernel<T, kL2, 4>);
  return reinterpret_cast<const void*>(scan_few_kernel<T, kL2, 8>);
}

}  // namespace

ScanFewPlan plan_scan_few(const ScanSelectPlan& s, int max_batch, int sms, std::size_t smem_optin) {
  ScanFewPlan p;
  if (max_batch < 2 || s.rows <= 0) return p;
  const std::size_t need[4] = {0, few_smem<2>(s), few_smem<4>(s), few_smem<8>(s)};
  int served = 0;
  for (int slot = 1; slot <= 3; ++slot) {
    const int hi = slot == 1 ? 2 : slot == 2 ? 4 : 8;
    if (need[slot] > smem_optin) break;
    with_storage_type(s.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      allow_dynamic_smem(s.l2 ? kernel_of<T, true>(slot) : kernel_of<T, false>(slot), need[slot]);
    });
    served = std::min(hi, max_batch);
    if (hi >= max_batch) break;
  }
  p.fit_batch = served;
  const std::uint64_t shard_bytes =
      static_cast<std::uint64_t>(s.rows) * static_cast<std::uint64_t>(s.dpad) * dtype_bytes(s.dtype);
  if (s.dtype != Dtype::kFloat32 && shard_bytes > kFewWideBytes) served = 0;
  else if (s.dtype != Dtype::kFloat32 && shard_bytes > kFewMidBytes) served = std::min(served, 4);
  p.max_batch = served;
  // One block per multiprocessor (its shared memory allows no second), fewer for a small shard:
  // at least one step of rows per warp.
  constexpr std::int64_t kBlockStepRows = static_cast<std::int64_t>(kFewRows) * (kFewThreads / 32);
  p.blocks = static_cast<int>(std::min<std::int64_t>(sms, (s.rows + kBlockStepRows - 1) / kBlockStepRows));
  return p;
}

void scan_few(const ScanSelectPlan& s, const ScanFewPlan& p, const ScanFewArgs& a, cudaStream_t stream) {
  CHECK_CUDA(cudaMemsetAsync(a.states, 0, sizeof(FewQueryState) * static_cast<std::size_t>(a.batch), stream));
  const int slot = few_slot(a.batch);
  with_storage_type(s.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (s.l2) launch_slot<T, true>(slot, s, p, a, stream);
    else launch_slot<T, false>(slot, s, p, a, stream);
  });
  select_few(s, a.scores, a.states, a.batch, a.k, a.cand, a.ids, a.out, a.exp, stream);
}

}  // namespace shardtopk::cuda_detail
