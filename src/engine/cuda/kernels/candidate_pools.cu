// The batched path's candidate pools: approximate scores from the GEMM output of a chunk, a
// threshold per query from its k-th approximate score minus 2Δ, pools of the rows that reach it.

#include "engine/cuda/kernels/candidate_pools.hpp"

#include <cuda_fp16.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/launch.hpp"
#include "engine/cuda/kernels/select_primitives.cuh"

namespace shardtopk::cuda_detail {
namespace {

constexpr int kCollectThreads = 256;
/// Blocks of the masked collect kept resident per multiprocessor: its registers capped at the
/// unmasked one's 48 (5 × 256 threads), which the flood guard would otherwise raise. Under
/// Nsight Compute the cap alone did not change its time (58 registers, 4 blocks: 23.1 µs per
/// chunk of a batch of per-query scattered filters; 48: 23.0 µs, against 16.5 µs unmasked).
constexpr int kMaskedCollectBlocks = 5;

/// A block of the masked collect appends at most this many of a query's rows before it raises
/// the threshold from its own rows (collect_kernel's flood guard); guard_bounds_chunks says when
/// that bounds what chunks add between compactions.
__host__ __device__ __forceinline__ std::uint32_t flood_budget(std::uint32_t k) { return k > 256u ? 2u * k : 512u; }

__device__ __forceinline__ float out_to_float(float g) { return g; }
__device__ __forceinline__ float out_to_float(__half g) { return __half2float(g); }

/// The collect kernel's shape per GEMM output type: kVec consecutive values per 16-byte load, L
/// loads per thread (L = 4: float 16 values, __half 32).
template <typename OutT, int L = 4>
struct CollectShape {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(OutT));
  static constexpr int kPerThread = L * kVec;
  static constexpr int kPerBlock = kCollectThreads * kPerThread;
  static_assert(kPerThread <= 32, "one bit per value of a thread in a 32-bit mask");
};

/// Element e of 16 packed bytes of OutT values (e < 16 / sizeof(OutT)), as float.
template <typename OutT>
__device__ __forceinline__ float unpack(const uint4& r, int e);
template <>
__device__ __forceinline__ float unpack<float>(const uint4& r, int e) {
  const unsigned w = e == 0 ? r.x : e == 1 ? r.y : e == 2 ? r.z : r.w;
  return __uint_as_float(w);
}
template <>
__device__ __forceinline__ float unpack<__half>(const uint4& r, int e) {
  const unsigned w = e < 2 ? r.x : e < 4 ? r.y : e < 6 ? r.z : r.w;
  return __half2float(__ushort_as_half(static_cast<unsigned short>(e % 2 == 0 ? w & 0xffffu : w >> 16)));
}

/// 16-byte loads per thread of the unmasked collect. Two measured fastest on one H200 (Nsight
/// Compute, 1M x 768 float16, B = 1,024, k = 10, 162 launches: one 1,625 µs, two 1,426 µs, four
/// 1,727 µs, eight 2,038 µs; 10M rows, B = 256, k = 100: two 3,450 µs, four 3,713 µs): more,
/// shorter blocks keep more of the chunk's reads in flight. The masked collect keeps four (its
/// flood guard's budget is per block).
constexpr int kCollectLoads = 2;

/// The approximate ranking score of (query q, chunk-local row i) from the GEMM output, stored
/// as OutT: float, or __half for float16 shards (half the bytes written and read back per
/// chunk; its rounding is charged to Δ, docs/EXACTNESS.md).
template <typename OutT>
struct Approx {
  const OutT* S;             // [batch, ld] dot(q̂ · scale, row)
  std::int64_t ld;
  const float* row_sq;       // [rows] ‖x‖² (l2) or nullptr
  std::int64_t row0;         // shard row (or position in `order`) of chunk index 0
  const std::int32_t* order; // gathered chunks: the shard row of each position; nullptr: row0 + i
  bool l2;
  const std::int64_t* spans; // with order: [batch, 2] each query's positions (ChunkScores::spans), or nullptr
  /// The shard row of chunk index i.
  __device__ __forceinline__ std::int64_t row(std::int64_t i) const { return order ? order[row0 + i] : row0 + i; }
  /// The approximate score from the raw GEMM value g = S[q, i].
  __device__ __forceinline__ float finish(float g, std::int64_t i, const QueryInfo& qi) const {
    if (!l2) return qi.approx(g, false, 0.0f);
    return finish_row(g, row(i), qi);  // the row read only here (a gathered chunk's is a load)
  }
  /// finish for a chunk index whose shard row r = row(i) the caller has already read.
  __device__ __forceinline__ float finish_row(float g, std::int64_t r, const QueryInfo& qi) const {
    return qi.approx(g, l2, l2 ? row_sq[r] : 0.0f);
  }
  __device__ __forceinline__ float operator()(int q, std::int64_t i, const QueryInfo& qi) const {
    return finish(out_to_float(S[q * ld + i]), i, qi);
  }
};

/// Whether query q's threshold is young for a chunk of rows_c rows: it comes from fewer than
/// 1 / kSeedGrowth of the chunk's rows (none at all: −inf), so that collecting the chunk with it
/// could let about k · rows_c / seen rows through; sample_seed_kernel raises it from the chunk
/// itself first. The bound of the first chunks' growth, per query.
constexpr std::uint64_t kSeedGrowth = 8;
__device__ __forceinline__ bool young(const std::uint32_t* seen, int q, int rows_c) {
  return static_cast<std::uint64_t>(seen[q]) * kSeedGrowth < static_cast<std::uint64_t>(rows_c);
}

/// Values of a first chunk each thread of seed_kernel holds in registers: a chunk of up to 8,192
/// rows (the batched path's first chunks) is read once, for the select's three reads of it and
/// the appends.
constexpr int kSeedHeld = 8;

/// The first chunk of an unfiltered-seeded search: each query's threshold from the chunk's own
/// k-th approximate score, and every row of the chunk that passes it into the query's pool; one
/// block per query of the chunk's GEMM (query qmap[j] in its row j; qmap null: query j).
/// kMasked: rows the query may not return count as −inf for its threshold and never enter its
/// pool (when fewer than k of the chunk's rows are allowed, the threshold is −inf and every
/// allowed row enters).
template <typename OutT, bool kMasked>
__global__ void __launch_bounds__(kSelThreads)
    seed_kernel(Approx<OutT> ap, int rows_c, const QueryInfo* __restrict__ qinfo, std::uint32_t k,
                PoolEntry* __restrict__ pool, std::int64_t pool_cap, std::uint32_t* __restrict__ pool_count,
                float* __restrict__ thr, std::uint32_t* __restrict__ overflow, const __grid_constant__ RowMasks masks,
                const std::int32_t* __restrict__ qmap) {
  const int sub = blockIdx.x;
  const int q = qmap ? qmap[sub] : sub;
  const QueryInfo qi = qinfo[q];
  const QueryFilter qf = kMasked ? masks.filter_of(q) : QueryFilter{};
  const auto got = [&](int i) {
    if constexpr (kMasked) {
      if (!masks.allows_with(qf, q, ap.row(i))) return -CUDART_INF_F;
    }
    return ap(sub, i, qi);
  };
  PoolEntry* list = pool + q * pool_cap;
  const std::uint32_t cap = static_cast<std::uint32_t>(pool_cap);
  if (!kMasked && rows_c <= kSelThreads * kSeedHeld) {
    // The chunk read once (value j of thread t: row t + j · kSelThreads), held for the select and
    // the appends (unmasked: beside the masks' evaluator the held values spill).
    float v[kSeedHeld];
#pragma unroll
    for (int j = 0; j < kSeedHeld; ++j) {
      const int i = threadIdx.x + j * kSelThreads;
      v[j] = i < rows_c ? got(i) : 0.0f;
    }
    const auto each = [&](auto&& f) {
#pragma unroll
      for (int j = 0; j < kSeedHeld; ++j)
        if (threadIdx.x + j * kSelThreads < rows_c) f(v[j]);
    };
    const std::uint32_t kth = static_cast<std::uint32_t>(rows_c) < k ? 0u : block_kth_key_offered<kSelThreads>(each, k);
    const float t = pool_threshold(kth, rows_c, k, qi.delta);
    unsigned takes = 0;
#pragma unroll
    for (int j = 0; j < kSeedHeld; ++j)
      if (threadIdx.x + j * kSelThreads < rows_c && v[j] >= t) takes |= 1u << j;
    const bool ok = block_append<kSelThreads, kSeedHeld>(
        takes,
        [&](int j) {
          return PoolEntry{v[j], static_cast<std::int32_t>(ap.row(threadIdx.x + j * kSelThreads))};
        },
        list, &pool_count[q], cap);
    if (!ok) atomicOr(&overflow[q], 1u);
    if (threadIdx.x == 0) thr[q] = t;
    return;
  }
  const std::uint32_t kth = block_kth_key(got, rows_c, k);
  const float t = pool_threshold(kth, rows_c, k, qi.delta);
  const int end = (rows_c + 31) / 32 * 32;
  bool ok = true;
  for (int i = threadIdx.x; i < end; i += blockDim.x) {  // whole warps: i < end for all lanes or none
    float s = 0.0f;
    bool take = false;
    if (i < rows_c) {
      s = got(i);
      take = s >= t && (!kMasked || s != -CUDART_INF_F);
    }
    ok &= warp_append(take, PoolEntry{s, static_cast<std::int32_t>(ap.row(i))}, list, &pool_count[q], cap);
  }
  if (!ok) atomicOr(&overflow[q], 1u);
  if (threadIdx.x == 0) thr[q] = t;
}

/// Rows a young query's threshold is taken from, at most, per chunk (seeded per query): every
/// stride-th row of the chunk (with spans: of the query's interval in it), stride =
/// ceil(rows / kSeedSample). The k-th of a subset of the
/// rows a query may return is at most their k-th, so the threshold stays sound (the argument of
/// seed_kernel); it lets about k · stride of the chunk's allowed rows through, within the pool.
constexpr int kSeedSample = 32768;

/// Samples a thread of sample_seed_kernel reads at once: each load it issues (the row's place in
/// a column order, the GEMM value, the row's attribute value and live word) for all of them
/// before it uses any, so that a block keeps kSeedLoads × kSelThreads of them in flight.
constexpr int kSeedLoads = 4;

/// Per-query seeding (ChunkQueries::seeded_per_query): for each young query of the chunk's GEMM
/// (young()), the threshold becomes the larger of its own and the k-th approximate score of a
/// strided sample of the chunk's rows it may return, minus 2Δ; seen[q] counts those sampled rows.
/// Nothing enters the pool here: collect_kernel, launched next, collects the chunk for every
/// query. A block per query, in a grid of at most one block per multiprocessor (the shared
/// memory allows no more) that walks the chunk's n queries: a chunk where no query is young costs
/// one wave of blocks that read seen[] and leave. A sample of at most kSeedSample rows keeps a block's select short
/// however long a merged chunk is (a select over every row of a chunk of 10⁵–10⁶ rows, in one
/// block per query, took 90 % of a batch of per-query clustered filters). The sample's scores
/// are read (and each sampled row's filter evaluated) once, into dynamic shared memory
/// (kSeedSample floats), for the select's three reads of them: evaluating the filter in every pass made
/// a young query's seeding take up to 363 µs of a batch of per-query scattered filters (Nsight
/// Compute). The reads go kSeedLoads samples per thread at a time. A chunk of a column order
/// with its spans is sampled within the query's own interval, whose rows all pass its range:
/// the row's value is not read. One sample at a time, with the value read through the chain
/// position → row → attribute value, a young query's seeding took 84 µs of a 113 µs gathered
/// product (Nsight Compute, one H100, 10M rows, 32,768 samples).
template <typename OutT, bool kMasked>
__global__ void __launch_bounds__(kSelThreads)
    sample_seed_kernel(Approx<OutT> ap, int rows_c, int n, const QueryInfo* __restrict__ qinfo, std::uint32_t k,
                       float* __restrict__ thr, const __grid_constant__ RowMasks masks, const std::int32_t* __restrict__ qmap,
                       std::uint32_t* __restrict__ seen) {
  extern __shared__ float s_sample[];  // [ns] the sampled rows' approximate scores; −inf: not allowed
  __shared__ std::uint32_t allowed;    // sampled rows the query may return
  for (int sub = blockIdx.x; sub < n; sub += gridDim.x) {
    const int q = qmap ? qmap[sub] : sub;
    if (!young(seen, q, rows_c)) continue;  // one address: the whole block continues
    const QueryInfo qi = qinfo[q];
    const QueryFilter qf = kMasked ? masks.filter_of(q) : QueryFilter{};
    const bool ranged = qf.kind == QueryFilter::kIntRange || qf.kind == QueryFilter::kRealRange;
    // The sampled part of the chunk, [a, a + len): with spans, the query's own interval in it
    // (each of its rows passes the range: only the live bit is read).
    std::int64_t a = 0, len = rows_c;
    if (kMasked && ap.spans) {
      const std::int64_t lo = ap.spans[2 * q] - ap.row0, hi = ap.spans[2 * q + 1] - ap.row0;
      a = lo < 0 ? 0 : lo < rows_c ? lo : rows_c;
      len = (hi < 0 ? 0 : hi < rows_c ? hi : rows_c) - a;
      if (len < 0) len = 0;
    }
    const std::int64_t stride = len > kSeedSample ? (len + kSeedSample - 1) / kSeedSample : 1;
    const int ns = static_cast<int>((len + stride - 1) / stride);
    const OutT* S = ap.S + static_cast<std::int64_t>(sub) * ap.ld;
    if (threadIdx.x == 0) allowed = 0;
    __syncthreads();
    std::uint32_t mine = 0;  // this thread's allowed samples
    for (int base = threadIdx.x; base < ns; base += kSelThreads * kSeedLoads) {
      std::int64_t row[kSeedLoads];
      float g[kSeedLoads];
      bool ok[kSeedLoads];
#pragma unroll
      for (int u = 0; u < kSeedLoads; ++u) {  // indices past the sample repeat its last row
        const std::int64_t i = a + static_cast<std::int64_t>(min(base + u * kSelThreads, ns - 1)) * stride;
        row[u] = ap.row(i);
        g[u] = out_to_float(S[i]);
      }
      if constexpr (kMasked) {
        if (ap.spans) {
#pragma unroll
          for (int u = 0; u < kSeedLoads; ++u) ok[u] = masks.alive(row[u]);
        } else if (ranged) {
          std::uint64_t bits[kSeedLoads];
#pragma unroll
          for (int u = 0; u < kSeedLoads; ++u) {
            bits[u] = masks.range_value(qf, row[u]);
            ok[u] = masks.alive(row[u]);
          }
#pragma unroll
          for (int u = 0; u < kSeedLoads; ++u) ok[u] = ok[u] && RowMasks::passes_range(qf, bits[u]);
        } else {
#pragma unroll
          for (int u = 0; u < kSeedLoads; ++u) ok[u] = masks.allows_with(qf, q, row[u]);
        }
      } else {
#pragma unroll
        for (int u = 0; u < kSeedLoads; ++u) ok[u] = true;
      }
#pragma unroll
      for (int u = 0; u < kSeedLoads; ++u) {
        const float s = ap.finish_row(g[u], row[u], qi);
        const int j = base + u * kSelThreads;
        if (j < ns) {
          s_sample[j] = ok[u] ? s : -CUDART_INF_F;
          mine += ok[u] ? 1u : 0u;
        }
      }
    }
    mine = __reduce_add_sync(kFullMask, mine);
    if ((threadIdx.x & 31) == 0 && mine != 0u) atomicAdd(&allowed, mine);
    __syncthreads();
    const std::uint32_t kth = block_kth_key([&](int j) { return s_sample[j]; }, ns, k);
    const float t = fmaxf(pool_threshold(kth, ns, k, qi.delta), thr[q]);
    __syncthreads();  // every thread read thr[q] and seen[q] before they change
    if (threadIdx.x == 0) {
      thr[q] = t;
      seen[q] += allowed;
    }
    __syncthreads();  // s_sample and `allowed` are rewritten for the next query
  }
}

/// Dynamic shared memory of sample_seed_kernel: kSeedSample floats.
constexpr std::size_t kSeedSmem = sizeof(float) * kSeedSample;

/// Later chunks: every (query, row) whose approximate score reaches the query's threshold
/// enters the pool. Grid: (ceil(rows_c / CollectShape<OutT>::kPerBlock), batch). A warp reads 512
/// contiguous bytes per load (16-byte loads when the row stride allows: thread t of the block
/// takes values V (j · kCollectThreads + t) … + V − 1, V = CollectShape::kVec, j < 4), and makes
/// at most ONE pool atomic for all its passing values (a warp scan of the per-thread counts): a
/// global atomic per passing value made the first chunks latency bound.
/// kMasked: a (query, row) the masks rule out never enters the pool. Row j of the GEMM output is
/// query qmap[j] (qmap null: query j). A query whose threshold is still −inf takes every row it
/// may return.
/// `masks` is a `__grid_constant__` parameter in the kernels here: the filter evaluator, which is
/// not inlined, takes its address, and an ordinary parameter would be copied to every thread's
/// stack first (local-memory traffic in every block of the masked collect, Nsight Compute).
template <typename OutT, bool kMasked, int L>
__global__ void __launch_bounds__(kCollectThreads, kMasked ? kMaskedCollectBlocks : 0)
    collect_kernel(Approx<OutT> ap, int rows_c, const QueryInfo* __restrict__ qinfo, const float* __restrict__ thr,
                  std::uint32_t k, PoolEntry* __restrict__ pool, std::int64_t pool_cap,
                  std::uint32_t* __restrict__ pool_count, std::uint32_t* __restrict__ overflow, const __grid_constant__ RowMasks masks,
                  const std::int32_t* __restrict__ qmap) {
  using Shape = CollectShape<OutT, L>;
  constexpr int V = Shape::kVec, P = Shape::kPerThread;
  const int sub = blockIdx.y;
  const int q = qmap ? qmap[sub] : sub;
  const float t = thr[q];
  // The query's filter, loaded beside the scores (kMasked): a row that reaches the threshold is
  // then decided by one more load.
  const QueryFilter qf = kMasked ? masks.filter_of(q) : QueryFilter{};
  const int lane = threadIdx.x & 31;
  const int base = blockIdx.x * Shape::kPerBlock;
  const OutT* src = ap.S + sub * ap.ld;
  // Value m of this thread: V consecutive values per 16-byte load, loads kCollectThreads apart.
  auto index = [&](int m) { return base + V * ((m / V) * kCollectThreads + static_cast<int>(threadIdx.x)) + (m % V); };
  // The loaded values stay packed (16 bytes per load) and are unpacked where compared and where
  // written to the pool (the same float each time).
  uint4 raw[L];
  const bool vec = ap.ld % V == 0;
#pragma unroll
  for (int j = 0; j < L; ++j) {
    const int i = index(V * j);
    if (vec && i + V <= rows_c) {
      raw[j] = __ldg(reinterpret_cast<const uint4*>(src + i));
    } else {
      OutT part[V];
#pragma unroll
      for (int e = 0; e < V; ++e) part[e] = i + e < rows_c ? src[i + e] : OutT(0.0f);
      memcpy(&raw[j], part, sizeof(raw[j]));
    }
  }
  const QueryInfo qi = qinfo[q];
  // The approximate score of value m (raw[m / V], element m % V).
  auto score_at = [&](int m) { return ap.finish(unpack<OutT>(raw[m / V], m % V), index(m), qi); };
  unsigned takes = 0;  // bit m: value m passes
#pragma unroll
  for (int m = 0; m < P; ++m)
    if (index(m) < rows_c && score_at(m) >= t) takes |= 1u << m;
  if constexpr (kMasked) {
    // Few values reach the threshold: ask the masks (a filter may evaluate its program on the
    // row) about those only, from one call site. The P values are not kept across it (the
    // passing ones are read again below, from L1): holding them beside the evaluator's
    // registers took the kernel from 48 to 80 registers and halved its occupancy.
    for (unsigned left = takes; left != 0u; left &= left - 1u) {
      const int m = __ffs(static_cast<int>(left)) - 1;
      if (!masks.allows_with(qf, q, ap.row(index(m)))) takes &= ~(1u << m);
    }
    // The flood guard (no thread has left: it has barriers). A block holding more than
    // flood_budget(k) allowed rows that reach the threshold appends only those within 2Δ of the
    // k-th of them: at least k rows the query may return score that high, so the argument of
    // seed_kernel holds for the block's own k-th. A threshold taken from few of a query's rows
    // then meets a chunk dense with them (a filter whose rows crowd the end of the shard) without
    // flooding the pool, and no seeding launch is needed once every query has a threshold. One
    // barrier counts the threads holding such rows; only where they could hold more than the
    // budget are the rows counted.
    if (static_cast<std::uint32_t>(__syncthreads_count(takes != 0u)) * P > flood_budget(k)) {
      __shared__ std::uint32_t s_taken;
      if (threadIdx.x == 0) s_taken = 0;
      __syncthreads();
      const unsigned warp_taken = __reduce_add_sync(kFullMask, static_cast<unsigned>(__popc(takes)));
      if (lane == 0 && warp_taken > 0u) atomicAdd(&s_taken, warp_taken);
      __syncthreads();
      const std::uint32_t taken = s_taken;
      if (taken > flood_budget(k)) {  // block-uniform
        const auto score_of = [&](int m) {
          const int i = index(m);
          return ap.finish(out_to_float(src[i]), i, qi);
        };
        const std::uint32_t kth = block_kth_key_offered<kCollectThreads>(
            [&](auto&& offer) {
              for (unsigned left = takes; left != 0u; left &= left - 1u)
                offer(score_of(__ffs(static_cast<int>(left)) - 1));
            },
            k);
        const float tb = pool_threshold(kth, static_cast<int>(taken), k, qi.delta);
        for (unsigned left = takes; left != 0u; left &= left - 1u) {
          const int m = __ffs(static_cast<int>(left)) - 1;
          if (score_of(m) < tb) takes &= ~(1u << m);
        }
      }
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
      const float s = kMasked ? ap.finish(out_to_float(src[i]), i, qi) : score_at(m);
      if (at < static_cast<std::uint32_t>(pool_cap)) list[at] = PoolEntry{s, static_cast<std::int32_t>(ap.row(i))};
      else ok = false;
      ++at;
    }
  }
  if (!__all_sync(kFullMask, ok) && lane == 0) atomicOr(&overflow[q], 1u);
}

/// Pool entries each thread of compact_kernel holds in registers: a pool of up to kSelThreads ×
/// kPoolHeld entries is read once.
constexpr int kPoolHeld = 4;

/// Raises a query's threshold from its pool's k-th approximate score and drops the entries below
/// it (stable, in place), when the pool holds more than `trigger` entries. Block per query; a
/// pool of up to kSelThreads × kPoolHeld entries is held in registers (thread t: entries
/// kPoolHeld · t …, so that one block scan of the threads' counts keeps the order), a longer one
/// read again per pass and compacted a tile of kSelThreads entries at a time.
__global__ void __launch_bounds__(kSelThreads)
    compact_kernel(const QueryInfo* __restrict__ qinfo, std::uint32_t k, PoolEntry* __restrict__ pool,
                   std::int64_t pool_cap, std::uint32_t* __restrict__ pool_count, float* __restrict__ thr,
                   std::uint32_t trigger) {
  const int q = blockIdx.x;
  const int n = static_cast<int>(min(pool_count[q], static_cast<std::uint32_t>(pool_cap)));
  if (n <= static_cast<int>(trigger)) return;
  PoolEntry* list = pool + q * pool_cap;
  using Scan = cub::BlockScan<int, kSelThreads>;
  __shared__ typename Scan::TempStorage tmp;
  if (n <= kSelThreads * kPoolHeld) {
    const int i0 = static_cast<int>(threadIdx.x) * kPoolHeld;
    PoolEntry e[kPoolHeld];
#pragma unroll
    for (int j = 0; j < kPoolHeld; ++j) e[j] = i0 + j < n ? list[i0 + j] : PoolEntry{0.0f, 0};
    const auto each = [&](auto&& f) {
#pragma unroll
      for (int j = 0; j < kPoolHeld; ++j)
        if (i0 + j < n) f(e[j].s);
    };
    const std::uint32_t kth = static_cast<std::uint32_t>(n) < k ? 0u : block_kth_key_offered<kSelThreads>(each, k);
    const float t = fmaxf(thr[q], pool_threshold(kth, n, k, qinfo[q].delta));
    unsigned keep = 0;
#pragma unroll
    for (int j = 0; j < kPoolHeld; ++j)
      if (i0 + j < n && e[j].s >= t) keep |= 1u << j;
    int pos = 0, kept = 0;
    Scan(tmp).ExclusiveSum(__popc(keep), pos, kept);  // its barrier: every entry was read
#pragma unroll
    for (int j = 0; j < kPoolHeld; ++j)
      if (keep & (1u << j)) list[pos++] = e[j];
    if (threadIdx.x == 0) {
      pool_count[q] = static_cast<std::uint32_t>(kept);
      thr[q] = t;
    }
    return;
  }
  const auto got = [&](int i) { return list[i].s; };
  const std::uint32_t kth = block_kth_key(got, n, k);
  const float t = fmaxf(thr[q], pool_threshold(kth, n, k, qinfo[q].delta));
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
  return Approx<OutT>{static_cast<const OutT*>(c.S), c.ld, c.row_sq, c.row0, c.order, c.l2, c.spans};
}

template <typename OutT>
void collect_chunk_t(const ChunkScores& c, int n, std::uint32_t k, const CandidatePools& p, const ChunkQueries& cq,
                     cudaStream_t stream) {
  if (cq.masks) {
    constexpr int per_block = CollectShape<OutT>::kPerBlock;
    const dim3 grid(static_cast<unsigned>((c.rows + per_block - 1) / per_block), static_cast<unsigned>(n));
    collect_kernel<OutT, true, 4><<<grid, kCollectThreads, 0, stream>>>(approx_of<OutT>(c), c.rows, p.qinfo, p.thr, k,
                                                                      p.pool, p.cap, p.count, p.overflow, *cq.masks,
                                                                      cq.qmap);
    return;
  }
  constexpr int L = kCollectLoads;
  constexpr int per_block = CollectShape<OutT, L>::kPerBlock;
  const dim3 grid(static_cast<unsigned>((c.rows + per_block - 1) / per_block), static_cast<unsigned>(n));
  collect_kernel<OutT, false, L><<<grid, kCollectThreads, 0, stream>>>(approx_of<OutT>(c), c.rows, p.qinfo, p.thr, k,
                                                                     p.pool, p.cap, p.count, p.overflow, RowMasks{},
                                                                     cq.qmap);
}

template <typename OutT>
void seed_chunk_t(const ChunkScores& c, int n, std::uint32_t k, const CandidatePools& p, const ChunkQueries& cq,
                  bool first, cudaStream_t stream) {
  if (!first) {  // per-query seeding: thresholds from samples, collect_chunk next
    const int grid = std::min(n, prepare_candidate_pools());  // launchers may be called without an engine
    if (cq.masks) {
      sample_seed_kernel<OutT, true><<<grid, kSelThreads, kSeedSmem, stream>>>(approx_of<OutT>(c), c.rows, n, p.qinfo, k,
                                                                               p.thr, *cq.masks, cq.qmap, p.seen);
    } else {
      sample_seed_kernel<OutT, false><<<grid, kSelThreads, kSeedSmem, stream>>>(approx_of<OutT>(c), c.rows, n, p.qinfo, k,
                                                                                p.thr, RowMasks{}, cq.qmap, p.seen);
    }
    return;
  }
  if (cq.masks) {
    seed_kernel<OutT, true><<<n, kSelThreads, 0, stream>>>(approx_of<OutT>(c), c.rows, p.qinfo, k, p.pool, p.cap,
                                                           p.count, p.thr, p.overflow, *cq.masks, cq.qmap);
  } else {
    seed_kernel<OutT, false><<<n, kSelThreads, 0, stream>>>(approx_of<OutT>(c), c.rows, p.qinfo, k, p.pool, p.cap,
                                                            p.count, p.thr, p.overflow, RowMasks{}, cq.qmap);
  }
}

__global__ void init_thresholds_kernel(float* __restrict__ thr, std::uint32_t* __restrict__ seen, int batch) {
  const int q = blockIdx.x * blockDim.x + threadIdx.x;
  if (q < batch) {
    thr[q] = -CUDART_INF_F;
    seen[q] = 0;
  }
}

}  // namespace

