// Updates through `shardtopk serve` (CPU ranks under mpiexec, a free loopback port):
//
//  ServeUpdates: POST /v1/upsert, /v1/delete (ids, filter), /v1/snapshot answer as documented
//    (docs/SERVING.md "Updates"), searches see every acknowledged write, duplicates and bad
//    bodies get 400, exhausted capacity 507, a read-only service 409; /metrics and /v1/info
//    report the update counters.
//  UpdateCrash: SIGKILL of rank 0 (one rank) and of rank 0 or the follower (two ranks) at random
//    (with snapshots being requested throughout, so that kills land while they are written)
//    points of a concurrent write load, over many trials on one storage directory; after each
//    restart every acknowledged write is present (a deleted id absent), and each request that
//    got no answer is there whole or not at all. Also SIGKILL of the job's mpiexec followed by
//    a restart at once (no waiting for the orphaned ranks), which must start and keep the same.
//
// Presence is read through searches: with l2 and random vectors, a row's own vector finds the
// row first at distance 0 exactly when it is live.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/mount.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "serve_support.hpp"
#include "shardtopk/corpus_io.hpp"

namespace shardtopk::test {
namespace {

using ::testing::HasSubstr;

constexpr std::int64_t kDim = 8, kBase = 64;

/// A corpus of kBase random rows with a tenant attribute, and a config over it.
std::string make_service_files(const TempDir& dir, const std::string& storage, long long capacity_rows = 0,
                               const std::string& more_storage_yaml = "") {
  const std::string corpus = dir.file("corpus.h5");
  {
    const std::vector<float> v = random_floats(kBase * kDim, 5);
    std::vector<std::int64_t> tenant(kBase);
    for (std::int64_t i = 0; i < kBase; ++i) tenant[i] = i % 3;
    H5Writer w(corpus);
    w.write_f32("train", v.data(), kBase, kDim);
    w.write_i64("meta/tenant", tenant.data(), kBase, 0);
  }
  std::string storage_yaml;
  if (!storage.empty())
    storage_yaml = "storage:\n  dir: " + storage + "\n  capacity_rows: " + std::to_string(capacity_rows) + "\n" +
                   more_storage_yaml;
  const std::string path = write_config(dir.path(), corpus, "l2", 16, 64, 200, storage_yaml);
  // corpus.attributes, added to the corpus section
  std::string text = read_text(path);
  text.replace(text.find("corpus:\n"), 8, "corpus:\n  attributes: [meta/tenant]\n");
  write_text(path, text);
  return path;
}

std::string upsert_body(const std::vector<std::int64_t>& ids, const std::vector<float>& v,
                        const std::vector<std::int64_t>& tenant) {
  json vecs = json::array();
  for (std::size_t i = 0; i < ids.size(); ++i)
    vecs.push_back(std::vector<float>(v.begin() + i * kDim, v.begin() + (i + 1) * kDim));
  return json{{"ids", ids}, {"vectors", vecs}, {"attributes", {{"tenant", tenant}}}}.dump();
}

/// The binary upsert body: ids (int64), vectors (float32 [n, kDim]), the tenant column (int64).
std::string binary_upsert(const std::vector<std::int64_t>& ids, const std::vector<float>& v,
                          const std::vector<std::int64_t>& tenant) {
  std::string b;
  b.append(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
  b.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  b.append(reinterpret_cast<const char*>(tenant.data()), tenant.size() * 8);
  return b;
}

Reply get(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(30, 0);
  auto r = c.Get(path.c_str());
  Reply out;
  if (r) {
    out.status = r->status;
    out.body = r->body;
  }
  return out;
}

/// For each row vector [n, kDim]: whether the live row with that vector is `ids[i]` (top-1 at
/// distance 0). Queries go in requests of up to 64.
std::vector<bool> present(int port, const std::vector<std::int64_t>& ids, const std::vector<float>& v) {
  std::vector<bool> out;
  for (std::size_t q0 = 0; q0 < ids.size(); q0 += 64) {
    const int nq = static_cast<int>(std::min<std::size_t>(64, ids.size() - q0));
    const Answer a = search_json(port, v.data() + q0 * kDim, nq, kDim, 1);
    if (a.ids.size() != static_cast<std::size_t>(nq)) return std::vector<bool>(ids.size(), false);
    for (int i = 0; i < nq; ++i) out.push_back(a.ids[i] == ids[q0 + i] && a.scores[i] == 0.0f);
  }
  return out;
}

// ------------------------------------------------------------------------------ the API

TEST(ServeUpdates, UpsertDeleteSnapshotAnswerAndSearchesSeeThem) {
  TempDir dir;
  const std::string store = dir.file("store");
  // capacity: every rank holds 32 base rows and 40 slots: 16 free in all
  const std::string cfg = make_service_files(dir, store, 40);
  Server s(cfg, dir.path(), 2);
  ASSERT_TRUE(s.wait_ready());

  const json info = json::parse(get(s.port(), "/v1/info").body);
  EXPECT_EQ(info["writable"], true);
  EXPECT_EQ(info["capacity_rows"], 80);
  EXPECT_EQ(info["live_rows"], kBase);

  // Insert two rows and replace a base row: the search finds them at distance 0.
  const std::vector<float> v = random_floats(3 * kDim, 6);
  Reply r = post(s.port(), "/v1/upsert", upsert_body({1000, 1001, 7}, v, {1, 2, 2}), "application/json");
  ASSERT_EQ(r.status, 200) << r.body;
  const json up = json::parse(r.body);
  EXPECT_EQ(up["upserted"], 3);
  EXPECT_EQ(up["seq"], 1);
  EXPECT_EQ(present(s.port(), {1000, 1001, 7}, v), (std::vector<bool>{true, true, true}));

  // Duplicates and bad bodies: 400 naming the problem; nothing changes.
  r = post(s.port(), "/v1/upsert", upsert_body({5, 5}, random_floats(2 * kDim, 7), {0, 0}), "application/json");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("id 5 appears more than once"));
  r = post(s.port(), "/v1/upsert", R"({"ids":[1],"vectors":[[1,2,3]]})", "application/json");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("must hold 8 numbers"));
  r = post(s.port(), "/v1/upsert", upsert_body({9}, random_floats(kDim, 8), {0}).replace(0, 1, "{\"colour\":1,"),
           "application/json");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("unknown field \\\"colour\\\""));
  r = post(s.port(), "/v1/delete", R"({"ids":[1,2],"filter":{"eq":{"tenant":1}}})", "application/json");
  EXPECT_EQ(r.status, 400);
  r = post(s.port(), "/v1/upsert", R"({"ids":[3],"vectors":[[1,2,3,4,5,6,7,8]]})", "application/json");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("attribute 'tenant' is missing"));
  // A key repeated in one object (the parser would keep the last: another row deleted), a NUL
  // byte (the parser would stop there) and parameters the route does not take: 400.
  r = post(s.port(), "/v1/delete", R"({"ids":[10],"ids":[11]})", "application/json");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("duplicate key"));
  std::string nul = R"({"ids":[20]})";
  nul += '\0';
  nul += R"(, "filter": {"eq": {"tenant": 1}}})";
  r = post(s.port(), "/v1/delete", nul, "application/json");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("NUL byte at offset 12"));
  r = post(s.port(), "/v1/search", std::string(R"({"query":[1,2,3,4,5,6,7,8]})") + '\0' + "junk", "application/json");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("NUL byte"));
  r = post(s.port(), "/v1/delete?filter=%7B%7D", R"({"ids":[31]})", "application/json");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("unknown query parameter 'filter' (allowed: n)"));
  r = post(s.port(), "/v1/snapshot?batch=3", "", "application/json");
  EXPECT_EQ(r.status, 400);

  // Delete by ids (one unknown: not counted), then by filter.
  r = post(s.port(), "/v1/delete", R"({"ids":[1000, 3, 424242]})", "application/json");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["deleted"], 2);
  EXPECT_EQ(json::parse(r.body)["seq"], 2);
  EXPECT_EQ(present(s.port(), {1000, 1001, 7}, v), (std::vector<bool>{false, true, true}));
  r = post(s.port(), "/v1/delete", R"({"filter": {"eq": {"tenant": 2}}})", "application/json");
  ASSERT_EQ(r.status, 200) << r.body;
  // tenant 2: base rows i % 3 == 2 (21), row 7 (replaced with tenant 2) and 1001
  EXPECT_EQ(json::parse(r.body)["deleted"], 23);
  EXPECT_EQ(present(s.port(), {1001, 7}, std::vector<float>(v.begin() + kDim, v.end())),
            (std::vector<bool>{false, false}));

  // /v1/info's rows follow the live rows; base_rows stays the corpus's.
  const json after = json::parse(get(s.port(), "/v1/info").body);
  const std::int64_t live = after["live_rows"];
  EXPECT_EQ(live, 64 + 2 - 2 - 23);
  EXPECT_EQ(after["rows"], live);
  EXPECT_EQ(after["base_rows"], kBase);

  // Capacity: 80 slots; one row more than are free does not fit, as many as are free do.
  const std::int64_t free = 80 - live;
  std::vector<std::int64_t> many, tenants;
  for (std::int64_t i = 0; i <= free; ++i) {
    many.push_back(2000 + i);
    tenants.push_back(0);
  }
  r = post(s.port(), "/v1/upsert", upsert_body(many, random_floats(many.size() * kDim, 9), tenants), "application/json");
  EXPECT_EQ(r.status, 507) << r.body;
  EXPECT_THAT(r.body, HasSubstr("capacity exhausted"));
  many.pop_back();
  tenants.pop_back();
  r = post(s.port(), "/v1/upsert", upsert_body(many, random_floats(many.size() * kDim, 9), tenants), "application/json");
  EXPECT_EQ(r.status, 200) << r.body;

  // A snapshot that fails (a directory where its temporary file goes): 500 naming what failed
  // and the file relative to storage.dir; the reason (an absolute path, a library's call) goes
  // to the log only.
  const std::string blocker = store + "/snapshot-00000000000000000004.h5.tmp";
  std::filesystem::create_directory(blocker);
  r = post(s.port(), "/v1/snapshot", "", "application/json");
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_THAT(r.body, HasSubstr("snapshot failed: internal error at 'snapshot-00000000000000000004.h5.tmp' in "
                                "storage.dir (rank 0's log has the reason)"));
  EXPECT_THAT(r.body, ::testing::Not(HasSubstr(store)));
  std::filesystem::remove(blocker);

  // Snapshot, then metrics and info.
  r = post(s.port(), "/v1/snapshot", "", "application/json");
  ASSERT_EQ(r.status, 200) << r.body;
  const json snap = json::parse(r.body);
  EXPECT_EQ(snap["seq"], 4);
  EXPECT_EQ(snap["rows"], 80);
  EXPECT_EQ(snap["path"], "snapshot-00000000000000000004.h5") << "relative to storage.dir";
  EXPECT_TRUE(std::filesystem::exists(store + "/" + snap["path"].get<std::string>()));
  const std::string m = get(s.port(), "/metrics").body;
  EXPECT_THAT(m, HasSubstr("shardtopk_live_rows 80"));
  EXPECT_THAT(m, HasSubstr("shardtopk_snapshot_seq 4"));
  EXPECT_THAT(m, HasSubstr("shardtopk_log_bytes"));
  EXPECT_THAT(m, HasSubstr("shardtopk_tombstones"));
  EXPECT_EQ(json::parse(get(s.port(), "/v1/info").body)["applied_seq"], 4);
}

