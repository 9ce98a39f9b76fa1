#pragma once
// Per-request state of the HTTP front end, shared by http_front_end.cpp (the request's phases)
// and http_routes.cpp (the handlers).
#include <atomic>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "service/http_front_end.hpp"

namespace shardtopk::service {

/// Query-string arguments of a request: the values of the route's parameters, and the first
/// name repeated and the first name the route does not take.
struct QueryArgs {
  const char* allowed = "";  ///< the route's parameters, comma separated ("": none)
  std::map<std::string, std::string> values;
  std::string repeated, unknown;
  /// Whether the route takes the parameter `name`.
  bool takes(const std::string& name) const;
  /// The allowed names for messages ("k, batch, filter", or "none on this route").
  const char* allowed_text() const { return *allowed ? allowed : "none on this route"; }
};

/// A request's wait for an answer given on another thread (HttpFrontEnd::wait_for_answer). The
/// wait's count in HttpFrontEnd::suspended_ is released once: by the answering thread when it
/// finds the connection suspended (it resumes it), by the loop thread when it finds the answer
/// there as it suspends (it resumes at once), or by the request's end when that comes before the
/// handler's call that suspends (kGone: the answer, if still to come, does nothing).
struct HttpFrontEnd::Waiter {
  enum State : int { kPending, kSuspended, kAnswered, kGone };
  std::atomic<int> state{kPending};
};

struct HttpFrontEnd::Request {
  // kGet: a route without a body, answered on the handler's next call (an answer queued in the
  // first call makes libmicrohttpd close the connection after it, which ends pipelining).
  // kAudit: the answer is held until its audit line is durable (the connection suspended).
  enum class Phase { kNew, kGet, kBody, kWaiting, kAudit, kAnswered };
  Phase phase = Phase::kNew;
  const Route* route = nullptr;  // nullptr: no route (answered 404)
  // The request target's path as sent (before the '?'), not percent-decoded: the route is
  // matched on it, so /v1%2Fupsert is no route, as a proxy that matches paths sees it.
  std::string raw_path;
  bool accepted = true;          // its request line arrived before drain or failure
  bool binary = false;
  bool chunked = false;
  bool too_large = false;
  bool busy = false;             // over service.max_inflight_bytes
  bool receiving = false;        // counted in Batcher::receiving_begin
  std::size_t limit = 0;         // body bytes allowed
  std::size_t reserved = 0;      // bytes of the in-flight budget held
  std::size_t discarded = 0;     // body bytes dropped after the limit
  std::string body;
  QueryArgs args;
  std::shared_ptr<Job> job;
  // The job's (or the audit line's) answer against the connection's suspension
  // (HttpFrontEnd::wait_for_answer), shared with whoever answers: the request may be gone first
  // (its client closed before the connection was suspended).
  std::shared_ptr<Waiter> waiter;
  bool suspend_next = false;  // the connection is suspended on the handler's next call
  bool headers_call = false;  // the handler's first call (the headers are in, the body is not read)
  bool polled = false;        // its event loop polled for the answer (service.answer_poll_us)
  // When the request line arrived, its headers were in, its body was complete, its job was
  // queued and its connection resumed (stage timings; Metrics::search_stages).
  std::chrono::steady_clock::time_point line_in, headers_in, body_in, submitted, resumed;

  // ---- who sent it (http_guard.cpp)
  std::string method;            // GET, HEAD or POST (for the audit line)
  std::string key;               // the name of the key that sent it; "" when none matched or none needed
  std::string token_prefix;      // an unknown key's digest prefix
  std::string why;               // the error message answered (for the audit line)
  int retry_after_s = 0;         // 429
  int refused = 0;               // a 429 answered once its body has been read and dropped (keep-alive)
  bool token_sent = false;       // an Authorization header came (401: error="invalid_token")
  bool audited = false;          // its audit line is durable (or failed): send the answer
  /// An answer held until its audit line is durable.
  struct Held {
    int status = 0;
    std::string body;
    const char* content_type = nullptr;  // a string literal
    bool close = false;
    std::string allow;
  } held;

  /// The route's label in metrics and logs.
  const char* label() const { return route ? route->path : "other"; }
};

}  // namespace shardtopk::service
