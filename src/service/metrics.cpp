#include "service/metrics.hpp"

#include <algorithm>
#include <cstdio>

#include "core/log.hpp"
#include "core/stats.hpp"

namespace shardtopk::service {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
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

Metrics::Metrics()
    : latency_({0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
      batch_({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096}) {}

void Metrics::request(const std::string& route, int status) {
  std::lock_guard<std::mutex> l(m_);
  ++requests_[{route, status}];
  ++minute_requests_;
}

void Metrics::search_done(double seconds, int queries) {
  std::lock_guard<std::mutex> l(m_);
  latency_.observe(seconds);
  minute_latency_ms_.push_back(seconds * 1000.0);
  minute_queries_ += queries;
}

void Metrics::search_stages(bool binary, const std::chrono::nanoseconds (&stages)[kSearchStages]) {
  for (int s = 0; s < kSearchStages; ++s)
    stage_ns_[binary][s].fetch_add(static_cast<std::uint64_t>(std::max<std::int64_t>(0, stages[s].count())),
                                   std::memory_order_relaxed);
  staged_[binary].fetch_add(1, std::memory_order_relaxed);
}

void Metrics::batch_done(int size) {
  std::lock_guard<std::mutex> l(m_);
  batch_.observe(size);
  ++minute_batches_;
  minute_batch_queries_ += size;
}

void Metrics::set_rank_counters(const std::vector<RankCounters>& s) {
  std::lock_guard<std::mutex> l(m_);
  rank_counters_ = s;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> l(m_);
  std::string out;
  out += "# HELP shardtopk_http_requests_total HTTP requests by route and status.\n";
  out += "# TYPE shardtopk_http_requests_total counter\n";
  for (const auto& kv : requests_)
    out += "shardtopk_http_requests_total{route=\"" + kv.first.first + "\",status=\"" +
           std::to_string(kv.first.second) + "\"} " + std::to_string(kv.second) + "\n";
  latency_.render(out, "shardtopk_search_latency_seconds",
                  "Search request latency, request received to answer ready (queueing + batching + search).");
  batch_.render(out, "shardtopk_batch_size", "Queries per collective search (micro-batch size).");
  static const char* kStageNames[kSearchStages] = {"read", "parse", "queue", "search", "resume", "write"};
  out += "# HELP shardtopk_search_stage_seconds_total Time of answered searches by stage: read (request line to body "
         "complete), parse, queue (to its batch), search, resume (search done to the event loop), write (answer "
         "built and sent).\n";
  out += "# TYPE shardtopk_search_stage_seconds_total counter\n";
  char line[200];
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < kSearchStages; ++s) {
      std::snprintf(line, sizeof line, "shardtopk_search_stage_seconds_total{body=\"%s\",stage=\"%s\"} %.9f\n",
                    b ? "binary" : "json", kStageNames[s], 1e-9 * static_cast<double>(stage_ns_[b][s].load()));
      out += line;
    }
  out += "# HELP shardtopk_search_stage_requests_total Searches whose stages are in shardtopk_search_stage_seconds_total.\n";
  out += "# TYPE shardtopk_search_stage_requests_total counter\n";
  for (int b = 0; b < 2; ++b)
    out += std::string("shardtopk_search_stage_requests_total{body=\"") + (b ? "binary" : "json") + "\"} " +
           std::to_string(staged_[b].load()) + "\n";
  out += "# HELP shardtopk_queue_depth Search requests waiting for a batch.\n# TYPE shardtopk_queue_depth gauge\n";
  out += "shardtopk_queue_depth " + std::to_string(queue_depth.load()) + "\n";
  out += "# HELP shardtopk_http_open_connections Client connections open now.\n";
  out += "# TYPE shardtopk_http_open_connections gauge\n";
  out += "shardtopk_http_open_connections " + std::to_string(open_connections.load()) + "\n";
  out += "# HELP shardtopk_http_answers_polled_total Searches whose answer came while their event loop "
         "polled for it (service.answer_poll_us): written without waking a sleeping loop.\n";
  out += "# TYPE shardtopk_http_answers_polled_total counter\n";
  out += "shardtopk_http_answers_polled_total " + std::to_string(answers_polled.load()) + "\n";
  out += "# HELP shardtopk_http_closed_peers_total Connections whose client had closed unnoticed (in the middle "
         "of a request, or after its last answer), found by the look at every socket each service.peer_check_ms "
         "and then closed.\n";
  out += "# TYPE shardtopk_http_closed_peers_total counter\n";
  out += "shardtopk_http_closed_peers_total " + std::to_string(closed_peers.load()) + "\n";
  out += "# HELP shardtopk_rank_search_seconds_total Time in each rank's local search.\n";
  out += "# TYPE shardtopk_rank_search_seconds_total counter\n";
  char buf[160];
  for (size_t r = 0; r < rank_counters_.size(); ++r) {
    std::snprintf(buf, sizeof buf, "shardtopk_rank_search_seconds_total{rank=\"%zu\"} %.9g\n", r,
                  rank_counters_[r].search_seconds);
    out += buf;
  }
  out += "# HELP shardtopk_rank_searches_total Local searches run by each rank.\n";
  out += "# TYPE shardtopk_rank_searches_total counter\n";
  for (size_t r = 0; r < rank_counters_.size(); ++r) {
    std::snprintf(buf, sizeof buf, "shardtopk_rank_searches_total{rank=\"%zu\"} %.0f\n", r, rank_counters_[r].searches);
    out += buf;
  }
  if (extra_) out += extra_();
  return out;
}

void Metrics::log_minute() {
  std::lock_guard<std::mutex> l(m_);
  std::vector<double> v = std::move(minute_latency_ms_);
  minute_latency_ms_.clear();
  auto pct = [&](double p) { return v.empty() ? 0.0 : percentile(v, p); };
  spdlog::info("last minute: {} requests, {} queries in {} batches (mean {:.1f} queries), search latency ms "
               "p50 {:.3f} p99 {:.3f}, queue {}, connections {}",
               minute_requests_, minute_queries_, minute_batches_,
               minute_batches_ ? static_cast<double>(minute_batch_queries_) / minute_batches_ : 0.0, pct(50), pct(99),
               queue_depth.load(), open_connections.load());
  minute_requests_ = minute_queries_ = minute_batches_ = minute_batch_queries_ = 0;
}

}  // namespace shardtopk::service
