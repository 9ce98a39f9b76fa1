// Filter evaluation on the host: against a brute-force oracle that interprets the JSON itself,
// over tables of boundary sizes; block-summary soundness; the attribute table's bounds.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "filter_support.hpp"
#include "filter_tables.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/filter_semantics.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::HasSubstr;
using test::error_of;
using test::json;
using namespace filter_test;

// ------------------------------------------------------------------------------ evaluation

// (rows, seed, cluster run, shuffled ids): boundary sizes around words and blocks, and larger.
struct TableCase {
  std::int64_t rows;
  std::uint64_t seed;
  std::int64_t run;
  bool shuffle;
};
std::ostream& operator<<(std::ostream& os, const TableCase& c) {
  return os << c.rows << " rows, seed " << c.seed << ", runs of " << c.run << (c.shuffle ? ", shuffled ids" : "");
}

class FilterEvaluation : public ::testing::TestWithParam<TableCase> {};

// Every bit of evaluate_mask, every flag and every passes() against the oracle, over the whole
// shard and over sub-ranges (block-aligned, word-aligned, unaligned), on 1 and 2 threads.
TEST_P(FilterEvaluation, MatchesTheOracleOnEveryRow) {
  const TableCase& c = GetParam();
  const AttributeTable t = test::random_table(c.rows, c.seed, c.run, 1000, c.shuffle);
  test::FilterGenerator gen(t, c.seed + 1, 6);
  int none = 0, all = 0, some = 0;
  for (int i = 0; i < 150; ++i) {
    const json f = gen.next();
    const FilterProgram p = compile_filter(f, t.schema());
    std::vector<bool> want(static_cast<std::size_t>(t.rows()));
    std::int64_t count = 0;
    for (std::int64_t r = 0; r < t.rows(); ++r) {
      want[static_cast<std::size_t>(r)] = test::oracle_passes(f, t, r);
      count += want[static_cast<std::size_t>(r)];
      ASSERT_EQ(passes(p, t, r), want[static_cast<std::size_t>(r)]) << f.dump() << " row " << r;
    }
    (count == 0 ? none : count == t.rows() ? all : some)++;
    const std::int64_t n = t.rows();
    for (RowRange range : {RowRange{0, n}, RowRange{std::min<std::int64_t>(n, 1024), n},
                           RowRange{std::min<std::int64_t>(n, 64), std::max<std::int64_t>(std::min<std::int64_t>(n, 64), n - 5)},
                           RowRange{std::min<std::int64_t>(n, 7), std::min<std::int64_t>(n, 2100)}, RowRange{n / 2, n / 2}}) {
      std::vector<std::uint8_t> flags;
      const auto bits = mask_of(p, t, range, &flags, i % 2 ? 2 : 1);
      for (std::int64_t r = range.lo; r < range.hi; ++r)
        ASSERT_EQ(bit(bits, r - range.lo), want[static_cast<std::size_t>(r)])
            << f.dump() << " range [" << range.lo << ", " << range.hi << ") row " << r;
      if (range.size() % 32)  // bits past the last row are 0
        ASSERT_EQ(bits.back() >> (range.size() % 32), 0u) << f.dump();
      for (std::size_t k = 0; k < flags.size(); ++k) {
        const std::int64_t b = range.lo / kFilterBlockRows + static_cast<std::int64_t>(k);
        const std::int64_t r0 = std::max(range.lo, b * kFilterBlockRows), r1 = std::min(range.hi, (b + 1) * kFilterBlockRows);
        std::int64_t pass = 0;
        for (std::int64_t r = r0; r < r1; ++r) pass += want[static_cast<std::size_t>(r)];
        ASSERT_EQ(flags[k], pass == 0 ? 0 : pass == r1 - r0 ? 2 : 1) << f.dump() << " block " << b;
      }
    }
  }
  // the random filters span the selectivities: none, some, all (a table of one row has no "some")
  EXPECT_GT(none, 0);
  EXPECT_GT(all, 0);
  if (c.rows > 1) EXPECT_GT(some, 0);
}

