// bench_load: load generator for `shardtopk serve`. Closed-loop clients (one keep-alive
// connection each, one query per request) at several concurrencies, JSON and binary; QPS,
// p50/p99 latency and the mean micro-batch (X-Batch-Size) per configuration; every answer to the
// first --check queries of the pool is checked against the float64 oracle (DESIGN.md "within
// tolerance": every id a hit, scores within ε, in order, no duplicates); HTTP errors count as
// wrong too. --idle N holds N idle keep-alive connections open during every configuration
// (docs/SERVING.md's idle-connection target); --binary-header sends the optional binary header.
// An https:// URL speaks TLS (--cacert names the CA that signed the service's certificate);
// --api-key (or $SHARDTOPK_API_KEY) is sent as `Authorization: Bearer KEY` on every request.
// Request bodies (JSON and binary) are built once before the runs, as replaying load generators
// do: a client's latency is the service's plus the loopback round trip, not its own serialiser.
// --client raw (plain http:// only) sends each request over its own keep-alive socket in one
// send() and reads the answer with blocking recv()s: two system calls per request where
// cpp-httplib (--client httplib, the default) makes nine (a poll() before every read and write,
// the headers and the body sent apart), so the latency is the service's and the loopback's alone.
// Each configuration also reads the service's stage counters (/metrics,
// shardtopk_search_stage_seconds_total) before and after, and reports the mean time per request
// in each stage (read, parse, queue, search, resume, write).
//
// Output (nccl-tests style): one JSON line per configuration, then a table with a #wrong
// column. Exit status 1 when any answer was wrong, 2 on a usage or set-up error.
//
//   bench_load --url http://127.0.0.1:8080 --corpus data/x.h5 --queries data/x.h5 -k 10 \
//              --clients 1,16,64,256 --duration 5 --formats json,binary [--idle 10000]
//   bench_load --url https://127.0.0.1:8443 --cacert ca.pem --api-key "$KEY" ...
#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "core/stats.hpp"
#include "core/half.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "tools/oracle.hpp"
#include "shardtopk/types.hpp"

namespace {

using namespace shardtopk;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Result {
  std::string format;
  int clients = 0;
  long requests = 0, errors = 0, checked = 0, wrong = 0, near_tie_swaps = 0;
  double seconds = 0, qps = 0, p50_ms = 0, p99_ms = 0, mean_ms = 0, mean_batch = 0;
  std::vector<std::pair<std::string, double>> stage_us;  ///< mean µs per answered search, by stage
  std::string first_error;
};

double pct(const std::vector<double>& v, double p) { return v.empty() ? 0.0 : percentile(v, p); }

// The optional binary request header (docs/SERVING.md, "Binary protocol").
std::string binary_header(std::uint32_t rows, std::uint32_t dim) {
  std::string h(32, '\0');
  const unsigned char magic[4] = {'S', 'T', 0xC0, 0x7F};
  std::memcpy(&h[0], magic, 4);
  const std::uint32_t f[4] = {0x01020304u, 1u, rows, dim};  // byte-order mark, float32, rows, dim
  std::memcpy(&h[4], f, sizeof f);
  return h;
}

// `n` idle keep-alive connections to host:port (IPv4 numeric host), each served one GET /healthz
// first (with `tls`: connected only, their handshake not begun); closed on destruction.
class IdleConnections {
 public:
  IdleConnections(const std::string& host, int port, int n, bool tls) {
    if (n <= 0) return;
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(port));
    SHARDTOPK_EXPECTS(inet_pton(AF_INET, host.c_str(), &sa.sin_addr) == 1, "--idle needs a numeric IPv4 host in --url, got '",
                      host, "'");
    const std::string get = "GET /healthz HTTP/1.1\r\nHost: " + host + "\r\n\r\n";
    for (int i = 0; i < n; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      SHARDTOPK_EXPECTS(fd >= 0, "--idle: socket() failed after ", i, " connections (ulimit -n)");
      SHARDTOPK_EXPECTS(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0, "--idle: connection ", i,
                        " refused");
      fds_.push_back(fd);
      if (!tls) (void)!::send(fd, get.data(), get.size(), MSG_NOSIGNAL);
    }
    char buf[4096];
    if (!tls)
      for (int fd : fds_) (void)!::recv(fd, buf, sizeof buf, 0);  // one small reply each
  }
  ~IdleConnections() {
    for (int fd : fds_) ::close(fd);
  }

