// The filter language and its evaluation on the host: parsing (every operator, every error,
// the limits, hostile input), the serialised form, evaluation against a brute-force oracle that
// interprets the JSON itself, block-summary soundness, attribute reading from HDF5, the
// corpus.attributes config key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <hdf5.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardtopk/filter_semantics.hpp"
#include "filter_support.hpp"
#include "shardtopk/config.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::HasSubstr;
using test::error_of;
using test::json;

const AttributeSchema kSchema = {
    {"tenant", AttributeType::kInt64}, {"year", AttributeType::kInt64}, {"price", AttributeType::kFloat64}};

// A small table with hand-picked values, for exact expectations.
//   row  id   tenant year  price
//   0    100  7      2018  1.5
//   1    101  7      2019  -0.0
//   2    102  8      2024  0.0
//   3    103  9      2025  2.5
//   4    104  7      2021  1e300
AttributeTable small_table() {
  return AttributeTable({{"tenant", AttributeType::kInt64, {7, 7, 8, 9, 7}, {}},
                         {"year", AttributeType::kInt64, {2018, 2019, 2024, 2025, 2021}, {}},
                         {"price", AttributeType::kFloat64, {}, {1.5, -0.0, 0.0, 2.5, 1e300}}},
                        {100, 101, 102, 103, 104});
}

std::vector<std::int64_t> passing_rows(const std::string& filter, const AttributeTable& t) {
  const FilterProgram p = parse_filter(filter, t.schema());
  std::vector<std::int64_t> out;
  for (std::int64_t r = 0; r < t.rows(); ++r)
    if (passes(p, t, r)) out.push_back(r);
  return out;
}

std::vector<std::uint32_t> mask_of(const FilterProgram& p, const AttributeTable& t, RowRange rows,
                                   std::vector<std::uint8_t>* flags = nullptr, int threads = 1) {
  std::vector<std::uint32_t> bits(static_cast<std::size_t>(filter_mask_words(rows.size())) + 1, 0xdeadbeefu);
  if (flags && rows.size() > 0)
    flags->assign(static_cast<std::size_t>((rows.hi - 1) / kFilterBlockRows - rows.lo / kFilterBlockRows + 1), 99);
  evaluate_mask(p, t, rows, bits.data(), flags ? flags->data() : nullptr, threads);
  EXPECT_EQ(bits.back(), 0xdeadbeefu) << "evaluate_mask wrote past its words";
  bits.pop_back();
  return bits;
}

bool bit(const std::vector<std::uint32_t>& bits, std::int64_t i) {
  return (bits[static_cast<std::size_t>(i / 32)] >> (i % 32)) & 1u;
}

// ------------------------------------------------------------------------------ operators

