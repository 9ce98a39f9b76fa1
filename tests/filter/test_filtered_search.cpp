// Filtered exact search through ShardedIndex under MPI (one binary, registered in CTest for
// P = 1, 2, 4 on CPU ranks; with SHARDTOPK_TEST_ENGINE=cuda, on GPUs).
//
// Every answer is compared with the float64 oracle over exactly the rows the filter passes,
// decided by a row-by-row interpreter of the filter's JSON that shares no code with the compiler
// or the evaluators (testing/filter_support.hpp). Small-integer vectors make every score exact in
// float32, so ids and scores must equal the oracle's, ties included (DESIGN.md invariants 4, 9),
// and equal answers at every rank count follow. Cases: every operator, selectivity from no row
// through fewer than k, about 1 % and about 50 % to every row; duplicated rows of which some
// copies pass and some do not (ties across the filter boundary); per-query filters in one batch
// giving the bits of each query alone; random nested filters; bad filters (a clear error, the
// index still answers); an index without attributes (ids filters only); and real bge-m3
// paragraphs with a `doc` attribute read from a temporary HDF5 file by load_index.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
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
#include "shardtopk/corpus_io.hpp"
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
std::string g_dir;  // per-run fixture folder (same path on every rank)

bool cuda_engine() {
  const char* eng = std::getenv("SHARDTOPK_TEST_ENGINE");
  return eng && std::string(eng) == "cuda";
}

Config base_config(int k_max, int batch_max, int max_filters) {
  Config c;
  c.source = "test";
  c.corpus.path = "(in memory)";
  c.search.k_max = k_max;
  c.search.batch_max = batch_max;
  c.search.max_filters = max_filters;
  c.engine.backend = cuda_engine() ? EngineBackend::kCuda : EngineBackend::kCpu;
  c.engine.threads = 1;
  c.comm.backend = cuda_engine() ? CommBackend::kAuto : CommBackend::kMpi;
  c.comm.timeout_s = 60;
  return c;
}

// ------------------------------------------------------------------------------ the corpus

// kN rows of kDim small integers in [-2, 2] (scores exact in float32, many ties). Rows
// [kCopyAt, kCopyAt + kCopies) are copies of rows [0, kCopies): equal scores for every query, so
// a filter passing some copies and not others puts ties on its boundary. Global ids are a
// shuffled set of odd numbers (not row positions: ties break on them, ids_in names them).
// Attributes:
//   tenant  int64    clustered: row / 250 (20 tenants of 5 %; the copies are tenant 0 and 10)
//   tag     int64    scattered (hashed): 0 .. 99, 1 % each
//   price   float64  scattered: multiples of 0.25 in [-250, 250), with -0.0, 0.0, +inf, -inf
constexpr std::int64_t kN = 5000, kDim = 8, kCopies = 200, kCopyAt = 2500;
constexpr int kQ = 16, kK = 10;

struct Corpus {
  std::vector<float> rows;         // [kN, kDim]
  std::vector<std::int64_t> ids;   // [kN]
  std::vector<float> queries;      // [kQ, kDim]
  std::vector<AttributeColumn> columns;  // [kN] each
  AttributeTable table;            // the whole corpus (the oracle's view)
};

