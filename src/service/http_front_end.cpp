#include "service/http_front_end.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <thread>

#include <microhttpd.h>
#include <nlohmann/json.hpp>

#include <spdlog/fmt/fmt.h>

#include "core/log.hpp"
#include "service/batcher.hpp"
#include "service/metrics.hpp"
#include "service/write_backend.hpp"

namespace shardtopk::service {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

enum class Route { kOther, kSearch, kInfo, kHealth, kReady, kMetrics, kUpsert, kDelete, kSnapshot };

bool is_write(Route r) { return r == Route::kUpsert || r == Route::kDelete || r == Route::kSnapshot; }

Route match_route(const char* url) {
  static const std::map<std::string, Route> routes = {{"/v1/search", Route::kSearch},
                                                      {"/v1/info", Route::kInfo},
                                                      {"/healthz", Route::kHealth},
                                                      {"/readyz", Route::kReady},
                                                      {"/metrics", Route::kMetrics},
                                                      {"/v1/upsert", Route::kUpsert},
                                                      {"/v1/delete", Route::kDelete},
                                                      {"/v1/snapshot", Route::kSnapshot}};
  auto it = routes.find(url ? url : "");
  return it == routes.end() ? Route::kOther : it->second;
}

const char* route_label(Route r) {
  switch (r) {
    case Route::kSearch: return "/v1/search";
    case Route::kInfo: return "/v1/info";
    case Route::kHealth: return "/healthz";
    case Route::kReady: return "/readyz";
    case Route::kMetrics: return "/metrics";
    case Route::kUpsert: return "/v1/upsert";
    case Route::kDelete: return "/v1/delete";
    case Route::kSnapshot: return "/v1/snapshot";
    case Route::kOther: break;
  }
  return "other";
}

bool icontains(const char* haystack, const char* needle) {
  if (!haystack) return false;
  const std::size_t n = std::strlen(needle);
  for (const char* p = haystack; *p; ++p)
    if (strncasecmp(p, needle, n) == 0) return true;
  return false;
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Header fields of the request: how many, and whether Content-Type, Content-Length or
// Transfer-Encoding repeat.
struct HeaderCount {
  int fields = 0, content_type = 0, content_length = 0, transfer_encoding = 0;
};
MHD_Result count_header(void* cls, MHD_ValueKind, const char* key, const char*) {
  auto* h = static_cast<HeaderCount*>(cls);
  ++h->fields;
  if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_TYPE) == 0) ++h->content_type;
  if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) ++h->content_length;
  if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) ++h->transfer_encoding;
  return MHD_YES;
}

// Query-string arguments, with repeats and unknown names noted.
// Parameters by route: /v1/search k, batch, filter; /v1/upsert n (its binary form's rows);
// /v1/delete and /v1/snapshot none (their bodies say everything).
struct QueryArgs {
  Route route = Route::kSearch;
  std::map<std::string, std::string> values;
  std::string repeated, unknown;
  const char* allowed() const {
    return route == Route::kSearch ? "k, batch, filter" : route == Route::kUpsert ? "n" : "none on this route";
  }
  bool takes(const std::string& k) const {
    if (route == Route::kSearch) return k == "k" || k == "batch" || k == "filter";
    return route == Route::kUpsert && k == "n";
  }
};
// With their decoded lengths: a value with %00 in it keeps the NUL and what follows, for the
// parsers to refuse (a C string would end there).
MHD_Result collect_arg(void* cls, MHD_ValueKind, const char* key, std::size_t key_size, const char* value,
                       std::size_t value_size) {
  auto* a = static_cast<QueryArgs*>(cls);
  const std::string k = key ? std::string(key, key_size) : "";
  if (!a->takes(k)) {
    if (a->unknown.empty()) a->unknown = k;
    return MHD_YES;
  }
  if (!a->values.emplace(k, value ? std::string(value, value_size) : "").second && a->repeated.empty()) a->repeated = k;
  return MHD_YES;
}

void log_mhd(void*, const char* fmt, va_list ap) {
  char buf[512];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  std::size_t n = std::strlen(buf);
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = '\0';
  spdlog::debug("http: {}", buf);  // client errors (malformed requests, resets) are not the service's
}

void mhd_panic(void*, const char* file, unsigned int line, const char* reason) {
  spdlog::critical("libmicrohttpd: fatal error at {}:{}: {}", file ? file : "?", line, reason ? reason : "?");
  std::fflush(nullptr);
  std::abort();
}

}  // namespace

// ------------------------------------------------------------------------------ per request

