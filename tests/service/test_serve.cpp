// `shardtopk serve` end to end: `mpirun -np 2 shardtopk serve` on CPU ranks on a free
// loopback port; real queries (bge-m3) and small generated sets by JSON and binary, compared with
// the float64 oracle and with `shardtopk search`; every bad request; micro-batched answers equal
// solo answers bit for bit; a failing rank answers 500 and the service keeps serving; SIGTERM to
// rank 0 drains in-flight requests and every rank and mpirun exit 0 within 10 s.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <numeric>
#include <cstdlib>
#include <set>

#include "filter_support.hpp"
#include "filtered_oracle.hpp"
#include "serve_support.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/filter.hpp"
#include "tools/oracle.hpp"

namespace shardtopk {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;
using test::Answer;
using test::Clock;
using test::post;
using test::Reply;
using test::search_binary;
using test::search_json;
using test::secs_since;
using test::Server;

std::string mpi_prefix(int ranks) { return test::mpi_prefix(ranks); }
std::string json_queries(const float* q, int nq, std::int64_t dim, int k) { return test::json_queries(q, nq, dim, k); }

Answer slice(const Answer& a, int q0, int nq, int k) {
  Answer s;
  s.ids.assign(a.ids.begin() + q0 * k, a.ids.begin() + (q0 + nq) * k);
  s.scores.assign(a.scores.begin() + q0 * k, a.scores.begin() + (q0 + nq) * k);
  return s;
}

// An explicit body limit (4 MiB), so that the 413 cases below do not depend on the derived one.
std::string write_config(const std::string& dir, const std::string& corpus, const std::string& metric, int k_max,
                         int batch_max, int window_us) {
  return test::write_config(dir, corpus, metric, k_max, batch_max, window_us, "  max_body_bytes: 4194304\n");
}

// ------------------------------------------------------------------------------ bge-m3 (real vectors)

class ServeBge : public ::testing::Test {
 protected:
  static constexpr std::int64_t kN = 500, kQ = 500, kDim = 1024;
  static constexpr int kK = 10, kBatchMax = 64;
  static constexpr int kWindowUs = 20000;  // long, so concurrent requests surely share batches

  static void SetUpTestSuite() {
    try {
      corpus_ = test::read_raw_f32(test::bge_dir() + "/paragraphs-1024.f32", kN, kDim);
      queries_ = test::read_raw_f32(test::bge_dir() + "/sentences-1024.f32", kQ, kDim);
    } catch (const std::exception& e) {
      data_error_ = e.what();
      return;
    }
    dir_ = new test::TempDir();
    const std::string path = dir_->file("bge.h5");
    H5Writer w(path);
    w.write_f32("train", corpus_.data(), kN, kDim);
    w.write_f32("test", queries_.data(), kQ, kDim);
    w.close();
    config_ = write_config(dir_->path(), path, "cosine", 100, kBatchMax, kWindowUs);
    // A lone connection's search answered by its event loop's poll even on a loaded machine.
    test::add_to_config(config_, "service:", "  answer_poll_us: 20000\n");
    server_ = new Server(config_, dir_->path());
    ready_ = server_->wait_ready();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
    server_ = nullptr;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(data_error_.empty()) << data_error_;
    ASSERT_TRUE(ready_) << "the service did not start";
  }
  int port() const { return server_->port(); }
  const float* q(int i) const { return queries_.data() + static_cast<size_t>(i) * kDim; }