const Corpus& corpus() {
  static const Corpus c = [] {
    Corpus c;
    c.rows = test::small_ints(static_cast<size_t>(kN * kDim), 311, -2, 2);
    std::copy(c.rows.begin(), c.rows.begin() + kCopies * kDim, c.rows.begin() + kCopyAt * kDim);
    c.queries = test::small_ints(static_cast<size_t>(kQ * kDim), 312, -2, 2);
    c.ids.resize(kN);
    for (std::int64_t r = 0; r < kN; ++r) c.ids[r] = 2 * r + 1;
    std::mt19937_64 rng(313);
    std::shuffle(c.ids.begin(), c.ids.end(), rng);
    AttributeColumn tenant{"tenant", AttributeType::kInt64, {}, {}};
    AttributeColumn tag{"tag", AttributeType::kInt64, {}, {}};
    AttributeColumn price{"price", AttributeType::kFloat64, {}, {}};
    for (std::int64_t r = 0; r < kN; ++r) {
      tenant.ints.push_back(r / 250);
      tag.ints.push_back(static_cast<std::int64_t>((static_cast<std::uint64_t>(r) * 2654435761u + 12345u) % 100u));
      double p = static_cast<double>((r * 40503) % 2000) * 0.25 - 250.0;
      if (r % 97 == 0) p = -0.0;
      if (r % 89 == 0) p = 0.0;
      if (r % 1013 == 5) p = std::numeric_limits<double>::infinity();
      if (r % 1013 == 6) p = -std::numeric_limits<double>::infinity();
      price.reals.push_back(p);
    }
    c.columns = {tenant, tag, price};
    c.table = AttributeTable(c.columns, c.ids, 1);
    return c;
  }();
  return c;
}

// This rank's slice of the attribute columns.
AttributeTable shard_table(const Corpus& c, RowRange r) {
  std::vector<AttributeColumn> cols;
  for (const AttributeColumn& col : c.columns) {
    AttributeColumn s{col.name, col.type, {}, {}};
    if (col.type == AttributeType::kInt64) s.ints.assign(col.ints.begin() + r.lo, col.ints.begin() + r.hi);
    else s.reals.assign(col.reals.begin() + r.lo, col.reals.begin() + r.hi);
    cols.push_back(std::move(s));
  }
  return AttributeTable(std::move(cols), std::vector<std::int64_t>(c.ids.begin() + r.lo, c.ids.begin() + r.hi), 1);
}

// This rank's index over the corpus (collective). Without attributes: ids filters only.
std::unique_ptr<ShardedIndex> make_index(Metric m, bool attributes = true, int max_filters = 8) {
  const Corpus& c = corpus();
  const Config cfg = base_config(64, kQ, max_filters);
  const RowRange r = shard_rows(kN, g_world, g_rank);
  const AttributeTable t = shard_table(c, r);
  ShardInput in{c.rows.data() + r.lo * kDim, r.size(), kDim, c.ids.data() + r.lo};
  if (attributes) in.attributes = &t;
  return build_index(cfg, m, kN, r, in, make_mpi_communicator(cfg.comm.timeout_s));
}

// ------------------------------------------------------------------------------ searching and checking

struct Result {
  std::vector<std::int64_t> ids;
  std::vector<float> scores;
  std::vector<std::int32_t> counts;
};

// Collective search of queries [q0, q0 + batch) of `queries`, query i with filters[i] (may be
// nullptr); the answer is meaningful on rank 0.
Result search(ShardedIndex& idx, const std::vector<float>& queries, std::int64_t dim, int q0, int batch, int k,
              const std::vector<const FilterProgram*>& filters) {
  Result a;
  a.ids.assign(static_cast<size_t>(batch) * k, -1);
  a.scores.assign(a.ids.size(), NAN);
  a.counts.assign(static_cast<size_t>(batch), -1);
  const bool root = g_rank == 0;
  idx.search(root ? queries.data() + static_cast<size_t>(q0) * dim : nullptr, batch, k, root ? a.ids.data() : nullptr,
             root ? a.scores.data() : nullptr, root && !filters.empty() ? filters.data() : nullptr,
             root ? a.counts.data() : nullptr);
  return a;
}

// Which of the corpus's rows pass `filter` (the JSON, interpreted row by row; null: every row),
// worked out once per filter: the checks ask it of every query of a batch, and the long id lists'
// interpretation (each row against each listed id) is most of this program's time under ASan.
const std::vector<char>& oracle_rows(const json& filter) {
  static std::map<std::string, std::vector<char>> known;
  const std::string key = filter.dump();
  auto it = known.find(key);
  if (it == known.end()) {
    const Corpus& c = corpus();
    std::vector<char> pass(static_cast<size_t>(kN));
    for (std::int64_t r = 0; r < kN; ++r)
      pass[static_cast<size_t>(r)] = filter.is_null() || test::oracle_passes(filter, c.table, r);
    it = known.emplace(key, std::move(pass)).first;
  }
  return it->second;
}