// Boundary sizes: 1 row, a word ±1, a block ±1, several blocks; clustered runs short and long.
INSTANTIATE_TEST_SUITE_P(Tables, FilterEvaluation,
                         ::testing::Values(TableCase{1, 1, 1, true}, TableCase{31, 2, 10, true},
                                           TableCase{32, 3, 10, false}, TableCase{33, 4, 10, true},
                                           TableCase{1023, 5, 300, true}, TableCase{1024, 6, 300, false},
                                           TableCase{1025, 7, 300, true}, TableCase{5000, 8, 700, false},
                                           TableCase{9000, 9, 2500, true}, TableCase{9000, 10, 2500, false}));

TEST(FilterEvaluation, EmptyTableAndEmptyRange) {
  const AttributeTable t({{"tenant", AttributeType::kInt64, {}, {}}}, {});
  EXPECT_EQ(t.blocks(), 0);
  const FilterProgram p = parse_filter(R"({"eq": {"tenant": 1}})", t.schema());
  std::uint32_t word = 0xabcdu;
  evaluate_mask(p, t, {0, 0}, &word);
  EXPECT_EQ(word, 0xabcdu);  // nothing written
  EXPECT_THAT(error_of([&] { evaluate_mask(p, t, {0, 1}, &word); }), HasSubstr("outside the shard's 0 rows"));
}

TEST(FilterEvaluation, ProgramMustFitTheTable) {
  const AttributeTable t = small_table();
  const FilterProgram p = parse_filter(R"({"eq": {"price": 1}})", t.schema());
  const AttributeTable other({{"price", AttributeType::kInt64, {1}, {}}}, {0});
  std::uint32_t w = 0;
  EXPECT_THAT(error_of([&] { evaluate_mask(p, other, {0, 1}, &w); }),
              HasSubstr("reads attribute column 2, but the corpus has 1 attribute columns"));
  EXPECT_THAT(error_of([&] { (void)passes(p, t, 5); }), HasSubstr("row 5 is outside the shard's 5 rows"));
  EXPECT_THAT(error_of([&] { (void)analyse_block(p, t, 1); }), HasSubstr("block 1 is outside the shard's 1 blocks"));
  EXPECT_THAT(error_of([&] { evaluate_mask(p, t, {3, 2}, &w); }), HasSubstr("row range [3, 2) is outside"));
}

TEST(FilterEvaluation, ThreadsGiveTheSameMask) {
  const AttributeTable t = test::random_table(200000, 21, 5000);
  test::FilterGenerator gen(t, 22, 5);
  for (int i = 0; i < 20; ++i) {
    const FilterProgram p = compile_filter(gen.next(), t.schema());
    std::vector<std::uint8_t> f1, f4;
    EXPECT_EQ(mask_of(p, t, {0, t.rows()}, &f1, 1), mask_of(p, t, {0, t.rows()}, &f4, 4));
    EXPECT_EQ(f1, f4);
    EXPECT_EQ(mask_of(p, t, {96, t.rows() - 3}, nullptr, 1), mask_of(p, t, {96, t.rows() - 3}, nullptr, 3));
  }
}

// The set search shared by the host and the GPU (branch-free lower bound, linear scan for small
// sets) against the standard library, for every set size up to past the linear limit.
TEST(FilterSemantics, SetSearchMatchesTheStandardLibrary) {
  std::mt19937_64 rng(5);
  for (int n = 0; n <= 3 * filter_detail::kLinearSetMax; ++n) {
    for (int rep = 0; rep < 20; ++rep) {
      std::set<std::int64_t> s;
      while (static_cast<int>(s.size()) < n) s.insert(static_cast<std::int64_t>(rng() % 200) - 100);
      const std::vector<std::int64_t> v(s.begin(), s.end());
      for (std::int64_t x = -102; x <= 102; ++x) {
        const auto lb = std::lower_bound(v.begin(), v.end(), x) - v.begin();
        ASSERT_EQ(filter_detail::lower_index(v.data(), n, x), lb) << n << " " << x;
        ASSERT_EQ(filter_detail::in_set(v.data(), n, x), std::binary_search(v.begin(), v.end(), x)) << n << " " << x;
      }
    }
  }
  const double z[] = {-1.0, 0.0, 2.0};
  EXPECT_TRUE(filter_detail::in_set(z, 3, -0.0));
  std::vector<double> big(40);
  for (int i = 0; i < 40; ++i) big[static_cast<std::size_t>(i)] = i - 20.0;
  EXPECT_TRUE(filter_detail::in_set(big.data(), 40, -0.0));
  EXPECT_FALSE(filter_detail::in_set(big.data(), 40, 0.5));
}

