#include "service/http_front_end.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <thread>

#include <microhttpd.h>
#include <nlohmann/json.hpp>

#include <spdlog/fmt/fmt.h>

#include "core/log.hpp"
#include "core/parallel.hpp"
#include "service/audit_log.hpp"
#include "service/batcher.hpp"
#include "service/http_request.hpp"
#include "service/key_ring.hpp"
#include "service/metrics.hpp"
#include "service/tls.hpp"
#include "service/write_backend.hpp"

namespace shardtopk::service {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

// The connections of the calling event loop (libmicrohttpd notifies a connection's start and
// close on the loop that owns it).
thread_local int loop_connections = 0;

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

// Header fields of the request: how many, and whether Content-Type, Content-Length,
// Transfer-Encoding or Authorization repeat.
struct HeaderCount {
  int fields = 0, content_type = 0, content_length = 0, transfer_encoding = 0, authorization = 0;
};
MHD_Result count_header(void* cls, MHD_ValueKind, const char* key, const char*) {
  auto* h = static_cast<HeaderCount*>(cls);
  ++h->fields;
  if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_TYPE) == 0) ++h->content_type;
  if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) ++h->content_length;
  if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) ++h->transfer_encoding;
  if (strcasecmp(key, MHD_HTTP_HEADER_AUTHORIZATION) == 0) ++h->authorization;
  return MHD_YES;
}

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

struct Callbacks {
  static void* uri_log(void* cls, const char* uri, MHD_Connection*) {
    HttpFrontEnd::Request* r = static_cast<HttpFrontEnd*>(cls)->new_request();
    if (uri) r->raw_path.assign(uri, std::strcspn(uri, "?"));
    return r;
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
  static void completed(void* cls, MHD_Connection*, void** con_cls, MHD_RequestTerminationCode code) {
    static_cast<HttpFrontEnd*>(cls)->on_completed(static_cast<HttpFrontEnd::Request*>(*con_cls),
                                                  code == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    *con_cls = nullptr;
  }
  static void connection(void* cls, MHD_Connection* c, void**, MHD_ConnectionNotificationCode code) {
    auto* fe = static_cast<HttpFrontEnd*>(cls);
    auto& open = fe->metrics_.open_connections;
    // Called on the event loop that owns the connection (it accepts and closes it there), the
    // close before libmicrohttpd closes the socket.
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      open.fetch_add(1);
      ++loop_connections;
      const MHD_ConnectionInfo* fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
      if (fd) fe->peers_.add(c, fd->connect_fd);
    } else {
      fe->peers_.remove(c);
      open.fetch_sub(1);
      --loop_connections;
    }
  }
};

// ------------------------------------------------------------------------------ life cycle

HttpFrontEnd::HttpFrontEnd(const ServiceConfig& cfg, Metrics& metrics)
    : cfg_(cfg), metrics_(metrics), peers_(std::chrono::milliseconds(cfg.peer_check_ms), &metrics.closed_peers) {
  if (cfg_.io_threads == 0) cfg_.io_threads = default_io_threads(usable_cores_ = usable_cores());
  if (cfg_.answer_poll_us < 0) cfg_.answer_poll_us = default_answer_poll_us(usable_cores());
  load_security();
}

int HttpFrontEnd::default_io_threads(int usable_cores) {
  return std::clamp(usable_cores - 1, 1, kMaxDefaultIoThreads);
}

int HttpFrontEnd::default_answer_poll_us(int usable_cores) {
  return usable_cores >= kAnswerPollCores ? kAnswerPollUs : 0;
}

HttpFrontEnd::~HttpFrontEnd() {
  if (daemon_) stop(Clock::now() + std::chrono::seconds(5));
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
  std::vector<MHD_OptionItem> more;
  if (cfg_.io_threads > 1)
    more.push_back({MHD_OPTION_THREAD_POOL_SIZE, static_cast<intptr_t>(cfg_.io_threads), nullptr});
  if (!tls_cert_.empty()) {
    // libmicrohttpd's own TLS (GnuTLS): the files were checked by load_security().
    SHARDTOPK_EXPECTS(MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES,
                      "service.tls.cert_file is set but this libmicrohttpd was built without TLS (HTTPS) support");
    flags |= MHD_USE_TLS;
    more.push_back({MHD_OPTION_HTTPS_MEM_CERT, 0, const_cast<char*>(tls_cert_.c_str())});
    more.push_back({MHD_OPTION_HTTPS_MEM_KEY, 0, const_cast<char*>(tls_key_.c_str())});
    more.push_back({MHD_OPTION_HTTPS_PRIORITIES, 0, const_cast<char*>(kTlsPriorities)});
  }
  more.push_back({MHD_OPTION_END, 0, nullptr});
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
      MHD_OPTION_ARRAY, more.data(),                                                  //
      MHD_OPTION_END);
  SHARDTOPK_EXPECTS(daemon_ != nullptr, "service: cannot start the HTTP server (libmicrohttpd) on ", cfg_.host, ":",
                    port_, " (run with SHARDTOPK_LOG_LEVEL=debug for its reason)");
  peers_.start();
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
         std::to_string(cfg_.io_threads) + " event-loop thread(s)" +
         (usable_cores_ ? " (service.io_threads 0: " + std::to_string(usable_cores_) + " usable core(s) less one)" : "") +
         "; a lone connection's answer polled for " + std::to_string(cfg_.answer_poll_us) + " us" +
         "; JSON bodies read by simdjson's " + json_reader_kernel() + " kernel" +
         (json_reader_kernel() == "fallback" ? " (this CPU offers none of its SIMD kernels: JSON reading is about 3x "
                                               "slower; binary requests are not affected)"
                                             : "");
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
  peers_.stop();
  MHD_stop_daemon(daemon_);
  daemon_ = nullptr;
  return true;
}

