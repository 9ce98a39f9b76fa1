// Queries over the total order through ShardedIndex under MPI (one binary, registered in CTest
// for P = 1, 2, 4 on CPU ranks; with SHARDTOPK_TEST_ENGINE=cuda, on GPUs): ranges with their
// exact counts, pages after a (score, id), the rank of given ids, counts alone, and the stats
// every answer carries (DESIGN.md invariant 11).
//
// The reference is the whole corpus sorted by the float64 oracle (oracle::topk with k = N).
// Small-integer vectors make every score exact in float32 and give many ties, so ids, scores,
// totals and ranks must equal the oracle's exactly: bounds at a tie, bounds that pass no row, one
// row and every row; pages walked to the end (ties across page boundaries) equal one big top-k;
// ranks of the best, the worst and tied ids; all of it under a filter (after writes: test_updates).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "filter_support.hpp"
#include "filtered_oracle.hpp"
#include "mpi_gtest.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/ingest.hpp"
#include "shardtopk/shard_plan.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::HasSubstr;
using test::json;

int g_rank = 0, g_world = 1;

bool cuda_engine() {
  const char* eng = std::getenv("SHARDTOPK_TEST_ENGINE");
  return eng && std::string(eng) == "cuda";
}

// kN rows of kDim small integers in [-2, 2] (exact float32 scores, many ties); global ids a
// shuffled set of multiples of 3; attribute `tenant` = row % 5 (scattered over every shard).
constexpr std::int64_t kN = 3001, kDim = 8;
constexpr int kQ = 6;

struct Corpus {
  std::vector<float> rows, queries;
  std::vector<std::int64_t> ids;
  std::vector<AttributeColumn> columns;
  AttributeTable table;
};

const Corpus& corpus() {
  static const Corpus c = [] {
    Corpus c;
    c.rows = test::small_ints(static_cast<size_t>(kN * kDim), 901, -2, 2);
    c.queries = test::small_ints(static_cast<size_t>(kQ * kDim), 902, -2, 2);
    c.ids.resize(kN);
    for (std::int64_t r = 0; r < kN; ++r) c.ids[r] = 3 * r + 2;
    std::mt19937_64 rng(903);
    std::shuffle(c.ids.begin(), c.ids.end(), rng);
    AttributeColumn tenant{"tenant", AttributeType::kInt64, {}, {}};
    for (std::int64_t r = 0; r < kN; ++r) tenant.ints.push_back(r % 5);
    c.columns = {tenant};
    c.table = AttributeTable(c.columns, c.ids, 1);
    return c;
  }();
  return c;
}

std::unique_ptr<ShardedIndex> make_index(Metric m) {
  const Corpus& c = corpus();
  Config cfg;
  cfg.source = "test";
  cfg.corpus.path = "(in memory)";
  cfg.search.k_max = 64;
  cfg.search.batch_max = 16;
  cfg.search.max_filters = 4;
  cfg.engine.backend = cuda_engine() ? EngineBackend::kCuda : EngineBackend::kCpu;
  cfg.engine.threads = 2;
  cfg.comm.backend = cuda_engine() ? CommBackend::kAuto : CommBackend::kMpi;
  cfg.comm.timeout_s = 60;
  const RowRange r = shard_rows(kN, g_world, g_rank);
  std::vector<AttributeColumn> cols{AttributeColumn{"tenant", AttributeType::kInt64,
                                                    {c.columns[0].ints.begin() + r.lo, c.columns[0].ints.begin() + r.hi},
                                                    {}}};
  const AttributeTable t(std::move(cols), std::vector<std::int64_t>(c.ids.begin() + r.lo, c.ids.begin() + r.hi), 1);
  ShardInput in{c.rows.data() + r.lo * kDim, r.size(), kDim, c.ids.data() + r.lo};
  in.attributes = &t;
  return build_index(cfg, m, kN, r, in, make_mpi_communicator(cfg.comm.timeout_s));
}

// The whole order of query q over the rows passing `filter` (null: every row), by the oracle.
struct Order {
  std::vector<std::int64_t> ids;
  std::vector<double> scores;  // reported units
};

