#include "engine/cuda/batched_search.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <limits>

#include "core/cuda_check.cuh"
#include "engine/cuda/kernels/candidate_pools.hpp"
#include "engine/cuda/kernels/gathered_scores.hpp"
#include "engine/cuda/kernels/query_prep.hpp"
#include "engine/cuda/kernels/rescore.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::cuda_detail {
namespace {

constexpr std::uint32_t kPoolTriggerDiv = 4;    // compact a pool above min(cap / 4, max(2k, 256))
constexpr std::int64_t kFirstChunkRows = 8192;  // rows that seed the thresholds
constexpr std::int64_t kCompactEvery = 4;       // chunks between pool compactions
constexpr std::int64_t kCompactFirst = 8;       // the first chunks: compacted after each
constexpr int kLongChunk = 65536;               // longer chunks: compacted after each
constexpr std::int64_t kMaxChunkGrowth = 8;     // chunk c ≤ 8 × the rows before it
/// Rows a fused chunk may have beyond the rows before it (whose compacted pools give its
/// thresholds): 768 tiles of 256 rows.
constexpr std::int64_t kFusedChunkRows = 196608;
/// Fused batches of at most this many queries (one 64-query tile) seed from kSmallFirstChunkRows
/// rows and grow their chunks by the growth bound alone: 1M rows in 3 fused launches and 2
/// compactions instead of 4 and 3 (docs/PERFORMANCE.md, "Threshold selects").
constexpr int kGrowthOnlyBatch = 64;
constexpr std::int64_t kSmallFirstChunkRows = 4096;

/// Chunks collected between two compactions of the pools around chunk c (of `rows` rows): one
/// for the first chunks and for long ones, kCompactEvery after.
std::int64_t chunks_per_compaction(std::int64_t c, int rows) {
  return c < kCompactFirst || rows > kLongChunk ? 1 : kCompactEvery;
}

/// Whether the pools are compacted after chunk c (of `rows` rows) of a chunk of every query.
bool compacts_after(std::int64_t c, int rows) { return chunks_per_compaction(c, rows) == 1 || c % kCompactEvery == 0; }

}  // namespace

BatchedSearch::BatchedSearch(Dtype dtype, bool l2, std::int64_t rows, std::int64_t dim, const Plan& plan,
                             const Workspace& ws, const EngineLimits& limits, int cap, cudaStream_t stream,
                             bool fuse)
    : dtype_(dtype),
      l2_(l2),
      rows_(rows),
      dim_(dim),
      dpad_(plan.dpad),
      sbuf_bytes_(plan.sbuf_bytes),
      pool_cap_(pool_cap(limits)),
      cap_(cap),
      ws_(ws) {
  side_.create(cudaStreamNonBlocking);
  for (int i = 0; i < 2; ++i) {
    ev_scored_[i].create(cudaEventDisableTiming);
    ev_pooled_[i].create(cudaEventDisableTiming);
  }
  cublas_.create();
  CHECK_CUBLAS(cublasSetStream(cublas_.get(), stream));
  CHECK_CUBLAS(cublasSetWorkspace(cublas_.get(), ws_.cublas, kCublasWorkspace));
  CHECK_CUBLAS(cublasSetPointerMode(cublas_.get(), CUBLAS_POINTER_MODE_HOST));
  bound_ = stream;
  prepare_rescore(cap);
  prepare_candidate_pools();
  if (fuse && fused_collect_supported(dtype, dpad_)) fused_.emplace(dtype, ws_.shard, rows, dpad_, ws_.qhat, limits.batch_max);
}

void BatchedSearch::bind(cudaStream_t stream) {
  if (stream == bound_) return;
  CHECK_CUBLAS(cublasSetStream(cublas_.get(), stream));
  CHECK_CUBLAS(cublasSetWorkspace(cublas_.get(), ws_.cublas, kCublasWorkspace));
  bound_ = stream;
}

