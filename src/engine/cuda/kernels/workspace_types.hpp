#pragma once
// Plain records that the CUDA engine's kernels keep in device memory, shared by the kernels,
// their launchers and the workspace plan (which sizes them). No CUDA headers (the device part of
// RowMasks, compiled by nvcc only, uses the filter evaluator).

#include <cstdint>

#include "shardtopk/ordering.hpp"

#if defined(__CUDACC__)
#include "engine/cuda/kernels/filter_program.cuh"
#endif

namespace shardtopk::cuda_detail {

/// The batch-1 radix select's histograms: 4096 bins of key bits 31..20, then 4096 of bits
/// 19..8, then 256 of bits 7..0, one after the other ([kHistWords] uint32).
constexpr int kHist1Bins = 4096;
constexpr int kHist2Bins = 4096;
constexpr int kHist3Bins = 256;
constexpr int kHistWords = kHist1Bins + kHist2Bins + kHist3Bins;

/// A candidate row of one query: its score (exact or approximate, by context) and shard row.
struct PoolEntry {
  float s;
  std::int32_t row;
};

/// Where an answer's ids and reported scores go (SearchEpilogue::Direct on the device, and the
/// split of a list): entry i gets candidate c's id and reported score (l2: negated); ids null:
/// no target.
struct ExportTarget {
  std::int64_t* ids = nullptr;
  float* scores = nullptr;
  bool l2 = false;

