// Request bodies and header values of `shardtopk serve`, parsed alone (no server): the JSON
// event parser (deep nesting, huge keys, duplicates, values), the binary body and its optional
// header, media types, message excerpts and the derived body limits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "service/request_parse.hpp"
#include "test_support.hpp"

namespace shardtopk::service {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using test::error_of;

constexpr std::size_t kShortMessage = 320;  // what a client's bytes may grow an error message to

const QueryShape kShape{4, 3};  // dim 4, batch_max 3

std::string msg_of(const std::string& body) {
  return error_of([&] { (void)parse_json_search(body, kShape); });
}

TEST(ParseJson, QueriesQueryAndK) {
  SearchBody b = parse_json_search(R"({"queries": [[1, 2, 3, 4], [-0.5, 1e-3, 2.5e2, 0]], "k": 7})", kShape);
  EXPECT_EQ(b.nq, 2);
  EXPECT_TRUE(b.has_k);
  EXPECT_EQ(b.k, 7);
  const std::vector<float> want = {1, 2, 3, 4, -0.5f, 1e-3f, 250.0f, 0};
  EXPECT_EQ(b.queries, want);
  b = parse_json_search(R"({"k": 3, "query": [0.1, 0.2, 0.3, 0.4]})", kShape);
  EXPECT_EQ(b.nq, 1);
  EXPECT_EQ(b.k, 3);
  EXPECT_EQ(b.queries[2], 0.3f);  // the double 0.3 rounded to float once
  b = parse_json_search(R"( {"query": [1, 2, 3, 4]} )", kShape);
  EXPECT_FALSE(b.has_k);
  b = parse_json_search(R"({"query": [1, 2, 3, 4], "k": -3})", kShape);  // range is the index's check
  EXPECT_EQ(b.k, -3);
}

// The attack that crashed the thread-per-connection front end: 60,000 levels, in k and in a
// query column. Refused at the first level the format does not have; the message stays short.
TEST(ParseJson, DeepNestingIsRefusedAtTheFirstExtraLevelWithAShortMessage) {
  const std::string deep = std::string(60000, '[') + std::string(60000, ']');
  std::string m = msg_of(R"({"query": [1, 2, 3, 4], "k": )" + deep + "}");
  EXPECT_THAT(m, HasSubstr("\"k\" must be an integer, got a list"));
  EXPECT_LT(m.size(), kShortMessage);
  m = msg_of(R"({"queries": [[1, )" + deep + R"(, 3, 4]], "k": 2})");
  EXPECT_THAT(m, HasSubstr("query 0, column 1: expected a number, got a list"));
  EXPECT_LT(m.size(), kShortMessage);
  m = msg_of(R"({"query": [1, 2, {"a": )" + deep + "}, 4]}");
  EXPECT_THAT(m, HasSubstr("column 2: expected a number, got an object"));
  m = msg_of(R"({"queries": [)" + deep + "]}");
  EXPECT_THAT(m, HasSubstr("query 0, column 0: expected a number, got a list"));
  // and unterminated: the parser stops at the first extra level, not at the end of input
  m = msg_of(R"({"k": )" + std::string(60000, '['));
  EXPECT_THAT(m, HasSubstr("\"k\" must be an integer"));
}

TEST(ParseJson, HugeUnknownKeyIsNotEchoed) {
  const std::string key(5 << 20, 'x');
  const std::string m = msg_of("{\"" + key + "\": 1}");
  EXPECT_THAT(m, HasSubstr("unknown field \"xxxxxxxx"));
  EXPECT_THAT(m, HasSubstr("(5242880 bytes)"));
  EXPECT_LT(m.size(), kShortMessage);
  // a huge string value, a huge malformed token
  EXPECT_LT(msg_of(R"({"query": [1, 2, 3, ")" + key + "\"]}").size(), kShortMessage);
  EXPECT_LT(msg_of(R"({"query": [1, 2, 3, 4], "k": 1)" + key + "}").size(), kShortMessage);
  EXPECT_LT(msg_of("{\"" + key).size(), kShortMessage);
}

TEST(ParseJson, DuplicateKeysAndBothRowFieldsAreRefused) {
  EXPECT_THAT(msg_of(R"({"query": [1, 2, 3, 4], "k": 1, "k": 2})"), HasSubstr("duplicate key \"k\""));
  EXPECT_THAT(msg_of(R"({"query": [1, 2, 3, 4], "query": [1, 2, 3, 4]})"), HasSubstr("duplicate key \"query\""));
  EXPECT_THAT(msg_of(R"({"queries": [[1, 2, 3, 4]], "query": [1, 2, 3, 4]})"), HasSubstr("give either"));
  EXPECT_THAT(msg_of(R"({"k": 3})"), HasSubstr("give either"));
  EXPECT_THAT(msg_of(R"({"query": [1, 2, 3, 4], "topk": 3})"), HasSubstr("unknown field \"topk\""));
}

