// Filtered batches through the CUDA engine's batched (tensor-core) path: every query with its own
// filter, clustered (each query's rows in a few chunks of the shard: the chunk schedule GEMMs a
// chunk only for the queries it can answer, and a query's threshold comes from the first chunk
// holding k of its rows) or scattered, one filter shared by the batch (chunks it rules out are
// skipped), and a mix with unfiltered queries and id lists. Small integers: every answer equals
// the float64 oracle's over exactly the rows that pass (ids and scores, ties included), equals
// the same query searched alone (batch 1: the filtered scan) bit for bit, and no query falls back
// to the batch-1 scan (its candidate pool never overflows). Each case runs with
// engine.column_orders on (batches of ranges over one column walk its sorted order, rows
// gathered) and off (the shard's own order).
//
// Every test skips, saying so, when no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "engine_runner.hpp"
#include "engine_test_support.hpp"
#include "filter_support.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/filter.hpp"
#include "tools/oracle.hpp"

namespace shardtopk::test {
namespace {

constexpr std::int64_t kRows = 300000, kDim = 16, kTenantRows = 3000;  // 100 tenants of 1 %
constexpr int kBatch = 256, kK = 20;

struct Fixture {
  std::vector<float> rows, queries;
  std::vector<std::int64_t> ids;
  std::vector<std::int64_t> tenant, tag;
  std::vector<double> weight;
  AttributeTable table;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture f;
    f.rows = small_ints(static_cast<size_t>(kRows * kDim), 61, -2, 2);
    f.queries = small_ints(static_cast<size_t>(kBatch * kDim), 62, -2, 2);
    f.ids = shuffled_ids(kRows, 63);
    AttributeColumn tenant{"tenant", AttributeType::kInt64, {}, {}};
    AttributeColumn tag{"tag", AttributeType::kInt64, {}, {}};
    AttributeColumn weight{"weight", AttributeType::kFloat64, {}, {}};
    for (std::int64_t r = 0; r < kRows; ++r) {
      tenant.ints.push_back(r / kTenantRows);
      tag.ints.push_back(static_cast<std::int64_t>((static_cast<std::uint64_t>(r) * 2654435761u + 7u) % 100u));
      weight.reals.push_back(static_cast<double>((r * 7919) % 1000) / 8.0 - 60.0);  // −60 .. 64.875, scattered
    }
    f.tenant = tenant.ints;
    f.tag = tag.ints;
    f.weight = weight.reals;
    f.table = AttributeTable({tenant, tag, weight}, f.ids, 0);
    return f;
  }();
  return f;
}

/// A batch's filters: the distinct programs, each query's program (-1: none), and per program
/// which rows pass (the oracle's view, decided here from the generating rule).
struct Batch {
  std::vector<FilterProgram> programs;
  std::vector<std::function<bool(std::int64_t)>> passes;
  std::vector<std::int32_t> which;
};

/// (metric, engine.column_orders): batches of ranges over one column through its sorted order or
/// through the shard's own.
class FilteredBatches : public ::testing::TestWithParam<std::tuple<Metric, bool>> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no GPU visible: CUDA test skipped";
    const Fixture& f = fixture();
    ShardInput in{f.rows.data(), kRows, kDim, f.ids.data()};
    in.attributes = &f.table;
    EngineOptions opt;
    opt.device = test_device();
    opt.column_orders = std::get<1>(GetParam());
    engine_ = make_cuda_engine(in, std::get<0>(GetParam()), Dtype::kFloat16, EngineLimits{kBatch, kK, kBatch, 2}, opt);
    runner_ = std::make_unique<EngineRunner>(*engine_);
  }

  std::vector<Candidate> search(int q0, int batch, const Batch& b) {
    Space& sp = runner_->space();
    float* dq = const_cast<float*>(runner_->device_queries());
    sp.from_host(dq, fixture().queries.data() + q0 * kDim, sizeof(float) * batch * kDim, true);
    engine_->prepare_queries(dq, batch, sp.stream());
    std::vector<const FilterProgram*> progs;
    for (const FilterProgram& p : b.programs) progs.push_back(&p);
    // the programs batch `q0 .. q0 + batch` uses, renumbered (solo searches carry one)
    std::vector<const FilterProgram*> used;
    std::vector<std::int32_t> which;
    for (int q = q0; q < q0 + batch; ++q) {
      const std::int32_t p = b.which[static_cast<size_t>(q)];
      if (p < 0) {
        which.push_back(-1);
        continue;
      }
      auto it = std::find(used.begin(), used.end(), progs[static_cast<size_t>(p)]);
      if (it == used.end()) it = used.insert(used.end(), progs[static_cast<size_t>(p)]);
      which.push_back(static_cast<std::int32_t>(it - used.begin()));
    }
    SearchArgs a;
    a.queries = runner_->device_queries();
    a.batch = batch;
    a.k = kK;
    a.out = runner_->device_out();
    a.stream = sp.stream();
    if (!used.empty()) a.filters = FilterBatch{used.data(), static_cast<int>(used.size()), which.data()};
    engine_->search(a);
    std::vector<Candidate> out(static_cast<size_t>(batch) * kK);
    sp.to_host(out.data(), runner_->device_out(), out.size() * sizeof(Candidate), true);
    return out;
  }

  /// The whole batch at once: the oracle's answer per query, the bits of each query alone, no
  /// fallback to the batch-1 scan.
  void expect_batch(const Batch& b, const std::string& what) {
    const Fixture& f = fixture();
    const Metric m = std::get<0>(GetParam());
    engine_->reset_transfer_counters();
    const std::vector<Candidate> all = search(0, kBatch, b);
    EXPECT_EQ(engine_->transfer_counters().batched_fallbacks, 0u) << what << ": a pool overflowed";
    for (int q = 0; q < kBatch; ++q) {
      SCOPED_TRACE(what + ", query " + std::to_string(q));
      const std::int32_t p = b.which[static_cast<size_t>(q)];
      std::vector<float> rows;
      std::vector<std::int64_t> ids;
      for (std::int64_t r = 0; r < kRows; ++r) {
        if (p >= 0 && !b.passes[static_cast<size_t>(p)](r)) continue;
        ids.push_back(f.ids[static_cast<size_t>(r)]);
        rows.insert(rows.end(), f.rows.begin() + r * kDim, f.rows.begin() + (r + 1) * kDim);
      }
      const int kk = static_cast<int>(std::min<std::int64_t>(kK, static_cast<std::int64_t>(ids.size())));
      std::vector<std::int64_t> want_ids;
      std::vector<double> want_scores;
      if (kk > 0)
        oracle::topk(m, rows.data(), static_cast<std::int64_t>(ids.size()), ids.data(), f.queries.data() + q * kDim, 1,
                     kDim, kk, &want_ids, &want_scores);
      const bool solo_check = q % 16 == 0;  // batch 1 for every 16th query (each alone is a full search)
      const std::vector<Candidate> alone = solo_check ? search(q, 1, b) : std::vector<Candidate>();
      for (int j = 0; j < kK; ++j) {
        const Candidate& got = all[static_cast<size_t>(q) * kK + j];
        if (solo_check) {
          ASSERT_EQ(got.id, alone[static_cast<size_t>(j)].id) << "slot " << j << ": batched vs alone";
          ASSERT_EQ(bits_of(got.score), bits_of(alone[static_cast<size_t>(j)].score)) << "slot " << j;
        }
        if (j < kk) {
          ASSERT_EQ(got.id, want_ids[static_cast<size_t>(j)]) << "slot " << j;
          ASSERT_EQ(static_cast<double>(reported_score(m, got.score)), want_scores[static_cast<size_t>(j)]) << j;
        } else {
          ASSERT_EQ(got.id, kPadId) << "slot " << j;
        }
      }
    }
  }

  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineRunner> runner_;
};

