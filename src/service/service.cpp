// `shardtopk serve`: HTTP front end on rank 0, micro-batching, metrics, graceful shutdown.
//
// Threads on rank 0: the HTTP server's workers (service.threads, one per open connection) parse
// and validate requests and queue them as Jobs; the main thread (the only one that makes MPI
// calls: MPI_THREAD_FUNNELED) runs the Batcher, which forms batches and calls
// ShardedIndex::search. Followers run ShardedIndex::follow on their main thread.
#include "service/service.hpp"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "core/log.hpp"
#include "shardtopk/communicator.hpp"
#include "core/parse.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/ingest.hpp"

namespace shardtopk::service {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// ------------------------------------------------------------------------------ signals

volatile sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int) { g_stop = 1; }

void install_signal_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that disconnects must not end the process
}

// ------------------------------------------------------------------------------ jobs

// One HTTP search request: its rows, searched in some batch, answered with exactly its rows.
struct Job {
  int nq = 0, k = 0;
  std::vector<float> queries;  // [nq, dim]
  Clock::time_point arrival;
  // filled by the batcher
  std::vector<std::int64_t> ids;  // [nq, k]
  std::vector<float> scores;      // [nq, k]
  int status = 200;               // HTTP status
  std::string error;
  int batch_size = 0;  // queries in the batch it rode in
  std::promise<void> done;
};

// ------------------------------------------------------------------------------ metrics

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v) {
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++n_;
  }
  void render(std::string& out, const std::string& name, const std::string& help) const {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    std::uint64_t cum = 0;
    char buf[256];
    for (size_t i = 0; i < bounds_.size(); ++i) {
      cum += counts_[i];
      std::snprintf(buf, sizeof buf, "%s_bucket{le=\"%g\"} %llu\n", name.c_str(), bounds_[i],
                    static_cast<unsigned long long>(cum));
      out += buf;
    }
    cum += counts_.back();
    std::snprintf(buf, sizeof buf, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name.c_str(),
                  static_cast<unsigned long long>(cum), name.c_str(), sum_, name.c_str(),
                  static_cast<unsigned long long>(n_));
    out += buf;
  }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  double sum_ = 0;
  std::uint64_t n_ = 0;
};