TEST(ParseJson, ShapeAndValueErrorsNameTheQueryAndColumn) {
  EXPECT_THAT(msg_of(R"({"query": [1, 2]})"), HasSubstr("query 0 has dimension 2 but the index has dimension 4"));
  EXPECT_THAT(msg_of(R"({"queries": [[1, 2, 3, 4], [1, 2, 3, 4, 5]]})"), HasSubstr("query 1 has dimension 5"));
  // a non-number in a row of the wrong length reports the dimension first
  EXPECT_THAT(msg_of(R"({"query": ["a"]})"), HasSubstr("has dimension 1"));
  EXPECT_THAT(msg_of(R"({"query": [1, "a", 3, 4]})"), HasSubstr("query 0, column 1: a string \"a\" is not a number"));
  EXPECT_THAT(msg_of(R"({"query": [1, 2, null, 4]})"), HasSubstr("column 2: null is not a number"));
  EXPECT_THAT(msg_of(R"({"query": [1e39, 2, 3, 4]})"), HasSubstr("column 0: value 1e39 is too large for float32"));
  EXPECT_THAT(msg_of(R"({"query": [1e400, 2, 3, 4]})"), HasSubstr("malformed JSON"));
  EXPECT_THAT(msg_of(R"({"queries": [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]]})"),
              HasSubstr("more than search.batch_max = 3 queries"));
  EXPECT_THAT(msg_of(R"({"queries": []})"), HasSubstr("empty query list"));
  EXPECT_THAT(msg_of(R"({"queries": [1, 2]})"), HasSubstr("query 0 must be a list of numbers"));
  EXPECT_THAT(msg_of(R"({"queries": 5})"), HasSubstr("\"queries\" must be a list of vectors"));
  EXPECT_THAT(msg_of(R"({"query": [1, 2, 3, 4], "k": 2.5})"), HasSubstr("\"k\" must be an integer, got 2.5"));
  EXPECT_THAT(msg_of(R"({"query": [1, 2, 3, 4], "k": "3"})"), HasSubstr("\"k\" must be an integer"));
  EXPECT_THAT(msg_of(R"({"query": [1, 2, 3, 4], "k": 9223372036854775808})"), HasSubstr("out of range"));
  EXPECT_THAT(msg_of("[1, 2, 3]"), HasSubstr("expected a JSON object"));
  EXPECT_THAT(msg_of(R"({"query": [1, 2)"), HasSubstr("malformed JSON"));
  EXPECT_THAT(msg_of(R"({"query": [1, 2, 3, 4]} trailing)"), HasSubstr("malformed JSON"));
  EXPECT_THAT(msg_of(""), HasSubstr("malformed JSON"));
}

// ------------------------------------------------------------------------------ binary

std::string rows_bytes(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

TEST(ParseBinary, RowsWithAndWithoutTheHeader) {
  const std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};
  SearchBody b = parse_binary_search(rows_bytes(v), kShape);
  EXPECT_EQ(b.nq, 2);
  EXPECT_EQ(b.queries, v);
  b = parse_binary_search(binary_header(2, 4) + rows_bytes(v), kShape);
  EXPECT_EQ(b.nq, 2);
  EXPECT_EQ(b.queries, v);
  // the magic is a NaN as the first float32 of a headerless body: never a legal query
  float first;
  std::memcpy(&first, kBinaryMagic, 4);
  EXPECT_TRUE(std::isnan(first));
}

TEST(ParseBinary, TheHeaderMustDescribeTheBody) {
  const std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};
  auto msg = [&](const std::string& body) { return error_of([&] { (void)parse_binary_search(body, kShape); }); };
  // a float64 body of 1 query of dim 4 is 32 bytes: 2 float32 rows without a header, refused with one
  std::string h = binary_header(1, 4);
  const std::uint32_t f64 = static_cast<std::uint32_t>(BinaryDtype::kFloat64);
  std::memcpy(&h[8], &f64, 4);
  EXPECT_THAT(msg(h + rows_bytes(v)), HasSubstr("dtype float64 is not supported"));
  EXPECT_THAT(msg(binary_header(3, 4) + rows_bytes(v)), HasSubstr("3 rows of dim 4 take 48 bytes, the body holds 32"));
  EXPECT_THAT(msg(binary_header(2, 8) + rows_bytes(v)), HasSubstr("dim 8 but the index has dimension 4"));
  h = binary_header(2, 4);
  std::reverse(h.begin() + 4, h.begin() + 8);
  EXPECT_THAT(msg(h + rows_bytes(v)), HasSubstr("big-endian"));
  h = binary_header(2, 4);
  h[5] = 9;
  EXPECT_THAT(msg(h + rows_bytes(v)), HasSubstr("byte-order mark"));
  h = binary_header(2, 4);
  h[25] = 1;
  EXPECT_THAT(msg(h + rows_bytes(v)), HasSubstr("reserved byte 25"));
  h = binary_header(2, 4);
  const std::uint32_t bad = 77;
  std::memcpy(&h[8], &bad, 4);
  EXPECT_THAT(msg(h + rows_bytes(v)), HasSubstr("unknown dtype code 77"));
  EXPECT_THAT(msg(std::string(reinterpret_cast<const char*>(kBinaryMagic), 4) + "abcd"), HasSubstr("the header alone"));
  EXPECT_THAT(msg(binary_header(0, 4)), HasSubstr("empty query list"));
  EXPECT_THAT(msg(""), HasSubstr("empty query list"));
  EXPECT_THAT(msg(rows_bytes(v) + "abc"), HasSubstr("not a multiple of 4 x dim = 16"));
  EXPECT_THAT(msg(rows_bytes(std::vector<float>(16, 1.0f))), HasSubstr("4 queries in one request exceed search.batch_max = 3"));
}

