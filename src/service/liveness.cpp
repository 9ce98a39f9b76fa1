#include "service/liveness.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include "core/log.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::service {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kBeat = 'H';
constexpr char kBye = 'B';
constexpr std::size_t kHelloBytes = 16 + 4;  // token, rank (int32, host order: same build on every rank)

std::string host_name() {
  char h[64] = {};
  gethostname(h, sizeof h - 1);
  return h;
}

void fill_token(std::uint8_t* t) {
  std::ifstream in("/dev/urandom", std::ios::binary);
  in.read(reinterpret_cast<char*>(t), 16);
  if (!in) {  // no /dev/urandom: still unpredictable enough to keep strangers out by accident
    std::random_device rd;
    for (int i = 0; i < 16; ++i) t[i] = static_cast<std::uint8_t>(rd());
  }
}


}  // namespace

// ------------------------------------------------------------------------------ rank 0

LivenessMonitor::LivenessMonitor(int world_size, bool local_only, int heartbeat_timeout_ms)
    : world_(world_size), timeout_ms_(heartbeat_timeout_ms), peers_(static_cast<size_t>(world_size)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  SHARDTOPK_EXPECTS(listen_fd_ >= 0, "liveness: socket() failed: ", std::strerror(errno));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  sa.sin_addr.s_addr = htonl(local_only ? INADDR_LOOPBACK : INADDR_ANY);
  SHARDTOPK_EXPECTS(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 && ::listen(listen_fd_, 256) == 0,
                    "liveness: cannot listen for the followers' connections: ", std::strerror(errno));
  socklen_t len = sizeof sa;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  addr_.port = ntohs(sa.sin_port);
  fill_token(addr_.token);
  std::strncpy(addr_.host, host_name().c_str(), sizeof addr_.host - 1);
  if (local_only) {
    std::strcpy(addr_.addrs[0], "127.0.0.1");
    addr_.naddr = 1;
  } else {
    ifaddrs* ifs = nullptr;
    if (getifaddrs(&ifs) == 0) {
      for (ifaddrs* i = ifs; i && addr_.naddr < 8; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
            (i->ifa_flags & IFF_LOOPBACK))
          continue;
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, addr_.addrs[addr_.naddr],
                  sizeof addr_.addrs[0]);
        ++addr_.naddr;
      }
      freeifaddrs(ifs);
    }
  }
}

LivenessMonitor::~LivenessMonitor() {
  for (auto& p : peers_)
    if (p.fd >= 0) ::close(p.fd);
  for (auto& p : pending_) ::close(p.fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void LivenessMonitor::arm() {
  armed_ = true;
  armed_at_ = Clock::now();
  for (auto& p : peers_) p.last_seen = armed_at_;  // time spent ingesting is not a stall
}

void LivenessMonitor::accept_all() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    if (pending_.size() >= 64) {  // strangers must not pile up
      ::close(fd);
      continue;
    }
    pending_.push_back({fd, {}});
  }
}

void LivenessMonitor::read_pending(Pending& p) {
  char buf[kHelloBytes];
  const ssize_t n = ::recv(p.fd, buf, kHelloBytes - p.hello.size(), 0);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    ::close(p.fd);
    p.fd = -1;
    return;
  }
  if (n < 0) return;
  p.hello.append(buf, static_cast<size_t>(n));
  if (p.hello.size() < kHelloBytes) return;
  std::int32_t rank = -1;
  std::memcpy(&rank, p.hello.data() + 16, 4);
  if (std::memcmp(p.hello.data(), addr_.token, 16) != 0 || rank < 1 || rank >= world_ ||
      peers_[static_cast<size_t>(rank)].fd >= 0) {
    ::close(p.fd);  // not one of ours, or a second connection for the same rank
    p.fd = -1;
    return;
  }
  Peer& peer = peers_[static_cast<size_t>(rank)];
  peer.fd = p.fd;
  peer.last_seen = Clock::now();
  p.fd = -1;
  spdlog::debug("liveness: rank {} connected", rank);
}