// Checks query q's row of `a` (row `row` of the batch) against the oracle over the rows that pass
// `filter` (oracle_rows). Exact ids and scores.
void expect_oracle(Metric m, const json& filter, int q, const Result& a, int row, int k, const std::string& what) {
  if (g_rank != 0) return;
  const Corpus& c = corpus();
  const std::vector<char>& pass = oracle_rows(filter);
  const test::Subset s = test::passing_rows(c.rows, kN, kDim, c.ids.data(),
                                            [&](std::int64_t r) { return pass[static_cast<size_t>(r)] != 0; });
  test::expect_filtered_answer(m, s, kDim, c.queries.data() + static_cast<size_t>(q) * kDim, k,
                               a.ids.data() + static_cast<size_t>(row) * k, a.scores.data() + static_cast<size_t>(row) * k,
                               a.counts[static_cast<size_t>(row)], /*exact=*/true, what);
}

std::int64_t rows_passing(const json& filter) {
  const std::vector<char>& pass = oracle_rows(filter);
  return std::count(pass.begin(), pass.end(), 1);
}

bool bit_identical(const Result& a, int ra, const Result& b, int rb, int k) {
  for (int j = 0; j < k; ++j) {
    const size_t ia = static_cast<size_t>(ra) * k + j, ib = static_cast<size_t>(rb) * k + j;
    if (a.ids[ia] != b.ids[ib] || std::memcmp(&a.scores[ia], &b.scores[ib], 4) != 0) return false;
  }
  return a.counts[static_cast<size_t>(ra)] == b.counts[static_cast<size_t>(rb)];
}

// ------------------------------------------------------------------------------ the cases

enum class Selectivity { kNone, kFew, kOnePercent, kHalf, kAll };

struct Case {
  std::string filter;
  Selectivity sel;
};

// The id of row r, as JSON lists name it.
std::string id_of(std::int64_t r) { return std::to_string(corpus().ids[static_cast<size_t>(r)]); }

// Ids of rows [lo, hi) in steps of `step`, as a JSON list's body.
std::string ids_of(std::int64_t lo, std::int64_t hi, std::int64_t step) {
  std::string s;
  for (std::int64_t r = lo; r < hi; r += step) s += (s.empty() ? "" : ", ") + id_of(r);
  return s;
}