  SHARDTOPK_HD void write(std::int64_t i, const Candidate& c) const {
    ids[i] = c.id;
    scores[i] = l2 ? -c.score : c.score;
  }
  /// The target moved on by `entries` (a later query's row); no target stays none.
  SHARDTOPK_HD ExportTarget at(std::int64_t entries) const {
    return ids == nullptr ? *this : ExportTarget{ids + entries, scores + entries, l2};
  }
};

/// Per-query values prepared on the device for the batched path.
struct QueryInfo {
  float delta;      // bound on |approximate − exact| score (docs/EXACTNESS.md)
  float inv_scale;  // the GEMM's query was scaled by 1 / inv_scale (a power of two)
  float qsq;        // ‖q‖² rounded to float (l2)
  float pad;
#if defined(__CUDACC__)
  /// The approximate ranking score from the scaled query's product g with a row whose stored
  /// ‖x‖² is row_sq (read by l2 only): g · inv_scale, for l2 2·that − ‖x‖² − ‖q‖², in float
  /// (docs/EXACTNESS.md). The collect and the fused kernel both score with it.
  __device__ __forceinline__ float approx(float g, bool l2, float row_sq) const {
    const float dot = __fmul_rn(g, inv_scale);
    if (!l2) return dot;
    return __fsub_rn(__fsub_rn(__fmul_rn(2.0f, dot), row_sq), qsq);
  }
#endif
};

/// The batch-1 selection's progress (the last block of each kernel resolves the threshold from
/// the histograms so far; the next kernels read it).
struct Batch1State {
  std::uint32_t status;        // 0 resolved, 2 / 3: level 2 / 3 histogram needed
  std::uint32_t thr;           // resolved: candidates are keys ≥ thr (> thr with tie_overflow)
  std::uint32_t prefix;        // unresolved: the key prefix the next level refines
  std::uint32_t tie_overflow;  // more rows tie at the k-th key than fit; ties go to the slow path
  std::uint32_t need_ties;     // with tie_overflow: how many tied rows belong to the answer
  std::uint32_t done;          // blocks finished (reset by the last one)
  std::uint32_t claimed[2];    // select1's refinement levels 2 and 3: chunks of rows claimed
  std::uint32_t finished[2];   // ... and counted
  std::uint32_t list_rows;     // filtered scan: rows listed for the gathered scan
  std::uint32_t entries;       // filtered scan: compact entries written (its select's length)
};

/// The few-query search (scan_few.hpp): at most this many queries share one pass over the shard.
constexpr int kFewQueries = 8;

/// One query's selection state in a few-query search, laid out as the batch-1 search's (its
/// histograms, its candidate count, its Batch1State), one after the other for each query of the
/// batch and zeroed together before the scan.
struct FewQueryState {
  std::uint32_t hists[kHistWords];
  std::uint32_t count;
  Batch1State state;
};

/// One filter program's counts over a shard (device; zeroed before its block verdicts).
struct FilterStats {
  std::uint32_t cand_blocks;  ///< blocks whose summaries leave a passing row possible (its candidate list)
  std::uint32_t pass_rows;    ///< rows that pass (deleted rows included)
  std::uint32_t pad[2];
};

/// Summary blocks are kFilterBlockRows = 1024 rows (shardtopk/filter.hpp): block of row r.
constexpr int kFilterBlockShift = 10;

/// The filter programs of one search on the device (filter_blocks.hpp fills them): per program,
/// a flag per summary block, the list of its candidate blocks, its counts, and a row mask that
/// is valid in the blocks whose flag is 1 (the others are never read).
struct FilterState {
  std::int64_t blocks = 0;         ///< summary blocks of the shard
  std::int64_t mask_words = 0;     ///< ceil(rows / 32)
  std::uint8_t* flags = nullptr;   ///< [programs, blocks] 0: no row passes, 1: read the mask, 2: every row passes
  std::int32_t* cand = nullptr;    ///< [programs, blocks] the blocks whose flag was not 0 after the verdicts
  FilterStats* stats = nullptr;    ///< [programs]
  std::uint32_t* masks = nullptr;  ///< [programs, mask_words] bit (r % 32) of word r / 32: row r passes
};

/// A query's filter as the batched path's kernels read it, once per query: when the filter is
/// one range over one column (the commonest filter: a tenant, a date range), its column and
/// bounds, so that a row is decided by one load of its value; otherwise the program is
/// evaluated (RowMasks::allows_evaluating). The kernels ask about rows whose approximate score
/// reaches the threshold, after reading a tile of scores: a program's instructions, constants
/// and block flag behind the query's program index made each of those questions a chain of
/// about six dependent loads, which lengthened every thread block of the collect by their
/// latency (a batch of per-query scattered filters: 17 µs per chunk against 12 µs unmasked,
/// docs/PERFORMANCE.md, "Filtered search").
struct QueryFilter {
  enum Kind : std::int32_t { kNone = 0, kIntRange = 1, kRealRange = 2, kProgram = 3 };
  std::int32_t kind = kNone;  ///< kNone: no filter (the live mask alone)
  std::int32_t column = 0;    ///< attribute index, or kFilterIdColumn (ranges)
  std::uint64_t lo = 0;       ///< the range's bounds: int64 or float64 bit patterns (inclusive)
  std::uint64_t hi = 0;
};

/// Which rows a search may return (filtered searches, deleted rows), as bitmasks over the
/// shard's rows: bit (r % 32) of word r / 32 set = row r may be returned. A query q may return
/// row r when the live mask allows it (or there is none) and its filter does (or it has none:
/// index[q] < 0). A filter's block flag decides whole blocks (0: none, 2: all) and sends the
/// others to its mask, or, with `programs`, to the program itself, evaluated for that row when
/// asked (the batched path asks only for rows whose approximate score reaches the threshold: a
/// batch of per-query filters needs no masks). Device pointers; all nullptr: every row (the
/// unmasked kernels).
struct RowMasks {
  const std::uint32_t* masks = nullptr;  ///< [filters, words] one mask per filter program
  std::int64_t words = 0;                ///< ceil(rows / 32)
  const std::int32_t* index = nullptr;   ///< [batch] query q's filter program, or -1: no filter
  const std::uint32_t* live = nullptr;   ///< [words] rows not deleted, or nullptr: all
  const std::uint8_t* flags = nullptr;   ///< [filters, blocks] FilterState::flags (with masks)
  std::int64_t blocks = 0;
  const std::uint8_t* programs = nullptr;    ///< packed programs: evaluate flag-1 blocks' rows (no masks)
  const std::uint64_t* values = nullptr;     ///< with programs: DeviceFilterTable::values
  const std::int64_t* global_ids = nullptr;  ///< with programs: DeviceFilterTable::global_ids
  std::int64_t table_rows = 0;               ///< with programs: DeviceFilterTable::rows
  const QueryFilter* query_filter = nullptr; ///< [batch] with programs: each query's filter, for filter_of

#if defined(__CUDACC__)
  /// Whether query q may return row r by the live mask and the masks alone (device code,
  /// compiled where the caller includes CUDA; the batch-1 scan of deleted rows). Flags and
  /// programs are not read: a filter's mask must be complete.
  __device__ __forceinline__ bool allows(int q, std::int64_t r) const {
    const std::int64_t w = r >> 5;
    const std::uint32_t bit = 1u << (r & 31);
    if (live && (live[w] & bit) == 0u) return false;
    const std::int32_t m = index ? index[q] : -1;
    return m < 0 || (masks[static_cast<std::int64_t>(m) * words + w] & bit) != 0u;
  }

