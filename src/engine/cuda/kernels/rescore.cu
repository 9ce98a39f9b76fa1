// The batched path's last step: exact re-scoring of the candidate pools and the final sort.

#include "engine/cuda/kernels/rescore.hpp"

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/launch.hpp"
#include "engine/cuda/kernels/select_primitives.cuh"
#include "engine/cuda/kernels/storage.cuh"

namespace shardtopk::cuda_detail {
namespace {

/// Pool scores each thread of the re-score holds in registers (a pool of up to kSelThreads ×
/// kRescoreHeld entries is read once for its select and the rows that pass).
constexpr int kRescoreHeld = 4;

/// Rows a warp of the re-score scores at once (exact_scores): their loads in flight together;
/// two of float32 rows (four of them spilled registers under the 64 of a 1,024-thread block).
template <typename T>
constexpr int rescore_rows() {
  return sizeof(T) == 4 ? 2 : 4;
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
  if (threadIdx.x == 0) m = 0;
  // The rows that pass the pool's threshold: their shard rows into sid (as a scratch list). A pool
  // of up to kSelThreads × kRescoreHeld entries has its scores read once, into registers.
  if (n <= kSelThreads * kRescoreHeld) {
    float v[kRescoreHeld];
#pragma unroll
    for (int j = 0; j < kRescoreHeld; ++j) {
      const int i = threadIdx.x + j * kSelThreads;
      v[j] = i < n ? list[i].s : 0.0f;
    }
    const auto each = [&](auto&& f) {
#pragma unroll
      for (int j = 0; j < kRescoreHeld; ++j)
        if (threadIdx.x + j * kSelThreads < n) f(v[j]);
    };
    const std::uint32_t kth = static_cast<std::uint32_t>(n) < k ? 0u : block_kth_key_offered<kSelThreads>(each, k);
    const float t = pool_threshold(kth, n, k, qinfo[q].delta);
    __syncthreads();  // m = 0 (the select has barriers, but none when n < k)
#pragma unroll
    for (int j = 0; j < kRescoreHeld; ++j) {
      if (threadIdx.x + j * kSelThreads < n && v[j] >= t) {
        const int pos = atomicAdd(&m, 1);
        if (pos < cap) sid[pos] = list[threadIdx.x + j * kSelThreads].row;
      }
    }
  } else {
    const auto got = [&](int i) { return list[i].s; };
    const std::uint32_t kth = block_kth_key(got, n, k);
    const float t = pool_threshold(kth, n, k, qinfo[q].delta);
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const PoolEntry e = list[i];
      if (e.s >= t) {
        const int pos = atomicAdd(&m, 1);
        if (pos < cap) sid[pos] = e.row;
      }
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
  constexpr int kRescoreRows = rescore_rows<T>();
  // A warp re-scores kRescoreRows adjacent entries of sid at a time (the last repeated past cnt).
  for (int j0 = (threadIdx.x >> 5) * kRescoreRows; j0 < cnt; j0 += (blockDim.x >> 5) * kRescoreRows) {
    std::int64_t row[kRescoreRows];
    const T* at[kRescoreRows];
#pragma unroll
    for (int r = 0; r < kRescoreRows; ++r) {
      row[r] = sid[min(j0 + r, cnt - 1)];
      at[r] = shard + row[r] * static_cast<std::int64_t>(nvec) * V;
    }
    float s[kRescoreRows];
    exact_scores<T, kL2, kRescoreRows>(qv, at, nvec, lane, s);
    __syncwarp();
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < kRescoreRows; ++r) {
        if (j0 + r < cnt) {
          ss[j0 + r] = s[r];
          sid[j0 + r] = ids[row[r]];
        }
      }
    }
  }
  __syncthreads();
  sort_and_write(ss, sid, cnt, out_k, out + static_cast<std::int64_t>(q) * out_k);
}

std::size_t sort_smem(int cap) { return static_cast<std::size_t>(cap) * (sizeof(float) + sizeof(std::int64_t)); }

}  // namespace

void prepare_rescore(int cap) {
  for (const void* fn : {reinterpret_cast<const void*>(final_batched_kernel<float, false>),
                         reinterpret_cast<const void*>(final_batched_kernel<float, true>),
                         reinterpret_cast<const void*>(final_batched_kernel<__half, false>),
                         reinterpret_cast<const void*>(final_batched_kernel<__half, true>),
                         reinterpret_cast<const void*>(final_batched_kernel<__nv_bfloat16, false>),
                         reinterpret_cast<const void*>(final_batched_kernel<__nv_bfloat16, true>)})
    allow_dynamic_smem(fn, sort_smem(cap));
}

void rescore_pools(Dtype dtype, bool l2, const void* shard, int nvec, const float* qpad, int k,
                   const CandidatePools& p, int cap, const std::int64_t* ids, int batch, Candidate* out,
                   cudaStream_t stream) {
  const std::uint32_t uk = static_cast<std::uint32_t>(k);
  with_storage_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (l2) {
      final_batched_kernel<T, true><<<batch, kSelThreads, sort_smem(cap), stream>>>(
          static_cast<const T*>(shard), nvec, qpad, p.qinfo, uk, p.pool, p.cap, p.count, p.overflow, ids, cap, out, k);
    } else {
      final_batched_kernel<T, false><<<batch, kSelThreads, sort_smem(cap), stream>>>(
          static_cast<const T*>(shard), nvec, qpad, p.qinfo, uk, p.pool, p.cap, p.count, p.overflow, ids, cap, out, k);
    }
  });
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
