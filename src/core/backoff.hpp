#pragma once
// The pause between polls of a pending collective (MPI and NCCL communicators). Internal header.
#include <chrono>
#include <thread>

namespace shardtopk {

/// Called once per poll of a request pending since `start`; acts on every 16th: spin for the
/// first 0.2 ms (no latency added), then yield up to 20 ms (no latency while the core is free;
/// oversubscribed CPU ranks still progress), then sleep 50 µs, or 200 µs for an idle follower
/// (`idle`) waiting past 1 s for the next request, to leave the cores to the engine.
inline void poll_backoff(long spins, std::chrono::steady_clock::time_point start, bool idle = false) {
  if ((spins & 15) != 15) return;
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (waited > 0.02) std::this_thread::sleep_for(std::chrono::microseconds(idle && waited > 1.0 ? 200 : 50));
  else if (waited > 0.0002) std::this_thread::yield();
}

}  // namespace shardtopk
