#pragma once
// Prometheus text metrics of `shardtopk serve` (rank 0) and the per-minute summary line.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "service/search_backend.hpp"

namespace shardtopk::service {

/// Cumulative histogram with fixed upper bounds (Prometheus `le` buckets).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;
  double sum_ = 0;
  std::uint64_t n_ = 0;
};

/// The stages of a search request, in order (docs/SERVING.md "Stage timings"): read (request
/// line in to body complete), parse (body to queued job: parsing and checks), queue (queued to its
/// batch taken), search (the collective search), resume (search done to the loop thread resuming
/// the connection), write (answer built and sent).
enum SearchStage { kStageRead, kStageParse, kStageQueue, kStageSearch, kStageResume, kStageWrite, kSearchStages };

/// Counters and histograms; every method may be called from any thread.
class Metrics {
 public:
  Metrics();

  /// A search answered 200 and sent: the time of each of its stages (lock-free).
  void search_stages(bool binary, const std::chrono::nanoseconds (&stages)[kSearchStages]);

  void request(const std::string& route, int status);
  void search_done(double seconds, int queries);
  void batch_done(int size);
  void set_rank_counters(const std::vector<RankCounters>& s);

  std::atomic<int> queue_depth{0};       ///< search requests waiting for a batch
  std::atomic<int> open_connections{0};  ///< client connections open now
  /// Searches whose answer came while their event loop polled for it (service.answer_poll_us).
  std::atomic<std::uint64_t> answers_polled{0};
  /// connections whose client had closed unnoticed (mid-request, or after its last answer),
  /// found by the front end's PeerWatch and closed (peer_watch.hpp)
  std::atomic<std::uint64_t> closed_peers{0};

  /// Prometheus text exposition (version 0.0.4).
  std::string render() const;

  /// More lines for render(), produced on the rendering thread (the index's update counters).
  /// Set before the front end serves /metrics.
  void set_extra(std::function<std::string()> extra) { extra_ = std::move(extra); }

  /// Logs the per-minute summary line (info), then the minute's counters restart.
  void log_minute();

 private:
  mutable std::mutex m_;
  std::function<std::string()> extra_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  Histogram latency_, batch_;
  std::vector<RankCounters> rank_counters_;
  std::vector<double> minute_latency_ms_;
  // [json, binary][stage] nanoseconds summed, and the searches timed
  std::atomic<std::uint64_t> stage_ns_[2][kSearchStages] = {};
  std::atomic<std::uint64_t> staged_[2] = {};
  long minute_requests_ = 0, minute_queries_ = 0, minute_batches_ = 0, minute_batch_queries_ = 0;
};

}  // namespace shardtopk::service
