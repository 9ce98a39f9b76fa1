#pragma once
// Helpers for the `shardtopk serve` end-to-end tests: a service under mpiexec in the background,
// HTTP clients (cpp-httplib for ordinary requests, raw sockets for what a library client will
// not send: trickled, pipelined, half-closed, malformed requests), rank processes, RSS.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <limits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "test_support.hpp"

namespace shardtopk::test {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// A client that writes to a connection the server has closed (a refusal sent before the body
// was read) gets EPIPE, as real clients do, instead of being killed by SIGPIPE.
inline const bool kSigpipeIgnored = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();

inline double secs_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline std::string mpi_prefix(int ranks) {
  return std::string(SHARDTOPK_MPIEXEC) + " " + SHARDTOPK_MPIEXEC_NUMPROC_FLAG + " " + std::to_string(ranks) + " " +
         SHARDTOPK_MPIEXEC_FLAGS + " ";
}

/// Raises this process's open-file limit to the hard limit; returns the new soft limit.
inline long raise_open_files() {
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);
  getrlimit(RLIMIT_NOFILE, &rl);
  return static_cast<long>(rl.rlim_cur);
}

// ------------------------------------------------------------------------------ a running service

/// `mpiexec -n P shardtopk serve` in the background, its output in a log file.
class Server {
 public:
  Server(const std::string& config, const std::string& dir, int ranks = 2, const std::string& env = "")
      : log_(dir + "/serve.log"), port_file_(dir + "/port") {
    std::remove(port_file_.c_str());
    const std::string cmd = env + " exec " + mpi_prefix(ranks) + SHARDTOPK_BIN + " serve -c " + config +
                            " --port-file " + port_file_ + " >" + log_ + " 2>&1 </dev/null";
    std::printf("$ %s\n", cmd.c_str());
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Server() {
    if (pid_ > 0 && !exited_) {
      const std::map<int, pid_t> rank_pids = ranks();
      for (const auto& kv : rank_pids) kill(kv.second, SIGCONT);
      kill(pid_, SIGKILL);
      for (const auto& kv : rank_pids) kill(kv.second, SIGKILL);
      waitpid(pid_, nullptr, 0);
      // The ranks are not this process's children: wait (bounded) until each is gone or a zombie,
      // so that what they hold (a storage directory's lock, the port) is free for the next server.
      for (const auto& kv : rank_pids)
        for (int i = 0; i < 200 && alive(kv.second); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  /// Whether `pid` is a process that has not exited (a zombie has).
  static bool alive(pid_t pid) {
    if (kill(pid, 0) != 0) return false;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const std::size_t close = line.rfind(')');
    return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
  }

  /// Waits for the port file and /readyz; false (with the log printed) after `timeout_s`.
  bool wait_ready(double timeout_s = 90) {
    const auto t0 = Clock::now();
    while (secs_since(t0) < timeout_s) {
      if (port_ == 0) {
        std::ifstream in(port_file_);
        if (in >> port_) std::printf("  service port %d\n", port_);
      }
      if (port_ > 0) {
        httplib::Client c("127.0.0.1", port_);
        auto r = c.Get("/readyz");
        if (r && r->status == 200) return true;
      }
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        std::printf("service exited early:\n%s\n", read_text(log_).c_str());
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::printf("service not ready after %.0f s:\n%s\n", timeout_s, read_text(log_).c_str());
    return false;
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const { return read_text(log_); }

  /// The pids of mpiexec's children by rank (Open MPI puts OMPI_COMM_WORLD_RANK in their environment).
  std::map<int, pid_t> ranks() const {
    std::map<int, pid_t> out;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      const std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(e.path() / "stat");
      std::string line;
      std::getline(stat, line);
      const auto close = line.rfind(')');
      if (close == std::string::npos) continue;
      char state = 0;
      int ppid = 0;
      if (std::sscanf(line.c_str() + close + 2, "%c %d", &state, &ppid) != 2 || ppid != pid_) continue;
      std::ifstream env(e.path() / "environ");
      std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
      const std::string key = std::string("OMPI_COMM_WORLD_RANK=");
      const auto p = all.find(key);
      if (p != std::string::npos) out[std::atoi(all.c_str() + p + key.size())] = std::stoi(name);
    }
    return out;
  }

  /// Waits for mpiexec to exit; its exit code, or -1 after `timeout_s`.
  int wait_exit(double timeout_s) {
    const auto t0 = Clock::now();
    while (secs_since(t0) < timeout_s) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1;
  }

 private:
  std::string log_, port_file_;
  pid_t pid_ = -1;
  int port_ = 0;
  bool exited_ = false;
};

/// Resident set size of a process in bytes (VmRSS), 0 when it cannot be read.
inline long long rss_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;
  return 0;
}

inline std::string write_config(const std::string& dir, const std::string& corpus, const std::string& metric,
                                int k_max, int batch_max, int window_us, const std::string& service_extra = "",
                                double comm_timeout_s = 30) {
  const std::string path = dir + "/serve.yaml";
  char timeout[32];
  std::snprintf(timeout, sizeof timeout, "%g", comm_timeout_s);
  write_text(path, "corpus:\n  path: " + corpus + "\nsearch:\n  metric: " + metric + "\n  k_max: " +
                       std::to_string(k_max) + "\n  batch_max: " + std::to_string(batch_max) +
                       "\nengine:\n  backend: cpu\n  threads: 1\ncomm:\n  timeout_s: " + timeout +
                       "\nservice:\n  host: 127.0.0.1\n  port: 0\n  batch_window_us: " + std::to_string(window_us) +
                       "\n" + service_extra);
  return path;
}

/// Adds `lines` to a config file right after the line `section` ("corpus:", "search:"), e.g.
/// "  attributes: [doc]\n" after "corpus:".
inline void add_to_config(const std::string& path, const std::string& section, const std::string& lines) {
  std::string text = read_text(path);
  const std::size_t at = text.find(section + "\n");
  if (at == std::string::npos) throw std::runtime_error("no section " + section + " in " + path);
  text.insert(at + section.size() + 1, lines);
  write_text(path, text);
}

// ------------------------------------------------------------------------------ library client

struct Reply {
  int status = 0;
  std::string body;
  int batch_size = 0;
  std::string connection;  // the Connection header
};

inline Reply post(int port, const std::string& path, const std::string& body, const std::string& ctype) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  c.set_tcp_nodelay(true);
  auto r = c.Post(path.c_str(), body, ctype.c_str());
  Reply out;
  if (!r) {
    out.body = "no reply: " + httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  out.body = r->body;
  if (r->has_header("X-Batch-Size")) out.batch_size = std::stoi(r->get_header_value("X-Batch-Size"));
  out.connection = r->get_header_value("Connection");
  return out;
}

inline std::string json_queries(const float* q, int nq, std::int64_t dim, int k) {
  json rows = json::array();
  for (int i = 0; i < nq; ++i) {
    json r = json::array();
    for (std::int64_t c = 0; c < dim; ++c) r.push_back(q[i * dim + c]);
    rows.push_back(r);
  }
  return json{{"queries", rows}, {"k", k}}.dump();
}

/// JSON search → Answer; fails the test on a non-200 reply.
inline Answer search_json(int port, const float* q, int nq, std::int64_t dim, int k, int* batch_size = nullptr) {
  const Reply r = post(port, "/v1/search", json_queries(q, nq, dim, k), "application/json");
  Answer a;
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return a;
  if (batch_size) *batch_size = r.batch_size;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["ids"].size(), static_cast<size_t>(nq));
  EXPECT_TRUE(j.contains("metric") && j.contains("took_ms"));
  for (int i = 0; i < nq; ++i) {
    EXPECT_EQ(j["ids"][i].size(), static_cast<size_t>(k));
    for (int c = 0; c < k; ++c) {
      a.ids.push_back(j["ids"][i][c].get<std::int64_t>());
      a.scores.push_back(static_cast<float>(j["scores"][i][c].get<double>()));
    }
  }
  return a;
}

/// Parses a binary reply body (B×K int64 ids, B×K float32 scores, then B int32 counts) into
/// its ids and scores, padding included (empty when the length is not that).
inline Answer parse_binary_reply(const std::string& body, int nq, int k) {
  Answer a;
  const size_t n = static_cast<size_t>(nq) * k;
  if (body.size() != n * 12 + static_cast<size_t>(nq) * 4) return a;
  a.ids.resize(n);
  a.scores.resize(n);
  std::memcpy(a.ids.data(), body.data(), n * 8);
  std::memcpy(a.scores.data(), body.data() + n * 8, n * 4);
  return a;
}

/// Binary search → Answer; fails the test on a non-200 reply.
inline Answer search_binary(int port, const float* q, int nq, std::int64_t dim, int k, int* batch_size = nullptr) {
  const std::string body(reinterpret_cast<const char*>(q), sizeof(float) * nq * dim);
  const Reply r = post(port, "/v1/search?k=" + std::to_string(k) + "&batch=" + std::to_string(nq), body,
                       "application/octet-stream");
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return {};
  if (batch_size) *batch_size = r.batch_size;
  EXPECT_EQ(r.body.size(), static_cast<size_t>(nq) * k * 12 + static_cast<size_t>(nq) * 4);
  return parse_binary_reply(r.body, nq, k);
}

// ------------------------------------------------------------------------------ filtered searches

/// A filtered answer: each query's real results (fewer than k when fewer rows pass).
struct FilteredAnswer {
  std::vector<std::vector<std::int64_t>> ids;  ///< [nq][count_q]
  std::vector<std::vector<float>> scores;      ///< [nq][count_q]
  bool operator==(const FilteredAnswer& o) const {
    if (ids != o.ids || scores.size() != o.scores.size()) return false;
    for (std::size_t q = 0; q < scores.size(); ++q)  // bit for bit
      if (scores[q].size() != o.scores[q].size() ||
          (!scores[q].empty() && std::memcmp(scores[q].data(), o.scores[q].data(), 4 * scores[q].size()) != 0))
        return false;
    return true;
  }
};

/// Percent-encoding of a query parameter's value (RFC 3986 unreserved characters kept).
inline std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

/// JSON search with {"filter": filter} → each query's lists; fails the test on a non-200 reply.
inline FilteredAnswer search_json_filtered(int port, const float* q, int nq, std::int64_t dim, int k, const json& filter,
                                           int* batch_size = nullptr) {
  json body = json::parse(json_queries(q, nq, dim, k));
  body["filter"] = filter;
  const Reply r = post(port, "/v1/search", body.dump(), "application/json");
  FilteredAnswer a;
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return a;
  if (batch_size) *batch_size = r.batch_size;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["ids"].size(), static_cast<size_t>(nq));
  for (int i = 0; i < nq; ++i) {
    EXPECT_EQ(j["ids"][i].size(), j["scores"][i].size());
    EXPECT_LE(j["ids"][i].size(), static_cast<size_t>(k));
    a.ids.push_back(j["ids"][i].get<std::vector<std::int64_t>>());
    std::vector<float> s;
    for (const json& v : j["scores"][i]) s.push_back(static_cast<float>(v.get<double>()));
    a.scores.push_back(s);
  }
  return a;
}

/// Binary search with ?filter=<URL-encoded filter_text> → each query's real results, from the
/// counts after the scores; checks the reply's layout (docs/SERVING.md) and that the slots past
/// each count are padding (kPadId, score `pad`). Fails the test on a non-200 reply.
inline FilteredAnswer search_binary_filtered(int port, const float* q, int nq, std::int64_t dim, int k,
                                             const std::string& filter_text, float pad, int* batch_size = nullptr) {
  const std::string body(reinterpret_cast<const char*>(q), sizeof(float) * nq * dim);
  const Reply r = post(port, "/v1/search?k=" + std::to_string(k) + "&filter=" + url_encode(filter_text), body,
                       "application/octet-stream");
  FilteredAnswer a;
  EXPECT_EQ(r.status, 200) << r.body;
  if (r.status != 200) return a;
  if (batch_size) *batch_size = r.batch_size;
  const size_t n = static_cast<size_t>(nq) * k;
  EXPECT_EQ(r.body.size(), n * 12 + static_cast<size_t>(nq) * 4) << "ids, scores, then counts [B] int32";
  if (r.body.size() != n * 12 + static_cast<size_t>(nq) * 4) return a;
  std::vector<std::int64_t> ids(n);
  std::vector<float> scores(n);
  std::vector<std::int32_t> counts(static_cast<size_t>(nq));
  std::memcpy(ids.data(), r.body.data(), n * 8);
  std::memcpy(scores.data(), r.body.data() + n * 8, n * 4);
  std::memcpy(counts.data(), r.body.data() + n * 12, static_cast<size_t>(nq) * 4);
  for (int i = 0; i < nq; ++i) {
    const int c = counts[static_cast<size_t>(i)];
    EXPECT_TRUE(c >= 0 && c <= k) << "count " << c;
    if (c < 0 || c > k) return a;
    a.ids.emplace_back(ids.begin() + static_cast<long>(i) * k, ids.begin() + static_cast<long>(i) * k + c);
    a.scores.emplace_back(scores.begin() + static_cast<long>(i) * k, scores.begin() + static_cast<long>(i) * k + c);
    for (int x = c; x < k; ++x) {
      EXPECT_EQ(ids[static_cast<size_t>(i) * k + x], std::numeric_limits<std::int64_t>::max()) << "padding id";
      EXPECT_EQ(scores[static_cast<size_t>(i) * k + x], pad) << "padding score";
    }
  }
  return a;
}

// ------------------------------------------------------------------------------ raw sockets

/// A blocking TCP connection to 127.0.0.1:port (TCP_NODELAY); -1 when refused.
inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/// Writes all of `data`; false when the peer closed or reset the connection.
inline bool send_all(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

/// One HTTP/1.1 response read from a raw connection.
struct RawReply {
  int status = 0;                              ///< 0: no complete response (timeout, EOF, reset)
  std::map<std::string, std::string> headers;  ///< names in lower case
  std::string body;
  bool interim_100 = false;                    ///< a `100 Continue` came first
  std::string error;                           ///< why status is 0
};

/// Reads one response (Content-Length framed) from `fd`; bytes after it stay in `buf` for the
/// next call (pipelining). Gives up after `timeout_s`.
inline RawReply read_reply(int fd, std::string& buf, double timeout_s = 10) {
  RawReply r;
  const auto t0 = Clock::now();
  auto fill = [&]() -> bool {
    const double left = timeout_s - secs_since(t0);
    if (left <= 0) {
      r.error = "timeout";
      return false;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left * 1000) + 1) <= 0) {
      r.error = "timeout";
      return false;
    }
    char tmp[65536];
    const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) {
      r.error = n == 0 ? "EOF" : std::string("recv: ") + std::strerror(errno);
      return false;
    }
    buf.append(tmp, static_cast<size_t>(n));
    return true;
  };
  for (;;) {
    size_t end;
    while ((end = buf.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) return r;
    const std::string head = buf.substr(0, end);
    int status = 0;
    std::sscanf(head.c_str(), "HTTP/%*d.%*d %d", &status);
    buf.erase(0, end + 4);
    if (status == 100) {
      r.interim_100 = true;
      continue;
    }
    std::map<std::string, std::string> h;
    size_t pos = head.find("\r\n");
    while (pos != std::string::npos) {
      const size_t next = head.find("\r\n", pos + 2);
      const std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string name = line.substr(0, colon);
        for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        std::string value = line.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.erase(0, 1);
        h[name] = value;
      }
      pos = next;
    }
    const size_t len = h.count("content-length") ? std::stoul(h["content-length"]) : 0;
    while (buf.size() < len)
      if (!fill()) return r;
    r.status = status;
    r.headers = std::move(h);
    r.body = buf.substr(0, len);
    buf.erase(0, len);
    return r;
  }
}

/// An HTTP/1.1 POST /v1/search request as bytes.
inline std::string raw_post(const std::string& body, const std::string& ctype = "application/json",
                            const std::string& path = "/v1/search", const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " + ctype +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

inline std::string raw_get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"; }

/// One request on a fresh connection; the reply (status 0 when none came within `timeout_s`).
inline RawReply raw_request(int port, const std::string& bytes, double timeout_s = 10) {
  const int fd = connect_to(port);
  RawReply r;
  if (fd < 0) {
    r.error = "connection refused";
    return r;
  }
  std::string buf;
  if (send_all(fd, bytes)) r = read_reply(fd, buf, timeout_s);
  else r = read_reply(fd, buf, timeout_s);  // the server may have answered and closed early
  ::close(fd);
  return r;
}

}  // namespace shardtopk::test