class Metrics {
 public:
  Metrics()
      : latency_({0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
        batch_({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}) {}

  void request(const std::string& route, int status) {
    std::lock_guard<std::mutex> l(m_);
    ++requests_[{route, status}];
    ++minute_requests_;
  }
  void search_done(double seconds, int queries) {
    std::lock_guard<std::mutex> l(m_);
    latency_.observe(seconds);
    minute_latency_ms_.push_back(seconds * 1000.0);
    minute_queries_ += queries;
  }
  void batch_done(int size) {
    std::lock_guard<std::mutex> l(m_);
    batch_.observe(size);
    ++minute_batches_;
    minute_batch_queries_ += size;
  }
  void set_rank_stats(const std::vector<RankStats>& s) {
    std::lock_guard<std::mutex> l(m_);
    rank_stats_ = s;
  }
  std::atomic<int> queue_depth{0};

  std::string render() const {
    std::lock_guard<std::mutex> l(m_);
    std::string out;
    out += "# HELP shardtopk_http_requests_total HTTP requests by route and status.\n";
    out += "# TYPE shardtopk_http_requests_total counter\n";
    for (const auto& kv : requests_)
      out += "shardtopk_http_requests_total{route=\"" + kv.first.first + "\",status=\"" +
             std::to_string(kv.first.second) + "\"} " + std::to_string(kv.second) + "\n";
    latency_.render(out, "shardtopk_search_latency_seconds",
                    "Search request latency, arrival to answer ready (queueing + batching + search).");
    batch_.render(out, "shardtopk_batch_size", "Queries per collective search (micro-batch size).");
    out += "# HELP shardtopk_queue_depth Search requests waiting for a batch.\n# TYPE shardtopk_queue_depth gauge\n";
    out += "shardtopk_queue_depth " + std::to_string(queue_depth.load()) + "\n";
    out += "# HELP shardtopk_rank_search_seconds_total Time in each rank's local search.\n";
    out += "# TYPE shardtopk_rank_search_seconds_total counter\n";
    char buf[160];
    for (size_t r = 0; r < rank_stats_.size(); ++r) {
      std::snprintf(buf, sizeof buf, "shardtopk_rank_search_seconds_total{rank=\"%zu\"} %.9g\n", r,
                    rank_stats_[r].search_seconds);
      out += buf;
    }
    out += "# HELP shardtopk_rank_searches_total Local searches run by each rank.\n";
    out += "# TYPE shardtopk_rank_searches_total counter\n";
    for (size_t r = 0; r < rank_stats_.size(); ++r) {
      std::snprintf(buf, sizeof buf, "shardtopk_rank_searches_total{rank=\"%zu\"} %.0f\n", r, rank_stats_[r].searches);
      out += buf;
    }
    return out;
  }

  // The per-minute summary line (info), then the minute's counters restart.
  void log_minute() {
    std::lock_guard<std::mutex> l(m_);
    std::vector<double> v = std::move(minute_latency_ms_);
    minute_latency_ms_.clear();
    std::sort(v.begin(), v.end());
    auto pct = [&](double p) { return v.empty() ? 0.0 : v[static_cast<size_t>(p / 100.0 * (v.size() - 1))]; };
    spdlog::info("last minute: {} requests, {} queries in {} batches (mean {:.1f} queries), search latency ms "
                 "p50 {:.3f} p99 {:.3f}, queue {}",
                 minute_requests_, minute_queries_, minute_batches_,
                 minute_batches_ ? static_cast<double>(minute_batch_queries_) / minute_batches_ : 0.0, pct(50),
                 pct(99), queue_depth.load());
    minute_requests_ = minute_queries_ = minute_batches_ = minute_batch_queries_ = 0;
  }

 private:
  mutable std::mutex m_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  Histogram latency_, batch_;
  std::vector<RankStats> rank_stats_;
  std::vector<double> minute_latency_ms_;
  long minute_requests_ = 0, minute_queries_ = 0, minute_batches_ = 0, minute_batch_queries_ = 0;
};

// ------------------------------------------------------------------------------ queue

// Requests waiting for the batcher. The HTTP threads push; the main thread pops.
class JobQueue {
 public:
  void push(const std::shared_ptr<Job>& j) {
    {
      std::lock_guard<std::mutex> l(m_);
      q_.push_back(j);
    }
    cv_.notify_all();
  }
  void notify() { cv_.notify_all(); }
  std::mutex& mutex() { return m_; }
  std::condition_variable& cv() { return cv_; }
  std::deque<std::shared_ptr<Job>>& jobs() { return q_; }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> q_;
};

// ------------------------------------------------------------------------------ front end

// What the HTTP threads may read about the index once it is ready (immutable from then on).
struct IndexInfo {
  std::int64_t rows = 0, dim = 0;
  int k_max = 0, batch_max = 0, ranks = 0;
  Metric metric = Metric::kInnerProduct;
  std::string metric_name, dtype, engine, comm;
};

class FrontEnd {
 public:
  explicit FrontEnd(const Config& cfg) : cfg_(cfg) { setup_routes(); }
  ~FrontEnd() { stop_and_join(); }

  // Binds the listening socket (throws Error naming host and port when it cannot).
  void bind() {
    const auto& s = cfg_.service;
    if (s.port == 0) {
      port_ = svr_.bind_to_any_port(s.host);
      SHARDTOPK_EXPECTS(port_ > 0, "service: cannot listen on ", s.host, " (any port): bad address?");
    } else {
      SHARDTOPK_EXPECTS(svr_.bind_to_port(s.host, s.port), "service: cannot listen on ", s.host, ":", s.port,
                        " (port in use or bad address; set service.port, 0 = any free port)");
      port_ = s.port;
    }
    // httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, compiled into Debian's
    // library): a burst of 64 clients connecting at once overflows it and some connections are
    // reset. Linux lets listen() on a listening socket raise the backlog.
    if (listen_fd_ >= 0) ::listen(listen_fd_, 4096);
  }
  int port() const { return port_; }

  void start() {
    thread_ = std::thread([this] {
      svr_.listen_after_bind();
      server_done_ = true;
      queue_.notify();
    });
  }

  void set_ready(ShardedIndex& index) {
    IndexInfo i;
    i.rows = index.total_rows();
    i.dim = index.dim();
    i.k_max = index.config().search.k_max;
    i.batch_max = index.config().search.batch_max;
    i.ranks = index.world_size();
    i.metric = index.metric();
    i.metric_name = to_string(index.metric());
    i.dtype = to_string(index.engine_info().dtype);
    i.engine = index.engine_info().name;
    i.comm = index.data_comm().name();
    info_ = i;
    ready_.store(true);
  }

  void stop_accepting() {
    if (!stopping_.exchange(true)) svr_.stop();
  }
  void stop_and_join() {
    stop_accepting();
    if (thread_.joinable()) thread_.join();
  }
  bool server_done() const { return server_done_.load(); }

  JobQueue& queue() { return queue_; }
  Metrics& metrics() { return metrics_; }
  std::atomic<bool>& stats_wanted() { return stats_wanted_; }
  void stats_refreshed() {
    {
      std::lock_guard<std::mutex> l(stats_m_);
      ++stats_gen_;
    }
    stats_cv_.notify_all();
  }

 private:
  static void json_error(httplib::Response& res, int status, const std::string& msg) {
    res.status = status;
    // replace: a message may quote the client's bytes, which need not be valid UTF-8
    res.set_content(json{{"error", msg}, {"status", status}}.dump(-1, ' ', false, json::error_handler_t::replace),
                    "application/json");
  }

  static std::string route_label(const std::string& path) {
    for (const char* r : {"/v1/search", "/v1/info", "/healthz", "/readyz", "/metrics"})
      if (path == r) return r;
    return "other";
  }

  void setup_routes() {
    const auto& s = cfg_.service;
    const int threads = s.threads;
    svr_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    // SO_REUSEADDR (restart right after a stop) but not httplib's default SO_REUSEPORT, with
    // which a second service on the same port would silently share its connections.
    svr_.set_socket_options([this](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listen_fd_ = sock;
    });
    svr_.set_payload_max_length(static_cast<size_t>(s.max_body_bytes));
    svr_.set_tcp_nodelay(true);  // small replies: no Nagle / delayed-ACK stalls (40 ms each)
    svr_.set_keep_alive_timeout(2);  // idle keep-alive connections must not hold up shutdown long
    svr_.set_keep_alive_max_count(1000000);
    svr_.set_read_timeout(10, 0);
    svr_.set_write_timeout(10, 0);

    svr_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string msg;
      if (res.status == 404) msg = "no route " + req.method + " " + req.path;
      else if (res.status == 413)
        msg = "request body over service.max_body_bytes (" + std::to_string(cfg_.service.max_body_bytes) + " bytes)";
      else if (res.status == 400) msg = "bad request: the HTTP request could not be parsed";
      else msg = "HTTP " + std::to_string(res.status);
      json_error(res, res.status, msg);
    });
    svr_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics_.request(route_label(req.path), res.status);
      if (spdlog::should_log(spdlog::level::debug)) {
        spdlog::debug("{} {} -> {} ({} bytes in, {} bytes out{}{})", req.method, req.path, res.status,
                      req.body.size(), res.body.size(),
                      res.has_header("X-Took-Ms") ? ", took_ms " : "", res.get_header_value("X-Took-Ms"));
      }
    });

    svr_.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    svr_.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
      if (ready_.load() && !stopping_.load()) {
        res.set_content(R"({"status":"ready"})", "application/json");
      } else {
        json_error(res, 503, stopping_.load() ? "shutting down" : "not ready: the ranks are still ingesting");
      }
    });
    svr_.Get("/v1/info", [this](const httplib::Request&, httplib::Response& res) {
      if (!ready_.load()) return json_error(res, 503, "not ready: the ranks are still ingesting");
      const IndexInfo& i = info_;
      json j = {{"rows", i.rows},     {"dim", i.dim},         {"metric", i.metric_name}, {"dtype", i.dtype},
                {"ranks", i.ranks},   {"engine", i.engine},   {"comm", i.comm},          {"k_max", i.k_max},
                {"batch_max", i.batch_max}, {"batch_window_us", cfg_.service.batch_window_us},
                {"version", version()}};
      res.set_content(j.dump(), "application/json");
    });
    svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      if (ready_.load() && !stopping_.load()) {
        // ask the main thread for fresh per-rank counters; serve the last ones after 1 s
        std::unique_lock<std::mutex> l(stats_m_);
        const long gen = stats_gen_;
        stats_wanted_ = true;
        queue_.notify();
        stats_cv_.wait_for(l, std::chrono::seconds(1), [&] { return stats_gen_ != gen; });
      }
      res.set_content(metrics_.render(), "text/plain; version=0.0.4");
    });
    svr_.Post("/v1/search", [this](const httplib::Request& req, httplib::Response& res) {
      // httplib enforces the limit on Content-Length bodies only; a chunked body is checked here
      // (after it was read: such a client can still make rank 0 buffer it, see README Limitations).
      if (req.body.size() > static_cast<size_t>(cfg_.service.max_body_bytes)) {
        json_error(res, 413, "request body of " + std::to_string(req.body.size()) + " bytes over service.max_body_bytes (" +
                                 std::to_string(cfg_.service.max_body_bytes) + " bytes)");
        return;
      }
      search(req, res);
    });

    // Wrong method on a known route: 405 (httplib alone would answer 404).
    auto not_allowed = [](const char* allow) {
      return [allow](const httplib::Request& req, httplib::Response& res) {
        res.set_header("Allow", allow);
        json_error(res, 405, "method " + req.method + " not allowed on " + req.path + " (allowed: " + allow + ")");
      };
    };
    svr_.Get("/v1/search", not_allowed("POST"));
    svr_.Put("/v1/search", not_allowed("POST"));
    svr_.Delete("/v1/search", not_allowed("POST"));
    svr_.Patch("/v1/search", not_allowed("POST"));
    for (const char* r : {"/healthz", "/readyz", "/v1/info", "/metrics"}) {
      svr_.Post(r, not_allowed("GET"));
      svr_.Put(r, not_allowed("GET"));
      svr_.Delete(r, not_allowed("GET"));
      svr_.Patch(r, not_allowed("GET"));
    }
  }

  // Parses and checks one search request; on success queues it and waits for its answer.
  void search(const httplib::Request& req, httplib::Response& res) {
    const auto t0 = Clock::now();
    if (!ready_.load()) return json_error(res, 503, "not ready: the ranks are still ingesting");
    if (stopping_.load()) return json_error(res, 503, "shutting down");
    const IndexInfo& info = info_;
    const std::string ctype = req.get_header_value("Content-Type");
    const std::string media = ctype.substr(0, ctype.find(';'));
    const bool binary = media == "application/octet-stream";
    if (!binary && !media.empty() && media != "application/json")
      return json_error(res, 415, "Content-Type '" + ctype + "' not supported: use application/json or "
                                  "application/octet-stream");
    auto job = std::make_shared<Job>();
    try {
      if (binary) parse_binary(req, info, *job);
      else parse_json(req.body, info, *job);
      check_k(job->k, info);
      SHARDTOPK_EXPECTS(job->nq >= 1, "empty query list: send at least one query");
      SHARDTOPK_EXPECTS(job->nq <= info.batch_max, job->nq, " queries in one request exceed search.batch_max = ",
                        info.batch_max, "; split the request");
      check_values(*job, info);
    } catch (const Error& e) {
      return json_error(res, 400, e.what());
    }
    job->arrival = t0;
    std::future<void> fut = job->done.get_future();
    metrics_.queue_depth.fetch_add(1);
    queue_.push(job);
    fut.wait();
    const double took = ms_since(t0);
    if (job->status != 200) return json_error(res, job->status, job->error);
    metrics_.search_done(took / 1000.0, job->nq);
    char took_s[32];
    std::snprintf(took_s, sizeof took_s, "%.3f", took);
    res.set_header("X-Took-Ms", took_s);
    res.set_header("X-Batch-Size", std::to_string(job->batch_size));
    const size_t n = static_cast<size_t>(job->nq) * job->k;
    if (binary) {
      std::string body(n * 12, '\0');
      std::memcpy(&body[0], job->ids.data(), n * 8);
      std::memcpy(&body[n * 8], job->scores.data(), n * 4);
      res.set_content(std::move(body), "application/octet-stream");
      return;
    }
    json ids = json::array(), scores = json::array();
    for (int q = 0; q < job->nq; ++q) {
      json row_i = json::array(), row_s = json::array();
      for (int j = 0; j < job->k; ++j) {
        row_i.push_back(job->ids[static_cast<size_t>(q) * job->k + j]);
        // float → double is exact; the shortest double text reads back as the same float
        row_s.push_back(static_cast<double>(job->scores[static_cast<size_t>(q) * job->k + j]));
      }
      ids.push_back(std::move(row_i));
      scores.push_back(std::move(row_s));
    }
    json out = {{"ids", std::move(ids)}, {"scores", std::move(scores)}, {"metric", info.metric_name}, {"took_ms", took}};
    res.set_content(out.dump(), "application/json");
  }

  static void check_k(long long k, const IndexInfo& info) { shardtopk::check_k(k, info.k_max, info.rows); }

  static long long parse_int_param(const std::string& name, const std::string& v) {
    return parse_integer(v, "query parameter '" + name + "'");
  }

  static void parse_binary(const httplib::Request& req, const IndexInfo& info, Job& job) {
    SHARDTOPK_EXPECTS(req.has_param("k"), "binary search needs the query parameter k: POST /v1/search?k=K");
    const long long k = parse_int_param("k", req.get_param_value("k"));
    check_k(k, info);
    job.k = static_cast<int>(k);
    const std::size_t row_bytes = static_cast<std::size_t>(info.dim) * 4;
    SHARDTOPK_EXPECTS(!req.body.empty(), "empty query list: the body holds no float32 rows");
    SHARDTOPK_EXPECTS(req.body.size() % row_bytes == 0, "binary body of ", req.body.size(),
                      " bytes is not a multiple of 4 x dim = ", row_bytes, " bytes (dim ", info.dim, ")");
    const long long nq = static_cast<long long>(req.body.size() / row_bytes);
    if (req.has_param("batch")) {
      const long long b = parse_int_param("batch", req.get_param_value("batch"));
      SHARDTOPK_EXPECTS(b == nq, "batch=", b, " does not match the body: ", req.body.size(), " bytes = ", nq,
                        " rows of dim ", info.dim);
    }
    SHARDTOPK_EXPECTS(nq <= info.batch_max, nq, " queries in one request exceed search.batch_max = ", info.batch_max,
                      "; split the request");
    job.nq = static_cast<int>(nq);
    job.queries.resize(static_cast<size_t>(nq) * info.dim);
    std::memcpy(job.queries.data(), req.body.data(), req.body.size());  // little-endian hosts only (static_assert below)
  }

  static void parse_json(const std::string& body, const IndexInfo& info, Job& job) {
    json j;
    try {
      j = json::parse(body);
    } catch (const json::exception& e) {  // syntax, numbers out of range (1e400), invalid UTF-8
      throw Error(std::string("malformed JSON: ") + e.what());
    }
    SHARDTOPK_EXPECTS(j.is_object(), "expected a JSON object like {\"queries\": [[...]], \"k\": 10}");
    for (const auto& kv : j.items())
      SHARDTOPK_EXPECTS(kv.key() == "queries" || kv.key() == "query" || kv.key() == "k", "unknown field \"", kv.key(),
                        "\" (allowed: queries, query, k)");
    long long k = 10;
    if (j.contains("k")) {
      SHARDTOPK_EXPECTS(j["k"].is_number_integer(), "\"k\" must be an integer, got ", j["k"].dump());
      SHARDTOPK_EXPECTS(!j["k"].is_number_unsigned() || j["k"].get<unsigned long long>() <= 1ull << 31,
                        "\"k\" = ", j["k"].dump(), " is out of range");
      k = j["k"].get<long long>();
    }
    check_k(k, info);
    job.k = static_cast<int>(k);
    SHARDTOPK_EXPECTS(j.contains("queries") != j.contains("query"),
                      "give either \"queries\" (a list of vectors) or \"query\" (one vector)");
    std::vector<const json*> rows;
    if (j.contains("query")) {
      rows.push_back(&j["query"]);
    } else {
      const json& qs = j["queries"];
      SHARDTOPK_EXPECTS(qs.is_array(), "\"queries\" must be a list of vectors");
      SHARDTOPK_EXPECTS(!qs.empty(), "empty query list: send at least one query");
      SHARDTOPK_EXPECTS(static_cast<long long>(qs.size()) <= info.batch_max, qs.size(),
                        " queries in one request exceed search.batch_max = ", info.batch_max, "; split the request");
      for (const auto& q : qs) rows.push_back(&q);
    }
    job.nq = static_cast<int>(rows.size());
    job.queries.resize(rows.size() * static_cast<size_t>(info.dim));
    for (size_t q = 0; q < rows.size(); ++q) {
      const json& r = *rows[q];
      SHARDTOPK_EXPECTS(r.is_array(), "query ", q, " must be a list of numbers");
      SHARDTOPK_EXPECTS(static_cast<std::int64_t>(r.size()) == info.dim, "query ", q, " has dimension ", r.size(),
                        " but the index has dimension ", info.dim);
      for (size_t c = 0; c < r.size(); ++c) {
        SHARDTOPK_EXPECTS(r[c].is_number(), "query ", q, ", column ", c, ": ", r[c].dump(), " is not a number");
        const double v = r[c].get<double>();
        SHARDTOPK_EXPECTS(std::fabs(v) <= std::numeric_limits<float>::max(), "query ", q, ", column ", c, ": value ", r[c].dump(),
                          " is too large for float32");
        job.queries[q * info.dim + c] = static_cast<float>(v);
      }
    }
  }

  // Values the index would reject, checked here so a bad request never spoils a batch.
  static void check_values(const Job& job, const IndexInfo& info) {
    for (int q = 0; q < job.nq; ++q) {
      const float* row = job.queries.data() + static_cast<size_t>(q) * info.dim;
      bool zero = true;
      for (std::int64_t c = 0; c < info.dim; ++c) {
        SHARDTOPK_EXPECTS(std::isfinite(row[c]), "query ", q, ", column ", c, ": value ", row[c],
                          " is not finite (NaN or Inf, or too large for float32)");
        zero = zero && row[c] == 0.0f;
      }
      SHARDTOPK_EXPECTS(!(zero && info.metric == Metric::kCosine), "query ", q,
                        " has zero norm (cosine needs a direction)");
    }
  }

  Config cfg_;
  httplib::Server svr_;
  int port_ = 0;
  int listen_fd_ = -1;
  std::thread thread_;
  std::atomic<bool> ready_{false}, stopping_{false}, server_done_{false};
  IndexInfo info_;
  JobQueue queue_;
  Metrics metrics_;
  std::atomic<bool> stats_wanted_{false};
  std::mutex stats_m_;
  std::condition_variable stats_cv_;
  long stats_gen_ = 0;
};