// ------------------------------------------------------------------------------ block summaries

// A "none" block never has a passing row and an "all" block never a failing one, for clustered
// and scattered columns; and the clustered columns do get decided blocks (the analysis is not
// vacuously "some").
TEST(FilterSummaries, VerdictsAreSound) {
  for (bool shuffle : {false, true}) {
    const AttributeTable t = test::random_table(20000, 31 + shuffle, 1500, 0, shuffle);
    test::FilterGenerator gen(t, 33, 5);
    std::int64_t decided = 0;
    for (int i = 0; i < 150; ++i) {
      const json f = gen.next();
      const FilterProgram p = compile_filter(f, t.schema());
      for (std::int64_t b = 0; b < t.blocks(); ++b) {
        const BlockVerdict v = analyse_block(p, t, b);
        if (v == BlockVerdict::kSome) continue;
        ++decided;
        for (std::int64_t r = b * kFilterBlockRows; r < std::min(t.rows(), (b + 1) * kFilterBlockRows); ++r)
          ASSERT_EQ(test::oracle_passes(f, t, r), v == BlockVerdict::kAll) << f.dump() << " block " << b << " row " << r;
      }
    }
    EXPECT_GT(decided, 1000) << (shuffle ? "shuffled ids" : "ids in order");
  }
}

TEST(FilterSummaries, ClusteredAttributeDecidesEveryBlockExactly) {
  // tenant runs of 4096 rows (4 blocks): eq decides every block, none of them "some".
  const AttributeTable t = test::random_table(64 * 1024, 41, 4096);
  const FilterProgram p = parse_filter(R"({"eq": {"tenant": 5}})", t.schema());
  for (std::int64_t b = 0; b < t.blocks(); ++b)
    EXPECT_EQ(analyse_block(p, t, b), b / 4 == 5 ? BlockVerdict::kAll : BlockVerdict::kNone) << b;
  // not / all / any combine verdicts
  const FilterProgram q = parse_filter(
      R"({"any": [{"not": {"range": {"tenant": [null, 10]}}}, {"all": [{"eq": {"tenant": 3}}, {"range": {"year": [null, null]}}]}]})",
      t.schema());
  for (std::int64_t b = 0; b < t.blocks(); ++b)
    EXPECT_EQ(analyse_block(q, t, b), (b / 4 > 10 || b / 4 == 3) ? BlockVerdict::kAll : BlockVerdict::kNone) << b;
  // a scattered low-entropy column decides nothing except the trivial
  const FilterProgram s = parse_filter(R"({"eq": {"tag": 3}})", t.schema());
  for (std::int64_t b = 0; b < t.blocks(); ++b) EXPECT_EQ(analyse_block(s, t, b), BlockVerdict::kSome);
  const FilterProgram s2 = parse_filter(R"({"range": {"tag": [0, 9]}})", t.schema());
  for (std::int64_t b = 0; b < t.blocks(); ++b) EXPECT_EQ(analyse_block(s2, t, b), BlockVerdict::kAll);
}

