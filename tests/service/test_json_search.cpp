// JSON search bodies in and answers out, alone (no server): the simdjson reader against the event
// parser on generated and mutated bodies (whatever simdjson takes, the event parser takes with the
// same rows, k and filter, bit for bit; every well-formed request is taken by simdjson; every
// refusal keeps the event parser's message), and the answer writer (exact text; every score
// reads back as the same float32, by strtof and by strtod then rounding).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "service/answer_json.hpp"
#include "service/request_parse.hpp"
#include "test_support.hpp"

namespace shardtopk::service {
namespace {

using ::testing::HasSubstr;

const AttributeSchema kSchema = {{"tenant", AttributeType::kInt64}, {"price", AttributeType::kFloat64}};
const QueryShape kShape{4, 3, &kSchema};  // dim 4, batch_max 3

std::string message_of(const std::string& body, const QueryShape& shape, bool fast) {
  try {
    (void)parse_json_search(body, shape, JsonRead{0, fast});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_same(const SearchBody& a, const SearchBody& b, const std::string& body) {
  EXPECT_EQ(a.nq, b.nq) << body;
  EXPECT_EQ(a.has_k, b.has_k) << body;
  EXPECT_EQ(a.k, b.k) << body;
  ASSERT_EQ(a.queries.size(), b.queries.size()) << body;
  EXPECT_EQ(std::memcmp(a.queries.data(), b.queries.data(), 4 * a.queries.size()), 0) << "rows differ: " << body;
  EXPECT_EQ(a.has_filter, b.has_filter) << body;
  ASSERT_EQ(a.filter == nullptr, b.filter == nullptr) << body;
  if (a.filter) EXPECT_TRUE(*a.filter == *b.filter) << "filters differ: " << body;
}

// ------------------------------------------------------------------------------ generated bodies

class Generator {
 public:
  explicit Generator(std::uint64_t seed) : rng_(seed) {}

  // A request body; *fast_expected: every part of it is one simdjson reads (no integer beyond
  // 64 bits), so a well-formed one must be taken by the simdjson reader.
  std::string request(bool* fast_expected) {
    fast_ = true;
    strict_ = pick(2) == 0;  // half of the bodies: a well-formed request (its parts all legal)
    std::vector<std::string> fields;
    const int rows_kind = strict_ ? pick(9) : pick(10);
    if (rows_kind < 6) {
      const int n = 1 + pick(kShape.batch_max + (!strict_ && pick(8) == 0 ? 1 : 0));
      std::string rows;
      for (int q = 0; q < n; ++q) rows += (q ? "," + ws() : "") + row();
      fields.push_back("\"queries\":" + ws() + "[" + rows + "]");
    } else if (rows_kind < 9) {
      fields.push_back("\"query\":" + ws() + row());
    } else {
      fields.push_back("\"queries\": []");
    }
    if (pick(3) > 0) fields.push_back("\"k\":" + ws() + k_value());
    if (pick(3) == 0) fields.push_back("\"filter\":" + ws() + filter());
    if (!strict_ && pick(20) == 0) fields.push_back(fields[static_cast<std::size_t>(pick(static_cast<int>(fields.size())))]);
    if (!strict_ && pick(25) == 0) fields.push_back("\"topk\": 3");
    if (!strict_ && pick(25) == 0) fields.push_back("\"query\": [1, 2, 3, 4]");
    std::shuffle(fields.begin(), fields.end(), rng_);
    std::string body = ws() + "{";
    for (std::size_t i = 0; i < fields.size(); ++i) body += (i ? "," : "") + ws() + fields[i] + ws();
    body += "}" + ws();
    *fast_expected = fast_;
    return body;
  }

  // 1 to 3 random edits: a byte deleted, inserted or replaced, or the end cut.
  std::string mutate(std::string s) {
    static const std::string bytes = std::string("{}[]:,\"0123456789eE.-+ \\nulltrue") + '\0' + "\x01\xff\xc3";
    for (int e = 1 + pick(3); e > 0 && !s.empty(); --e) {
      const std::size_t at = static_cast<std::size_t>(pick(static_cast<int>(s.size())));
      const char b = bytes[static_cast<std::size_t>(pick(static_cast<int>(bytes.size())))];
      switch (pick(4)) {
        case 0: s.erase(at, 1); break;
        case 1: s.insert(at, 1, b); break;
        case 2: s[at] = b; break;
        default: s.resize(at); break;
      }
    }
    return s;
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<std::uint64_t>(n)); }
  std::string ws() {
    static const char* spaces[] = {"", "", "", " ", "\n", "\t ", "\r\n  "};
    return spaces[pick(7)];
  }

  std::string number() {
    char buf[64];
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    static const int kLegal[] = {0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 15};  // the forms every request may hold
    switch (strict_ ? kLegal[pick(static_cast<int>(std::size(kLegal)))] : pick(16)) {
      case 0: return std::to_string(pick(2001) - 1000);
      case 1: return "-0";
      case 2: return pick(2) ? "0.0" : "-0.0";
      case 3: {  // the shortest float32 text
        const float f = unit(rng_) * std::pow(10.0f, static_cast<float>(pick(20) - 10));
        return std::string(buf, std::to_chars(buf, buf + sizeof buf, f).ptr);
      }
      case 4: {  // a float32 printed as a double (what Python's json writes for numpy float32 values)
        std::snprintf(buf, sizeof buf, "%.17g", static_cast<double>(unit(rng_)));
        return buf;
      }
      case 5: {
        std::snprintf(buf, sizeof buf, "%.*e", pick(12), static_cast<double>(unit(rng_)) * 1e5);
        return buf;
      }
      case 6: return pick(2) ? "1.5E3" : "-2.25e+2";
      case 7: return pick(2) ? "1e-40" : "-1e-400";  // a denormal, an underflow
      case 8: return pick(2) ? "1e39" : "-3.4028236e38";  // beyond float32
      case 9: return pick(2) ? "3.4028234e38" : "1.17549435e-38";
      case 10: return pick(2) ? "9223372036854775807" : "-9223372036854775808";
      case 11: return pick(2) ? "9223372036854775808" : "18446744073709551615";
      case 12:
        fast_ = false;  // beyond 64 bits: simdjson leaves it to the event parser
        return "123456789012345678901234";
      case 13: return pick(2) ? "1e400" : "0.1e1";
      case 14: {
        static const char* odd[] = {"null", "\"a\"", "[]", "{}", "true", "[1]", "\"\\u00e9\""};
        return odd[pick(7)];
      }
      default: {
        std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(unit(rng_)) * 100);
        return buf;
      }
    }
  }

  std::string row() {
    const int d = !strict_ && pick(12) == 0 ? pick(6) : 4;
    std::string s = "[";
    for (int c = 0; c < d; ++c) s += (c ? "," + ws() : ws()) + number();
    return s + ws() + "]";
  }

  std::string k_value() {
    static const char* ks[] = {"10", "1", "0", "-3", "2.5", "\"3\"", "9223372036854775807", "9223372036854775808",
                               "1e1", "null", "[5]", "7"};
    return strict_ ? ks[pick(2)] : ks[pick(12)];
  }

  std::string filter() {
    static const char* filters[] = {
        "null",
        R"({"eq": {"tenant": 7}})",
        R"({"in": {"tenant": [1, 5, 9, 5]}})",
        R"({"range": {"price": [0.5, null]}})",
        R"({"range": {"price": [null, null]}})",
        R"({"ids_in": [3, 17, 99]})",
        R"({"ids_not_in": []})",
        R"({"all": [{"eq": {"tenant": -2}}, {"not": {"range": {"price": [1e3, 2E4]}}}]})",
        R"({"any": [{"ids_in": [18446744073709551615]}, {"eq": {"price": -0.0}}]})",
        R"({"all": []})",
        R"({"eq": {"tenat": 7}})",
        R"({"eq": {"tenant": 7.5}})",
        R"({"eq": {"tenant": 7, "tenant": 8}})",
        R"({"range": {"price": [2, 1]}})",
        R"({"bogus": 1})",
        R"([1, 2])",
        R"({"eq": {"tenant": "\ud800"}})",
        R"({"not": {"not": {"not": {"not": {"eq": {"tenant": 1}}}}}})",
    };
    return filters[pick(strict_ ? 10 : static_cast<int>(std::size(filters)))];
  }

  std::mt19937_64 rng_;
  bool fast_ = true;
  bool strict_ = false;
};

// Whatever the simdjson reader takes, the event parser takes with the same result; a well-formed
// request is taken by the simdjson reader; parse_json_search answers as the event parser does.
void check_body(const std::string& body, const QueryShape& shape, bool fast_expected, int* taken) {
  SearchBody fast;
  const bool fast_ok = read_json_search_fast(body, shape, fast);
  const std::string ref_error = message_of(body, shape, /*fast=*/false);
  if (fast_ok) {
    ++*taken;
    ASSERT_EQ(ref_error, "") << "simdjson took a body the event parser refuses: " << excerpt(body, 300);
    expect_same(fast, parse_json_search(body, shape, JsonRead{0, false}), body);
  } else if (fast_expected) {
    EXPECT_NE(ref_error, "") << "a well-formed request was left to the event parser: " << excerpt(body, 300);
  }
  EXPECT_EQ(message_of(body, shape, /*fast=*/true), ref_error) << excerpt(body, 300);
}

TEST(JsonSearch, SimdjsonAndTheEventParserAgreeOnGeneratedBodies) {
  Generator g(20261202);
  int valid = 0, taken = 0, mutated_taken = 0;
  for (int i = 0; i < 6000; ++i) {
    bool fast_expected = false;
    const std::string body = g.request(&fast_expected);
    const int before = taken;
    check_body(body, kShape, fast_expected, &taken);
    if (taken > before) ++valid;
    for (int m = 0; m < 3; ++m) {
      int t = 0;
      check_body(g.mutate(body), kShape, false, &t);
      mutated_taken += t;
    }
    if (::testing::Test::HasFatalFailure()) return;
  }
  std::printf("  %d generated bodies taken by simdjson, %d mutated ones\n", valid, mutated_taken);
  EXPECT_GT(valid, 2500) << "too few well-formed requests generated to compare";
}

// Every simdjson kernel this CPU runs (the portable fallback included) reads the same bodies to
// the same rows, and refuses the same ones, as the event parser; an unknown kernel is named.
TEST(JsonSearch, EverySimdjsonKernelAgrees) {
  const std::string best = json_reader_kernel();
  for (const std::string kernel : {"icelake", "haswell", "westmere", "fallback"}) {
    try {
      use_json_reader_kernel(kernel);
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("'" + kernel + "' is not one this CPU runs (")) << kernel;
      continue;
    }
    EXPECT_EQ(json_reader_kernel(), kernel);
    Generator g(20261204);
    int taken = 0;
    for (int i = 0; i < 600; ++i) {
      bool fast_expected = false;
      const std::string body = g.request(&fast_expected);
      check_body(body, kShape, fast_expected, &taken);
      int t = 0;
      check_body(g.mutate(body), kShape, false, &t);
      if (::testing::Test::HasFatalFailure()) break;
    }
    EXPECT_GT(taken, 250) << kernel;
  }
  use_json_reader_kernel(best);
  try {
    use_json_reader_kernel("nosuch");
    ADD_FAILURE() << "an unknown kernel was taken";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("simdjson kernel 'nosuch' is not one this CPU runs ("));
  }
  EXPECT_EQ(json_reader_kernel(), best);
}