static_assert(sizeof(float) == 4 && sizeof(std::int64_t) == 8, "binary protocol: float32 and int64");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the binary protocol copies little-endian rows as they are: big-endian hosts need byte swaps"
#endif

// ------------------------------------------------------------------------------ batcher

// The main thread on rank 0: forms micro-batches and runs the collective searches.
class Batcher {
 public:
  Batcher(ShardedIndex& index, FrontEnd& fe) : index_(index), fe_(fe), cfg_(index.config()) {
    const size_t bm = static_cast<size_t>(cfg_.search.batch_max);
    queries_.resize(bm * index.dim());
    ids_.resize(bm * cfg_.search.k_max);
    scores_.resize(ids_.size());
  }

  // Runs until a stop signal, then drains: stops accepting, answers every queued request, and
  // returns once the HTTP server has finished its connections.
  void run() {
    JobQueue& q = fe_.queue();
    auto last_summary = Clock::now();
    const auto window = std::chrono::microseconds(cfg_.service.batch_window_us);
    for (;;) {
      if (g_stop) fe_.stop_accepting();
      if (fe_.stats_wanted().exchange(false)) {
        fe_.metrics().set_rank_stats(index_.rank_stats());
        fe_.stats_refreshed();
      }
      if (std::chrono::duration<double>(Clock::now() - last_summary).count() >= 60.0) {
        last_summary = Clock::now();
        fe_.metrics().log_minute();
      }
      std::vector<std::shared_ptr<Job>> batch;
      {
        std::unique_lock<std::mutex> l(q.mutex());
        q.cv().wait_for(l, std::chrono::milliseconds(50), [&] {
          return !q.jobs().empty() || g_stop || fe_.server_done() || fe_.stats_wanted().load();
        });
        if (q.jobs().empty()) {
          if (fe_.server_done()) return;  // drained: the server has answered its last request
          continue;
        }
        // Micro-batching: wait for company until the oldest request's window closes or a full
        // batch of its k is queued (a stop signal flushes at once).
        const int k = q.jobs().front()->k;
        const auto deadline = q.jobs().front()->arrival + window;
        auto queued_same_k = [&] {
          int n = 0;
          for (const auto& j : q.jobs())
            if (j->k == k) n += j->nq;
          return n;
        };
        q.cv().wait_until(l, deadline, [&] { return g_stop || queued_same_k() >= cfg_.search.batch_max; });
        int total = 0;
        for (auto it = q.jobs().begin(); it != q.jobs().end();) {
          if ((*it)->k == k && total + (*it)->nq <= cfg_.search.batch_max) {
            total += (*it)->nq;
            batch.push_back(*it);
            it = q.jobs().erase(it);
          } else {
            ++it;
          }
        }
      }
      fe_.metrics().queue_depth.fetch_sub(static_cast<int>(batch.size()));
      run_batch(batch);
    }
  }

