// The batched path's candidate pools: approximate scores from the GEMM output of a chunk, a
// threshold per query from its k-th approximate score minus 2Δ, pools of the rows that reach it.

#include "engine/cuda/kernels/candidate_pools.hpp"

#include <cuda_fp16.h>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/select_primitives.cuh"

namespace shardtopk::cuda_detail {
namespace {

constexpr int kCollectThreads = 256;

__device__ __forceinline__ float out_to_float(float g) { return g; }
__device__ __forceinline__ float out_to_float(__half g) { return __half2float(g); }

/// The collect kernel's shape per GEMM output type: kVec consecutive values per 16-byte load, four
/// loads per thread (float: 16 values, __half: 32).
template <typename OutT>
struct CollectShape {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(OutT));
  static constexpr int kPerThread = 4 * kVec;
  static constexpr int kPerBlock = kCollectThreads * kPerThread;
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

/// First chunk of a batched search, one block per query: its threshold from the chunk's own
/// k-th approximate score, and every row of the chunk that passes it into the query's pool.
/// kMasked: rows the query may not return count as −inf for its threshold and never enter its
/// pool (so when fewer than k of the chunk's rows are allowed, the threshold is −inf).
template <typename OutT, bool kMasked>
__global__ void __launch_bounds__(kSelThreads)
    chunk0_kernel(Approx<OutT> ap, int rows_c, const QueryInfo* __restrict__ qinfo, std::uint32_t k,
                  PoolEntry* __restrict__ pool, std::int64_t pool_cap, std::uint32_t* __restrict__ pool_count,
                  float* __restrict__ thr, std::uint32_t* __restrict__ overflow, RowMasks masks) {
  const int q = blockIdx.x;
  const QueryInfo qi = qinfo[q];
  const auto got = [&](int i) {
    if constexpr (kMasked) {
      if (!masks.allows(q, ap.row0 + i)) return -CUDART_INF_F;
    }
    return ap(q, i, qi);
  };
  const std::uint32_t kth = block_kth_key(got, rows_c, k);
  const float t = pool_threshold(kth, rows_c, k, qi.delta);
  PoolEntry* list = pool + q * pool_cap;
  const int end = (rows_c + 31) / 32 * 32;
  bool ok = true;
  for (int i = threadIdx.x; i < end; i += blockDim.x) {
    float s = 0.0f;
    bool take = false;
    if (i < rows_c) {
      s = got(i);
      take = s >= t && (!kMasked || s != -CUDART_INF_F);
    }
    ok &= warp_append(take, PoolEntry{s, static_cast<std::int32_t>(ap.row0 + i)}, list, &pool_count[q],
                      static_cast<std::uint32_t>(pool_cap));
  }
  if (!ok) atomicOr(&overflow[q], 1u);
  if (threadIdx.x == 0) thr[q] = t;
}

/// Later chunks: every (query, row) whose approximate score reaches the query's threshold
/// enters the pool. Grid: (ceil(rows_c / CollectShape<OutT>::kPerBlock), batch). A warp reads 512
/// contiguous bytes per load (16-byte loads when the row stride allows: thread t of the block
/// takes values V (j · kCollectThreads + t) … + V − 1, V = CollectShape::kVec, j < 4), and makes
/// at most ONE pool atomic for all its passing values (a warp scan of the per-thread counts): a
/// global atomic per passing value made the first chunks latency bound.
/// kMasked: a (query, row) the masks rule out never enters the pool.
template <typename OutT, bool kMasked>
__global__ void __launch_bounds__(kCollectThreads)
    collect_kernel(Approx<OutT> ap, int rows_c, const QueryInfo* __restrict__ qinfo, const float* __restrict__ thr,
                  PoolEntry* __restrict__ pool, std::int64_t pool_cap, std::uint32_t* __restrict__ pool_count,
                  std::uint32_t* __restrict__ overflow, RowMasks masks) {
  constexpr int V = CollectShape<OutT>::kVec, P = CollectShape<OutT>::kPerThread;
  const int q = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int base = blockIdx.x * CollectShape<OutT>::kPerBlock;
  const OutT* src = ap.S + q * ap.ld;
  // Value m of this thread: V consecutive values per 16-byte load, loads kCollectThreads apart.
  auto index = [&](int m) { return base + V * ((m / V) * kCollectThreads + static_cast<int>(threadIdx.x)) + (m % V); };
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
      if (v[m] >= t && (!kMasked || masks.allows(q, ap.row0 + i))) takes |= 1u << m;
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
  const float t = fmaxf(thr[q], pool_threshold(kth, n, k, qinfo[q].delta));
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

template <typename OutT>
Approx<OutT> approx_of(const ChunkScores& c) {
  return Approx<OutT>{static_cast<const OutT*>(c.S), c.ld, c.row_sq, c.row0, c.l2};
}

template <typename OutT>
void collect_chunk_t(const ChunkScores& c, int batch, const CandidatePools& p, const RowMasks* masks,
                    cudaStream_t stream) {
  constexpr int per_block = CollectShape<OutT>::kPerBlock;
  const dim3 grid(static_cast<unsigned>((c.rows + per_block - 1) / per_block), static_cast<unsigned>(batch));
  if (masks) {
    collect_kernel<OutT, true><<<grid, kCollectThreads, 0, stream>>>(approx_of<OutT>(c), c.rows, p.qinfo, p.thr, p.pool,
                                                                   p.cap, p.count, p.overflow, *masks);
  } else {
    collect_kernel<OutT, false><<<grid, kCollectThreads, 0, stream>>>(approx_of<OutT>(c), c.rows, p.qinfo, p.thr, p.pool,
                                                                    p.cap, p.count, p.overflow, RowMasks{});
  }
}

template <typename OutT>
void first_chunk_t(const ChunkScores& c, int batch, std::uint32_t k, const CandidatePools& p, const RowMasks* masks,
                   cudaStream_t stream) {
  if (masks) {
    chunk0_kernel<OutT, true><<<batch, kSelThreads, 0, stream>>>(approx_of<OutT>(c), c.rows, p.qinfo, k, p.pool, p.cap,
                                                                 p.count, p.thr, p.overflow, *masks);
  } else {
    chunk0_kernel<OutT, false><<<batch, kSelThreads, 0, stream>>>(approx_of<OutT>(c), c.rows, p.qinfo, k, p.pool,
                                                                  p.cap, p.count, p.thr, p.overflow, RowMasks{});
  }
}

}  // namespace

void collect_first_chunk(const ChunkScores& c, int batch, int k, const CandidatePools& p, cudaStream_t stream,
                        const RowMasks* masks) {
  const std::uint32_t uk = static_cast<std::uint32_t>(k);
  if (c.half) first_chunk_t<__half>(c, batch, uk, p, masks, stream);
  else first_chunk_t<float>(c, batch, uk, p, masks, stream);
  CHECK_CUDA_LAUNCH();
}

void collect_chunk(const ChunkScores& c, int batch, const CandidatePools& p, cudaStream_t stream, const RowMasks* masks) {
  if (c.half) collect_chunk_t<__half>(c, batch, p, masks, stream);
  else collect_chunk_t<float>(c, batch, p, masks, stream);
  CHECK_CUDA_LAUNCH();
}

void compact_pools(int batch, int k, std::uint32_t trigger, const CandidatePools& p, cudaStream_t stream) {
  compact_kernel<<<batch, kSelThreads, 0, stream>>>(p.qinfo, static_cast<std::uint32_t>(k), p.pool, p.cap, p.count,
                                                    p.thr, trigger);
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