HttpFrontEnd::Request* HttpFrontEnd::new_request() {
  auto* r = new Request;
  r->line_in = Clock::now();
  r->accepted = !draining_.load() && !failed_.load();
  in_progress_.fetch_add(1);
  return r;
}

void HttpFrontEnd::on_completed(Request* r, bool sent) {
  if (!r) return;
  // Ended before the handler's call that would have suspended it (libmicrohttpd closed the
  // connection: a reset, an error), answered or not: its wait's count is released here, and an
  // answer still to come finds kGone.
  if (r->waiter && r->suspend_next) {
    r->waiter->state.store(Waiter::kGone, std::memory_order_release);
    suspended_.fetch_sub(1);
  }
  const SearchJob* s = r->job && r->job->status == 200 ? r->job->search() : nullptr;
  if (sent && s) {
    using std::chrono::nanoseconds;
    const auto done = Clock::now();
    const nanoseconds stages[kSearchStages] = {r->body_in - r->line_in,        r->submitted - r->body_in,
                                               s->search_start - r->submitted, s->search_end - s->search_start,
                                               r->resumed - s->search_end,     done - r->resumed};
    metrics_.search_stages(r->binary, stages);
    if (spdlog::should_log(spdlog::level::debug))
      spdlog::debug("{} stages (us): read {:.1f} parse {:.1f} queue {:.1f} search {:.1f} resume {:.1f} write {:.1f}",
                    r->binary ? "binary search" : "JSON search", stages[0].count() / 1e3, stages[1].count() / 1e3,
                    stages[2].count() / 1e3, stages[3].count() / 1e3, stages[4].count() / 1e3, stages[5].count() / 1e3);
  }
  if (r->job && r->job->search() && batcher_) batcher_->answer_sent();
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
  // A search from the loop's only connection: the loop polls for its answer first, one loop at
  // a time (a sleeping loop's wake-up is most of one client's fixed cost).
  int idle = 0;
  const bool poll = job->search() && cfg_.answer_poll_us > 0 && loop_connections == 1 &&
                    answer_pollers_.compare_exchange_strong(idle, 1);
  job->on_done = [this, c, w = wait_for_answer(r)] { answered(c, *w); };
  r.job = job;
  r.phase = Request::Phase::kWaiting;
  r.submitted = Clock::now();
  r.polled = poll;
  batcher_->submit(std::move(job), was_receiving);
  if (poll) {
    const auto until = r.submitted + std::chrono::microseconds(cfg_.answer_poll_us);
    while (r.waiter->state.load(std::memory_order_acquire) != Waiter::kAnswered && Clock::now() < until)
      std::this_thread::yield();
    answer_pollers_.store(0);
  }
  return MHD_YES;
}

