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
  /// An interval or allowance beyond 2^60 ns (36 years) is held at that: the keys file allows
  /// rates and bursts whose nanoseconds int64 cannot hold, and a rounded-off value would wrap.
  RateLimiter(double rate, double burst)
      : interval_ns_(std::max<std::int64_t>(1, nanoseconds(1 / rate))), tolerance_ns_(nanoseconds((burst - 1) / rate)) {}

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
  // Two of these and a monotonic clock's reading stay far below 2^63: `tat_` cannot overflow.
  static constexpr std::int64_t kMaxNs = std::int64_t{1} << 60;
  static std::int64_t nanoseconds(double seconds) {
    const double ns = seconds * 1e9;
    return ns >= static_cast<double>(kMaxNs) ? kMaxNs : std::max<std::int64_t>(0, std::llround(ns));
  }

  const std::int64_t interval_ns_, tolerance_ns_;
  std::atomic<std::int64_t> tat_{0};
};

}  // namespace shardtopk::service
