// The route table of the HTTP front end and each route's handler: what a complete request of
// each route does, and how a queued job's answer is written once its connection is resumed.
// The phases every request goes through (headers, body, limits) are in http_front_end.cpp.
#include <cstring>
#include <iterator>
#include <string_view>

#include <microhttpd.h>
#include <nlohmann/json.hpp>


#include "core/log.hpp"
#include "service/answer_json.hpp"
#include "service/batcher.hpp"
#include "service/http_front_end.hpp"
#include "service/http_request.hpp"
#include "service/metrics.hpp"
#include "service/write_backend.hpp"

namespace shardtopk::service {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// ------------------------------------------------------------------------------ the table

namespace {
using FE = HttpFrontEnd;
constexpr unsigned kGetHead = kGet | kHead;
}  // namespace

// Every route the service has; a path not here is a 404, a method not in its row a 405.
// Parameters by route: /v1/search k, batch, filter; /v1/rank none (its body says everything);
// /v1/upsert and /v1/delete n (their binary forms' rows or ids); /v1/snapshot none; GET routes
// ignore theirs.
// Roles (with service.auth.keys_file; docs/OPERATIONS.md "Security"): read searches, ranks and reads
// the index's description and metrics (/metrics needs none with service.auth.open_metrics),
// write changes rows, admin also snapshots; health needs no key.
//  path            methods   body               binary body_required params             handler           check_headers                role
const FE::Route FE::kRoutes[] = {
    {"/v1/search",   kPost,    BodyKind::kSearch, true,  true,  "k, batch, filter", &FE::on_search,   nullptr,                     Role::kRead},
    {"/v1/rank",     kPost,    BodyKind::kSearch, false, true,  "",                 &FE::on_rank,     nullptr,                     Role::kRead},
    {"/v1/upsert",   kPost,    BodyKind::kWrite,  true,  true,  "n",                &FE::on_upsert,   &FE::check_write_headers,    Role::kWrite},
    {"/v1/delete",   kPost,    BodyKind::kWrite,  true,  true,  "n",                &FE::on_delete,   &FE::check_write_headers,    Role::kWrite},
    {"/v1/snapshot", kPost,    BodyKind::kWrite,  true,  false, "",                 &FE::on_snapshot, nullptr,                     Role::kAdmin},
    {"/v1/info",     kGetHead, BodyKind::kNone,   false, false, "",                 &FE::on_info,     nullptr,                     Role::kRead},
    {"/healthz",     kGetHead, BodyKind::kNone,   false, false, "",                 &FE::on_health,   nullptr,                     Role::kNone},
    {"/readyz",      kGetHead, BodyKind::kNone,   false, false, "",                 &FE::on_ready,    nullptr,                     Role::kNone},
    {"/metrics",     kGetHead, BodyKind::kNone,   false, false, "",                 &FE::on_metrics,  nullptr,                     Role::kRead},
};

namespace {
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

const HttpFrontEnd::Route* HttpFrontEnd::find_route(const char* path) {
  if (!path) return nullptr;
  for (const Route& r : kRoutes)
    if (std::strcmp(r.path, path) == 0) return &r;
  return nullptr;
}

const HttpFrontEnd::Route* HttpFrontEnd::routes_begin() { return std::begin(kRoutes); }
const HttpFrontEnd::Route* HttpFrontEnd::routes_end() { return std::end(kRoutes); }

bool QueryArgs::takes(const std::string& name) const {
  if (name.empty()) return false;
  // `allowed` is a short list of names separated by ", "
  for (std::string_view rest = allowed; !rest.empty();) {
    const std::size_t comma = rest.find(',');
    std::string_view one = rest.substr(0, comma);
    while (!one.empty() && one.front() == ' ') one.remove_prefix(1);
    if (one == name) return true;
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return false;
}

// ------------------------------------------------------------------------------ routes without a body

int HttpFrontEnd::on_health(MHD_Connection* c, Request& r) {
  return reply(c, r, 200, R"({"status":"ok"})", "application/json");
}

int HttpFrontEnd::on_ready(MHD_Connection* c, Request& r) {
  if (failed_.load()) return reply_error(c, r, 503, fail_reason());
  if (draining_.load()) return reply_error(c, r, 503, "shutting down");
  if (!ready_.load(std::memory_order_acquire)) return reply_error(c, r, 503, "not ready: the ranks are still ingesting");
  return reply(c, r, 200, R"({"status":"ready"})", "application/json");
}

int HttpFrontEnd::on_info(MHD_Connection* c, Request& r) {
  if (!ready_.load(std::memory_order_acquire)) return reply_error(c, r, 503, "not ready: the ranks are still ingesting");
  return reply(c, r, 200, info_json(), "application/json");
}

int HttpFrontEnd::on_metrics(MHD_Connection* c, Request& r) {
  if (!ready_.load(std::memory_order_acquire) || draining_.load() || failed_.load())
    return reply(c, r, 200, metrics_.render(), "text/plain; version=0.0.4");
  // Fresh per-rank counters come from a collective on the index thread: queue a job for it.
  auto job = std::make_shared<Job>();
  job->work = CountersJob{};
  return submit_suspended(c, r, std::move(job), /*was_receiving=*/false);
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

// ------------------------------------------------------------------------------ search

int HttpFrontEnd::on_search(MHD_Connection* c, Request& r) {
  r.receiving = false;  // from here: submitted, or receiving_end()
  auto job = std::make_shared<Job>();
  SearchJob& s = job->work.emplace<SearchJob>();
  try {
    const QueryShape shape{info_.dim, info_.batch_max, &info_.attributes, info_.metric == "l2"};
    SearchBody b;
    if (r.binary) {
      b = parse_binary_search(r.body, shape);
    } else {
      // simdjson's working memory beyond the loop thread's own counts against the in-flight
      // budget; without room the event parser reads the body (the same answer, more slowly).
      const std::size_t workspace = json_search_workspace(r.body.size());
      const bool fast = workspace == 0 || reserve_bytes(workspace);
      struct Release {
        HttpFrontEnd* fe;
        std::size_t n;
        ~Release() { fe->release_bytes(n); }
      } release{this, fast ? workspace : 0};
      b = parse_json_search(r.body, shape, JsonRead{r.body.capacity(), fast});
    }
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
    else SHARDTOPK_EXPECTS(!r.binary, "binary search needs the query parameter k: POST ", r.route->path, "?k=K");
    const auto bp = r.args.values.find("batch");
    if (bp != r.args.values.end()) {
      const long long batch = parse_int_param("batch", bp->second);
      SHARDTOPK_EXPECTS(batch == b.nq, "batch=", batch, " does not match the body: ", b.nq, " quer",
                        b.nq == 1 ? "y" : "ies", " of dim ", info_.dim);
    }
    s.queries = std::move(b.queries);
    s.filter = std::move(b.filter);
    s.admitted = backend_->admit(s.queries.data(), b.nq, k, s.filter.get(), b.bounds.empty() ? nullptr : b.bounds.data(),
                                 !b.bounds.empty());
    s.count_only = b.count_only;
    s.nq = b.nq;
    s.k = static_cast<int>(k);
  } catch (const Error& e) {
    batcher_->receiving_end();
    return reply_error(c, r, 400, e.what());
  }
  // A compiled filter is held until the answer, like the body it came from: its bytes count
  // against the in-flight budget too (its lists may take more room than their text).
  if (s.filter) {
    const std::size_t held = s.filter->serialized_bytes();
    if (!reserve_bytes(held)) {
      batcher_->receiving_end();
      return reply_error(c, r, 503, busy_message("compiled filters and request bodies"));
    }
    r.reserved += held;
  }
  return submit_suspended(c, r, std::move(job), /*was_receiving=*/true);
}

int HttpFrontEnd::answer_search(MHD_Connection* c, Request& r) {
  const Job& job = *r.job;
  if (job.status != 200) return reply_error(c, r, job.status, job.error, job.status == 503);
  const SearchJob& j = *job.search();
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
  std::string out;
  const std::vector<std::int32_t> none(j.count_only ? static_cast<std::size_t>(j.nq) : 0, 0);
  write_search_json(out, j.ids.data(), j.scores.data(), j.count_only ? none.data() : j.counts.data(), j.nq, j.k, info_.metric,
                    ms_between(r.headers_in, Clock::now()));
  write_order_json(out, OrderAnswer{j.ids.data(), j.scores.data(), j.counts.data(), j.stats.empty() ? nullptr : j.stats.data(),
                                    j.nq, j.k, j.filter != nullptr, j.count_only, j.applied_seq});
  return reply(c, r, 200, std::move(out), "application/json");
}

// ------------------------------------------------------------------------------ rank

int HttpFrontEnd::on_rank(MHD_Connection* c, Request& r) {
  r.receiving = false;  // from here: submitted, or receiving_end()
  auto job = std::make_shared<Job>();
  RankJob& k = job->work.emplace<RankJob>();
  try {
    const QueryShape shape{info_.dim, info_.batch_max, &info_.attributes, info_.metric == "l2"};
    RankBody b = parse_json_rank(r.body, shape);
    std::string().swap(r.body);
    k.query = std::move(b.query);
    k.ids = std::move(b.ids);
    k.filter = std::move(b.filter);
    // The query's values, k and the filter are checked here, like a search's; the ids' count
    // and each id's row, by the index on its thread.
    backend_->admit(k.query.data(), 1, 1, k.filter.get(), nullptr, /*stats=*/true);
  } catch (const Error& e) {
    batcher_->receiving_end();
    return reply_error(c, r, 400, e.what());
  }
  return submit_suspended(c, r, std::move(job), /*was_receiving=*/true);
}

int HttpFrontEnd::answer_rank(MHD_Connection* c, Request& r) {
  const Job& job = *r.job;
  if (job.status != 200) return reply_error(c, r, job.status, job.error, job.status == 503);
  const RankJob& j = std::get<RankJob>(job.work);
  std::string out;
  write_rank_json(out, j.ranks.data(), j.scores.data(), static_cast<int>(j.ranks.size()), info_.metric, j.applied_seq,
                  ms_between(r.headers_in, Clock::now()));
  return reply(c, r, 200, std::move(out), "application/json");
}

int HttpFrontEnd::answer_counters(MHD_Connection* c, Request& r) {
  if (r.job->status == 200) metrics_.set_rank_counters(std::get<CountersJob>(r.job->work).counters);
  return reply(c, r, 200, metrics_.render(), "text/plain; version=0.0.4");
}

// ------------------------------------------------------------------------------ writes

// The binary upsert and delete count their rows or ids in the query parameter n (a JSON body
// counts its own).
int HttpFrontEnd::check_write_headers(MHD_Connection* c, Request& r) {
  const std::string what = std::strcmp(r.route->path, "/v1/upsert") == 0 ? "upsert" : "delete";
  const std::string counts = what == "upsert" ? "rows" : "ids";
  if (r.binary && r.args.values.count("n") == 0)
    return reply_error(c, r, 400, "a binary " + what + " needs the query parameter n (its " + counts + "): POST " +
                                      r.route->path + "?n=N", true);
  if (!r.binary && r.args.values.count("n") > 0)
    return reply_error(c, r, 400, "the query parameter n is for the binary " + what +
                                      " (application/octet-stream); a JSON body counts its own " + counts, true);
  return -1;
}

int HttpFrontEnd::on_upsert(MHD_Connection* c, Request& r) {
  WriteBackend* w = writer_;
  std::shared_ptr<UpsertBody> body;
  try {
    body = std::make_shared<UpsertBody>(
        r.binary ? parse_binary_upsert(r.body, parse_int_param("n", r.args.values.at("n")), w->dim(), w->schema())
                 : parse_json_upsert(r.body, w->dim(), w->schema()));
  } catch (const Error& e) {
    return reply_error(c, r, 400, e.what());
  }
  return submit_write(c, r, [w, body](Job& j) { w->upsert(*body, j); });
}

int HttpFrontEnd::on_delete(MHD_Connection* c, Request& r) {
  WriteBackend* w = writer_;
  std::shared_ptr<DeleteBody> body;
  try {
    body = std::make_shared<DeleteBody>(r.binary ? parse_binary_delete(r.body, parse_int_param("n", r.args.values.at("n")))
                                                  : parse_json_delete(r.body, w->schema()));
  } catch (const Error& e) {
    return reply_error(c, r, 400, e.what());
  }
  return submit_write(c, r, [w, body](Job& j) { w->remove(*body, j); });
}

int HttpFrontEnd::on_snapshot(MHD_Connection* c, Request& r) {
  // Nothing to say: an empty body of either type, or {} as JSON.
  if (r.binary ? !r.body.empty() : r.body.find_first_not_of(" \t\r\n{}") != std::string::npos)
    return reply_error(c, r, 400, std::string("POST ") + r.route->path + " takes no body (or {})");
  WriteBackend* w = writer_;
  return submit_write(c, r, [w](Job& j) { w->snapshot(j); });
}

int HttpFrontEnd::submit_write(MHD_Connection* c, Request& r, std::function<void(Job&)> run) {
  std::string().swap(r.body);
  auto job = std::make_shared<Job>();
  job->work = WriteJob{std::move(run), {}};
  return submit_suspended(c, r, std::move(job), /*was_receiving=*/false);
}

int HttpFrontEnd::answer_write(MHD_Connection* c, Request& r) {
  Job& j = *r.job;
  if (j.status != 200) return reply_error(c, r, j.status, j.error, j.status == 503);
  return reply(c, r, 200, std::move(std::get<WriteJob>(j.work).body), "application/json");
}

}  // namespace shardtopk::service
