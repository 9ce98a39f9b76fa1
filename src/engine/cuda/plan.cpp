// The CUDA engine's arena layout (host code).

#include "engine/cuda/plan.hpp"

#include <algorithm>

#include "engine/cuda/kernels/filter_table.cuh"
#include <limits>

#include "shardtopk/error.hpp"

namespace shardtopk::cuda_detail {
namespace {

constexpr std::uint64_t kAlign = 256;
constexpr std::uint64_t kMinScratch = 4ull << 20;    // upload staging at least

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

}  // namespace

int cand_cap(const EngineLimits& lim) { return std::max(4096, next_pow2(2LL * lim.k_max)); }
std::int64_t pool_cap(const EngineLimits& lim) { return 4LL * cand_cap(lim); }

std::size_t rescore_smem_bytes(const EngineLimits& lim) {
  constexpr std::size_t kRescoreOwnSmem = 24 << 10;
  return static_cast<std::size_t>(cand_cap(lim)) * (sizeof(float) + sizeof(std::int64_t)) + kRescoreOwnSmem;
}

std::int64_t padded_dim(std::int64_t dim, Dtype d) {
  const std::int64_t v = 16 / static_cast<std::int64_t>(dtype_bytes(d));
  return (dim + v - 1) / v * v;
}

void check_shape(std::int64_t rows, std::int64_t dim, const EngineLimits& lim) {
  SHARDTOPK_EXPECTS(rows >= 0, "CUDA engine: shard rows must be >= 0 (got ", rows, ")");
  SHARDTOPK_EXPECTS(rows <= std::numeric_limits<std::int32_t>::max(), "CUDA engine: a shard holds at most ",
                    std::numeric_limits<std::int32_t>::max(), " rows (got ", rows, "); add ranks");
  SHARDTOPK_EXPECTS(dim >= 1, "CUDA engine: dimension must be >= 1 (got ", dim, ")");
  SHARDTOPK_EXPECTS(dim <= (1 << 20), "CUDA engine: dimension must be <= ", (1 << 20), " (got ", dim, ")");
  SHARDTOPK_EXPECTS(lim.batch_max >= 1, "CUDA engine: batch_max must be >= 1 (got ", lim.batch_max, ")");
  SHARDTOPK_EXPECTS(lim.batch_max <= 65535, "CUDA engine: batch_max must be <= 65535 (got ", lim.batch_max, ")");
  SHARDTOPK_EXPECTS(lim.k_max >= 1, "CUDA engine: k_max must be >= 1 (got ", lim.k_max, ")");
  SHARDTOPK_EXPECTS(cand_cap(lim) <= kMaxCandCap, "CUDA engine: search.k_max=", lim.k_max, " is above its limit of ",
                    kMaxCandCap / 2, " (the final sort keeps 2 x k_max candidates in shared memory)");
}

Plan make_plan(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& lim) {
  check_shape(rows, dim, lim);
  const std::uint64_t bmax = static_cast<std::uint64_t>(lim.batch_max);
  const std::uint64_t urows = static_cast<std::uint64_t>(rows);
  const std::uint64_t elem = dtype_bytes(dtype);
  Plan p;
  p.dpad = padded_dim(dim, dtype);
  const std::uint64_t dpad = static_cast<std::uint64_t>(p.dpad);
  std::uint64_t off = 0;
  auto take = [&off](std::uint64_t bytes) {
    const std::uint64_t at = off;
    off = round_up_u(off + bytes, kAlign);
    return at;
  };
  p.off_shard = take(mul_bytes(mul_bytes(urows, dpad), elem));
  p.off_ids = take(mul_bytes(urows, 8));
  p.off_row_sq = take(mul_bytes(urows, 4));  // used by l2; kept for every metric so plans match
  p.shard_bytes = off;
  p.off_qpad = take(mul_bytes(mul_bytes(bmax, dpad), 4));
  p.off_qhat = take(mul_bytes(mul_bytes(bmax, dpad), elem));
  p.off_qinfo = take(mul_bytes(bmax, sizeof(QueryInfo)));
  p.off_status = take(4 * sizeof(unsigned long long));
  // hists … state: one block, zeroed by one memset before each batch-1 scan (select_state_bytes)
  p.off_hists = take(kHistWords * 4);
  p.off_counts = take(mul_bytes(bmax, 4));
  p.off_overflow = take(mul_bytes(bmax, 4));
  p.off_thr = take(mul_bytes(bmax, 4));
  p.off_state = take(sizeof(Batch1State));
  p.off_pool = take(mul_bytes(mul_bytes(bmax, static_cast<std::uint64_t>(pool_cap(lim))), sizeof(PoolEntry)));
  std::uint64_t chunk_budget = kChunkBudget;
  if (dtype == Dtype::kFloat16 && bmax > static_cast<std::uint64_t>(kLongChunkBatch))
    chunk_budget = std::max(chunk_budget, std::min<std::uint64_t>(bmax, kLongChunkBatchMax) *
                                              static_cast<std::uint64_t>(kMinHalfChunkRows) * 2);
  p.sbuf_bytes = round_up_u(std::min<std::uint64_t>(chunk_budget, mul_bytes(mul_bytes(bmax, urows), 4)), kAlign);
  // Filtered scans write whole summary blocks of compact scores.
  p.blocks = (rows + kFilterBlockRows - 1) / kFilterBlockRows;
  const std::uint64_t ublocks = static_cast<std::uint64_t>(p.blocks);
  const std::uint64_t block_rows = mul_bytes(ublocks, static_cast<std::uint64_t>(kFilterBlockRows));
  // A few-query search (2 ≤ batch ≤ few_queries) writes every query's exact scores [batch, rows].
  p.few_queries = bmax >= 2 && rows > 0 ? static_cast<int>(std::min<std::uint64_t>(kFewQueries, bmax)) : 0;
  const std::uint64_t few_scores = mul_bytes(mul_bytes(static_cast<std::uint64_t>(p.few_queries), urows), 4);
  p.scores_bytes = std::max<std::uint64_t>({mul_bytes(block_rows, 4), 2 * p.sbuf_bytes, kMinScratch, few_scores,
                                            mul_bytes(static_cast<std::uint64_t>(dim), 4)});
  p.off_scores = take(p.scores_bytes);
  p.off_cublas = take(rows > 0 ? kCublasWorkspace : 0);
  // Filters and deletes (after everything the unfiltered searches touch).
  p.mask_words = (rows + 31) / 32;
  const std::uint64_t words = static_cast<std::uint64_t>(p.mask_words);
  p.off_masks = take(mul_bytes(mul_bytes(static_cast<std::uint64_t>(std::max(lim.max_filters, 1)), words), 4));
  p.off_mask_index = take(mul_bytes(bmax, 4));
  p.off_query_filter = take(mul_bytes(bmax, sizeof(QueryFilter)));
  p.off_live = take(mul_bytes(words, 4));
  p.off_programs = take(kFilterProgramBytes);
  const std::uint64_t filters = static_cast<std::uint64_t>(std::max(lim.max_filters, 1));
  p.off_flags = take(mul_bytes(filters, ublocks));
  p.off_cand = take(mul_bytes(mul_bytes(filters, ublocks), 4));
  p.off_fstats = take(mul_bytes(filters, sizeof(FilterStats)));
  p.off_cids = take(mul_bytes(block_rows, 8));
  p.off_row_list = take(mul_bytes(urows, 4));
  p.off_qsub = take(mul_bytes(mul_bytes(bmax, dpad), elem));
  p.off_chunk_rows = take(static_cast<std::uint64_t>(kScheduleChunks + 1) * 8);
  p.off_chunk_act = take(static_cast<std::uint64_t>(kScheduleActBytes));
  p.off_qmap = take(static_cast<std::uint64_t>(kScheduleQueries) * 4);
  p.off_seen = take(mul_bytes(bmax, 4));
  p.off_few = take(mul_bytes(static_cast<std::uint64_t>(p.few_queries), sizeof(FewQueryState)));
  p.total = off;
  p.table_bytes = DeviceFilterTableStorage::bytes_for(rows, lim.attribute_columns);
  return p;
}

Workspace Plan::carve(void* arena, bool l2) const {
  char* base = static_cast<char*>(arena);
  Workspace w;
  w.shard = base + off_shard;
  w.ids = reinterpret_cast<std::int64_t*>(base + off_ids);
  w.row_sq = l2 ? reinterpret_cast<float*>(base + off_row_sq) : nullptr;
  w.qpad = reinterpret_cast<float*>(base + off_qpad);
  w.qhat = base + off_qhat;
  w.qinfo = reinterpret_cast<QueryInfo*>(base + off_qinfo);
  w.status = reinterpret_cast<unsigned long long*>(base + off_status);
  w.hists = reinterpret_cast<std::uint32_t*>(base + off_hists);
  w.counts = reinterpret_cast<std::uint32_t*>(base + off_counts);
  w.overflow = reinterpret_cast<std::uint32_t*>(base + off_overflow);
  w.thr = reinterpret_cast<float*>(base + off_thr);
  w.state = reinterpret_cast<Batch1State*>(base + off_state);
  w.pool = reinterpret_cast<PoolEntry*>(base + off_pool);
  w.scores = reinterpret_cast<float*>(base + off_scores);
  w.cublas = base + off_cublas;
  w.masks = reinterpret_cast<std::uint32_t*>(base + off_masks);
  w.mask_index = reinterpret_cast<std::int32_t*>(base + off_mask_index);
  w.query_filter = reinterpret_cast<QueryFilter*>(base + off_query_filter);
  w.live = reinterpret_cast<std::uint32_t*>(base + off_live);
  w.programs = reinterpret_cast<std::uint8_t*>(base + off_programs);
  w.mask_words = mask_words;
  w.blocks = blocks;
  w.flags = reinterpret_cast<std::uint8_t*>(base + off_flags);
  w.cand = reinterpret_cast<std::int32_t*>(base + off_cand);
  w.fstats = reinterpret_cast<FilterStats*>(base + off_fstats);
  w.cids = reinterpret_cast<std::int64_t*>(base + off_cids);
  w.row_list = reinterpret_cast<std::int32_t*>(base + off_row_list);
  w.qsub = base + off_qsub;
  w.chunk_rows = reinterpret_cast<std::int64_t*>(base + off_chunk_rows);
  w.chunk_act = reinterpret_cast<std::uint8_t*>(base + off_chunk_act);
  w.qmap = reinterpret_cast<std::int32_t*>(base + off_qmap);
  w.seen = reinterpret_cast<std::uint32_t*>(base + off_seen);
  w.few = few_queries > 0 ? reinterpret_cast<FewQueryState*>(base + off_few) : nullptr;
  return w;
}

}  // namespace shardtopk::cuda_detail

namespace shardtopk {

std::uint64_t cuda_engine_device_bytes(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& limits) {
  const cuda_detail::Plan p = cuda_detail::make_plan(rows, dim, dtype, limits);
  return p.total + p.table_bytes;
}

}  // namespace shardtopk