struct HttpFrontEnd::Request {
  // kGet: a GET route's request, answered on the handler's next call (an answer queued in the
  // first call makes libmicrohttpd close the connection after it, which ends pipelining).
  enum class Phase { kNew, kGet, kBody, kWaiting, kAnswered };
  Phase phase = Phase::kNew;
  Route route = Route::kOther;
  bool accepted = true;         // its request line arrived before drain or failure
  bool binary = false;
  bool chunked = false;
  bool too_large = false;
  bool busy = false;            // over service.max_inflight_bytes
  bool receiving = false;       // counted in Batcher::receiving_begin
  std::size_t limit = 0;        // body bytes allowed
  std::size_t reserved = 0;     // bytes of the in-flight budget held
  std::size_t discarded = 0;    // body bytes dropped after the limit
  std::string body;
  QueryArgs args;
  std::shared_ptr<Job> job;
  Clock::time_point headers_in;
};

struct Callbacks {
  static void* uri_log(void* cls, const char*, MHD_Connection*) {
    return static_cast<HttpFrontEnd*>(cls)->new_request();
  }
  static MHD_Result access(void* cls, MHD_Connection* c, const char* url, const char* method, const char*,
                           const char* upload, std::size_t* upload_size, void** con_cls) {
    auto* fe = static_cast<HttpFrontEnd*>(cls);
    if (*con_cls == nullptr) *con_cls = fe->new_request();
    return fe->on_request(c, url, method, upload, upload_size, *static_cast<HttpFrontEnd::Request*>(*con_cls)) ==
                   MHD_YES
               ? MHD_YES
               : MHD_NO;
  }
  static void completed(void* cls, MHD_Connection*, void** con_cls, MHD_RequestTerminationCode) {
    static_cast<HttpFrontEnd*>(cls)->on_completed(static_cast<HttpFrontEnd::Request*>(*con_cls));
    *con_cls = nullptr;
  }
  static void connection(void* cls, MHD_Connection*, void**, MHD_ConnectionNotificationCode code) {
    auto& open = static_cast<HttpFrontEnd*>(cls)->metrics_.open_connections;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) open.fetch_add(1);
    else open.fetch_sub(1);
  }
};

// ------------------------------------------------------------------------------ life cycle

HttpFrontEnd::HttpFrontEnd(const ServiceConfig& cfg, Metrics& metrics) : cfg_(cfg), metrics_(metrics) {}

HttpFrontEnd::~HttpFrontEnd() {
  if (daemon_) stop(Clock::now());
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void HttpFrontEnd::bind() {
  // One descriptor per connection, plus the process's own (corpus files, MPI, epoll, the loops'
  // signalling pipes): raise the soft limit as far as the hard limit allows.
  const rlim_t wanted = static_cast<rlim_t>(cfg_.max_connections) + 1024;
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < wanted) {
    rl.rlim_cur = std::min<rlim_t>(wanted, rl.rlim_max);
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur < wanted) {
    const int fit = static_cast<int>(std::max<long long>(64, static_cast<long long>(rl.rlim_cur) - 1024));
    spdlog::warn("service.max_connections = {} needs {} open files, the limit is {} (ulimit -n): serving at most {} "
                 "connections",
                 cfg_.max_connections, static_cast<unsigned long long>(wanted),
                 static_cast<unsigned long long>(rl.rlim_cur), fit);
    cfg_.max_connections = std::min(cfg_.max_connections, fit);
  }

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(cfg_.port);
  const int gai = getaddrinfo(cfg_.host.c_str(), port.c_str(), &hints, &res);
  SHARDTOPK_EXPECTS(gai == 0, "service: cannot listen on ", cfg_.host, ":", cfg_.port, ": ", gai_strerror(gai),
                    " (bad address? set service.host)");
  std::string why;
  for (addrinfo* a = res; a && listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR (restart right after a stop) but not SO_REUSEPORT, with which a second
    // service on the same port would silently share its connections.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 4096) == 0) {
      listen_fd_ = fd;
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(res);
  SHARDTOPK_EXPECTS(listen_fd_ >= 0, "service: cannot listen on ", cfg_.host, ":", cfg_.port, ": ", why,
                    " (port in use or bad address; set service.port, 0 = any free port)");
}

void HttpFrontEnd::start() {
  SHARDTOPK_EXPECTS(listen_fd_ >= 0, "service: start() before bind()");
  MHD_set_panic_func(mhd_panic, nullptr);
  // The connection's memory pool holds the request line and headers, the read buffer for body
  // bytes and the reply's headers: max_header_bytes plus room for the rest. Headers beyond the
  // pool are refused by libmicrohttpd itself (431); below it, beyond max_header_bytes, by
  // on_headers (431 with a JSON body).
  const std::size_t pool = static_cast<std::size_t>(cfg_.max_header_bytes) + 48 * 1024;
  unsigned int flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  MHD_OptionItem pool_option[] = {
      {cfg_.io_threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END,
       static_cast<intptr_t>(cfg_.io_threads), nullptr},
      {MHD_OPTION_END, 0, nullptr}};
  daemon_ = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &Callbacks::access, this,                        //
      MHD_OPTION_EXTERNAL_LOGGER, &log_mhd, nullptr,                                  // first: all messages
      MHD_OPTION_LISTEN_SOCKET, listen_fd_,                                          //
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned int>(cfg_.max_connections),  //
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned int>(cfg_.idle_timeout_s),  //
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool,                                      //
      MHD_OPTION_URI_LOG_CALLBACK, &Callbacks::uri_log, this,                         //
      MHD_OPTION_NOTIFY_COMPLETED, &Callbacks::completed, this,                       //
      MHD_OPTION_NOTIFY_CONNECTION, &Callbacks::connection, this,                     //
      MHD_OPTION_ARRAY, pool_option,                                                  //
      MHD_OPTION_END);
  SHARDTOPK_EXPECTS(daemon_ != nullptr, "service: cannot start the HTTP server (libmicrohttpd) on ", cfg_.host, ":",
                    port_, " (run with SHARDTOPK_LOG_LEVEL=debug for its reason)");
}

