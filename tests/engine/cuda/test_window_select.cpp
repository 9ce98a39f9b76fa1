// kernels/window_select (the window pass of ranges, pages, ranks and counts between the batch-1
// scan and its select) against the float64 oracle: small-integer rows (exact scores, many ties),
// the whole order of each query computed on the host in float64, and windows at ties, at the
// edges (no row, one row, every row), pages after a tied row, a range with a page inside it;
// with deleted rows (the masked scan). The answer must be the oracle's rows inside the window,
// best first, ids and score bits, padded; the counts exact.

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cuda_test_support.hpp"
#include "engine/cuda/kernels/window_select.hpp"
#include "shardtopk/engine.hpp"

namespace shardtopk::test {
namespace {

/// The float64 order of one query over the live rows: ranking scores (l2: the negated squared
/// distance), best first by the ordering rule.
std::vector<Candidate> oracle_order(const std::vector<float>& rows, std::int64_t n, std::int64_t dim,
                                    const std::vector<std::int64_t>& ids, const float* q, bool l2,
                                    const std::vector<bool>& live) {
  std::vector<Candidate> out;
  for (std::int64_t r = 0; r < n; ++r) {
    if (!live[static_cast<size_t>(r)]) continue;
    double acc = 0;
    for (std::int64_t d = 0; d < dim; ++d) {
      const double x = rows[static_cast<size_t>(r * dim + d)], y = q[d];
      acc += l2 ? (y - x) * (y - x) : x * y;
    }
    out.push_back(Candidate{static_cast<float>(l2 ? -acc : acc), ids[static_cast<size_t>(r)]});
  }
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) { return better(a, b); });
  return out;
}

/// One query's window and what the oracle says of it: the rows inside (best first) and the count.
struct Expected {
  std::vector<Candidate> inside;
  std::int64_t within = 0;
};

Expected expected_of(const std::vector<Candidate>& order, const QueryWindow& w) {
  Expected e;
  for (const Candidate& c : order) {
    if (w.count && ahead_of_floor(w, c)) ++e.within;
    if (inside(w, c)) e.inside.push_back(c);
  }
  return e;
}

/// The scan's workspace with a window per search (as ScanRun, plus the window and its counts).
class WindowRun {
 public:
  WindowRun(const DeviceShard& shard, bool l2, int cap)
      : shard_(shard),
        plan_(cuda_detail::plan_scan_select(shard.dtype, l2, shard.n, shard.dim, shard.dpad, cap, ScanRows::kAuto,
                                            ScanSchedule::kAuto, true, multiprocessors())),
        scores_(static_cast<std::size_t>(shard.n)),
        cand_(static_cast<std::size_t>(cap)),
        dir_(std::vector<std::uint32_t>{0u}) {
    state_bytes_ = cuda_detail::kHistWords * 4 + 256 + sizeof(cuda_detail::Batch1State);
    state_.allocate(state_bytes_);
  }

  /// Candidates [k] of `query` (host, [dim]) inside window w; counts into *counts; live: the
  /// live mask (device, nullptr: every row), `scanned` reported as given.
  std::vector<Candidate> search(const float* query, int k, const QueryWindow& w, QueryCounts* counts,
                                const std::uint32_t* live, std::int64_t words, std::int64_t scanned) {
    DeviceArray<float> q(std::vector<float>(query, query + shard_.dim));
    DeviceArray<Candidate> out(static_cast<std::size_t>(k), 0xFF);
    DeviceArray<QueryCounts> c(1, 0);
    cuda_detail::ScanSelectArgs a;
    a.shard = shard_.rows.get();
    a.ids = shard_.ids.get();
    a.k = k;
    a.scores = scores_.get();
    a.hists = state_.as<std::uint32_t>();
    a.count = a.hists + cuda_detail::kHistWords;
    a.state = reinterpret_cast<cuda_detail::Batch1State*>(reinterpret_cast<char*>(a.hists) +
                                                          cuda_detail::kHistWords * 4 + 256);
    a.clear_bytes = state_bytes_;
    a.cand = cand_.get();
    a.dir = dir_.get();
    a.query = q.get();
    a.out = out.get();
    if (live) {
      a.masks.live = live;
      a.masks.words = words;
    }
    a.window.on = true;
    a.window.window = w;
    a.window.counts = c.get();
    a.window.scanned = scanned;
    cuda_detail::scan_select(plan_, a, nullptr);
    *counts = c.download()[0];
    return out.download();
  }

 private:
  const DeviceShard& shard_;
  cuda_detail::ScanSelectPlan plan_;
  DeviceArray<float> scores_;
  DeviceArray<cuda_detail::PoolEntry> cand_;
  DeviceArray<std::uint32_t> dir_;
  cuda_detail::DeviceBuffer state_;
  std::size_t state_bytes_ = 0;
};

struct WindowCase {
  Dtype dtype;
  Metric metric;
  std::int64_t n, dim;
  int k;
  bool deletes;
  std::string name() const {
    return std::string(dname(dtype)) + "_" + mname(metric) + "_n" + std::to_string(n) + "_d" + std::to_string(dim) +
           "_k" + std::to_string(k) + (deletes ? "_deletes" : "");
  }
};