  static std::vector<float> corpus_, queries_;
  static test::TempDir* dir_;
  static std::string config_;
  static Server* server_;
  static bool ready_;
  static std::string data_error_;  // the real vectors could not be read
};
std::vector<float> ServeBge::corpus_, ServeBge::queries_;
std::string ServeBge::data_error_;
test::TempDir* ServeBge::dir_ = nullptr;
std::string ServeBge::config_;
Server* ServeBge::server_ = nullptr;
bool ServeBge::ready_ = false;

TEST_F(ServeBge, InfoHealthReady) {
  httplib::Client c("127.0.0.1", port());
  auto h = c.Get("/healthz");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto r = c.Get("/readyz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  auto i = c.Get("/v1/info");
  ASSERT_TRUE(i);
  ASSERT_EQ(i->status, 200);
  const json j = json::parse(i->body);
  EXPECT_EQ(j["rows"], kN);
  EXPECT_EQ(j["dim"], kDim);
  EXPECT_EQ(j["metric"], "cosine");
  EXPECT_EQ(j["dtype"], "float32");
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["engine"], "cpu");
  EXPECT_EQ(j["k_max"], 100);
  EXPECT_EQ(j["batch_max"], kBatchMax);
  EXPECT_FALSE(j["version"].get<std::string>().empty());
}

TEST_F(ServeBge, JsonAndBinaryMatchTheOracleAndEachOther) {
  const int nq = 40;
  const Answer js = search_json(port(), q(0), nq, kDim, kK);
  const Answer bin = search_binary(port(), q(0), nq, kDim, kK);
  ASSERT_EQ(js.ids.size(), static_cast<size_t>(nq * kK));
  test::expect_bit_identical(js, bin, "JSON vs binary");
  std::vector<float> qs(queries_.begin(), queries_.begin() + nq * kDim);
  test::expect_within_tolerance(Metric::kCosine, corpus_, kN, nullptr, qs, nq, kDim, kK, js, "serve bge-m3 JSON");
  // one "query" object form
  const Reply r = post(port(), "/v1/search",
                       json{{"query", std::vector<float>(q(3), q(3) + kDim)}, {"k", kK}}.dump(), "application/json");
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  ASSERT_EQ(j["ids"].size(), 1u);
  for (int c = 0; c < kK; ++c) EXPECT_EQ(j["ids"][0][c].get<std::int64_t>(), js.ids[3 * kK + c]);
}

// Ranges, pages and counts through the JSON route: pages of 10 walked after each reply's "next"
// equal one top-100 bit for bit; a range at the 37th score returns exactly the rows of the
// top-100 at or above it, with their number as "total" (also with count_only); the proof fields
// are there; bad order fields get 400 naming the field, and the service still answers.
TEST_F(ServeBge, RangesPagesAndCountsOverTheOrder) {
  const std::vector<float> qv(q(7), q(7) + kDim);
  auto ask = [&](json body) {
    body["query"] = qv;
    const Reply r = post(port(), "/v1/search", body.dump(), "application/json");
    EXPECT_EQ(r.status, 200) << body.dump().substr(0, 80) << ": " << r.body;
    return r.status == 200 ? json::parse(r.body) : json();
  };
  const json all = ask(json{{"k", 100}});
  ASSERT_EQ(all["ids"][0].size(), 100u);
  EXPECT_FALSE(all.contains("rows_scanned"));  // no bound: no stats
  EXPECT_EQ(all["kth_score"][0], all["scores"][0][99]);
  json after = nullptr;
  std::vector<std::int64_t> ids;
  std::vector<float> scores;
  for (int page = 0; page < 10; ++page) {
    json body{{"k", 10}, {"min_score", -2.0}};
    if (!after.is_null()) body["search_after"] = after;
    const json j = ask(body);
    ASSERT_FALSE(j.is_null());
    EXPECT_EQ(j["total"][0].get<std::int64_t>(), kN) << "every row scores above -2";
    EXPECT_EQ(j["rows_scanned"][0].get<std::int64_t>(), kN);
    for (const auto& v : j["ids"][0]) ids.push_back(v.get<std::int64_t>());
    for (const auto& v : j["scores"][0]) scores.push_back(v.get<float>());
    after = j["next"][0];
    ASSERT_TRUE(after.is_array()) << j.dump().substr(0, 200);
  }
  ASSERT_EQ(ids.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(ids[static_cast<size_t>(i)], all["ids"][0][i].get<std::int64_t>()) << "position " << i;
    EXPECT_EQ(scores[static_cast<size_t>(i)], all["scores"][0][i].get<float>()) << "position " << i;
  }
  const float bound = all["scores"][0][37].get<float>();
  std::int64_t within = 0;
  for (const auto& v : all["scores"][0]) within += v.get<float>() >= bound ? 1 : 0;
  const json range = ask(json{{"limit", 100}, {"min_score", bound}});
  EXPECT_EQ(range["total"][0].get<std::int64_t>(), within);
  ASSERT_EQ(range["ids"][0].size(), static_cast<size_t>(within));
  for (std::int64_t i = 0; i < within; ++i) EXPECT_EQ(range["ids"][0][i], all["ids"][0][i]);
  EXPECT_EQ(range["next"][0], nullptr) << "fewer rows than the limit: the range is over";
  const json count = ask(json{{"count_only", true}, {"min_score", bound}});
  EXPECT_EQ(count["total"][0].get<std::int64_t>(), within);
  EXPECT_TRUE(count["ids"][0].empty());
  for (const auto& [body, word] : std::vector<std::pair<json, std::string>>{
           {json{{"min_score", "high"}}, "min_score of query 0 must be a number"},
           {json{{"max_distance", 1.0}}, "\"max_distance\" is for l2"},
           {json{{"count_only", true}}, "count_only"},
           {json{{"search_after", json::array({0.5})}}, "search_after of query 0 must be [score, id]"},
           {json{{"k", 5}, {"limit", 5}}, "give \"limit\" or \"k\""}}) {
    json b = body;
    b["query"] = qv;
    const Reply r = post(port(), "/v1/search", b.dump(), "application/json");
    EXPECT_EQ(r.status, 400) << b.dump().substr(0, 60);
    EXPECT_THAT(json::parse(r.body).value("error", ""), HasSubstr(word));
  }
  EXPECT_EQ(ask(json{{"k", 100}})["ids"], all["ids"]) << "the service answers as before";
}

// Each score of a JSON answer, its text read as float32 (strtof) or as a double then rounded to
// float32, is bit for bit the binary route's score of the same query and rank.
TEST_F(ServeBge, JsonScoresReadBackAsFloat32AreTheBinaryBits) {
  const int nq = 64;
  const Reply r = post(port(), "/v1/search", json_queries(q(100), nq, kDim, kK), "application/json");
  ASSERT_EQ(r.status, 200) << r.body;
  const Answer bin = search_binary(port(), q(100), nq, kDim, kK);
  ASSERT_EQ(bin.scores.size(), static_cast<size_t>(nq * kK));
  // the texts between "scores":[[ and ]]
  const std::size_t from = r.body.find("\"scores\":[[");
  ASSERT_NE(from, std::string::npos) << r.body;
  const std::size_t to = r.body.find("]]", from);
  std::vector<std::string> texts;
  std::string cur;
  for (std::size_t i = from + 11; i < to; ++i) {
    if (r.body[i] == ',' || r.body[i] == '[' || r.body[i] == ']') {
      if (!cur.empty()) texts.push_back(cur);
      cur.clear();
    } else {
      cur += r.body[i];
    }
  }
  if (!cur.empty()) texts.push_back(cur);
  ASSERT_EQ(texts.size(), bin.scores.size());
  int wrong = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const float as_float = std::strtof(texts[i].c_str(), nullptr);
    const float via_double = static_cast<float>(std::strtod(texts[i].c_str(), nullptr));
    if (std::memcmp(&as_float, &bin.scores[i], 4) != 0 || std::memcmp(&via_double, &bin.scores[i], 4) != 0)
      if (++wrong <= 5) ADD_FAILURE() << "score " << i << ": JSON " << texts[i] << ", binary " << bin.scores[i];
  }
  EXPECT_EQ(wrong, 0);
}

TEST_F(ServeBge, SameAnswersAsTheSearchCommand) {
  const int nq = 100;
  const std::string out = dir_->file("cli.h5");
  const std::string cmd = mpi_prefix(2) + SHARDTOPK_BIN + " search -c " + config_ + " -q " + dir_->file("bge.h5") +
                          " -k " + std::to_string(kK) + " --max-queries " + std::to_string(nq) + " --batch 7 --out " +
                          out + " >" + dir_->file("cli.log") + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << test::read_text(dir_->file("cli.log"));
  std::int64_t rq = 0, rk = 0;
  Answer cli;
  cli.ids = read_int64_matrix(out, "ids", &rq, &rk);
  ASSERT_EQ(rq, nq);
  ASSERT_EQ(rk, kK);
  cli.scores = read_matrix(out, "scores", "score").data;
  Answer srv;
  for (int q0 = 0; q0 < nq; q0 += 25) {  // other batch sizes than the CLI's
    const Answer part = search_binary(port(), q(q0), 25, kDim, kK);
    srv.ids.insert(srv.ids.end(), part.ids.begin(), part.ids.end());
    srv.scores.insert(srv.scores.end(), part.scores.begin(), part.scores.end());
  }
  test::expect_bit_identical(srv, cli, "serve vs search command");
}

