#pragma once
/// @file device_check.hpp
/// The count check of bench_search / bench_scaling (CheckMode::kCount) on this rank's GPU: an
/// independent second pass that regenerates every row of the rank's range from (seed, global
/// row id), rounds it to the storage dtype, scores it in float64 against every sampled query and
/// counts, per sample, the rows that beat the returned K-th score by more than ε and are not
/// among the returned ids. It never reads the engine's resident shard.
///
/// No CUDA type appears here: device_check.cu implements it when SHARDTOPK_WITH_CUDA is on,
/// device_check_host.cpp (a stub answering "unavailable") otherwise.

#include <cstdint>
#include <string>

#include "shardtopk/shard_plan.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::bench {

/// What the device pass counts over. All pointers are host memory; nothing is kept after the call.
struct DeviceCountInput {
  std::uint64_t seed = 1;        ///< generator seed of the corpus (generated_value)
  Dtype dtype = Dtype::kFloat32; ///< storage dtype: rows are rounded to it (nearest even) before scoring
  Metric metric = Metric::kInnerProduct;  ///< kInnerProduct or kL2 (squared distance); not kCosine
  std::int64_t dim = 0;
  RowRange rows;                 ///< this rank's global rows [lo, hi)
  int device = 0;                ///< CUDA device ordinal the pass runs on
  const float* queries = nullptr;  ///< [nq, dim] row-major, the distinct sampled queries
  int nq = 0;
  int ns = 0;                    ///< number of samples
  const std::int32_t* sample_query = nullptr;  ///< [ns] query slot (0..nq-1) of each sample
  const double* thr = nullptr;   ///< [ns] returned K-th score, reported units (l2: squared distance)
  const double* eps = nullptr;   ///< [ns] oracle::epsilon of the sample
  /// Returned ids of sample i, ascending: sorted_ids[id_off[i] .. id_off[i + 1]). id_off is [ns + 1].
  const std::int64_t* sorted_ids = nullptr;
  const std::int64_t* id_off = nullptr;
};

/// Whether the device pass can run for `metric` on CUDA device `device` of this process.
/// False, with the reason in `why`, when built without CUDA, when no GPU is visible, when
/// `device` does not exist, or for cosine (the host path handles cosine).
bool device_count_available(Metric metric, int device, std::string* why);

/// Count, per sample i, the rows g in in.rows with float64 score s(g, query of i) beating
/// in.thr[i] by more than in.eps[i] (inner product: s > thr + eps; l2: s < thr - eps) and g not
/// in the sample's returned ids: exactly what the host scan of check_samples counts.
/// Before the first pass of each dtype in a process the device rounding is compared with the
/// host's (half.hpp) over every value the generator can produce, and a few regenerated rows of
/// the range with generate_rows; a difference throws Error naming the value or row.
/// @param[out] missed [ns] counts of this rank's rows.
/// @param[out] seconds wall time of the device pass (upload, kernel, download); may be null.
/// @returns false (and leaves `missed` alone) when device_count_available says no.
/// @throws Error on a failing CUDA call (naming the call, the device and the error).
bool device_count_missed(const DeviceCountInput& in, long long* missed, double* seconds);

}  // namespace shardtopk::bench
