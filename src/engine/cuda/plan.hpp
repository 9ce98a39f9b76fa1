#pragma once
// The CUDA engine's device memory: ONE allocation (the arena) made at construction, laid out
// by make_plan(), which cuda_engine_device_bytes() also calls, so that `shardtopk plan`
// predicts info().resident_bytes exactly. A search allocates nothing (DESIGN.md invariant 5).
//
//   shard    [rows, dpad]            storage dtype, rows zero-padded to dpad (16-byte chunks)
//   ids      [rows]                  int64 global ids
//   row_sq   [rows]                  float ‖x‖² (l2 only; the batched path's approximate score)
//   qpad     [batch_max, dpad]       float32 zero-padded queries (exact arithmetic)
//   qhat     [batch_max, dpad]       storage dtype, scaled queries for the tensor-core GEMM
//   qinfo    [batch_max]             per-query Δ, scale, ‖q‖²
//   status   [4]                     status words (kStatus*)
//   hists, counts, overflow, thr, state    selection state (zeroed together before a batch-1 scan)
//   pool     [batch_max, pool_cap]   (score, row) candidates per query
//   scores   [max(rows, chunk)]      batch-1 exact scores / few-query exact scores [batch, rows] / batched GEMM output [B, R] ×2 / upload staging
//   cublas   32 MiB                  cuBLAS workspace (no allocation inside cuBLAS calls)
//   masks    [max_filters, rows/32]  row masks of a batch's distinct filters
//   mask_index [batch_max]           each query's filter mask (-1: none)
//   query_filter [batch_max]         each query's filter as the batched kernels read it (QueryFilter)
//   live     [rows/32]               rows not deleted (updates)
//   programs kFilterProgramBytes     the batch's compiled filter programs, packed
//   flags, cand, fstats [max_filters, blocks] / [max_filters]   block verdicts, candidate lists, counts
//   cids     [blocks × 1024]         the filtered scan's compact ids (its scores: `scores`)
//   row_list [rows]                  the gathered scan's rows
//   qsub     [batch_max, dpad]       storage dtype: the queries a chunk of a filtered batch GEMMs
//   chunk_rows, chunk_act, qmap      a filtered batch's chunk schedule (rows, activity, query lists)
//   few      [min(8, batch_max)]     a few-query search's selection states (its scores [batch, rows]: `scores`)
//
// The query, candidate and answer buffers of the data path are not here: the index allocates
// them (engine/space.hpp).

#include <cstddef>
#include <cstdint>

#include "engine/cuda/kernels/workspace_types.hpp"
#include "shardtopk/engine.hpp"

