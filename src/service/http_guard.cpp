// Who may call a route, and the record of who did: the front end's API keys (roles and rate
// limits, key_ring.hpp), its audit log (audit_log.hpp) and its TLS files (tls.hpp). A request's
// key is decided once its headers are in, before its body is read or anything is queued; the
// answer to every write and to every refusal waits until its audit line is durable.
#include <netdb.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>

#include <microhttpd.h>

#include "core/log.hpp"
#include "service/audit_log.hpp"
#include "service/batcher.hpp"
#include "service/http_front_end.hpp"
#include "service/http_request.hpp"
#include "service/key_ring.hpp"
#include "service/tls.hpp"

namespace shardtopk::service {
namespace {

std::string client_address(MHD_Connection* c) {
  const MHD_ConnectionInfo* ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  const sockaddr* sa = ci ? ci->client_addr : nullptr;
  if (!sa) return "?";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  const socklen_t len = sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (getnameinfo(sa, len, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) return "?";
  return sa->sa_family == AF_INET6 ? "[" + std::string(host) + "]:" + port : std::string(host) + ":" + port;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void HttpFrontEnd::load_security() {
  if (!cfg_.tls_cert_file.empty()) {
    TlsFiles t = load_tls_files(cfg_.tls_cert_file, cfg_.tls_key_file);
    tls_cert_ = std::move(t.cert_pem);
    tls_key_ = std::move(t.key_pem);
    tls_notes_.push_back(t.summary);
    tls_notes_.insert(tls_notes_.end(), t.warnings.begin(), t.warnings.end());
  }
  if (!cfg_.auth_keys_file.empty()) keys_ = std::make_unique<KeyRing>(cfg_.auth_keys_file);
  if (!cfg_.audit_log.empty()) audit_ = std::make_unique<AuditLog>(cfg_.audit_log);
}

std::vector<std::string> HttpFrontEnd::security_summary() const {
  std::vector<std::string> out;
  out.push_back(tls_cert_.empty() ? "plain HTTP (no service.tls.cert_file)" : tls_notes_.front());
  if (keys_)
    out.push_back(std::to_string(keys_->size()) + " API key(s) from '" + keys_->path() + "'; /healthz and /readyz open, " +
                  (cfg_.auth_open_metrics ? "/metrics open" : "/metrics needs read"));
  else
    out.push_back("no API keys (service.auth.keys_file): every route is open");
  out.push_back(audit_ ? "audit log '" + audit_->path() + "'" : "no audit log (service.audit_log)");
  if (!tls_notes_.empty()) out.insert(out.end(), tls_notes_.begin() + 1, tls_notes_.end());
  if (keys_) out.insert(out.end(), keys_->warnings().begin(), keys_->warnings().end());
  return out;
}

void HttpFrontEnd::reload() {
  std::string msg;
  if (!keys_) spdlog::info("SIGHUP: no service.auth.keys_file to reload");
  else if (keys_->reload(&msg)) spdlog::info("SIGHUP: {}", msg);
  else spdlog::error("SIGHUP: {}", msg);
  if (audit_) {
    if (audit_->reopen(&msg)) spdlog::info("SIGHUP: {}", msg);
    else spdlog::error("SIGHUP: {}", msg);
  }
}

Role HttpFrontEnd::needed_role(const Route& route) const {
  if (cfg_.auth_open_metrics && route.handler == &HttpFrontEnd::on_metrics) return Role::kNone;
  return route.role;
}

int HttpFrontEnd::authorize(MHD_Connection* c, Request& r, int authorization_headers) {
  if (!keys_) return -1;
  const char* h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  const Access a = keys_->check(h, authorization_headers, needed_role(*r.route), now_ns());
  r.key = a.key;
  if (a.status == 200) return -1;
  r.token_sent = h != nullptr;
  r.token_prefix = a.token_prefix;
  r.retry_after_s = a.retry_after_s;
  if (a.status == 429 && keep_alive_refusal(c, r)) {
    // A client over its rate keeps its connection (it will retry; a new connection would cost a
    // TLS handshake): a small body is read and dropped, then the 429 is answered.
    r.refused = a.status;
    r.why = a.message;
    r.limit = kKeepAliveRefusalBytes;
    r.phase = r.route->body == BodyKind::kNone ? Request::Phase::kGet : Request::Phase::kBody;
    return MHD_YES;
  }
  // Otherwise the connection is closed after the answer when the route has a body: it is not read.
  return reply_error(c, r, a.status, a.message, r.route->body != BodyKind::kNone);
}

bool HttpFrontEnd::keep_alive_refusal(MHD_Connection* c, const Request& r) const {
  if (r.route->body == BodyKind::kNone) return true;
  const char* cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  // Not with a chunked body, nor with `Expect: 100-continue` (the body would be invited only to be
  // dropped), nor with a large one.
  return cl && !MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING) &&
         !MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT) &&
         std::strtoull(cl, nullptr, 10) <= kKeepAliveRefusalBytes;
}

bool HttpFrontEnd::audited(const Request& r, int status) const {
  return audit_ && r.route && (r.route->body == BodyKind::kWrite || status == 401 || status == 403 || status == 429);
}

AuditRecord HttpFrontEnd::audit_record(MHD_Connection* c, const Request& r, int status) const {
  AuditRecord rec;
  rec.time = std::chrono::system_clock::now();
  rec.key = r.key;
  rec.token_prefix = r.token_prefix;
  rec.route = r.label();
  rec.method = r.method;
  rec.status = status;
  if (const WriteJob* w = status == 200 && r.job ? std::get_if<WriteJob>(&r.job->work) : nullptr) {
    rec.rows = w->rows;
    rec.seq = w->seq;
  }
  rec.client = client_address(c);
  rec.why = r.why;
  return rec;
}

int HttpFrontEnd::hold_for_audit(MHD_Connection* c, Request& r) {
  r.phase = Request::Phase::kAudit;
  // A line that could not be written is logged by the audit log, and later writes are refused;
  // this answer goes out as it is (a write it reports has happened).
  audit_->append(audit_record(c, r, r.held.status), [this, c, w = wait_for_answer(r)](bool) { answered(c, *w); });
  // A refusal from the headers: suspended now, so that no body byte is read and no 100 Continue
  // sent before it; otherwise on the handler's next call (wait_for_answer).
  return r.headers_call ? suspend_until_answered(c, r) : MHD_YES;
}

int HttpFrontEnd::send_held(MHD_Connection* c, Request& r) {
  Request::Held h = std::move(r.held);
  return reply(c, r, h.status, std::move(h.body), h.content_type, h.close, h.allow.empty() ? nullptr : h.allow.c_str());
}

}  // namespace shardtopk::service