// Every query its own 10 % of the tenants (contiguous rows: most chunks hold none of them).
TEST_P(FilteredBatches, PerQueryClusteredFilters) {
  const Fixture& f = fixture();
  Batch b;
  for (int q = 0; q < kBatch; ++q) {
    const std::int64_t lo = (q * 37) % 91;
    b.programs.push_back(parse_filter("{\"range\": {\"tenant\": [" + std::to_string(lo) + ", " +
                                          std::to_string(lo + 9) + "]}}",
                                      f.table.schema()));
    b.passes.push_back([&f, lo](std::int64_t r) { return f.tenant[r] >= lo && f.tenant[r] <= lo + 9; });
    b.which.push_back(q);
  }
  expect_batch(b, "per-query clustered 10 %");
}

// Every query its own range of a scattered float64 attribute (5 – 20 % of the rows; bounds on
// and between the values, −0 as a bound, one range between two values: no row), and the whole batch sharing one
// scattered range: through the column's order, float64 keys.
TEST_P(FilteredBatches, PerQueryFloatRanges) {
  const Fixture& f = fixture();
  Batch b;
  for (int q = 0; q < kBatch; ++q) {
    double lo = q == 5 ? -0.0 : static_cast<double>((q * 53) % 900) / 8.0 - 60.0 + (q % 3 == 0 ? 0.0625 : 0.0);
    double hi = lo + 6.25 + static_cast<double>(q % 4) * 6.25;
    if (q == 9) lo = 0.03, hi = 0.1;  // between two values: no row
    b.programs.push_back(compile_filter(json{{"range", {{"weight", {lo, hi}}}}}, f.table.schema()));
    b.passes.push_back([&f, lo, hi](std::int64_t r) { return f.weight[r] >= lo && f.weight[r] <= hi; });
    b.which.push_back(q);
  }
  expect_batch(b, "per-query float64 ranges");
}