std::shared_ptr<HttpFrontEnd::Waiter> HttpFrontEnd::wait_for_answer(Request& r) {
  r.waiter = std::make_shared<Waiter>();
  r.suspend_next = true;
  suspended_.fetch_add(1);  // counted before the answer can come: stop() waits for it
  return r.waiter;
}

void HttpFrontEnd::answered(MHD_Connection* c, Waiter& w) {
  // kPending: the loop thread finds the answer as it suspends; kGone: the request ended first
  // (on_completed released the count).
  if (w.state.exchange(Waiter::kAnswered, std::memory_order_acq_rel) == Waiter::kSuspended) {
    MHD_resume_connection(c);  // a suspended connection is never closed: c is still there
    suspended_.fetch_sub(1);
  }
}

int HttpFrontEnd::suspend_until_answered(MHD_Connection* c, Request& r) {
  r.suspend_next = false;
  // Answered or not, the connection is suspended and resumed: the answer is written on the
  // loop's next round, which a polling loop is awake for, and the socket is watched afresh
  // (libmicrohttpd reads a close that came with the request, which an answer written from this
  // call would leave unseen).
  MHD_suspend_connection(c);
  int pending = Waiter::kPending;
  if (!r.waiter->state.compare_exchange_strong(pending, Waiter::kSuspended, std::memory_order_acq_rel)) {
    if (r.polled) metrics_.answers_polled.fetch_add(1, std::memory_order_relaxed);
    MHD_resume_connection(c);
    suspended_.fetch_sub(1);
  }
  r.polled = false;
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
  if (!r.audited && audited(r, status)) {
    r.held = Request::Held{status, std::move(body), content_type, close, allow ? allow : ""};
    return hold_for_audit(c, r);
  }
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
  const SearchJob* searched = r.job && r.job->status == 200 ? r.job->search() : nullptr;
  if (searched) {
    char took[32];
    std::snprintf(took, sizeof took, "%.3f", ms_between(r.headers_in, Clock::now()));
    MHD_add_response_header(res, "X-Took-Ms", took);
    MHD_add_response_header(res, "X-Batch-Size", std::to_string(searched->batch_size).c_str());
  }
  if (status == 503 && failed_.load() == false && draining_.load() == false)
    MHD_add_response_header(res, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  if (status == 429) MHD_add_response_header(res, MHD_HTTP_HEADER_RETRY_AFTER, std::to_string(r.retry_after_s).c_str());
  if (status == 401)  // RFC 6750: the scheme, and whether the key sent was the trouble
    MHD_add_response_header(res, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                            r.token_sent ? "Bearer realm=\"shardtopk\", error=\"invalid_token\"" : "Bearer realm=\"shardtopk\"");
  if (close || draining_.load() || failed_.load()) MHD_add_response_header(res, MHD_HTTP_HEADER_CONNECTION, "close");
  const MHD_Result ok = MHD_queue_response(c, static_cast<unsigned int>(status), res);
  MHD_destroy_response(res);
  r.phase = Request::Phase::kAnswered;
  metrics_.request(r.label(), status);
  if (spdlog::should_log(spdlog::level::debug))
    spdlog::debug("{} -> {} ({} bytes out, {:.3f} ms{})", r.label(), status, out_bytes,
                  ms_between(r.headers_in, Clock::now()),
                  searched && status == 200 ? ", batch " + std::to_string(searched->batch_size) : std::string());
  return ok;
}

int HttpFrontEnd::reply_error(MHD_Connection* c, Request& r, int status, const std::string& message, bool close,
                              const char* allow) {
  // replace: a message may quote client bytes (already flattened by excerpt())
  const std::string body =
      json{{"error", message}, {"status", status}}.dump(-1, ' ', false, json::error_handler_t::replace);
  if (spdlog::should_log(spdlog::level::debug)) spdlog::debug("{} -> {}: {}", r.label(), status, message);
  r.why = message;
  return reply(c, r, status, body, "application/json", close, allow);
}

// ------------------------------------------------------------------------------ requests

int HttpFrontEnd::on_request(MHD_Connection* c, const char* url, const char* method, const char* upload,
                             std::size_t* upload_size, Request& r) {
  if (r.suspend_next) {
    if (upload_size) *upload_size = 0;
    return suspend_until_answered(c, r);
  }
  switch (r.phase) {
    case Request::Phase::kNew: {
      r.headers_in = Clock::now();
      r.headers_call = true;
      const int rc = on_headers(c, url, method, r);
      r.headers_call = false;
      return rc;
    }
    case Request::Phase::kGet:
      if (*upload_size > 0) {  // a body on a GET: read and dropped, within the header limit
        r.discarded += *upload_size;
        *upload_size = 0;
        return r.discarded <= static_cast<std::size_t>(cfg_.max_header_bytes) ? MHD_YES : MHD_NO;
      }
      if (r.refused) return reply_error(c, r, r.refused, r.why);
      return (this->*r.route->handler)(c, r);
    case Request::Phase::kBody:
      if (*upload_size > 0) {
        const int ok = on_body(c, upload, *upload_size, r);
        *upload_size = 0;
        return ok;
      }
      r.body_in = Clock::now();
      return on_body_complete(c, r);
    case Request::Phase::kWaiting:
      r.resumed = Clock::now();
      return on_resumed(c, r);
    case Request::Phase::kAudit:
      if (upload_size) *upload_size = 0;
      // the audit line is durable once the wait is answered (hold_for_audit)
      if (r.waiter && r.waiter->state.load(std::memory_order_acquire) == Waiter::kAnswered) r.audited = true;
      return r.audited ? send_held(c, r) : MHD_YES;
    case Request::Phase::kAnswered:
      if (upload_size) *upload_size = 0;
      return MHD_YES;
  }
  return MHD_NO;
}

namespace {

Method method_of(const std::string& m) {
  if (m == "GET") return kGet;
  if (m == "HEAD") return kHead;
  if (m == "POST") return kPost;
  return kOtherMethod;
}

// The methods of `mask`, comma separated: for the Allow header (with HEAD), or for messages
// (without: HEAD goes wherever GET does).
std::string method_names(unsigned mask, bool with_head) {
  std::string out;
  const std::pair<Method, const char*> names[] = {{kGet, "GET"}, {kHead, "HEAD"}, {kPost, "POST"}};
  for (const auto& [bit, name] : names)
    if ((mask & bit) && (with_head || bit != kHead)) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

}  // namespace

int HttpFrontEnd::on_headers(MHD_Connection* c, const char* url, const char* method, Request& r) {
  r.route = find_route(r.raw_path.empty() ? url : r.raw_path.c_str());
  const std::string m = method ? method : "";
  r.method = excerpt(m, 16);
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
  if (!r.route) {
    const std::string target = r.raw_path.empty() ? (url ? url : "") : r.raw_path;
    return reply_error(c, r, 404, "no route " + excerpt(m, 16) + " " + excerpt(target, 64), true);
  }
  if (!(r.route->methods & method_of(m)))
    return reply_error(c, r, 405,
                       "method " + excerpt(m, 16) + " not allowed on " + r.route->path + " (allowed: " +
                           method_names(r.route->methods, false) + ")",
                       true, method_names(r.route->methods, true).c_str());
  // The key, its role and its rate limit: before anything else about the request is looked at.
  const int refused = authorize(c, r, h.authorization);
  if (refused >= 0) return refused;
  if (r.route->body == BodyKind::kNone) {
    r.phase = Request::Phase::kGet;
    return MHD_YES;
  }
  return on_body_headers(c, r);
}

int HttpFrontEnd::on_body_headers(MHD_Connection* c, Request& r) {
  const Route& route = *r.route;
  const bool write = route.body == BodyKind::kWrite;
  if (write) {
    if (!ready_.load(std::memory_order_acquire))
      return reply_error(c, r, 503, "not ready: the ranks are still ingesting", true);
    if (audit_ && audit_->failed())
      return reply_error(c, r, 503, audit_->failure() + ": writes are refused until it can (SIGHUP reopens it)", true);
    if (!writer_ || !writer_->writable())
      return reply_error(c, r, 409, "the index is read-only: storage.dir is not set (updates need a directory for "
                                    "their write-ahead log)", true);
  }
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
  if (r.binary && !route.binary) return reply_error(c, r, 415, std::string(route.path) + " takes application/json", true);

  r.args.allowed = route.params;
  MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, &collect_arg, &r.args);
  if (!r.args.unknown.empty())
    return reply_error(c, r, 400, "unknown query parameter '" + excerpt(r.args.unknown, 32) + "' (allowed: " +
                                      r.args.allowed_text() + ")", true);
  if (route.check_headers) {
    const int refused = (this->*route.check_headers)(c, r);
    if (refused >= 0) return refused;
  }
  if (!r.args.repeated.empty())
    return reply_error(c, r, 400, "query parameter '" + r.args.repeated + "' given more than once", true);

  // Refusals that the headers decide are sent now, before any body byte is read (and before a
  // `100 Continue`): the connection is then closed, as the body is not read.
  const char* te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
  const char* cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  r.chunked = icontains(te, "chunked");
  if (!cl && !r.chunked && route.body_required)
    return reply_error(c, r, 411, std::string("POST ") + route.path + " needs a Content-Length header (or a chunked body)",
                       true);
  r.limit = write ? write_body_limit() : body_limit(r.binary);
  const std::string limit_name =
      write                     ? "the write limit (" + std::to_string(r.limit) +
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
  if (!reserve_bytes(declared)) return reply_error(c, r, 503, busy_message("request bodies"), true);
  r.reserved = declared;
  r.body.reserve(declared + kJsonPadding);  // room for simdjson to read a JSON body in place
  if (route.body == BodyKind::kSearch) {  // searches wait for the ones still arriving; writes do not
    batcher_->receiving_begin();
    r.receiving = true;
  }
  r.phase = Request::Phase::kBody;
  return MHD_YES;
}

int HttpFrontEnd::on_body(MHD_Connection*, const char* data, std::size_t n, Request& r) {
  if (r.too_large || r.busy || r.refused) {
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
  if (r.refused) return reply_error(c, r, r.refused, r.why);
  if (r.too_large || r.busy || failed_.load()) {
    if (r.receiving) {
      r.receiving = false;
      batcher_->receiving_end();
    }
    if (failed_.load()) return reply_error(c, r, 503, fail_reason(), true);
    if (r.busy) return reply_error(c, r, 503, busy_message("request bodies"), true);
    const std::string over =
        r.route->body == BodyKind::kWrite ? "the write limit (" + std::to_string(r.limit) + " bytes; service.max_body_bytes)"
        : cfg_.max_body_bytes > 0         ? "service.max_body_bytes (" + std::to_string(r.limit) + " bytes)"
                                          : "the largest legal request (" + std::to_string(r.limit) +
                                        " bytes: search.batch_max x dim; service.max_body_bytes)";
    return reply_error(c, r, 413, "request body of " + std::to_string(r.discarded) + " bytes over " + over, true);
  }
  return (this->*r.route->handler)(c, r);
}

int HttpFrontEnd::on_resumed(MHD_Connection* c, Request& r) {
  return std::visit(Overloaded{[&](SearchJob&) { return answer_search(c, r); },
                               [&](CountersJob&) { return answer_counters(c, r); },
                               [&](RankJob&) { return answer_rank(c, r); },
                               [&](WriteJob&) { return answer_write(c, r); }},
                    r.job->work);
}

}  // namespace shardtopk::service