Order full_order(Metric m, int q, const json& filter) {
  const Corpus& c = corpus();
  const test::Subset s = test::passing_rows(c.rows, kN, kDim, c.ids.data(), [&](std::int64_t r) {
    return filter.is_null() || test::oracle_passes(filter, c.table, r);
  });
  Order o;
  if (s.n > 0)
    oracle::topk(m, s.rows.data(), s.n, s.ids.data(), c.queries.data() + q * kDim, 1, kDim, static_cast<int>(s.n),
                 &o.ids, &o.scores, 1);
  return o;
}

// Rows of `o` at or ahead of a reported-units bound (min_score, or max_distance for l2).
std::int64_t within(Metric m, const Order& o, double bound) {
  return std::count_if(o.scores.begin(), o.scores.end(), [&](double s) { return m == Metric::kL2 ? s <= bound : s >= bound; });
}

struct Answer {
  std::vector<std::int64_t> ids;
  std::vector<float> scores;
  std::vector<std::int32_t> counts;
  QueryStats stats;
};

// Collective: query q with k, its bounds and filter; meaningful on rank 0.
Answer ask(ShardedIndex& idx, int q, int k, const QueryBounds& b, const FilterProgram* filter) {
  Answer a;
  if (g_rank != 0) {
    idx.search(SearchBatch{}, nullptr, nullptr);
    return a;
  }
  a.ids.assign(static_cast<size_t>(k), -1);
  a.scores.assign(static_cast<size_t>(k), NAN);
  a.counts.assign(1, -1);
  const SearchBatch batch = idx.admit(corpus().queries.data() + q * kDim, 1, k, &filter, &b, true);
  idx.search(batch, a.ids.data(), a.scores.data(), a.counts.data(), &a.stats);
  a.ids.resize(static_cast<size_t>(a.counts[0]));
  a.scores.resize(static_cast<size_t>(a.counts[0]));
  return a;
}

// Expects `a` to be positions [from, from + a.ids.size()) of `o`, exactly.
void expect_slice(const Answer& a, const Order& o, std::size_t from, const std::string& what) {
  if (g_rank != 0) return;
  ASSERT_LE(from + a.ids.size(), o.ids.size()) << what;
  for (std::size_t j = 0; j < a.ids.size(); ++j) {
    EXPECT_EQ(a.ids[j], o.ids[from + j]) << what << " at " << from + j;
    EXPECT_EQ(static_cast<double>(a.scores[j]), o.scores[from + j]) << what << " at " << from + j;
  }
}

class OrderQueries : public ::testing::TestWithParam<Metric> {
 protected:
  static void SetUpTestSuite() {}
  Metric m() const { return GetParam(); }
};

// Ranges: a bound at a tie (every tied row inside, the limit cutting inside the tie), a bound
// past the best row (no row), the best score of a query whose best is unique (one row), the
// worst score (every row); totals exact past the limit.
TEST_P(OrderQueries, RangesAtTiesAndEdges) {
  auto idx = make_index(m());
  for (int q = 0; q < kQ; ++q) {
    const Order o = full_order(m(), q, nullptr);
    std::vector<double> bounds{o.scores[40], o.scores[0], o.scores.back()};
    bounds.push_back(m() == Metric::kL2 ? o.scores[0] - 1 : o.scores[0] + 1);
    for (double bound : bounds) {
      for (int limit : {1, 7, 64}) {
        QueryBounds b;
        b.has_bound = true;
        b.bound = static_cast<float>(bound);
        const Answer a = ask(*idx, q, limit, b, nullptr);
        if (g_rank != 0) continue;
        const std::int64_t total = within(m(), o, bound);
        const std::string what = "query " + std::to_string(q) + " bound " + std::to_string(bound) + " limit " +
                                 std::to_string(limit);
        EXPECT_EQ(a.stats.total, total) << what;
        EXPECT_EQ(a.stats.scanned, kN) << what;
        EXPECT_EQ(a.stats.passing, kN) << what;
        EXPECT_EQ(static_cast<std::int64_t>(a.ids.size()), std::min<std::int64_t>(limit, total)) << what;
        expect_slice(a, o, 0, what);
      }
    }
  }
}

