#pragma once
/// @file ordering.hpp
/// The one ordering rule of shardtopk (DESIGN.md invariant 1) and the candidate layout.
///
/// Every selection, merge and oracle in the project ranks candidates with `better()` below;
/// there is no second copy. The header is plain C++ and compiles in host and device code
/// (under nvcc the functions are `__host__ __device__`), without including CUDA headers.

#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define SHARDTOPK_HD __host__ __device__ __forceinline__
#else
#define SHARDTOPK_HD inline
#endif

namespace shardtopk {

/// A (ranking score, global id) pair. `score` is always "higher is better": the similarity for
/// inner_product and cosine, the *negated* squared distance for l2 (it is negated back when
/// results are reported). 16 bytes with padding; the layout is shared by host and device code.
struct Candidate {
  float score;
  std::int64_t id;
};

/// Id of a padding slot (a shard with fewer rows than K). Padding has score -inf and this id,
/// so by the ordering rule it loses to every real candidate, including one whose score is -inf.
constexpr std::int64_t kPadId = std::numeric_limits<std::int64_t>::max();

/// The ordering rule: a is better than b when `score_a > score_b`, or the scores are equal and
/// `id_a < id_b` (ties go to the smaller *global* id).
///
/// Float edge cases: +0 and -0 compare equal (the id decides). NaN is never ranked: corpora and
/// queries are validated as finite before they reach any engine, so a NaN here is a bug.
SHARDTOPK_HD bool better(float score_a, std::int64_t id_a, float score_b, std::int64_t id_b) {
  return score_a > score_b || (score_a == score_b && id_a < id_b);
}

/// `better()` on candidates.
SHARDTOPK_HD bool better(const Candidate& a, const Candidate& b) {
  return better(a.score, a.id, b.score, b.id);
}

/// The padding candidate (loses to everything).
SHARDTOPK_HD Candidate pad_candidate() {
  return Candidate{-std::numeric_limits<float>::infinity(), kPadId};
}

/// A query's window in the total order (DESIGN.md invariant 11), in ranking scores (l2: the
/// negated squared distance). A row is inside when it comes strictly after `after` and strictly
/// ahead of `floor`; the default window holds every finite score. Pages (`search_after`) set
/// `after` to the last row of the previous page; a range (`min_score`, `max_distance`) sets
/// `floor` to (bound, kPadId), so that every row whose score equals the bound is inside; the rank
/// of a row (s, x) is 1 + the rows strictly ahead of floor (s, x). Rows ahead of `floor` are
/// what a window counts (QueryCounts::within), whether or not they come after `after`.
struct QueryWindow {
  Candidate after{std::numeric_limits<float>::infinity(), std::numeric_limits<std::int64_t>::min()};
  Candidate floor{-std::numeric_limits<float>::infinity(), kPadId};
  std::int32_t count = 0;  ///< 1: count the rows ahead of `floor` (QueryCounts::within)
  std::int32_t reserved = 0;
};

/// Whether candidate c is strictly ahead of w.floor (counted by the window).
SHARDTOPK_HD bool ahead_of_floor(const QueryWindow& w, const Candidate& c) { return better(c, w.floor); }

/// Whether candidate c lies inside window w (strictly after w.after, strictly ahead of w.floor).
SHARDTOPK_HD bool inside(const QueryWindow& w, const Candidate& c) { return better(w.after, c) && better(c, w.floor); }

}  // namespace shardtopk
