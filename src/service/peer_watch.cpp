#include "service/peer_watch.hpp"

#include <sys/socket.h>

#include <cerrno>

#include "shardtopk/error.hpp"

namespace shardtopk::service {

PeerWatch::PeerWatch(std::chrono::milliseconds interval, std::atomic<std::uint64_t>* counter)
    : interval_(interval), counter_(counter) {
  SHARDTOPK_EXPECTS(interval.count() > 0, "PeerWatch: interval must be > 0 ms (got ", interval.count(), ")");
}

PeerWatch::~PeerWatch() { stop(); }

void PeerWatch::start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> l(run_m_);
    stopping_ = false;
  }
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> l(run_m_);
    while (!run_cv_.wait_for(l, interval_, [this] { return stopping_; })) {
      l.unlock();
      sweep();
      l.lock();
    }
  });
}

void PeerWatch::stop() {
  {
    std::lock_guard<std::mutex> l(run_m_);
    stopping_ = true;
  }
  run_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeerWatch::add(const void* key, int fd) {
  std::lock_guard<std::mutex> l(m_);
  conns_[key] = Entry{fd, false};
}

void PeerWatch::remove(const void* key) {
  std::lock_guard<std::mutex> l(m_);
  conns_.erase(key);
}

std::size_t PeerWatch::sweep() {
  std::size_t shut = 0;
  const void* next = nullptr;  // the key to go on from once the lock was let go
  bool first = true;
  for (;;) {
    std::lock_guard<std::mutex> l(m_);
    auto it = first ? conns_.begin() : conns_.lower_bound(next);
    first = false;
    for (std::size_t n = 0; n < kPerLock && it != conns_.end(); ++n, ++it) {
      Entry& e = it->second;
      if (e.woken) continue;
      char byte;
      // 0: the peer closed and nothing is left unread; > 0: bytes the loop will read (and see
      // the close after them); −1 (EAGAIN): the peer is still there.
      if (::recv(e.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0 && ::shutdown(e.fd, SHUT_RD) == 0) {
        e.woken = true;
        ++woken_;
        ++shut;
        if (counter_) counter_->fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (it == conns_.end()) return shut;
    next = it->first;  // removed meanwhile: lower_bound goes on from the next one
  }
}

std::uint64_t PeerWatch::woken() const {
  std::lock_guard<std::mutex> l(m_);
  return woken_;
}

std::size_t PeerWatch::size() const {
  std::lock_guard<std::mutex> l(m_);
  return conns_.size();
}

}  // namespace shardtopk::service