void HttpFrontEnd::set_ready(const BackendInfo& info, SearchBackend& backend, Batcher& batcher) {
  info_ = info;
  backend_ = &backend;
  batcher_ = &batcher;
  limits_ = derived_body_limits(info.dim, info.batch_max);
  if (cfg_.max_body_bytes > 0) limits_.json = limits_.binary = static_cast<std::size_t>(cfg_.max_body_bytes);
  // Derived: room for 16 of the largest searches, and for two of the largest writes (so a legal
  // write body is never refused as busy forever).
  max_inflight_ = cfg_.max_inflight_bytes > 0
                      ? static_cast<std::size_t>(cfg_.max_inflight_bytes)
                      : std::max({std::size_t{16} << 20, 16 * std::max(limits_.json, limits_.binary),
                                  writer_ && writer_->writable() ? 2 * write_body_limit() : std::size_t{0}});
  ready_.store(true, std::memory_order_release);
}

std::string HttpFrontEnd::limits_summary() const {
  return "request bodies up to " + std::to_string(limits_.json) + " bytes (JSON), " + std::to_string(limits_.binary) +
         " bytes (binary), " + std::to_string(max_inflight_) + " bytes in flight; headers " +
         std::to_string(cfg_.max_header_bytes) + " bytes, " + std::to_string(cfg_.max_headers) + " fields; " +
         std::to_string(cfg_.max_connections) + " connections, idle " + std::to_string(cfg_.idle_timeout_s) + " s; " +
         std::to_string(cfg_.io_threads) + " event-loop thread(s)";
}

void HttpFrontEnd::stop_accepting() {
  std::lock_guard<std::mutex> l(m_);
  if (!accepting_.exchange(false) || !daemon_) return;
  // The loops stop watching the listening socket; closing it makes new connections fail at once
  // (refused) instead of waiting in the backlog.
  const MHD_socket fd = MHD_quiesce_daemon(daemon_);
  if (fd != MHD_INVALID_SOCKET) {
    ::close(fd);
    if (fd == listen_fd_) listen_fd_ = -1;
  }
}

void HttpFrontEnd::begin_drain() {
  draining_.store(true);
  stop_accepting();
}

void HttpFrontEnd::fail(const std::string& reason) {
  {
    std::lock_guard<std::mutex> l(m_);
    if (fail_reason_.empty()) fail_reason_ = reason;
  }
  failed_.store(true);
  stop_accepting();
}

std::string HttpFrontEnd::fail_reason() const {
  std::lock_guard<std::mutex> l(m_);
  return fail_reason_;
}

int HttpFrontEnd::in_progress() const { return in_progress_.load(); }

bool HttpFrontEnd::wait_idle(Clock::time_point deadline) {
  std::unique_lock<std::mutex> l(m_);
  return cv_.wait_until(l, deadline, [&] { return in_progress_.load() == 0; });
}

