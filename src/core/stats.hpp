#pragma once
// Summary statistics and timers for timing output (CLI, benchmarks, the service's metrics).
// One definition of each, used everywhere. Internal header.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace shardtopk {

/// The p-th percentile (p in [0, 100]) of v, interpolated linearly between the two closest
/// ranks (numpy's default): percentile({1, 2, 3, 4}, 50) = 2.5. NaN for an empty v.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

/// Wall-clock time since construction or the last restart().
class Stopwatch {
 public:
  using Clock = std::chrono::steady_clock;
  Stopwatch() : t0_(Clock::now()) {}
  void restart() { t0_ = Clock::now(); }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  double ms() const { return seconds() * 1e3; }
  double us() const { return seconds() * 1e6; }

 private:
  Clock::time_point t0_;
};

}  // namespace shardtopk
