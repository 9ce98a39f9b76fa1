// The float64 oracle. Deliberately naive and independent of the engines: no shared scoring
// code, no blocking, no SIMD; a sort with a float64 restatement of the ordering rule.
#include "tools/oracle.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <thread>
#include <unordered_map>

#include "shardtopk/error.hpp"

namespace shardtopk::oracle {

double score(Metric m, const float* q, const float* x, std::int64_t dim) {
  double acc = 0, qq = 0, xx = 0;
  for (std::int64_t d = 0; d < dim; ++d) {
    const double a = q[d], b = x[d];
    if (m == Metric::kL2) {
      acc += (a - b) * (a - b);
    } else {
      acc += a * b;
      qq += a * a;
      xx += b * b;
    }
  }
  if (m == Metric::kCosine) {
    SHARDTOPK_EXPECTS(qq > 0 && xx > 0, "oracle: zero-norm vector under cosine");
    return acc / (std::sqrt(qq) * std::sqrt(xx));
  }
  return acc;
}

bool better(Metric m, double sa, std::int64_t ia, double sb, std::int64_t ib) {
  if (sa == sb) return ia < ib;
  return m == Metric::kL2 ? sa < sb : sa > sb;
}

void topk(Metric m, const float* corpus, std::int64_t n, const std::int64_t* ids, const float* queries,
          std::int64_t nq, std::int64_t dim, int k, std::vector<std::int64_t>* out_ids,
          std::vector<double>* out_scores, int threads) {
  SHARDTOPK_EXPECTS(k >= 1 && k <= n, "oracle: k=", k, " outside [1, ", n, "]");
  out_ids->assign(static_cast<size_t>(nq * k), -1);
  out_scores->assign(static_cast<size_t>(nq * k), 0.0);
  auto work = [&](std::int64_t q0, std::int64_t q1) {
    std::vector<std::pair<double, std::int64_t>> all(static_cast<size_t>(n));
    for (std::int64_t q = q0; q < q1; ++q) {
      for (std::int64_t i = 0; i < n; ++i)
        all[i] = {score(m, queries + q * dim, corpus + i * dim, dim), ids ? ids[i] : i};
      std::partial_sort(all.begin(), all.begin() + k, all.end(), [m](const auto& a, const auto& b) {
        return better(m, a.first, a.second, b.first, b.second);
      });
      for (int j = 0; j < k; ++j) {
        (*out_ids)[q * k + j] = all[j].second;
        (*out_scores)[q * k + j] = all[j].first;
      }
    }
  };
  threads = std::max(1, threads);
  std::vector<std::thread> pool;
  const std::int64_t per = (nq + threads - 1) / threads;
  for (int t = 0; t < threads; ++t) {
    const std::int64_t a = t * per, b = std::min(nq, a + per);
    if (a < b) pool.emplace_back(work, a, b);
  }
  for (auto& th : pool) th.join();
}

double epsilon(double best, double kth) { return 1e-5 * (std::max(std::fabs(best), std::fabs(kth)) + 1.0); }

Check check_query(Metric m, const float* corpus, std::int64_t n, const std::int64_t* ids, const float* query,
                  std::int64_t dim, int k, const std::int64_t* got_ids, const float* got_scores,
                  const std::int64_t* true_ids, const double* true_scores) {
  Check c;
  const double eps = epsilon(true_scores[0], true_scores[k - 1]);
  const double kth = true_scores[k - 1];
  auto row_of = [&](std::int64_t id) -> std::int64_t {
    if (!ids) return (id >= 0 && id < n) ? id : -1;
    for (std::int64_t i = 0; i < n; ++i)
      if (ids[i] == id) return i;
    return -1;
  };
  std::vector<std::int64_t> seen(got_ids, got_ids + k);
  std::sort(seen.begin(), seen.end());
  c.duplicates = static_cast<int>(seen.end() - std::unique(seen.begin(), seen.end()));
  std::vector<double> s64(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) {
    const std::int64_t row = row_of(got_ids[j]);
    if (row < 0) {
      ++c.bad_scores;
      s64[j] = NAN;
      continue;
    }
    s64[j] = score(m, query, corpus + row * dim, dim);
    const bool hit = m == Metric::kL2 ? s64[j] <= kth + eps : s64[j] >= kth - eps;
    if (hit) ++c.hits;
    if (std::fabs(static_cast<double>(got_scores[j]) - s64[j]) > eps) ++c.bad_scores;
    if (got_ids[j] == true_ids[j]) {
      ++c.exact_id_matches;
    } else if (std::fabs(s64[j] - true_scores[j]) <= eps) {
      ++c.near_tie_swaps;
    }
    if (j > 0 && !std::isnan(s64[j - 1])) {
      const bool wrong = m == Metric::kL2 ? s64[j] < s64[j - 1] - eps : s64[j] > s64[j - 1] + eps;
      if (wrong) ++c.out_of_order;
    }
  }
  return c;
}

}  // namespace shardtopk::oracle