 private:
  std::vector<int> fds_;
};


// One answer as either client reads it: `got` false when no reply came (`error` says why).
struct Reply {
  bool got = false;
  int status = 0;
  std::string body, error;
  double batch = 0;  // X-Batch-Size, 0 when absent
};

// --client raw: one plain-HTTP/1.1 keep-alive connection; each request (line, headers, body,
// built once by the caller) goes out in one send(), the answer (Content-Length framed) is read
// with blocking recv()s. Reconnects after `Connection: close` or a failed exchange.
class RawClient {
 public:
  RawClient(std::string host, std::string port) : host_(std::move(host)), port_(std::move(port)) {}
  ~RawClient() { close_fd(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  Reply exchange(const std::string& request) {
    Reply out;
    if (fd_ < 0 && !connect_fd(out.error)) return out;
    for (std::size_t sent = 0; sent < request.size();) {
      const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return fail(out, "send: " + std::string(std::strerror(errno)));
      sent += static_cast<std::size_t>(n);
    }
    buf_.clear();
    std::size_t end = std::string::npos;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos)
      if (!read_more()) return fail(out, "connection closed before the answer's headers");
    const std::string head = buf_.substr(0, end + 2);
    out.status = std::atoi(head.c_str() + std::min<std::size_t>(head.size(), 9));  // "HTTP/1.1 200"
    long long length = -1;
    bool close = false;
    for (std::size_t at = head.find("\r\n") + 2; at < head.size();) {
      const std::size_t eol = head.find("\r\n", at);
      const std::string line = head.substr(at, eol - at);
      at = eol + 2;
      const std::size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      const char* value = line.c_str() + colon + 1;
      while (*value == ' ') ++value;
      if (name == "content-length") length = std::atoll(value);
      else if (name == "x-batch-size") out.batch = std::atof(value);
      else if (name == "connection") close = strncasecmp(value, "close", 5) == 0;
    }
    if (length < 0) return fail(out, "answer without Content-Length");
    while (buf_.size() < end + 4 + static_cast<std::size_t>(length))
      if (!read_more()) return fail(out, "connection closed inside the answer's body");
    out.body = buf_.substr(end + 4, static_cast<std::size_t>(length));
    out.got = true;
    if (close) close_fd();
    return out;
  }

 private:
  bool connect_fd(std::string& error) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int gai = getaddrinfo(host_.c_str(), port_.c_str(), &hints, &res);
    if (gai != 0) {
      error = std::string("getaddrinfo: ") + gai_strerror(gai);
      return false;
    }
    for (addrinfo* a = res; a && fd_ < 0; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) fd_ = fd;
      else ::close(fd);
    }
    freeaddrinfo(res);
    if (fd_ < 0) {
      error = "connect to " + host_ + ":" + port_ + ": " + std::strerror(errno);
      return false;
    }
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{60, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return true;
  }
  bool read_more() {
    char chunk[16384];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buf_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }
  Reply& fail(Reply& out, std::string why) {
    out.error = std::move(why);
    close_fd();
    return out;
  }
  void close_fd() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  std::string host_, port_, buf_;
  int fd_ = -1;
};

// TLS (https:// URLs: the service's certificate checked against --cacert) and the API key.
void configure(httplib::Client& cl, const std::string& url, const std::string& cacert, const std::string& api_key) {
  if (url.rfind("https://", 0) == 0) {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
    if (!cacert.empty()) cl.set_ca_cert_path(cacert.c_str());
    cl.enable_server_certificate_verification(true);
#else
    throw Error("--url " + url + ": this bench_load was built without TLS (cpp-httplib without OpenSSL: install libssl-dev)");
#endif
  }
  if (!api_key.empty()) cl.set_default_headers({{"Authorization", "Bearer " + api_key}});
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) out.push_back(t);
  return out;
}

}  // namespace

/// The service's stage counters for one body kind (`binary`: "binary", else "json"): seconds per
/// stage (shardtopk_search_stage_seconds_total) and, under "requests", the searches they cover.
/// Empty when /metrics is not readable (a key without the read role, an older service).
std::vector<std::pair<std::string, double>> stage_counters(httplib::Client& cl, const std::string& body) {
  std::vector<std::pair<std::string, double>> out;
  auto r = cl.Get("/metrics");
  if (!r || r->status != 200) return out;
  const std::string sel = "{body=\"" + body + "\"";
  std::istringstream in(r->body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("shardtopk_search_stage_", 0) != 0 || line.find(sel) == std::string::npos) continue;
    const size_t sp = line.rfind(' ');
    const size_t st = line.find("stage=\"");
    std::string name = st == std::string::npos ? "requests" : line.substr(st + 7, line.find('"', st + 7) - st - 7);
    out.emplace_back(name, std::atof(line.c_str() + sp + 1));
  }
  return out;
}