TEST(CheckValues, NonFiniteAndZeroNorm) {
  std::vector<float> v = {1, 2, 3, 4, 0, 0, 0, 0};
  EXPECT_NO_THROW(check_query_values(v.data(), 2, 4, false));
  EXPECT_THAT(error_of([&] { check_query_values(v.data(), 2, 4, true); }), HasSubstr("query 1 has zero norm"));
  v[6] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THAT(error_of([&] { check_query_values(v.data(), 2, 4, false); }), HasSubstr("query 1, column 2"));
  v[6] = 0;
  v[1] = -std::numeric_limits<float>::infinity();
  EXPECT_THAT(error_of([&] { check_query_values(v.data(), 2, 4, false); }), HasSubstr("query 0, column 1"));
}

// ------------------------------------------------------------------------------ header values, limits

TEST(MediaType, CaseInsensitiveWithParameters) {
  EXPECT_EQ(parse_media_type("application/json"), Media::kJson);
  EXPECT_EQ(parse_media_type("Application/JSON"), Media::kJson);
  EXPECT_EQ(parse_media_type(" application/json ; charset=UTF-8"), Media::kJson);
  EXPECT_EQ(parse_media_type("APPLICATION/OCTET-STREAM"), Media::kBinary);
  EXPECT_EQ(parse_media_type("application/octet-stream;x=1"), Media::kBinary);
  EXPECT_EQ(parse_media_type(""), Media::kNone);
  EXPECT_EQ(parse_media_type("text/plain"), Media::kOther);
  EXPECT_EQ(parse_media_type("application/jsonx"), Media::kOther);
}

TEST(Excerpt, ShortFlatAndPrintable) {
  EXPECT_EQ(excerpt("abc"), "abc");
  EXPECT_EQ(excerpt(std::string("a\nb\0c\\", 6)), "a\\x0ab\\x00c\\x5c");
  EXPECT_EQ(excerpt(std::string(100, 'y'), 5), "yyyyy... (100 bytes)");
  EXPECT_THAT(error_of([] { (void)parse_int_param("k", std::string(1000, '9')); }), HasSubstr("(1000 bytes)"));
  EXPECT_THAT(error_of([] { (void)parse_int_param("k", "ten"); }), HasSubstr("expected an integer, got 'ten'"));
  EXPECT_THAT(error_of([] { (void)parse_int_param("k", "99999999999999999999"); }),
              HasSubstr("beyond the 64-bit integer range"));
  EXPECT_EQ(parse_int_param("k", "-3"), -3);
}

// The derived JSON limit holds the largest legal request written with the longest float texts
// (what a JSON library prints for float32 values as doubles), in the form that takes most room.
TEST(BodyLimits, DerivedLimitsHoldTheLargestLegalRequest) {
  const std::int64_t dim = 1024;
  const int bm = 64;
  const BodyLimits l = derived_body_limits(dim, bm);
  EXPECT_EQ(l.binary, kBinaryHeaderBytes + static_cast<std::size_t>(dim) * bm * 4);
  nlohmann::json rows = nlohmann::json::array();
  const float worst = -1.17549435e-38f;  // -FLT_MIN: "-1.1754943508222875e-38" as a double
  for (int q = 0; q < bm; ++q) rows.push_back(std::vector<double>(static_cast<std::size_t>(dim), worst));
  const std::string compact = nlohmann::json{{"queries", rows}, {"k", 1024}}.dump();
  const std::string spaced = nlohmann::json{{"queries", rows}, {"k", 1024}}.dump(1, '\t');
  EXPECT_LE(compact.size(), l.json);
  EXPECT_LE(spaced.size(), l.json) << "tab-indented JSON of the largest request";
  EXPECT_NO_THROW((void)parse_json_search(spaced, QueryShape{dim, bm}));
}

}  // namespace
}  // namespace shardtopk::service
