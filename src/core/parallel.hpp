#pragma once
// Contiguous range splits of [0, n) over std::threads, for the host loops outside the engines
// (norms, normalisation, generation, float16 rounding, the oracle). Internal header.
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace shardtopk {

/// The cores this process may run on: its CPU affinity (what a launcher's binding leaves it),
/// else the hardware's cores; at least 1.
inline int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

/// How many parts to split `work` items into: at most `threads` (≤ 0: the hardware's cores),
/// each of at least `min_per_part` items (below that a thread costs more than it saves), ≥ 1.
inline int range_parts(std::int64_t work, int threads, std::int64_t min_per_part) {
  const std::int64_t hw = threads > 0 ? threads : static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  return static_cast<int>(std::max<std::int64_t>(1, std::min(hw, work / std::max<std::int64_t>(1, min_per_part))));
}

/// Runs f(lo, hi, part) for `parts` contiguous ranges of [0, n) in order (part p covers
/// [p · per, min(n, (p + 1) · per)), empty ranges skipped), one thread each, or inline when
/// parts ≤ 1. An exception in a part is rethrown after every thread joined: the lowest part's,
/// so the first failing item in [0, n) order is the one reported.
template <class F>
void parallel_ranges(std::int64_t n, int parts, F&& f) {
  if (n <= 0) return;
  if (parts <= 1) {
    f(std::int64_t{0}, n, 0);
    return;
  }
  const std::int64_t per = (n + parts - 1) / parts;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(parts));
  std::vector<std::thread> pool;
  for (int p = 0; p < parts; ++p) {
    const std::int64_t lo = std::min(n, p * per), hi = std::min(n, lo + per);
    if (lo >= hi) break;
    pool.emplace_back([&f, &errors, lo, hi, p] {
      try {
        f(lo, hi, p);
      } catch (...) {
        errors[static_cast<size_t>(p)] = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace shardtopk
