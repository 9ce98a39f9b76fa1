#pragma once
// Rank 0's HTTP front end: libmicrohttpd (GNU libmicrohttpd, Debian's libmicrohttpd-dev) in
// epoll mode, service.io_threads event-loop threads for every connection; routes, limits,
// request parsing (request_parse.hpp) and answers. A search request is parsed on the loop
// thread, queued on the Batcher, and its connection suspended; when the batcher answers the
// job, the connection is resumed and the answer sent from the loop thread. Nothing on a loop
// thread waits for a search.
//
// Files: http_front_end.cpp (life cycle, the request's phases, limits, replies),
// http_routes.cpp (the route table and each route's handler), http_guard.cpp (who may call a
// route: API keys, rate limits, the audit log; TLS), http_request.hpp (per-request state).
//
// Why libmicrohttpd and not libevent's evhttp (2.1, the Debian and Ubuntu version): evhttp has
// no hook between a server request's headers and its body (a POST with neither Content-Length
// nor chunked encoding is read until the client closes, so it cannot be refused at once), no
// connection limit and no way to see idle connections, and it drops a reply when the client has
// half-closed its side. libmicrohttpd calls the handler once the headers are in (refusals are
// answered before any body byte and before `100 Continue`), limits connections, idle time and
// per-connection memory, serves pipelined requests in order and answers half-closed clients.
//
// Limits and errors: docs/SERVING.md.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "service/api_keys.hpp"
#include "service/peer_watch.hpp"
#include "service/request_parse.hpp"
#include "service/search_backend.hpp"
#include "shardtopk/config.hpp"

struct MHD_Daemon;
struct MHD_Connection;

namespace shardtopk::service {

class AuditLog;
class Batcher;
class KeyRing;
class Metrics;
class WriteBackend;
struct AuditRecord;
struct Job;

/// HTTP methods a route takes (a bit mask). HEAD is answered wherever GET is.
enum Method : unsigned { kGet = 1u, kHead = 2u, kPost = 4u, kOtherMethod = 8u };

/// How a route's request body is read: none (GET routes), a search (limits derived from the
/// index's shape; batches wait for searches still arriving) or a write (the write limit).
enum class BodyKind { kNone, kSearch, kWrite };

class HttpFrontEnd {
 public:
  /// Reads and checks the TLS files, the keys file and opens the audit log that `cfg` names.
  /// @throws Error naming the file that is unreadable or bad.
  HttpFrontEnd(const ServiceConfig& cfg, Metrics& metrics);
  ~HttpFrontEnd();
  HttpFrontEnd(const HttpFrontEnd&) = delete;
  HttpFrontEnd& operator=(const HttpFrontEnd&) = delete;

  /// Opens the listening socket (SO_REUSEADDR, backlog 4096) and raises this process's open
  /// file limit for service.max_connections. @throws Error naming host and port.
  void bind();
  int port() const { return port_; }

  /// Starts the event loops: /healthz answers now; searches, /v1/info and /readyz answer 503
  /// until set_ready().
  void start();

  /// The index is ready: searches go to `batcher`, k is checked by `backend`. Both must outlive
  /// the front end's last request (stop()).
  void set_ready(const BackendInfo& info, SearchBackend& backend, Batcher& batcher);

  /// The writes (POST /v1/upsert, /v1/delete, /v1/snapshot), queued on the batcher as write
  /// jobs; without one (or a read-only one) they answer 409. Call before set_ready(); it must
  /// outlive the front end's last request.
  void set_writer(WriteBackend* writer);

  /// Event-loop threads when service.io_threads is 0: the cores rank 0 may use less one (the
  /// index thread's), between 1 and kMaxDefaultIoThreads.
  static int default_io_threads(int usable_cores);
  static constexpr int kMaxDefaultIoThreads = 16;
  /// service.answer_poll_us when it is -1: kAnswerPollUs where rank 0 may use kAnswerPollCores
  /// cores or more (the polling loop, the index thread and the client's side each keep a core),
  /// else 0 (a poll on a full machine takes the core the search needs).
  static int default_answer_poll_us(int usable_cores);
  static constexpr int kAnswerPollCores = 4, kAnswerPollUs = 1000;

  /// Body limit of a write request when service.max_body_bytes is 0.
  static constexpr std::size_t kWriteBodyBytes = 32u << 20;

  /// SIGTERM: stop accepting connections (the listening socket is closed: new connections are
  /// refused). Requests whose request line arrived before now are served as usual, with
  /// `Connection: close`; later ones (on open keep-alive connections) get 503 and the connection
  /// is closed.
  void begin_drain();

  /// A rank is lost: stop accepting; every later answer is 503 naming `reason`, with
  /// `Connection: close`. Jobs already queued are answered by the batcher (Batcher::fail_all).
  void fail(const std::string& reason);