TEST(FilterSummaries, IdSetsCoveringABlockDecideIt) {
  // ids in order (1000 + row): a list holding every id of block 2 makes it "all", one id short "some".
  const AttributeTable t = test::random_table(5000, 51, 100, 1000, false);
  json all_ids = json::array(), most_ids = json::array();
  for (std::int64_t r = 2 * kFilterBlockRows; r < 3 * kFilterBlockRows; ++r) {
    all_ids.push_back(1000 + r);
    if (r != 2 * kFilterBlockRows + 500) most_ids.push_back(1000 + r);
  }
  const FilterProgram a = compile_filter(json{{"ids_in", all_ids}}, t.schema());
  const FilterProgram m = compile_filter(json{{"ids_in", most_ids}}, t.schema());
  const FilterProgram n = compile_filter(json{{"ids_not_in", all_ids}}, t.schema());
  EXPECT_EQ(analyse_block(a, t, 2), BlockVerdict::kAll);
  EXPECT_EQ(analyse_block(m, t, 2), BlockVerdict::kSome);
  EXPECT_EQ(analyse_block(n, t, 2), BlockVerdict::kNone);
  for (std::int64_t b : {0, 1, 3, 4}) {
    EXPECT_EQ(analyse_block(a, t, b), BlockVerdict::kNone);
    EXPECT_EQ(analyse_block(n, t, b), BlockVerdict::kAll);
  }
  // float sets: "all" only when a block holds a single value that is in the set
  const AttributeTable z({{"x", AttributeType::kFloat64, {}, std::vector<double>(2048, -0.0)}},
                         std::vector<std::int64_t>(2048, 0));
  EXPECT_EQ(analyse_block(parse_filter(R"({"in": {"x": [0, 1]}})", z.schema()), z, 1), BlockVerdict::kAll);
  EXPECT_EQ(analyse_block(parse_filter(R"({"in": {"x": [1]}})", z.schema()), z, 1), BlockVerdict::kNone);
}

// The whole table's verdict: "all" exactly when its bounds prove that every row passes (a
// search may then drop the filter), also after a write widens them; sound on random filters.
TEST(FilterSummaries, TableVerdictFromTheWholeTablesBounds) {
  const AttributeTable t = test::random_table(64 * 1024, 41, 4096);  // tenant runs 0 .. 15
  EXPECT_EQ(analyse_table(parse_filter(R"({"range": {"tenant": [0, 15]}})", t.schema()), t), BlockVerdict::kAll);
  EXPECT_EQ(analyse_table(parse_filter(R"({"range": {"tenant": [0, 14]}})", t.schema()), t), BlockVerdict::kSome);
  EXPECT_EQ(analyse_table(parse_filter(R"({"range": {"tenant": [16, null]}})", t.schema()), t), BlockVerdict::kNone);
  EXPECT_EQ(analyse_table(parse_filter(R"({"not": {"eq": {"tenant": 99}}})", t.schema()), t), BlockVerdict::kAll);
  // a write of tenant 40 into one row: [0, 15] no longer covers the table
  AttributeTable w = t;
  std::vector<std::int64_t> row_values;
  for (const AttributeSpec& c : w.schema()) row_values.push_back(c.name == "tenant" ? 40 : 0);
  std::vector<double> reals(w.schema().size(), 0.0);
  std::vector<const void*> values;
  for (std::size_t c = 0; c < w.schema().size(); ++c)
    values.push_back(w.schema()[c].type == AttributeType::kInt64 ? static_cast<const void*>(&row_values[c])
                                                                 : static_cast<const void*>(&reals[c]));
  const std::int64_t slot = 777, id = 123456;
  w.write_rows(&slot, 1, &id, values.data());
  EXPECT_EQ(analyse_table(parse_filter(R"({"range": {"tenant": [0, 15]}})", w.schema()), w), BlockVerdict::kSome);
  EXPECT_EQ(analyse_table(parse_filter(R"({"range": {"tenant": [0, 40]}})", w.schema()), w), BlockVerdict::kAll);
  // soundness on random filters, scattered and clustered
  for (bool shuffle : {false, true}) {
    const AttributeTable r = test::random_table(5000, 61 + shuffle, 700, 0, shuffle);
    test::FilterGenerator gen(r, 63, 5);
    for (int i = 0; i < 300; ++i) {
      const json f = gen.next();
      const BlockVerdict v = analyse_table(compile_filter(f, r.schema()), r);
      if (v == BlockVerdict::kSome) continue;
      for (std::int64_t row = 0; row < r.rows(); ++row)
        ASSERT_EQ(test::oracle_passes(f, r, row), v == BlockVerdict::kAll) << f.dump() << " row " << row;
    }
  }
  const AttributeTable empty;
  EXPECT_EQ(analyse_table(parse_filter(R"({"ids_in": [1]})", empty.schema()), empty), BlockVerdict::kSome);
}

