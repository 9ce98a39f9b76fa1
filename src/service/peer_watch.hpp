#pragma once
// Connections whose client has closed while libmicrohttpd waits for more of their bytes.
//
// libmicrohttpd 0.9.75's epoll loop (edge-triggered) takes a read that returns less than its
// buffer as "nothing more to read" and waits for the socket's next readiness change. When a
// client's last bytes and its FIN arrive together, no change follows: the connection, its socket
// in CLOSE_WAIT, stayed one of service.max_connections until service.idle_timeout_s (a client
// that sends part of a request and closes held a connection that long, at no cost to itself).
// Later libmicrohttpd releases register EPOLLRDHUP for it; Debian 12 and Ubuntu 24.04 ship 0.9.75.
//
// PeerWatch knows every open connection's socket (added when libmicrohttpd accepts it, removed
// before libmicrohttpd closes it) and, every `interval`, looks at each one without reading
// (recv with MSG_PEEK | MSG_DONTWAIT). A socket whose peer has closed and which holds no unread
// byte gets shutdown(SHUT_RD): a change of state that wakes its event loop, whose next read
// returns 0, and libmicrohttpd closes the connection as it does for a close it sees itself (in
// the middle of a request at once; a complete request is answered first, so a half-closed
// client still gets its answer). Nothing is written to the socket.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>

namespace shardtopk::service {

class PeerWatch {
 public:
  /// @param interval time between two looks at every socket (> 0)
  /// @param counter  if not null, incremented for each socket shut for reading (a metric)
  explicit PeerWatch(std::chrono::milliseconds interval, std::atomic<std::uint64_t>* counter = nullptr);
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  /// Starts the thread that calls sweep() every interval; stop() (or the destructor) ends it.
  void start();
  void stop();

  /// A connection `key` on socket `fd`, from the moment it is accepted. Any thread.
  void add(const void* key, int fd);
  /// Before the connection's socket is closed (its descriptor may then be reused). Any thread.
  void remove(const void* key);

  /// One look at every socket; returns how many were shut for reading this time (each socket at
  /// most once in its life).
  std::size_t sweep();
  /// Sockets shut for reading so far.
  std::uint64_t woken() const;
  /// Connections known now.
  std::size_t size() const;

 private:
  struct Entry {
    int fd = -1;
    bool woken = false;
  };
  // Sockets looked at per hold of the lock (add and remove, on the event loops, wait at most
  // that many peeks).
  static constexpr std::size_t kPerLock = 64;

  const std::chrono::milliseconds interval_;
  std::atomic<std::uint64_t>* const counter_;
  mutable std::mutex m_;  // conns_, woken_: a socket is peeked and shut under it, so the
                          // descriptor cannot be closed and reused meanwhile
  std::map<const void*, Entry> conns_;
  std::uint64_t woken_ = 0;

  std::mutex run_m_;
  std::condition_variable run_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace shardtopk::service
