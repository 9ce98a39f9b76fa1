#pragma once
// Rank liveness for `shardtopk serve`, independent of MPI: every follower keeps one TCP
// connection to rank 0 and sends a heartbeat byte every service.heartbeat_ms from a thread of
// its own (no MPI call: rank 0's main thread stays the only MPI thread, MPI_THREAD_FUNNELED).
// Rank 0 learns at once when a follower dies (its kernel closes the connection: EOF or reset)
// and within service.heartbeat_timeout_ms when it stalls (stopped, frozen, its host gone),
// much sooner than comm.timeout_s, which bounds each collective. A follower that leaves on
// purpose says goodbye first. Collectives that hang while every heartbeat keeps coming (a stuck
// local search) are still caught by comm.timeout_s.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace shardtopk::service {

/// Where followers reach rank 0's liveness listener; broadcast once from rank 0 (plain bytes).
struct LivenessAddress {
  std::uint16_t port = 0;
  std::uint8_t token[16] = {};  ///< random: connections that do not present it are dropped
  char host[64] = {};           ///< rank 0's host name
  std::uint32_t naddr = 0;
  char addrs[8][48] = {};       ///< rank 0's addresses to try (numeric), when on another host
};

/// Rank 0's side: the listener and one connection per follower.
class LivenessMonitor {
 public:
  /// Opens the listener: on 127.0.0.1 when every rank runs on this host (`local_only`), else on
  /// every interface (connections must then present the token). @throws Error.
  LivenessMonitor(int world_size, bool local_only, int heartbeat_timeout_ms);
  ~LivenessMonitor();
  LivenessMonitor(const LivenessMonitor&) = delete;
  LivenessMonitor& operator=(const LivenessMonitor&) = delete;

  const LivenessAddress& address() const { return addr_; }

  /// From now on every follower must be connected (within the heartbeat timeout) and silence
  /// counts as a stall. Call once the followers are serving.
  void arm();

  /// Waits up to `timeout_ms` for events: accepts followers, reads heartbeats. `extra_fd`
  /// (ignored when < 0) is watched too; *extra_ready tells whether it became readable.
  /// @return "" while every follower is alive, else a message naming the lost rank.
  std::string poll(int timeout_ms, int extra_fd, bool* extra_ready);

 private:
  struct Peer {
    int fd = -1;
    bool goodbye = false;
    std::chrono::steady_clock::time_point last_seen;
  };
  struct Pending {
    int fd = -1;
    std::string hello;
  };
  void accept_all();
  std::string read_peer(int rank);
  void read_pending(Pending& p);

  int world_;
  int timeout_ms_;
  int listen_fd_ = -1;
  LivenessAddress addr_;
  std::vector<Peer> peers_;  // [world]; rank 0 unused
  std::vector<Pending> pending_;
  bool armed_ = false;
  std::chrono::steady_clock::time_point armed_at_;
};

/// A follower's side: connects to rank 0 and sends heartbeats from its own thread.
class Heartbeat {
 public:
  /// Connects (retrying up to `connect_timeout_s`) and starts the thread. @throws Error naming
  /// the addresses tried.
  Heartbeat(const LivenessAddress& a, int rank, int interval_ms, double connect_timeout_s);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  /// This rank leaves on purpose: tell rank 0, stop the thread, close the connection.
  void goodbye();

 private:
  void stop_thread();
  int fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace shardtopk::service