// Requests of 4 rows sharing one vector (distinct ids) and deletes of such groups, while
// searches for a group's vector (k = 4) run: a search sees all 4 rows at distance 0 or none
// (never part of a request), all 4 when the upsert was acknowledged before the search began and
// no delete of the group was sent before it ended, none when a delete was acknowledged first.
// storage.dir on a device that fills up (a 4 MiB tmpfs; skipped where this process may not mount
// one): a snapshot then fails with 507 saying the device is full, without the path. Its new log
// segment could not be created, which puts the log in its failed state (docs/STORAGE.md,
// "Errors"): with room again, later writes are refused with 500 saying so and that a restart
// recovers, searches still find every acknowledged row, and after the restart writes and
// snapshots succeed again.
TEST(ServeUpdates, AFullStorageDeviceIsNamedWith507) {
  TempDir dir;
  const std::string small = dir.file("small");
  std::filesystem::create_directory(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=4m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{small};
  const std::string store = small + "/store";
  const std::string cfg = make_service_files(dir, store, 80);
  std::vector<float> v = random_floats(2 * kDim, 31);
  {
    Server s(cfg, dir.path(), 1);
    ASSERT_TRUE(s.wait_ready()) << s.log();
    Reply r = post(s.port(), "/v1/upsert", upsert_body({3000, 3001}, v, {1, 2}), "application/json");
    ASSERT_EQ(r.status, 200) << r.body;

    const std::string filler = small + "/filler";
    {
      std::FILE* f = std::fopen(filler.c_str(), "wb");
      ASSERT_NE(f, nullptr);
      const std::vector<char> block(64 << 10, 'x');
      while (std::fwrite(block.data(), 1, block.size(), f) == block.size() && std::fflush(f) == 0) {
      }
      std::fclose(f);
    }
    r = post(s.port(), "/v1/snapshot", "", "application/json");
    EXPECT_EQ(r.status, 507) << r.body;
    EXPECT_THAT(r.body, HasSubstr("snapshot failed: no space left on storage.dir's device"));
    EXPECT_THAT(r.body, ::testing::Not(HasSubstr(small)));

    std::filesystem::remove(filler);
    const std::vector<float> refused = random_floats(kDim, 32);
    r = post(s.port(), "/v1/upsert", upsert_body({3002}, refused, {1}), "application/json");
    EXPECT_EQ(r.status, 500) << r.body;
    EXPECT_THAT(r.body, HasSubstr("upsert refused: the write-ahead log failed earlier (no space left on storage.dir's "
                                  "device); writes are refused until the service restarts"));
    EXPECT_EQ(present(s.port(), {3000, 3001}, v), (std::vector<bool>{true, true}));
    EXPECT_EQ(present(s.port(), {3002}, refused), (std::vector<bool>{false}));
  }
  Server s(cfg, dir.path(), 1);
  ASSERT_TRUE(s.wait_ready()) << s.log();
  EXPECT_EQ(present(s.port(), {3000, 3001}, v), (std::vector<bool>{true, true}));
  const std::vector<float> w = random_floats(kDim, 33);
  Reply r = post(s.port(), "/v1/upsert", upsert_body({3003}, w, {1}), "application/json");
  EXPECT_EQ(r.status, 200) << r.body;
  r = post(s.port(), "/v1/snapshot", "", "application/json");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(present(s.port(), {3003}, w), (std::vector<bool>{true}));
}

TEST(ServeUpdates, SearchesSeeWholeRequestsAndEveryAcknowledgedOne) {
  TempDir dir;
  const std::string cfg = make_service_files(dir, dir.file("store"), 8192);
  Server s(cfg, dir.path(), 2);
  ASSERT_TRUE(s.wait_ready());
  constexpr int kGroups = 150;
  std::vector<std::vector<float>> vec(kGroups);
  for (int g = 0; g < kGroups; ++g) vec[g] = random_floats(kDim, 100 + g);
  // Per group: upsert acknowledged, delete sent, delete acknowledged (set in this order).
  std::vector<std::atomic<int>> state(kGroups);
  for (auto& x : state) x = 0;
  std::atomic<int> sent{0};
  std::atomic<bool> done{false};
  std::thread writer([&] {
    httplib::Client c("127.0.0.1", s.port());
    for (int g = 0; g < kGroups; ++g) {
      std::vector<std::int64_t> ids{10000 + 4 * g, 10001 + 4 * g, 10002 + 4 * g, 10003 + 4 * g};
      std::vector<float> v;
      for (int i = 0; i < 4; ++i) v.insert(v.end(), vec[g].begin(), vec[g].end());
      sent = g + 1;
      auto r = c.Post("/v1/upsert", upsert_body(ids, v, {0, 1, 2, 0}), "application/json");
      ASSERT_TRUE(r && r->status == 200);
      state[g] = 1;
      if (g % 3 == 2) {  // delete an earlier group
        const int d = g - 2;
        state[d] = 2;
        auto rd = c.Post("/v1/delete", json{{"ids", {10000 + 4 * d, 10001 + 4 * d, 10002 + 4 * d, 10003 + 4 * d}}}.dump(),
                         "application/json");
        ASSERT_TRUE(rd && rd->status == 200);
        state[d] = 3;
      }
    }
    done = true;
  });
  std::mt19937_64 rng(7);
  int searches = 0, whole = 0;
  while (!done || searches < 200) {
    const int n = sent.load();
    if (n == 0) continue;
    const int g = static_cast<int>(rng() % static_cast<std::uint64_t>(n));
    const int before = state[g].load();
    const Answer a = search_json(s.port(), vec[g].data(), 1, kDim, 4);
    const int after = state[g].load();
    ASSERT_EQ(a.ids.size(), 4u);
    int hits = 0;
    for (int i = 0; i < 4; ++i) hits += a.scores[i] == 0.0f && a.ids[i] >= 10000 + 4 * g && a.ids[i] < 10004 + 4 * g;
    EXPECT_TRUE(hits == 0 || hits == 4) << "group " << g << ": " << hits << " of its 4 rows";
    if (before == 1 && after <= 1) EXPECT_EQ(hits, 4) << "group " << g << " acknowledged, not deleted";
    if (before == 3) EXPECT_EQ(hits, 0) << "group " << g << " deleted and acknowledged";
    whole += hits == 4;
    ++searches;
  }
  writer.join();
  std::printf("%d searches during the writes, %d saw a whole group\n", searches, whole);
  EXPECT_GT(whole, 0);
}

TEST(ServeUpdates, BinaryUpsertAnswersAsJsonAndRefusesWrongLengths) {
  TempDir dir;
  const std::string cfg = make_service_files(dir, dir.file("store"), 64);
  Server s(cfg, dir.path(), 2);
  ASSERT_TRUE(s.wait_ready());
  const std::string bin = "application/octet-stream";

  // Two new rows and a replaced base row: the JSON route's answer, and searches see them.
  const std::vector<float> v = random_floats(3 * kDim, 11);
  Reply r = post(s.port(), "/v1/upsert?n=3", binary_upsert({2000, 2001, 5}, v, {1, 0, 2}), bin);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body), (json{{"upserted", 3}, {"seq", 1}}));
  EXPECT_EQ(present(s.port(), {2000, 2001, 5}, v), (std::vector<bool>{true, true, true}));
  // ... and a filter sees the attribute column: tenant 0 holds 2001 (row 5 moved to tenant 2).
  const Reply f = post(s.port(), "/v1/search",
                       json{{"queries", {std::vector<float>(v.begin() + kDim, v.begin() + 2 * kDim)}}, {"k", 1},
                            {"filter", {{"eq", {{"tenant", 0}}}}}}.dump(),
                       "application/json");
  ASSERT_EQ(f.status, 200) << f.body;
  EXPECT_EQ(json::parse(f.body)["ids"][0][0], 2001);

  // Wrong lengths and parameters: 400 naming them; nothing is written.
  std::string body = binary_upsert({3000, 3001}, random_floats(2 * kDim, 12), {0, 0});
  r = post(s.port(), "/v1/upsert?n=2", body.substr(0, body.size() - 8), bin);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("binary upsert body of " + std::to_string(body.size() - 8) + " bytes, but n=2 rows take " +
                                std::to_string(body.size()) + " bytes"));
  r = post(s.port(), "/v1/upsert?n=3", body, bin);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("but n=3 rows take"));
  r = post(s.port(), "/v1/upsert", body, bin);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("needs the query parameter n"));
  r = post(s.port(), "/v1/upsert?n=0", body, bin);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("n=0: a binary upsert needs at least one row"));
  r = post(s.port(), "/v1/upsert?n=two", body, bin);
  EXPECT_EQ(r.status, 400);
  r = post(s.port(), "/v1/upsert?k=2", body, bin);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("unknown query parameter 'k' (allowed: n)"));
  r = post(s.port(), "/v1/upsert?n=1", upsert_body({3000}, random_floats(kDim, 13), {0}), "application/json");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("the query parameter n is for the binary upsert"));
  // The index's checks, as for JSON: duplicates, non-finite values.
  r = post(s.port(), "/v1/upsert?n=2", binary_upsert({7, 7}, random_floats(2 * kDim, 14), {0, 0}), bin);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("id 7 appears more than once"));
  std::vector<float> nan = random_floats(kDim, 15);
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  r = post(s.port(), "/v1/upsert?n=1", binary_upsert({3002}, nan, {0}), bin);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("row id 3002 has a non-finite value"));
  // A snapshot takes no body of either type.
  r = post(s.port(), "/v1/snapshot", "x", bin);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("takes no body"));
  // Binary deletes: n little-endian int64 ids, nothing else; the same checks as JSON.
  auto ids_body = [](const std::vector<std::int64_t>& ids) {
    return std::string(reinterpret_cast<const char*>(ids.data()), 8 * ids.size());
  };
  r = post(s.port(), "/v1/delete", ids_body({3000}), bin);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("a binary delete needs the query parameter n (its ids): POST /v1/delete?n=N"));
  r = post(s.port(), "/v1/delete?n=2", ids_body({3000}), bin);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("binary delete body of 8 bytes, but n=2 ids take 16 bytes"));
  r = post(s.port(), "/v1/delete?n=0", "", bin);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("n=0: a binary delete needs at least one id"));
  r = post(s.port(), "/v1/delete?n=1", json{{"ids", {3000}}}.dump(), "application/json");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("the query parameter n is for the binary delete"));
  r = post(s.port(), "/v1/delete?n=2", ids_body({3001, 3001}), bin);
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("id 3001 appears more than once"));
  EXPECT_EQ(json::parse(get(s.port(), "/v1/info").body)["applied_seq"], 1) << "a refused delete changed the log";
  r = post(s.port(), "/v1/upsert?n=2", binary_upsert({3100, 3101}, random_floats(2 * kDim, 16), {0, 1}), bin);
  ASSERT_EQ(r.status, 200) << r.body;
  r = post(s.port(), "/v1/delete?n=3", ids_body({3100, 3101, 999999}), bin);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["deleted"], 2) << "ids that are not live are not counted";
  EXPECT_EQ(json::parse(r.body)["seq"], 3);
  EXPECT_EQ(json::parse(get(s.port(), "/v1/info").body)["applied_seq"], 3);
  r = post(s.port(), "/v1/snapshot", "", bin);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["seq"], 3);
  const std::vector<float> refused = random_floats(2 * kDim, 12);  // the rows of the refused bodies
  EXPECT_EQ(present(s.port(), {3000}, std::vector<float>(refused.begin(), refused.begin() + kDim)),
            (std::vector<bool>{false}));
}

