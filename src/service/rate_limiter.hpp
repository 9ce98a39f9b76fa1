#pragma once
// One key's rate limit (`rate=R burst=B` on its line of the keys file): the generic cell rate
// algorithm, a token bucket kept as one number, the time at which the bucket would be full
// again ("theoretical arrival time"). A request is admitted when that time is at most
// (B - 1) / R seconds ahead of now, and pushes it 1 / R further. One atomic word per key, updated
// by compare-and-swap: keys never share a lock, so one key's flood does not slow another's checks.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

namespace shardtopk::service {

class RateLimiter {
 public:
  /// `rate` requests per second (> 0), `burst` ≥ 1 admitted at once after a quiet time.
  RateLimiter(double rate, double burst)
      : interval_ns_(std::max<std::int64_t>(1, std::llround(1e9 / rate))),
        tolerance_ns_(static_cast<std::int64_t>(std::llround((burst - 1) * 1e9 / rate))) {}

  /// Takes one request at `now_ns` (a monotonic clock): 0 when admitted, else how many
  /// nanoseconds until one would be (nothing is taken then).
  std::int64_t take(std::int64_t now_ns) {
    std::int64_t tat = tat_.load(std::memory_order_relaxed);
    for (;;) {
      const std::int64_t start = std::max(tat, now_ns);
      if (start - now_ns > tolerance_ns_) return start - now_ns - tolerance_ns_;
      if (tat_.compare_exchange_weak(tat, start + interval_ns_, std::memory_order_relaxed)) return 0;
    }
  }

 private:
  const std::int64_t interval_ns_, tolerance_ns_;
  std::atomic<std::int64_t> tat_{0};
};

}  // namespace shardtopk::service