void seed_chunk(const ChunkScores& c, int n, int k, const CandidatePools& p, const ChunkQueries& cq, bool first,
                cudaStream_t stream) {
  const std::uint32_t uk = static_cast<std::uint32_t>(k);
  if (c.half) seed_chunk_t<__half>(c, n, uk, p, cq, first, stream);
  else seed_chunk_t<float>(c, n, uk, p, cq, first, stream);
  CHECK_CUDA_LAUNCH();
}

void collect_chunk(const ChunkScores& c, int n, int k, const CandidatePools& p, const ChunkQueries& cq,
                   cudaStream_t stream) {
  const std::uint32_t uk = static_cast<std::uint32_t>(k);
  if (c.half) collect_chunk_t<__half>(c, n, uk, p, cq, stream);
  else collect_chunk_t<float>(c, n, uk, p, cq, stream);
  CHECK_CUDA_LAUNCH();
}

bool guard_bounds_chunks(int rows, bool half, int k, int chunks, std::int64_t pool_cap) {
  const std::int64_t block = half ? CollectShape<__half>::kPerBlock : CollectShape<float>::kPerBlock;
  const std::int64_t blocks = (static_cast<std::int64_t>(rows) + block - 1) / block;
  return blocks * flood_budget(static_cast<std::uint32_t>(k)) * chunks <= pool_cap / 4 * 3;
}