TEST(ServeUpdates, SnapshotPolicySnapshotsOnceTheLogExceedsItsLimit) {
  TempDir dir;
  const std::string cfg = make_service_files(dir, dir.file("store"), 256, "  snapshot_log_bytes: 3000\n");
  std::vector<std::int64_t> ids;
  std::vector<float> rows;
  {
    Server s(cfg, dir.path(), 2);
    ASSERT_TRUE(s.wait_ready());
    for (int i = 0; i < 20; ++i) {  // 20 records of 4 rows: about 1 KB each
      const std::vector<std::int64_t> g{5000 + 4 * i, 5001 + 4 * i, 5002 + 4 * i, 5003 + 4 * i};
      const std::vector<float> v = random_floats(4 * kDim, 200 + i);
      const Reply r = post(s.port(), "/v1/upsert", upsert_body(g, v, {0, 1, 2, 0}), "application/json");
      ASSERT_EQ(r.status, 200) << r.body;
      ids.insert(ids.end(), g.begin(), g.end());
      rows.insert(rows.end(), v.begin(), v.end());
    }
    // The policy runs after the answers: wait for the snapshot it takes (bounded).
    json info;
    for (int tries = 0; tries < 300; ++tries) {
      info = json::parse(get(s.port(), "/v1/info").body);
      if (info["snapshot_seq"].get<std::int64_t>() > 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_GT(info["snapshot_seq"].get<std::int64_t>(), 0) << "no snapshot after 20 writes past 3000 log bytes";
    EXPECT_THAT(s.log(), HasSubstr("storage.snapshot_log_bytes 3000): snapshot"));
    const std::string m = get(s.port(), "/metrics").body;
    EXPECT_THAT(m, HasSubstr("shardtopk_log_records"));
    EXPECT_EQ(present(s.port(), ids, rows), std::vector<bool>(ids.size(), true));
  }
  // The snapshot is the base now: a start-up needs no corpus file.
  std::filesystem::rename(dir.file("corpus.h5"), dir.file("corpus-moved.h5"));
  Server again(cfg, dir.path(), 1);  // the snapshot, then the log after it
  ASSERT_TRUE(again.wait_ready()) << again.log();
  EXPECT_GT(json::parse(get(again.port(), "/v1/info").body)["snapshot_seq"].get<std::int64_t>(), 0);
  EXPECT_EQ(present(again.port(), ids, rows), std::vector<bool>(ids.size(), true));
}

TEST(ServeUpdates, ReadOnlyServiceAnswers409) {
  TempDir dir;
  const std::string cfg = make_service_files(dir, "");
  Server s(cfg, dir.path(), 1);
  ASSERT_TRUE(s.wait_ready());
  const Reply r = post(s.port(), "/v1/upsert", upsert_body({1}, random_floats(kDim, 1), {0}), "application/json");
  EXPECT_EQ(r.status, 409);
  EXPECT_THAT(r.body, HasSubstr("storage.dir is not set"));
  EXPECT_EQ(post(s.port(), "/v1/snapshot", "", "application/json").status, 409);
  EXPECT_EQ(json::parse(get(s.port(), "/v1/info").body)["writable"], false);
  const std::vector<float> q = random_floats(kDim, 2);
  EXPECT_EQ(search_json(s.port(), q.data(), 1, kDim, 3).ids.size(), 3u);
}

// Fewer live rows than k (a writable index takes k up to its capacity): the binary reply
// carries the counts, unfiltered too, its slots past them padding, and the JSON reply the real
// results only (docs/SERVING.md "Binary protocol").
TEST(ServeUpdates, RepliesWithFewerLiveRowsThanKCarryTheirCounts) {
  TempDir dir;
  const std::string cfg = make_service_files(dir, dir.file("store"));
  Server s(cfg, dir.path(), 1);
  ASSERT_TRUE(s.wait_ready());
  std::vector<std::int64_t> gone;
  for (std::int64_t i = 0; i < kBase - 10; ++i) gone.push_back(i);
  Reply r = post(s.port(), "/v1/delete", json{{"ids", gone}}.dump(), "application/json");
  ASSERT_EQ(r.status, 200) << r.body;
  const int k = 16, live = 10;
  const std::vector<float> q = random_floats(2 * kDim, 10);
  for (const std::string& filter : {std::string(), std::string("&filter=null")}) {
    SCOPED_TRACE(filter.empty() ? "unfiltered" : "filter=null");
    r = post(s.port(), "/v1/search?k=" + std::to_string(k) + filter,
             std::string(reinterpret_cast<const char*>(q.data()), 2 * kDim * 4), "application/octet-stream");
    ASSERT_EQ(r.status, 200) << r.body;
    ASSERT_EQ(r.body.size(), 2u * k * 12 + 2 * 4) << "ids, scores, then the counts";
    for (int i = 0; i < 2; ++i) {
      std::int32_t count = 0;
      std::memcpy(&count, r.body.data() + 2 * k * 12 + 4 * i, 4);
      EXPECT_EQ(count, live);
      std::int64_t first = 0, pad = 0;
      std::memcpy(&first, r.body.data() + 8 * (i * k), 8);
      std::memcpy(&pad, r.body.data() + 8 * (i * k + live), 8);
      EXPECT_GE(first, kBase - 10);
      EXPECT_EQ(pad, std::numeric_limits<std::int64_t>::max());
    }
  }
  const FilteredAnswer a = search_json_filtered(s.port(), q.data(), 2, kDim, k, json(nullptr));
  ASSERT_EQ(a.ids.size(), 2u);
  EXPECT_EQ(a.ids[0].size(), static_cast<std::size_t>(live));
  EXPECT_EQ(a.ids[1].size(), static_cast<std::size_t>(live));
  const json info = json::parse(get(s.port(), "/v1/info").body);
  EXPECT_EQ(info["rows"], live);
  EXPECT_EQ(info["base_rows"], kBase);
}

// Request smuggling: a search whose body, framed by Content-Length (as a proxy in front may
// frame it), holds a delete after an empty chunk. Read as chunked, the delete would run as a
// second request on the connection. Every ambiguous framing is refused with the connection
// closed, and nothing is deleted.
TEST(ServeUpdates, AmbiguouslyFramedRequestsAreRefusedAndTheirConnectionClosed) {
  TempDir dir;
  const std::string cfg = make_service_files(dir, dir.file("store"));
  Server s(cfg, dir.path(), 1);
  ASSERT_TRUE(s.wait_ready());
  const std::string del = R"({"ids":[0,1,2,3]})";
  const std::string smuggled = "0\r\n\r\nPOST /v1/delete HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                               "Content-Length: " + std::to_string(del.size()) + "\r\n\r\n" + del;
  const std::string n = std::to_string(smuggled.size());
  struct Case {
    std::string headers;
    int status;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"Content-Length: " + n + "\r\nTransfer-Encoding: chunked\r\n", 400, "both Transfer-Encoding and Content-Length"},
      {"Transfer-Encoding:\tchunked\r\nContent-Length: " + n + "\r\n", 400, "both Transfer-Encoding and Content-Length"},
      {"Content-Length: " + n + "\r\nTransfer-Encoding: CHUNKED \r\n", 400, "both Transfer-Encoding and Content-Length"},
      {"Content-Length: 5\r\nContent-Length: " + n + "\r\n", 400, "Content-Length given more than once"},
      {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400, "Transfer-Encoding given more than once"},
      {"Transfer-Encoding: chunked, gzip\r\n", 400, "the final coding must be chunked"},
      {"Transfer-Encoding: gzip\r\n", 400, "the final coding must be chunked"},
      {"Transfer-Encoding: gzip, chunked\r\n", 501, "only chunked is understood"},
      {"Transfer-Encoding: chunked \r\n", 400, "white space around the coding"},
      {"Transfer-Encoding: chunked\t\r\n", 400, "white space around the coding"},
  };
  for (const std::string& path : {std::string("/v1/search"), std::string("/v1/info")}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(path + " with " + c.headers);
      const int fd = connect_to(s.port());
      ASSERT_GE(fd, 0);
      const std::string method = path == "/v1/info" ? "GET " : "POST ";
      send_all(fd, method + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + c.headers +
                       "\r\n" + smuggled);
      std::string buf;
      const RawReply r = read_reply(fd, buf);
      EXPECT_EQ(r.status, c.status) << r.error << r.body;
      EXPECT_THAT(r.body, HasSubstr(c.needle));
      EXPECT_EQ(r.headers.count("connection") ? r.headers.at("connection") : "", "close");
      const RawReply next = read_reply(fd, buf, 5);
      EXPECT_EQ(next.status, 0) << "a second reply on the connection: " << next.body;
      ::close(fd);
    }
  }
  const json info = json::parse(get(s.port(), "/v1/info").body);
  EXPECT_EQ(info["live_rows"], kBase) << "a smuggled delete ran";
  EXPECT_EQ(info["applied_seq"], 0);
  // A plain chunked body is still taken.
  const int fd = connect_to(s.port());
  ASSERT_GE(fd, 0);
  const std::vector<float> q = random_floats(kDim, 3);
  const std::string body = json_queries(q.data(), 1, kDim, 3);
  char size[16];
  std::snprintf(size, sizeof size, "%zx", body.size());
  send_all(fd, "POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: "
               "Chunked\r\n\r\n" + std::string(size) + "\r\n" + body + "\r\n0\r\n\r\n");
  std::string buf;
  const RawReply r = read_reply(fd, buf);
  EXPECT_EQ(r.status, 200) << r.error << r.body;
  ::close(fd);
}