bool HttpFrontEnd::stop(Clock::time_point deadline) {
  if (!daemon_) return true;
  // A suspended connection at MHD_stop_daemon is a fatal error in libmicrohttpd: wait for every
  // job's answer (each resumes its connection).
  while (suspended_.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (suspended_.load() > 0) return false;
  stop_accepting();
  MHD_stop_daemon(daemon_);
  daemon_ = nullptr;
  return true;
}

HttpFrontEnd::Request* HttpFrontEnd::new_request() {
  auto* r = new Request;
  r->accepted = !draining_.load() && !failed_.load();
  in_progress_.fetch_add(1);
  return r;
}

void HttpFrontEnd::on_completed(Request* r) {
  if (!r) return;
  if (r->receiving && batcher_) batcher_->receiving_end();
  release_bytes(r->reserved);
  delete r;
  if (in_progress_.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> l(m_);
    cv_.notify_all();
  }
}

bool HttpFrontEnd::reserve_bytes(std::size_t n) {
  std::size_t cur = inflight_bytes_.load();
  do {
    if (cur + n > max_inflight_) return false;
  } while (!inflight_bytes_.compare_exchange_weak(cur, cur + n));
  return true;
}

void HttpFrontEnd::release_bytes(std::size_t n) {
  if (n) inflight_bytes_.fetch_sub(n);
}

std::string HttpFrontEnd::busy_message(const char* what) const {
  return std::string("busy: ") + what + " in flight would exceed service.max_inflight_bytes (" +
         std::to_string(max_inflight_) + " bytes); retry";
}

int HttpFrontEnd::submit_suspended(MHD_Connection* c, Request& r, std::shared_ptr<Job> job, bool was_receiving) {
  job->on_done = [this, c] {
    MHD_resume_connection(c);
    suspended_.fetch_sub(1);
  };
  r.job = job;
  r.phase = Request::Phase::kWaiting;
  // Suspend before the batcher can answer: its resume must find the connection suspended.
  suspended_.fetch_add(1);
  MHD_suspend_connection(c);
  batcher_->submit(std::move(job), was_receiving);
  return MHD_YES;
}

std::size_t HttpFrontEnd::body_limit(bool binary) const { return binary ? limits_.binary : limits_.json; }

std::size_t HttpFrontEnd::write_body_limit() const {
  const std::size_t limit = cfg_.max_body_bytes > 0 ? static_cast<std::size_t>(cfg_.max_body_bytes) : kWriteBodyBytes;
  // A body larger than everything the service may hold at once could never be taken: 413, not 503.
  return max_inflight_ > 0 ? std::min(limit, max_inflight_) : limit;
}

void HttpFrontEnd::set_writer(WriteBackend* writer) { writer_ = writer; }

// ------------------------------------------------------------------------------ answers

namespace {
void free_string(void* cls) { delete static_cast<std::string*>(cls); }
}  // namespace

int HttpFrontEnd::reply(MHD_Connection* c, Request& r, int status, std::string body, const char* content_type,
                        bool close, const char* allow) {
  auto* owned = new std::string(std::move(body));
  const std::size_t out_bytes = owned->size();
  MHD_Response* res =
      MHD_create_response_from_buffer_with_free_callback_cls(owned->size(), owned->data(), &free_string, owned);
  if (!res) {
    delete owned;
    return MHD_NO;
  }
  MHD_add_response_header(res, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  if (allow) MHD_add_response_header(res, MHD_HTTP_HEADER_ALLOW, allow);
  if (r.job && r.job->kind == Job::Kind::kSearch && r.job->status == 200) {
    char took[32];
    std::snprintf(took, sizeof took, "%.3f", ms_between(r.headers_in, Clock::now()));
    MHD_add_response_header(res, "X-Took-Ms", took);
    MHD_add_response_header(res, "X-Batch-Size", std::to_string(r.job->batch_size).c_str());
  }
  if (status == 503 && failed_.load() == false && draining_.load() == false)
    MHD_add_response_header(res, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  if (close || draining_.load() || failed_.load()) MHD_add_response_header(res, MHD_HTTP_HEADER_CONNECTION, "close");
  const MHD_Result ok = MHD_queue_response(c, static_cast<unsigned int>(status), res);
  MHD_destroy_response(res);
  r.phase = Request::Phase::kAnswered;
  metrics_.request(route_label(r.route), status);
  if (spdlog::should_log(spdlog::level::debug))
    spdlog::debug("{} -> {} ({} bytes out, {:.3f} ms{})", route_label(r.route), status, out_bytes,
                  ms_between(r.headers_in, Clock::now()),
                  r.job && r.job->kind == Job::Kind::kSearch && status == 200
                      ? ", batch " + std::to_string(r.job->batch_size)
                      : std::string());
  return ok;
}

int HttpFrontEnd::reply_error(MHD_Connection* c, Request& r, int status, const std::string& message, bool close,
                              const char* allow) {
  // replace: a message may quote client bytes (already flattened by excerpt())
  const std::string body =
      json{{"error", message}, {"status", status}}.dump(-1, ' ', false, json::error_handler_t::replace);
  if (spdlog::should_log(spdlog::level::debug)) spdlog::debug("{} -> {}: {}", route_label(r.route), status, message);
  return reply(c, r, status, body, "application/json", close, allow);
}

std::string HttpFrontEnd::info_json() const {
  const BackendInfo& i = info_;
  json attributes = json::array();
  for (const AttributeSpec& a : i.attributes) attributes.push_back({{"name", a.name}, {"type", to_string(a.type)}});
  // rows: what a search can return now (live rows of a writable index); base_rows: the rows
  // of the base loaded at start-up (the corpus, or the snapshot; the log is replayed on it).
  const std::int64_t rows = writer_ && writer_->writable() ? writer_->live_rows() : i.rows;
  std::string out = json{{"rows", rows},            {"base_rows", i.rows}, {"dim", i.dim},  {"metric", i.metric},
                         {"dtype", i.dtype},        {"ranks", i.ranks},   {"engine", i.engine},
                         {"comm", i.comm},          {"k_max", i.k_max},   {"batch_max", i.batch_max},
                         {"batch_window_us", cfg_.batch_window_us},       {"version", version()},
                         {"max_body_bytes_json", limits_.json},           {"max_body_bytes_binary", limits_.binary},
                         {"attributes", attributes},                      {"max_filters", i.max_filters}}
                        .dump(-1, ' ', false, json::error_handler_t::replace);
  if (!writer_) return out;
  out.pop_back();  // '}': the writer's fields go inside
  return out + "," + writer_->info_fields() + "}";
}

// ------------------------------------------------------------------------------ requests

int HttpFrontEnd::on_request(MHD_Connection* c, const char* url, const char* method, const char* upload,
                             std::size_t* upload_size, Request& r) {
  switch (r.phase) {
    case Request::Phase::kNew:
      r.headers_in = Clock::now();
      return on_headers(c, url, method, r);
    case Request::Phase::kGet:
      if (*upload_size > 0) {  // a body on a GET: read and dropped, within the header limit
        r.discarded += *upload_size;
        *upload_size = 0;
        return r.discarded <= static_cast<std::size_t>(cfg_.max_header_bytes) ? MHD_YES : MHD_NO;
      }
      return on_get(c, r);
    case Request::Phase::kBody:
      if (*upload_size > 0) {
        const int ok = on_body(c, upload, *upload_size, r);
        *upload_size = 0;
        return ok;
      }
      return on_body_complete(c, r);
    case Request::Phase::kWaiting:
      return on_resumed(c, r);
    case Request::Phase::kAnswered:
      if (upload_size) *upload_size = 0;
      return MHD_YES;
  }
  return MHD_NO;
}

int HttpFrontEnd::on_headers(MHD_Connection* c, const char* url, const char* method, Request& r) {
  r.route = match_route(url);
  HeaderCount h;
  MHD_get_connection_values(c, MHD_HEADER_KIND, &count_header, &h);
  const MHD_ConnectionInfo* ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
  const std::size_t header_bytes = ci ? ci->header_size : 0;
  if (header_bytes > static_cast<std::size_t>(cfg_.max_header_bytes))
    return reply_error(c, r, 431, "request line and headers take " + std::to_string(header_bytes) +
                                      " bytes, over service.max_header_bytes (" + std::to_string(cfg_.max_header_bytes) +
                                      ")", true);
  if (h.fields > cfg_.max_headers)
    return reply_error(c, r, 431, std::to_string(h.fields) + " header fields, over service.max_headers (" +
                                      std::to_string(cfg_.max_headers) + ")", true);
  // On every route, before anything else reads the body: its framing must be unambiguous.
  const char* te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
  const auto [framing_status, framing_why] =
      framing_problem(h.content_length, h.transfer_encoding, te ? te : "");
  if (framing_status) return reply_error(c, r, framing_status, framing_why, true);

  // Refused from the request line: answered at once, the body (if any) not read, the
  // connection closed.
  const std::string m = method ? method : "";
  const bool get = m == "GET" || m == "HEAD";
  if (r.route == Route::kOther)
    return reply_error(c, r, 404, "no route " + excerpt(m, 16) + " " + excerpt(url ? url : "", 64), true);
  if ((r.route == Route::kSearch || is_write(r.route)) && m != "POST")
    return reply_error(c, r, 405, "method " + excerpt(m, 16) + " not allowed on " + route_label(r.route) +
                                      " (allowed: POST)", true, "POST");
  if (is_write(r.route)) {
    if (!ready_.load(std::memory_order_acquire))
      return reply_error(c, r, 503, "not ready: the ranks are still ingesting", true);
    if (!writer_ || !writer_->writable())
      return reply_error(c, r, 409, "the index is read-only: storage.dir is not set (updates need a directory for "
                                    "their write-ahead log)", true);
    return on_search_headers(c, r);
  }
  if (r.route != Route::kSearch && !get)
    return reply_error(c, r, 405,
                       "method " + excerpt(m, 16) + " not allowed on " + route_label(r.route) + " (allowed: GET)",
                       true, "GET, HEAD");

  if (r.route == Route::kSearch) return on_search_headers(c, r);
  r.phase = Request::Phase::kGet;
  return MHD_YES;
}

int HttpFrontEnd::on_get(MHD_Connection* c, Request& r) {
  const bool ready = ready_.load(std::memory_order_acquire);
  switch (r.route) {
    case Route::kHealth:
      return reply(c, r, 200, R"({"status":"ok"})", "application/json");
    case Route::kReady:
      if (failed_.load()) return reply_error(c, r, 503, fail_reason());
      if (draining_.load()) return reply_error(c, r, 503, "shutting down");
      if (!ready) return reply_error(c, r, 503, "not ready: the ranks are still ingesting");
      return reply(c, r, 200, R"({"status":"ready"})", "application/json");
    case Route::kInfo:
      if (!ready) return reply_error(c, r, 503, "not ready: the ranks are still ingesting");
      return reply(c, r, 200, info_json(), "application/json");
    case Route::kMetrics: {
      if (!ready || draining_.load() || failed_.load()) return reply(c, r, 200, metrics_.render(), "text/plain; version=0.0.4");
      // Fresh per-rank counters come from a collective on the index thread: queue a job for it.
      auto job = std::make_shared<Job>();
      job->kind = Job::Kind::kCounters;
      return submit_suspended(c, r, std::move(job), /*was_receiving=*/false);
    }
    default:
      break;
  }
  return MHD_NO;
}

int HttpFrontEnd::on_search_headers(MHD_Connection* c, Request& r) {
  if (failed_.load()) return reply_error(c, r, 503, fail_reason(), true);
  if (!r.accepted) return reply_error(c, r, 503, "shutting down", true);
  if (!ready_.load(std::memory_order_acquire)) return reply_error(c, r, 503, "not ready: the ranks are still ingesting");

  HeaderCount h;
  MHD_get_connection_values(c, MHD_HEADER_KIND, &count_header, &h);
  if (h.content_type > 1 || h.content_length > 1)
    return reply_error(c, r, 400, "Content-Type or Content-Length given more than once", true);
  const char* ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
  const Media media = parse_media_type(ct ? ct : "");
  if (media == Media::kOther)
    return reply_error(c, r, 415, "Content-Type '" + excerpt(ct ? ct : "", 48) +
                                      "' not supported: use application/json or application/octet-stream", true);
  r.binary = media == Media::kBinary;
  if (r.binary && is_write(r.route) && r.route != Route::kUpsert)
    return reply_error(c, r, 415, std::string(route_label(r.route)) + " takes application/json", true);

  r.args.route = r.route;
  MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, &collect_arg, &r.args);
  if (!r.args.unknown.empty())
    return reply_error(c, r, 400, "unknown query parameter '" + excerpt(r.args.unknown, 32) + "' (allowed: " +
                                      r.args.allowed() + ")", true);
  if (r.binary && r.route == Route::kUpsert && r.args.values.count("n") == 0)
    return reply_error(c, r, 400, "a binary upsert needs the query parameter n (its rows): POST /v1/upsert?n=N", true);
  if (!r.binary && r.args.values.count("n") > 0)
    return reply_error(c, r, 400, "the query parameter n is for the binary upsert (application/octet-stream); a JSON "
                                  "body counts its own rows", true);
  if (!r.args.repeated.empty())
    return reply_error(c, r, 400, "query parameter '" + r.args.repeated + "' given more than once", true);

  // Refusals that the headers decide are sent now, before any body byte is read (and before a
  // `100 Continue`): the connection is then closed, as the body is not read.
  const char* te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
  const char* cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  r.chunked = icontains(te, "chunked");
  if (!cl && !r.chunked && r.route != Route::kSnapshot)
    return reply_error(c, r, 411, std::string("POST ") + route_label(r.route) +
                                      " needs a Content-Length header (or a chunked body)", true);
  r.limit = is_write(r.route) ? write_body_limit() : body_limit(r.binary);
  const std::string limit_name =
      is_write(r.route)       ? "the write limit (" + std::to_string(r.limit) +
                                    " bytes: service.max_body_bytes, or 32 MiB when 0, within service.max_inflight_bytes)"
      : cfg_.max_body_bytes > 0 ? "service.max_body_bytes (" + std::to_string(r.limit) + " bytes)"
                                : "the largest legal " + std::string(r.binary ? "binary" : "JSON") + " request (" +
                                      std::to_string(r.limit) + " bytes: search.batch_max x dim; service.max_body_bytes)";
  std::size_t declared = 0;
  if (cl) {
    // libmicrohttpd has already refused a Content-Length that is not a decimal number or does
    // not fit 64 bits
    declared = static_cast<std::size_t>(std::strtoull(cl, nullptr, 10));
    if (declared > r.limit)
      return reply_error(c, r, 413, "request body of " + excerpt(cl, 24) + " bytes over " + limit_name, true);
  }
  if (!reserve_bytes(declared))
    return reply_error(c, r, 503,
                       busy_message("request bodies"),
                       true);
  r.reserved = declared;
  r.body.reserve(declared);
  if (r.route == Route::kSearch) {  // searches wait for the ones still arriving; writes do not
    batcher_->receiving_begin();
    r.receiving = true;
  }
  r.phase = Request::Phase::kBody;
  return MHD_YES;
}

int HttpFrontEnd::on_body(MHD_Connection*, const char* data, std::size_t n, Request& r) {
  if (r.too_large || r.busy) {
    // Read and dropped (a chunked body has no length to refuse up front); a client that keeps
    // sending far beyond the limit is disconnected.
    r.discarded += n;
    return r.discarded > 4 * r.limit + (64u << 20) ? MHD_NO : MHD_YES;
  }
  if (r.body.size() + n > r.limit) {
    r.too_large = true;
    r.discarded = r.body.size() + n;
    std::string().swap(r.body);
    return MHD_YES;
  }
  if (r.body.size() + n > r.reserved) {  // chunked: the budget grows with the body
    const std::size_t more = r.body.size() + n - r.reserved;
    if (!reserve_bytes(more)) {
      r.busy = true;
      std::string().swap(r.body);
      return MHD_YES;
    }
    r.reserved += more;
  }
  r.body.append(data, n);
  return MHD_YES;
}

int HttpFrontEnd::on_body_complete(MHD_Connection* c, Request& r) {
  if (is_write(r.route)) return on_write_body_complete(c, r);
  r.receiving = false;  // from here: submitted, or receiving_end()
  if (r.too_large || r.busy || failed_.load()) {
    batcher_->receiving_end();
    if (failed_.load()) return reply_error(c, r, 503, fail_reason(), true);
    if (r.busy)
      return reply_error(c, r, 503,
                         busy_message("request bodies"),
                         true);
    return reply_error(c, r, 413,
                       "request body of " + std::to_string(r.discarded) + " bytes over " +
                           (cfg_.max_body_bytes > 0 ? "service.max_body_bytes (" + std::to_string(r.limit) + " bytes)"
                                                    : "the largest legal request (" + std::to_string(r.limit) +
                                                          " bytes: search.batch_max x dim; service.max_body_bytes)"),
                       true);
  }
  auto job = std::make_shared<Job>();
  try {
    const QueryShape shape{info_.dim, info_.batch_max, &info_.attributes};
    SearchBody b = r.binary ? parse_binary_search(r.body, shape) : parse_json_search(r.body, shape);
    std::string().swap(r.body);  // the rows are parsed: the body's memory goes back now
    const auto fp = r.args.values.find("filter");
    if (fp != r.args.values.end()) {
      SHARDTOPK_EXPECTS(!b.has_filter, "the filter is given twice, as the query parameter filter= and in the body "
                        "(\"filter\"); give it once");
      b.filter = parse_filter_text(fp->second, info_.attributes);
      b.has_filter = true;
    }
    const auto kp = r.args.values.find("k");
    long long k = 10;
    if (b.has_k && kp != r.args.values.end())
      throw Error("k is given twice, as the query parameter k=" + excerpt(kp->second, 24) + " and in the body (\"k\": " +
                  std::to_string(b.k) + "); give it once");
    if (b.has_k) k = b.k;
    else if (kp != r.args.values.end()) k = parse_int_param("k", kp->second);
    else SHARDTOPK_EXPECTS(!r.binary, "binary search needs the query parameter k: POST /v1/search?k=K");
    const auto bp = r.args.values.find("batch");
    if (bp != r.args.values.end()) {
      const long long batch = parse_int_param("batch", bp->second);
      SHARDTOPK_EXPECTS(batch == b.nq, "batch=", batch, " does not match the body: ", b.nq, " quer",
                        b.nq == 1 ? "y" : "ies", " of dim ", info_.dim);
    }
    job->queries = std::move(b.queries);
    job->filter = std::move(b.filter);
    job->admitted = backend_->admit(job->queries.data(), b.nq, k, job->filter.get());
    job->nq = b.nq;
    job->k = static_cast<int>(k);
  } catch (const Error& e) {
    batcher_->receiving_end();
    return reply_error(c, r, 400, e.what());
  }
  // A compiled filter is held until the answer, like the body it came from: its bytes count
  // against the in-flight budget too (its lists may take more room than their text).
  if (job->filter) {
    const std::size_t held = job->filter->serialized_bytes();
    if (!reserve_bytes(held)) {
      batcher_->receiving_end();
      return reply_error(c, r, 503,
                         busy_message("compiled filters and request bodies"));
    }
    r.reserved += held;
  }
  return submit_suspended(c, r, std::move(job), /*was_receiving=*/true);
}

int HttpFrontEnd::on_write_body_complete(MHD_Connection* c, Request& r) {
  if (failed_.load()) return reply_error(c, r, 503, fail_reason(), true);
  if (r.busy)
    return reply_error(c, r, 503, busy_message("request bodies"), true);
  if (r.too_large)
    return reply_error(c, r, 413, "request body of " + std::to_string(r.discarded) + " bytes over the write limit (" +
                                      std::to_string(r.limit) + " bytes; service.max_body_bytes)", true);
  auto job = std::make_shared<Job>();
  job->kind = Job::Kind::kWrite;
  WriteBackend* w = writer_;
  try {
    if (r.route == Route::kUpsert) {
      auto body = std::make_shared<UpsertBody>(
          r.binary ? parse_binary_upsert(r.body, parse_int_param("n", r.args.values.at("n")), w->dim(), w->schema())
                   : parse_json_upsert(r.body, w->dim(), w->schema()));
      job->write = [w, body](Job& j) { w->upsert(*body, j); };
    } else if (r.route == Route::kDelete) {
      auto body = std::make_shared<DeleteBody>(parse_json_delete(r.body, w->schema()));
      job->write = [w, body](Job& j) { w->remove(*body, j); };
    } else {
      SHARDTOPK_EXPECTS(r.body.find_first_not_of(" \t\r\n{}") == std::string::npos,
                        "POST /v1/snapshot takes no body (or {})");
      job->write = [w](Job& j) { w->snapshot(j); };
    }
  } catch (const Error& e) {
    return reply_error(c, r, 400, e.what());
  }
  std::string().swap(r.body);
  return submit_suspended(c, r, std::move(job), /*was_receiving=*/false);
}

int HttpFrontEnd::on_resumed(MHD_Connection* c, Request& r) {
  Job& j = *r.job;
  if (j.kind == Job::Kind::kWrite) {
    if (j.status != 200) return reply_error(c, r, j.status, j.error, j.status == 503);
    return reply(c, r, 200, std::move(j.body), "application/json");
  }
  if (j.kind == Job::Kind::kCounters) {
    if (j.status == 200) metrics_.set_rank_counters(j.counters);
    return reply(c, r, 200, metrics_.render(), "text/plain; version=0.0.4");
  }
  if (j.status != 200) return reply_error(c, r, j.status, j.error, j.status == 503);
  metrics_.search_done(ms_between(r.headers_in, Clock::now()) / 1000.0, j.nq);
  const std::size_t n = static_cast<std::size_t>(j.nq) * static_cast<std::size_t>(j.k);
  if (r.binary) {
    // ids [B, K] int64, scores [B, K] float32, counts [B] int32 (docs/SERVING.md "Binary
    // protocol"): any query may have fewer results than k (a filter, or fewer live rows).
    const std::size_t counts = static_cast<std::size_t>(j.nq) * 4;
    std::string body(n * 12 + counts, '\0');
    std::memcpy(&body[0], j.ids.data(), n * 8);
    std::memcpy(&body[n * 8], j.scores.data(), n * 4);
    std::memcpy(&body[n * 12], j.counts.data(), counts);
    return reply(c, r, 200, std::move(body), "application/octet-stream");
  }
  // {"ids":[[...]],"metric":"...","scores":[[...]],"took_ms":...}; a score is printed as the
  // shortest decimal that reads back as the same double (float -> double is exact). A query's
  // lists hold its real results only (fewer than k when fewer rows pass its filter).
  fmt::memory_buffer out;
  out.reserve(n * 28 + 64);
  auto rows = [&](auto&& one) {
    fmt::format_to(std::back_inserter(out), "[");
    for (int q = 0; q < j.nq; ++q) {
      fmt::format_to(std::back_inserter(out), q ? ",[" : "[");
      for (int x = 0; x < j.counts[static_cast<std::size_t>(q)]; ++x) {
        if (x) out.push_back(',');
        one(static_cast<std::size_t>(q) * static_cast<std::size_t>(j.k) + static_cast<std::size_t>(x));
      }
      out.push_back(']');
    }
    out.push_back(']');
  };
  fmt::format_to(std::back_inserter(out), "{{\"ids\":");
  rows([&](std::size_t i) { fmt::format_to(std::back_inserter(out), "{}", j.ids[i]); });
  fmt::format_to(std::back_inserter(out), ",\"metric\":\"{}\",\"scores\":", info_.metric);
  char num[40];
  rows([&](std::size_t i) {
    const auto res = fmt::format_to_n(num, sizeof num - 3, "{}", static_cast<double>(j.scores[i]));
    std::size_t len = res.size;
    if (!std::memchr(num, '.', len) && !std::memchr(num, 'e', len)) {  // keep it a JSON float: 3 -> 3.0
      num[len++] = '.';
      num[len++] = '0';
    }
    out.append(num, num + len);
  });
  fmt::format_to(std::back_inserter(out), ",\"took_ms\":{}}}", ms_between(r.headers_in, Clock::now()));
  return reply(c, r, 200, fmt::to_string(out), "application/json");
}

}  // namespace shardtopk::service