  /// Whether query q may return row r: the live mask, then the filter's block flag, then its
  /// mask or, when `programs` is set, its program evaluated on the row (keep it off hot paths:
  /// a call site that asks for every row pays the evaluator's registers).
  __device__ bool allows_evaluating(int q, std::int64_t r) const {
    int m;
    const int f = decide(q, r, &m);
    if (f >= 0) return f != 0;
    if (programs == nullptr) return (masks[static_cast<std::int64_t>(m) * words + (r >> 5)] & (1u << (r & 31))) != 0u;
    DeviceFilterTable t;
    t.rows = table_rows;
    t.values = values;
    t.global_ids = global_ids;
    const ProgramView p = program_at(programs, m);
    return eval_row(t, p, p.ops, nullptr, r);
  }

  /// Query q's filter for allows_with (one load; read it before the scores it will judge, so
  /// that the two loads overlap). Without query_filter: the program behind index[q], if any.
  __device__ __forceinline__ QueryFilter filter_of(int q) const {
    if (query_filter) return query_filter[q];
    QueryFilter f;
    f.kind = index ? QueryFilter::kProgram : QueryFilter::kNone;
    return f;
  }

  /// Whether query q, whose filter_of is f, may return row r: allows_evaluating's answer, a
  /// range decided by one load of the row's value (and one of its live word) instead of the
  /// program's chain. The block flags are not read: they only ever agree with the row's value.
  __device__ __forceinline__ bool allows_with(const QueryFilter& f, int q, std::int64_t r) const {
    if (f.kind == QueryFilter::kProgram) return allows_evaluating(q, r);
    const bool live_row = alive(r);
    if (f.kind == QueryFilter::kNone) return live_row;
    const bool in = passes_range(f, range_value(f, r));  // loaded whether or not the row is live
    return live_row && in;
  }

  /// Whether row r is not deleted.
  __device__ __forceinline__ bool alive(std::int64_t r) const {
    return live == nullptr || ((live[r >> 5] >> (r & 31)) & 1u) != 0u;
  }

  /// Row r's value in the column of range f (kIntRange / kRealRange), as its bit pattern: the
  /// load of allows_with, apart so that a caller can issue several before it tests any.
  __device__ __forceinline__ std::uint64_t range_value(const QueryFilter& f, std::int64_t r) const {
    return f.column == kFilterIdColumn ? static_cast<std::uint64_t>(global_ids[r])
                                       : values[static_cast<std::int64_t>(f.column) * table_rows + r];
  }

  /// Whether the value bits (range_value) lie in range f (kIntRange / kRealRange).
  __device__ static __forceinline__ bool passes_range(const QueryFilter& f, std::uint64_t bits) {
    return f.kind == QueryFilter::kIntRange
               ? filter_detail::in_range(static_cast<std::int64_t>(bits), static_cast<std::int64_t>(f.lo),
                                         static_cast<std::int64_t>(f.hi))
               : filter_detail::in_range(__longlong_as_double(static_cast<long long>(bits)),
                                         __longlong_as_double(static_cast<long long>(f.lo)),
                                         __longlong_as_double(static_cast<long long>(f.hi)));
  }

  /// 0 / 1: decided by the live mask, the absence of a filter or the block flag; −1: row r of
  /// program *m's mask (or program) decides.
  __device__ __forceinline__ int decide(int q, std::int64_t r, int* m) const {
    if (live && (live[r >> 5] & (1u << (r & 31))) == 0u) return 0;
    *m = index ? index[q] : -1;
    if (*m < 0) return 1;
    if (flags == nullptr) return -1;
    const std::uint8_t f = flags[static_cast<std::int64_t>(*m) * blocks + (r >> kFilterBlockShift)];
    return f == 1u ? -1 : f == 2u ? 1 : 0;
  }
#endif
};

}  // namespace shardtopk::cuda_detail