std::vector<Case> cases() {
  using S = Selectivity;
  return {
      // no row
      {R"({"eq": {"tenant": 999}})", S::kNone},
      {R"({"ids_in": []})", S::kNone},
      {R"({"in": {"tag": []}})", S::kNone},
      {R"({"all": [{"eq": {"tenant": 1}}, {"eq": {"tenant": 2}}]})", S::kNone},
      {R"({"range": {"tenant": [20, null]}})", S::kNone},
      {R"({"not": {"range": {"tenant": [null, null]}}})", S::kNone},
      {R"({"any": []})", S::kNone},
      {R"({"ids_in": [0, 2, 4, 10000]})", S::kNone},  // ids no row has
      // fewer rows than k
      {R"({"ids_in": [)" + id_of(3) + ", " + id_of(2600) + ", " + id_of(4999) + R"(, 0]})", S::kFew},
      {R"({"all": [{"eq": {"tag": 3}}, {"eq": {"tenant": 4}}]})", S::kFew},
      {R"({"range": {"price": [10.0, 10.5]}})", S::kFew},
      {R"({"all": [{"in": {"tenant": [0, 10]}}, {"ids_in": [)" + id_of(5) + ", " + id_of(kCopyAt + 5) + ", " +
           id_of(kCopyAt + 6) + R"(]}]})",
       S::kFew},  // both copies of row 5, one copy of row 6
      // about 1 %
      {R"({"eq": {"tag": 7}})", S::kOnePercent},
      {R"({"in": {"tag": [11, 12]}})", S::kOnePercent},
      {R"({"all": [{"range": {"tenant": [3, 3]}}, {"range": {"tag": [null, 19]}}]})", S::kOnePercent},
      {R"({"eq": {"price": 0.0}})", S::kOnePercent},  // -0.0 and 0.0 alike (IEEE)
      {R"({"range": {"price": [240.0, null]}})", S::kOnePercent},  // +inf rows included
      // about 50 %
      {R"({"range": {"tag": [null, 49]}})", S::kHalf},
      {R"({"not": {"range": {"tag": [null, 49]}}})", S::kHalf},
      {R"({"range": {"tenant": [10, null]}})", S::kHalf},  // clustered: whole blocks skipped
      {R"({"any": [{"range": {"price": [0.0, null]}}, {"eq": {"tag": 0}}]})", S::kHalf},
      {R"({"ids_not_in": [)" + ids_of(0, kN, 2) + "]}", S::kHalf},
      // every row
      {R"({"range": {"tenant": [null, null]}})", S::kAll},
      {R"({"ids_not_in": []})", S::kAll},
      {R"({"ids_not_in": [0, 2, 4]})", S::kAll},
      {R"({"all": []})", S::kAll},
      {R"({"not": {"ids_in": []}})", S::kAll},
      {R"({"range": {"price": [null, null]}})", S::kAll},
      // ties across the boundary: the copies (tenant 10) with or without some originals (tenant 0)
      {R"({"eq": {"tenant": 10}})", S::kOnePercent},
      {R"({"in": {"tenant": [0, 10]}})", S::kOnePercent},
      {R"({"any": [{"eq": {"tenant": 10}}, {"ids_in": [)" + ids_of(0, kCopies, 2) + "]}]}", S::kOnePercent},
      {R"({"all": [{"in": {"tenant": [0, 10]}}, {"not": {"ids_in": [)" + ids_of(kCopyAt, kCopyAt + kCopies, 3) +
           "]}}]}",
       S::kOnePercent},
  };
}

bool in_class(std::int64_t n, Selectivity s) {
  switch (s) {
    case Selectivity::kNone: return n == 0;
    case Selectivity::kFew: return n >= 1 && n < kK;
    case Selectivity::kOnePercent: return n >= 20 && n <= 500;  // 1 % and the copies (4 %, 10 %)
    case Selectivity::kHalf: return n >= 2000 && n <= 3000;
    case Selectivity::kAll: return n == kN;
  }
  return false;
}

class FilteredSearch : public ::testing::TestWithParam<Metric> {};

// Every case, every query of a batch with the same filter, k = 10, 1 and 37: the oracle's ids and
// scores over the rows that pass, the count, padding after it.
TEST_P(FilteredSearch, EveryKindAndSelectivityMatchesTheOracle) {
  const Metric m = GetParam();
  auto idx = make_index(m);
  const Corpus& c = corpus();
  const AttributeSchema schema = idx->info().schema;
  ASSERT_EQ(schema.size(), 3u);
  for (const Case& cs : cases()) {
    const json f = json::parse(cs.filter);
    const std::int64_t n = rows_passing(f);
    EXPECT_TRUE(in_class(n, cs.sel)) << cs.filter << ": " << n << " rows pass, not the intended selectivity";
    const FilterProgram p = parse_filter(cs.filter, schema);
    const std::vector<const FilterProgram*> filters(kQ, &p);
    for (int k : {kK, 1, 37}) {
      const Result a = search(*idx, c.queries, kDim, 0, kQ, k, filters);
      for (int q = 0; q < kQ; ++q)
        expect_oracle(m, f, q, a, q, k, cs.filter + ", k " + std::to_string(k) + ", query " + std::to_string(q));
    }
  }
}

