// Crash tests: a forked process appends from several threads (and, in the second test, writes
// snapshots) and reports each acknowledged seq through a pipe; the test kills it with SIGKILL
// at a seeded random moment (in the first test, then also damages the unsynced tail as a power
// cut could), recovers the directory and checks that every acknowledged record is there,
// intact and in order, and that nothing is half-present.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <map>
#include <set>
#include <sstream>

#include "shardtopk/error.hpp"
#include "storage_test_support.hpp"

namespace shardtopk::test {
namespace {

constexpr std::int64_t kDim = 24;
constexpr int kThreads = 4;
constexpr std::int64_t kThreadIds = 1000000000;  // ids of thread t: t·10^9 + c·1000 + j
constexpr std::int64_t kRequestIds = 1000;

// The request thread t sends as its c-th: a pure function of (t, c), so the test can rebuild
// it. Upserts of 1 .. 8 rows, one in eight of 100 .. 299 rows (multi-page writes that a kill
// can cut short); with deletes, every fifth request deletes the rows of the thread's request
// c - 2, and carries the marker id -(t·10^7 + c) - 1 first so that it names its sender.
Request crash_request(int t, int c, bool deletes) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(t) * 1000003u + static_cast<std::uint64_t>(c));
  if (deletes && c % 5 == 4) {
    std::vector<std::int64_t> ids{-(t * 10000000ll + c) - 1};
    const Request earlier = crash_request(t, c - 2, deletes);
    ids.insert(ids.end(), earlier.ids.begin(), earlier.ids.end());
    return make_delete(ids);
  }
  const std::int64_t rows = rng() % 8 == 0 ? 100 + static_cast<std::int64_t>(rng() % 200) : 1 + static_cast<std::int64_t>(rng() % 8);
  return make_upsert(rng(), rows, kDim, t * kThreadIds + c * kRequestIds, true);
}

// (thread, request) of a record, from its ids.
std::pair<int, int> sender(const WalRecord& r) {
  if (r.type == WalRecordType::kDelete) {
    const std::int64_t m = -(r.ids[0] + 1);
    return {static_cast<int>(m / 10000000), static_cast<int>(m % 10000000)};
  }
  return {static_cast<int>(r.ids[0] / kThreadIds), static_cast<int>((r.ids[0] % kThreadIds) / kRequestIds)};
}

StorageOptions crash_options(const std::string& dir, std::uint64_t seed) {
  auto o = options_for(dir, kDim);
  o.segment_bytes = 64 << 10;  // rotations under load
  o.group_commit_window_us = seed % 2 == 0 ? 0 : 300;
  return o;
}

// The child: appends until killed (a bound of 60 s ends it otherwise). With snapshots, it also
// keeps the state (on_durable, in seq order) and writes a snapshot of it every few milliseconds.
[[noreturn]] void run_child(const std::string& dir, int fd, std::uint64_t seed, bool deletes, bool snapshots) {
  int rc = 2;
  try {
    std::mutex state_mu;
    State state;
    std::uint64_t state_seq = 0;
    auto o = crash_options(dir, seed);
    if (snapshots)
      o.on_durable = [&](const WalRecord& r) {
        std::lock_guard<std::mutex> lk(state_mu);
        apply_to(state, r);
        state_seq = r.seq;
      };
    Storage st(o);
    std::mutex out_mu;
    std::vector<std::thread> pool;
    for (int t = 0; t < kThreads; ++t)
      pool.emplace_back([&, t] {
        for (int c = 0;; ++c) {
          const std::uint64_t seq = append(st, crash_request(t, c, deletes));
          const std::string line = std::to_string(seq) + " " + std::to_string(t) + " " + std::to_string(c) + "\n";
          std::lock_guard<std::mutex> lk(out_mu);  // one write() per line: atomic on a pipe
          if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(3);
        }
      });
    if (snapshots)
      pool.emplace_back([&] {
        std::mt19937_64 rng(seed);
        for (;;) {
          std::this_thread::sleep_for(std::chrono::microseconds(1000 + rng() % 8000));
          State copy;
          std::uint64_t seq;
          {
            std::lock_guard<std::mutex> lk(state_mu);
            copy = state;
            seq = state_seq;
          }
          if (seq > st.snapshot_seq()) write_snapshot(st, copy, seq, Dtype::kFloat32, 64)->commit();
        }
      });
    std::this_thread::sleep_for(std::chrono::seconds(60));
    rc = 4;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crash child: %s\n", e.what());
  }
  _exit(rc);
}

struct Ack {
  std::uint64_t seq;
  int t, c;
};