// Pages of k after the previous page's last (score, id), walked to the end: their concatenation
// is the whole order (no row repeated or skipped, ties across page boundaries), filtered or not,
// and within a range (the total stays the range's on every page).
TEST_P(OrderQueries, PagesWalkTheWholeOrder) {
  auto idx = make_index(m());
  const json tenant = json::parse(R"({"in": {"tenant": [1, 3]}})");
  const FilterProgram prog = compile_filter(tenant, idx->info().schema);
  for (int q = 0; q < 2; ++q)
    for (const FilterProgram* f : {static_cast<const FilterProgram*>(nullptr), &prog}) {
      const Order o = full_order(m(), q, f ? tenant : json());
      for (int k : {64, 13}) {
        QueryBounds b;
        const bool ranged = k == 13;  // a range paged through: every row at or ahead of position 500
        if (ranged) {
          b.has_bound = true;
          b.bound = static_cast<float>(o.scores[500]);
        }
        const std::int64_t end = ranged ? within(m(), o, o.scores[500]) : static_cast<std::int64_t>(o.ids.size());
        std::size_t at = 0;
        int pages = 0;
        for (;;) {
          const Answer a = ask(*idx, q, k, b, f);
          int n = static_cast<int>(a.ids.size());
          MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
          const std::string what = "query " + std::to_string(q) + (f ? " filtered" : "") + " k " + std::to_string(k) +
                                   " page " + std::to_string(pages);
          expect_slice(a, o, at, what);
          if (g_rank == 0 && ranged) EXPECT_EQ(a.stats.total, end) << what;
          at += static_cast<std::size_t>(n);
          ++pages;
          if (n < k || pages > 400) break;
          if (g_rank == 0) {
            b.has_after = true;
            b.after_score = a.scores.back();
            b.after_id = a.ids.back();
          }
        }
        if (g_rank == 0) EXPECT_EQ(static_cast<std::int64_t>(at), end) << "query " << q << " k " << k;
      }
    }
}

