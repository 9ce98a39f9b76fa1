// CUDA engine: a resident shard on one GPU, scored and reduced to a local top-k on the device.
//
// Memory (DESIGN.md invariant 5). Everything lives in ONE device allocation (the "arena") made
// by the constructor, laid out by make_plan(), which cuda_engine_device_bytes() also calls, so
// `shardtopk plan` predicts resident_bytes() exactly. A search allocates nothing.
//
//   shard   [rows, dim]                     storage dtype (float / __half / __nv_bfloat16)
//   ids     [rows]                          int64 global ids
//   queries [batch_max, dim]                float32            (query_buffer())
//   local   [batch_max, k_max]              Candidate          (local_buffer())
//   gathered[world_size, batch_max, k_max]  Candidate          (gathered_buffer())
//   merged  [batch_max, k_max]              Candidate          (merged_buffer())
//   status  2 × uint64                      query / upload validation flags
//   scores  [batch_max, C]                  float32 ranking scores of one chunk of C rows
//   list_a, list_b [batch_max, C + k_max]   Candidate, ping-pong buffers of the selection tree
//   acc0, acc1 [batch_max, 2, k_max]        Candidate, running top-k across chunks (only when
//                                           the shard has more than C rows)
// C ("chunk rows") is the largest multiple of kTileMax that keeps scores + lists within
// kWorkspaceBudget (at least kTileMax, at most the shard rounded up), so the workspace stays
// bounded whatever the shard size; big shards are processed in several chunks.
//
// Scoring (DESIGN.md invariant 3). The score of a (query, row) pair is computed by exactly the
// arithmetic of the CPU engine (src/engine/cpu/cpu_engine.cpp): lane j of 8 accumulates the dimensions
// d ≡ j (mod 8) in increasing d with fmaf (inner product: fma(q, x, acc); l2: diff = q − x,
// fma(diff, diff, acc)), then the lanes are added by the fixed tree
// ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)). The order depends only on D, never on the batch, the
// chunk or the tile, so scores are bit-identical across batch composition, shard boundaries and
// rank counts, and bit-identical to the CPU engine's. l2 is ranked as −Σ(q−x)².
//
// Selection (exact, any k ≤ k_max). Per chunk:
//   1. score_kernel writes scores [batch, chunk_rows].
//   2. tile_sort_kernel: one block per (query, tile of T rows) sorts (score, global id) pairs in
//      shared memory with a bitonic network under better() and keeps the best min(k, T):
//      T = clamp(next_pow2(2k), 2048, 8192), so each tile shrinks at least 2× when k ≤ 4096.
//   3. merge_lists_kernel merges groups of kMergeFanIn sorted lists into one (truncated to k)
//      until one list of exactly k per query remains. Every element finds its output rank by
//      binary searches in the other lists of its group (ties between lists go to the earlier
//      list, so equal padding candidates get distinct ranks): no shared state, any list length.
//   4. With several chunks, the chunk's list is merged with the running top-k (acc buffers).
// merge() is the same merge kernel with one group of `parts` lists.
// k is limited only by k_max (memory): k > T is handled by the tree growing lists up to k.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "common/cuda_check.cuh"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/ordering.hpp"

