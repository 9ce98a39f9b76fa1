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
#include "service/write_parse.hpp"
#include "test_support.hpp"

namespace shardtopk::service {
namespace {

using ::testing::AllOf;
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

// A rank body is parsed under the same bounds: a value nested 100,000 levels deep (in the ids,
// the filter or the query) is refused at the first extra level, never recursed into; a key
// given twice and a NUL byte are refused too.
TEST(ParseJson, RankBodiesAreBoundedLikeTheOthers) {
  auto rank_error = [](const std::string& body) { return error_of([&] { (void)parse_json_rank(body, kShape); }); };
  const int deep = 100000;
  const std::string nest = std::string(deep, '[') + "1" + std::string(deep, ']');
  EXPECT_THAT(rank_error(R"({"query": [1, 2, 3, 4], "ids": [)" + nest + "]}"), HasSubstr("nests deeper than"));
  EXPECT_THAT(rank_error(R"({"query": [1, 2, 3, 4], "ids": [1], "filter": )" + nest + "}"),
              HasSubstr("nests deeper than"));
  EXPECT_THAT(rank_error(R"({"query": [1, 2, 3, )" + nest + R"(], "ids": [1]})"), HasSubstr("nests deeper than"));
  EXPECT_THAT(rank_error(R"({"query": [1, 2, 3, 4], "ids": [1], "ids": [2]})"), HasSubstr("duplicate key \"ids\""));
  EXPECT_THAT(rank_error(std::string(R"({"query": [1, 2, 3, 4], "ids": [1]})") + std::string(1, '\0') + "x"),
              HasSubstr("NUL byte"));
  EXPECT_EQ(parse_json_rank(R"({"query": [1, 2, 3, 4], "ids": [7, 8]})", kShape).ids, (std::vector<std::int64_t>{7, 8}));
  // an id past int64 is refused, not wrapped to a negative one
  EXPECT_THAT(msg_of(R"({"query": [1, 2, 3, 4], "k": 2, "search_after": [1.0, 18446744073709551615]})"),
              HasSubstr("the id must be an int64 integer, got 18446744073709551615"));
  EXPECT_THAT(msg_of(R"({"query": [1, 2, 3, 4], "min_score": 0.5, "limit": 18446744073709551615})"),
              HasSubstr("\"limit\" must be an integer"));
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
  EXPECT_THAT(error_of([] { (void)parse_int_param("k", "ten"); }),
              HasSubstr("query parameter 'k': expected a positive integer (decimal digits only), got 'ten'"));
  EXPECT_THAT(error_of([] { (void)parse_int_param("k", "99999999999999999999"); }),
              HasSubstr("beyond the 64-bit integer range"));
  EXPECT_THAT(error_of([] { (void)parse_int_param("k", "-3"); }),
              HasSubstr("query parameter 'k': expected a positive integer (decimal digits only), got '-3'"));
  EXPECT_THAT(error_of([] { (void)parse_int_param("k", std::string("5\0abc", 5)); }), HasSubstr("got '5\\x00abc'"));
}

// Query parameters are decimal digits and nothing else: std::stoll's '+' and leading white
// space are refused, as is anything around the digits.
// RFC 9112 6.3: a body whose length two readers could take differently is refused.
TEST(Framing, OneUnambiguousLengthOrItIsRefused) {
  EXPECT_EQ(framing_problem(0, 0, "").first, 0);
  EXPECT_EQ(framing_problem(1, 0, "").first, 0);
  for (const char* te : {"chunked", "Chunked", "CHUNKED"}) EXPECT_EQ(framing_problem(0, 1, te).first, 0) << te;
  struct Case {
    int cl, te;
    const char* value;
    int status;
    const char* needle;
  };
  for (const Case& c : std::vector<Case>{
           {1, 1, "chunked", 400, "both Transfer-Encoding and Content-Length"},
           {1, 1, "identity", 400, "both Transfer-Encoding and Content-Length"},
           {2, 0, "", 400, "Content-Length given more than once"},
           {0, 2, "chunked", 400, "Transfer-Encoding given more than once"},
           {0, 1, "gzip", 400, "Transfer-Encoding 'gzip': the body's length cannot be determined"},
           {0, 1, "chunked, gzip", 400, "the final coding must be chunked"},
           {0, 1, "", 400, "the final coding must be chunked"},
           {0, 1, "gzip,chunked", 501, "Transfer-Encoding 'gzip,chunked' not implemented"},
           {0, 1, "x\r\ny: chunked", 400, "'x\\x0d\\x0ay: chunked'"},
           {0, 1, "chunked ", 400, "Transfer-Encoding 'chunked ': white space around the coding"},
           {0, 1, "chunked\t", 400, "Transfer-Encoding 'chunked\\x09': white space around the coding"},
           {0, 1, " chunked", 400, "white space around the coding (send exactly 'chunked')"},
       }) {
    const auto [status, why] = framing_problem(c.cl, c.te, c.value);
    EXPECT_EQ(status, c.status) << c.value;
    EXPECT_THAT(why, HasSubstr(c.needle));
  }
}

// Write bodies read numbers as the filter language does: an integer a float64 attribute cannot
// hold exactly is refused (it would be stored as another value), and an integer beyond int64 is
// named as such (the JSON parser reads it as a real).
TEST(ParseWrite, NumbersAreTakenExactlyOrRefusedByName) {
  const AttributeSchema schema{{"tenant", AttributeType::kInt64}, {"price", AttributeType::kFloat64}};
  auto upsert = [&](const std::string& tenant, const std::string& price) {
    return parse_json_upsert(R"({"ids":[1],"vectors":[[1,2]],"attributes":{"tenant":[)" + tenant + R"(],"price":[)" +
                                 price + "]}}",
                             2, schema);
  };
  auto price = [&](const std::string& p) {
    for (const AttributeColumn& c : upsert("1", p).columns)
      if (c.name == "price" && c.reals.size() == 1) return c.reals[0];
    ADD_FAILURE() << "no price column";
    return 0.0;
  };
  EXPECT_EQ(price("9007199254740992"), 9007199254740992.0);
  EXPECT_EQ(price("18446744073709551615.5"), 18446744073709551616.0);  // a real: rounded, as any real
  EXPECT_EQ(price("-9223372036854775808"), -9223372036854775808.0);
  for (const char* p : {"9007199254740993", "-9007199254740993", "18446744073709551615"})
    EXPECT_THAT(error_of([&] { upsert("1", p); }),
                HasSubstr(std::string("attribute \"price\"[0] = ") + p + " is not exactly representable as a float64"));
  EXPECT_THAT(error_of([&] { upsert("-9223372036854775809", "1"); }),
              AllOf(HasSubstr("attribute \"tenant\"[0] = -9.22"), HasSubstr("is outside the int64 range")));
  EXPECT_THAT(error_of([&] { upsert("1.5", "1"); }), HasSubstr("attribute \"tenant\"[0] = 1.5 is not an integer"));
  EXPECT_THAT(error_of([&] { parse_json_delete(R"({"ids":[5, -9223372036854775809]})", schema); }),
              AllOf(HasSubstr("ids[1] = -9.22"), HasSubstr("is outside the int64 range")));
  EXPECT_THAT(error_of([&] { parse_json_delete(R"({"ids":[18446744073709551615]})", schema); }),
              HasSubstr("ids[0] = 18446744073709551615 is outside the int64 range"));
  EXPECT_THAT(error_of([&] { parse_json_delete(R"({"ids":[2.5]})", schema); }), HasSubstr("ids[0] = 2.5 is not an integer"));
}

TEST(ParseIntParam, DecimalDigitsOnly) {
  EXPECT_EQ(parse_int_param("n", "1"), 1);
  EXPECT_EQ(parse_int_param("n", "007"), 7);
  EXPECT_EQ(parse_int_param("k", "0"), 0);
  for (const char* bad : {"+1", " 1", "1 ", "\t1", "1x", "0x10", "1e3", "1.0", "", "-", "+", "--1", "-+1", "1-"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(error_of([&] { (void)parse_int_param("n", bad); }),
                AllOf(HasSubstr("query parameter 'n': expected a positive integer (decimal digits only)"),
                      HasSubstr("got '" + excerpt(bad) + "'")));
  }
}

// ------------------------------------------------------------------------------ filters

const AttributeSchema kAttrs = {{"tenant", AttributeType::kInt64}, {"price", AttributeType::kFloat64}};
const QueryShape kFilterShape{4, 3, &kAttrs};

std::string filter_msg(const std::string& filter) {
  return error_of([&] { (void)parse_json_search(R"({"query": [1, 2, 3, 4], "filter": )" + filter + "}", kFilterShape); });
}

// The body's filter is compiled once, against the index's attributes, into the same program
// parse_filter makes; it may come before or after the rows; null and filters that pass every row
// leave no program (nothing to count against search.max_filters).
TEST(ParseJsonFilter, CompiledOnceInAnyPosition) {
  const std::string f = R"({"all": [{"eq": {"tenant": 7}}, {"range": {"price": [1.5, null]}}, {"ids_not_in": [3]}]})";
  SearchBody b = parse_json_search(R"({"query": [1, 2, 3, 4], "k": 2, "filter": )" + f + "}", kFilterShape);
  ASSERT_TRUE(b.filter);
  EXPECT_TRUE(b.has_filter);
  EXPECT_TRUE(*b.filter == parse_filter(f, kAttrs));
  b = parse_json_search(R"({"filter": )" + f + R"(, "queries": [[1, 2, 3, 4], [5, 6, 7, 8]]})", kFilterShape);
  ASSERT_TRUE(b.filter);
  EXPECT_EQ(b.nq, 2);
  EXPECT_EQ(b.queries[5], 6.0f);
  EXPECT_TRUE(*b.filter == parse_filter(f, kAttrs));
  b = parse_json_search(R"({"query": [1, 2, 3, 4], "filter": null})", kFilterShape);
  EXPECT_FALSE(b.filter);
  EXPECT_TRUE(b.has_filter) << "the key was given (so ?filter= may not be too)";
  b = parse_json_search(R"({"query": [1, 2, 3, 4], "filter": {"all": []}})", kFilterShape);
  EXPECT_FALSE(b.filter) << "a filter passing every row needs no program";
  EXPECT_TRUE(b.has_filter);
  b = parse_json_search(R"({"query": [1, 2, 3, 4]})", kFilterShape);
  EXPECT_FALSE(b.filter);
  EXPECT_FALSE(b.has_filter);
  // ids filters need no attributes
  b = parse_json_search(R"({"query": [1, 2, 3, 4], "filter": {"ids_in": [4, 2]}})", kShape);
  ASSERT_TRUE(b.filter);
}

TEST(ParseJsonFilter, BadFiltersNameTheAttributeOrValue) {
  EXPECT_THAT(filter_msg(R"({"eq": {"tenat": 7}})"), HasSubstr("filter: unknown attribute 'tenat' (known: tenant, price)"));
  EXPECT_THAT(filter_msg(R"({"eq": {"tenant": 7.5}})"), HasSubstr("7.5"));
  EXPECT_THAT(filter_msg(R"({"eq": {"tenant": 7.5}})"), HasSubstr("not an integer"));
  EXPECT_THAT(filter_msg(R"({"eq": {"tenant": "7"}})"), HasSubstr("the string '7'"));
  EXPECT_THAT(filter_msg(R"({"in": {"tenant": 5}})"), HasSubstr("'in' for 'tenant' expects a list"));
  EXPECT_THAT(filter_msg(R"({"range": {"price": [3, 1]}})"), HasSubstr("lower bound 3 is above upper bound 1"));
  EXPECT_THAT(filter_msg(R"({"eqq": {"tenant": 7}})"), HasSubstr("unknown operator 'eqq'"));
  // a control byte in a name is shown once as \xNN (the message's own backslash not escaped again),
  // on both readers of the body
  EXPECT_THAT(filter_msg(R"({"eq": {"ten\u0000ant": 7}})"), HasSubstr("unknown attribute 'ten\\x00ant'"));
  EXPECT_THAT(error_of([&] {
                (void)parse_json_search(R"({"query": [1, 2, 3, 4], "filter": {"eq": {"ten\u0001ant": 7}}})", kFilterShape,
                                        JsonRead{0, false});
              }),
              HasSubstr("unknown attribute 'ten\\x01ant'"));
  EXPECT_THAT(error_of([&] { (void)parse_filter_text(R"({"eq": {"ten\u0000ant": 7}})", kAttrs); }),
              HasSubstr("unknown attribute 'ten\\x00ant'"));
  EXPECT_THAT(filter_msg(R"(7)"), HasSubstr("filter: expected a filter object"));
  EXPECT_THAT(filter_msg(R"([{"eq": {"tenant": 7}}])"), HasSubstr("filter: expected a filter object"));
  EXPECT_THAT(filter_msg(R"({"ids_in": [1, 2.5]})"), HasSubstr("2.5"));
  EXPECT_THAT(filter_msg(R"({"eq": {"tenant": 1, "tenant": 2}})"), HasSubstr("filter: key tenant given twice"));
  EXPECT_THAT(filter_msg(R"({"eq": {"tenant": 1}, "eq": {"tenant": 2}})"), HasSubstr("key eq given twice"));
  // no attributes at all: an attribute filter names what is known (nothing)
  const std::string m = error_of(
      [&] { (void)parse_json_search(R"({"query": [1, 2, 3, 4], "filter": {"eq": {"tenant": 7}}})", kShape); });
  EXPECT_THAT(m, HasSubstr("unknown attribute 'tenant'"));
  // the filter key twice in the body
  EXPECT_THAT(error_of([&] {
                (void)parse_json_search(R"({"query": [1, 2, 3, 4], "filter": null, "filter": null})", kFilterShape);
              }),
              HasSubstr("duplicate key \"filter\""));
}

// Hostile filters: nesting far past the limit (objects, lists, both; unterminated), lists past
// the value budget, huge names: refused at the first token past the bound, with a short message.
TEST(ParseJsonFilter, HostileFiltersAreRefusedAtTheBoundWithShortMessages) {
  std::string deep_not;
  for (int i = 0; i < 60000; ++i) deep_not += R"({"not": )";
  const std::string unterminated = deep_not;
  deep_not += R"({"eq": {"tenant": 1}})" + std::string(60000, '}');
  for (const std::string& f : {deep_not, unterminated, std::string(60000, '[') + std::string(60000, ']'),
                               R"({"all": )" + std::string(60000, '[')}) {
    const std::string m = filter_msg(f);
    EXPECT_THAT(m, HasSubstr("filter: nested deeper than 32 levels"));
    EXPECT_LT(m.size(), kShortMessage);
  }
  // 32 levels pass; 33 do not
  std::string ok, too_deep;
  for (int i = 0; i < 31; ++i) ok += R"({"not": )";
  ok += R"({"in": {"tenant": [1, 2]}})" + std::string(31, '}');
  EXPECT_NO_THROW((void)parse_json_search(R"({"query": [1, 2, 3, 4], "filter": )" + ok + "}", kFilterShape));
  too_deep = R"({"not": )" + ok + "}";
  EXPECT_THAT(filter_msg(too_deep), HasSubstr("nested deeper than 32"));
  // one value past the budget of the lists
  std::string ids = R"({"ids_in": [0)";
  ids.reserve(9 * (kFilterMaxValues + 2));
  for (std::int64_t i = 1; i <= kFilterMaxValues; ++i) ids += "," + std::to_string(i);
  const std::string over = ids + "]}";
  std::string m = filter_msg(over);
  EXPECT_THAT(m, HasSubstr("more than 1048576 values"));
  EXPECT_LT(m.size(), kShortMessage);
  // wide instead of deep: too many operators
  std::string wide = R"({"any": [)";
  for (int i = 0; i < 300; ++i) wide += std::string(i ? "," : "") + R"({"eq": {"tenant": 1}})";
  EXPECT_THAT(filter_msg(wide + "]}"), HasSubstr("more than 256 operators"));
  // a huge attribute name is cut, not echoed
  m = filter_msg(R"({"eq": {")" + std::string(1 << 20, 'a') + R"(": 1}})");
  EXPECT_THAT(m, HasSubstr("unknown attribute 'aaaa"));
  EXPECT_LT(m.size(), kShortMessage + 200);
}

// ?filter= on the binary route: the same bounds and messages, and strict JSON (one value).
TEST(ParseFilterText, SameRulesAsTheBody) {
  const std::string f = R"({"in": {"tenant": [5, 1, 1]}})";
  RequestFilter p = parse_filter_text(f, kAttrs);
  ASSERT_TRUE(p);
  EXPECT_TRUE(*p == parse_filter(R"({"in": {"tenant": [1, 5]}})", kAttrs));
  EXPECT_FALSE(parse_filter_text("null", kAttrs));
  EXPECT_FALSE(parse_filter_text(R"( {"all": []} )", kAttrs));
  auto msg = [&](const std::string& t) { return error_of([&] { (void)parse_filter_text(t, kAttrs); }); };
  EXPECT_THAT(msg(""), HasSubstr("filter: invalid JSON: empty filter; leave filter= out (or give filter=null)"));
  EXPECT_THAT(msg(R"({"eq": {"tenant": 7}} x)"), HasSubstr("filter: invalid JSON"));
  EXPECT_THAT(msg(R"({"eq": {"tenant": 7})"), HasSubstr("filter: invalid JSON"));
  EXPECT_THAT(msg(R"({"eq": {"year": 7}})"), HasSubstr("unknown attribute 'year' (known: tenant, price)"));
  EXPECT_THAT(msg(R"({"eq": {"tenant": 1, "tenant": 2}})"), HasSubstr("key tenant given twice"));
  EXPECT_THAT(msg(std::string(60000, '[')), HasSubstr("nested deeper than 32 levels"));
  EXPECT_LT(msg(std::string(60000, '[')).size(), kShortMessage);
  EXPECT_LT(msg(R"({"eq": {"tenant": 7}} )" + std::string(1 << 20, 'x')).size(), kShortMessage);
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
  EXPECT_GE(l.json, compact.size() + kFilterBodyBytes) << "room for a filter beside the largest rows";
}

}  // namespace
}  // namespace shardtopk::service