TEST(JsonSearch, HandPickedBodiesAgree) {
  const std::vector<std::string> bodies = {
      R"({"query": [1, 2, 3, 4]})",
      R"({"query": [-0, 0, -0.0, 0.0]})",
      R"({"queries": [[1e-40, -1e-400, 3.4028234e38, 1.17549435e-38]], "k": 3})",
      R"({"query": [123456789012345678901234, 1, 2, 3]})",
      R"({"query": [18446744073709551615, 9223372036854775808, -9223372036854775808, 1]})",
      R"({"query": [1, 2, 3, 4], "k": 9223372036854775807})",
      R"({"query": [1, 2, 3, 4], "k": 9223372036854775808})",
      R"({"query": [1, 2, 3, 4], "k": -1})",
      R"({"query": [1, 2, 3, 4], "filter": null})",
      R"({"query": [1, 2, 3, 4], "filter": {"all": []}})",
      R"({"query": [1, 2, 3, 4], "filter": {"eq": {"tenant": 7}}, "k": 2})",
      R"({"query": [1, 2, 3, 4], "filter": {"eq": {"tenant": 7}}, "filter": null})",
      R"({"query": [1, 2, 3, 4], "filter": {"eq": {"tenant": 7, "tenant": 7}}})",
      R"({"query": [1, 2, 3, 4], "filter": )" + std::string(200, '[') + std::string(200, ']') + "}",
      R"({"query": [1, 2, 3, 4]} )",
      R"({"query": [1, 2, 3, 4]} x)",
      R"({"query": [1, 2, 3, 4]}{})",
      "{\"query\": [1, 2, 3, 4], \"k\": 1}\n",
      std::string("{\"query\": [1, 2, 3, 4]}\0", 24),
      std::string("{\"query\": [1, 2, \0 3, 4]}", 25),
      "{\"query\": [1, 2, 3, 4], \"\xff\": 1}",
      "{\"query\": [1, 2, 3, 4], \"k\": 1, \"\\u006b\": 2}",  // "k" spelled with an escape: a duplicate
      "",
      " ",
      "[]",
      "null",
  };
  int taken = 0;
  for (const std::string& b : bodies) check_body(b, kShape, false, &taken);
  EXPECT_GE(taken, 10);
}