// A batch whose queries carry different filters (and some none) gives each query the bits it gets
// alone, and the oracle's answer.
TEST_P(FilteredSearch, PerQueryFiltersInOneBatchGiveTheSoloBits) {
  const Metric m = GetParam();
  auto idx = make_index(m);
  const Corpus& c = corpus();
  const std::vector<Case> all = cases();
  std::vector<FilterProgram> programs;
  std::vector<json> jsons;
  const int picks[8] = {9, 12, 17, 19, 28, 29, 30, 11};  // few, 1 %, 50 %, ties
  for (int i : picks) {
    programs.push_back(parse_filter(all[static_cast<size_t>(i)].filter, idx->info().schema));
    jsons.push_back(json::parse(all[static_cast<size_t>(i)].filter));
  }
  // query q: filter q % 9 (8: none), so 8 distinct filters (search.max_filters) and unfiltered rows
  std::vector<const FilterProgram*> filters(kQ);
  for (int q = 0; q < kQ; ++q) filters[q] = q % 9 == 8 ? nullptr : &programs[static_cast<size_t>(q % 9)];
  const Result batch = search(*idx, c.queries, kDim, 0, kQ, kK, filters);
  for (int q = 0; q < kQ; ++q) {
    const Result solo = search(*idx, c.queries, kDim, q, 1, kK, {filters[q]});
    const json f = filters[q] ? jsons[static_cast<size_t>(q % 9)] : json();
    if (g_rank == 0) EXPECT_TRUE(bit_identical(batch, q, solo, 0, kK)) << "query " << q << " batched vs alone";
    expect_oracle(m, f, q, batch, q, kK, "mixed batch, query " + std::to_string(q));
  }
  // the same queries in another order and other company: the same bits
  std::vector<const FilterProgram*> reversed(filters.rbegin(), filters.rend());
  std::vector<float> rq;
  for (int q = kQ - 1; q >= 0; --q) rq.insert(rq.end(), c.queries.begin() + q * kDim, c.queries.begin() + (q + 1) * kDim);
  const Result back = search(*idx, rq, kDim, 0, kQ, kK, reversed);
  if (g_rank == 0)
    for (int q = 0; q < kQ; ++q) EXPECT_TRUE(bit_identical(batch, q, back, kQ - 1 - q, kK)) << "query " << q;
}

// Long ids_in lists (the CUDA engine resolves lists of 4,096 ids or more through its sorted copy
// of the shard's ids): half the listed ids no row's, ties on the boundary (some copies listed,
// their originals not), alone and in a batch beside other filters: the oracle's answer and the
// same bits either way.
TEST_P(FilteredSearch, LongIdListsMatchTheOracle) {
  const Metric m = GetParam();
  auto idx = make_index(m);
  const Corpus& c = corpus();
  std::string absent;  // even ids: no row's
  for (int i = 0; i < 4200; ++i) absent += ", " + std::to_string(2 * i);
  const std::vector<std::string> lists = {
      R"({"ids_in": [)" + ids_of(0, kN, 2) + absent + "]}",                      // half the rows
      R"({"ids_in": [)" + ids_of(kCopyAt, kCopyAt + kCopies, 3) + absent + "]}",  // a third of the copies
      R"({"ids_in": [)" + ids_of(0, kN, 1) + absent + "]}",                      // every row
  };
  std::vector<FilterProgram> programs;
  std::vector<json> jsons;
  for (const std::string& l : lists) {
    programs.push_back(parse_filter(l, idx->info().schema));
    jsons.push_back(json::parse(l));
  }
  EXPECT_EQ(rows_passing(jsons[0]), kN / 2);
  EXPECT_EQ(rows_passing(jsons[1]), (kCopies + 2) / 3);
  const FilterProgram tag = parse_filter(R"({"eq": {"tag": 7}})", idx->info().schema);
  std::vector<const FilterProgram*> filters(kQ);
  for (int q = 0; q < kQ; ++q) filters[q] = q % 4 == 3 ? &tag : &programs[static_cast<size_t>(q % 4)];
  for (int k : {kK, 37}) {
    const Result batch = search(*idx, c.queries, kDim, 0, kQ, k, filters);
    for (int q = 0; q < kQ; ++q) {
      const Result solo = search(*idx, c.queries, kDim, q, 1, k, {filters[q]});
      const json f = q % 4 == 3 ? json::parse(R"({"eq": {"tag": 7}})") : jsons[static_cast<size_t>(q % 4)];
      const std::string what = "long list " + std::to_string(q % 4) + ", k " + std::to_string(k) + ", query " +
                               std::to_string(q);
      expect_oracle(m, f, q, solo, 0, k, what + " alone");
      expect_oracle(m, f, q, batch, q, k, what + " in a batch");
      if (g_rank == 0) EXPECT_TRUE(bit_identical(batch, q, solo, 0, k)) << what;
    }
  }
}