/// The largest chunk; see enqueue for the first chunks. Its GEMM output fits kChunkBudget, but
/// float16 batches of more than kLongChunkBatch queries take at least kMinHalfChunkRows rows
/// where the buffer holds them (plan.hpp). float32 storage (TF32 GEMM) stays at 65,536 rows:
/// longer chunks measured 6 % slower at B = 8, while float16 gained 11 % there
/// (docs/PERFORMANCE.md, "Batched path").
std::int64_t BatchedSearch::chunk_rows(int batch, std::uint64_t out_bytes) const {
  const std::uint64_t per_row = out_bytes * static_cast<std::uint64_t>(batch);
  std::int64_t r = static_cast<std::int64_t>(std::min(sbuf_bytes_, kChunkBudget) / per_row);
  if (dtype_ == Dtype::kFloat16 && batch > kLongChunkBatch)
    r = std::max(r, std::min(kMinHalfChunkRows, static_cast<std::int64_t>(sbuf_bytes_ / per_row)));
  if (dtype_ == Dtype::kFloat32) r = std::min<std::int64_t>(r, 65536);
  if (r >= 256) r = r / 256 * 256;
  return std::max<std::int64_t>(1, std::min(r, rows_));
}

std::vector<RowChunk> BatchedSearch::chunks(int batch, int k, bool fused) const {
  const std::uint64_t out_bytes = dtype_ == Dtype::kFloat16 ? 2 : 4;
  const std::int64_t gemm_rows = chunk_rows(batch, out_bytes);
  // The fused kernel holds no GEMM output: a chunk of it has up to kFusedChunkRows rows or as
  // many as came before it, the larger (within the kernel's tile index), so that the launches
  // grow with the shard while each chunk's thresholds come from at least its own length of
  // rows. Against chunks of at most 196,608 rows (one H100, docs/PERFORMANCE.md, "The fused
  // chunk plan"): 10M rows at B = 256 8 fused launches instead of 52, 9.52 → 8.71 ms of device
  // time at k = 100; against the growth rule alone (4 launches), the same there and 1.07 ×
  // faster at 1M rows, B = 1,024, k = 10 (whose 589,824-row chunk there follows thresholds
  // from 73,728 rows; not profiled). Batches of at most kGrowthOnlyBatch queries take the
  // growth rule alone after 4,096 seeding rows: 1M rows, B = 64, 574 → 571 µs of device time,
  // B = 8 557 → 550 µs (one H100, docs/PERFORMANCE.md, "Threshold selects").
  const std::int64_t R = fused ? std::min(rows_, FusedCollect::max_chunk_rows(batch)) : gemm_rows;
  // The first chunk seeds the thresholds from a GEMM's output (fused or not).
  const bool small = fused && batch <= kGrowthOnlyBatch;
  const std::int64_t R0 = std::min<std::int64_t>(gemm_rows, small ? kSmallFirstChunkRows : kFirstChunkRows);
  // Chunk c ≥ 1 has at most G times as many rows as came before it (from R0 up to R): a
  // threshold from n rows lets about k · rows_c / n ≤ k · G rows of the next chunk through, so
  // the early chunks cannot flood the pools (k · G ≤ pool_cap / 4), and small batches still get
  // long GEMMs soon. G = 8 where the pool allows (1M rows, B = 64: 656 → 626 µs device time
  // against doubling; docs/PERFORMANCE.md, "Batched path").
  const std::int64_t G = std::min<std::int64_t>(kMaxChunkGrowth, std::max<std::int64_t>(1, pool_cap_ / (4LL * k)));
  std::vector<RowChunk> out;
  for (std::int64_t r0 = 0; r0 < rows_;) {
    const std::int64_t longest = fused && !small ? std::min(R, std::max({kFusedChunkRows, gemm_rows, r0})) : R;
    const int rc = static_cast<int>(std::min(
        {out.empty() ? R0 : std::min(longest, G * r0), rows_ - r0, std::int64_t{std::numeric_limits<int>::max()}}));
    out.push_back(RowChunk{r0, rc});
    r0 += rc;
  }
  return out;
}

bool BatchedSearch::gathers_rows() const { return gathered_scores_supported(dtype_, dpad_); }

std::int64_t BatchedSearch::outputs_per_buffer() const {
  return static_cast<std::int64_t>(std::min(sbuf_bytes_, kChunkBudget) / (dtype_ == Dtype::kFloat16 ? 2 : 4));
}