TEST_F(ServeBge, MicroBatchedAnswersEqualSoloAnswersBitForBit) {
  const int nq = 48;
  // Solo: one request at a time, so each is a batch of its own.
  std::vector<Answer> solo(nq);
  for (int i = 0; i < nq; ++i) {
    int bs = 0;
    solo[i] = search_json(port(), q(100 + i), 1, kDim, (i % 3 == 0) ? 5 : kK, &bs);
    EXPECT_EQ(bs, 1) << "a lone request rides alone";
  }
  // Concurrent: 48 clients at once, JSON and binary mixed, two values of k; the window is long,
  // so requests of the same k share batches. How many share depends on the scheduler (a loaded
  // 2-core machine may serialise the clients), so the test asks only that some did, and runs the
  // round again (at most 5 times) when none did; every round's answers are checked.
  std::vector<std::thread> th;
  int batched = 0;
  for (int round = 0; round < 5 && batched == 0; ++round) {
    std::vector<Answer> got(nq);
    std::vector<int> batch(nq, 0);
    th.clear();
    for (int i = 0; i < nq; ++i)
      th.emplace_back([&, i] {
        const int k = (i % 3 == 0) ? 5 : kK;
        got[i] = (i % 2) ? search_binary(port(), q(100 + i), 1, kDim, k, &batch[i])
                         : search_json(port(), q(100 + i), 1, kDim, k, &batch[i]);
      });
    for (auto& t : th) t.join();
    for (int i = 0; i < nq; ++i) {
      test::expect_bit_identical(got[i], solo[i], "query " + std::to_string(100 + i) + " batched vs solo");
      batched += batch[i] > 1;
    }
    std::printf("  round %d: %d of %d concurrent requests shared a batch\n", round, batched, nq);
  }
  EXPECT_GT(batched, 0) << "no concurrent request was micro-batched in 5 rounds";
  // Multi-row requests batched together keep their own rows.
  std::vector<Answer> multi(6);
  th.clear();
  for (int i = 0; i < 6; ++i)
    th.emplace_back([&, i] { multi[i] = search_binary(port(), q(200 + 5 * i), 5, kDim, kK); });
  for (auto& t : th) t.join();
  const Answer all = search_binary(port(), q(200), 30, kDim, kK);
  for (int i = 0; i < 6; ++i) test::expect_bit_identical(multi[i], slice(all, 5 * i, 5, kK), "rows of request " + std::to_string(i));
}