// Random nested filters (all, any, not over every leaf kind, constants drawn from the data, empty
// lists, open ranges), eight different ones per batch.
TEST_P(FilteredSearch, RandomNestedFiltersMatchTheOracle) {
  const Metric m = GetParam();
  auto idx = make_index(m);
  const Corpus& c = corpus();
  test::FilterGenerator gen(c.table, 314, 5);
  int none = 0, few = 0, some = 0, every = 0;
  for (int round = 0; round < 6; ++round) {
    std::vector<json> js;
    std::vector<FilterProgram> programs;
    for (int i = 0; i < 8; ++i) {
      js.push_back(gen.next());
      programs.push_back(compile_filter(js.back(), idx->info().schema));
      const std::int64_t n = rows_passing(js.back());
      none += n == 0;
      few += n > 0 && n < kK;
      some += n >= kK && n < kN;
      every += n == kN;
    }
    std::vector<const FilterProgram*> filters(kQ);
    for (int q = 0; q < kQ; ++q) filters[q] = &programs[static_cast<size_t>(q % 8)];
    const Result a = search(*idx, c.queries, kDim, 0, kQ, kK, filters);
    for (int q = 0; q < kQ; ++q)
      expect_oracle(m, js[static_cast<size_t>(q % 8)], q, a, q, kK,
                    "round " + std::to_string(round) + " filter " + js[static_cast<size_t>(q % 8)].dump());
  }
  if (g_rank == 0) std::printf("  random filters: %d pass no row, %d fewer than k, %d some, %d every row\n", none, few, some, every);
}

INSTANTIATE_TEST_SUITE_P(Metrics, FilteredSearch, ::testing::Values(Metric::kInnerProduct, Metric::kL2),
                         [](const ::testing::TestParamInfo<Metric>& i) { return to_string(i.param); });

// ------------------------------------------------------------------------------ refusals

// Bad filters get a clear error naming the value, attribute or limit; the index still answers.
TEST(FilteredSearchErrors, BadFiltersAreRefusedAndTheIndexAnswers) {
  auto idx = make_index(Metric::kInnerProduct, true, /*max_filters=*/4);
  const Corpus& c = corpus();
  const AttributeSchema schema = idx->info().schema;
  EXPECT_THAT(test::error_of([&] { (void)parse_filter(R"({"eq": {"tenat": 7}})", schema); }),
              HasSubstr("unknown attribute 'tenat' (known: tenant, tag, price)"));
  EXPECT_THAT(test::error_of([&] { (void)parse_filter(R"({"eq": {"tenant": 7.5}})", schema); }), HasSubstr("7.5"));
  EXPECT_THAT(test::error_of([&] { (void)parse_filter(R"({"range": {"price": [3, 1]}})", schema); }),
              HasSubstr("lower bound 3 is above upper bound 1"));

  // More distinct filters than search.max_filters (4) in one batch: refused on every rank.
  std::vector<FilterProgram> five;
  for (int t = 0; t < 5; ++t) five.push_back(parse_filter(R"({"eq": {"tenant": )" + std::to_string(t) + "}}", schema));
  std::vector<const FilterProgram*> filters(kQ);
  for (int q = 0; q < kQ; ++q) filters[q] = &five[static_cast<size_t>(q % 5)];
  Result a;
  const std::string too_many = test::error_of([&] { a = search(*idx, c.queries, kDim, 0, kQ, kK, filters); });
  if (g_rank == 0) EXPECT_THAT(too_many, HasSubstr("search.max_filters"));
  else EXPECT_NE(too_many, "<no exception>") << "followers in lock step throw with rank 0";

  // A program compiled for other attributes (tenant as float64): refused, naming the column.
  const AttributeSchema other = {{"tenant", AttributeType::kFloat64}};
  const FilterProgram misfit = parse_filter(R"({"eq": {"tenant": 1.5}})", other);
  const std::string misfit_error =
      test::error_of([&] { a = search(*idx, c.queries, kDim, 0, 2, kK, {&misfit, &misfit}); });
  if (g_rank == 0) EXPECT_THAT(misfit_error, HasSubstr("tenant"));
  else EXPECT_NE(misfit_error, "<no exception>");

  // Still answering, filtered and not, with the oracle's answers.
  const json f = json::parse(R"({"in": {"tenant": [0, 10]}})");
  const FilterProgram p = compile_filter(f, schema);
  a = search(*idx, c.queries, kDim, 0, kQ, kK, std::vector<const FilterProgram*>(kQ, &p));
  for (int q = 0; q < kQ; ++q) expect_oracle(Metric::kInnerProduct, f, q, a, q, kK, "after the refusals");
  a = search(*idx, c.queries, kDim, 0, kQ, kK, {});
  for (int q = 0; q < kQ; ++q) expect_oracle(Metric::kInnerProduct, json(), q, a, q, kK, "unfiltered, after");
}