namespace shardtopk::cuda_detail {

constexpr std::uint64_t kCublasWorkspace = 32ull << 20;
/// Bytes of compiled filter programs one search may carry (packed: filter.hpp).
constexpr std::uint64_t kFilterProgramBytes = 16ull << 20;
constexpr int kMaxCandCap = 16384;  // final sort in shared memory: 16384 × 12 B
/// Batched GEMM output per chunk (one of two ping-pong buffers): L2-resident. 6/12/48 MB gave
/// 13.1k/18.1k/15.5k QPS against 20.5k at 10M × 768 float16, B = 256 (docs/PERFORMANCE.md,
/// "Batched path").
constexpr std::uint64_t kChunkBudget = 24ull << 20;
/// float16 batches of more than kLongChunkBatch queries GEMM at least this many rows per chunk
/// (the budget above would give 12,288 rows at B = 1,024): the exact k-NN graph of 1M × 768
/// float16 rows at B = 1,024 took 4.43–4.50 s against 4.56–4.57 s with 12,288-row chunks
/// (docs/PERFORMANCE.md, "Exact k-NN graph"). Buffers are sized for it up to kLongChunkBatchMax
/// queries (at most 2 × 4,096 × 24,576 × 2 bytes = 384 MiB).
constexpr std::int64_t kMinHalfChunkRows = 24576;
constexpr std::int64_t kLongChunkBatch = 512;
constexpr std::int64_t kLongChunkBatchMax = 4096;
/// A filtered batch's chunk schedule: at most this many chunks get per-chunk query lists (more:
/// every chunk GEMMs every query), and at most kScheduleQueries list entries together.
constexpr std::int64_t kScheduleChunks = 4096;
constexpr std::int64_t kScheduleQueries = 1 << 20;
constexpr std::int64_t kScheduleActBytes = 4 << 20;  // chunk activity: programs × chunks

/// The words of the status area; kStatusOk: a minimum that nothing lowered.
constexpr unsigned long long kStatusOk = ~0ull;
constexpr int kStatusValues = 0;    // first bad query / first stored value that overflows (min)
constexpr int kStatusZeroNorm = 1;  // first zero-norm corpus row (cosine, generated shards)
constexpr int kStatusMaxSq = 2;     // bits of the largest ‖x‖² (max)
constexpr int kStatusScanDir = 3;   // the batch-1 scan's direction (bit 0)

/// Candidates the final sort holds: 2 × k_max at least (ties and the filter's margin), a power
/// of two, at most kMaxCandCap (shared memory); pools hold 4 × as many.
int cand_cap(const EngineLimits& lim);
std::int64_t pool_cap(const EngineLimits& lim);

/// Shared memory per block (bytes) that the batched re-score needs: its final sort of
/// cand_cap(lim) (score, id) pairs beside a reserve of 24 KiB for its own (20,672 bytes on sm_90,
/// ptxas -v: its threshold select's histograms and scans). The engine refuses a device that offers
/// less, naming search.k_max.
std::size_t rescore_smem_bytes(const EngineLimits& lim);

/// Row length in elements, padded to 16 bytes of the storage type.
std::int64_t padded_dim(std::int64_t dim, Dtype d);

/// Pointers into an arena laid out by a Plan (device addresses).
struct Workspace {
  void* shard = nullptr;
  std::int64_t* ids = nullptr;
  float* row_sq = nullptr;  // nullptr unless l2
  float* qpad = nullptr;
  void* qhat = nullptr;
  QueryInfo* qinfo = nullptr;
  unsigned long long* status = nullptr;
  std::uint32_t* hists = nullptr;
  std::uint32_t* counts = nullptr;
  std::uint32_t* overflow = nullptr;
  float* thr = nullptr;
  Batch1State* state = nullptr;
  PoolEntry* pool = nullptr;
  float* scores = nullptr;
  void* cublas = nullptr;
  std::uint32_t* masks = nullptr;
  std::int32_t* mask_index = nullptr;
  QueryFilter* query_filter = nullptr;  // [batch_max] each query's filter as the batched kernels read it
  std::uint32_t* live = nullptr;
  std::uint8_t* programs = nullptr;
  std::int64_t mask_words = 0;
  std::int64_t blocks = 0;            // summary blocks (kFilterBlockRows rows)
  std::uint8_t* flags = nullptr;      // [max_filters, blocks]
  std::int32_t* cand = nullptr;       // [max_filters, blocks]
  FilterStats* fstats = nullptr;      // [max_filters]
  std::int64_t* cids = nullptr;       // [blocks × 1024]
  std::int32_t* row_list = nullptr;   // [rows]
  void* qsub = nullptr;               // [batch_max, dpad] storage dtype
  std::int64_t* chunk_rows = nullptr; // [kScheduleChunks + 1] chunk starts, then the end
  std::uint8_t* chunk_act = nullptr;  // [kScheduleActBytes]: [programs, chunks]
  std::int32_t* qmap = nullptr;       // [kScheduleQueries]
  std::uint32_t* seen = nullptr;      // [batch_max] a filtered batch's rows seen per threshold
  FewQueryState* few = nullptr;       // [few_queries] a few-query search's selection states
};

struct Plan {
  std::int64_t dpad = 0;
  std::uint64_t off_shard = 0, off_ids = 0, off_row_sq = 0, off_qpad = 0, off_qhat = 0, off_qinfo = 0,
                off_status = 0, off_hists = 0, off_counts = 0, off_overflow = 0, off_thr = 0, off_state = 0,
                off_pool = 0, off_scores = 0, off_cublas = 0, off_masks = 0, off_mask_index = 0, off_query_filter = 0, off_live = 0,
                off_programs = 0, off_flags = 0, off_cand = 0, off_fstats = 0, off_cids = 0, off_row_list = 0,
                off_qsub = 0, off_chunk_rows = 0, off_chunk_act = 0, off_qmap = 0, off_seen = 0, off_few = 0;
  std::int64_t mask_words = 0, blocks = 0;
  int few_queries = 0;            // the few-query search's largest batch (0: none)
  std::uint64_t scores_bytes = 0;
  std::uint64_t sbuf_bytes = 0;   // one batched GEMM output buffer (two, ping-pong)
  std::uint64_t shard_bytes = 0;  // shard + ids + row norms
  std::uint64_t total = 0;        // the arena
  std::uint64_t table_bytes = 0;  // the attribute table's own allocation (DeviceFilterTableStorage)

  /// Bytes from hists to the end of state: the batch-1 scan's per-search state.
  std::uint64_t select_state_bytes() const { return off_pool - off_hists; }
  Workspace carve(void* arena, bool l2) const;
};

/// Checks the shard's shape and the limits. @throws Error naming the value.
void check_shape(std::int64_t rows, std::int64_t dim, const EngineLimits& lim);

/// The arena layout for a shard (after check_shape). @throws Error when a size overflows.
Plan make_plan(std::int64_t rows, std::int64_t dim, Dtype dtype, const EngineLimits& lim);

}  // namespace shardtopk::cuda_detail