  // Answers every queued request with `status` (a rank is gone; the job is about to end).
  void fail_queued(int status, const std::string& err) {
    JobQueue& q = fe_.queue();
    std::lock_guard<std::mutex> l(q.mutex());
    for (auto& j : q.jobs()) finish(*j, status, err);
    q.jobs().clear();
  }

 private:
  void finish(Job& j, int status, const std::string& err) {
    j.status = status;
    j.error = err;
    j.done.set_value();
  }

  void run_batch(std::vector<std::shared_ptr<Job>>& batch) {
    const std::int64_t dim = index_.dim();
    const int k = batch.front()->k;
    int total = 0;
    for (const auto& j : batch) {
      std::copy(j->queries.begin(), j->queries.end(), queries_.begin() + static_cast<std::ptrdiff_t>(total) * dim);
      total += j->nq;
    }
    try {
      index_.search(queries_.data(), total, k, ids_.data(), scores_.data());
    } catch (const CommError& e) {
      // A rank is gone: answer everything queued, then the caller ends the job naming the rank.
      for (const auto& j : batch) finish(*j, 503, std::string("a rank is gone: ") + e.what());
      throw;
    } catch (const RemoteError& e) {
      spdlog::error("search of a batch of {} request(s) failed: {}", batch.size(), e.what());
      for (const auto& j : batch) finish(*j, 500, std::string("search failed: ") + e.what());
      return;
    } catch (const Error& e) {
      // Rank 0 refused the batch (every rank stays in step). Requests are checked before they
      // are queued, so this is a check the front end does not know: search each request alone
      // so that only the offending one fails.
      if (batch.size() == 1) {
        finish(*batch.front(), 400, e.what());
        return;
      }
      for (auto& j : batch) {
        std::vector<std::shared_ptr<Job>> solo{j};
        run_batch(solo);
      }
      return;
    }
    fe_.metrics().batch_done(total);
    int row = 0;
    for (const auto& j : batch) {
      const size_t off = static_cast<size_t>(row) * k, n = static_cast<size_t>(j->nq) * k;
      j->ids.assign(ids_.begin() + off, ids_.begin() + off + n);
      j->scores.assign(scores_.begin() + off, scores_.begin() + off + n);
      j->batch_size = total;
      row += j->nq;
      finish(*j, 200, "");
    }
  }