// No attribute columns: ids filters work (global ids), attribute filters are unknown attributes.
TEST(FilteredSearchErrors, WithoutAttributesIdsFiltersWork) {
  auto idx = make_index(Metric::kL2, /*attributes=*/false);
  const Corpus& c = corpus();
  EXPECT_TRUE(idx->info().schema.empty());
  EXPECT_THAT(test::error_of([&] { (void)parse_filter(R"({"eq": {"tenant": 1}})", idx->info().schema); }),
              HasSubstr("unknown attribute 'tenant'"));
  const json f = json::parse(R"({"any": [{"ids_in": [)" + ids_of(0, 300, 1) + R"(]}, {"not": {"ids_not_in": [)" +
                             id_of(4000) + "]}}]}");
  const FilterProgram p = compile_filter(f, idx->info().schema);
  const Result a = search(*idx, c.queries, kDim, 0, kQ, kK, std::vector<const FilterProgram*>(kQ, &p));
  for (int q = 0; q < kQ; ++q) expect_oracle(Metric::kL2, f, q, a, q, kK, "ids only, query " + std::to_string(q));
}

// ------------------------------------------------------------------------------ real data

// bge-m3 paragraphs (real vectors, cosine, near-duplicates) with a synthetic `doc` attribute
// (paragraph / 8) and `meta/parity` (float64), written beside the rows into a temporary HDF5
// file and read by load_index through corpus.attributes. Within DESIGN.md's ε of the oracle over
// the rows that pass; near-tie swaps counted; a mixed batch gives the solo bits.
TEST(FilteredSearchReal, BgeParagraphsWithADocAttribute) {
  constexpr std::int64_t n = 500, dim = 1024;
  constexpr int nq = 16, k = 10;
  const std::vector<float> rows = test::read_raw_f32(test::bge_dir() + "/paragraphs-1024.f32", n, dim);
  const std::vector<float> all_q = test::read_raw_f32(test::bge_dir() + "/sentences-1024.f32", n, dim);
  const std::vector<float> queries(all_q.begin(), all_q.begin() + nq * dim);
  std::vector<std::int64_t> doc(n);
  std::vector<double> parity(n);
  for (std::int64_t i = 0; i < n; ++i) {
    doc[i] = i / 8;
    parity[i] = static_cast<double>(i % 2);
  }
  const std::string path = g_dir + "/bge-doc.h5";
  if (g_rank == 0) {
    H5Writer w(path);
    w.write_f32("train", rows.data(), n, dim);
    w.write_i64("doc", doc.data(), n, 0);
    w.write_f64("meta/parity", parity.data(), n, 0);
    w.close();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Config cfg = base_config(64, nq, 8);
  cfg.corpus.path = path;
  cfg.corpus.attributes = {"doc", "meta/parity"};
  cfg.search.metric = Metric::kCosine;
  auto idx = load_index(cfg, /*log_progress=*/false);
  const AttributeSchema want = {{"doc", AttributeType::kInt64}, {"parity", AttributeType::kFloat64}};
  EXPECT_EQ(idx->info().schema, want);
  EXPECT_THAT(test::error_of([&] { (void)parse_filter(R"({"eq": {"Doc": 1}})", idx->info().schema); }),
              HasSubstr("unknown attribute 'Doc' (known: doc, parity)"));

  // The oracle's view of the attributes (global ids = row positions).
  const AttributeTable table({{"doc", AttributeType::kInt64, doc, {}}, {"parity", AttributeType::kFloat64, {}, parity}},
                             test::iota_ids(n), 1);
  const std::vector<std::string> texts = {
      R"({"range": {"doc": [10, 30]}})",                               // 168 rows
      R"({"eq": {"doc": 5}})",                                         // 8 rows: fewer than k
      R"({"in": {"doc": [1, 50, 61]}})",                               // 24 rows
      R"({"not": {"range": {"doc": [0, 40]}}})",                       // 172 rows
      R"({"all": [{"eq": {"parity": 1.0}}, {"range": {"doc": [null, 20]}}]})",
      R"({"ids_in": [3, 77, 400]})",
      R"({"ids_not_in": [0, 1, 2]})",
      R"({"eq": {"doc": 1000}})",                                      // no row
  };
  std::vector<FilterProgram> programs;
  for (const std::string& t : texts) programs.push_back(parse_filter(t, idx->info().schema));
  std::vector<const FilterProgram*> filters(nq);
  for (int q = 0; q < nq; ++q) filters[q] = &programs[static_cast<size_t>(q % texts.size())];
  const Result batch = search(*idx, queries, dim, 0, nq, k, filters);
  int swaps = 0;
  for (int q = 0; q < nq; ++q) {
    const Result solo = search(*idx, queries, dim, q, 1, k, {filters[q]});
    if (g_rank != 0) continue;
    EXPECT_TRUE(bit_identical(batch, q, solo, 0, k)) << "query " << q << " batched vs alone";
    const json f = json::parse(texts[static_cast<size_t>(q % texts.size())]);
    const test::Subset s =
        test::passing_rows(rows, n, dim, nullptr, [&](std::int64_t r) { return test::oracle_passes(f, table, r); });
    swaps += test::expect_filtered_answer(Metric::kCosine, s, dim, queries.data() + q * dim, k,
                                          batch.ids.data() + q * k, batch.scores.data() + q * k,
                                          batch.counts[static_cast<size_t>(q)], /*exact=*/false,
                                          "bge-m3 query " + std::to_string(q) + " " + f.dump());
  }
  if (g_rank == 0) std::printf("  bge-m3 filtered: %d queries, near-tie swaps %d\n", nq, swaps);
}

}  // namespace
}  // namespace shardtopk

int main(int argc, char** argv) {
  shardtopk::MpiSession mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  using shardtopk::g_dir;
  using shardtopk::g_rank;
  using shardtopk::g_world;
  g_rank = mpi.rank();
  g_world = mpi.world_size();
  if (shardtopk::cuda_engine() &&  // the GPU registrations: one GPU per rank on this node
      !shardtopk::test::gpus_for_every_rank(g_rank, shardtopk::cuda_device_count(), "the filtered-search suite"))
    return 0;
  shardtopk::test::quiet_followers(g_rank);
  char buf[4096] = {0};
  if (g_rank == 0) {
    const char* base = std::getenv("TMPDIR");
    std::snprintf(buf, sizeof buf, "%s/shardtopk-filtered-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(buf)) buf[0] = '\0';
  }
  MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (buf[0] == '\0') MPI_Abort(MPI_COMM_WORLD, 1);
  g_dir = buf;
  const int worst = shardtopk::test::run_all_tests_on_every_rank(g_rank);
  if (g_rank == 0) {
    std::error_code ec;
    std::filesystem::remove_all(g_dir, ec);
  }
  return worst;
}
