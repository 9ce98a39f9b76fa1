// The HTTP front end's parts alone (no server): the route table (every route is found by its
// exact path and nothing else is, each takes the methods and bodies docs/SERVING.md gives it, and
// the role its key must hold) and the default number of event loops.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

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

}  // namespace
}  // namespace shardtopk::service