TEST_F(ServeBge, BadRequestsGet4xxNamingTheProblemAndChangeNothing) {
  const Answer before = search_json(port(), q(7), 2, kDim, kK);
  const std::vector<float> good(q(7), q(7) + kDim);
  auto row = [&](std::vector<float> v) { return json(v); };
  struct Case {
    const char* what;
    std::string path, body, ctype, method = "POST";
    int status;
    const char* needle;
  };
  std::vector<float> short_row(good.begin(), good.begin() + 100);
  std::string first_big = row(good).dump();
  first_big = "[1e39" + first_big.substr(first_big.find(','));  // the first value overflows float32
  const std::string nan_json = "{\"queries\": [" + first_big + "], \"k\": 5}";
  std::vector<float> nan_bin = good;
  nan_bin[5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> inf_bin = good;
  inf_bin[9] = std::numeric_limits<float>::infinity();
  const std::string bin(reinterpret_cast<const char*>(good.data()), good.size() * 4);
  std::vector<float> many(static_cast<size_t>(kBatchMax + 1) * kDim, 0.5f);
  json many_json = json::array();
  for (int i = 0; i < kBatchMax + 1; ++i) many_json.push_back(row(good));
  const std::vector<Case> cases = {
      {"malformed JSON", "/v1/search", "{\"queries\": [[1, 2", "application/json", "POST", 400, "malformed JSON"},
      {"not an object", "/v1/search", "[1,2,3]", "application/json", "POST", 400, "JSON object"},
      {"wrong D", "/v1/search", json{{"queries", json::array({row(short_row)})}, {"k", 5}}.dump(), "application/json",
       "POST", 400, "dimension 100 but the index has dimension 1024"},
      {"too large for float32 (JSON)", "/v1/search", nan_json, "application/json", "POST", 400, "too large for float32"},
      {"beyond double (JSON)", "/v1/search", "{\"query\": [1e400], \"k\": 5}", "application/json", "POST", 400, "malformed JSON"},
      {"k beyond int64 (JSON)", "/v1/search", "{\"k\": 9223372036854775808, \"query\": [1]}", "application/json", "POST", 400, "out of range"},
      {"NaN (binary)", "/v1/search?k=5", std::string(reinterpret_cast<const char*>(nan_bin.data()), kDim * 4),
       "application/octet-stream", "POST", 400, "column 5"},
      {"Inf (binary)", "/v1/search?k=5", std::string(reinterpret_cast<const char*>(inf_bin.data()), kDim * 4),
       "application/octet-stream", "POST", 400, "column 9"},
      {"not a number", "/v1/search", "{\"query\": [\"a\"], \"k\": 3}", "application/json", "POST", 400, "dimension"},
      {"k = 0", "/v1/search", json{{"query", row(good)}, {"k", 0}}.dump(), "application/json", "POST", 400, "k=0 out of range"},
      {"k < 0", "/v1/search?k=-3", bin, "application/octet-stream", "POST", 400,
       "query parameter 'k': expected a positive integer (decimal digits only), got '-3'"},
      {"a NUL in k", "/v1/search?k=5%00abc", bin, "application/octet-stream", "POST", 400,
       "query parameter 'k': expected a positive integer (decimal digits only), got '5\\x00abc'"},
      {"k > k_max", "/v1/search", json{{"query", row(good)}, {"k", 101}}.dump(), "application/json", "POST", 400, "search.k_max"},
      {"k not an integer", "/v1/search", json{{"query", row(good)}, {"k", 2.5}}.dump(), "application/json", "POST", 400,
       "\"k\" must be an integer"},
      {"k missing (binary)", "/v1/search", bin, "application/octet-stream", "POST", 400, "query parameter k"},
      {"k not a number (binary)", "/v1/search?k=ten", bin, "application/octet-stream", "POST", 400, "expected a positive integer"},
      {"k beyond int64 (binary)", "/v1/search?k=99999999999999999999", bin, "application/octet-stream", "POST", 400,
       "beyond the 64-bit integer range"},
      {"k with a '+'", "/v1/search?k=%2B5", bin, "application/octet-stream", "POST", 400,
       "query parameter 'k': expected a positive integer (decimal digits only), got '+5'"},
      {"k with trailing junk", "/v1/search?k=5%20", bin, "application/octet-stream", "POST", 400, "got '5 '"},
      {"empty query list", "/v1/search", json{{"queries", json::array()}, {"k", 5}}.dump(), "application/json", "POST",
       400, "empty query list"},
      {"empty binary body", "/v1/search?k=5", "", "application/octet-stream", "POST", 400, "empty query list"},
      {"more queries than batch_max", "/v1/search", json{{"queries", many_json}, {"k", 5}}.dump(), "application/json",
       "POST", 400, "search.batch_max = 64"},
      {"more binary rows than batch_max", "/v1/search?k=5",
       std::string(reinterpret_cast<const char*>(many.data()), many.size() * 4), "application/octet-stream", "POST", 400,
       "search.batch_max = 64"},
      {"binary length not a multiple of 4*D", "/v1/search?k=5", bin + "abc", "application/octet-stream", "POST", 400,
       "not a multiple of 4 x dim = 4096"},
      {"batch does not match the body", "/v1/search?k=5&batch=2", bin, "application/octet-stream", "POST", 400,
       "batch=2 does not match"},
      {"both query and queries", "/v1/search", json{{"query", row(good)}, {"queries", json::array({row(good)})}}.dump(),
       "application/json", "POST", 400, "either"},
      {"unknown field", "/v1/search", json{{"query", row(good)}, {"topk", 3}}.dump(), "application/json", "POST", 400,
       "unknown field \"topk\""},
      {"unsupported content type", "/v1/search", "hello", "text/plain", "POST", 415, "not supported"},
      {"unknown route", "/v2/search", "{}", "application/json", "POST", 404, "no route POST /v2/search"},
      // a route is matched as sent: a percent-encoded path is not one (a proxy that matches
      // paths sees it as another path too)
      {"percent-encoded slash", "/v1%2Fsearch", "{}", "application/json", "POST", 404, "no route POST /v1%2Fsearch"},
      {"percent-encoded letter", "/v1/%69nfo", "", "", "GET", 404, "no route GET /v1/%69nfo"},
      {"wrong method on search", "/v1/search", "", "", "GET", 405, "not allowed"},
      {"wrong method on info", "/v1/info", "{}", "application/json", "POST", 405, "not allowed"},
      {"wrong method (DELETE)", "/v1/search", "", "", "DELETE", 405, "not allowed"},
  };
  httplib::Client c("127.0.0.1", port());
  for (const Case& cs : cases) {
    httplib::Result r = cs.method == "GET"      ? c.Get(cs.path.c_str())
                        : cs.method == "DELETE" ? c.Delete(cs.path.c_str())
                                                : c.Post(cs.path.c_str(), cs.body, cs.ctype.c_str());
    ASSERT_TRUE(r) << cs.what << ": no reply (" << httplib::to_string(r.error()) << ")";
    EXPECT_EQ(r->status, cs.status) << cs.what << ": " << r->body;
    json j;
    ASSERT_NO_THROW(j = json::parse(r->body)) << cs.what << ": the error is not JSON: " << r->body;
    ASSERT_TRUE(j.contains("error")) << cs.what;
    EXPECT_THAT(j["error"].get<std::string>(), HasSubstr(cs.needle)) << cs.what;
  }
  {  // a '+' left unencoded in the query (form encoding reads it as a space): refused all the same
    const test::RawReply r = test::raw_request(
        port(), "POST /v1/search?k=+5 HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
                "Content-Length: " + std::to_string(bin.size()) + "\r\n\r\n" + bin);
    EXPECT_EQ(r.status, 400) << r.error;
    EXPECT_THAT(r.body, HasSubstr("query parameter 'k': expected a positive integer (decimal digits only)"));
  }
  {  // a body over max_body_bytes is refused from its Content-Length, before it is sent
    const test::RawReply r = test::raw_request(
        port(), "POST /v1/search?k=5 HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
                "Content-Length: 5242880\r\n\r\n");
    EXPECT_EQ(r.status, 413) << r.error;
    EXPECT_THAT(r.body, HasSubstr("over service.max_body_bytes (4194304 bytes)"));
  }
  {  // the same over-size body sent chunked (no Content-Length): 413 too
    const std::string big(5 << 20, 'x');
    httplib::Result r = c.Post(
        "/v1/search?k=5",
        [&big](size_t offset, httplib::DataSink& sink) {
          const size_t n = std::min<size_t>(1 << 16, big.size() - offset);
          sink.write(big.data() + offset, n);
          if (offset + n == big.size()) sink.done();
          return true;
        },
        "application/octet-stream");
    ASSERT_TRUE(r) << "chunked body: no reply (" << httplib::to_string(r.error()) << ")";
    EXPECT_EQ(r->status, 413) << "chunked body: " << r->body;
  }
  // A client that disconnects mid-request harms no other request.
  {
    httplib::Client slow("127.0.0.1", port());
    slow.set_read_timeout(0, 1000);  // gives up after 1 ms, before the answer
    (void)slow.Post("/v1/search", json_queries(q(9), 1, kDim, kK), "application/json");
  }
  // Nothing changed: the same query gives the same bits; the service still serves.
  test::expect_bit_identical(search_json(port(), q(7), 2, kDim, kK), before, "after the bad requests");
}

TEST_F(ServeBge, MetricsInPrometheusText) {
  (void)search_binary(port(), q(1), 3, kDim, kK);
  httplib::Client c("127.0.0.1", port());
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  for (const char* s :
       {"# TYPE shardtopk_http_requests_total counter", "shardtopk_http_requests_total{route=\"/v1/search\",status=\"200\"}",
        "# TYPE shardtopk_search_latency_seconds histogram", "shardtopk_search_latency_seconds_bucket{le=\"+Inf\"}",
        "# TYPE shardtopk_batch_size histogram", "shardtopk_queue_depth 0",
        "shardtopk_rank_search_seconds_total{rank=\"0\"}", "shardtopk_rank_search_seconds_total{rank=\"1\"}",
        "shardtopk_rank_searches_total{rank=\"1\"}"})
    EXPECT_THAT(r->body, HasSubstr(s));
  // Stage timings: every stage of both routes, counted for the searches answered so far.
  (void)search_json(port(), q(2), 1, kDim, kK);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  for (const char* body : {"json", "binary"}) {
    double sum = 0;
    for (const char* stage : {"read", "parse", "queue", "search", "resume", "write"}) {
      const std::string name = std::string("shardtopk_search_stage_seconds_total{body=\"") + body + "\",stage=\"" + stage + "\"} ";
      const std::size_t at = m->body.find(name);
      ASSERT_NE(at, std::string::npos) << name;
      const double v = std::atof(m->body.c_str() + at + name.size());
      EXPECT_GE(v, 0) << name;
      sum += v;
    }
    EXPECT_GT(sum, 0) << body;
    const std::string count = std::string("shardtopk_search_stage_requests_total{body=\"") + body + "\"} ";
    const std::size_t at = m->body.find(count);
    ASSERT_NE(at, std::string::npos) << count;
    EXPECT_GE(std::atoll(m->body.c_str() + at + count.size()), 1) << count;
  }
}

// A lone connection's search is answered by its event loop's poll (service.answer_poll_us: this
// suite's service polls up to 20 ms); a service with answer_poll_us 0 answers after suspending
// the connection and resuming it. The same bits either way, and the oracle's.
TEST_F(ServeBge, AnswersPolledOnTheLoopOrAfterASuspensionAreTheSameBits) {
  auto polled = [](int port) -> long long {
    httplib::Client c("127.0.0.1", port);
    auto m = c.Get("/metrics");
    const std::string name = "\nshardtopk_http_answers_polled_total ";  // the sample, not its HELP line
    const std::size_t at = m ? m->body.find(name) : std::string::npos;
    EXPECT_NE(at, std::string::npos) << (m ? m->body : "no reply");
    return at == std::string::npos ? -1 : std::atoll(m->body.c_str() + at + name.size());
  };
  constexpr int kSearches = 8;
  const long long before = polled(port());
  std::vector<Answer> answers;
  for (int i = 0; i < kSearches; ++i) answers.push_back(search_binary(port(), q(i), 1, kDim, kK));
  // Each search comes on a new connection: the loop may not have closed the last one yet.
  EXPECT_GE(polled(port()) - before, 1) << "no search answered by the loop's poll";
  for (int i = 0; i < kSearches; ++i) {
    std::vector<float> one(q(i), q(i) + kDim);
    test::expect_within_tolerance(Metric::kCosine, corpus_, kN, nullptr, one, 1, kDim, kK, answers[i],
                                  "polled answer " + std::to_string(i));
  }

  test::TempDir other;
  const std::string config = write_config(other.path(), dir_->file("bge.h5"), "cosine", 100, kBatchMax, kWindowUs);
  test::add_to_config(config, "service:", "  answer_poll_us: 0\n");
  Server no_poll(config, other.path());
  ASSERT_TRUE(no_poll.wait_ready());
  for (int i = 0; i < kSearches; ++i)
    test::expect_bit_identical(search_binary(no_poll.port(), q(i), 1, kDim, kK), answers[i],
                               "answer after a suspension vs polled, query " + std::to_string(i));
  EXPECT_EQ(polled(no_poll.port()), 0);
}

// examples/client.py (binary and JSON) gives the same ids as the C++ client.
TEST_F(ServeBge, PythonClientGivesTheSameAnswers) {
  std::string py;
  for (const char* p : {"/usr/bin/python3", "python3"})
    if (std::system((std::string(p) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) {
      py = p;
      break;
    }
  if (py.empty()) GTEST_SKIP() << "python3 with numpy not found: Python client test skipped";
  const Answer ref = search_binary(port(), q(0), 3, kDim, 4);
  for (const char* mode : {"", " --json"}) {
    const std::string out = dir_->file("py.txt");
    const std::string cmd = py + " " SHARDTOPK_SOURCE_DIR "/examples/client.py --url http://127.0.0.1:" +
                            std::to_string(port()) + " -k 4 --batch 3 --queries " + test::bge_dir() +
                            "/sentences-1024.f32" + mode + " >" + out + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << test::read_text(out);
    const std::string text = test::read_text(out);
    for (int i = 0; i < 3; ++i) {
      std::string ids = "query " + std::to_string(i) + ": ids [";
      for (int c = 0; c < 4; ++c) ids += (c ? ", " : "") + std::to_string(ref.ids[i * 4 + c]);
      EXPECT_THAT(text, HasSubstr(ids + "]")) << mode;
    }
  }
}

// Last in this suite: the in-flight requests are answered, then every rank and mpirun exit 0.
TEST_F(ServeBge, SigtermToRankZeroDrainsAndEveryRankExitsZero) {
  const auto ranks = server_->ranks();
  ASSERT_EQ(ranks.size(), 2u) << "expected 2 ranks under mpirun pid " << server_->pid();
  std::vector<int> status(8, 0);
  std::vector<std::thread> th;
  for (int i = 0; i < 8; ++i)
    th.emplace_back([&, i] {
      status[i] = post(port(), "/v1/search?k=3", std::string(reinterpret_cast<const char*>(q(i)), kDim * 4),
                       "application/octet-stream")
                      .status;
    });
  // The signal goes once a request waits for its batch, so that the drain has one to answer
  // however the clients were scheduled (a request taken from the queue between the look and the
  // signal is answered all the same). Batches are often taken at once, so the queue may never be
  // seen non-empty: after 3 s every request has had its answer, and the signal goes anyway.
  {
    httplib::Client c("127.0.0.1", port());
    const auto deadline = Clock::now() + std::chrono::seconds(3);
    while (Clock::now() < deadline) {
      auto m = c.Get("/metrics");
      if (m && m->status == 200 && m->body.find("shardtopk_queue_depth ") != std::string::npos &&
          m->body.find("shardtopk_queue_depth 0\n") == std::string::npos)
        break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  const auto t0 = Clock::now();
  ASSERT_EQ(kill(ranks.at(0), SIGTERM), 0);
  for (auto& t : th) t.join();
  const int rc = server_->wait_exit(10);
  const double took = secs_since(t0);
  std::printf("  mpirun exited %d %.2f s after SIGTERM to rank 0\n", rc, took);
  EXPECT_EQ(rc, 0) << server_->log();
  EXPECT_LT(took, 10.0);
  int answered = 0;
  for (int s : status) answered += s == 200;
  // Requests that reached the queue before the signal are answered; later ones may get 503 or no
  // connection, but never a wrong answer.
  for (int s : status) EXPECT_TRUE(s == 200 || s == 503 || s == 0) << s;
  std::printf("  %d of 8 in-flight requests answered 200\n", answered);
  EXPECT_GT(answered, 0);
  for (const auto& kv : ranks) EXPECT_NE(kill(kv.second, 0), 0) << "rank " << kv.first << " still runs";
  EXPECT_THAT(server_->log(), HasSubstr("stopping: requests answered"));
}

// ------------------------------------------------------------------------------ filters (bge-m3 with a doc attribute)

// bge-m3 paragraphs with `doc` (paragraph / 8, int64) and `meta/parity` (float64) attributes,
// search.max_filters 2: filtered answers by JSON and binary against the float64 oracle over the
// rows that pass; fewer results than k when fewer rows pass; concurrent requests with more
// distinct filters than one batch takes are split across batches and each gets its solo bits.
class ServeFiltered : public ::testing::Test {
 protected:
  static constexpr std::int64_t kN = 500, kQ = 64, kDim = 1024;
  static constexpr int kK = 10;

  static void SetUpTestSuite() {
    try {
      corpus_ = test::read_raw_f32(test::bge_dir() + "/paragraphs-1024.f32", kN, kDim);
      queries_ = test::read_raw_f32(test::bge_dir() + "/sentences-1024.f32", kN, kDim);
    } catch (const std::exception& e) {
      data_error_ = e.what();
      return;
    }
    queries_.resize(static_cast<size_t>(kQ * kDim));
    std::vector<std::int64_t> doc(kN);
    std::vector<double> parity(kN);
    for (std::int64_t i = 0; i < kN; ++i) {
      doc[i] = i / 8;
      parity[i] = static_cast<double>(i % 2);
    }
    table_ = new AttributeTable({{"doc", AttributeType::kInt64, doc, {}}, {"parity", AttributeType::kFloat64, {}, parity}},
                                test::iota_ids(kN), 1);
    dir_ = new test::TempDir();
    const std::string path = dir_->file("bge-doc.h5");
    H5Writer w(path);
    w.write_f32("train", corpus_.data(), kN, kDim);
    w.write_i64("doc", doc.data(), kN, 0);
    w.write_f64("meta/parity", parity.data(), kN, 0);
    w.close();
    const std::string cfg = write_config(dir_->path(), path, "cosine", 100, 64, 20000);
    test::add_to_config(cfg, "corpus:", "  attributes: [doc, meta/parity]\n");
    test::add_to_config(cfg, "search:", "  max_filters: 2\n");
    server_ = new Server(cfg, dir_->path());
    ready_ = server_->wait_ready();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
    delete table_;
  }
  void SetUp() override {
    ASSERT_TRUE(data_error_.empty()) << data_error_;
    ASSERT_TRUE(ready_) << "the service did not start";
  }
  int port() const { return server_->port(); }
  const float* q(int i) const { return queries_.data() + static_cast<size_t>(i) * kDim; }

  // Every query's answer against the oracle over the rows that pass `filter` (within ε; near-tie
  // swaps counted and returned).
  int expect_oracle(const test::FilteredAnswer& a, int q0, const json& filter, const std::string& what) {
    const test::Subset s = test::passing_rows(corpus_, kN, kDim, nullptr, [&](std::int64_t r) {
      return test::oracle_passes(filter, *table_, r);
    });
    int swaps = 0;
    for (size_t i = 0; i < a.ids.size(); ++i) {
      std::vector<std::int64_t> ids = a.ids[i];
      std::vector<float> scores = a.scores[i];
      const int count = static_cast<int>(ids.size());
      ids.resize(kK, kPadId);
      scores.resize(kK, -std::numeric_limits<float>::infinity());
      swaps += test::expect_filtered_answer(Metric::kCosine, s, kDim, q(q0 + static_cast<int>(i)), kK, ids.data(),
                                            scores.data(), count, false, what + " query " + std::to_string(i));
    }
    return swaps;
  }

  static std::vector<float> corpus_, queries_;
  static AttributeTable* table_;
  static test::TempDir* dir_;
  static Server* server_;
  static bool ready_;
  static std::string data_error_;
};
std::vector<float> ServeFiltered::corpus_, ServeFiltered::queries_;
AttributeTable* ServeFiltered::table_ = nullptr;
test::TempDir* ServeFiltered::dir_ = nullptr;
Server* ServeFiltered::server_ = nullptr;
bool ServeFiltered::ready_ = false;
std::string ServeFiltered::data_error_;

const std::vector<std::string>& filter_texts() {
  static const std::vector<std::string> f = {
      R"({"range": {"doc": [10, 30]}})",                                       // 168 rows
      R"({"eq": {"doc": 5}})",                                                 // 8 rows: fewer than k
      R"({"in": {"doc": [1, 50, 61]}})",                                       // 24 rows
      R"({"not": {"range": {"doc": [0, 40]}}})",                               // 172 rows
      R"({"all": [{"eq": {"parity": 1.0}}, {"range": {"doc": [null, 20]}}]})",  // 84 rows
      R"({"ids_in": [3, 77, 400]})",                                           // 3 rows
      R"({"eq": {"doc": 1000}})",                                              // no row
  };
  return f;
}

TEST_F(ServeFiltered, InfoListsTheAttributes) {
  httplib::Client c("127.0.0.1", port());
  auto i = c.Get("/v1/info");
  ASSERT_TRUE(i);
  ASSERT_EQ(i->status, 200);
  const json j = json::parse(i->body);
  EXPECT_EQ(j["attributes"], json::parse(R"([{"name": "doc", "type": "int64"}, {"name": "parity", "type": "float64"}])"));
  EXPECT_EQ(j["max_filters"], 2);
}

TEST_F(ServeFiltered, JsonAndBinaryMatchTheOracleOverThePassingRows) {
  const int nq = 12;
  int swaps = 0;
  for (const std::string& text : filter_texts()) {
    const json f = json::parse(text);
    const test::FilteredAnswer js = test::search_json_filtered(port(), q(0), nq, kDim, kK, f);
    const test::FilteredAnswer bin =
        test::search_binary_filtered(port(), q(0), nq, kDim, kK, text, -std::numeric_limits<float>::infinity());
    EXPECT_TRUE(js == bin) << text << ": JSON and binary differ";
    ASSERT_EQ(js.ids.size(), static_cast<size_t>(nq)) << text;
    swaps += expect_oracle(js, 0, f, text);
  }
  std::printf("  near-tie swaps: %d\n", swaps);
  // A filter passing every row gives the unfiltered answer (and the binary reply its counts).
  const test::FilteredAnswer every = test::search_json_filtered(port(), q(0), 3, kDim, kK, json::parse(R"({"all": []})"));
  const Answer plain = search_json(port(), q(0), 3, kDim, kK);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(every.ids[i], std::vector<std::int64_t>(plain.ids.begin() + i * kK, plain.ids.begin() + (i + 1) * kK));
  EXPECT_EQ(test::search_binary_filtered(port(), q(0), 3, kDim, kK, "null", -INFINITY).ids, every.ids)
      << "?filter=null: no filter, and the counts";
  // ?filter= on the JSON route too, and "filter": null
  const Reply r = post(port(), "/v1/search?filter=" + test::url_encode(filter_texts()[1]),
                       json::parse(json_queries(q(0), 1, kDim, kK)).dump(), "application/json");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["ids"][0].size(), 8u);
}

TEST_F(ServeFiltered, ConcurrentRequestsWithManyFiltersAreSplitAndGetTheirSoloBits) {
  const int n = 28;  // 7 filters (max_filters 2 per batch), JSON and binary
  const auto& texts = filter_texts();
  std::vector<test::FilteredAnswer> solo(n), got(n);
  for (int i = 0; i < n; ++i) {
    int bs = 0;
    solo[i] = test::search_json_filtered(port(), q(i), 1, kDim, kK, json::parse(texts[i % texts.size()]), &bs);
    EXPECT_EQ(bs, 1);
  }
  std::vector<int> batch(n, 0);
  std::vector<std::thread> th;
  for (int i = 0; i < n; ++i)
    th.emplace_back([&, i] {
      const std::string& t = texts[i % texts.size()];
      got[i] = (i % 2) ? test::search_binary_filtered(port(), q(i), 1, kDim, kK, t, -INFINITY, &batch[i])
                       : test::search_json_filtered(port(), q(i), 1, kDim, kK, json::parse(t), &batch[i]);
    });
  for (auto& t : th) t.join();
  int shared = 0, largest = 0;
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(got[i] == solo[i]) << "request " << i << " (" << texts[i % texts.size()] << ") batched vs alone";
    shared += batch[i] > 1;
    largest = std::max(largest, batch[i]);
    expect_oracle(got[i], i, json::parse(texts[i % texts.size()]), "concurrent " + std::to_string(i));
  }
  std::printf("  %d of %d concurrent filtered requests shared a batch (largest %d)\n", shared, n, largest);
  EXPECT_GT(shared, 0) << "concurrent filtered requests should have been micro-batched";
  EXPECT_LT(largest, n) << "7 distinct filters cannot share one batch with search.max_filters 2";
}

TEST_F(ServeFiltered, BadFiltersGet400NamingTheProblemAndChangeNothing) {
  const test::FilteredAnswer before = test::search_json_filtered(port(), q(5), 2, kDim, kK, json::parse(filter_texts()[0]));
  const std::string row = json::parse(json_queries(q(5), 1, kDim, kK)).dump();
  const std::string bin(reinterpret_cast<const char*>(q(5)), kDim * 4);
  auto with = [&](const std::string& filter) { return row.substr(0, row.size() - 1) + R"(, "filter": )" + filter + "}"; };
  struct Case {
    std::string what, path, body, ctype, needle;
  };
  const std::vector<Case> cases = {
      {"unknown attribute", "/v1/search", with(R"({"eq": {"tenant": 7}})"), "application/json",
       "unknown attribute 'tenant' (known: doc, parity)"},
      {"a float for an int64", "/v1/search", with(R"({"eq": {"doc": 7.5}})"), "application/json", "not an integer"},
      {"a string value", "/v1/search", with(R"({"in": {"doc": ["7"]}})"), "application/json", "the string '7'"},
      {"empty range", "/v1/search", with(R"({"range": {"doc": [9, 3]}})"), "application/json",
       "lower bound 9 is above upper bound 3"},
      {"unknown operator", "/v1/search", with(R"({"eqq": {"doc": 1}})"), "application/json", "unknown operator 'eqq'"},
      {"not an object", "/v1/search", with("5"), "application/json", "expected a filter object"},
      {"a key twice", "/v1/search", with(R"({"eq": {"doc": 1, "doc": 2}})"), "application/json", "given twice"},
      {"bad JSON in ?filter=", "/v1/search?k=5&filter=" + test::url_encode(R"({"eq": {"doc": 1})"), bin,
       "application/octet-stream", "filter: invalid JSON"},
      {"unknown attribute in ?filter=", "/v1/search?k=5&filter=" + test::url_encode(R"({"eq": {"Doc": 1}})"), bin,
       "application/octet-stream", "unknown attribute 'Doc'"},
      {"filter twice", "/v1/search?filter=" + test::url_encode(R"({"eq": {"doc": 1}})"), with("null"),
       "application/json", "the filter is given twice"},
      {"empty ?filter=", "/v1/search?k=5&filter=", bin, "application/octet-stream",
       "filter: invalid JSON: empty filter; leave filter= out (or give filter=null)"},
      {"filter= twice", "/v1/search?k=5&filter=null&filter=null", bin, "application/octet-stream",
       "query parameter 'filter' given more than once"},
  };
  for (const Case& cs : cases) {
    const Reply r = post(port(), cs.path, cs.body, cs.ctype);
    EXPECT_EQ(r.status, 400) << cs.what << ": " << r.body;
    EXPECT_THAT(r.body, HasSubstr(cs.needle)) << cs.what;
  }
  EXPECT_TRUE(test::search_json_filtered(port(), q(5), 2, kDim, kK, json::parse(filter_texts()[0])) == before)
      << "after the bad filters";
}

// ------------------------------------------------------------------------------ generated small integers

// Exact ids (ties included) on small-integer vectors, l2, through JSON and binary; a rank whose
// local search fails gives 500 naming it and the service keeps serving.
TEST(ServeGenerated, ExactIdsOnSmallIntegersAndARankFailureKeepsServing) {
  constexpr std::int64_t kN = 301, kDim = 8, kQ = 12;
  constexpr int kK = 7;
  test::TempDir dir;
  const std::vector<float> corpus = test::small_ints(kN * kDim, 77, -2, 2);  // many ties
  const std::vector<float> queries = test::small_ints(kQ * kDim, 78, -2, 2);
  const std::string path = dir.file("gen.h5");
  {
    H5Writer w(path);
    w.write_f32("train", corpus.data(), kN, kDim);
    w.close();
  }
  const std::string cfg = write_config(dir.path(), path, "l2", 1024, 16, 300);
  // Rank 1's local search number 2 (its third) fails, as an engine error would.
  if (!SHARDTOPK_FAULTS_BUILT) GTEST_SKIP() << "built without fault injection (-DSHARDTOPK_FAULT_INJECTION=ON)";
  test::write_text(cfg, test::read_text(cfg) + "testing:\n  fault: fail:1:2\n");
  Server srv(cfg, dir.path(), 2);
  ASSERT_TRUE(srv.wait_ready());
  const Answer a0 = search_json(srv.port(), queries.data(), kQ, kDim, kK);   // search 0
  const Answer a1 = search_binary(srv.port(), queries.data(), kQ, kDim, kK); // search 1
  test::expect_exact(Metric::kL2, corpus, kN, nullptr, queries, kQ, kDim, kK, a0, "serve l2 JSON");
  test::expect_bit_identical(a0, a1, "JSON vs binary");
  // search 2: rank 1 fails → 500 naming rank 1
  const Reply bad = post(srv.port(), "/v1/search", json_queries(queries.data(), 1, kDim, kK), "application/json");
  EXPECT_EQ(bad.status, 500) << bad.body;
  EXPECT_THAT(bad.body, HasSubstr("rank 1"));
  // the service keeps serving, with the same answers
  test::expect_bit_identical(search_binary(srv.port(), queries.data(), kQ, kDim, kK), a1, "after a rank failure");
  // k > rows
  const Reply big = post(srv.port(), "/v1/search", json{{"query", std::vector<float>(kDim, 1.0f)}, {"k", 302}}.dump(),
                         "application/json");
  EXPECT_EQ(big.status, 400);
  EXPECT_THAT(big.body, HasSubstr("corpus rows"));
  ASSERT_EQ(kill(srv.ranks().at(0), SIGTERM), 0);
  EXPECT_EQ(srv.wait_exit(10), 0) << srv.log();
  EXPECT_THAT(srv.log(), HasSubstr("testing.fault fail:1:2: injected local search failure"));
}

// /v1/rank against the float64 oracle on small integers (l2, many ties; 2 ranks): the best and
// the worst row, tied rows (their rank counts the equal-distance rows of smaller id), a repeated
// id, the same under a filter (an id the filter drops gets the rank it would have); an unknown id,
// a wrong-length query, no ids and an unknown field get 400 naming them, and the service goes on.
TEST(ServeGenerated, RanksOfIdsAreTheOraclesTiesIncluded) {
  constexpr std::int64_t kN = 301, kDim = 8;
  test::TempDir dir;
  const std::vector<float> corpus = test::small_ints(kN * kDim, 91, -2, 2);
  const std::vector<float> query = test::small_ints(kDim, 92, -2, 2);
  const std::string path = dir.file("gen.h5");
  {
    H5Writer w(path);
    w.write_f32("train", corpus.data(), kN, kDim);
    w.close();
  }
  Server srv(write_config(dir.path(), path, "l2", 64, 16, 300), dir.path(), 2);
  ASSERT_TRUE(srv.wait_ready());
  std::vector<double> d(kN);
  for (std::int64_t i = 0; i < kN; ++i) {
    double s = 0;
    for (std::int64_t c = 0; c < kDim; ++c) {
      const double x = static_cast<double>(corpus[static_cast<size_t>(i * kDim + c)]) - query[static_cast<size_t>(c)];
      s += x * x;
    }
    d[static_cast<size_t>(i)] = s;
  }
  // The oracle's rank of `id` among the rows `pass` keeps: 1 + the rows ahead of it.
  auto oracle = [&](std::int64_t id, const std::function<bool(std::int64_t)>& pass) {
    std::int64_t ahead = 0;
    for (std::int64_t j = 0; j < kN; ++j)
      if (pass(j) && (d[j] < d[id] || (d[j] == d[id] && j < id))) ++ahead;
    return 1 + ahead;
  };
  std::vector<std::int64_t> order(kN);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return d[a] < d[b] || (d[a] == d[b] && a < b); });
  std::int64_t tied = -1;  // a row in the middle of the order with an equal-distance row of smaller id before it
  for (std::int64_t r = kN / 2; r < kN && tied < 0; ++r)
    if (d[order[r]] == d[order[r - 1]]) tied = order[r];
  ASSERT_GE(tied, 0) << "the generated rows have no tie";
  const std::vector<std::int64_t> ids = {order[0], order[kN - 1], tied, order[0]};
  auto rank = [&](const json& extra) {
    json body{{"query", query}, {"ids", ids}};
    body.update(extra);
    return post(srv.port(), "/v1/rank", body.dump(), "application/json");
  };
  const auto all = [](std::int64_t) { return true; };
  const Reply r = rank(json::object());
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  ASSERT_EQ(j["ranks"].size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(j["ranks"][i].get<std::int64_t>(), oracle(ids[i], all)) << "id " << ids[i];
    EXPECT_EQ(j["scores"][i].get<double>(), d[ids[i]]) << "id " << ids[i];
  }
  EXPECT_EQ(j["ranks"][0], 1);
  EXPECT_EQ(j["ranks"][1], kN);
  EXPECT_TRUE(j.contains("applied_seq"));
  // under a filter dropping the best two rows and every other id
  const std::vector<std::int64_t> dropped = {order[0], order[1], order[7]};
  auto pass = [&](std::int64_t id) { return id % 2 == 0 && std::find(dropped.begin(), dropped.end(), id) == dropped.end(); };
  std::vector<std::int64_t> odd;
  for (std::int64_t i = 1; i < kN; i += 2) odd.push_back(i);
  odd.insert(odd.end(), dropped.begin(), dropped.end());
  const Reply f = rank(json{{"filter", {{"ids_not_in", odd}}}});
  ASSERT_EQ(f.status, 200) << f.body;
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(json::parse(f.body)["ranks"][i].get<std::int64_t>(), oracle(ids[i], pass)) << "filtered, id " << ids[i];
  for (const auto& [body, word] : std::vector<std::pair<json, std::string>>{
           {json{{"query", query}, {"ids", {order[3], kN + 4}}}, "unknown id 305"},
           {json{{"query", std::vector<float>(kDim - 1, 1.0f)}, {"ids", {1}}}, "query must be a list of 8 numbers"},
           {json{{"query", query}, {"ids", json::array()}}, "ids must be a non-empty list"},
           {json{{"query", query}, {"ids", {1.5}}}, "ids[0] must be an int64 row id"},
           {json{{"query", query}, {"ids", {1}}, {"k", 3}}, "unknown field \"k\""}}) {
    const Reply bad = post(srv.port(), "/v1/rank", body.dump(), "application/json");
    EXPECT_EQ(bad.status, 400) << body.dump().substr(0, 80) << ": " << bad.body;
    EXPECT_THAT(json::parse(bad.body).value("error", ""), HasSubstr(word));
  }
  EXPECT_EQ(rank(json::object()).body.substr(0, 40), r.body.substr(0, 40)) << "the service answers as before";
}

// A rank that stalls (a dead peer looks the same): the batch's requests get 503 naming the
// collective that timed out, and the job ends non-zero within comm.timeout_s (+ teardown).
TEST(ServeGenerated, AStalledRankAnswers503AndEndsTheJob) {
  test::TempDir dir;
  const std::vector<float> corpus = test::small_ints(40 * 4, 6, -2, 2);
  const std::string path = dir.file("c.h5");
  {
    H5Writer w(path);
    w.write_f32("train", corpus.data(), 40, 4);
    w.close();
  }
  std::string cfg = write_config(dir.path(), path, "l2", 8, 4, 300);
  std::string text = test::read_text(cfg);
  text.replace(text.find("timeout_s: 30"), 13, "timeout_s: 2");
  if (!SHARDTOPK_FAULTS_BUILT) GTEST_SKIP() << "built without fault injection (-DSHARDTOPK_FAULT_INJECTION=ON)";
  test::write_text(cfg, text + "testing:\n  fault: stall:1:1:60\n");
  Server srv(cfg, dir.path(), 2);
  ASSERT_TRUE(srv.wait_ready());
  const std::vector<float> q = {1, 0, -1, 2};
  EXPECT_EQ(post(srv.port(), "/v1/search", json{{"query", q}, {"k", 3}}.dump(), "application/json").status, 200);
  const auto t0 = Clock::now();
  const Reply r = post(srv.port(), "/v1/search", json{{"query", q}, {"k", 3}}.dump(), "application/json");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_THAT(r.body, HasSubstr("did not complete within 2 s"));
  const int rc = srv.wait_exit(30);
  std::printf("  503 after %.1f s; mpirun exited %d\n", secs_since(t0), rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "the job did not end";
  EXPECT_THAT(srv.log(), HasSubstr("stalled or dead"));
}

// A taken port fails the job at start-up on every rank, naming the port.
TEST(ServeGenerated, PortInUseFailsAtStartUp) {
  test::TempDir dir;
  const std::vector<float> corpus = test::small_ints(20 * 4, 5, -2, 2);
  const std::string path = dir.file("c.h5");
  {
    H5Writer w(path);
    w.write_f32("train", corpus.data(), 20, 4);
    w.close();
  }
  httplib::Server blocker;
  const int port = blocker.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::string cfg = write_config(dir.path(), path, "l2", 8, 4, 300);
  std::string text = test::read_text(cfg);
  text.replace(text.find("port: 0"), 7, "port: " + std::to_string(port));
  test::write_text(cfg, text);
  Server srv(cfg, dir.path());
  const int rc = srv.wait_exit(30);
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "did not exit";
  EXPECT_THAT(srv.log(), HasSubstr("cannot listen on 127.0.0.1:" + std::to_string(port)));
}

}  // namespace
}  // namespace shardtopk