TEST_P(FilteredBatches, OneSharedScatteredFilter) {
  const Fixture& f = fixture();
  Batch b;
  b.programs.push_back(parse_filter(R"({"range": {"tag": [40, 49]}})", f.table.schema()));
  b.passes.push_back([&f](std::int64_t r) { return f.tag[r] >= 40 && f.tag[r] <= 49; });
  b.which.assign(kBatch, 0);
  expect_batch(b, "shared scattered 10 %");
}

// Every query its own 10 % of a hashed attribute (every chunk holds rows of every query).
TEST_P(FilteredBatches, PerQueryScatteredFilters) {
  const Fixture& f = fixture();
  Batch b;
  for (int q = 0; q < kBatch; ++q) {
    const std::int64_t lo = (q * 13) % 91;
    b.programs.push_back(parse_filter("{\"range\": {\"tag\": [" + std::to_string(lo) + ", " + std::to_string(lo + 9) +
                                          "]}}",
                                      f.table.schema()));
    b.passes.push_back([&f, lo](std::int64_t r) { return f.tag[r] >= lo && f.tag[r] <= lo + 9; });
    b.which.push_back(q);
  }
  expect_batch(b, "per-query scattered 10 %");
}

// The same with a fifth of the rows deleted: a query's interval of a column order holds dead
// rows, which it must not return (nor count for its threshold).
TEST_P(FilteredBatches, PerQueryScatteredFiltersOverDeletedRows) {
  const Fixture& f = fixture();
  std::vector<std::int64_t> dead;
  for (std::int64_t r = 2; r < kRows; r += 5) dead.push_back(r);
  engine_->set_live(dead.data(), static_cast<std::int64_t>(dead.size()), false);
  Batch b;
  for (int q = 0; q < kBatch; ++q) {
    const std::int64_t lo = (q * 29) % 91;
    b.programs.push_back(parse_filter("{\"range\": {\"tag\": [" + std::to_string(lo) + ", " + std::to_string(lo + 9) +
                                          "]}}",
                                      f.table.schema()));
    b.passes.push_back([&f, lo](std::int64_t r) { return r % 5 != 2 && f.tag[r] >= lo && f.tag[r] <= lo + 9; });
    b.which.push_back(q);
  }
  expect_batch(b, "per-query scattered 10 %, a fifth of the rows deleted");
}

// Every query's rows crowd the end of the shard (its own last 5 – 20 % of the tenants) after three
// rows listed by id: every chunk may hold one of its rows (the listed ids lie within every
// block's id bounds), so every chunk is scored for every query, and each query's threshold stays
// −inf until the dense rows come. Their chunks must not flood the pools (the collect's flood
// guard): no query falls back to the batch-1 scan.
TEST_P(FilteredBatches, RowsCrowdingTheEndAfterFewListedOnes) {
  const Fixture& f = fixture();
  Batch b;
  for (int q = 0; q < kBatch; ++q) {
    const std::int64_t lo = 80 + q % 15;
    const std::vector<std::int64_t> rows = {q, 1000 + q, 100000 + q};
    std::vector<std::int64_t> few;
    for (std::int64_t r : rows) few.push_back(f.ids[static_cast<size_t>(r)]);
    const json spec = {{"any", json::array({json{{"ids_in", few}}, json{{"range", {{"tenant", {lo, 99}}}}}})}};
    b.programs.push_back(compile_filter(spec, f.table.schema()));
    b.passes.push_back([&f, lo, rows](std::int64_t r) {
      return f.tenant[r] >= lo || std::find(rows.begin(), rows.end(), r) != rows.end();
    });
    b.which.push_back(q);
  }
  expect_batch(b, "dense tail after listed rows");
}