TEST(FilterLanguage, EveryOperatorSelectsTheRowsItNames) {
  const AttributeTable t = small_table();
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(passing_rows(R"({"eq": {"tenant": 7}})", t), (V{0, 1, 4}));
  EXPECT_EQ(passing_rows(R"({"eq": {"price": 0}})", t), (V{1, 2}));  // -0.0 == 0.0
  EXPECT_EQ(passing_rows(R"({"eq": {"price": -0.0}})", t), (V{1, 2}));
  EXPECT_EQ(passing_rows(R"({"eq": {"price": 1}})", t), (V{}));
  EXPECT_EQ(passing_rows(R"({"in": {"tenant": [9, 8, 9]}})", t), (V{2, 3}));
  EXPECT_EQ(passing_rows(R"({"in": {"tenant": []}})", t), (V{}));
  EXPECT_EQ(passing_rows(R"({"in": {"price": [2.5, 1.5]}})", t), (V{0, 3}));
  EXPECT_EQ(passing_rows(R"({"range": {"year": [2019, 2024]}})", t), (V{1, 2, 4}));  // inclusive
  EXPECT_EQ(passing_rows(R"({"range": {"year": [null, 2019]}})", t), (V{0, 1}));
  EXPECT_EQ(passing_rows(R"({"range": {"year": [2024, null]}})", t), (V{2, 3}));
  EXPECT_EQ(passing_rows(R"({"range": {"year": [null, null]}})", t), (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(passing_rows(R"({"range": {"price": [0, 2]}})", t), (V{0, 1, 2}));
  EXPECT_EQ(passing_rows(R"({"range": {"price": [2, null]}})", t), (V{3, 4}));
  EXPECT_EQ(passing_rows(R"({"range": {"year": [2020, 2020]}})", t), (V{}));
  EXPECT_EQ(passing_rows(R"({"ids_in": [104, 100, 5]})", t), (V{0, 4}));
  EXPECT_EQ(passing_rows(R"({"ids_not_in": [104, 100, 5]})", t), (V{1, 2, 3}));
  EXPECT_EQ(passing_rows(R"({"ids_in": []})", t), (V{}));
  EXPECT_EQ(passing_rows(R"({"ids_not_in": []})", t), (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(passing_rows(R"({"all": [{"eq": {"tenant": 7}}, {"range": {"year": [2019, null]}}]})", t), (V{1, 4}));
  EXPECT_EQ(passing_rows(R"({"any": [{"eq": {"tenant": 8}}, {"ids_in": [100]}]})", t), (V{0, 2}));
  EXPECT_EQ(passing_rows(R"({"not": {"eq": {"tenant": 7}}})", t), (V{2, 3}));
  EXPECT_EQ(passing_rows(R"({"all": []})", t), (V{0, 1, 2, 3, 4}));  // empty all: true
  EXPECT_EQ(passing_rows(R"({"any": []})", t), (V{}));               // empty any: false
  EXPECT_EQ(passing_rows(R"({"not": {"any": []}})", t), (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(passing_rows(R"({"all": [{"eq": {"tenant": 9}}]})", t), (V{3}));
  EXPECT_EQ(passing_rows(R"({"any": [{"eq": {"tenant": 9}}, {"eq": {"tenant": 8}}, {"eq": {"year": 2018}}]})", t),
            (V{0, 2, 3}));
}

TEST(FilterLanguage, ExtremeIntegersCompareExactly) {
  const std::int64_t lo = std::numeric_limits<std::int64_t>::min(), hi = std::numeric_limits<std::int64_t>::max();
  const AttributeTable t({{"v", AttributeType::kInt64, {lo, -1, 0, hi - 1, hi}, {}}}, {0, 1, 2, 3, 4});
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(passing_rows(R"({"eq": {"v": -9223372036854775808}})", t), (V{0}));
  EXPECT_EQ(passing_rows(R"({"eq": {"v": 9223372036854775807}})", t), (V{4}));
  EXPECT_EQ(passing_rows(R"({"range": {"v": [-9223372036854775808, 9223372036854775807]}})", t), (V{0, 1, 2, 3, 4}));
  EXPECT_EQ(passing_rows(R"({"range": {"v": [9223372036854775806, null]}})", t), (V{3, 4}));
  EXPECT_EQ(passing_rows(R"({"range": {"v": [null, -1]}})", t), (V{0, 1}));
  EXPECT_EQ(passing_rows(R"({"in": {"v": [9223372036854775807, -9223372036854775808]}})", t), (V{0, 4}));
}

TEST(FilterLanguage, EqualFiltersCompileToEqualPrograms) {
  auto prog = [](const std::string& s) { return parse_filter(s, kSchema); };
  const FilterProgram a = prog(R"({"in": {"tenant": [5, 1, 1, 3]}})");
  const FilterProgram b = prog(R"({"in": {"tenant": [1, 3, 5]}})");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_EQ(a.serialize(), b.serialize());
  EXPECT_EQ(prog(R"({"eq": {"year": 7}})"), prog(R"({"range": {"year": [7, 7]}})"));
  EXPECT_EQ(prog(R"({"eq": {"price": -0.0}})"), prog(R"({"eq": {"price": 0}})"));
  EXPECT_EQ(prog(R"({"eq": {"price": 2}})"), prog(R"({"eq": {"price": 2.0}})"));
  EXPECT_EQ(prog(R"({"ids_in": [3, 2, 3]})"), prog(R"({"ids_in": [2, 3]})"));
  EXPECT_EQ(prog(R"({"all": []})"), FilterProgram());
  EXPECT_TRUE(prog(R"({"all": []})").passes_everything());
  EXPECT_FALSE(prog(R"({"any": []})").passes_everything());
  // different filters, different programs and hashes
  const std::vector<std::string> distinct = {
      R"({"eq": {"tenant": 7}})", R"({"eq": {"tenant": 8}})", R"({"eq": {"year": 7}})",
      R"({"in": {"tenant": [7]}})", R"({"ids_in": [7]})", R"({"ids_not_in": [7]})", R"({"not": {"eq": {"tenant": 7}}})",
      R"({"all": [{"eq": {"tenant": 7}}, {"eq": {"year": 1}}]})", R"({"any": [{"eq": {"tenant": 7}}, {"eq": {"year": 1}}]})",
      R"({"all": [{"eq": {"year": 1}}, {"eq": {"tenant": 7}}]})", R"({"any": []})", R"({"eq": {"price": 7}})"};
  std::set<std::uint64_t> hashes;
  for (std::size_t i = 0; i < distinct.size(); ++i) {
    hashes.insert(prog(distinct[i]).hash());
    for (std::size_t j = 0; j < i; ++j) EXPECT_NE(prog(distinct[i]), prog(distinct[j])) << distinct[i] << " vs " << distinct[j];
  }
  EXPECT_EQ(hashes.size(), distinct.size());
}

// ------------------------------------------------------------------------------ errors

struct BadFilter {
  const char* name;
  std::string text;
  std::vector<std::string> expect;  // substrings of the message
};
std::ostream& operator<<(std::ostream& os, const BadFilter& c) { return os << c.name << ": " << c.text; }

class FilterErrors : public ::testing::TestWithParam<BadFilter> {};

TEST_P(FilterErrors, NameTheAttributeValueOrKey) {
  const BadFilter& c = GetParam();
  const std::string msg = error_of([&] { (void)parse_filter(c.text, kSchema); });
  EXPECT_EQ(msg.rfind("filter: ", 0), 0u) << msg;
  for (const auto& e : c.expect) EXPECT_THAT(msg, HasSubstr(e));
}

// Every error the compiler and the parser raise, one row each.
INSTANTIATE_TEST_SUITE_P(
    Cases, FilterErrors,
    ::testing::Values(
        BadFilter{"unknown_attribute", R"({"eq": {"tenat": 7}})",
                  {"filter: unknown attribute 'tenat' (known: tenant, year, price)"}},
        BadFilter{"two_attributes", R"({"eq": {"tenant": 7, "year": 2020}})", {"filter: 'eq' expects one attribute, got 2"}},
        BadFilter{"no_attribute", R"({"in": {}})", {"'in' expects one attribute, got 0"}},
        BadFilter{"eq_not_object", R"({"eq": [1]})", {"'eq' expects an object {attribute: value}, got an array of 1 values"}},
        BadFilter{"fraction_for_int", R"({"eq": {"tenant": 7.5}})",
                  {"'eq' value 7.5 for int64 attribute 'tenant' is not an integer (int64 values compare exactly with integers)"}},
        BadFilter{"float_spelling_for_int", R"({"eq": {"tenant": 7.0}})", {"'eq' value 7.0 for int64 attribute 'tenant' is not an integer"}},
        BadFilter{"string_for_int", R"({"eq": {"tenant": "7"}})", {"'eq' value for int64 attribute 'tenant' must be an integer, got the string '7'"}},
        BadFilter{"null_for_int", R"({"eq": {"tenant": null}})", {"must be an integer, got null"}},
        BadFilter{"bool_for_float", R"({"eq": {"price": true}})", {"float64 attribute 'price' must be a number, got true"}},
        BadFilter{"beyond_int64", R"({"eq": {"tenant": 9223372036854775808}})", {"value 9223372036854775808 for int64 attribute 'tenant' is outside int64"}},
        // below int64 and beyond 64 bits: the parser reads such integers as reals
        BadFilter{"below_int64", R"({"eq": {"tenant": -9223372036854775809}})", {"for int64 attribute 'tenant' is outside int64"}},
        BadFilter{"id_below_int64", R"({"ids_in": [-9223372036854775809]})", {"'ids_in' id", "is outside int64"}},
        BadFilter{"beyond_uint64", R"({"eq": {"tenant": 18446744073709551616}})", {"is outside int64"}},
        BadFilter{"inexact_float", R"({"eq": {"price": 9007199254740993}})",
                  {"'eq' value 9007199254740993 for float64 attribute 'price' is not exactly representable as a float64"}},
        BadFilter{"inexact_float_negative", R"({"in": {"price": [-9223372036854775807]}})",
                  {"not exactly representable as a float64"}},
        BadFilter{"in_not_list", R"({"in": {"tenant": 5}})", {"'in' for 'tenant' expects a list of values, got 5"}},
        BadFilter{"in_bad_member", R"({"in": {"tenant": [1, "a"]}})", {"must be an integer, got the string 'a'"}},
        BadFilter{"range_empty", R"({"range": {"year": [2024, 2019]}})",
                  {"'range' for 'year' is empty: lower bound 2024 is above upper bound 2019"}},
        BadFilter{"range_empty_float", R"({"range": {"price": [2.5, 1]}})", {"lower bound 2.5 is above upper bound 1"}},
        BadFilter{"range_one_bound", R"({"range": {"year": [2019]}})",
                  {"'range' for 'year' expects [lo, hi] (inclusive; null for an open end), got an array of 1 values"}},
        BadFilter{"range_scalar", R"({"range": {"year": 2019}})", {"expects [lo, hi]", "got 2019"}},
        BadFilter{"range_fraction", R"({"range": {"year": [2019.5, 2024]}})", {"'range' bound 2019.5 for int64 attribute 'year' is not an integer"}},
        BadFilter{"ids_not_list", R"({"ids_in": 5})", {"'ids_in' expects a list of global ids, got 5"}},
        BadFilter{"ids_fraction", R"({"ids_not_in": [1, 1.5]})", {"'ids_not_in' id 1.5 is not an integer"}},
        BadFilter{"all_not_list", R"({"all": {}})", {"'all' expects a list of filters, got an object with 0 keys"}},
        BadFilter{"any_member_scalar", R"({"any": [{"eq": {"year": 1}}, 5]})",
                  {"expected a filter object with one operator", "got 5 (at any[1])"}},
        BadFilter{"not_list", R"({"not": []})", {"got an array of 0 values (at not)"}},
        BadFilter{"unknown_operator", R"({"eqq": {"tenant": 7}})",
                  {"unknown operator 'eqq' (known: eq, in, range, ids_in, ids_not_in, all, any, not)"}},
        BadFilter{"empty_object", R"({})", {"a filter object has exactly one key (its operator), got 0"}},
        BadFilter{"two_operators", R"({"eq": {"tenant": 7}, "in": {"tenant": [7]}})", {"got 2 ('eq', 'in')"}},
        BadFilter{"top_level_number", "5", {"expected a filter object", "got 5"}},
        BadFilter{"top_level_array", "[]", {"got an array of 0 values"}},
        BadFilter{"top_level_string", R"("eq")", {"got the string 'eq'"}},
        BadFilter{"top_level_null", "null", {"got null"}},
        BadFilter{"nested_location", R"({"all": [{"eq": {"tenant": 1}}, {"not": {"eq": {"tenat": 1}}}]})",
                  {"unknown attribute 'tenat'", "(at all[1].not)"}},
        BadFilter{"deep_location", R"({"any": [{"all": [{"eq": {"year": 1}}, {"in": {"year": [1.5]}}]}]})",
                  {"(at any[0].all[1])"}},
        BadFilter{"control_characters_escaped", "{\"eq\": {\"a\\u0001b\": 1}}", {"unknown attribute 'a\\x01b'"}},
        BadFilter{"long_name_cut", "{\"eq\": {\"" + std::string(500, 'x') + "\": 1}}", {"xxx...' (known"}},
        BadFilter{"invalid_json", R"({"eq": {"tenant": 7})", {"filter: invalid JSON"}},
        BadFilter{"trailing_garbage", R"({"eq": {"tenant": 7}} x)", {"filter: invalid JSON"}}),
    [](const ::testing::TestParamInfo<BadFilter>& i) { return std::string(i.param.name); });

TEST(FilterErrors, NonFiniteNumbersAreRefused) {
  // JSON text cannot spell NaN or inf, but a json value built in C++ can.
  for (double v : {std::nan(""), std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    const json eq = {{"eq", {{"price", v}}}};
    EXPECT_THAT(error_of([&] { (void)compile_filter(eq, kSchema); }),
                HasSubstr("is not a finite number (NaN and infinities are refused)"));
    const json range = {{"range", {{"price", json::array({0.0, v})}}}};
    EXPECT_THAT(error_of([&] { (void)compile_filter(range, kSchema); }), HasSubstr("is not a finite number"));
    const json in = {{"in", {{"price", json::array({v})}}}};
    EXPECT_THAT(error_of([&] { (void)compile_filter(in, kSchema); }), HasSubstr("is not a finite number"));
  }
  EXPECT_THAT(error_of([&] { (void)compile_filter(json{{"eq", {{"price", std::nan("")}}}}, kSchema); }),
              HasSubstr("'eq' value NaN for float64 attribute 'price' is not a finite number"));
}

TEST(FilterErrors, NoAttributesConfigured) {
  EXPECT_THAT(error_of([] { (void)parse_filter(R"({"eq": {"tenant": 1}})", {}); }),
              HasSubstr("unknown attribute 'tenant' (known: none; the corpus has no corpus.attributes)"));
  // ids filters need no attributes
  EXPECT_NO_THROW((void)parse_filter(R"({"ids_in": [1, 2]})", {}));
}

// ------------------------------------------------------------------------------ limits

std::string nots(int depth) {  // `depth` levels: depth - 1 nots around an eq
  std::string s;
  for (int i = 1; i < depth; ++i) s += R"({"not": )";
  s += R"({"eq": {"tenant": 7}})";
  for (int i = 1; i < depth; ++i) s += "}";
  return s;
}
std::string alls(int depth) {  // `depth` levels of single-member all around an in
  std::string s;
  for (int i = 1; i < depth; ++i) s += R"({"all": [)";
  s += R"({"in": {"tenant": [1, 2]}})";
  for (int i = 1; i < depth; ++i) s += "]}";
  return s;
}

TEST(FilterLimits, DepthUpToTheLimitCompilesAndOneMoreIsRefused) {
  const AttributeTable t = small_table();
  for (auto make : {nots, alls}) {
    const FilterProgram p = parse_filter(make(kFilterMaxDepth), kSchema);
    EXPECT_LE(p.max_stack(), kFilterMaxStack);
    EXPECT_THAT(error_of([&] { (void)parse_filter(make(kFilterMaxDepth + 1), kSchema); }),
                HasSubstr("filter: nested deeper than 32 levels"));
    // the same through an already parsed value
    EXPECT_THAT(error_of([&] { (void)compile_filter(json::parse(make(kFilterMaxDepth + 1)), kSchema); }),
                HasSubstr("nested deeper than 32 levels"));
  }
  // 31 nots around an eq: the row passes when the eq fails (odd count)
  EXPECT_EQ(passing_rows(nots(kFilterMaxDepth), t), (std::vector<std::int64_t>{2, 3}));
  // the deepest stack: a right-leaning chain all[x, all[x, ...]] needs depth + 1 values
  std::string s;
  for (int i = 1; i < kFilterMaxDepth; ++i) s += R"({"all": [{"eq": {"year": 1}}, )";
  s += R"({"eq": {"year": 1}})";
  for (int i = 1; i < kFilterMaxDepth; ++i) s += "]}";
  EXPECT_EQ(parse_filter(s, kSchema).max_stack(), kFilterMaxDepth);
}

TEST(FilterLimits, HostileNestingIsRefusedBeforeRecursing) {
  // A million open brackets or objects: the parser stops at the first container too deep.
  for (const std::string& open : {std::string("["), std::string(R"({"not": )"), std::string(R"({"all": [)")}) {
    std::string s;
    s.reserve(open.size() * 1000000);
    for (int i = 0; i < 1000000; ++i) s += open;
    EXPECT_THAT(error_of([&] { (void)parse_filter(s, kSchema); }), HasSubstr("nested deeper than 32 levels"));
  }
  // A deep value built in memory: the compiler checks depth before each step down.
  json deep = {{"eq", {{"tenant", 1}}}};
  for (int i = 0; i < 100000; ++i) deep = json{{"not", std::move(deep)}};
  EXPECT_THAT(error_of([&] { (void)compile_filter(deep, kSchema); }), HasSubstr("nested deeper than 32 levels"));
  // and an error message never dumps a deep value (2,000 levels: the json below copies it
  // recursively, which must fit the stack under AddressSanitizer too)
  json deep_value = json::array();
  for (int i = 0; i < 2000; ++i) deep_value = json::array({std::move(deep_value)});
  EXPECT_THAT(error_of([&] { (void)compile_filter(json{{"eq", {{"tenant", deep_value}}}}, kSchema); }),
              HasSubstr("got an array of 1 values"));
}

TEST(FilterLimits, OperatorCount) {
  auto any_of = [](int n) {
    json list = json::array();
    for (int i = 0; i < n; ++i) list.push_back({{"eq", {{"tenant", i}}}});
    return json{{"any", list}};
  };
  const FilterProgram p = compile_filter(any_of(kFilterMaxNodes - 1), kSchema);  // 255 leaves + the any
  EXPECT_EQ(p.ops().size(), static_cast<std::size_t>(2 * (kFilterMaxNodes - 1) - 1));
  EXPECT_THAT(error_of([&] { (void)compile_filter(any_of(kFilterMaxNodes), kSchema); }),
              HasSubstr("filter: more than 256 operators in one filter"));
  EXPECT_THAT(error_of([&] { (void)compile_filter(any_of(100000), kSchema); }),
              HasSubstr("more than 256 operators in one filter ('any' lists 100000)"));
  // the longest program: an all of 255 ids_not_in (two instructions each, and 254 ands)
  json wide = json::array();
  for (int i = 0; i < kFilterMaxNodes - 1; ++i) wide.push_back({{"ids_not_in", {2 * i}}});
  const FilterProgram longest = compile_filter(json{{"all", wide}}, kSchema);
  EXPECT_EQ(longest.ops().size(), static_cast<std::size_t>(2 * (kFilterMaxNodes - 1) + kFilterMaxNodes - 2));
  EXPECT_LE(longest.ops().size(), static_cast<std::size_t>(kFilterMaxOps));
  const AttributeTable t = small_table();
  EXPECT_EQ(passing_rows(json{{"all", wide}}.dump(), t), (std::vector<std::int64_t>{1, 3}));  // odd ids 101, 103
}

TEST(FilterLimits, ValueCountAcrossAllLists) {
  json big = json::array();
  for (std::int64_t i = 0; i < kFilterMaxValues; ++i) big.push_back(i);
  const FilterProgram p = compile_filter(json{{"ids_in", big}}, kSchema);
  EXPECT_EQ(p.ints().size(), static_cast<std::size_t>(kFilterMaxValues));
  // one more value anywhere in the filter is refused
  EXPECT_THAT(error_of([&] {
                (void)compile_filter(json{{"all", {{{"ids_in", big}}, {{"in", {{"tenant", {1}}}}}}}}, kSchema);
              }),
              HasSubstr("more than 1048576 values in the lists of one filter ('in' has 1, after 1048576 before it)"));
  big.push_back(1);
  EXPECT_THAT(error_of([&] { (void)compile_filter(json{{"ids_not_in", big}}, kSchema); }),
              HasSubstr("more than 1048576 values in the lists of one filter ('ids_not_in' has 1048577)"));
  // from text, the parser stops counting values before the document is complete
  std::string s = R"({"ids_in": [)";
  for (std::int64_t i = 0; i < 2 * kFilterMaxValues; ++i) s += "1,";
  s += "1]}";
  EXPECT_THAT(error_of([&] { (void)parse_filter(s, kSchema); }), HasSubstr("more than 1048576 values"));
}

// ------------------------------------------------------------------------------ serialised form

TEST(FilterImage, RoundTripGivesTheSameProgramBytesAndHash) {
  const AttributeTable t = test::random_table(3000, 11);
  test::FilterGenerator gen(t, 12, 6);
  for (int i = 0; i < 300; ++i) {
    const json f = gen.next();
    const FilterProgram p = compile_filter(f, t.schema());
    const std::vector<std::uint8_t> bytes = p.serialize();
    ASSERT_EQ(bytes.size(), p.serialized_bytes());
    ASSERT_EQ(bytes.size() % 8, 0u);
    const FilterProgram q = deserialize_filter(bytes.data(), bytes.size(), t.schema());
    ASSERT_EQ(p, q) << f.dump();
    ASSERT_EQ(q.serialize(), bytes);
    ASSERT_EQ(q.hash(), p.hash());
    ASSERT_EQ(q.max_stack(), p.max_stack());
    // and a recompilation of the same text gives the same bytes (what every rank relies on)
    ASSERT_EQ(parse_filter(f.dump(), t.schema()).serialize(), bytes) << f.dump();
  }
}

TEST(FilterImage, HashIsStable) {
  // FNV-1a 64 of the serialised form, pinned: a change of layout or hash shows here.
  const FilterProgram p = parse_filter(R"({"eq": {"tenant": 7}})", kSchema);
  const std::vector<std::uint8_t> b = p.serialize();
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::uint8_t x : b) h = (h ^ x) * 0x100000001b3ull;
  EXPECT_EQ(p.hash(), h);
  EXPECT_EQ(b.size(), 32u + 16u + 16u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), 4), "STKF");
}

// Writes `v` at byte `off` of an image.
template <class T>
std::vector<std::uint8_t> patched(std::vector<std::uint8_t> b, std::size_t off, T v) {
  std::memcpy(b.data() + off, &v, sizeof v);
  return b;
}

TEST(FilterImage, CorruptImagesAreRefusedByName) {
  const FilterProgram p = parse_filter(
      R"({"all": [{"in": {"tenant": [1, 2, 3]}}, {"range": {"price": [0.5, 2]}}, {"ids_not_in": [4]}]})", kSchema);
  const std::vector<std::uint8_t> b = p.serialize();
  // layout: header 32, 6 ops x 16 (in, range, and, in-id, not, and), 4 ints, 2 reals
  ASSERT_EQ(p.ops().size(), 6u);
  const std::size_t ops = 32, ints = ops + 6 * 16, reals = ints + 4 * 8;
  auto refused = [&](const std::vector<std::uint8_t>& img, const AttributeSchema& s = kSchema) {
    return error_of([&] { (void)deserialize_filter(img.data(), img.size(), s); });
  };
  EXPECT_THAT(refused({}), HasSubstr("shorter than its 32-byte header"));
  for (std::size_t cut = 1; cut < b.size(); ++cut)
    EXPECT_THAT(refused(std::vector<std::uint8_t>(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(cut))),
                HasSubstr("filter image: "))
        << cut;
  std::vector<std::uint8_t> longer = b;
  longer.resize(b.size() + 8);
  EXPECT_THAT(refused(longer), HasSubstr("but its header describes"));
  EXPECT_THAT(refused(patched<std::uint32_t>(b, 0, 0x12345678u)), HasSubstr("bad magic number"));
  EXPECT_THAT(refused(patched<std::uint16_t>(b, 4, 2)), HasSubstr("version 2, this build reads version 1"));
  EXPECT_THAT(refused(patched<std::uint16_t>(b, 6, 9)), HasSubstr("header says stack depth 9"));
  EXPECT_THAT(refused(patched<std::int32_t>(b, 8, 100000)), HasSubstr("100000 instructions (allowed: 1 .. 768)"));
  EXPECT_THAT(refused(patched<std::int32_t>(b, 8, 0)), HasSubstr("0 instructions"));
  EXPECT_THAT(refused(patched<std::int32_t>(b, 12, -1)), HasSubstr("-1 int64 and 2 float64 constants"));
  EXPECT_THAT(refused(patched<std::int32_t>(b, 16, 1 << 30)), HasSubstr("float64 constants (allowed: at most"));
  EXPECT_THAT(refused(patched<std::int32_t>(b, 20, 1)), HasSubstr("non-zero reserved header fields"));
  EXPECT_THAT(refused(patched<std::uint8_t>(b, ops + 0, 99)), HasSubstr("unknown opcode 99"));
  EXPECT_THAT(refused(patched<std::uint8_t>(b, ops + 1, 1)), HasSubstr("non-zero reserved bytes"));
  EXPECT_THAT(refused(patched<std::int32_t>(b, ops + 4, 7)),
              HasSubstr("reads attribute column 7, but the corpus has 3 attribute columns"));
  EXPECT_THAT(refused(patched<std::int32_t>(b, ops + 4, 2)), HasSubstr("compares attribute 'price' (float64) with int64"));
  EXPECT_THAT(refused(patched<std::int32_t>(b, ops + 16 + 4, -1)), HasSubstr("compares the global id with float64"));
  EXPECT_THAT(refused(patched<std::int32_t>(b, ops + 12, 9)), HasSubstr("uses constants [0, 9) of a pool of 4"));
  EXPECT_THAT(refused(patched<std::uint8_t>(b, ops + 2 * 16, 6)), HasSubstr("leaves 2 values on its stack"));
  const std::vector<std::uint8_t> nb = parse_filter(R"({"not": {"any": []}})", kSchema).serialize();  // false, not
  EXPECT_THAT(refused(patched<std::uint8_t>(nb, ops + 16, 7)), HasSubstr("instruction 1 (and/or) has fewer than two operands"));
  EXPECT_THAT(refused(patched<std::uint8_t>(nb, ops, 6)), HasSubstr("instruction 0 (not) has no operand"));
  EXPECT_THAT(refused(patched<std::int32_t>(b, ops + 2 * 16 + 4, 1)), HasSubstr("has operands"));
  EXPECT_THAT(refused(patched<std::int64_t>(b, ints + 8, 3)), HasSubstr("set that is not strictly increasing"));
  EXPECT_THAT(refused(patched<double>(b, reals, 5.0)), HasSubstr("lower bound above its upper bound"));
  EXPECT_THAT(refused(patched<double>(b, reals, std::nan(""))), HasSubstr("compares with NaN"));
  // the same bytes against another schema
  EXPECT_THAT(refused(b, {{"tenant", AttributeType::kFloat64}, {"year", AttributeType::kInt64},
                          {"price", AttributeType::kFloat64}}),
              HasSubstr("compares attribute 'tenant' (float64) with int64"));
  EXPECT_THAT(refused(b, {{"tenant", AttributeType::kInt64}}), HasSubstr("the corpus has 1 attribute columns"));
  // every single-bit flip is either refused or gives a program that is valid in every respect
  for (std::size_t i = 0; i < b.size(); ++i)
    for (int k = 0; k < 8; ++k) {
      std::vector<std::uint8_t> c = b;
      c[i] ^= static_cast<std::uint8_t>(1u << k);
      try {
        const FilterProgram q = deserialize_filter(c.data(), c.size(), kSchema);
        EXPECT_EQ(q.serialize(), c);
      } catch (const Error&) {
      }
    }
}

TEST(FilterImage, PackedProgramsLayout) {
  const FilterProgram a = parse_filter(R"({"eq": {"tenant": 7}})", kSchema);
  const FilterProgram b = parse_filter(R"({"in": {"price": [1, 2, 3]}})", kSchema);
  const FilterProgram* progs[] = {&a, &b, &a};
  const std::size_t n = packed_filter_programs_bytes(progs, 3);
  EXPECT_EQ(n, 8 + 3 * 8 + 2 * a.serialized_bytes() + b.serialized_bytes());
  std::vector<std::uint8_t> buf(n);
  EXPECT_EQ(pack_filter_programs(progs, 3, buf.data(), buf.size()), n);
  std::uint64_t count = 0, off[3];
  std::memcpy(&count, buf.data(), 8);
  std::memcpy(off, buf.data() + 8, 24);
  EXPECT_EQ(count, 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(off[i] % 8, 0u);
    const FilterProgram q = deserialize_filter(buf.data() + off[i], progs[i]->serialized_bytes(), kSchema);
    EXPECT_EQ(q, *progs[i]);
  }
  EXPECT_THAT(error_of([&] { (void)pack_filter_programs(progs, 3, buf.data(), n - 1); }),
              HasSubstr("3 programs need " + std::to_string(n) + " bytes, the buffer holds " + std::to_string(n - 1)));
}

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

// ------------------------------------------------------------------------------ HDF5

class AttributeFile : public ::testing::Test {
 protected:
  static constexpr std::int64_t kRows = 3000;
  void SetUp() override {
    path_ = dir_.file("attrs.h5");
    ints_.resize(kRows);
    reals_.resize(kRows);
    for (std::int64_t r = 0; r < kRows; ++r) {
      ints_[static_cast<std::size_t>(r)] = r * 1000003 - 7;
      reals_[static_cast<std::size_t>(r)] = r * 0.25 - 100.0;
    }
    std::vector<std::int32_t> i32(kRows, 1);
    std::vector<float> f32(kRows, 1.0f), two_d(kRows * 2, 1.0f);
    std::vector<double> with_nan = reals_;
    with_nan[2500] = std::nan("");
    H5Writer w(path_);
    w.write_i64("tenant", ints_.data(), kRows, 0);
    w.write_f64("meta/price", reals_.data(), kRows, 0);
    w.write_i32("tag32", i32.data(), kRows, 0);
    w.write_f32("f32", f32.data(), kRows, 0);
    std::vector<std::uint8_t> u8(kRows, 200);
    w.write_u8("u8", u8.data(), kRows, 0);
    w.write_strings("names", std::vector<std::string>(kRows, "x"));
    w.write_f32("two_d", two_d.data(), kRows, 2);
    w.write_i64("short", ints_.data(), kRows - 1, 0);
    w.write_f64("nan_late", with_nan.data(), kRows, 0);
    w.write_i64("meta/tenant", ints_.data(), kRows, 0);
    w.close();
  }
  test::TempDir dir_;
  std::string path_;
  std::vector<std::int64_t> ints_;
  std::vector<double> reals_;
};

TEST_F(AttributeFile, ReadsOneRanksRows) {
  for (RowRange range : {RowRange{0, kRows}, RowRange{1000, 2001}, RowRange{2999, 3000}, RowRange{5, 5}}) {
    const auto cols = read_attribute_columns(path_, {"tenant", "/meta/price"}, kRows, range);
    ASSERT_EQ(cols.size(), 2u);
    EXPECT_EQ(cols[0].name, "tenant");
    EXPECT_EQ(cols[0].type, AttributeType::kInt64);
    EXPECT_EQ(cols[1].name, "price");
    EXPECT_EQ(cols[1].type, AttributeType::kFloat64);
    EXPECT_EQ(cols[0].ints, std::vector<std::int64_t>(ints_.begin() + range.lo, ints_.begin() + range.hi));
    EXPECT_EQ(cols[1].reals, std::vector<double>(reals_.begin() + range.lo, reals_.begin() + range.hi));
    EXPECT_TRUE(cols[0].reals.empty());
    EXPECT_TRUE(cols[1].ints.empty());
  }
  EXPECT_TRUE(read_attribute_columns(path_, {}, kRows, {0, kRows}).empty());
  // narrower integers and float32 are widened exactly (uint8 200 stays 200, not -56)
  const auto narrow = read_attribute_columns(path_, {"tag32", "u8", "f32"}, kRows, {10, 20});
  ASSERT_EQ(narrow.size(), 3u);
  EXPECT_EQ(narrow[0].type, AttributeType::kInt64);
  EXPECT_EQ(narrow[0].ints, std::vector<std::int64_t>(10, 1));
  EXPECT_EQ(narrow[1].ints, std::vector<std::int64_t>(10, 200));
  EXPECT_EQ(narrow[2].type, AttributeType::kFloat64);
  EXPECT_EQ(narrow[2].reals, std::vector<double>(10, 1.0));
  // the NaN lies outside these rows: a rank reads only its own
  EXPECT_EQ(read_attribute_columns(path_, {"nan_late"}, kRows, {0, 2500})[0].reals.size(), 2500u);
  // a table from what was read, with the shard's global ids
  auto cols = read_attribute_columns(path_, {"tenant", "meta/price"}, kRows, {1000, 3000});
  std::vector<std::int64_t> ids(2000);
  for (int i = 0; i < 2000; ++i) ids[static_cast<std::size_t>(i)] = 1000 + i;
  const AttributeTable t(std::move(cols), ids);
  // global row g has price g / 4 - 100: ids 1500 and 2999 pass, id 1000 (price 150) does not
  const FilterProgram p = parse_filter(
      R"({"all": [{"ids_in": [1000, 1500, 2999]}, {"range": {"price": [150.25, null]}}]})", t.schema());
  std::vector<std::int64_t> got;
  for (std::int64_t r = 0; r < t.rows(); ++r)
    if (passes(p, t, r)) got.push_back(r);
  EXPECT_EQ(got, (std::vector<std::int64_t>{500, 1999}));
}

TEST_F(AttributeFile, RefusesBadDatasetsByName) {
  auto err = [&](std::vector<std::string> ds, RowRange range = {0, kRows}, std::int64_t n = kRows) {
    return error_of([&] { (void)read_attribute_columns(path_, ds, n, range); });
  };
  EXPECT_THAT(err({"tenant", "nope"}), HasSubstr("has no dataset 'nope' (datasets present: "));
  EXPECT_THAT(err({"tenant", "nope"}), HasSubstr("tenant [3000] int64"));
  EXPECT_THAT(err({"names"}), HasSubstr("attribute dataset 'names' is string; attributes must be integers that fit int64"));
  EXPECT_THAT(err({"names"}), HasSubstr("f['names_i64'] = f['names'][:].astype('int64')"));
  EXPECT_THAT(err({"two_d"}), HasSubstr("attribute dataset 'two_d' must be 1-D [3000], but it is 2-D"));
  EXPECT_THAT(err({"short"}), HasSubstr("attribute dataset 'short' has 2999 values, but the corpus has 3000 rows"));
  EXPECT_THAT(err({"nan_late"}), HasSubstr("attribute dataset 'nan_late' is NaN at row 2500"));
  EXPECT_THAT(err({"nan_late"}, {2000, 3000}), HasSubstr("NaN at row 2500"));
  EXPECT_THAT(err({"tenant", "meta/tenant"}), HasSubstr("two attribute datasets are named 'tenant'"));
  EXPECT_THAT(err({"meta"}), HasSubstr("'meta' is not a dataset"));  // a group
  EXPECT_THAT(err({"tenant"}, {0, kRows + 1}), HasSubstr("attribute rows [0, 3001) are outside the corpus's 3000 rows"));
  EXPECT_THAT(err({"/"}), HasSubstr("attribute dataset path '/' names no dataset"));
  EXPECT_THAT(error_of([&] { (void)read_attribute_columns(dir_.file("missing.h5"), {"tenant"}, kRows, {0, 1}); }),
              HasSubstr("No such file or directory"));
}

TEST_F(AttributeFile, RefusesDataNeverWritten) {
  // A dataset created and never written reads as its fill value: refused, naming the rows.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t f = H5Fopen(path_.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hsize_t n = kRows, chunk = 1000;
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t ds = H5Dcreate2(f, "unwritten", H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(ds, 0);
  H5Dclose(ds);
  // chunked, with only the chunk of rows 1000 .. 1999 written
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &chunk);
  const hid_t part = H5Dcreate2(f, "partial", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(part, 0);
  const hsize_t start = 1000;
  const hid_t fs = H5Dget_space(part);
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, nullptr, &chunk, nullptr);
  const hid_t ms = H5Screate_simple(1, &chunk, nullptr);
  std::vector<double> ones(1000, 1.0);
  ASSERT_GE(H5Dwrite(part, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, ones.data()), 0);
  H5Sclose(ms);
  H5Sclose(fs);
  H5Dclose(part);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(f);
  EXPECT_THAT(error_of([&] { (void)read_attribute_columns(path_, {"unwritten"}, kRows, {0, 10}); }),
              HasSubstr("'unwritten' has no data written"));
  EXPECT_EQ(read_attribute_columns(path_, {"partial"}, kRows, {1000, 2000})[0].reals, ones);
  EXPECT_THAT(error_of([&] { (void)read_attribute_columns(path_, {"partial"}, kRows, {1500, 2500}); }),
              HasSubstr("rows 2000 .. 2499 were never written (the chunk at row 2000 is not allocated)"));
}

// ------------------------------------------------------------------------------ config

TEST(AttributeConfig, ListFromYamlAndFromOverrides) {
  Config c = parse_config("corpus:\n  path: x.h5\n  attributes: [tenant, meta/year]\n");
  EXPECT_EQ(c.corpus.attributes, (std::vector<std::string>{"tenant", "meta/year"}));
  c = parse_config("corpus:\n  path: x.h5\n  attributes:\n    - tenant\n    - /meta/price\n");
  EXPECT_EQ(c.corpus.attributes, (std::vector<std::string>{"tenant", "/meta/price"}));
  EXPECT_TRUE(parse_config("corpus:\n  path: x.h5\n").corpus.attributes.empty());
  EXPECT_TRUE(parse_config("corpus:\n  path: x.h5\n  attributes: []\n").corpus.attributes.empty());
  apply_override(c, "corpus.attributes=a, b/c");
  EXPECT_EQ(c.corpus.attributes, (std::vector<std::string>{"a", "b/c"}));
  apply_override(c, "corpus.attributes=");
  EXPECT_TRUE(c.corpus.attributes.empty());
  // to_yaml writes it back
  c.corpus.attributes = {"tenant", "meta/year"};
  EXPECT_EQ(parse_config(to_yaml(c)).corpus.attributes, c.corpus.attributes);
}

TEST(AttributeConfig, BadListsAreRefusedByName) {
  auto err = [](const std::string& yaml) { return error_of([&] { (void)parse_config(yaml, "c.yaml"); }); };
  EXPECT_THAT(err("corpus:\n  attributes: [tenant, meta/tenant]\n"),
              HasSubstr("key 'corpus.attributes': 'tenant' and 'meta/tenant' are both named 'tenant'"));
  EXPECT_THAT(err("corpus:\n  attributes: [tenant, {a: 1}]\n"), HasSubstr("key 'corpus.attributes': item 2 is not a dataset path"));
  EXPECT_THAT(err("corpus:\n  attributes: [tenant, '']\n"), HasSubstr("item 2 is not a dataset path"));
  EXPECT_THAT(err("corpus:\n  attributes: ['a,b']\n"), HasSubstr("dataset path 'a,b' contains a comma"));
  EXPECT_THAT(err("corpus:\n  attributes: [/]\n"), HasSubstr("has an empty dataset path"));
  Config c;
  EXPECT_THAT(error_of([&] { apply_override(c, "corpus.attributes=a,,b"); }), HasSubstr("'a,,b' has an empty dataset path"));
  EXPECT_THAT(error_of([&] { apply_override(c, "corpus.attributes=a,"); }), HasSubstr("'a,' ends with a comma"));
  std::string many;
  for (int i = 0; i <= kFilterMaxAttributes; ++i) many += (i ? "," : "") + std::string("c") + std::to_string(i);
  EXPECT_THAT(error_of([&] { apply_override(c, "corpus.attributes=" + many); }), HasSubstr("65 attributes, at most 64"));
  EXPECT_TRUE(c.corpus.attributes.empty());  // nothing changed by the refused overrides
}

}  // namespace
}  // namespace shardtopk
