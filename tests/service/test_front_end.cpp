// The HTTP front end's parts alone (no server): the route table (every route is found by its
// exact path and nothing else is, each takes the methods and bodies docs/SERVING.md gives it, and
// the role its key must hold), the default number of event loops, and the watch for clients that
// closed while the server waits for their bytes (PeerWatch, on loopback sockets).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "service/http_front_end.hpp"

namespace shardtopk::service {
namespace {

using FE = HttpFrontEnd;

TEST(Routes, EachPathIsFoundExactlyAndOnlyOnce) {
  std::set<std::string> paths;
  for (const FE::Route* r = FE::routes_begin(); r != FE::routes_end(); ++r) {
    EXPECT_TRUE(paths.insert(r->path).second) << r->path << " is in the table twice";
    EXPECT_EQ(FE::find_route(r->path), r) << r->path;
    EXPECT_NE(r->handler, nullptr) << r->path;
  }
  const std::set<std::string> want = {"/v1/search", "/v1/rank", "/v1/upsert", "/v1/delete", "/v1/snapshot",
                                      "/v1/info",   "/healthz",  "/readyz",    "/metrics"};
  EXPECT_EQ(paths, want);
  for (const char* other : {"", "/", "/v1/search/", "/V1/SEARCH", "/v1/search?k=1", "/v1", "/healthz ", "/v2/search"})
    EXPECT_EQ(FE::find_route(other), nullptr) << "'" << other << "'";
  EXPECT_EQ(FE::find_route(nullptr), nullptr);
}

TEST(Routes, MethodsBodiesAndParameters) {
  for (const char* post : {"/v1/search", "/v1/rank", "/v1/upsert", "/v1/delete", "/v1/snapshot"}) {
    const FE::Route& r = *FE::find_route(post);
    EXPECT_EQ(r.methods, static_cast<unsigned>(kPost)) << post;
    EXPECT_NE(r.body, BodyKind::kNone) << post;
  }
  for (const char* get : {"/v1/info", "/healthz", "/readyz", "/metrics"}) {
    const FE::Route& r = *FE::find_route(get);
    EXPECT_EQ(r.methods, static_cast<unsigned>(kGet | kHead)) << get;
    EXPECT_EQ(r.body, BodyKind::kNone) << get;
  }
  EXPECT_EQ(FE::find_route("/v1/search")->body, BodyKind::kSearch);
  EXPECT_STREQ(FE::find_route("/v1/search")->params, "k, batch, filter");
  // a rank waits in micro-batching's "being received" count like a search; JSON only, no parameters
  EXPECT_EQ(FE::find_route("/v1/rank")->body, BodyKind::kSearch);
  EXPECT_STREQ(FE::find_route("/v1/rank")->params, "");
  EXPECT_FALSE(FE::find_route("/v1/rank")->binary);
  EXPECT_STREQ(FE::find_route("/v1/upsert")->params, "n");
  EXPECT_TRUE(FE::find_route("/v1/upsert")->binary);
  EXPECT_TRUE(FE::find_route("/v1/delete")->binary);
  EXPECT_STREQ(FE::find_route("/v1/delete")->params, "n");
  EXPECT_TRUE(FE::find_route("/v1/snapshot")->binary);  // an empty body of either type
  EXPECT_STREQ(FE::find_route("/v1/snapshot")->params, "");
  EXPECT_FALSE(FE::find_route("/v1/snapshot")->body_required);  // no body, no length needed
  for (const char* w : {"/v1/upsert", "/v1/delete", "/v1/snapshot"}) EXPECT_EQ(FE::find_route(w)->body, BodyKind::kWrite);
}

// With keys configured: health open, reads need read, row changes write, snapshots admin.
TEST(Routes, EachRouteNeedsItsRole) {
  const std::map<std::string, Role> want = {{"/healthz", Role::kNone},  {"/readyz", Role::kNone},
                                            {"/v1/search", Role::kRead}, {"/v1/rank", Role::kRead},
                                            {"/v1/info", Role::kRead},
                                            {"/metrics", Role::kRead},   {"/v1/upsert", Role::kWrite},
                                            {"/v1/delete", Role::kWrite}, {"/v1/snapshot", Role::kAdmin}};
  for (const FE::Route* r = FE::routes_begin(); r != FE::routes_end(); ++r)
    EXPECT_EQ(r->role, want.at(r->path)) << r->path << " needs " << to_string(r->role);
}

// service.answer_poll_us -1: a lone connection's answer is polled for only where the poll, the
// index thread and a client each keep a core.
TEST(FrontEndDefaults, AnswerPollFollowsTheUsableCores) {
  EXPECT_EQ(FE::default_answer_poll_us(1), 0);
  EXPECT_EQ(FE::default_answer_poll_us(2), 0);
  EXPECT_EQ(FE::default_answer_poll_us(3), 0);
  EXPECT_EQ(FE::default_answer_poll_us(4), 1000);
  EXPECT_EQ(FE::default_answer_poll_us(16), 1000);
}

// service.io_threads 0: the cores rank 0 may use less the index thread's, within 1 .. 16.
TEST(FrontEndDefaults, IoThreadsFollowTheUsableCores) {
  EXPECT_EQ(FE::default_io_threads(1), 1);  // bound to one core (mpirun --bind-to core)
  EXPECT_EQ(FE::default_io_threads(2), 1);
  EXPECT_EQ(FE::default_io_threads(5), 4);
  EXPECT_EQ(FE::default_io_threads(16), 15);
  EXPECT_EQ(FE::default_io_threads(17), 16);
  EXPECT_EQ(FE::default_io_threads(128), 16);
  EXPECT_EQ(FE::default_io_threads(0), 1);
}

// A connected loopback pair: `server` as accept() gave it, `client` the other end.
struct Pair {
  int server = -1, client = -1;
};

class Loopback {
 public:
  Loopback() {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_, 512) != 0 ||
        ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      ADD_FAILURE() << "loopback listen: " << std::strerror(errno);
    addr_ = a;
  }
  ~Loopback() {
    for (int fd : fds_) ::close(fd);
    ::close(listen_);
  }
  Pair connect() {
    Pair p;
    p.client = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(::connect(p.client, reinterpret_cast<const sockaddr*>(&addr_), sizeof addr_), 0);
    p.server = ::accept(listen_, nullptr, nullptr);
    EXPECT_GE(p.server, 0);
    fds_.push_back(p.server);
    return p;
  }