// Bodies beyond the loop thread's own parser (64 KiB) take a parser of their own, read in place
// when their buffer has room past the end, and agree with the event parser all the same.
TEST(JsonSearch, LargeBodiesAndBodiesReadInPlace) {
  const QueryShape shape{1024, 64, &kSchema};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> unit(-1, 1);
  nlohmann::json rows = nlohmann::json::array();
  std::vector<float> want;
  for (int q = 0; q < 40; ++q) {
    std::vector<double> row;
    for (int c = 0; c < 1024; ++c) {
      want.push_back(unit(rng));
      row.push_back(want.back());
    }
    rows.push_back(row);
  }
  std::string body = nlohmann::json{{"queries", rows}, {"k", 5}}.dump();
  ASSERT_GT(body.size(), 64u << 10);
  EXPECT_GT(json_search_workspace(body.size()), body.size());
  EXPECT_EQ(json_search_workspace(1000), 0u);
  int taken = 0;
  check_body(body, shape, true, &taken);
  EXPECT_EQ(taken, 1);
  body.reserve(body.size() + kJsonPadding);
  SearchBody b;
  ASSERT_TRUE(read_json_search_fast(body, shape, b, body.capacity()));
  EXPECT_EQ(b.nq, 40);
  EXPECT_EQ(b.queries, want);
  EXPECT_EQ(parse_json_search(body, shape, JsonRead{body.capacity(), true}).queries, want);
  body.back() = ']';  // malformed: the event parser words it
  EXPECT_THAT(message_of(body, shape, true), HasSubstr("malformed JSON"));
}