  /// Requests whose request line has arrived and whose answer has not been sent completely.
  int in_progress() const;

  /// Waits until in_progress() is 0 or `deadline`; true when it reached 0.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);

  /// Closes every connection and stops the loops. Every job must have been answered (the
  /// batcher's claim), or connections would stay suspended: returns false, stopping nothing,
  /// when some are still suspended at `deadline`.
  bool stop(std::chrono::steady_clock::time_point deadline);

  /// The limits in force, for logs: body bytes (JSON, binary) and in-flight bytes.
  std::string limits_summary() const;

  /// For the start-up log: TLS (its certificate) or plain HTTP, the keys in force, the audit log;
  /// then one line per warning about them (TLS files, the keys file).
  std::vector<std::string> security_summary() const;

  /// "https" with TLS, else "http".
  const char* scheme() const { return tls_cert_.empty() ? "http" : "https"; }

  /// SIGHUP: reads the keys file again (a bad file keeps the keys in force) and reopens the
  /// audit log (after a rotation); logs what happened. Connections and requests go on.
  void reload();

  struct Request;  // per-request state (http_request.hpp)
  struct Waiter;   // a request's wait for an answer from another thread (http_request.hpp)

  /// A route handler: runs once the request is complete (its headers, and its body if the route
  /// reads one) and answers it, or queues a job whose answer resumes the request (on_resumed).
  using Handler = int (HttpFrontEnd::*)(MHD_Connection*, Request&);

  /// One row of the route table (http_routes.cpp): everything that depends on the route.
  struct Route {
    const char* path;       ///< the URL path, matched exactly; also the route's label in metrics
    unsigned methods;       ///< Method bits; any other method: 405 with Allow
    BodyKind body;          ///< kNone: no body read (a GET route)
    bool binary;            ///< application/octet-stream accepted besides JSON (else 415)
    bool body_required;     ///< a POST without Content-Length or chunked encoding: 411
    const char* params;     ///< the query parameters it takes, comma separated ("": none)
    Handler handler;        ///< answers the complete request
    /// Route-specific checks of the headers and query parameters, run after the common ones and
    /// before the body is read (nullptr: none). Answers a refusal, or returns -1 to go on.
    Handler check_headers = nullptr;
    Role role = Role::kNone;  ///< the least role a request's key must have
  };

  /// The route for `path`, or nullptr (404). The one place a request's route is decided.
  static const Route* find_route(const char* path);
  /// Every route, in the table's order.
  static const Route* routes_begin();
  static const Route* routes_end();

 private:
  friend struct Callbacks;
  static const Route kRoutes[];  // the route table (http_routes.cpp)

  int on_request(MHD_Connection* c, const char* url, const char* method, const char* upload, std::size_t* upload_size,
                 Request& r);
  int on_headers(MHD_Connection* c, const char* url, const char* method, Request& r);
  int on_body_headers(MHD_Connection* c, Request& r);
  int on_body(MHD_Connection* c, const char* data, std::size_t n, Request& r);
  int on_body_complete(MHD_Connection* c, Request& r);
  int on_resumed(MHD_Connection* c, Request& r);
  /// The request is over: `sent` when its answer went out whole.
  void on_completed(Request* r, bool sent);

  // ---- route handlers (http_routes.cpp)
  int on_health(MHD_Connection* c, Request& r);
  int on_ready(MHD_Connection* c, Request& r);
  int on_info(MHD_Connection* c, Request& r);
  int on_metrics(MHD_Connection* c, Request& r);
  int on_search(MHD_Connection* c, Request& r);
  int on_rank(MHD_Connection* c, Request& r);
  int on_upsert(MHD_Connection* c, Request& r);
  int on_delete(MHD_Connection* c, Request& r);
  int on_snapshot(MHD_Connection* c, Request& r);
  int check_write_headers(MHD_Connection* c, Request& r);
  // ---- answers of queued jobs, once resumed (http_routes.cpp)
  int answer_search(MHD_Connection* c, Request& r);
  int answer_counters(MHD_Connection* c, Request& r);
  int answer_rank(MHD_Connection* c, Request& r);
  int answer_write(MHD_Connection* c, Request& r);