std::string LivenessMonitor::read_peer(int rank) {
  Peer& p = peers_[static_cast<size_t>(rank)];
  char buf[256];
  for (;;) {
    const ssize_t n = ::recv(p.fd, buf, sizeof buf, 0);
    if (n > 0) {
      p.last_seen = Clock::now();
      if (std::memchr(buf, kBye, static_cast<size_t>(n))) p.goodbye = true;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return "";
    if (n < 0 && errno == EINTR) continue;
    // EOF or reset: the process is gone (its kernel closed the socket), unless it said goodbye.
    const std::string why = n == 0 ? "closed" : std::string("failed: ") + std::strerror(errno);
    ::close(p.fd);
    p.fd = -1;
    if (p.goodbye) return "";
    return "rank " + std::to_string(rank) + " is gone: its liveness connection to rank 0 " + why +
           " (the process died or its host is unreachable)";
  }
}

std::string LivenessMonitor::poll(int timeout_ms, int extra_fd, bool* extra_ready) {
  *extra_ready = false;
  std::vector<pollfd> fds;
  std::vector<int> who;  // -1 listener, -2 extra, -3 - i pending i, rank otherwise
  fds.push_back({listen_fd_, POLLIN, 0});
  who.push_back(-1);
  if (extra_fd >= 0) {
    fds.push_back({extra_fd, POLLIN, 0});
    who.push_back(-2);
  }
  for (size_t i = 0; i < pending_.size(); ++i) {
    fds.push_back({pending_[i].fd, POLLIN, 0});
    who.push_back(-3 - static_cast<int>(i));
  }
  for (int r = 1; r < world_; ++r)
    if (peers_[static_cast<size_t>(r)].fd >= 0) {
      fds.push_back({peers_[static_cast<size_t>(r)].fd, POLLIN, 0});
      who.push_back(r);
    }
  const int n = ::poll(fds.data(), fds.size(), timeout_ms);
  std::string lost;
  if (n > 0) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      if (who[i] == -1) accept_all();
      else if (who[i] == -2) *extra_ready = true;
      else if (who[i] <= -3) read_pending(pending_[static_cast<size_t>(-3 - who[i])]);
      else if (lost.empty()) lost = read_peer(who[i]);
    }
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [](const Pending& p) { return p.fd < 0; }),
                   pending_.end());
  }
  if (!lost.empty() || !armed_) return lost;
  // Silence: data already received counts (read above), so a late wake-up of this thread is
  // not taken for a stalled follower.
  const auto now = Clock::now();
  const auto limit = std::chrono::milliseconds(timeout_ms_);
  for (int r = 1; r < world_; ++r) {
    const Peer& p = peers_[static_cast<size_t>(r)];
    if (p.goodbye) continue;
    if (p.fd < 0) {
      if (now - armed_at_ > limit)
        return "rank " + std::to_string(r) + " has no liveness connection to rank 0 (it never connected)";
      continue;
    }
    if (now - p.last_seen > limit)
      return "rank " + std::to_string(r) + " stalled: no heartbeat for " +
             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - p.last_seen).count()) +
             " ms (service.heartbeat_timeout_ms = " + std::to_string(timeout_ms_) + ")";
  }
  return "";
}

// ------------------------------------------------------------------------------ followers

Heartbeat::Heartbeat(const LivenessAddress& a, int rank, int interval_ms, double connect_timeout_s) {
  std::vector<std::string> targets;
  if (host_name() == a.host || (a.naddr == 1 && std::strcmp(a.addrs[0], "127.0.0.1") == 0))
    targets.push_back("127.0.0.1");
  for (std::uint32_t i = 0; i < a.naddr && i < 8; ++i)
    if (std::strcmp(a.addrs[i], "127.0.0.1") != 0) targets.push_back(a.addrs[i]);
  std::string tried;
  const auto deadline = Clock::now() + std::chrono::duration<double>(connect_timeout_s);
  while (fd_ < 0 && Clock::now() < deadline) {
    for (const std::string& t : targets) {
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(a.port);
      if (inet_pton(AF_INET, t.c_str(), &sa.sin_addr) != 1) continue;
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) continue;
      timeval tv{2, 0};
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);  // bounds connect() too
      if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
        fd_ = fd;
        break;
      }
      if (tried.find(t) == std::string::npos) tried += (tried.empty() ? "" : ", ") + t;
      ::close(fd);
    }
    if (fd_ < 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  SHARDTOPK_EXPECTS(fd_ >= 0, "rank ", rank, ": cannot open the liveness connection to rank 0 (", a.host, " port ",
                    a.port, "; tried ", tried.empty() ? std::string("no address") : tried, ")");
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char hello[kHelloBytes];
  std::memcpy(hello, a.token, 16);
  const std::int32_t r = rank;
  std::memcpy(hello + 16, &r, 4);
  SHARDTOPK_EXPECTS(::send(fd_, hello, sizeof hello, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof hello), "rank ",
                    rank, ": cannot greet rank 0 on the liveness connection: ", std::strerror(errno));
  SHARDTOPK_EXPECTS(::pipe2(stop_pipe_, O_CLOEXEC) == 0, "rank ", rank, ": pipe2 failed: ", std::strerror(errno));
  thread_ = std::thread([this, interval_ms] {
    pollfd p{stop_pipe_[0], POLLIN, 0};
    for (;;) {
      if (::poll(&p, 1, interval_ms) != 0) return;  // told to stop
      if (::send(fd_, &kBeat, 1, MSG_NOSIGNAL) != 1 && errno != EINTR && errno != EAGAIN) return;  // rank 0 is gone
    }
  });
}

void Heartbeat::stop_thread() {
  if (!thread_.joinable()) return;
  const char x = 0;
  (void)!::write(stop_pipe_[1], &x, 1);
  thread_.join();
}

void Heartbeat::goodbye() {
  stop_thread();
  if (fd_ < 0) return;
  (void)::send(fd_, &kBye, 1, MSG_NOSIGNAL);
  ::shutdown(fd_, SHUT_WR);
  ::close(fd_);
  fd_ = -1;
}

Heartbeat::~Heartbeat() {
  stop_thread();  // no goodbye: a follower that unwinds on an error is a lost rank to rank 0
  if (fd_ >= 0) ::close(fd_);
  for (int f : stop_pipe_)
    if (f >= 0) ::close(f);
}

}  // namespace shardtopk::service