// Ranks: the best id, the worst, ids tied with their neighbours, with and without a filter (an
// id outside the filter gets the rank it would have); unknown ids refused, naming the id.
TEST_P(OrderQueries, RanksOfBestWorstAndTiedIds) {
  auto idx = make_index(m());
  const json tenant = json::parse(R"({"eq": {"tenant": 2}})");
  const FilterProgram prog = compile_filter(tenant, idx->info().schema);
  for (int q = 0; q < 3; ++q)
    for (const FilterProgram* f : {static_cast<const FilterProgram*>(nullptr), &prog}) {
      const Order o = full_order(m(), q, f ? tenant : json());
      const Order all = full_order(m(), q, nullptr);
      // best and worst of the filtered order, then tied ids of the whole corpus (some outside
      // the filter), then the same id twice
      std::vector<std::int64_t> ids{o.ids.front(), o.ids.back()};
      for (std::size_t j = 1; j + 1 < all.ids.size() && ids.size() < 10; j += 97)
        if (all.scores[j] == all.scores[j - 1]) ids.push_back(all.ids[j]);
      ids.push_back(ids.front());
      const int n = static_cast<int>(ids.size());
      std::vector<std::int64_t> ranks(ids.size(), -1);
      std::vector<float> scores(ids.size(), NAN);
      const Corpus& c = corpus();
      if (g_rank == 0) {
        idx->rank(c.queries.data() + q * kDim, ids.data(), n, f, ranks.data(), scores.data());
      } else {
        idx->rank(nullptr, nullptr, 0, nullptr, nullptr, nullptr);
        continue;
      }
      for (int i = 0; i < n; ++i) {
        const std::size_t pos = static_cast<std::size_t>(std::find(all.ids.begin(), all.ids.end(), ids[i]) - all.ids.begin());
        const double s = all.scores[pos];
        // 1 + the filtered rows ahead of (s, id) in the order
        std::int64_t ahead = 0;
        for (std::size_t j = 0; j < o.ids.size(); ++j)
          ahead += oracle::better(m(), o.scores[j], o.ids[j], s, ids[i]) ? 1 : 0;
        EXPECT_EQ(ranks[static_cast<size_t>(i)], 1 + ahead) << "query " << q << " id " << ids[i] << (f ? " filtered" : "");
        EXPECT_EQ(static_cast<double>(scores[static_cast<size_t>(i)]), s) << "id " << ids[i];
      }
      if (!f) EXPECT_EQ(ranks[0], 1);
    }
  // an id no row has: refused on rank 0 naming it (lock-step followers are told of the refusal)
  const std::int64_t unknown[2] = {corpus().ids[5], 1};
  std::int64_t r2[2];
  float s2[2];
  if (g_rank == 0) {
    try {
      idx->rank(corpus().queries.data(), unknown, 2, nullptr, r2, s2);
      ADD_FAILURE() << "an unknown id was ranked";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("unknown id 1"));
    }
  } else {
    EXPECT_THROW(idx->rank(nullptr, nullptr, 0, nullptr, nullptr, nullptr), Error);
  }
  // the padding id (int64 max, which pads lists shorter than k) is no row's id either
  const std::int64_t pad[2] = {corpus().ids[5], kPadId};
  if (g_rank == 0) {
    try {
      idx->rank(corpus().queries.data(), pad, 2, nullptr, r2, s2);
      ADD_FAILURE() << "the padding id was ranked";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("unknown id " + std::to_string(kPadId)));
    }
  } else {
    EXPECT_THROW(idx->rank(nullptr, nullptr, 0, nullptr, nullptr, nullptr), Error);
  }
  // the index still answers
  const Answer a = ask(*idx, 0, 5, QueryBounds{}, nullptr);
  expect_slice(a, full_order(m(), 0, nullptr), 0, "after a refused rank");
}