TEST(JsonSearch, MessagesAreTheEventParsers) {
  for (bool fast : {true, false}) {
    EXPECT_THAT(message_of(R"({"query": [1, 2]})", kShape, fast), HasSubstr("query 0 has dimension 2"));
    EXPECT_THAT(message_of(R"({"query": [1, 2, 3, 4], "k": 1, "k": 2})", kShape, fast), HasSubstr("duplicate key \"k\""));
    EXPECT_THAT(message_of(R"({"query": [1e39, 2, 3, 4]})", kShape, fast), HasSubstr("too large for float32"));
    EXPECT_THAT(message_of(std::string("{\"query\": [1, 2, 3, 4]}\0", 24), kShape, fast),
                HasSubstr("malformed JSON: a NUL byte at offset 23"));
    EXPECT_THAT(message_of(R"({"query": [1, 2, 3, 4], "filter": {"eq": {"tenat": 7}}})", kShape, fast),
                HasSubstr("filter: unknown attribute 'tenat'"));
  }
}

// ------------------------------------------------------------------------------ answers

std::vector<std::string> score_texts(const std::string& answer) {
  const std::size_t a = answer.find("\"scores\":[[") + 11, b = answer.find("]]", a);
  std::vector<std::string> out;
  std::string cur;
  for (std::size_t i = a; i < b; ++i) {
    if (answer[i] == ',' || answer[i] == ']' || answer[i] == '[') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += answer[i];
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

TEST(JsonAnswer, ExactText) {
  const std::int64_t ids[] = {1, -2, 9223372036854775807, 4, 7, 7};
  const float scores[] = {3.0f, 0.5f, -0.0f, 1e20f, 0.1f, 0.1f};
  const std::int32_t counts[] = {3, 1};
  std::string out = "x";
  write_search_json(out, ids, scores, counts, 2, 3, "l2", 0.25);
  EXPECT_EQ(out, R"(x{"ids":[[1,-2,9223372036854775807],[4]],"metric":"l2","scores":[[3.0,0.5,-0.0],[1e+20]],"took_ms":0.25})");
  const std::int32_t none[] = {0};
  out.clear();
  write_search_json(out, ids, scores, none, 1, 3, "cosine", 1e-3);
  EXPECT_EQ(out, R"({"ids":[[]],"metric":"cosine","scores":[[]],"took_ms":0.001})");
  EXPECT_TRUE(nlohmann::json::accept(out));
}

// Every score reads back as the same float32, parsed as float32 (strtof) or as a double then
// rounded (what a JSON library and then numpy do): edge values and a million random bit patterns.
TEST(JsonAnswer, EveryScoreReadsBackAsTheSameFloat32) {
  std::vector<float> v = {0.0f,     -0.0f,   1.0f, -1.0f, 0.1f,  1e-45f, -1e-45f, FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX,
                          1e20f,    1e-20f,  3.0f, 1e7f,  1e8f,  123456789.0f, 0.3f, 2.5e-38f,
                          std::nextafter(FLT_MIN, 0.0f), std::nextafter(FLT_MAX, 0.0f)};
  // The two float32 values whose shortest text, read as a double, rounds to another float32
  // (all 2^32 were checked): 7.038531e-26 reads back as 7.0385313e-26 through a double.
  for (std::uint32_t bits : {0x15ae43fdu, 0x95ae43fdu}) {
    float f;
    std::memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  for (int e = -45; e <= 38; ++e)
    for (float f : {std::pow(10.0f, static_cast<float>(e))}) {
      v.push_back(f);
      v.push_back(std::nextafter(f, 0.0f));
      v.push_back(std::nextafter(f, FLT_MAX));
    }
  std::mt19937 rng(7);
  while (v.size() < (1u << 20)) {
    const std::uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isfinite(f)) v.push_back(f);
  }
  const int k = 1024;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(k), 1);
  const std::int32_t counts[] = {k};
  std::size_t checked = 0, wrong = 0;
  for (std::size_t at = 0; at + k <= v.size(); at += k) {
    std::string out;
    write_search_json(out, ids.data(), v.data() + at, counts, 1, k, "inner_product", 0.0);
    const std::vector<std::string> texts = score_texts(out);
    ASSERT_EQ(texts.size(), static_cast<std::size_t>(k));
    for (int i = 0; i < k; ++i) {
      const float want = v[at + static_cast<std::size_t>(i)];
      const float as_float = std::strtof(texts[static_cast<std::size_t>(i)].c_str(), nullptr);
      const float via_double = static_cast<float>(std::strtod(texts[static_cast<std::size_t>(i)].c_str(), nullptr));
      if (std::memcmp(&as_float, &want, 4) != 0 || std::memcmp(&via_double, &want, 4) != 0) {
        if (++wrong < 5) ADD_FAILURE() << texts[static_cast<std::size_t>(i)] << " does not read back as " << want;
      }
      ++checked;
    }
  }
  EXPECT_EQ(wrong, 0u) << "of " << checked;
}

}  // namespace
}  // namespace shardtopk::service