// Per-query filters of every form the batched kernels tell apart: a range over an int column
// and over a float64 one (decided there by one load of the row's value), an eq on a float64
// (a one-value range), and programs evaluated whole (an `in` list, a negated range, a
// conjunction), beside unfiltered queries. A range read with the wrong column, bound or type
// would change answers here.
TEST_P(FilteredBatches, RangesBesideWholePrograms) {
  const Fixture& f = fixture();
  Batch b;
  for (int q = 0; q < kBatch; ++q) {
    const std::int64_t lo = (q * 29) % 81;
    const double wlo = static_cast<double>((q * 53) % 800) / 8.0 - 60.0, whi = wlo + 12.5;  // 10 % of the weights
    const std::string r = std::to_string(lo), rr = std::to_string(lo + 19);
    switch (q % 7) {
      case 0:
        b.programs.push_back(parse_filter("{\"range\": {\"tag\": [" + r + ", " + rr + "]}}", f.table.schema()));
        b.passes.push_back([&f, lo](std::int64_t x) { return f.tag[x] >= lo && f.tag[x] <= lo + 19; });
        break;
      case 1:
        b.programs.push_back(compile_filter(json{{"range", {{"weight", {wlo, whi}}}}}, f.table.schema()));
        b.passes.push_back([&f, wlo, whi](std::int64_t x) { return f.weight[x] >= wlo && f.weight[x] <= whi; });
        break;
      case 2:
        b.programs.push_back(compile_filter(json{{"eq", {{"weight", wlo}}}}, f.table.schema()));
        b.passes.push_back([&f, wlo](std::int64_t x) { return f.weight[x] == wlo; });
        break;
      case 3:
        b.programs.push_back(compile_filter(json{{"in", {{"tag", {lo, lo + 3, lo + 7, lo + 11}}}}}, f.table.schema()));
        b.passes.push_back([&f, lo](std::int64_t x) {
          const std::int64_t t = f.tag[x];
          return t == lo || t == lo + 3 || t == lo + 7 || t == lo + 11;
        });
        break;
      case 4:
        b.programs.push_back(parse_filter("{\"not\": {\"range\": {\"tag\": [0, " + rr + "]}}}", f.table.schema()));
        b.passes.push_back([&f, lo](std::int64_t x) { return f.tag[x] > lo + 19; });
        break;
      case 5:
        b.programs.push_back(compile_filter(
            json{{"all", json::array({json{{"range", {{"tag", {lo, lo + 49}}}}}, json{{"range", {{"weight", {wlo, 64.875}}}}}})}},
            f.table.schema()));
        b.passes.push_back([&f, lo, wlo](std::int64_t x) {
          return f.tag[x] >= lo && f.tag[x] <= lo + 49 && f.weight[x] >= wlo;
        });
        break;
      default:
        b.programs.emplace_back();  // unused: the query has no filter
        b.passes.push_back([](std::int64_t) { return true; });
        break;
    }
    b.which.push_back(q % 7 == 6 ? -1 : q);
  }
  expect_batch(b, "ranges beside whole programs");
}

// One tenant's 1 % for the whole batch: only the chunks holding its rows are scored.
TEST_P(FilteredBatches, OneSharedClusteredFilter) {
  const Fixture& f = fixture();
  Batch b;
  b.programs.push_back(parse_filter(R"({"eq": {"tenant": 57}})", f.table.schema()));
  b.passes.push_back([&f](std::int64_t r) { return f.tenant[r] == 57; });
  b.which.assign(kBatch, 0);
  expect_batch(b, "shared clustered 1 %");
}

// Unfiltered queries beside a late tenant (its rows in the last chunks only), an id list of
// fewer rows than k, and a filter no row passes.
TEST_P(FilteredBatches, MixedWithUnfilteredQueries) {
  const Fixture& f = fixture();
  Batch b;
  b.programs.push_back(parse_filter(R"({"eq": {"tenant": 98}})", f.table.schema()));
  b.passes.push_back([&f](std::int64_t r) { return f.tenant[r] == 98; });
  std::vector<std::int64_t> few = {f.ids[5], f.ids[150000], f.ids[299999]};
  b.programs.push_back(compile_filter(json{{"ids_in", few}}, f.table.schema()));
  b.passes.push_back([few, &f](std::int64_t r) {
    return std::find(few.begin(), few.end(), f.ids[static_cast<size_t>(r)]) != few.end();
  });
  b.programs.push_back(parse_filter(R"({"any": []})", f.table.schema()));
  b.passes.push_back([](std::int64_t) { return false; });
  for (int q = 0; q < kBatch; ++q) b.which.push_back(q % 4 == 3 ? -1 : q % 4);
  expect_batch(b, "mixed");
}

INSTANTIATE_TEST_SUITE_P(Metrics, FilteredBatches,
                         ::testing::Combine(::testing::Values(Metric::kInnerProduct, Metric::kL2), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<Metric, bool>>& i) {
                           return std::string(mname(std::get<0>(i.param))) +
                                  (std::get<1>(i.param) ? "_column_order" : "_shard_order");
                         });

}  // namespace
}  // namespace shardtopk::test
