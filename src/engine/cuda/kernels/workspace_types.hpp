#pragma once
// Plain records that the CUDA engine's kernels keep in device memory, shared by the kernels,
// their launchers and the workspace plan (which sizes them). No CUDA headers.

#include <cstdint>

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

/// Per-query values prepared on the device for the batched path.
struct QueryInfo {
  float delta;      // bound on |approximate − exact| score (docs/EXACTNESS.md)
  float inv_scale;  // the GEMM's query was scaled by 1 / inv_scale (a power of two)
  float qsq;        // ‖q‖² rounded to float (l2)
  float pad;
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
};

/// Which rows a search may return (filtered searches, deleted rows), as bitmasks over the
/// shard's rows: bit (r % 32) of word r / 32 set = row r may be returned. A query q may return
/// row r when the live mask allows it (or there is none) and its filter's mask does (or it has
/// none: index[q] < 0). Device pointers; all nullptr: every row (the unmasked kernels).
struct RowMasks {
  const std::uint32_t* masks = nullptr;  ///< [filters, words] one mask per distinct filter
  std::int64_t words = 0;                ///< ceil(rows / 32)
  const std::int32_t* index = nullptr;   ///< [batch] query q's filter mask, or -1: no filter
  const std::uint32_t* live = nullptr;   ///< [words] rows not deleted, or nullptr: all

  /// Whether query q may return row r (device code; compiled where the caller includes CUDA).
#if defined(__CUDACC__)
  __device__ __forceinline__ bool allows(int q, std::int64_t r) const {
    const std::int64_t w = r >> 5;
    const std::uint32_t bit = 1u << (r & 31);
    if (live && (live[w] & bit) == 0u) return false;
    const std::int32_t m = index ? index[q] : -1;
    return m < 0 || (masks[static_cast<std::int64_t>(m) * words + w] & bit) != 0u;
  }
#endif
};

}  // namespace shardtopk::cuda_detail