// Forks the child, kills it with SIGKILL `kill_after_us` after its first acknowledgement, and
// returns every acknowledgement it reported.
std::vector<Ack> run_and_kill(const std::string& dir, std::uint64_t seed, bool deletes, bool snapshots,
                              std::int64_t kill_after_us) {
  int p[2];
  EXPECT_EQ(pipe(p), 0);
  const pid_t pid = fork();
  EXPECT_GE(pid, 0);
  if (pid == 0) {
    ::close(p[0]);
    run_child(dir, p[1], seed, deletes, snapshots);
  }
  ::close(p[1]);
  std::string text;
  char buf[65536];
  bool killed = false;
  std::chrono::steady_clock::time_point kill_at{};
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (!killed && kill_at != std::chrono::steady_clock::time_point{} && now >= kill_at) {
      ::kill(pid, SIGKILL);
      killed = true;
    }
    if (!killed && now >= give_up) {  // never acknowledged anything: kill, and fail below
      ::kill(pid, SIGKILL);
      killed = true;
    }
    pollfd pfd{p[0], POLLIN, 0};
    ::poll(&pfd, 1, killed ? 1000 : 1);
    if (pfd.revents & (POLLIN | POLLHUP)) {
      const ssize_t n = ::read(p[0], buf, sizeof buf);
      if (n <= 0) break;  // EOF: the child is gone
      text.append(buf, static_cast<std::size_t>(n));
      if (kill_at == std::chrono::steady_clock::time_point{})
        kill_at = std::chrono::steady_clock::now() + std::chrono::microseconds(kill_after_us);
    }
  }
  ::close(p[0]);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child ended by itself, status " << status;
  std::vector<Ack> acks;
  std::istringstream in(text);
  Ack a{};
  while (in >> a.seq >> a.t >> a.c) acks.push_back(a);
  EXPECT_FALSE(acks.empty()) << "the child acknowledged nothing";
  return acks;
}

// What a power cut could leave on top of the kill (the page cache survives a SIGKILL, so the
// kill alone rarely tears anything): only the last group commit can be unsynced (each one is
// fdatasynced before the next is written), and nothing up to the last acknowledged record.
// mode 1: the file ends at a random point after both; 2: a random range there reads as
// zeros; 3: as random bytes. Returns a description.
std::string power_cut(const std::string& dir, int mode, std::uint64_t max_acked, std::mt19937_64& rng) {
  const auto segs = segment_paths(dir);
  if (mode == 0 || segs.empty()) return "none";
  const std::string last = segs.back();
  auto bytes = read_bytes(last);
  std::uint64_t acked_end = 32, batch = 32;
  for (const auto& [b, e] : record_spans(last)) {
    std::uint64_t seq = 0;
    std::memcpy(&seq, bytes.data() + b + 8, 8);
    std::memcpy(&batch, bytes.data() + b + 24, 8);
    if (seq <= max_acked) acked_end = e;
  }
  const std::uint64_t lo = std::max(acked_end, batch), size = bytes.size();
  if (lo >= size) return "nothing unsynced";
  const std::uint64_t at = lo + rng() % (size - lo);
  if (mode == 1) {
    fs::resize_file(last, at);
    return "cut at " + std::to_string(at) + " of " + std::to_string(size);
  }
  const std::uint64_t len = 1 + rng() % (size - at);
  for (std::uint64_t i = at; i < at + len; ++i) bytes[i] = mode == 2 ? 0 : static_cast<unsigned char>(rng());
  write_bytes(last, bytes);
  return std::string(mode == 2 ? "zeros" : "garbage") + " at " + std::to_string(at) + " +" + std::to_string(len);
}

struct Totals {
  std::int64_t acked = 0, recovered = 0, dropped_records = 0, dropped_bytes = 0, torn = 0, snapshots = 0;
};