 private:
  int listen_ = -1;
  sockaddr_in addr_{};
  std::vector<int> fds_;
};

// Nothing unread and the FIN in: the socket is shut for reading (its reader then reads 0), once;
// a socket with bytes still to read, one whose client is still there, and one removed before the
// look are left as they are. 150 connections: more than one hold of the lock.
TEST(PeerWatch, ShutsOnlySocketsWhoseClientClosedWithNothingLeftToRead) {
  Loopback lo;
  std::atomic<std::uint64_t> metric{0};
  PeerWatch watch(std::chrono::milliseconds(1000), &metric);
  std::vector<Pair> pairs;
  for (int i = 0; i < 150; ++i) pairs.push_back(lo.connect());
  // i % 3: 0 closed with nothing sent, 1 closed after 5 bytes, 2 still open; every 10th removed
  int expected = 0;
  for (int i = 0; i < 150; ++i) {
    watch.add(&pairs[i], pairs[i].server);
    if (i % 3 == 1) ASSERT_EQ(::send(pairs[i].client, "hello", 5, 0), 5);
    if (i % 3 != 2) ::close(pairs[i].client);
    if (i % 10 == 9) watch.remove(&pairs[i]);
    else if (i % 3 == 0) ++expected;
  }
  EXPECT_EQ(watch.size(), 135u);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the FINs arrive
  EXPECT_EQ(watch.sweep(), static_cast<std::size_t>(expected));
  EXPECT_EQ(watch.woken(), static_cast<std::uint64_t>(expected));
  EXPECT_EQ(metric.load(), static_cast<std::uint64_t>(expected));
  EXPECT_EQ(watch.sweep(), 0u) << "a socket shut once is not counted again";
  for (int i = 0; i < 150; ++i) {
    char buf[8];
    const ssize_t n = ::recv(pairs[i].server, buf, sizeof buf, MSG_DONTWAIT);
    if (i % 3 == 0)
      EXPECT_EQ(n, 0) << "connection " << i << ": closed client";
    else if (i % 3 == 1)
      EXPECT_EQ(n, 5) << "connection " << i << ": its bytes are still there to read";
    else
      EXPECT_TRUE(n < 0 && errno == EAGAIN) << "connection " << i << ": open client, nothing sent (n = " << n << ")";
  }
  // the bytes read, the close is what is left: shut at the next look (unless removed)
  std::size_t more = 0;
  for (int i = 1; i < 150; i += 3) more += i % 10 == 9 ? 0 : 1;
  EXPECT_EQ(watch.sweep(), more);
  for (int i = 2; i < 150; i += 3) ::close(pairs[i].client);
}

// The thread looks every interval; stop() ends it.
TEST(PeerWatch, ItsThreadLooksEveryInterval) {
  Loopback lo;
  PeerWatch watch(std::chrono::milliseconds(5));
  Pair p = lo.connect();
  watch.add(&p, p.server);
  watch.start();
  ::close(p.client);
  for (int i = 0; i < 400 && watch.woken() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(watch.woken(), 1u);
  watch.stop();
  watch.remove(&p);
  EXPECT_THROW(PeerWatch(std::chrono::milliseconds(0)), Error);
}

}  // namespace
}  // namespace shardtopk::service