// Bounds are admitted like every value: NaN and ±inf refused, naming the query and the value;
// stats without a bound report rows passing a filter and no total.
TEST_P(OrderQueries, BadBoundsAndStatsWithoutBound) {
  auto idx = make_index(m());
  if (g_rank == 0) {
    std::vector<QueryBounds> b(2);
    b[1].has_bound = true;
    b[1].bound = NAN;
    try {
      idx->admit(corpus().queries.data(), 2, 5, nullptr, b.data(), false);
      ADD_FAILURE() << "a NaN bound was admitted";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("query 1: "));
      EXPECT_THAT(e.what(), HasSubstr(m() == Metric::kL2 ? "max_distance nan" : "min_score nan"));
    }
    b[1] = QueryBounds{};
    b[0].has_after = true;
    b[0].after_score = std::numeric_limits<float>::infinity();
    EXPECT_THROW(idx->admit(corpus().queries.data(), 2, 5, nullptr, b.data(), false), Error);
  }
  const json tenant = json::parse(R"({"in": {"tenant": [0, 4]}})");
  const FilterProgram prog = compile_filter(tenant, idx->info().schema);
  const Answer a = ask(*idx, 1, 3, QueryBounds{}, &prog);
  if (g_rank == 0) {
    EXPECT_EQ(a.stats.total, -1);
    EXPECT_EQ(a.stats.scanned, kN);
    EXPECT_EQ(a.stats.passing, static_cast<std::int64_t>(full_order(m(), 1, tenant).ids.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Metrics, OrderQueries, ::testing::Values(Metric::kInnerProduct, Metric::kL2),
                         [](const ::testing::TestParamInfo<Metric>& p) {
                           return p.param == Metric::kL2 ? std::string("l2") : std::string("inner_product");
                         });

// A batch whose queries carry different windows, some without one (counts only): each query's
// answer and counts equal the same query searched alone, and the oracle's. On the CUDA engine
// this is the path that runs each windowed query through the batch-1 scan and the window pass;
// deleted rows (the live mask) are covered by test_updates.
TEST_P(OrderQueries, MixedWindowsInOneBatchMatchAlone) {
  auto idx = make_index(m());
  const json tenant = json::parse(R"({"in": {"tenant": [0, 2, 4]}})");
  const FilterProgram prog = compile_filter(tenant, idx->info().schema);
  constexpr int kB = 4, kK = 9;
  std::vector<QueryBounds> bounds(kB);
  std::vector<const FilterProgram*> filters{nullptr, &prog, nullptr, &prog};
  std::vector<Order> orders;
  for (int q = 0; q < kB; ++q) orders.push_back(full_order(m(), q, q % 2 ? tenant : json()));
  bounds[0].has_bound = true;  // a range whose bound sits on the 20th row
  bounds[0].bound = static_cast<float>(orders[0].scores[19]);
  bounds[1].has_after = true;  // the page after the 30th row of its filtered order
  bounds[1].after_score = static_cast<float>(orders[1].scores[29]);
  bounds[1].after_id = orders[1].ids[29];
  // query 2: no bound (counts only); query 3: a range with a page after its 5th row
  bounds[3].has_bound = true;
  bounds[3].bound = static_cast<float>(orders[3].scores[40]);
  bounds[3].has_after = true;
  bounds[3].after_score = static_cast<float>(orders[3].scores[4]);
  bounds[3].after_id = orders[3].ids[4];
  std::vector<std::int64_t> ids(kB * kK, -1);
  std::vector<float> scores(kB * kK, NAN);
  std::vector<std::int32_t> counts(kB, -1);
  std::vector<QueryStats> stats(kB);
  if (g_rank == 0) {
    const SearchBatch b = idx->admit(corpus().queries.data(), kB, kK, filters.data(), bounds.data(), true);
    idx->search(b, ids.data(), scores.data(), counts.data(), stats.data());
  } else {
    idx->search(SearchBatch{}, nullptr, nullptr);
  }
  const std::size_t from[kB] = {0, 30, 0, 5};
  for (int q = 0; q < kB; ++q) {
    const Answer alone = ask(*idx, q, kK, bounds[static_cast<std::size_t>(q)], filters[static_cast<std::size_t>(q)]);
    if (g_rank != 0) continue;
    const std::string what = "query " + std::to_string(q) + " of the batch";
    Answer a;
    a.ids.assign(ids.begin() + q * kK, ids.begin() + q * kK + counts[static_cast<std::size_t>(q)]);
    a.scores.assign(scores.begin() + q * kK, scores.begin() + q * kK + counts[static_cast<std::size_t>(q)]);
    expect_slice(a, orders[static_cast<std::size_t>(q)], from[q], what);
    EXPECT_EQ(a.ids, alone.ids) << what;
    EXPECT_EQ(stats[static_cast<std::size_t>(q)].total, alone.stats.total) << what;
    EXPECT_EQ(stats[static_cast<std::size_t>(q)].passing, static_cast<std::int64_t>(orders[static_cast<std::size_t>(q)].ids.size()))
        << what;
    EXPECT_EQ(stats[static_cast<std::size_t>(q)].scanned, kN) << what;
  }
  if (g_rank == 0) {
    EXPECT_EQ(stats[0].total, within(m(), orders[0], orders[0].scores[19]));
    EXPECT_EQ(stats[2].total, -1) << "no bound: no total";
    EXPECT_EQ(stats[3].total, within(m(), orders[3], orders[3].scores[40]));
  }
}

}  // namespace
}  // namespace shardtopk

int main(int argc, char** argv) {
  shardtopk::MpiSession mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  shardtopk::g_rank = mpi.rank();
  shardtopk::g_world = mpi.world_size();
  if (shardtopk::cuda_engine() &&
      !shardtopk::test::gpus_for_every_rank(shardtopk::g_rank, shardtopk::cuda_device_count(), "the order-query suite"))
    return 0;
  shardtopk::test::quiet_followers(shardtopk::g_rank);
  return shardtopk::test::run_all_tests_on_every_rank(shardtopk::g_rank);
}