std::vector<WindowCase> window_cases() {
  // n, dim, k   why
  const struct { std::int64_t n, dim; int k; } shapes[] = {
      {1025, 7, 10},    // a block + 1 row, a partial chunk
      {3000, 1, 100},   // D = 1: five distinct scores, every bound on a tie
      {20000, 100, 50}, // several select blocks, a level-1 histogram that needs refining
  };
  std::vector<WindowCase> out;
  for (Dtype dt : {Dtype::kFloat32, Dtype::kFloat16})
    for (Metric m : {Metric::kInnerProduct, Metric::kL2})
      for (const auto& s : shapes)
        for (bool del : {false, true}) out.push_back({dt, m, s.n, s.dim, s.k, del});
  return out;
}

class WindowSelectExact : public ::testing::TestWithParam<WindowCase> {};

TEST_P(WindowSelectExact, RowsInsideTheWindowAndCountsEqualTheOracle) {
  SHARDTOPK_SKIP_WITHOUT_GPU();
  use_test_device();
  const WindowCase& c = GetParam();
  const bool l2 = c.metric == Metric::kL2;
  const std::vector<float> rows = small_ints(static_cast<size_t>(c.n * c.dim), 500 + c.n + c.dim, -2, 2);
  const std::vector<std::int64_t> ids = shuffled_ids(c.n, 600 + c.n);
  const DeviceShard shard(rows, c.n, c.dim, c.dtype, ids);
  WindowRun run(shard, l2, cap_for(1024));
  // deletes: every 7th row dead (the masked scan writes −inf for them)
  std::vector<bool> live(static_cast<size_t>(c.n), true);
  const std::int64_t words = (c.n + 31) / 32;
  std::vector<std::uint32_t> mask(static_cast<size_t>(words), 0u);
  for (std::int64_t r = 0; r < c.n; ++r) {
    live[static_cast<size_t>(r)] = !c.deletes || r % 7 != 3;
    if (live[static_cast<size_t>(r)]) mask[static_cast<size_t>(r >> 5)] |= 1u << (r & 31);
  }
  const DeviceArray<std::uint32_t> d_mask(mask);
  const std::int64_t live_rows = std::count(live.begin(), live.end(), true);
  const std::vector<float> queries = small_ints(static_cast<size_t>(3 * c.dim), 700 + c.dim, -2, 2);
  for (int qi = 0; qi < 3; ++qi) {
    const float* q = queries.data() + qi * c.dim;
    const std::vector<Candidate> order = oracle_order(rows, c.n, c.dim, ids, q, l2, live);
    const auto m = static_cast<std::int64_t>(order.size());
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<std::pair<std::string, QueryWindow>> windows;
    auto range = [&](const std::string& name, float bound) {
      QueryWindow w;
      w.floor = Candidate{bound, kPadId};
      w.count = 1;
      windows.push_back({name, w});
    };
    auto page = [&](const std::string& name, std::int64_t j) {
      QueryWindow w;
      w.after = order[static_cast<size_t>(j)];
      windows.push_back({name, w});
    };
    range("range at the best", order[0].score);
    range("range at the 41st (a tie)", order[static_cast<size_t>(std::min<std::int64_t>(40, m - 1))].score);
    range("range at the worst (every row)", order.back().score);
    range("range above the best (no row)", order[0].score + 1.0f);
    range("range at -inf", -inf);
    page("page after the best", 0);
    page("page after the 18th", std::min<std::int64_t>(17, m - 1));
    page("page after the next to last (one row)", m - 2);
    page("page after the last (no row)", m - 1);
    {
      QueryWindow w;  // a range with a page inside it, counted
      w.after = order[5];
      w.floor = Candidate{order[static_cast<size_t>(std::min<std::int64_t>(60, m - 1))].score, kPadId};
      w.count = 1;
      windows.push_back({"range from the 61st, page after the 6th", w});
    }
    {
      QueryWindow w;  // rank-style: the rows strictly ahead of a (score, id) in the middle
      w.floor = order[static_cast<size_t>(m / 2)];
      w.count = 1;
      windows.push_back({"rows ahead of the middle row", w});
    }
    windows.push_back({"no window (counts only)", QueryWindow{}});
    for (const auto& [name, w] : windows) {
      const std::string what = c.name() + " query " + std::to_string(qi) + " " + name;
      QueryCounts counts;
      const std::vector<Candidate> got =
          run.search(q, c.k, w, &counts, c.deletes ? d_mask.get() : nullptr, words, live_rows);
      const Expected e = expected_of(order, w);
      const std::size_t kk = std::min<std::size_t>(static_cast<std::size_t>(c.k), e.inside.size());
      std::vector<Candidate> want(e.inside.begin(), e.inside.begin() + static_cast<std::ptrdiff_t>(kk));
      want.resize(static_cast<size_t>(c.k), pad_candidate());
      expect_same_candidates(got, want, what);
      EXPECT_EQ(counts.passing, live_rows) << what;
      EXPECT_EQ(counts.scanned, live_rows) << what;
      EXPECT_EQ(counts.within, e.within) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Gpu, WindowSelectExact, ::testing::ValuesIn(window_cases()),
                         [](const ::testing::TestParamInfo<WindowCase>& i) { return i.param.name(); });

}  // namespace
}  // namespace shardtopk::test