  // ---- who may call a route (http_guard.cpp)
  /// The TLS files, the key ring and the audit log of cfg_ (constructor).
  void load_security();
  /// The role the request's route needs (its table row; /metrics with service.auth.open_metrics
  /// needs none).
  Role needed_role(const Route& route) const;
  /// Decides the request's key, role and rate limit from its headers: -1 to go on, or the
  /// refusal answered (401 with WWW-Authenticate, 403, 429 with Retry-After).
  int authorize(MHD_Connection* c, Request& r, int authorization_headers);
  /// Whether a 429 may keep the connection: a route without a body, or a body of at most
  /// kKeepAliveRefusalBytes declared by Content-Length (not chunked, no Expect).
  bool keep_alive_refusal(MHD_Connection* c, const Request& r) const;
  static constexpr std::size_t kKeepAliveRefusalBytes = 1u << 20;
  /// Whether the answer `status` to `r` gets an audit line: every answer on a write route and
  /// every refusal for its key.
  bool audited(const Request& r, int status) const;
  AuditRecord audit_record(MHD_Connection* c, const Request& r, int status) const;
  /// Queues the audit line of the answer and suspends the connection until it is durable; the
  /// answer (held in r.held) is then sent by send_held().
  int hold_for_audit(MHD_Connection* c, Request& r);
  int send_held(MHD_Connection* c, Request& r);

  int reply(MHD_Connection* c, Request& r, int status, std::string body, const char* content_type,
            bool close = false, const char* allow = nullptr);
  int reply_error(MHD_Connection* c, Request& r, int status, const std::string& message, bool close = false,
                  const char* allow = nullptr);
  Request* new_request();
  void stop_accepting();
  bool reserve_bytes(std::size_t n);
  void release_bytes(std::size_t n);
  std::string fail_reason() const;
  /// The 503 text when `what` would not fit service.max_inflight_bytes.
  std::string busy_message(const char* what) const;
  /// Queues `job` on the batcher with the connection suspended until the job is done (from the
  /// handler's next call: wait_for_answer; its resume then answers from r.job); returns
  /// MHD_YES. A search from the only connection of its event loop first polls for its answer
  /// for up to service.answer_poll_us (no other loop polling); an answer that came meanwhile
  /// resumes the connection at once.
  int submit_suspended(MHD_Connection* c, Request& r, std::shared_ptr<Job> job, bool was_receiving);
  /// The request waits for an answer that another thread gives with answered(): the connection
  /// is suspended on the handler's next call, not in this one. libmicrohttpd 0.9.75 keeps a
  /// suspended connection's event-loop state as it was before the handler ran (reading, when the
  /// request came in the same round) and reads a resumed connection in that state before writing:
  /// a client that had half-closed then lost its answer (the read returns 0 and the connection is
  /// closed). Returning without an answer first lets libmicrohttpd put the connection in its
  /// "waiting for the application" state, in which a resumed connection is not read.
  /// Returns the wait, for the answering thread to hold.
  std::shared_ptr<Waiter> wait_for_answer(Request& r);
  /// The answer is there (any thread): resumes the connection if it is suspended.
  void answered(MHD_Connection* c, Waiter& w);
  /// The handler's next call after wait_for_answer: suspends the connection, and resumes it at
  /// once when the answer came meanwhile.
  int suspend_until_answered(MHD_Connection* c, Request& r);
  /// Queues a write job that runs `run` on the index thread (submit_suspended).
  int submit_write(MHD_Connection* c, Request& r, std::function<void(Job&)> run);
  std::size_t body_limit(bool binary) const;
  std::size_t write_body_limit() const;
  std::string info_json() const;

  ServiceConfig cfg_;
  Metrics& metrics_;
  int usable_cores_ = 0;  // service.io_threads 0: the cores it was derived from
  int listen_fd_ = -1;
  int port_ = 0;
  MHD_Daemon* daemon_ = nullptr;

  std::atomic<bool> ready_{false}, draining_{false}, failed_{false}, accepting_{true};
  BackendInfo info_;                 // immutable once ready_
  SearchBackend* backend_ = nullptr;
  Batcher* batcher_ = nullptr;
  WriteBackend* writer_ = nullptr;
  BodyLimits limits_;
  std::size_t max_inflight_ = 0;
  std::atomic<std::size_t> inflight_bytes_{0};

  mutable std::mutex m_;  // fail_reason_, accepting shutdown, in-progress waits
  std::condition_variable cv_;
  std::string fail_reason_;
  std::atomic<int> in_progress_{0};
  std::atomic<int> suspended_{0};
  std::atomic<int> answer_pollers_{0};  // event loops polling for an answer (at most one)

  // Sockets whose client closed while libmicrohttpd waits for their bytes (peer_watch.hpp):
  // every service.peer_check_ms.
  PeerWatch peers_;

  // Security (http_guard.cpp): each null or empty when not configured.
  std::string tls_cert_, tls_key_;        // PEM, handed to libmicrohttpd (it reads them at start())
  std::vector<std::string> tls_notes_;    // TLS summary, then warnings
  std::unique_ptr<KeyRing> keys_;
  std::unique_ptr<AuditLog> audit_;
};

}  // namespace shardtopk::service