void BatchedSearch::enqueue(const float* queries, int batch, int k, Candidate* out, double max_sq,
                            cudaStream_t stream, const RowMasks* masks, const ChunkSchedule* schedule) {
  bind(stream);
  const std::int64_t pcap = pool_cap_;
  CHECK_CUDA(cudaMemsetAsync(ws_.counts, 0, static_cast<std::size_t>(batch) * 4, stream));
  CHECK_CUDA(cudaMemsetAsync(ws_.overflow, 0, static_cast<std::size_t>(batch) * 4, stream));
  prepare_batched_queries(queries, batch, dim_, dpad_, dtype_, l2_, max_sq, ws_.qpad, ws_.qhat, ws_.qinfo, stream);
  const bool seeded = schedule != nullptr;
  const bool gathered = seeded && schedule->order != nullptr;
  SHARDTOPK_EXPECTS(!gathered || gathers_rows(), "BatchedSearch: a schedule over a column's order needs float16 "
                    "or bfloat16 rows of at most ", kGatheredMaxDpad, " padded values (this shard: ", to_string(dtype_),
                    ", ", dpad_, ")");
  const CandidatePools pools{ws_.qinfo, ws_.pool, pcap, ws_.counts, ws_.thr, ws_.overflow, ws_.seen};
  if (seeded) init_thresholds(pools, batch, stream);
  // The GEMM's output: __half for float16 shards (half the bytes per chunk), float otherwise.
  const bool half_out = dtype_ == Dtype::kFloat16;
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType_t ty = dtype_ == Dtype::kFloat32   ? CUDA_R_32F
                            : dtype_ == Dtype::kFloat16 ? CUDA_R_16F
                                                        : CUDA_R_16BF;
  const cudaDataType_t out_ty = half_out ? CUDA_R_16F : CUDA_R_32F;
  const cublasComputeType_t ct = dtype_ == Dtype::kFloat32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const std::uint64_t elem = dtype_bytes(dtype_);
  // The GEMM output alternates between two buffers.
  void* sbuf[2] = {ws_.scores, reinterpret_cast<char*>(ws_.scores) + sbuf_bytes_};
  // Compact (and raise the threshold) once a pool holds 2k entries: the first chunk's threshold
  // (the k-th of 8,192 rows) lets ~k · R / 8192 rows of each later chunk through, and waiting
  // for pool_cap / 4 entries kept it that loose for several chunks (a trigger of pool_cap / 4
  // after the first 8 chunks measured 3 % slower; docs/PERFORMANCE.md, "Batched path").
  const std::uint32_t trigger = static_cast<std::uint32_t>(
      std::min<std::int64_t>(pcap / kPoolTriggerDiv, std::max<std::int64_t>(2LL * k, 256)));
  const cudaStream_t side = side_.get();
  // Unfiltered batches without deleted rows: each chunk after the first scored and collected in
  // one kernel on the side stream, in order with the seeding and the compactions.
  const bool fused = fused_.has_value() && !seeded && masks == nullptr;
  const std::vector<RowChunk> plan = seeded ? schedule->chunks : chunks(batch, k, fused);
  int last = -1;
  std::int64_t c = 0;  // chunks launched
  for (std::size_t ci = 0; ci < plan.size(); ++ci) {
    const std::int64_t r0 = plan[ci].row0;
    const int rc = plan[ci].rows;
    const int n = seeded ? schedule->queries[ci] : batch;
    const bool subset = n < batch;
    const int b = static_cast<int>(c & 1);
    // No compaction after the last chunk: the re-score takes its pools' threshold from their own
    // k-th and keeps the entries that reach it, the rows a compaction would have kept (1M × 768
    // float16, B = 64: 610 → 604 µs of device time; one H100, docs/PERFORMANCE.md, "The fused
    // scores and collect").
    const bool more = ci + 1 < plan.size();
    if (fused && c > 0) {
      fused_->enqueue(r0, rc, batch, l2_, ws_.row_sq, pools, side);
      if (more && compacts_after(c, rc)) compact_pools(batch, k, trigger, pools, side);
      CHECK_CUDA(cudaEventRecord(ev_pooled_[b].get(), side));
      last = b;
      ++c;
      continue;
    }
    if (c >= 2) CHECK_CUDA(cudaStreamWaitEvent(stream, ev_pooled_[b].get(), 0));
    const std::int32_t* qmap = subset ? schedule->qmap + schedule->first[ci] : nullptr;
    if (subset) gather_query_rows(ws_.qhat, static_cast<std::size_t>(dpad_) * elem, qmap, n, ws_.qsub, stream);
    if (gathered) {
      // sbuf[b][j * rc + i] = Σ_d qhat[query j, d] · shard[order[r0 + i], d]
      GatheredScores g;
      g.shard = ws_.shard;
      g.dpad = dpad_;
      g.rows = schedule->order + r0;
      g.count = rc;
      g.queries = subset ? ws_.qsub : ws_.qhat;
      g.n = n;
      g.out = sbuf[b];
      g.ld = rc;
      gathered_scores(dtype_, g, stream);
    } else {
      // sbuf[b][j * rc + i] = Σ_d qhat[query j, d] · shard[r0 + i, d]   (column-major [rc, n])
      CHECK_CUBLAS(cublasGemmEx(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, rc, n, static_cast<int>(dpad_), &one,
                                static_cast<const char*>(ws_.shard) + r0 * dpad_ * elem, ty, static_cast<int>(dpad_),
                                subset ? ws_.qsub : ws_.qhat, ty, static_cast<int>(dpad_), &zero, sbuf[b], out_ty, rc,
                                ct, CUBLAS_GEMM_DEFAULT));
    }
    CHECK_CUDA(cudaEventRecord(ev_scored_[b].get(), stream));
    CHECK_CUDA(cudaStreamWaitEvent(side, ev_scored_[b].get(), 0));
    const ChunkScores chunk{sbuf[b], half_out, rc, rc, r0, ws_.row_sq, l2_, gathered ? schedule->order : nullptr,
                            gathered ? schedule->spans : nullptr};
    const ChunkQueries cq{qmap, masks, seeded};
    if (seeded) {
      // Queries whose threshold saw too few of the rows they may return for a chunk this long
      // (none yet, at first) raise it from a sample of this chunk; then every query collects it.
      // A schedule of every chunk for every query (filters spread over the shard) seeds from
      // the first chunk alone where the collect's flood guard bounds what the chunks up to the
      // next compaction can add to a pool (short chunks, k up to 256: a batch of 256 queries on
      // float16 storage); a seeding launch per chunk cost 1.2 ms of a 10M-row batch of 256
      // per-query filters.
      if (!schedule->full || c == 0 ||
          !guard_bounds_chunks(rc, half_out, k, static_cast<int>(chunks_per_compaction(c, rc)), pcap))
        seed_chunk(chunk, n, k, pools, cq, false, side);
      collect_chunk(chunk, n, k, pools, cq, side);
      // A chunk of some queries (merged, up to a buffer of rows) may let about k · stride rows
      // of a query seeded by it through: compacted after each. A chunk of every query is as
      // long as an unfiltered search's and follows its schedule (each compaction a kernel that
      // shares the multiprocessors with the next chunk's GEMM).
      if (more && (subset || compacts_after(c, rc))) compact_pools(batch, k, trigger, pools, side);
    } else if (c == 0) {
      seed_chunk(chunk, n, k, pools, cq, true, side);
    } else {
      collect_chunk(chunk, n, k, pools, cq, side);
      // Raise the thresholds after each of the first chunks, then every kCompactEvery chunks
      // (the pool holds pool_cap − trigger survivors in between; beyond: overflow → fallback).
      if (more && compacts_after(c, rc)) compact_pools(batch, k, trigger, pools, side);
    }
    CHECK_CUDA(cudaEventRecord(ev_pooled_[b].get(), side));
    last = b;
    ++c;
  }
  if (last >= 0) CHECK_CUDA(cudaStreamWaitEvent(stream, ev_pooled_[last].get(), 0));
  const int nvec = static_cast<int>(dpad_ * static_cast<std::int64_t>(elem) / 16);
  rescore_pools(dtype_, l2_, ws_.shard, nvec, ws_.qpad, k, pools, cap_, ws_.ids, batch, out, stream);
}

}  // namespace shardtopk::cuda_detail