namespace shardtopk {
namespace {

using cuda_detail::DeviceGuard;

// ---------------------------------------------------------------- tuning constants

constexpr int kLanes = 8;               // reduction lanes per pair (must equal the CPU engine's)
constexpr int kScoreRows = 128;         // rows per scoring block (one thread per row)
constexpr int kScoreDk = 32;            // dimensions staged in shared memory per step (multiple of kLanes)
constexpr int kTileMin = 2048;          // smallest sort tile (rows)
constexpr int kTileMax = 8192;          // largest sort tile: 8192 × 12 B = 96 KiB shared memory
constexpr int kSortThreads = 1024;
constexpr int kMergeFanIn = 4;          // lists merged per group in the selection tree
constexpr int kMergeThreads = 256;
constexpr int kMergeElemsPerBlock = 2048;
constexpr int kPrepThreads = 256;
constexpr std::uint64_t kWorkspaceBudget = 256ull << 20;  // scores + selection lists
constexpr std::uint64_t kAlign = 256;
constexpr unsigned long long kStatusOk = ~0ull;

static_assert(kScoreDk % kLanes == 0, "a staged step must hold whole lane groups");
static_assert(sizeof(Candidate) == 16, "Candidate layout is shared by host and device");

// ---------------------------------------------------------------- planning (host only)

std::uint64_t round_up_u(std::uint64_t x, std::uint64_t m) { return (x + m - 1) / m * m; }

/// Multiplies sizes, refusing results that cannot be a real allocation (avoids silent wrap).
std::uint64_t mul_bytes(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > (std::uint64_t{1} << 62) / a)
    throw Error(detail::concat("CUDA engine: buffer size ", a, " x ", b, " bytes overflows"));
  return a * b;
}

int next_pow2(std::int64_t x) {
  int p = 1;
  while (p < x && p < (1 << 30)) p <<= 1;
  return p;
}

/// Sort tile for a given k: at least 2k rows (each tile halves its rows or better) within
/// [kTileMin, kTileMax]; a power of two that divides kTileMax, hence every chunk size.
int tile_size(int k) {
  return static_cast<int>(std::min<std::int64_t>(kTileMax, std::max<std::int64_t>(kTileMin, next_pow2(2LL * k))));
}

std::uint64_t storage_bytes(Dtype d) { return d == Dtype::kFloat32 ? 4 : 2; }

struct Plan {
  std::int64_t chunk_rows = 0;     // C; 0 for an empty shard (no scoring workspace)
  std::int64_t chunks = 0;
  std::int64_t list_capacity = 0;  // candidates per query in list_a / list_b
  std::uint64_t off_shard = 0, off_ids = 0, off_queries = 0, off_local = 0, off_gathered = 0, off_merged = 0,
                off_status = 0, off_out_ids = 0, off_out_scores = 0, off_scores = 0, off_list_a = 0, off_list_b = 0, off_acc0 = 0, off_acc1 = 0;
  std::uint64_t shard_bytes = 0;   // shard + ids
  std::uint64_t total = 0;         // the arena
};

void check_shape(std::int64_t rows, std::int64_t dim, const EngineLimits& lim) {
  SHARDTOPK_EXPECTS(rows >= 0, "CUDA engine: shard rows must be >= 0 (got ", rows, ")");
  SHARDTOPK_EXPECTS(dim >= 1, "CUDA engine: dimension must be >= 1 (got ", dim, ")");
  SHARDTOPK_EXPECTS(lim.batch_max >= 1, "CUDA engine: batch_max must be >= 1 (got ", lim.batch_max, ")");
  SHARDTOPK_EXPECTS(lim.batch_max <= (1 << 24), "CUDA engine: batch_max must be <= ", (1 << 24), " (got ",
                    lim.batch_max, ")");
  SHARDTOPK_EXPECTS(lim.k_max >= 1, "CUDA engine: k_max must be >= 1 (got ", lim.k_max, ")");
  SHARDTOPK_EXPECTS(lim.world_size >= 1, "CUDA engine: world_size must be >= 1 (got ", lim.world_size, ")");
}

/// The arena layout for a shard; the constructor allocates exactly `total` bytes.
///
/// List capacity C + k_max suffices for every level of the selection tree: level 0 holds
/// ceil(C/T)·min(k,T) ≤ C candidates per query (T divides C), and level i holds
/// M_i·L_i with M_i = ceil(M_0/F^i) ≤ M_0/F^i + 1 lists of L_i = min(L_0·F^i, k) candidates,
/// so M_i·L_i ≤ M_0·L_0 + k ≤ C + k_max.
Plan make_plan(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& lim) {
  check_shape(rows, dim, lim);
  const std::uint64_t bmax = static_cast<std::uint64_t>(lim.batch_max);
  const std::uint64_t kmax = static_cast<std::uint64_t>(lim.k_max);
  const std::uint64_t cand = sizeof(Candidate);
  Plan p;
  if (rows > 0) {
    const std::uint64_t rows_up = round_up_u(static_cast<std::uint64_t>(rows), kTileMax);
    // bytes per chunk row: scores (4) + two lists (2 × 16), per query; fixed: the lists' + k_max.
    const std::uint64_t per_row = mul_bytes(bmax, 4 + 2 * cand);
    const std::uint64_t fixed = mul_bytes(mul_bytes(bmax, 2 * cand), kmax);
    std::uint64_t c = kWorkspaceBudget > fixed ? (kWorkspaceBudget - fixed) / per_row : 0;
    c = c / kTileMax * kTileMax;
    c = std::min<std::uint64_t>(std::max<std::uint64_t>(c, kTileMax), rows_up);
    p.chunk_rows = static_cast<std::int64_t>(c);
    p.chunks = (rows + p.chunk_rows - 1) / p.chunk_rows;
    p.list_capacity = p.chunk_rows + lim.k_max;
  }
  std::uint64_t off = 0;
  auto take = [&off](std::uint64_t bytes) {
    const std::uint64_t at = off;
    off = round_up_u(off + bytes, kAlign);
    return at;
  };
  const std::uint64_t shard = mul_bytes(mul_bytes(static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(dim)),
                                        storage_bytes(dtype));
  const std::uint64_t ids = mul_bytes(static_cast<std::uint64_t>(rows), 8);
  const std::uint64_t bk = mul_bytes(mul_bytes(bmax, kmax), cand);
  p.off_shard = take(shard);
  p.off_ids = take(ids);
  p.shard_bytes = off;
  p.off_queries = take(mul_bytes(mul_bytes(bmax, static_cast<std::uint64_t>(dim)), 4));
  p.off_local = take(bk);
  p.off_gathered = take(mul_bytes(bk, static_cast<std::uint64_t>(lim.world_size)));
  p.off_merged = take(bk);
  p.off_status = take(2 * sizeof(unsigned long long));
  p.off_out_ids = take(mul_bytes(mul_bytes(bmax, kmax), 8));
  p.off_out_scores = take(mul_bytes(mul_bytes(bmax, kmax), 4));
  if (rows > 0) {
    p.off_scores = take(mul_bytes(mul_bytes(bmax, static_cast<std::uint64_t>(p.chunk_rows)), 4));
    const std::uint64_t list = mul_bytes(mul_bytes(bmax, static_cast<std::uint64_t>(p.list_capacity)), cand);
    p.off_list_a = take(list);
    p.off_list_b = take(list);
    if (p.chunks > 1) {
      p.off_acc0 = take(mul_bytes(bk, 2));
      p.off_acc1 = take(mul_bytes(bk, 2));
    }
  }
  p.total = off;
  return p;
}

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::kFloat32: return "float32";
    case Dtype::kFloat16: return "float16";
    case Dtype::kBFloat16: return "bfloat16";
  }
  return "?";
}

// ---------------------------------------------------------------- device helpers

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

__device__ __forceinline__ void from_float(float x, __half* out) { *out = __float2half_rn(x); }
__device__ __forceinline__ void from_float(float x, __nv_bfloat16* out) { *out = __float2bfloat16_rn(x); }

/// One accumulation step of one lane. Explicit _rn intrinsics: the compiler may not contract or
/// reorder them, so every build computes the same bits (and the same as the CPU engine's FMA).
template <bool kL2>
__device__ __forceinline__ float step(float q, float x, float acc) {
  if (kL2) {
    const float diff = __fsub_rn(q, x);
    return __fmaf_rn(diff, diff, acc);
  }
  return __fmaf_rn(q, x, acc);
}

/// The one lane tree (the CPU engine's hsum8). Changing it changes every score.
__device__ __forceinline__ float lane_sum(const float* l) {
  return __fadd_rn(__fadd_rn(__fadd_rn(l[0], l[4]), __fadd_rn(l[2], l[6])),
                   __fadd_rn(__fadd_rn(l[1], l[5]), __fadd_rn(l[3], l[7])));
}