int main(int argc, char** argv) {
  CLI::App app{"bench_load: QPS and latency of `shardtopk serve`, answers checked against the float64 oracle"};
  std::string url = "http://127.0.0.1:8080", queries_path, queries_ds = "test", corpus_path, corpus_ds = "train";
  std::string clients_s = "1,16,64,256", formats_s = "json,binary", json_out, cacert, git = SHARDTOPK_GIT_COMMIT;
  std::string client_kind = "httplib";
  std::string api_key = std::getenv("SHARDTOPK_API_KEY") ? std::getenv("SHARDTOPK_API_KEY") : "";
  int k = 10, check = 64, oracle_threads = 0, idle = 0;
  bool header = false;
  double duration = 5, warmup = 1;
  app.add_option("--url", url, "service base URL")->capture_default_str();
  app.add_option("--queries,-q", queries_path, "HDF5 file with the query pool")->required();
  app.add_option("--queries-dataset", queries_ds, "dataset of the queries")->capture_default_str();
  app.add_option("--corpus", corpus_path, "the served corpus (HDF5), for the oracle")->required();
  app.add_option("--corpus-dataset", corpus_ds, "dataset of the corpus")->capture_default_str();
  app.add_option("-k", k, "neighbours per query")->capture_default_str();
  app.add_option("--clients,-c", clients_s, "concurrent clients, comma-separated")->capture_default_str();
  app.add_option("--formats", formats_s, "json, binary or both")->capture_default_str();
  app.add_option("--duration,-d", duration, "seconds per configuration")->capture_default_str();
  app.add_option("--warmup,-w", warmup, "seconds of warm-up per configuration (not measured)")->capture_default_str();
  app.add_option("--check", check, "answers to the first N pool queries are checked by the oracle")->capture_default_str();
  app.add_option("--oracle-threads", oracle_threads, "threads for the oracle (0: all cores)")->capture_default_str();
  app.add_option("-J,--json", json_out, "also write the JSON lines to this file");
  app.add_option("--idle", idle, "idle keep-alive connections held open during the runs")->capture_default_str();
  app.add_flag("--binary-header", header, "send the optional 32-byte binary header on the binary route");
  app.add_option("--cacert", cacert, "PEM file of the CA that signed the service's certificate (https:// URLs)");
  app.add_option("--api-key", api_key, "API key sent as 'Authorization: Bearer KEY' (default: $SHARDTOPK_API_KEY)");
  app.add_option("--client", client_kind, "httplib (cpp-httplib), or raw: one send() and blocking recv()s per request "
                 "(plain http:// only)")
      ->check(CLI::IsMember({"httplib", "raw"}))
      ->capture_default_str();
  app.add_option("--git", git, "the commit recorded in every JSON line (default: the source's at configure time)");
  CLI11_PARSE(app, argc, argv);

  try {
    // ---- the service's index, the pool and the oracle's truth for the first `check` queries
    httplib::Client info_client(url);
    configure(info_client, url, cacert, api_key);
    auto ir = info_client.Get("/v1/info");
    SHARDTOPK_EXPECTS(ir && ir->status == 200, "GET ", url, "/v1/info failed",
                      ir ? " (HTTP " + std::to_string(ir->status) + ")" : " (no connection)");
    const json info = json::parse(ir->body);
    const Metric metric = parse_metric(info["metric"].get<std::string>(), "/v1/info metric");
    const Dtype dtype = parse_dtype(info["dtype"].get<std::string>(), "/v1/info dtype");
    const std::int64_t dim = info["dim"].get<std::int64_t>();
    HostMatrix q = read_matrix(queries_path, queries_ds, "query");
    SHARDTOPK_EXPECTS(q.cols == dim, "queries have dimension ", q.cols, " but the service has ", dim);
    HostMatrix c = read_matrix(corpus_path, corpus_ds, "corpus row");
    SHARDTOPK_EXPECTS(c.cols == dim && c.rows == info["rows"].get<std::int64_t>(), "corpus [", c.rows, " x ", c.cols,
                      "] is not the served one [", info["rows"].get<std::int64_t>(), " x ", dim, "]");
    // The values the engine scores: cosine rows normalised at ingest, then stored as dtype.
    if (metric == Metric::kCosine) normalize_rows(c.data.data(), c.rows, c.cols, 0, "corpus row");
    for (auto& x : c.data) {
      if (dtype == Dtype::kFloat16) x = half::from_f16(half::to_f16(x));
      if (dtype == Dtype::kBFloat16) x = half::from_bf16(half::to_bf16(x));
    }
    const std::int64_t nq = q.rows;
    check = static_cast<int>(std::min<std::int64_t>(check, nq));
    std::vector<std::int64_t> tid;
    std::vector<double> tsc;
    const int ot = oracle_threads > 0 ? oracle_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const auto to = Clock::now();
    oracle::topk(metric, c.data.data(), c.rows, nullptr, q.data.data(), check, dim, k, &tid, &tsc, ot);
    std::fprintf(stderr, "# oracle truth for %d queries in %.1f s; service: %lld x %lld %s %s, %d rank(s), engine %s\n",
                 check, std::chrono::duration<double>(Clock::now() - to).count(), static_cast<long long>(c.rows),
                 static_cast<long long>(dim), info["metric"].get<std::string>().c_str(),
                 info["dtype"].get<std::string>().c_str(), info["ranks"].get<int>(),
                 info["engine"].get<std::string>().c_str());

    // ---- every request body, built before the runs
    std::vector<std::string> json_bodies(static_cast<size_t>(nq)), binary_bodies(static_cast<size_t>(nq));
    for (std::int64_t i = 0; i < nq; ++i) {
      const float* qv = q.data.data() + i * dim;
      json_bodies[static_cast<size_t>(i)] = json{{"query", std::vector<float>(qv, qv + dim)}, {"k", k}}.dump();
      std::string& b = binary_bodies[static_cast<size_t>(i)];
      b.assign(header ? binary_header(1, static_cast<std::uint32_t>(dim)) : std::string());
      b.append(reinterpret_cast<const char*>(qv), static_cast<size_t>(dim) * 4);
    }
    const std::string binary_path = "/v1/search?k=" + std::to_string(k);
    // --client raw: the whole request of each body, built before the runs too.
    const bool raw = client_kind == "raw";
    std::string raw_host, raw_port;
    std::vector<std::string> json_requests, binary_requests;
    if (raw) {
      SHARDTOPK_EXPECTS(url.rfind("http://", 0) == 0, "--client raw needs a plain http:// URL, got '", url, "'");
      std::string hp = url.substr(7);
      hp = hp.substr(0, hp.find('/'));
      const size_t colon = hp.rfind(':');
      SHARDTOPK_EXPECTS(colon != std::string::npos, "--client raw needs --url http://HOST:PORT, got '", url, "'");
      raw_host = hp.substr(0, colon);
      raw_port = hp.substr(colon + 1);
      const std::string auth = api_key.empty() ? "" : "Authorization: Bearer " + api_key + "\r\n";
      auto request = [&](const std::string& path, const char* type, const std::string& body) {
        return "POST " + path + " HTTP/1.1\r\nHost: " + hp + "\r\nContent-Type: " + type +
               "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + auth + "\r\n" + body;
      };
      for (std::int64_t i = 0; i < nq; ++i) {
        json_requests.push_back(request("/v1/search", "application/json", json_bodies[static_cast<size_t>(i)]));
        binary_requests.push_back(request(binary_path, "application/octet-stream", binary_bodies[static_cast<size_t>(i)]));
      }
    }

    // ---- one configuration: `clients` closed-loop clients for warm-up + duration seconds
    auto run = [&](const std::string& format, int clients) {
      Result res;
      res.format = format;
      res.clients = clients;
      const bool binary = format == "binary";
      std::mutex m;
      std::vector<double> lat_ms;
      double batch_sum = 0;
      std::atomic<bool> measuring{false}, stop{false};
      std::vector<std::thread> th;
      for (int t = 0; t < clients; ++t) {
        th.emplace_back([&, t] {
          httplib::Client cl(url);
          configure(cl, url, cacert, api_key);
          cl.set_keep_alive(true);
          cl.set_tcp_nodelay(true);
          cl.set_read_timeout(60, 0);
          RawClient rc(raw_host, raw_port);
          // One request with either client.
          auto post = [&](std::int64_t qi) {
            Reply out;
            if (raw) return rc.exchange((binary ? binary_requests : json_requests)[static_cast<size_t>(qi)]);
            httplib::Result r =
                binary ? cl.Post(binary_path.c_str(), binary_bodies[static_cast<size_t>(qi)], "application/octet-stream")
                       : cl.Post("/v1/search", json_bodies[static_cast<size_t>(qi)], "application/json");
            if (!r) {
              out.error = "no reply: " + httplib::to_string(r.error());
              return out;
            }
            out.got = true;
            out.status = r->status;
            out.body = std::move(r->body);
            if (r->has_header("X-Batch-Size")) out.batch = std::atof(r->get_header_value("X-Batch-Size").c_str());
            return out;
          };
          std::vector<double> mine;
          double batches = 0;
          long errors = 0, checked = 0, wrong = 0, swaps = 0;
          std::string first_error;
          for (std::int64_t i = t; !stop.load(); i += clients) {
            const std::int64_t qi = i % nq;
            const float* qv = q.data.data() + qi * dim;
            const auto t0 = Clock::now();
            const Reply r = post(qi);
            const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
            const bool counted = measuring.load();
            std::vector<std::int64_t> ids(static_cast<size_t>(k));
            std::vector<float> sc(static_cast<size_t>(k));
            bool ok = r.got && r.status == 200;
            if (ok) {
              if (binary) {
                ok = r.body.size() == static_cast<size_t>(k) * 12 + 4;  // ids, scores, the count
                if (ok) {
                  std::memcpy(ids.data(), r.body.data(), static_cast<size_t>(k) * 8);
                  std::memcpy(sc.data(), r.body.data() + static_cast<size_t>(k) * 8, static_cast<size_t>(k) * 4);
                }
              } else {
                const json j = json::parse(r.body, nullptr, false);
                ok = !j.is_discarded() && j["ids"].size() == 1 && j["ids"][0].size() == static_cast<size_t>(k);
                for (int x = 0; ok && x < k; ++x) {
                  ids[x] = j["ids"][0][x].get<std::int64_t>();
                  sc[x] = static_cast<float>(j["scores"][0][x].get<double>());
                }
              }
            }
            if (!counted) continue;
            mine.push_back(ms);
            if (ok) batches += r.batch;
            if (!ok) {
              ++errors;
              if (first_error.empty())
                first_error = r.got ? "HTTP " + std::to_string(r.status) + ": " + r.body.substr(0, 200) : r.error;
              continue;
            }
            if (qi < check) {
              ++checked;
              const oracle::Check ch = oracle::check_query(metric, c.data.data(), c.rows, nullptr, qv, dim, k,
                                                           ids.data(), sc.data(), tid.data() + qi * k,
                                                           tsc.data() + qi * k);
              if (ch.hits != k || ch.bad_scores || ch.out_of_order || ch.duplicates) ++wrong;
              swaps += ch.near_tie_swaps;
            }
          }
          std::lock_guard<std::mutex> l(m);
          lat_ms.insert(lat_ms.end(), mine.begin(), mine.end());
          batch_sum += batches;
          res.errors += errors;
          res.checked += checked;
          res.wrong += wrong;
          res.near_tie_swaps += swaps;
          if (res.first_error.empty()) res.first_error = first_error;
        });
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(warmup));
      const auto before = stage_counters(info_client, format);
      const auto t0 = Clock::now();
      measuring = true;
      std::this_thread::sleep_for(std::chrono::duration<double>(duration));
      measuring = false;
      res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      const auto after = stage_counters(info_client, format);
      if (before.size() == after.size() && !after.empty()) {
        double n = 0;
        for (size_t i = 0; i < after.size(); ++i)
          if (after[i].first == "requests") n = after[i].second - before[i].second;
        for (size_t i = 0; n > 0 && i < after.size(); ++i)
          if (after[i].first != "requests")
            res.stage_us.emplace_back(after[i].first, 1e6 * (after[i].second - before[i].second) / n);
      }
      stop = true;
      for (auto& x : th) x.join();
      res.requests = static_cast<long>(lat_ms.size());
      res.qps = static_cast<double>(res.requests - res.errors) / res.seconds;
      double sum = 0;
      for (double v : lat_ms) sum += v;
      res.mean_ms = lat_ms.empty() ? 0 : sum / static_cast<double>(lat_ms.size());
      res.mean_batch = res.requests > res.errors ? batch_sum / static_cast<double>(res.requests - res.errors) : 0;
      res.p50_ms = pct(lat_ms, 50);
      res.p99_ms = pct(lat_ms, 99);
      return res;
    };

    std::unique_ptr<IdleConnections> idle_conns;
    if (idle > 0) {
      const auto ti = Clock::now();
      // --url http://HOST:PORT
      std::string hp = url.substr(url.find("://") == std::string::npos ? 0 : url.find("://") + 3);
      hp = hp.substr(0, hp.find('/'));
      const size_t colon = hp.rfind(':');
      SHARDTOPK_EXPECTS(colon != std::string::npos, "--idle needs --url http://HOST:PORT, got '", url, "'");
      idle_conns = std::make_unique<IdleConnections>(hp.substr(0, colon), std::stoi(hp.substr(colon + 1)), idle,
                                                     url.rfind("https://", 0) == 0);
      std::fprintf(stderr, "# %d idle keep-alive connections open (%.1f s)\n", idle,
                   std::chrono::duration<double>(Clock::now() - ti).count());
    }
    std::vector<Result> results;
    std::FILE* jf = json_out.empty() ? nullptr : std::fopen(json_out.c_str(), "w");
    for (const std::string& f : split(formats_s)) {
      SHARDTOPK_EXPECTS(f == "json" || f == "binary", "--formats: '", f, "' (allowed: json, binary)");
      for (const std::string& cs : split(clients_s)) {
        const int n = std::stoi(cs);
        SHARDTOPK_EXPECTS(n >= 1 && n <= 4096, "--clients: ", cs, " out of range 1 .. 4096");
        Result r = run(f, n);
        json j = {{"bench", "load"},       {"format", r.format},   {"clients", r.clients}, {"k", k},
                        {"dim", dim},            {"rows", c.rows},       {"ranks", info["ranks"]},
                        {"engine", info["engine"]}, {"dtype", info["dtype"]}, {"seconds", r.seconds},
                        {"requests", r.requests}, {"errors", r.errors}, {"qps", r.qps},
                        {"p50_ms", r.p50_ms},    {"p99_ms", r.p99_ms},   {"mean_ms", r.mean_ms},
                        {"mean_batch", r.mean_batch}, {"idle_connections", idle}, {"binary_header", header},
                        {"tls", url.rfind("https://", 0) == 0}, {"api_key", !api_key.empty()}, {"client", client_kind},
                        {"checked", r.checked},  {"wrong", r.wrong + r.errors}, {"near_tie_swaps", r.near_tie_swaps},
                        {"stage_us", json::object()}};
        for (const auto& st : r.stage_us) j["stage_us"][st.first] = st.second;
        char date[32];
        const std::time_t now = std::time(nullptr);
        std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
        j["date"] = date;
        j["git"] = git;
        std::printf("%s\n", j.dump().c_str());
        std::fflush(stdout);
        if (jf) std::fprintf(jf, "%s\n", j.dump().c_str());
        if (!r.first_error.empty()) std::fprintf(stderr, "# %s x%d: first error: %s\n", f.c_str(), n, r.first_error.c_str());
        results.push_back(r);
      }
    }
    if (jf) std::fclose(jf);

    std::printf("#\n# %-7s %8s %10s %10s %10s %10s %7s %9s %8s %7s\n", "format", "clients", "requests", "QPS", "p50_ms",
                "p99_ms", "batch", "checked", "#swaps", "#wrong");
    long wrong = 0;
    for (const Result& r : results) {
      std::printf("  %-7s %8d %10ld %10.1f %10.3f %10.3f %7.1f %9ld %8ld %7ld\n", r.format.c_str(), r.clients, r.requests,
                  r.qps, r.p50_ms, r.p99_ms, r.mean_batch, r.checked, r.near_tie_swaps, r.wrong + r.errors);
      wrong += r.wrong + r.errors;
    }
    std::printf("# #wrong = answers outside the oracle's tolerance + failed requests; total %ld\n", wrong);
    std::printf("#\n# service stages, mean us per search (from /metrics)\n# %-7s %8s", "format", "clients");
    if (!results.empty())
      for (const auto& st : results.front().stage_us) std::printf(" %9s", st.first.c_str());
    std::printf("\n");
    for (const Result& r : results) {
      std::printf("  %-7s %8d", r.format.c_str(), r.clients);
      for (const auto& st : r.stage_us) std::printf(" %9.1f", st.second);
      std::printf("\n");
    }
    return wrong > 0 ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_load: error: %s\n", e.what());
    return 2;
  }
}