int prepare_candidate_pools() {
  static std::mutex mutex;
  static std::map<int, int> grids;  // device -> resident seeding blocks
  int device = -1;
  CHECK_CUDA(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  int& grid = grids[device];
  if (grid > 0) return grid;
  for (const void* fn : {reinterpret_cast<const void*>(sample_seed_kernel<float, false>),
                         reinterpret_cast<const void*>(sample_seed_kernel<float, true>),
                         reinterpret_cast<const void*>(sample_seed_kernel<__half, false>),
                         reinterpret_cast<const void*>(sample_seed_kernel<__half, true>)})
    allow_dynamic_smem(fn, kSeedSmem);
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  grid = persistent_grid(reinterpret_cast<const void*>(sample_seed_kernel<__half, true>), kSelThreads, kSeedSmem, sms);
  return grid;
}

void init_thresholds(const CandidatePools& p, int batch, cudaStream_t stream) {
  init_thresholds_kernel<<<(batch + 255) / 256, 256, 0, stream>>>(p.thr, p.seen, batch);
  CHECK_CUDA_LAUNCH();
}

void compact_pools(int batch, int k, std::uint32_t trigger, const CandidatePools& p, cudaStream_t stream) {
  compact_kernel<<<batch, kSelThreads, 0, stream>>>(p.qinfo, static_cast<std::uint32_t>(k), p.pool, p.cap, p.count,
                                                    p.thr, trigger);
  CHECK_CUDA_LAUNCH();
}

}  // namespace shardtopk::cuda_detail