// ---------------------------------------------------------------- kernels

/// Converts the float32 staging buffer src [n] into storage dst [n] (float16/bfloat16 round to
/// nearest even) and records the first element that overflowed to ±inf in *status (flat index
/// `first + i`). Stream: the engine's. Grid-stride, any grid.
template <typename T>
__global__ void convert_kernel(const float* __restrict__ src, T* __restrict__ dst, std::int64_t n,
                               std::int64_t first, unsigned long long* status) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    T v;
    from_float(src[i], &v);
    dst[i] = v;
    if (!isfinite(to_float(v))) atomicMin(status, static_cast<unsigned long long>(first + i));
  }
}

/// Fills out [n] with pad_candidate(). Grid-stride.
__global__ void fill_pad_kernel(Candidate* __restrict__ out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = pad_candidate();
}

/// Status key of a rejected query: the smallest key wins (atomicMin), i.e. the first query, and
/// within it the first column. reason 0: non-finite value at `col`; 1: zero norm.
__device__ __forceinline__ unsigned long long query_status(std::int64_t query, std::int64_t col, int reason) {
  return (static_cast<unsigned long long>(query) << 40) | (static_cast<unsigned long long>(col) << 1) |
         static_cast<unsigned long long>(reason);
}

/// Validates (all metrics) and, for cosine, L2-normalises queries [batch, dim] in place.
/// Block per query (grid = batch), kPrepThreads threads. The norm is the arithmetic of
/// normalize_rows() (src/engine/normalize.cpp): ss = Σ_d (double)x·(double)x sequentially in d order,
/// norm = sqrt(ss), x ← (float)((double)x · (1.0 / norm)), with _rn intrinsics so that nvcc
/// cannot contract the double multiply-add into an FMA the host does not use.
/// Stream: the engine's. A query with a non-finite value is left untouched.
__global__ void __launch_bounds__(kPrepThreads)
    prepare_queries_kernel(float* __restrict__ queries, std::int64_t dim, int normalize,
                           unsigned long long* status) {
  __shared__ int bad;      // written before the 2nd barrier only
  __shared__ double inv;   // written by thread 0 between the 2nd and 3rd barriers; 0: zero norm
  const std::int64_t q = blockIdx.x;
  float* x = queries + q * dim;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  for (std::int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
    if (!isfinite(x[d])) {
      atomicMin(status, query_status(q, d, 0));
      bad = 1;
    }
  }
  __syncthreads();
  if (bad || !normalize) return;
  if (threadIdx.x == 0) {
    double ss = 0.0;
    for (std::int64_t d = 0; d < dim; ++d) {
      const double v = static_cast<double>(x[d]);
      ss = __dadd_rn(ss, __dmul_rn(v, v));
    }
    const double norm = __dsqrt_rn(ss);
    if (!(norm > 0.0)) {
      atomicMin(status, query_status(q, 0, 1));
      inv = 0.0;
    } else {
      inv = __ddiv_rn(1.0, norm);
    }
  }
  __syncthreads();
  if (inv == 0.0) return;
  for (std::int64_t d = threadIdx.x; d < dim; d += blockDim.x)
    x[d] = __double2float_rn(__dmul_rn(static_cast<double>(x[d]), inv));
}

/// Ranking scores of queries [batch, dim] (float32) against rows [rows_c, dim] (storage T):
/// scores[q * score_qstride + r] (l2: negated squared distance).
///
/// Block: kScoreRows threads, one row each, for kQ queries; grid (flattened): row_blocks ×
/// ceil(batch / kQ). Each step stages kScoreDk dimensions of the block's rows (padded to avoid
/// bank conflicts) and of its queries in shared memory; each thread then advances its kQ × 8
/// lane accumulators in increasing d. Tuned for nothing yet beyond coalesced loads (a later
/// issue optimises); kQ ∈ {1, 4, 8} only trades idle threads against re-reading the shard.
/// Stream: the engine's.
template <typename T, bool kL2, int kQ>
__global__ void __launch_bounds__(kScoreRows)
    score_kernel(const T* __restrict__ rows, std::int64_t rows_c, std::int64_t dim, const float* __restrict__ queries,
                 int batch, float* __restrict__ scores, std::int64_t score_qstride, std::int64_t row_blocks) {
  __shared__ float xs[kScoreRows][kScoreDk + 1];
  __shared__ float qs[kQ][kScoreDk];
  const std::int64_t rb = blockIdx.x % row_blocks;
  const std::int64_t q0 = (blockIdx.x / row_blocks) * kQ;
  const std::int64_t r0 = rb * kScoreRows;
  const int t = threadIdx.x;

  float acc[kQ][kLanes];
#pragma unroll
  for (int i = 0; i < kQ; ++i)
#pragma unroll
    for (int j = 0; j < kLanes; ++j) acc[i][j] = 0.0f;

  for (std::int64_t d0 = 0; d0 < dim; d0 += kScoreDk) {
    const int len = static_cast<int>(min(static_cast<std::int64_t>(kScoreDk), dim - d0));
    // A warp reads kScoreDk consecutive elements of one row: coalesced.
    for (int i = t; i < kScoreRows * kScoreDk; i += kScoreRows) {
      const int r = i / kScoreDk, c = i % kScoreDk;
      float v = 0.0f;
      if (r0 + r < rows_c && c < len) v = to_float(rows[(r0 + r) * dim + d0 + c]);
      xs[r][c] = v;
    }
    for (int i = t; i < kQ * kScoreDk; i += kScoreRows) {
      const int qq = i / kScoreDk, c = i % kScoreDk;
      float v = 0.0f;
      if (q0 + qq < batch && c < len) v = queries[(q0 + qq) * dim + d0 + c];
      qs[qq][c] = v;
    }
    __syncthreads();
    // d0 is a multiple of kLanes, so column c of this step belongs to lane c % kLanes. Columns
    // past `len` are skipped, not added as zeros: same bits, since a lane is never −0.
    if (len == kScoreDk) {
#pragma unroll
      for (int c = 0; c < kScoreDk; ++c) {
        const float x = xs[t][c];
#pragma unroll
        for (int i = 0; i < kQ; ++i) acc[i][c % kLanes] = step<kL2>(qs[i][c], x, acc[i][c % kLanes]);
      }
    } else {
      for (int g = 0; g < len; g += kLanes) {
#pragma unroll
        for (int j = 0; j < kLanes; ++j) {
          if (g + j < len) {
            const float x = xs[t][g + j];
#pragma unroll
            for (int i = 0; i < kQ; ++i) acc[i][j] = step<kL2>(qs[i][g + j], x, acc[i][j]);
          }
        }
      }
    }
    __syncthreads();
  }

  const std::int64_t r = r0 + t;
  if (r < rows_c) {
#pragma unroll
    for (int i = 0; i < kQ; ++i) {
      if (q0 + i < batch) {
        const float s = lane_sum(acc[i]);
        scores[(q0 + i) * score_qstride + r] = kL2 ? -s : s;
      }
    }
  }
}