TEST(WalCrash, KilledWriterLosesNoAcknowledgedRecord) {
  constexpr int kTrials = 24;
  Totals tot;
  for (int trial = 0; trial < kTrials; ++trial) {
    const std::uint64_t seed = 1000 + trial;
    std::mt19937_64 rng(seed);
    const std::int64_t kill_after = static_cast<std::int64_t>(rng() % 150000);  // 0 .. 150 ms
    SCOPED_TRACE("trial " + std::to_string(trial) + " kill after " + std::to_string(kill_after) + " us");
    TempDir tmp;
    const std::string dir = tmp.file("s");
    const auto acks = run_and_kill(dir, seed, true, false, kill_after);
    std::uint64_t max_acked = 0;
    for (const Ack& a : acks) max_acked = std::max(max_acked, a.seq);
    const std::string cut = power_cut(dir, trial % 4, max_acked, rng);
    SCOPED_TRACE("power cut: " + cut);

    Storage st(crash_options(dir, seed));
    std::vector<OwnedRecord> recs;
    std::vector<std::pair<int, int>> senders;
    st.replay(0, [&](const WalRecord& r) {
      recs.push_back(OwnedRecord::from(r));
      senders.push_back(sender(r));
    });
    // Every record present is whole: exactly what its sender sent.
    std::set<std::pair<int, int>> seen;
    std::map<int, int> next_c;  // per thread: its records are its requests 0, 1, 2, ... in seq order
    for (std::size_t i = 0; i < recs.size(); ++i) {
      ASSERT_EQ(recs[i].seq, i + 1);
      const auto [t, c] = senders[i];
      ASSERT_TRUE(t >= 0 && t < kThreads) << "seq " << recs[i].seq;
      ASSERT_TRUE(same(recs[i], crash_request(t, c, true))) << "seq " << recs[i].seq << " is not thread " << t
                                                            << "'s request " << c;
      ASSERT_TRUE(seen.insert({t, c}).second) << "request logged twice";
      ASSERT_EQ(c, next_c[t]) << "thread " << t << ": request " << c << " logged out of order or after a gap";
      ++next_c[t];
    }
    // Every acknowledged record is present under its seq.
    for (const Ack& a : acks) {
      ASSERT_LE(a.seq, recs.size()) << "acknowledged seq " << a.seq << " lost";
      ASSERT_EQ(senders[a.seq - 1], std::make_pair(a.t, a.c)) << "acknowledged seq " << a.seq;
    }
    tot.acked += static_cast<std::int64_t>(acks.size());
    tot.recovered += static_cast<std::int64_t>(recs.size());
    tot.dropped_records += st.recovery().dropped_records;
    tot.dropped_bytes += st.recovery().dropped_bytes;
    tot.torn += st.recovery().dropped_bytes > 0;
    // The recovered log takes writes again.
    EXPECT_EQ(append(st, make_delete({-1})), recs.size() + 1);
  }
  std::cout << "crash trials " << kTrials << " (3 in 4 with a simulated power cut): acknowledged " << tot.acked << ", recovered " << tot.recovered
            << " (all acknowledged present), torn tails " << tot.torn << " (" << tot.dropped_records
            << " records, " << tot.dropped_bytes << " bytes dropped)\n";
}

TEST(WalCrash, KilledDuringSnapshotsLosesNoAcknowledgedRow) {
  constexpr int kTrials = 20;
  Totals tot;
  for (int trial = 0; trial < kTrials; ++trial) {
    const std::uint64_t seed = 5000 + trial;
    std::mt19937_64 rng(seed);
    const std::int64_t kill_after = 5000 + static_cast<std::int64_t>(rng() % 200000);  // 5 .. 205 ms
    SCOPED_TRACE("trial " + std::to_string(trial) + " kill after " + std::to_string(kill_after) + " us");
    TempDir tmp;
    const std::string dir = tmp.file("s");
    const auto acks = run_and_kill(dir, seed, false, true, kill_after);

    Storage st(crash_options(dir, seed));
    EXPECT_LE(st.snapshot_seq(), st.last_seq());
    const State state = recovered_state(st);
    // Group the live rows by request; each request present must be whole and exact.
    std::map<std::pair<int, int>, std::vector<std::int64_t>> rows_of;
    for (const auto& [id, row] : state)
      rows_of[{static_cast<int>(id / kThreadIds), static_cast<int>((id % kThreadIds) / kRequestIds)}].push_back(id);
    std::map<int, int> count;
    for (const auto& [tc, ids] : rows_of) {
      const Request want = crash_request(tc.first, tc.second, false);
      ASSERT_EQ(ids, want.ids) << "request (" << tc.first << ", " << tc.second << ") is half-present";
      State expect;
      apply_to(expect, want);
      for (const auto id : ids) ASSERT_TRUE(state.at(id) == expect.at(id)) << "row " << id << " differs";
      ++count[tc.first];
    }
    // Per thread, the requests present are a prefix 0 .. n-1 (each was sent after the previous
    // one's acknowledgement), and it covers every acknowledged one.
    for (const auto& [t, n] : count)
      for (int c = 0; c < n; ++c) ASSERT_TRUE(rows_of.count({t, c})) << "thread " << t << " request " << c << " missing";
    for (const Ack& a : acks) ASSERT_TRUE(rows_of.count({a.t, a.c})) << "acknowledged seq " << a.seq << " lost";
    tot.acked += static_cast<std::int64_t>(acks.size());
    tot.recovered += static_cast<std::int64_t>(rows_of.size());
    tot.dropped_records += st.recovery().dropped_records;
    tot.dropped_bytes += st.recovery().dropped_bytes;
    tot.torn += st.recovery().dropped_bytes > 0;
    tot.snapshots += st.snapshot_seq() > 0;
    // Another snapshot and a restart work from the recovered state.
    if (st.last_seq() > st.snapshot_seq()) write_snapshot(st, state, st.last_seq(), Dtype::kFloat32, 1000)->commit();
  }
  std::cout << "crash trials with snapshots " << kTrials << ": acknowledged " << tot.acked << ", requests recovered "
            << tot.recovered << " (all acknowledged present), recovered from a snapshot in " << tot.snapshots
            << " trials, torn tails " << tot.torn << " (" << tot.dropped_records << " records, " << tot.dropped_bytes
            << " bytes dropped)\n";
}

}  // namespace
}  // namespace shardtopk::test