// ------------------------------------------------------------------------------ the table

TEST(AttributeTable, BoundsPerBlock) {
  std::vector<std::int64_t> v(2500), ids(2500);
  std::vector<double> d(2500);
  for (int r = 0; r < 2500; ++r) {
    v[static_cast<std::size_t>(r)] = (r * 7919) % 1000 - 500;
    d[static_cast<std::size_t>(r)] = -r * 0.5;
    ids[static_cast<std::size_t>(r)] = 2500 - r;
  }
  const AttributeTable t({{"v", AttributeType::kInt64, v, {}}, {"d", AttributeType::kFloat64, {}, d}}, ids, 2);
  ASSERT_EQ(t.blocks(), 3);
  for (int b = 0; b < 3; ++b) {
    const auto lo = v.begin() + b * 1024, hi = v.begin() + std::min(2500, (b + 1) * 1024);
    EXPECT_EQ(t.bounds(0).ints_min[static_cast<std::size_t>(b)], *std::min_element(lo, hi));
    EXPECT_EQ(t.bounds(0).ints_max[static_cast<std::size_t>(b)], *std::max_element(lo, hi));
    EXPECT_EQ(t.bounds(1).reals_max[static_cast<std::size_t>(b)], -b * 1024 * 0.5);
    EXPECT_EQ(t.bounds(1).reals_min[static_cast<std::size_t>(b)], -(std::min(2500, (b + 1) * 1024) - 1) * 0.5);
    EXPECT_EQ(t.bounds(kFilterIdColumn).ints_max[static_cast<std::size_t>(b)], 2500 - b * 1024);
    EXPECT_EQ(t.bounds(kFilterIdColumn).ints_min[static_cast<std::size_t>(b)], 2500 - (std::min(2500, (b + 1) * 1024) - 1));
  }
  EXPECT_EQ(t.schema(), (AttributeSchema{{"v", AttributeType::kInt64}, {"d", AttributeType::kFloat64}}));
}

TEST(AttributeTable, RefusesInconsistentColumns) {
  auto err = [](std::vector<AttributeColumn> cols, std::vector<std::int64_t> ids) {
    return error_of([&] { AttributeTable t(std::move(cols), std::move(ids)); });
  };
  EXPECT_THAT(err({{"a", AttributeType::kInt64, {1, 2}, {}}}, {0, 1, 2}),
              HasSubstr("column 'a' has 2 values, the shard has 3 rows"));
  EXPECT_THAT(err({{"a", AttributeType::kInt64, {1}, {}}, {"a", AttributeType::kFloat64, {}, {1.0}}}, {0}),
              HasSubstr("two attribute columns are named 'a'"));
  EXPECT_THAT(err({{"p", AttributeType::kFloat64, {}, {1.0, std::nan(""), 2.0}}}, {0, 1, 2}),
              HasSubstr("column 'p' is NaN at shard row 1"));
  EXPECT_THAT(err({{"a", AttributeType::kInt64, {1}, {2.0}}}, {0}), HasSubstr("column 'a' is int64 but holds float64"));
  EXPECT_THAT(err({{"", AttributeType::kInt64, {1}, {}}}, {0}), HasSubstr("empty name"));
  std::vector<AttributeColumn> many;
  for (int i = 0; i <= kFilterMaxAttributes; ++i) many.push_back({"c" + std::to_string(i), AttributeType::kInt64, {1}, {}});
  EXPECT_THAT(err(many, {0}), HasSubstr("65 attribute columns, at most 64"));
  // the first NaN of a long column is the one named
  std::vector<double> d(300000, 1.0);
  d[123457] = std::nan("");
  d[250000] = std::nan("");
  EXPECT_THAT(error_of([&] { AttributeTable t({{"p", AttributeType::kFloat64, {}, d}}, std::vector<std::int64_t>(300000), 4); }),
              HasSubstr("NaN at shard row 123457"));
}

}  // namespace
}  // namespace shardtopk
