// The filter language on the host: parsing (every operator, every error, the limits, hostile
// input) and the serialised form. Evaluation: test_filter_eval.cpp; attribute sources:
// test_filter_attributes.cpp.
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
        // a parsed object keeps a repeated key's last value: refused instead (as the service does)
        BadFilter{"key_twice", R"({"eq": {"tenant": 1, "tenant": 2}})", {"filter: key tenant given twice in one object"}},
        BadFilter{"operator_twice", R"({"all": [{"eq": {"tenant": 1}}], "all": []})",
                  {"filter: key all given twice in one object"}},
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

}  // namespace
}  // namespace shardtopk
