// The batch-1 search (memory bound; tuned for 100k–50M rows × 384–1024 dims, float16/float32):
//   scan1      one pass over the shard, exact scores (score.cuh) to scores[rows] and a 4096-bin
//              histogram of the top 12 bits of each score's order-preserving key
//   select1    radix-select refinement (next 12, then last 8 bits) over scores[rows], only when
//              the previous level does not already bound the candidates by `cap`; then every
//              row whose key reaches the threshold → candidates (≤ cap, no ties lost); then, in
//              the last block, the sort of the candidates by the ordering rule, best k kept.

#include "engine/cuda/kernels/scan_select.hpp"

#include <algorithm>
#include <cstddef>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/launch.hpp"
#include "engine/cuda/kernels/select1.cuh"
#include "engine/cuda/kernels/select_primitives.cuh"
#include "engine/cuda/kernels/storage.cuh"
#include "engine/cuda/kernels/window_select.hpp"

namespace shardtopk::cuda_detail {
namespace {

constexpr int kScanThreads = 256;
constexpr std::uint64_t kScanL2KeepBytes = 32ull << 20;  // the rows a batch-1 scan leaves in L2 (of 50 MB;
                                                        // 16 and 44 MiB measured no better:
                                                        // docs/PERFORMANCE.md, "Batch-1 scan")
constexpr std::int64_t kScanBlockRows = 1024;         // batch 1, large shards: rows per scan block
constexpr std::int64_t kScanBlockedWaves = 8;         // ... from 8 waves of such blocks on

/// One pass over the shard [rows, nvec chunks] against one query [dim] (float32, read with
/// zero padding to nvec · V): scores[r] = exact ranking score, level-1 histogram += the top 12
/// bits of its key; the last block resolves the threshold. A warp scores kR · (32 / kLanes)
/// adjacent rows at a time, kLanes lanes per row, issuing all of a lane's loads (up to kC chunks
/// per row) before its FMAs: kR · kC = 8 chunks (128 bytes) in flight per lane (4 with 16 lanes
/// per row; plan_scan_select picks the shape from nvec), in the same per-row arithmetic (lane l adds chunks
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
/// score is the same bits either way.
/// Tuned for D = 128–1024 float16/float32 on H200.
/// kMasked: rows `masks` does not allow for query `mq` are not read; their score is −inf and
/// they are not counted in the histogram (select1 never takes them).
template <typename T, bool kL2, int kR, int kC, int kLanes, bool kMasked>
__global__ void __launch_bounds__(kScanThreads)
    scan1_kernel(const T* __restrict__ shard, std::int64_t rows, int nvec, const float* __restrict__ query,
                 int dim, float* __restrict__ scores, std::uint32_t* __restrict__ hists, std::uint32_t k,
                 std::uint32_t cap, Batch1State* __restrict__ st, std::int64_t rows_per_block,
                 std::uint32_t* __restrict__ dir, std::int64_t keep_from, RowMasks masks, int mq) {
  constexpr int V = VecTraits<T>::kElems;
  const bool hints = dir != nullptr;
  const bool rev = hints && (*dir & 1u) != 0u;
  const std::uint64_t pol_stream = l2_evict_first(), pol_keep = l2_evict_normal();
  extern __shared__ __align__(16) float qs[];
  __shared__ std::uint32_t h[kHist1Bins];
  // The query to shared memory, kQueryLoads loads in flight per thread (one at a time, D = 768
  // took 3 dependent round trips to L2 before the block's first row).
  constexpr int kQueryLoads = 4;
  for (int i0 = threadIdx.x; i0 < nvec * V; i0 += kQueryLoads * kScanThreads) {
    float qv[kQueryLoads];
#pragma unroll
    for (int u = 0; u < kQueryLoads; ++u) {
      const int i = i0 + u * kScanThreads;
      qv[u] = i < dim ? query[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kQueryLoads; ++u)
      if (i0 + u * kScanThreads < nvec * V) qs[i0 + u * kScanThreads] = qv[u];
  }
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
    bool live[kR];
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      if constexpr (kMasked) {
        live[i] = r + i * G + g < hi && masks.allows(mq, first + (i * G + g) * dr);
      } else {
        live[i] = true;
      }
    }
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
            for (int i = 0; i < kR; ++i)
              if (!kMasked || live[i]) x[i][c] = load_chunk_hint(row[i], v, pol);
          } else {
#pragma unroll
            for (int i = 0; i < kR; ++i)
              if (!kMasked || live[i]) x[i][c] = load_chunk(row[i], v);
          }
        }
      }
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int v = v0 + sl + 32 * c;
        if (v < nvec) {
#pragma unroll
          for (int i = 0; i < kR; ++i)
            if (!kMasked || live[i]) a[i] = chunk_step<T, kL2>(qs + v * V, x[i][c], a[i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      float si = kLanes == 32 ? warp_tree(a[i]) : half_warp_tree(a[i]);
      if (kL2) si = -si;
      const int j = i * G + g;
      if (sl == i && r + j < hi) {
        if (kMasked && !live[i]) {
          scores[first + j * dr] = -CUDART_INF_F;  // never selected (select1<true> skips −inf)
        } else {
          scores[first + j * dr] = si;
          atomicAdd(&h[score_key(si) >> 20], 1u);
        }
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kHist1Bins; i += blockDim.x)
    if (h[i]) atomicAdd(&hists[i], h[i]);
  // Every block read *dir before it got here; the last one flips it for the next search.
  if (publish_if_last<kScanThreads>(hists, 1, k, cap, st) && dir != nullptr && threadIdx.x == 0) *dir ^= 1u;
}

/// One refinement level over scores[rows], added to hist_out [kBins]: level 2 counts bits 19..8
/// of the keys whose bits 31..20 equal `prefix`, level 3 bits 7..0 of the keys whose bits 31..8
/// do. Every block of the grid calls it; it returns once every row has been counted, by
/// whichever blocks. `first` is this block's first claim (a value of *claimed, the same in every
/// thread of the block).
///
/// Why it cannot hang, whatever the number of blocks resident at once (the grid is sized to one
/// wave from the occupancy, but nothing guarantees that every block of it is running: other
/// kernels, another process or MPS may hold multiprocessors): the rows are cut into gridDim.x
/// chunks that blocks claim from *claimed, and a block waits (for *finished to reach the chunk
/// count) only once the claims have run out, when every chunk belongs to a block that was
/// running when it claimed it. Such a block counts its chunk without waiting for any other block
/// (block barriers only) and then adds it to *finished; so the count completes whether or not
/// the blocks that have not started yet ever start before it does (they find no chunk left and
/// wait for the same count). With every block running, each claims one chunk (one contiguous
/// slice of rows, the work a static split would give it) and its next claim, which comes back
/// empty, is in flight while it reads the chunk: no extra launch, no extra pass.
template <int kLevel>
__device__ void refine_level(const float* __restrict__ scores, std::int64_t rows, std::uint32_t prefix,
                             std::uint32_t first, std::uint32_t* claimed, std::uint32_t* finished,
                             std::uint32_t* smem_h, std::uint32_t* hist_out) {
  constexpr int kBins = kLevel == 2 ? kHist2Bins : kHist3Bins;
  __shared__ std::uint32_t next_claim;
  for (int i = threadIdx.x; i < kBins; i += blockDim.x) smem_h[i] = 0;
  __syncthreads();
  const std::uint32_t chunks = gridDim.x;
  // Whole warps per chunk (hist_add needs every lane of a warp).
  const std::int64_t chunk_rows = ((rows + chunks - 1) / chunks + 31) / 32 * 32;
  std::uint32_t mine = 0;
  for (std::uint32_t c = first; c < chunks;) {
    std::uint32_t next = 0;
    if (threadIdx.x == 0) next = atomicAdd(claimed, 1u);  // not read until the chunk is counted
    const std::int64_t lo = static_cast<std::int64_t>(c) * chunk_rows;
    const std::int64_t hi = min(rows, lo + chunk_rows);
    const std::int64_t end = hi > lo ? lo + (hi - lo + 31) / 32 * 32 : lo;
    for (std::int64_t r = lo + threadIdx.x; r < end; r += blockDim.x) {
      const std::uint32_t key = r < hi ? score_key(scores[r]) : 0u;
      const bool match = r < hi && (kLevel == 2 ? (key >> 20) == prefix : (key >> 8) == prefix);
      hist_add(smem_h, kLevel == 2 ? (key >> 8) & 0xFFFu : key & 0xFFu, match);
    }
    ++mine;
    if (threadIdx.x == 0) next_claim = next;
    __syncthreads();
    c = next_claim;
    __syncthreads();  // every thread has read next_claim before thread 0 writes it again
  }
  for (int i = threadIdx.x; i < kBins; i += blockDim.x)
    if (smem_h[i]) atomicAdd(&hist_out[i], smem_h[i]);
  __threadfence();  // this thread's histogram adds, before the block's chunks are counted
  __syncthreads();
  if (threadIdx.x == 0) {
    if (mine > 0) atomicAdd(finished, mine);
    while (*reinterpret_cast<volatile std::uint32_t*>(finished) < chunks) {
    }
    __threadfence();  // every block's histogram adds, before this block reads the histogram
  }
  __syncthreads();
}

__device__ void final1_block(const PoolEntry* __restrict__ cand, std::uint32_t count, const Batch1State& st,
                             const std::int64_t* __restrict__ ids, const float* __restrict__ scores,
                             std::int64_t rows, int cap, int k, Candidate* __restrict__ out, float* ss,
                             std::int64_t* sid, const ExportTarget& ex);

/// Batch-1 selection after scan1, one launch: the radix refinements the level-1 histogram did not
/// settle (levels 2 and 3, only when needed; refine_level says why waiting for them cannot
/// hang), the extraction of every row whose key reaches the threshold into cand [cap], and, in
/// the last block to finish, the final sort into out [k]. Correct for any grid (no block waits
/// for a block that has not started); sized to one wave of blocks for speed. Dynamic shared
/// memory: cap × 12 bytes (the final sort).
/// `entries` (optional, device): the number of scores when a filtered scan wrote them compactly
/// (at most `rows`; then `ids` are the compact ids beside them), read once at the start.
/// `query_bytes` ≠ 0 (a few-query search, scan_few.hpp): the blocks of grid row y select query y,
/// whose scores start at scores + y · rows, its hists, count and state `query_bytes` · y bytes
/// past the given ones (FewQueryState), its candidates at cand + y · cap, its answer at out + y · k
/// (and at ex's + y · k). `ex`: the answer's direct export, if it has a target.
template <bool kMasked>
__global__ void __launch_bounds__(kSelThreads)
    select1_kernel(const float* __restrict__ scores, std::int64_t rows, std::uint32_t* __restrict__ hists,
                   std::uint32_t k, std::uint32_t cap, Batch1State* __restrict__ st, PoolEntry* __restrict__ cand,
                   std::uint32_t* __restrict__ count, const std::int64_t* __restrict__ ids,
                   Candidate* __restrict__ out, const std::uint32_t* __restrict__ entries, std::int64_t query_bytes,
                   ExportTarget ex) {
  if (query_bytes != 0) {
    const std::int64_t y = blockIdx.y;
    ex = ex.at(y * k);
    scores += y * rows;
    hists = reinterpret_cast<std::uint32_t*>(reinterpret_cast<char*>(hists) + y * query_bytes);
    count = reinterpret_cast<std::uint32_t*>(reinterpret_cast<char*>(count) + y * query_bytes);
    st = reinterpret_cast<Batch1State*>(reinterpret_cast<char*>(st) + y * query_bytes);
    cand += y * cap;
    out += y * k;
  }
  if (entries != nullptr) rows = min(rows, static_cast<std::int64_t>(*entries));
  extern __shared__ __align__(16) unsigned char smem[];
  std::uint32_t* h = reinterpret_cast<std::uint32_t*>(smem);  // refinement histogram (before the sort)
  __shared__ std::uint32_t first_claim[2];
  // Each level's first claim is issued before the state is read, so that its latency overlaps
  // that read; unused (and harmless: the counters are per search) when no refinement is needed.
  std::uint32_t claim2 = 0, claim3 = 0;
  if (threadIdx.x == 0) {
    claim2 = atomicAdd(&st->claimed[0], 1u);
    claim3 = atomicAdd(&st->claimed[1], 1u);
  }
  // A few-query scan leaves each query's level-1 histogram to its select: every block of the
  // query resolves it (the same answer in each), the queries in parallel.
  Resolution res = query_bytes != 0
                       ? resolve<kSelThreads>(hists, 1, k, cap)
                       : Resolution{static_cast<int>(st->status), st->thr, 0u, st->tie_overflow, st->prefix};
  if (res.status == 2) {
    if (threadIdx.x == 0) first_claim[0] = claim2;
    __syncthreads();
    refine_level<2>(scores, rows, res.prefix, first_claim[0], &st->claimed[0], &st->finished[0], h,
                    hists + kHist1Bins);
    res = resolve<kSelThreads>(hists, 2, k, cap);
  }
  if (res.status == 3) {
    if (threadIdx.x == 0) first_claim[1] = claim3;
    __syncthreads();
    refine_level<3>(scores, rows, res.prefix, first_claim[1], &st->claimed[1], &st->finished[1], h,
                    hists + kHist1Bins + kHist2Bins);
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
      // Rows a masked scan ruled out score −inf: never candidates, also when fewer than k rows
      // remain (threshold 0). Scores of rows it allowed are finite.
      if (kMasked) take = take && s != -CUDART_INF_F;
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
               static_cast<int>(k), out, ss, sid, ex);
}

/// Batch-1 final step, one block of kSelThreads: the candidates [count] become the best k,
/// sorted by the ordering rule, in out [k] (and ex); (ss, sid) hold cap entries in shared memory.
/// Slow path (tie_overflow: more rows share the k-th score than `cap` holds): the block
/// streams over scores[rows] collecting the tied rows' ids in the upper half of its buffer,
/// keeping the need_ties smallest — linear in rows per pass, for pathological inputs only.
__device__ void final1_block(const PoolEntry* __restrict__ cand, std::uint32_t count, const Batch1State& st,
                             const std::int64_t* __restrict__ ids, const float* __restrict__ scores,
                             std::int64_t rows, int cap, int k, Candidate* __restrict__ out, float* ss,
                             std::int64_t* sid, const ExportTarget& ex) {
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
  sort_and_write(ss, sid, total, k, out, ex);
}

template <typename T, bool kL2, int kR, int kC, int kLanes, bool kMasked>
void launch_scan_select(const ScanSelectPlan& p, const ScanSelectArgs& a, cudaStream_t stream) {
  CHECK_CUDA(cudaMemsetAsync(a.hists, 0, a.clear_bytes, stream));
  const std::size_t qsmem = static_cast<std::size_t>(p.dpad) * sizeof(float);
  const std::uint32_t uk = static_cast<std::uint32_t>(a.k), ucap = static_cast<std::uint32_t>(p.cap);
  scan1_kernel<T, kL2, kR, kC, kLanes, kMasked><<<p.scan_blocks, kScanThreads, qsmem, stream>>>(
      static_cast<const T*>(a.shard), p.rows, p.nvec, a.query, static_cast<int>(p.dim), a.scores, a.hists, uk, ucap,
      a.state, p.rows_per_block, p.l2_hints ? a.dir : nullptr, p.keep_from, a.masks, a.mask_query);
  CHECK_CUDA_LAUNCH();
  if (a.window.on) {  // the rows outside the window become −inf: the masked select skips them
    window_pass(p, a, p.rows, nullptr, stream);
    select_compact(p, a, p.rows, nullptr, stream);
    return;
  }
  const std::size_t smem = static_cast<std::size_t>(p.cap) * (sizeof(float) + sizeof(std::int64_t));
  select1_kernel<kMasked><<<p.select_blocks, kSelThreads, smem, stream>>>(a.scores, p.rows, a.hists, uk, ucap,
                                                                         a.state, a.cand, a.count, a.ids, a.out,
                                                                         nullptr, 0, a.exp);
  CHECK_CUDA_LAUNCH();
}

/// The plan of scan shape kR × kC × kLanes (scan1_kernel) for storage T.
template <typename T, bool kL2, int kR, int kC, int kLanes>
void plan_shape(ScanSelectPlan& p, ScanSchedule schedule, int sms) {
  const std::size_t qsmem = static_cast<std::size_t>(p.dpad) * sizeof(float);
  // Small shards: one step of rows per warp (kStepRows · 8 rows per block), up to one wave of
  // blocks. A scan is a chain of dependent loads per warp, so a shard that fills few blocks
  // deeply waits on that chain (10k × 768 float32 in 40 blocks of 256 rows: 16 loads in turn per
  // warp); spread over the wave, each warp waits on one or two. A block's fixed work (the query
  // to shared memory, a 4,096-bin histogram cleared and its non-zero bins flushed) stays small
  // beside that.
  const int pgrid = persistent_grid(reinterpret_cast<const void*>(scan1_kernel<T, kL2, kR, kC, kLanes, false>),
                                    kScanThreads, qsmem, sms);
  constexpr std::int64_t kBlockStepRows = static_cast<std::int64_t>(kR) * (32 / kLanes) * (kScanThreads / 32);
  p.scan_blocks = static_cast<int>(std::min<std::int64_t>(pgrid, (p.rows + kBlockStepRows - 1) / kBlockStepRows));
  // Large shards: blocks of kScanBlockRows contiguous rows, scheduled by the hardware, instead of
  // the persistent grid-stride loop (10M × 768 float16 / float32: −3 % device time; at 1M, under
  // ~2 waves of such blocks, the persistent grid stays 1–3 % ahead).
  const bool big = p.rows >= kScanBlockedWaves * kScanBlockRows * static_cast<std::int64_t>(pgrid);
  if (schedule == ScanSchedule::kAuto ? big : schedule == ScanSchedule::kBlocked) {
    p.rows_per_block = kScanBlockRows;
    p.scan_blocks = static_cast<int>((p.rows + p.rows_per_block - 1) / p.rows_per_block);
  }
  const std::int64_t keep_rows =
      static_cast<std::int64_t>(kScanL2KeepBytes) / (p.dpad * static_cast<std::int64_t>(sizeof(T)));
  p.keep_from = std::max<std::int64_t>(0, p.rows - keep_rows);
  p.launch = launch_scan_select<T, kL2, kR, kC, kLanes, false>;
  // The masked scan runs on the unmasked one's grid (its occupancy can only be the same or lower
  // by its few extra registers; the grid-stride loop and the blocked schedule are correct for
  // any grid).
  p.launch_masked = launch_scan_select<T, kL2, kR, kC, kLanes, true>;
}

/// Rows per warp from the row's 16-byte chunks (plan_scan_select's table); 16 rows per warp
/// measured slower (96–106 registers).
template <typename T, bool kL2>
void plan_rows(ScanSelectPlan& p, ScanRows scan_rows, ScanSchedule schedule, int sms) {
  p.nvec = static_cast<int>(p.dpad / VecTraits<T>::kElems);
  if (scan_rows == ScanRows::kTwo || p.nvec > 64) return plan_shape<T, kL2, 2, 4, 32>(p, schedule, sms);
  if (p.nvec > 32) return plan_shape<T, kL2, 4, 2, 32>(p, schedule, sms);
  if (p.nvec > 16) return plan_shape<T, kL2, 8, 1, 32>(p, schedule, sms);
  return plan_shape<T, kL2, 4, 1, 16>(p, schedule, sms);
}

}  // namespace

void select_compact(const ScanSelectPlan& p, const ScanSelectArgs& a, std::int64_t max_entries,
                    const std::uint32_t* entries, cudaStream_t stream) {
  const std::size_t smem = static_cast<std::size_t>(p.cap) * (sizeof(float) + sizeof(std::int64_t));
  select1_kernel<true><<<p.select_blocks, kSelThreads, smem, stream>>>(
      a.scores, max_entries, a.hists, static_cast<std::uint32_t>(a.k), static_cast<std::uint32_t>(p.cap), a.state,
      a.cand, a.count, a.ids, a.out, entries, 0, a.exp);
  CHECK_CUDA_LAUNCH();
}

void select_few(const ScanSelectPlan& p, const float* scores, FewQueryState* states, int batch, int k,
                PoolEntry* cand, const std::int64_t* ids, Candidate* out, const ExportTarget& ex, cudaStream_t stream) {
  const std::size_t smem = static_cast<std::size_t>(p.cap) * (sizeof(float) + sizeof(std::int64_t));
  // Each query gets a batch-1 select's grid, as far as one wave of blocks holds them all.
  const dim3 grid(static_cast<unsigned>(std::max(1, std::min(p.select_blocks, p.select_wave / batch))),
                  static_cast<unsigned>(batch));
  char* base = reinterpret_cast<char*>(states);  // query 0's state; the kernel offsets the others
  select1_kernel<false><<<grid, kSelThreads, smem, stream>>>(
      scores, p.rows, reinterpret_cast<std::uint32_t*>(base + offsetof(FewQueryState, hists)),
      static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(p.cap),
      reinterpret_cast<Batch1State*>(base + offsetof(FewQueryState, state)), cand,
      reinterpret_cast<std::uint32_t*>(base + offsetof(FewQueryState, count)), ids, out, nullptr,
      static_cast<std::int64_t>(sizeof(FewQueryState)), ex);
  CHECK_CUDA_LAUNCH();
}

ScanSelectPlan plan_scan_select(Dtype dtype, bool l2, std::int64_t rows, std::int64_t dim, std::int64_t dpad,
                                int cap, ScanRows scan_rows, ScanSchedule schedule, bool l2_hints, int sms) {
  ScanSelectPlan p;
  p.dtype = dtype;
  p.l2 = l2;
  p.rows = rows;
  p.dim = dim;
  p.dpad = dpad;
  p.cap = cap;
  p.l2_hints = l2_hints;
  with_storage_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (l2) plan_rows<T, true>(p, scan_rows, schedule, sms);
    else plan_rows<T, false>(p, scan_rows, schedule, sms);
  });
  const std::size_t smem = static_cast<std::size_t>(cap) * (sizeof(float) + sizeof(std::int64_t));
  const void* select = reinterpret_cast<const void*>(select1_kernel<false>);
  const void* select_masked = reinterpret_cast<const void*>(select1_kernel<true>);
  allow_dynamic_smem(select, smem);
  allow_dynamic_smem(select_masked, smem);
  // One wave of blocks (select1 is correct for any grid; a second wave would only wait).
  const int select_grid =
      std::min(persistent_grid(select, kSelThreads, smem, sms), persistent_grid(select_masked, kSelThreads, smem, sms));
  p.select_wave = select_grid;
  p.select_blocks = static_cast<int>(std::min<std::int64_t>(select_grid, (rows + kSelThreads - 1) / kSelThreads));
  return p;
}

}  // namespace shardtopk::cuda_detail