/// Sorts one tile of `tile` rows of one query best first by better() and writes the best
/// `keep` to out[q * out_qstride + t * out_lstride + i]. Rows past rows_c are padding.
/// ids are the chunk's global ids [rows_c]; scores [batch, score_qstride].
/// Block (flattened grid index = q * tiles + t): kSortThreads threads, dynamic shared memory
/// tile × 12 bytes. Bitonic network: correct for any strict weak order (0-1 principle), so
/// equal padding candidates are harmless. Stream: the engine's.
__global__ void __launch_bounds__(kSortThreads)
    tile_sort_kernel(const float* __restrict__ scores, std::int64_t score_qstride, const std::int64_t* __restrict__ ids,
                     std::int64_t rows_c, int tile, std::int64_t tiles, int keep, Candidate* __restrict__ out,
                     std::int64_t out_qstride, std::int64_t out_lstride) {
  extern __shared__ __align__(16) unsigned char smem[];
  std::int64_t* sid = reinterpret_cast<std::int64_t*>(smem);
  float* ss = reinterpret_cast<float*>(sid + tile);
  const std::int64_t t = blockIdx.x % tiles;
  const std::int64_t q = blockIdx.x / tiles;
  const std::int64_t base = t * tile;
  const float* sq = scores + q * score_qstride;
  for (int i = threadIdx.x; i < tile; i += blockDim.x) {
    const std::int64_t r = base + i;
    if (r < rows_c) {
      ss[i] = sq[r];
      sid[i] = ids[r];
    } else {
      const Candidate p = pad_candidate();
      ss[i] = p.score;
      sid[i] = p.id;
    }
  }
  __syncthreads();
  for (int size = 2; size <= tile; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < tile / 2; i += blockDim.x) {
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
  Candidate* o = out + q * out_qstride + t * out_lstride;
  for (int i = threadIdx.x; i < keep; i += blockDim.x) o[i] = Candidate{ss[i], sid[i]};
}

/// Number of elements of list [len] (sorted best first) that are better than c.
__device__ __forceinline__ int count_better(const Candidate* list, int len, const Candidate& c) {
  int lo = 0, hi = len;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (better(list[mid], c)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/// Number of elements of list [len] (sorted best first) that are better than or equal to c.
__device__ __forceinline__ int count_not_worse(const Candidate* list, int len, const Candidate& c) {
  int lo = 0, hi = len;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (!better(c, list[mid])) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/// Splits the final candidates [n] into ids [n] and reported scores [n] (l2: distance = −score),
/// so only k·(8+4) bytes per query cross to the host.
__global__ void split_results_kernel(const Candidate* __restrict__ list, std::int64_t n, bool l2,
                                     std::int64_t* __restrict__ ids, float* __restrict__ scores) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Candidate c = list[i];
  ids[i] = c.id;
  scores[i] = l2 ? -c.score : c.score;
}

struct MergeArgs {
  const Candidate* in;       // list l of query q at in + q * in_qstride + l * in_lstride
  std::int64_t in_qstride, in_lstride;
  int n_lists, len_in, fan_in;
  Candidate* out;            // group g of query q at out + q * out_qstride + g * out_lstride
  std::int64_t out_qstride, out_lstride;
  int len_out;
  std::int64_t n_groups, slices;  // grid = batch × n_groups × slices
};

/// Merges each group of fan_in consecutive sorted lists [len_in] into one sorted list
/// [len_out] (the best len_out; padding when the group holds fewer candidates). Element i of
/// list li lands at rank i + Σ_{lj<li} #(lj ≥ it) + Σ_{lj>li} #(lj > it): a permutation even
/// with equal elements, and independent of everything but the candidates themselves.
/// Block: kMergeThreads threads for kMergeElemsPerBlock elements of one group of one query.
/// Stream: the engine's.
__global__ void __launch_bounds__(kMergeThreads) merge_lists_kernel(MergeArgs a) {
  const std::int64_t slice = blockIdx.x % a.slices;
  const std::int64_t rest = blockIdx.x / a.slices;
  const std::int64_t g = rest % a.n_groups;
  const std::int64_t q = rest / a.n_groups;
  const int first_list = static_cast<int>(g * a.fan_in);
  const int gc = min(a.fan_in, a.n_lists - first_list);
  const Candidate* base = a.in + q * a.in_qstride + first_list * a.in_lstride;
  Candidate* dst = a.out + q * a.out_qstride + g * a.out_lstride;
  const std::int64_t total = static_cast<std::int64_t>(gc) * a.len_in;
  const std::int64_t e0 = slice * kMergeElemsPerBlock;
  const std::int64_t e1 = min(total, e0 + kMergeElemsPerBlock);
  for (std::int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
    const int li = static_cast<int>(e / a.len_in);
    const int i = static_cast<int>(e % a.len_in);
    if (i >= a.len_out) continue;  // its rank is at least i
    const Candidate c = base[li * a.in_lstride + i];
    std::int64_t rank = i;
    for (int lj = 0; lj < gc && rank < a.len_out; ++lj) {
      if (lj == li) continue;
      const Candidate* other = base + lj * a.in_lstride;
      rank += lj < li ? count_not_worse(other, a.len_in, c) : count_better(other, a.len_in, c);
    }
    if (rank < a.len_out) dst[rank] = c;
  }
  if (slice == 0)
    for (std::int64_t r = total + threadIdx.x; r < a.len_out; r += blockDim.x) dst[r] = pad_candidate();
}

// ---------------------------------------------------------------- RAII holders

struct DeviceBuffer {
  void* p = nullptr;
  int device = 0;
  ~DeviceBuffer() {
    if (p) {
      (void)cudaSetDevice(device);
      (void)cudaFree(p);
    }
  }
};

struct PinnedBuffer {
  void* p = nullptr;
  ~PinnedBuffer() {
    if (p) (void)cudaFreeHost(p);
  }
};

struct StreamHolder {
  cudaStream_t s = nullptr;
  int device = 0;
  ~StreamHolder() {
    if (s) {
      (void)cudaSetDevice(device);
      (void)cudaStreamSynchronize(s);
      (void)cudaStreamDestroy(s);
    }
  }
};

int grid_for(std::int64_t n, int threads) {
  return static_cast<int>(std::min<std::int64_t>((n + threads - 1) / threads, 65535LL * 16));
}

// ---------------------------------------------------------------- the engine

class CudaEngine final : public Engine {
 public:
  CudaEngine(const ShardInput& s, Metric metric, Dtype dtype, int device, const EngineLimits& lim)
      : device_(device), metric_(metric), dtype_(dtype), rows_(s.rows), dim_(s.dim), limits_(lim) {
    check_shape(s.rows, s.dim, lim);
    SHARDTOPK_EXPECTS(s.rows == 0 || (s.data != nullptr && s.ids != nullptr),
                      "CUDA engine: shard of ", s.rows, " rows given without data or ids");
    int count = 0;
    const cudaError_t cerr = cudaGetDeviceCount(&count);
    if (cerr != cudaSuccess) {
      (void)cudaGetLastError();
      throw Error(detail::concat("CUDA engine: no usable GPU (cudaGetDeviceCount: ", cudaGetErrorName(cerr), ", ",
                                 cudaGetErrorString(cerr), ")"));
    }
    SHARDTOPK_EXPECTS(device >= 0 && device < count, "CUDA engine: device ", device, " does not exist (", count,
                      " visible; CUDA_VISIBLE_DEVICES=",
                      (std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "<unset>"), ")");
    // The engine owns this device for the rank (one GPU per rank); methods re-assert it.
    CHECK_CUDA(cudaSetDevice(device));
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
    device_name_ = prop.name;
    const std::size_t sort_smem = static_cast<std::size_t>(kTileMax) * (sizeof(float) + sizeof(std::int64_t));
    SHARDTOPK_EXPECTS(prop.sharedMemPerBlockOptin >= sort_smem, "CUDA engine: device ", device, " (", prop.name,
                      ") offers ", prop.sharedMemPerBlockOptin, " bytes of shared memory per block; the top-k sort needs ",
                      sort_smem, " (compute capability 7.0 or newer)");
    CHECK_CUDA(cudaFuncSetAttribute(tile_sort_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(sort_smem)));

    plan_ = make_plan(s.rows, s.dim, dtype, lim);
    std::size_t free_b = 0, total_b = 0;
    CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
    if (plan_.total > free_b) throw_does_not_fit(free_b, total_b);

    stream_.device = device;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream_.s, cudaStreamNonBlocking));
    arena_.device = device;
    const cudaError_t merr = cudaMalloc(&arena_.p, plan_.total);
    if (merr == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      arena_.p = nullptr;
      CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
      throw_does_not_fit(free_b, total_b);
    }
    CHECK_CUDA(merr);
    CHECK_CUDA(cudaHostAlloc(&pinned_.p, 2 * sizeof(unsigned long long), cudaHostAllocDefault));

    char* base = static_cast<char*>(arena_.p);
    shard_ = base + plan_.off_shard;
    ids_ = reinterpret_cast<std::int64_t*>(base + plan_.off_ids);
    queries_ = reinterpret_cast<float*>(base + plan_.off_queries);
    local_ = reinterpret_cast<Candidate*>(base + plan_.off_local);
    gathered_ = reinterpret_cast<Candidate*>(base + plan_.off_gathered);
    merged_ = reinterpret_cast<Candidate*>(base + plan_.off_merged);
    status_ = reinterpret_cast<unsigned long long*>(base + plan_.off_status);
    out_ids_ = reinterpret_cast<std::int64_t*>(base + plan_.off_out_ids);
    out_scores_ = reinterpret_cast<float*>(base + plan_.off_out_scores);
    if (rows_ > 0) {
      scores_ = reinterpret_cast<float*>(base + plan_.off_scores);
      list_a_ = reinterpret_cast<Candidate*>(base + plan_.off_list_a);
      list_b_ = reinterpret_cast<Candidate*>(base + plan_.off_list_b);
      if (plan_.chunks > 1) {
        acc_[0] = reinterpret_cast<Candidate*>(base + plan_.off_acc0);
        acc_[1] = reinterpret_cast<Candidate*>(base + plan_.off_acc1);
      }
    }
    host_status_ = static_cast<unsigned long long*>(pinned_.p);

    upload(s);
    // Candidate buffers start as padding, so a caller that reads them early sees valid entries.
    const std::int64_t bk = static_cast<std::int64_t>(lim.batch_max) * lim.k_max;
    fill_pad(local_, bk);
    fill_pad(gathered_, bk * lim.world_size);
    fill_pad(merged_, bk);
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    counters_ = {};
  }

  ~CudaEngine() override {
    // Members free the arena, the pinned flag and the stream (after synchronising it).
  }

  std::string name() const override { return "cuda"; }
  MemSpace space() const override { return MemSpace::kDevice; }
  Metric metric() const override { return metric_; }
  Dtype dtype() const override { return dtype_; }
  std::int64_t rows() const override { return rows_; }
  std::int64_t dim() const override { return dim_; }
  float* query_buffer() override { return queries_; }
  Candidate* local_buffer() override { return local_; }
  Candidate* gathered_buffer() override { return gathered_; }
  Candidate* merged_buffer() override { return merged_; }

  /// Validates queries [batch, dim] (device) for every metric and normalises them for cosine.
  /// One 8-byte status readback into pinned memory per call (not counted in
  /// transfer_counters(), which count only query and result traffic); returns after the
  /// stream has drained. @throws Error naming the first bad query.
  void prepare_queries(float* queries, int batch) override {
    SHARDTOPK_EXPECTS(batch >= 0 && batch <= limits_.batch_max, "batch of ", batch,
                      " queries out of range: allowed 0 .. ", limits_.batch_max, " (search.batch_max)");
    if (batch == 0) return;
    SHARDTOPK_EXPECTS(queries != nullptr, "prepare_queries: no queries given");
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaMemsetAsync(status_, 0xFF, sizeof(unsigned long long), stream_.s));
    prepare_queries_kernel<<<batch, kPrepThreads, 0, stream_.s>>>(queries, dim_, metric_ == Metric::kCosine ? 1 : 0,
                                                                  status_);
    CHECK_CUDA_LAUNCH();
    CHECK_CUDA(cudaMemcpyAsync(host_status_, status_, sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream_.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    const unsigned long long st = host_status_[0];
    if (st == kStatusOk) return;
    const std::int64_t q = static_cast<std::int64_t>(st >> 40);
    const std::int64_t col = static_cast<std::int64_t>((st >> 1) & ((1ull << 39) - 1));
    if ((st & 1) == 1)
      throw Error(detail::concat("query ", q, " has zero norm and cannot be scored by cosine similarity"));
    // Error path only: fetch the offending value for the message.
    float v = 0.0f;
    CHECK_CUDA(cudaMemcpyAsync(&host_status_[1], queries + q * dim_ + col, sizeof(float), cudaMemcpyDeviceToHost,
                               stream_.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    std::memcpy(&v, &host_status_[1], sizeof v);
    throw Error(detail::concat("query ", q, " of the batch has a non-finite value (", v, ") at column ", col));
  }

  /// Enqueues the local top-k of queries [batch, dim] (device, float32) into out [batch, k]
  /// (device), best first, on the engine's stream; returns without waiting. Stream-ordered
  /// consumers (allgather, merge, copy_to_host) see the result.
  void search(const float* queries, int batch, int k, Candidate* out) override {
    SHARDTOPK_EXPECTS(batch >= 0 && batch <= limits_.batch_max, "batch of ", batch,
                      " queries out of range: allowed 0 .. ", limits_.batch_max, " (search.batch_max)");
    SHARDTOPK_EXPECTS(k >= 1 && k <= limits_.k_max, "k=", k, " out of range: allowed 1 .. ", limits_.k_max,
                      " (search.k_max)");
    if (batch == 0) return;
    SHARDTOPK_EXPECTS(queries != nullptr && out != nullptr, "search: null query or output buffer");
    DeviceGuard guard(device_);
    if (rows_ == 0) {
      fill_pad(out, static_cast<std::int64_t>(batch) * k);
      return;
    }
    const std::int64_t C = plan_.chunk_rows;
    int cur = 0;
    for (std::int64_t c = 0; c < plan_.chunks; ++c) {
      const std::int64_t row0 = c * C;
      const std::int64_t rows_c = std::min(C, rows_ - row0);
      const bool last = c + 1 == plan_.chunks;
      score(row0, rows_c, queries, batch);
      if (plan_.chunks == 1) {
        select_chunk(row0, rows_c, batch, k, out, k);
        continue;
      }
      // Running top-k of chunks so far in acc_[cur] slot 0 ([batch, 2, k], slot stride k);
      // this chunk's top-k goes to slot 1 and the two are merged.
      Candidate* acc = acc_[cur];
      if (c == 0) {
        select_chunk(row0, rows_c, batch, k, acc, 2LL * k);
        continue;
      }
      select_chunk(row0, rows_c, batch, k, acc + k, 2LL * k);
      if (last) {
        merge_groups(acc, 2LL * k, k, 2, k, 2, out, k, 0, k, batch, 1);
      } else {
        merge_groups(acc, 2LL * k, k, 2, k, 2, acc_[1 - cur], 2LL * k, 0, k, batch, 1);
        cur = 1 - cur;
      }
    }
  }

  /// Merges lists [parts, batch, k] (device, each best first) into out [batch, k] (device) on
  /// the engine's stream; returns without waiting. `out` must not overlap `lists`.
  void merge(const Candidate* lists, int parts, int batch, int k, Candidate* out) override {
    SHARDTOPK_EXPECTS(parts >= 1, "merge: parts must be >= 1 (got ", parts, ")");
    SHARDTOPK_EXPECTS(batch >= 0 && batch <= limits_.batch_max, "merge: batch of ", batch,
                      " out of range: allowed 0 .. ", limits_.batch_max);
    SHARDTOPK_EXPECTS(k >= 1 && k <= limits_.k_max, "merge: k=", k, " out of range: allowed 1 .. ", limits_.k_max);
    if (batch == 0) return;
    SHARDTOPK_EXPECTS(lists != nullptr && out != nullptr, "merge: null buffer");
    DeviceGuard guard(device_);
    merge_groups(lists, k, static_cast<std::int64_t>(batch) * k, parts, k, parts, out, k, 0, k, batch, 1);
  }

  void export_results(const Candidate* list, int batch, int k, std::int64_t* ids, float* scores) override {
    SHARDTOPK_EXPECTS(batch >= 0 && batch <= limits_.batch_max && k >= 1 && k <= limits_.k_max,
                      "export_results: batch ", batch, " / k=", k, " out of range");
    const std::int64_t n = static_cast<std::int64_t>(batch) * k;
    if (n == 0) return;
    DeviceGuard guard(device_);
    split_results_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream_.s>>>(
        list, n, metric_ == Metric::kL2, out_ids_, out_scores_);
    CHECK_CUDA(cudaGetLastError());
    // two copies of exactly k·8 and k·4 bytes per query: the only device→host traffic of a search
    copy_to_host(ids, out_ids_, static_cast<std::size_t>(n) * sizeof(std::int64_t));
    copy_to_host(scores, out_scores_, static_cast<std::size_t>(n) * sizeof(float));
  }

  void copy_to_host(void* host_dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    counters_.device_to_host += bytes;
  }

  void copy_from_host(void* dst, const void* host_src, std::size_t bytes) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    counters_.host_to_device += bytes;
  }

  /// Device-to-device copy, not counted. `src` may have been written on another stream (a
  /// caller's device queries; the interface carries no stream), so the whole device is
  /// synchronised first; returns when the copy is done.
  void copy_within(void* dst, const void* src, std::size_t bytes) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
  }

  void synchronize() override {
    DeviceGuard guard(device_);
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
  }

  void* stream() override { return stream_.s; }

  TransferCounters transfer_counters() const override { return counters_; }
  void reset_transfer_counters() override { counters_ = {}; }
  std::uint64_t resident_bytes() const override { return plan_.total; }

 private:
  [[noreturn]] void throw_does_not_fit(std::size_t free_b, std::size_t total_b) const {
    throw Error(detail::concat(
        "CUDA engine on device ", device_, " (", device_name_, "): the shard of ", rows_, " rows x ", dim_, " dims in ",
        dtype_name(dtype_), " needs ", plan_.total, " bytes of device memory (shard and ids ", plan_.shard_bytes,
        ", query/candidate buffers and workspace ", plan_.total - plan_.shard_bytes, ") but only ", free_b, " of ",
        total_b, " bytes are free; add ranks (mpirun -np) so that each shard is smaller",
        (dtype_ == Dtype::kFloat32 ? ", or store the shard as float16/bfloat16 (engine.dtype)" : ""),
        ", or lower search.batch_max / search.k_max"));
  }

  void fill_pad(Candidate* p, std::int64_t n) {
    if (n == 0) return;
    fill_pad_kernel<<<grid_for(n, 256), 256, 0, stream_.s>>>(p, n);
    CHECK_CUDA_LAUNCH();
  }

  /// Uploads ids and rows (converting to the storage dtype on the device through the scores
  /// workspace, which is free at construction). Synchronous; checks float16/bfloat16 overflow.
  void upload(const ShardInput& s) {
    if (rows_ == 0) return;
    CHECK_CUDA(cudaMemcpyAsync(ids_, s.ids, sizeof(std::int64_t) * rows_, cudaMemcpyHostToDevice, stream_.s));
    const std::int64_t n = rows_ * dim_;
    if (dtype_ == Dtype::kFloat32) {
      CHECK_CUDA(cudaMemcpyAsync(shard_, s.data, sizeof(float) * n, cudaMemcpyHostToDevice, stream_.s));
      CHECK_CUDA(cudaStreamSynchronize(stream_.s));
      return;
    }
    CHECK_CUDA(cudaMemsetAsync(status_, 0xFF, sizeof(unsigned long long), stream_.s));
    const std::int64_t staging = static_cast<std::int64_t>(limits_.batch_max) * plan_.chunk_rows;
    for (std::int64_t i = 0; i < n; i += staging) {
      const std::int64_t m = std::min(staging, n - i);
      // Pageable source: cudaMemcpyAsync returns after staging the host data, and the kernel
      // that reads scores_ is ordered after the copy, so the next iteration may overwrite it.
      CHECK_CUDA(cudaMemcpyAsync(scores_, s.data + i, sizeof(float) * m, cudaMemcpyHostToDevice, stream_.s));
      if (dtype_ == Dtype::kFloat16) {
        convert_kernel<<<grid_for(m, 256), 256, 0, stream_.s>>>(scores_, static_cast<__half*>(shard_) + i, m, i,
                                                                 status_);
      } else {
        convert_kernel<<<grid_for(m, 256), 256, 0, stream_.s>>>(scores_, static_cast<__nv_bfloat16*>(shard_) + i, m,
                                                                 i, status_);
      }
      CHECK_CUDA_LAUNCH();
    }
    CHECK_CUDA(cudaMemcpyAsync(host_status_, status_, sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream_.s));
    CHECK_CUDA(cudaStreamSynchronize(stream_.s));
    const unsigned long long st = host_status_[0];
    if (st != kStatusOk) {
      const std::int64_t row = static_cast<std::int64_t>(st) / dim_, col = static_cast<std::int64_t>(st) % dim_;
      throw Error(detail::concat("corpus row ", s.ids[row], " value ", s.data[st], " at column ", col, " overflows ",
                                 dtype_name(dtype_), "; use engine.dtype float32"));
    }
  }

  /// Scores rows [row0, row0 + rows_c) into scores_ [batch, chunk_rows].
  void score(std::int64_t row0, std::int64_t rows_c, const float* queries, int batch) {
    switch (dtype_) {
      case Dtype::kFloat32: return score_t(static_cast<const float*>(shard_) + row0 * dim_, rows_c, queries, batch);
      case Dtype::kFloat16: return score_t(static_cast<const __half*>(shard_) + row0 * dim_, rows_c, queries, batch);
      case Dtype::kBFloat16:
        return score_t(static_cast<const __nv_bfloat16*>(shard_) + row0 * dim_, rows_c, queries, batch);
    }
  }

  template <typename T>
  void score_t(const T* rows, std::int64_t rows_c, const float* queries, int batch) {
    if (metric_ == Metric::kL2) return score_m<T, true>(rows, rows_c, queries, batch);
    score_m<T, false>(rows, rows_c, queries, batch);
  }

  template <typename T, bool kL2>
  void score_m(const T* rows, std::int64_t rows_c, const float* queries, int batch) {
    if (batch == 1) return launch_score<T, kL2, 1>(rows, rows_c, queries, batch);
    if (batch <= 4) return launch_score<T, kL2, 4>(rows, rows_c, queries, batch);
    launch_score<T, kL2, 8>(rows, rows_c, queries, batch);
  }

  template <typename T, bool kL2, int kQ>
  void launch_score(const T* rows, std::int64_t rows_c, const float* queries, int batch) {
    const std::int64_t row_blocks = (rows_c + kScoreRows - 1) / kScoreRows;
    const std::int64_t blocks = row_blocks * ((batch + kQ - 1) / kQ);
    SHARDTOPK_ASSERT(blocks <= std::numeric_limits<int>::max());
    score_kernel<T, kL2, kQ><<<static_cast<unsigned>(blocks), kScoreRows, 0, stream_.s>>>(
        rows, rows_c, dim_, queries, batch, scores_, plan_.chunk_rows, row_blocks);
    CHECK_CUDA_LAUNCH();
  }

  /// Local top-k of one scored chunk into final_out [batch, k] with query stride final_qstride.
  void select_chunk(std::int64_t row0, std::int64_t rows_c, int batch, int k, Candidate* final_out,
                    std::int64_t final_qstride) {
    const int tile = tile_size(k);
    const std::int64_t tiles = (rows_c + tile - 1) / tile;
    const int keep = std::min(k, tile);
    const std::int64_t cap = plan_.list_capacity;
    const std::int64_t sort_blocks = tiles * batch;
    SHARDTOPK_ASSERT(sort_blocks <= std::numeric_limits<int>::max());
    const std::size_t smem = static_cast<std::size_t>(tile) * (sizeof(float) + sizeof(std::int64_t));
    const bool direct = tiles == 1 && keep == k;
    SHARDTOPK_ASSERT(direct || tiles * keep <= cap, "tiles ", tiles, " keep ", keep, " cap ", cap);
    tile_sort_kernel<<<static_cast<unsigned>(sort_blocks), std::min(kSortThreads, tile / 2), smem, stream_.s>>>(
        scores_, plan_.chunk_rows, ids_ + row0, rows_c, tile, tiles, keep, direct ? final_out : list_a_,
        direct ? final_qstride : cap, keep);
    CHECK_CUDA_LAUNCH();
    if (direct) return;
    const Candidate* src = list_a_;
    Candidate* other = list_b_;
    std::int64_t m = tiles;
    int len = keep;
    for (;;) {
      const std::int64_t mn = (m + kMergeFanIn - 1) / kMergeFanIn;
      const int ln = static_cast<int>(std::min<std::int64_t>(static_cast<std::int64_t>(len) * kMergeFanIn, k));
      const bool final = mn == 1 && ln == k;
      SHARDTOPK_ASSERT(final || mn * ln <= cap, "level of ", mn, " lists of ", ln, " exceeds capacity ", cap);
      Candidate* dst = final ? final_out : other;
      merge_groups(src, cap, len, static_cast<int>(m), len, kMergeFanIn, dst, final ? final_qstride : cap, ln, ln,
                   batch, mn);
      if (final) return;
      other = const_cast<Candidate*>(src);
      src = dst;
      m = mn;
      len = ln;
    }
  }

  void merge_groups(const Candidate* in, std::int64_t in_qstride, std::int64_t in_lstride, int n_lists, int len_in,
                    int fan_in, Candidate* out, std::int64_t out_qstride, std::int64_t out_lstride, int len_out,
                    int batch, std::int64_t n_groups) {
    MergeArgs a;
    a.in = in;
    a.in_qstride = in_qstride;
    a.in_lstride = in_lstride;
    a.n_lists = n_lists;
    a.len_in = len_in;
    a.fan_in = fan_in;
    a.out = out;
    a.out_qstride = out_qstride;
    a.out_lstride = out_lstride;
    a.len_out = len_out;
    a.n_groups = n_groups;
    const std::int64_t per_group = static_cast<std::int64_t>(std::min(fan_in, n_lists)) * len_in;
    a.slices = std::max<std::int64_t>(1, (per_group + kMergeElemsPerBlock - 1) / kMergeElemsPerBlock);
    const std::int64_t blocks = static_cast<std::int64_t>(batch) * n_groups * a.slices;
    SHARDTOPK_ASSERT(blocks <= std::numeric_limits<int>::max());
    merge_lists_kernel<<<static_cast<unsigned>(blocks), kMergeThreads, 0, stream_.s>>>(a);
    CHECK_CUDA_LAUNCH();
  }

  int device_;
  std::string device_name_;
  Metric metric_;
  Dtype dtype_;
  std::int64_t rows_, dim_;
  EngineLimits limits_;
  Plan plan_;
  // Declaration order = reverse destruction order: the stream is synchronised and destroyed
  // before the memory its work used is freed.
  DeviceBuffer arena_;
  PinnedBuffer pinned_;
  StreamHolder stream_;
  void* shard_ = nullptr;
  std::int64_t* ids_ = nullptr;
  float* queries_ = nullptr;
  Candidate* local_ = nullptr;
  Candidate* gathered_ = nullptr;
  Candidate* merged_ = nullptr;
  unsigned long long* status_ = nullptr;
  std::int64_t* out_ids_ = nullptr;      // [batch_max, k_max] export staging
  float* out_scores_ = nullptr;          // [batch_max, k_max]
  unsigned long long* host_status_ = nullptr;
  float* scores_ = nullptr;
  Candidate* list_a_ = nullptr;
  Candidate* list_b_ = nullptr;
  Candidate* acc_[2] = {nullptr, nullptr};
  TransferCounters counters_;
};

}  // namespace

// ---------------------------------------------------------------- public functions

std::unique_ptr<Engine> make_cuda_engine(const ShardInput& shard, Metric metric, Dtype dtype, int device,
                                         const EngineLimits& limits) {
  return std::make_unique<CudaEngine>(shard, metric, dtype, device, limits);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: not an error for a query
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

bool built_with_cuda() { return true; }

std::uint64_t cuda_engine_device_bytes(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& limits) {
  return make_plan(rows, dim, dtype, limits).total;
}

}  // namespace shardtopk