  ShardedIndex& index_;
  FrontEnd& fe_;
  const Config& cfg_;
  std::vector<float> queries_;
  std::vector<std::int64_t> ids_;
  std::vector<float> scores_;
};

}  // namespace

int serve(const Config& cfg, const ServeOptions& opts) {
  install_signal_handlers();
  std::unique_ptr<Communicator> comm = make_mpi_communicator(cfg.comm.timeout_s);
  const int rank = comm->rank();
  init_logging(rank, comm->world_size());

  // Rank 0 binds first, so a taken port fails the job before a long ingest.
  std::unique_ptr<FrontEnd> fe;
  bool ok = true;
  std::string msg;
  if (rank == 0) {
    try {
      fe = std::make_unique<FrontEnd>(cfg);
      fe->bind();
      if (!opts.port_file.empty()) {
        const std::string tmp = opts.port_file + ".tmp";
        std::ofstream(tmp) << fe->port() << "\n";
        SHARDTOPK_EXPECTS(std::rename(tmp.c_str(), opts.port_file.c_str()) == 0, "cannot write --port-file '",
                          opts.port_file, "'");
      }
      fe->start();  // /healthz answers now, /readyz says 503 until every rank has ingested
      spdlog::info("listening on http://{}:{} (ready once every rank has ingested)", cfg.service.host, fe->port());
    } catch (const std::exception& e) {
      ok = false;
      msg = e.what();
    }
  }
  comm->check(ok, msg);
  comm.reset();

  std::unique_ptr<ShardedIndex> index = load_index(cfg);
  if (rank != 0) {
    index->follow();  // SIGTERM/SIGINT here only set a flag: rank 0 decides when to stop
    spdlog::info("rank {}: shut down by rank 0", rank);
    return 0;
  }
  fe->set_ready(*index);
  spdlog::info("ready: http://{}:{}/v1/search (batch window {} us, batch_max {}, k_max {})", cfg.service.host,
               fe->port(), cfg.service.batch_window_us, cfg.search.batch_max, cfg.search.k_max);
  Batcher batcher(*index, *fe);
  try {
    batcher.run();
  } catch (const CommError& e) {
    // A rank is gone: answer what is queued, give the HTTP threads a moment to send it, then end
    // the job naming the rank (unwinding would wait on connections and on the missing peer).
    batcher.fail_queued(503, std::string("a rank is gone: ") + e.what());
    std::fprintf(stderr, "shardtopk: error: %s\n", e.what());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    abort_job(2);
  }
  spdlog::info("stopping: requests answered, shutting the ranks down");
  fe->stop_and_join();
  index->shutdown();
  fe->metrics().log_minute();
  return 0;
}

}  // namespace shardtopk::service