// ------------------------------------------------------------------------------ crash tests

/// Stops a service (SIGKILL, as Server's destructor does) and waits until its rank processes
/// are gone: the next one must find the storage directory's lock free.
void kill_and_reap(std::unique_ptr<Server>& s) {
  const auto pids = s->ranks();
  s.reset();
  for (const auto& [rank, pid] : pids) {
    const auto t0 = Clock::now();
    for (;;) {
      std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
      std::string line;
      if (!std::getline(stat, line)) break;  // gone
      const auto close = line.rfind(')');
      if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z') break;  // reaped soon
      if (secs_since(t0) > 30) {
        ADD_FAILURE() << "rank " << rank << " (pid " << pid << ") still running 30 s after SIGKILL";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

/// One write request of the load: its rows (upsert) or ids (delete), and what became of it.
struct Request {
  bool del = false;
  std::vector<std::int64_t> ids;
  std::vector<float> v;  // upsert: [ids, kDim]
  bool acked = false;
};

/// Writers send upserts of 4 new rows (ids of their own) and deletes of 2 of their acknowledged
/// rows until stopped; every request and its outcome is recorded. One more client asks for a
/// snapshot every 20 ms, so that kills also land while snapshots are being written.
class Load {
 public:
  Load(int port, int writers, std::int64_t first_id, std::uint64_t seed) {
    for (int w = 0; w < writers; ++w)
      threads_.emplace_back([this, port, w, first_id, seed] { run(port, w, first_id + 1000000 * w, seed + w); });
    threads_.emplace_back([this, port] { snapshots(port); });
  }
  ~Load() { stop(); }
  void stop() {
    stop_ = true;
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  std::vector<Request> requests() {
    std::lock_guard<std::mutex> l(m_);
    return done_;
  }

 private:
  void run(int port, int w, std::int64_t next_id, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::int64_t> mine;  // this writer's acknowledged live ids
    std::map<std::int64_t, std::vector<float>> vec;
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(10, 0);
    c.set_connection_timeout(2, 0);
    while (!stop_) {
      Request r;
      if (mine.size() >= 8 && rng() % 2 == 0) {
        r.del = true;
        for (int i = 0; i < 2; ++i) {
          const std::size_t at = rng() % mine.size();
          r.ids.push_back(mine[at]);
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(at));
        }
      } else {
        for (int i = 0; i < 4; ++i) r.ids.push_back(next_id++);
        r.v = random_floats(4 * kDim, rng());
      }
      const std::string body = r.del ? json{{"ids", r.ids}}.dump() : upsert_body(r.ids, r.v, {w % 3, 0, 1, 2});
      auto res = c.Post(r.del ? "/v1/delete" : "/v1/upsert", body, "application/json");
      r.acked = res && res->status == 200;
      if (r.acked && !r.del) mine.insert(mine.end(), r.ids.begin(), r.ids.end());
      {
        std::lock_guard<std::mutex> l(m_);
        done_.push_back(r);
      }
      if (!res) break;  // the service is gone
      if (res->status != 200) {  // 503: a rank is gone; anything else is the test's mistake
        if (res->status != 503) ADD_FAILURE() << "write answered " << res->status << ": " << res->body;
        break;
      }
    }
  }

  void snapshots(int port) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(10, 0);
    c.set_connection_timeout(2, 0);
    while (!stop_) {
      auto res = c.Post("/v1/snapshot", "", "application/json");
      if (!res) break;  // the service is gone
      if (res->status != 200) {
        if (res->status != 503) ADD_FAILURE() << "snapshot answered " << res->status << ": " << res->body;
        break;
      }
      ++snapshots_;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 public:
  int snapshots_taken() const { return snapshots_.load(); }

 private:
  std::atomic<int> snapshots_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  std::mutex m_;
  std::vector<Request> done_;
};

/// The crash trials of one rank count: each starts the service on the same storage directory,
/// runs a write load, SIGKILLs a rank at a random point, restarts and checks every request so
/// far; the restarted service carries the next trial's load. With `kill_launcher` the SIGKILL
/// goes to the job's mpiexec instead, and the restart follows at once, as a supervisor's does:
/// the killed job's ranks may still be exiting (and holding the storage directory's lock).
void crash_trials(int ranks, int trials, std::uint64_t seed, bool kill_launcher = false) {
  TempDir dir;
  const std::string cfg = make_service_files(dir, dir.file("store"), 65536);
  std::mt19937_64 rng(seed);
  // What must be live (id -> vector) and what must not, after everything checked so far.
  std::map<std::int64_t, std::vector<float>> live, gone;
  std::int64_t next_first_id = 100000;
  int unacked_total = 0, acked_total = 0, snapshots_total = 0;
  for (int t = 0; t < trials; ++t) {
    SCOPED_TRACE("trial " + std::to_string(t));
    std::vector<Request> reqs;
    int victim = 0;
    {
      auto s = std::make_unique<Server>(cfg, dir.path(), ranks);
      ASSERT_TRUE(s->wait_ready());
      if (t > 0) {  // the previous trial's outcome, now that it has restarted
        std::vector<std::int64_t> ids;
        std::vector<float> v;
        for (const auto& [id, x] : live) {
          ids.push_back(id);
          v.insert(v.end(), x.begin(), x.end());
        }
        std::vector<bool> p = present(s->port(), ids, v);
        for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_TRUE(p[i]) << "id " << ids[i] << " lost";
        ids.clear();
        v.clear();
        for (const auto& [id, x] : gone) {
          ids.push_back(id);
          v.insert(v.end(), x.begin(), x.end());
        }
        p = present(s->port(), ids, v);
        for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_FALSE(p[i]) << "deleted id " << ids[i] << " is back";
      }
      {
        Load load(s->port(), 3, next_first_id, rng());
        std::this_thread::sleep_for(std::chrono::milliseconds(50 + rng() % 300));
        if (kill_launcher) {
          victim = -1;
          kill(s->pid(), SIGKILL);
        } else {
          victim = ranks == 1 ? 0 : static_cast<int>(rng() % 2);
          const auto pids = s->ranks();
          ASSERT_TRUE(pids.count(victim)) << "no rank " << victim << " process";
          kill(pids.at(victim), SIGKILL);
        }
        load.stop();
        reqs = load.requests();
        snapshots_total += load.snapshots_taken();
      }
      EXPECT_NE(s->wait_exit(30), -1) << "the job did not end after rank " << victim << " was killed";
      if (kill_launcher)
        s.reset();  // mpiexec is reaped; its ranks are not waited for
      else
        kill_and_reap(s);
    }
    next_first_id += 10000000;
    // Restart and check this trial's requests.
    auto restarted = std::make_unique<Server>(cfg, dir.path(), ranks);
    Server& s = *restarted;
    ASSERT_TRUE(s.wait_ready()) << "restart after killing " << (victim < 0 ? "mpiexec" : "rank " + std::to_string(victim));
    for (const Request& r : reqs) {
      if (r.del) {
        std::vector<float> v;
        for (auto id : r.ids) v.insert(v.end(), live.at(id).begin(), live.at(id).end());
        const std::vector<bool> p = present(s.port(), r.ids, v);
        const int n = static_cast<int>(std::count(p.begin(), p.end(), true));
        if (r.acked) {
          EXPECT_EQ(n, 0) << "acknowledged delete of " << r.ids[0] << ", " << r.ids[1] << " lost";
        } else {
          EXPECT_TRUE(n == 0 || n == 2) << "delete of " << r.ids[0] << ", " << r.ids[1] << " half applied";
        }
        for (std::size_t i = 0; i < r.ids.size(); ++i) {
          if (p[i]) continue;
          gone[r.ids[i]] = live.at(r.ids[i]);
          live.erase(r.ids[i]);
        }
      } else {
        const std::vector<bool> p = present(s.port(), r.ids, r.v);
        const int n = static_cast<int>(std::count(p.begin(), p.end(), true));
        // A row a later delete of this trial removed is checked with that delete.
        if (r.acked) {
          for (std::size_t i = 0; i < r.ids.size(); ++i) {
            bool deleted_later = false;
            for (const Request& d : reqs)
              if (d.del && std::count(d.ids.begin(), d.ids.end(), r.ids[i])) deleted_later = true;
            if (!deleted_later) EXPECT_TRUE(p[i]) << "acknowledged upsert of id " << r.ids[i] << " lost";
          }
        } else {
          EXPECT_TRUE(n == 0 || n == 4) << "upsert of ids " << r.ids[0] << ".. half applied (" << n << " of 4)";
        }
        for (std::size_t i = 0; i < r.ids.size(); ++i)
          live[r.ids[i]] = std::vector<float>(r.v.begin() + i * kDim, r.v.begin() + (i + 1) * kDim);
      }
      (r.acked ? acked_total : unacked_total) += 1;
    }
    // Deletes were checked after the upserts they follow: rows they removed are gone; rows an
    // upsert put that are absent now (unacknowledged, not applied) are not live.
    std::vector<std::int64_t> ids;
    std::vector<float> v;
    for (const auto& [id, x] : live) {
      ids.push_back(id);
      v.insert(v.end(), x.begin(), x.end());
    }
    const std::vector<bool> p = present(s.port(), ids, v);
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (!p[i]) live.erase(ids[i]);
    std::printf("trial %d (%d rank(s), killed %s): %zu requests, %zu rows live\n", t, ranks,
                victim < 0 ? "mpiexec" : ("rank " + std::to_string(victim)).c_str(), reqs.size(), live.size());
    kill_and_reap(restarted);
  }
  std::printf("%d trials: %d acknowledged and %d unanswered write requests checked; %d snapshots taken meanwhile\n",
              trials, acked_total, unacked_total, snapshots_total);
  EXPECT_GT(snapshots_total, 0) << "no snapshot completed during the loads";
  EXPECT_GT(acked_total, trials);  // the kills came while writes were being acknowledged
}

TEST(UpdateCrash, KillRankZeroOfOneDuringWritesLosesNothingAcknowledged) { crash_trials(1, 12, 1234); }

TEST(UpdateCrash, KillRankZeroOrTheFollowerOfTwoDuringWritesLosesNothingAcknowledged) { crash_trials(2, 10, 4321); }

TEST(UpdateCrash, KillOfTheLauncherThenAnImmediateRestartLosesNothingAcknowledged) {
  crash_trials(1, 5, 5678, /*kill_launcher=*/true);
  crash_trials(2, 5, 8765, /*kill_launcher=*/true);
}

}  // namespace
}  // namespace shardtopk::test
