// The service's security parts alone: the keys file and its digests, new keys, the key ring's
// decisions (401 / 403 / 429) and reloads, the rate limiter, the audit log and the TLS files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "service/api_keys.hpp"
#include "service/audit_log.hpp"
#include "service/exposure.hpp"
#include "service/key_ring.hpp"
#include "service/rate_limiter.hpp"
#include "service/tls.hpp"
#include "test_support.hpp"
#include "tls_support.hpp"

using namespace shardtopk;
using namespace shardtopk::service;
using ::testing::AllOf;
using ::testing::HasSubstr;
using test::error_of;

namespace {

std::string hex_of(const std::string& key) { return to_hex(sha256(key.data(), key.size())); }

// ------------------------------------------------------------------------------ digests and keys

TEST(ApiKeys, Sha256MatchesTheStandardVectors) {
  EXPECT_EQ(hex_of("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex_of(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(ApiKeys, DigestsCompareEqualOnlyWhenEveryByteIs) {
  const Sha256 a = sha256("k", 1);
  Sha256 b = a;
  EXPECT_TRUE(equal_digests(a, b));
  for (std::size_t i : {0u, 17u, 31u}) {
    b = a;
    b[i] ^= 0x80;
    EXPECT_FALSE(equal_digests(a, b)) << i;
  }
}

TEST(ApiKeys, ParsesLinesCommentsAndOptions) {
  const std::string text = "# keys of the test service\n\n"
                           "reader read " + hex_of("r-key") + "\n"
                           "  ingest\twrite " + hex_of("w-key") + " rate=50 burst=100   # the loader\r\n"
                           "ops admin " + hex_of("a-key") + " burst=3 rate=2.5\n"
                           "slow read " + hex_of("s-key") + " rate=20\n";
  const std::vector<KeySpec> k = parse_key_specs(text, "keys");
  ASSERT_EQ(k.size(), 4u);
  EXPECT_EQ(k[0].name, "reader");
  EXPECT_EQ(k[0].role, Role::kRead);
  EXPECT_EQ(k[0].rate, 0);
  EXPECT_EQ(k[0].line, 3);
  EXPECT_TRUE(equal_digests(k[0].digest, sha256("r-key", 5)));
  EXPECT_EQ(k[1].role, Role::kWrite);
  EXPECT_EQ(k[1].rate, 50);
  EXPECT_EQ(k[1].burst, 100);
  EXPECT_EQ(k[2].role, Role::kAdmin);
  EXPECT_EQ(k[2].rate, 2.5);
  EXPECT_EQ(k[2].burst, 3);
  EXPECT_EQ(k[3].burst, 20) << "burst defaults to one second's worth";
  EXPECT_TRUE(parse_key_specs("# none yet\n\n", "keys").empty());
}

struct BadKeys {
  const char* name;
  std::string text;
  std::vector<std::string> expect;
};
std::ostream& operator<<(std::ostream& o, const BadKeys& b) { return o << b.name; }

class ApiKeysBad : public ::testing::TestWithParam<BadKeys> {};

TEST_P(ApiKeysBad, NamesTheLineAndTheProblem) {
  const BadKeys& b = GetParam();
  const std::string e = error_of([&] { parse_key_specs(b.text, "/etc/keys"); });
  for (const std::string& s : b.expect) EXPECT_THAT(e, HasSubstr(s));
}

const std::string kH = hex_of("key-1"), kH2 = hex_of("key-2");
INSTANTIATE_TEST_SUITE_P(
    Cases, ApiKeysBad,
    ::testing::Values(
        BadKeys{"unknown_role", "a reader " + kH + "\n", {"/etc/keys:1:", "role 'reader' unknown", "read, write, admin"}},
        BadKeys{"upper_hex", "# c\na read " + std::string(64, 'A') + "\n", {"/etc/keys:2:", "64 lowercase hex digits", "sha256sum"}},
        BadKeys{"short_hex", "a read abc123\n", {"'abc123'", "64 lowercase hex"}},
        BadKeys{"key_not_digest", "a read stk_thekeyitselfwhichmustnotbehere\n", {"not 64 lowercase hex"}},
        BadKeys{"too_few_fields", "a read\n", {"/etc/keys:1:", "expected NAME ROLE SHA256"}},
        BadKeys{"bad_name", "a/b read " + kH + "\n", {"key name 'a/b'", "letters, digits"}},
        BadKeys{"long_name", std::string(65, 'n') + " read " + kH + "\n", {"1 .. 64 characters"}},
        BadKeys{"dup_name", "a read " + kH + "\na write " + kH2 + "\n", {"/etc/keys:2:", "'a' given twice (lines 1 and 2)"}},
        BadKeys{"dup_digest", "a read " + kH + "\nb write " + kH + "\n", {"/etc/keys:2:", "also line 1's"}},
        BadKeys{"unknown_option", "a read " + kH + " quota=5\n", {"unknown option 'quota=5'", "rate=R, burst=B"}},
        BadKeys{"bare_word", "a read " + kH + " fast\n", {"unknown option 'fast'"}},
        BadKeys{"zero_rate", "a read " + kH + " rate=0\n", {"rate=0 out of range"}},
        BadKeys{"negative_rate", "a read " + kH + " rate=-3\n", {"rate=-3 out of range"}},
        BadKeys{"word_rate", "a read " + kH + " rate=fast\n", {"rate", "expected a number", "'fast'"}},
        BadKeys{"huge_rate", "a read " + kH + " rate=1e9\n", {"out of range", "1000000"}},
        BadKeys{"rate_twice", "a read " + kH + " rate=1 rate=2\n", {"rate given twice"}},
        BadKeys{"burst_alone", "a read " + kH + " burst=4\n", {"burst=4 without rate=R"}},
        BadKeys{"zero_burst", "a read " + kH + " rate=5 burst=0\n", {"burst=0 out of range"}},
        BadKeys{"fraction_burst", "a read " + kH + " rate=5 burst=1.5\n", {"burst=1.5 out of range", "whole number"}},
        BadKeys{"nul_byte", std::string("a read ") + kH + std::string(1, '\0') + "\n", {"/etc/keys", "NUL"}}),
    [](const ::testing::TestParamInfo<BadKeys>& i) { return std::string(i.param.name); });

TEST(ApiKeys, NewKeysAreRandomAndTheirLinesParse) {
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    const std::string k = generate_key();
    ASSERT_EQ(k.size(), 47u) << k;
    EXPECT_EQ(k.rfind("stk_", 0), 0u) << k;
    EXPECT_EQ(k.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", 4), std::string::npos);
    EXPECT_TRUE(seen.insert(k).second) << "a key came twice: " << k;
  }
  const std::string key = generate_key();
  const std::string line = key_line("ingest", "write", key, 40, 80);
  EXPECT_EQ(line.find(key), std::string::npos) << "the line must not hold the key";
  const std::vector<KeySpec> k = parse_key_specs(line + "\n" + key_line("ops", "admin", generate_key()), "generated");
  ASSERT_EQ(k.size(), 2u);
  EXPECT_TRUE(equal_digests(k[0].digest, sha256(key.data(), key.size())));
  EXPECT_EQ(k[0].role, Role::kWrite);
  EXPECT_EQ(k[0].rate, 40);
  EXPECT_EQ(k[0].burst, 80);
  EXPECT_EQ(k[1].rate, 0);
  EXPECT_THAT(error_of([] { key_line("x y", "read", "k"); }), HasSubstr("key name 'x y'"));
  EXPECT_THAT(error_of([] { key_line("x", "root", "k"); }), HasSubstr("role 'root' unknown"));
  EXPECT_THAT(error_of([] { key_line("x", "read", "k", -1); }), HasSubstr("rate=-1 out of range"));
}

// ------------------------------------------------------------------------------ rate limiter

TEST(RateLimiter, AdmitsTheBurstThenOnePerInterval) {
  RateLimiter r(10, 3);  // 100 ms apart, 3 at once
  const std::int64_t t0 = 1'000'000'000;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r.take(t0), 0) << i;
  const std::int64_t wait = r.take(t0);
  EXPECT_EQ(wait, 100'000'000);
  EXPECT_EQ(r.take(t0 + 99'000'000), 1'000'000);
  EXPECT_EQ(r.take(t0 + 100'000'000), 0);
  EXPECT_GT(r.take(t0 + 100'000'000), 0);
  EXPECT_EQ(r.take(t0 + 10'000'000'000), 0) << "a quiet time refills the burst";
  EXPECT_EQ(r.take(t0 + 10'000'000'000), 0);
  EXPECT_EQ(r.take(t0 + 10'000'000'000), 0);
  EXPECT_GT(r.take(t0 + 10'000'000'000), 0);
}

TEST(RateLimiter, ConcurrentTakersGetExactlyTheBurst) {
  // Threads released together, each taking more than the burst: no update may be lost.
  constexpr int kBurst = 400000;
  RateLimiter r(1, kBurst);
  std::atomic<int> admitted{0}, ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&] {
      ready.fetch_add(1);
      while (!go.load()) {
      }
      int mine = 0;
      for (int i = 0; i < kBurst / 2; ++i)
        if (r.take(5'000'000'000) == 0) ++mine;
      admitted.fetch_add(mine);
    });
  while (ready.load() < 4) std::this_thread::yield();
  go = true;
  for (auto& x : th) x.join();
  EXPECT_EQ(admitted.load(), kBurst);
}

TEST(RateLimiter, ExtremeRatesAndBurstsStayLimits) {
  // The keys file allows any rate above 0 and bursts up to 10^6: an interval or an allowance
  // beyond int64 nanoseconds must still limit, not wrap into "no limit" or "never".
  const std::int64_t t0 = 1'000'000'000;
  RateLimiter slow(1e-10, 1);  // one request per 317 years
  EXPECT_EQ(slow.take(t0), 0);
  EXPECT_GT(slow.take(t0), 0) << "a tiny rate admits one request, not all of them";
  EXPECT_GT(slow.take(t0 + 1'000'000'000), 0);
  RateLimiter floor(1e-300, 1);
  EXPECT_EQ(floor.take(t0), 0);
  EXPECT_GT(floor.take(t0), 0);
  RateLimiter wide(1e-4, 1e6);  // a burst worth 10^10 s of the rate
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(wide.take(t0), 0) << "request " << i << " of a burst of 10^6";
}

// ------------------------------------------------------------------------------ key ring

class KeyRingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path = dir.file("keys");
    test::write_text(path, "reader read " + hex_of("r-key") + "\nwriter write " + hex_of("w-key") + "\nops admin " +
                               hex_of("a-key") + "\nlimited read " + hex_of("l-key") + " rate=1 burst=2\n");
  }
  test::TempDir dir;
  std::string path;
};

TEST_F(KeyRingTest, RefusesMissingMalformedAndUnknownKeys) {
  KeyRing ring(path);
  EXPECT_EQ(ring.size(), 4u);
  EXPECT_EQ(ring.check(nullptr, 0, Role::kNone, 0).status, 200) << "health needs no key";
  Access a = ring.check(nullptr, 0, Role::kRead, 0);
  EXPECT_EQ(a.status, 401);
  EXPECT_THAT(a.message, HasSubstr("Authorization: Bearer KEY"));
  for (const char* h : {"Basic cmVhZGVyOnI=", "Bearer", "Bearer ", "Bearer r-key extra", "Bearerr-key", "r-key"}) {
    a = ring.check(h, 1, Role::kRead, 0);
    EXPECT_EQ(a.status, 401) << h;
    EXPECT_THAT(a.message, HasSubstr("not 'Bearer KEY'")) << h;
  }
  a = ring.check("Bearer nope", 1, Role::kRead, 0);
  EXPECT_EQ(a.status, 401);
  EXPECT_EQ(a.message, "unknown API key");
  EXPECT_EQ(a.key, "");
  EXPECT_EQ(a.token_prefix, hex_of("nope").substr(0, 8));
  EXPECT_EQ(ring.check("Bearer r-key", 2, Role::kRead, 0).status, 401) << "two Authorization headers";
  EXPECT_EQ(ring.check(("Bearer " + std::string(600, 'x')).c_str(), 1, Role::kRead, 0).status, 401);
}

TEST_F(KeyRingTest, RolesAreOrdered) {
  KeyRing ring(path);
  struct Case {
    const char* header;
    Role needed;
    int status;
  };
  for (const Case& c : {Case{"Bearer r-key", Role::kRead, 200}, Case{"bearer  r-key ", Role::kRead, 200},
                        Case{"Bearer r-key", Role::kWrite, 403}, Case{"Bearer r-key", Role::kAdmin, 403},
                        Case{"Bearer w-key", Role::kRead, 200}, Case{"Bearer w-key", Role::kWrite, 200},
                        Case{"Bearer w-key", Role::kAdmin, 403}, Case{"Bearer a-key", Role::kAdmin, 200},
                        Case{"Bearer a-key", Role::kRead, 200}}) {
    const Access a = ring.check(c.header, 1, c.needed, 0);
    EXPECT_EQ(a.status, c.status) << c.header << " needing " << to_string(c.needed);
  }
  const Access a = ring.check("Bearer r-key", 1, Role::kWrite, 0);
  EXPECT_EQ(a.key, "reader");
  EXPECT_EQ(a.message, "key 'reader' has role read; this route needs role write");
}

TEST_F(KeyRingTest, RateLimitIsPerKey) {
  KeyRing ring(path);
  const std::int64_t t = 7'000'000'000;
  EXPECT_EQ(ring.check("Bearer l-key", 1, Role::kRead, t).status, 200);
  EXPECT_EQ(ring.check("Bearer l-key", 1, Role::kRead, t).status, 200);
  const Access a = ring.check("Bearer l-key", 1, Role::kRead, t);
  EXPECT_EQ(a.status, 429);
  EXPECT_EQ(a.retry_after_s, 1);
  EXPECT_THAT(a.message, AllOf(HasSubstr("'limited'"), HasSubstr("1 requests/s, burst 2"), HasSubstr("retry after 1 s")));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(ring.check("Bearer r-key", 1, Role::kRead, t).status, 200);
  EXPECT_EQ(ring.check("Bearer l-key", 1, Role::kRead, t + 1'000'000'000).status, 200);
  // The role is checked first: a request refused for its role spends nothing of the limit.
  const std::int64_t later = t + 100'000'000'000;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ring.check("Bearer l-key", 1, Role::kWrite, later).status, 403);
  EXPECT_EQ(ring.check("Bearer l-key", 1, Role::kRead, later).status, 200);
  EXPECT_EQ(ring.check("Bearer l-key", 1, Role::kRead, later).status, 200);
  EXPECT_EQ(ring.check("Bearer l-key", 1, Role::kRead, later).status, 429);
}

TEST_F(KeyRingTest, ATinyRateLimitsAndSaysWhenToRetry) {
  test::write_text(path, "tiny read " + hex_of("t-key") + " rate=1e-10\n");
  KeyRing ring(path);
  const std::int64_t t = 7'000'000'000;
  EXPECT_EQ(ring.check("Bearer t-key", 1, Role::kRead, t).status, 200);
  const Access a = ring.check("Bearer t-key", 1, Role::kRead, t);
  EXPECT_EQ(a.status, 429);
  EXPECT_GT(a.retry_after_s, 1'000'000'000) << "decades, not a wrapped-around number";
}

TEST_F(KeyRingTest, ReloadRevokesAndABadFileKeepsTheOldKeys) {
  KeyRing ring(path);
  const std::int64_t t = 9'000'000'000;
  ring.check("Bearer l-key", 1, Role::kRead, t);
  ring.check("Bearer l-key", 1, Role::kRead, t);
  test::write_text(path, "writer write " + hex_of("w-key") + "\nlimited read " + hex_of("l-key") +
                             " rate=1 burst=2\nnewbie read " + hex_of("n-key") + "\n");
  std::string msg;
  ASSERT_TRUE(ring.reload(&msg)) << msg;
  EXPECT_THAT(msg, HasSubstr("3 key(s) in force"));
  EXPECT_EQ(ring.check("Bearer r-key", 1, Role::kRead, t).status, 401) << "removed: revoked";
  EXPECT_EQ(ring.check("Bearer n-key", 1, Role::kRead, t).status, 200) << "added";
  EXPECT_EQ(ring.check("Bearer l-key", 1, Role::kRead, t).status, 429) << "an unchanged key keeps its limiter";
  std::thread([&] {  // another thread sees the same keys
    EXPECT_EQ(ring.check("Bearer r-key", 1, Role::kRead, t).status, 401);
    EXPECT_EQ(ring.check("Bearer n-key", 1, Role::kRead, t).status, 200);
  }).join();

  test::write_text(path, "writer write " + hex_of("w-key") + "\nbroken reed " + hex_of("b-key") + "\n");
  EXPECT_FALSE(ring.reload(&msg));
  EXPECT_THAT(msg, AllOf(HasSubstr(path + ":2:"), HasSubstr("role 'reed'"), HasSubstr("previous 3 key(s) stay in force")));
  EXPECT_EQ(ring.check("Bearer n-key", 1, Role::kRead, t).status, 200);
  std::remove(path.c_str());
  EXPECT_FALSE(ring.reload(&msg));
  EXPECT_THAT(msg, AllOf(HasSubstr(path), HasSubstr("cannot be read")));
  EXPECT_EQ(ring.check("Bearer w-key", 1, Role::kWrite, t).status, 200);
}

TEST_F(KeyRingTest, AnUnreadableOrBadFileStopsStartUp) {
  EXPECT_THAT(error_of([&] { KeyRing r(dir.file("none")); }),
              AllOf(HasSubstr("service.auth.keys_file '" + dir.file("none") + "'"), HasSubstr("cannot be read")));
  test::write_text(path, "x write " + hex_of("a") + " rate=0\n");
  EXPECT_THAT(error_of([&] { KeyRing r(path); }), HasSubstr(path + ":1: rate=0"));
  test::write_text(path, "x write " + hex_of("a") + "\n");
  ::chmod(path.c_str(), 0666);
  KeyRing r(path);
  ASSERT_EQ(r.warnings().size(), 1u);
  EXPECT_THAT(r.warnings()[0], HasSubstr("writable by its group or by others"));
}

TEST_F(KeyRingTest, ADirectoryIsNotAnEmptyKeysFile) {
  // Reading a directory yields no bytes: taken as a file, it would revoke every key in silence.
  const std::string sub = dir.file("keys.d");
  ASSERT_EQ(::mkdir(sub.c_str(), 0700), 0);
  EXPECT_THAT(error_of([&] { KeyRing r(sub); }),
              AllOf(HasSubstr("service.auth.keys_file '" + sub + "'"), HasSubstr("is a directory")));
  KeyRing ring(path);
  std::remove(path.c_str());
  ASSERT_EQ(::mkdir(path.c_str(), 0700), 0);
  std::string msg;
  EXPECT_FALSE(ring.reload(&msg));
  EXPECT_THAT(msg, AllOf(HasSubstr("is a directory"), HasSubstr("previous 4 key(s) stay in force")));
  EXPECT_EQ(ring.check("Bearer r-key", 1, Role::kRead, 0).status, 200);
}

// A keys file an editor saved with a UTF-8 byte order mark: the mark is not part of the first
// key's name.
TEST_F(KeyRingTest, AByteOrderMarkIsNotPartOfTheFirstName) {
  test::write_text(path, "\xEF\xBB\xBFreader read " + hex_of("r-key") + "\n");
  KeyRing ring(path);
  EXPECT_EQ(ring.check("Bearer r-key", 1, Role::kRead, 0).status, 200);
  EXPECT_EQ(ring.check("Bearer r-key", 1, Role::kRead, 0).key, "reader");
}

// A FIFO as the keys file: start-up and reload are refused at once, without waiting for a writer
// (a reload blocked on it would never end, and no later SIGHUP could revoke a key).
TEST_F(KeyRingTest, AFifoIsRefusedWithoutWaitingForAWriter) {
  const std::string fifo = dir.file("keys.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(error_of([&] { KeyRing r(fifo); }),
              HasSubstr("service.auth.keys_file '" + fifo + "' is a FIFO, not a regular file"));
  KeyRing ring(path);
  std::remove(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  std::string msg;
  EXPECT_FALSE(ring.reload(&msg));
  EXPECT_THAT(msg, AllOf(HasSubstr("is a FIFO"), HasSubstr("previous 4 key(s) stay in force")));
  // the next reload, from a regular file again, takes effect
  std::remove(path.c_str());
  test::write_text(path, "r read " + hex_of("r-key") + "\n");
  EXPECT_TRUE(ring.reload(&msg)) << msg;
  EXPECT_EQ(ring.check("Bearer r-key", 1, Role::kRead, 0).status, 200);
  EXPECT_EQ(ring.check("Bearer w-key", 1, Role::kWrite, 0).status, 401);
}

// ------------------------------------------------------------------------------ audit log

AuditRecord record(int i) {
  AuditRecord r;
  r.time = std::chrono::system_clock::time_point(std::chrono::seconds(1'800'000'000) + std::chrono::microseconds(i));
  r.key = "ingest";
  r.route = "/v1/upsert";
  r.method = "POST";
  r.status = 200;
  r.rows = 4;
  r.seq = 100 + i;
  r.client = "127.0.0.1:5000";
  return r;
}

TEST(AuditLog, FormatsOneJsonLine) {
  AuditRecord r = record(7);
  EXPECT_EQ(AuditLog::format(r), R"({"time":"2027-01-15T08:00:00.000007Z","key":"ingest","route":"/v1/upsert",)"
                                 R"("method":"POST","status":200,"rows":4,"seq":107,"client":"127.0.0.1:5000"})");
  r.key.clear();
  r.token_prefix = "0badc0de";
  r.rows = r.seq = -1;
  r.status = 401;
  r.why = "unknown API key \"\n";
  const nlohmann::json j = nlohmann::json::parse(AuditLog::format(r));
  EXPECT_TRUE(j["key"].is_null());
  EXPECT_TRUE(j["rows"].is_null() && j["seq"].is_null());
  EXPECT_EQ(j["token"], "0badc0de");
  EXPECT_EQ(j["why"], "unknown API key \"\n");
  EXPECT_EQ(AuditLog::format(r).find('\n'), std::string::npos);
}

TEST(AuditLog, EveryLineIsWrittenBeforeItsCallback) {
  test::TempDir dir;
  const std::string path = dir.file("audit.log");
  std::atomic<int> durable{0}, failed{0};
  std::atomic<int> lines_at_callback_min{1 << 30};
  {
    AuditLog log(path);
    std::vector<std::thread> th;
    for (int t = 0; t < 4; ++t)
      th.emplace_back([&, t] {
        for (int i = 0; i < 250; ++i)
          log.append(record(t * 1000 + i), [&, path](bool ok) {
            (ok ? durable : failed).fetch_add(1);
            // The line is in the file when its callback runs.
            const int lines = test::count_of(test::read_text(path), "\n");
            int cur = lines_at_callback_min.load();
            while (lines < cur && !lines_at_callback_min.compare_exchange_weak(cur, lines)) {}
          });
      });
    for (auto& x : th) x.join();
  }
  EXPECT_EQ(durable.load(), 1000);
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GE(lines_at_callback_min.load(), 1);
  const std::string text = test::read_text(path);
  EXPECT_EQ(test::count_of(text, "\n"), 1000);
  std::set<std::int64_t> seqs;
  std::size_t at = 0;
  for (std::size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
    seqs.insert(nlohmann::json::parse(text.substr(at, nl - at))["seq"].get<std::int64_t>());
  EXPECT_EQ(seqs.size(), 1000u);
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(AuditLog, ReopensAfterRotationAndReportsFailures) {
  test::TempDir dir;
  const std::string path = dir.file("audit.log");
  EXPECT_THAT(error_of([&] { AuditLog l(dir.file("no/such/dir/audit.log")); }),
              AllOf(HasSubstr("service.audit_log '" + dir.file("no/such/dir/audit.log") + "'"), HasSubstr("cannot be opened")));
  {
    AuditLog log(path);
    std::atomic<int> n{0};
    log.append(record(1), [&](bool) { n++; });
    while (n.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(std::rename(path.c_str(), (path + ".1").c_str()), 0);
    std::string msg;
    EXPECT_TRUE(log.reopen(&msg)) << msg;
    log.append(record(2), [&](bool) { n++; });
    while (n.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(test::count_of(test::read_text(path + ".1"), "\n"), 1);
  EXPECT_EQ(test::count_of(test::read_text(path), "\n"), 1);

  // A FIFO is refused at once (its writes would block with nothing reading them), not opened
  const std::string fifo = dir.file("audit.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(test::error_of([&] { AuditLog log(fifo); }),
              HasSubstr("service.audit_log '" + fifo + "' is a FIFO, not a file"));

  AuditLog full("/dev/full");  // every write fails with ENOSPC
  std::atomic<int> result{-1};
  full.append(record(3), [&](bool ok) { result = ok ? 1 : 0; });
  while (result.load() < 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(result.load(), 0);
  EXPECT_THAT(full.failure(), AllOf(HasSubstr("/dev/full"), HasSubstr("write: No space left on device")));
}

// A batch of lines cut short by the disk (here a file-size limit: the write stops part-way, then
// fails with EFBIG) leaves no half line: the file is cut back to where the batch began, and a
// line left unterminated by anything else is ended when the file is opened. Every line stays
// one JSON object, before and after the reopen that lets writes through again.
TEST(AuditLog, ALineCutShortByTheDiskLeavesNoHalfLine) {
  test::TempDir dir;
  const std::string path = dir.file("audit.log");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto wait_for = [](AuditLog& log, int i) {
      std::atomic<int> r{-1};
      log.append(record(i), [&](bool ok) { r = ok ? 1 : 0; });
      while (r.load() < 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return r.load();
    };
    AuditLog log(path);
    if (wait_for(log, 1) != 1) _exit(2);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) _exit(3);
    rlimit lim{};
    if (getrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(4);
    const rlim_t hard = lim.rlim_max;
    std::signal(SIGXFSZ, SIG_IGN);
    lim.rlim_cur = static_cast<rlim_t>(st.st_size) + 40;  // part of the next line fits
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(5);
    if (wait_for(log, 2) != 0) _exit(6);
    lim.rlim_cur = hard;
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(7);
    std::string msg;
    if (!log.reopen(&msg)) _exit(8);
    if (wait_for(log, 3) != 1) _exit(9);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  ASSERT_EQ(WEXITSTATUS(status), 0) << "the child's step that failed";
  const std::string text = test::read_text(path);
  int lines = 0;
  for (std::size_t at = 0, nl; at < text.size(); at = nl + 1) {
    nl = text.find('\n', at);
    ASSERT_NE(nl, std::string::npos) << "the last line is unterminated:\n" << text;
    EXPECT_NO_THROW((void)nlohmann::json::parse(text.substr(at, nl - at))) << "line " << lines + 1 << ":\n" << text;
    ++lines;
  }
  EXPECT_EQ(lines, 2) << text;  // records 1 and 3; record 2's cut line was taken back out
  // A file that ends in an unterminated line (a crash in a write) gets it ended at open.
  test::write_text(path, text + "{\"time\": \"2026");
  {
    AuditLog log(path);
    std::atomic<int> n{0};
    log.append(record(4), [&](bool) { n++; });
    while (n.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::string after = test::read_text(path);
  EXPECT_EQ(test::count_of(after, "\n"), 4) << after;
  EXPECT_NE(after.find("{\"time\": \"2026\n{"), std::string::npos) << after;
}

// ------------------------------------------------------------------------------ TLS files

class TlsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::have_certtool()) GTEST_SKIP() << "certtool (Debian gnutls-bin) is not installed";
    pki = test::make_test_pki(dir.path());
  }
  test::TempDir dir;
  test::TestPki pki;
};

TEST_F(TlsFilesTest, AcceptsAValidPairAndSaysWhatItServes) {
  ::chmod(pki.key_pem.c_str(), 0600);
  const TlsFiles t = load_tls_files(pki.cert_pem, pki.key_pem);
  EXPECT_THAT(t.summary, AllOf(HasSubstr("TLS 1.2/1.3"), HasSubstr("CN=localhost"), HasSubstr("valid until")));
  EXPECT_THAT(t.cert_pem, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_TRUE(t.warnings.empty()) << t.warnings[0];
  ::chmod(pki.key_pem.c_str(), 0644);
  const TlsFiles w = load_tls_files(pki.cert_pem, pki.key_pem, std::chrono::system_clock::now() + std::chrono::hours(24 * 350));
  ASSERT_EQ(w.warnings.size(), 2u);
  EXPECT_THAT(w.warnings[0], HasSubstr("in less than 30 days"));
  EXPECT_THAT(w.warnings[1], HasSubstr("readable by its group or by others"));
}

TEST_F(TlsFilesTest, BadFilesAreRefusedByName) {
  const std::string cert = "service.tls.cert_file '" + pki.cert_pem + "'", key = "service.tls.key_file '";
  EXPECT_THAT(error_of([&] { load_tls_files(dir.file("none.pem"), pki.key_pem); }),
              AllOf(HasSubstr("service.tls.cert_file '" + dir.file("none.pem") + "'"), HasSubstr("cannot be read")));
  EXPECT_THAT(error_of([&] { load_tls_files(pki.cert_pem, dir.file("none.key")); }),
              AllOf(HasSubstr(key + dir.file("none.key") + "'"), HasSubstr("cannot be read")));
  test::write_text(dir.file("garbage.pem"), "hello\n");
  EXPECT_THAT(error_of([&] { load_tls_files(dir.file("garbage.pem"), pki.key_pem); }),
              AllOf(HasSubstr(dir.file("garbage.pem")), HasSubstr("no PEM certificate")));
  test::write_text(dir.file("empty.pem"), "");
  EXPECT_THAT(error_of([&] { load_tls_files(dir.file("empty.pem"), pki.key_pem); }), HasSubstr("is empty"));
  // A FIFO is refused without waiting for a writer; a directory is named as such (not "empty")
  ASSERT_EQ(::mkfifo(dir.file("fifo.pem").c_str(), 0600), 0);
  EXPECT_THAT(error_of([&] { load_tls_files(dir.file("fifo.pem"), pki.key_pem); }),
              HasSubstr("service.tls.cert_file '" + dir.file("fifo.pem") + "' is a FIFO, not a regular file"));
  EXPECT_THAT(error_of([&] { load_tls_files(pki.cert_pem, dir.file("fifo.pem")); }),
              HasSubstr("service.tls.key_file '" + dir.file("fifo.pem") + "' is a FIFO, not a regular file"));
  EXPECT_THAT(error_of([&] { load_tls_files(dir.path(), pki.key_pem); }), HasSubstr("is a directory, not a regular file"));
  EXPECT_THAT(error_of([&] { load_tls_files(pki.expired_pem, pki.key_pem); }),
              AllOf(HasSubstr("service.tls.cert_file '" + pki.expired_pem + "'"), HasSubstr("CN=localhost"),
                    HasSubstr("expired on 2020-02-01 00:00:00 UTC")));
  EXPECT_THAT(error_of([&] {
                load_tls_files(pki.cert_pem, pki.key_pem, std::chrono::system_clock::now() + std::chrono::hours(24 * 366));
              }),
              HasSubstr("expired on"));
  EXPECT_THAT(error_of([&] { load_tls_files(pki.cert_pem, pki.other_key_pem); }),
              AllOf(HasSubstr(key + pki.other_key_pem + "' does not go with " + cert),
                    HasSubstr("the key is not the certificate's")));
  EXPECT_THAT(error_of([&] { load_tls_files(pki.cert_pem, pki.cert_pem); }),
              AllOf(HasSubstr(key + pki.cert_pem + "'"), HasSubstr("not a PEM private key")));
  ASSERT_EQ(std::system(("certtool --load-privkey " + pki.key_pem + " --to-p8 --password secret --no-text --outfile " +
                         dir.file("enc.key") + " >/dev/null 2>&1").c_str()), 0);
  EXPECT_THAT(error_of([&] { load_tls_files(pki.cert_pem, dir.file("enc.key")); }),
              AllOf(HasSubstr(dir.file("enc.key")), HasSubstr("encrypted")));
}

// ------------------------------------------------------------------------------ exposure

TEST(Exposure, LoopbackAddresses) {
  for (const char* h : {"127.0.0.1", "127.3.2.1", "::1", "localhost", "::ffff:127.0.0.1"}) EXPECT_TRUE(host_is_loopback(h)) << h;
  for (const char* h : {"0.0.0.0", "::", "10.1.2.3", "192.168.0.1", "::ffff:10.0.0.1", "no-such-host.invalid"})
    EXPECT_FALSE(host_is_loopback(h)) << h;
}

TEST(Exposure, AWritableServiceBeyondLoopbackNeedsKeys) {
  Config c;
  c.service.host = "0.0.0.0";
  EXPECT_NO_THROW(check_exposure(c, false)) << "read-only: allowed";
  EXPECT_THAT(exposure_warnings(c, false).at(0), HasSubstr("searches are open"));
  c.storage.dir = "/srv/wal";
  EXPECT_NO_THROW(check_exposure(c, true)) << "loopback: allowed";
  EXPECT_TRUE(exposure_warnings(c, true).empty());
  EXPECT_THAT(error_of([&] { check_exposure(c, false); }),
              AllOf(HasSubstr("service.host '0.0.0.0' is not a loopback address"), HasSubstr("storage.dir '/srv/wal'"),
                    HasSubstr("shardtopk keygen --name NAME --role write"), HasSubstr("service.auth.keys_file"),
                    HasSubstr("service.auth.allow_open_writes: true")));
  c.service.auth_allow_open_writes = true;
  EXPECT_NO_THROW(check_exposure(c, false));
  EXPECT_THAT(exposure_warnings(c, false).at(0), HasSubstr("writes are open to anyone"));
  c.service.auth_allow_open_writes = false;
  c.service.auth_keys_file = "/etc/keys";
  EXPECT_NO_THROW(check_exposure(c, false));
  EXPECT_THAT(exposure_warnings(c, false).at(0), HasSubstr("API keys travel in clear text"));
  c.service.tls_cert_file = "c.pem";
  EXPECT_TRUE(exposure_warnings(c, false).empty());
}

}  // namespace
