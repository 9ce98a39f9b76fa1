// The write-ahead log: checksums, round trips, group commit, torn tails at every byte, flipped
// bits, damage in the middle, write errors, and the directory's checks.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cmath>
#include <functional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "shardtopk/config.hpp"
#include "shardtopk/error.hpp"
#include "storage/crc32c.hpp"
#include "storage_test_support.hpp"

namespace shardtopk::test {
namespace {

using storage::crc32c;
using storage::crc32c_extend;
using storage::crc32c_extend_portable;

// ------------------------------------------------------------------------------ CRC-32C

TEST(Crc32c, KnownVectors) {
  // RFC 3720 appendix B.4 and the classic check value.
  const char* check = "123456789";
  EXPECT_EQ(crc32c(check, 9), 0xE3069283u);
  std::vector<unsigned char> b(32, 0);
  EXPECT_EQ(crc32c(b.data(), 32), 0x8A9136AAu);
  std::fill(b.begin(), b.end(), 0xFF);
  EXPECT_EQ(crc32c(b.data(), 32), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c(b.data(), 32), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) b[i] = static_cast<unsigned char>(31 - i);
  EXPECT_EQ(crc32c(b.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c_extend_portable(0, check, 9), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, HardwareMatchesTableAtEveryLengthAndAlignment) {
  std::mt19937_64 rng(7);
  std::vector<unsigned char> b(300);
  for (auto& x : b) x = static_cast<unsigned char>(rng());
  std::cout << "CRC-32C instruction: " << (storage::crc32c_hardware() ? "yes" : "no (table only)") << "\n";
  for (std::size_t start = 0; start < 9; ++start)
    for (std::size_t n = 0; start + n <= b.size(); n += (n < 40 ? 1 : 13)) {
      ASSERT_EQ(crc32c_extend(0x1234u, b.data() + start, n), crc32c_extend_portable(0x1234u, b.data() + start, n))
          << "start " << start << " n " << n;
    }
  // Extending equals one pass over the concatenation.
  for (std::size_t cut = 0; cut <= 100; ++cut)
    ASSERT_EQ(crc32c_extend(crc32c(b.data(), cut), b.data() + cut, 100 - cut), crc32c(b.data(), 100));
}

// ------------------------------------------------------------------------------ round trip

TEST(Wal, RoundTripAcrossReopen) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const std::int64_t dim = 5;
  std::vector<Request> reqs;
  reqs.push_back(make_upsert(1, 1, dim, 100, false));
  reqs.push_back(make_upsert(2, 3, dim, 200, true));
  reqs.push_back(make_delete({100, 201, 999}));
  reqs.push_back(make_upsert(3, 100, dim, -50, true));  // negative ids are ids too
  reqs.push_back(make_upsert(4, 2, dim, 200, false));   // re-insert of existing ids
  reqs.push_back(make_delete({7}));
  {
    Storage st(options_for(dir, dim));
    EXPECT_EQ(st.last_seq(), 0u);
    EXPECT_EQ(st.recovery().records, 0);
    EXPECT_EQ(st.snapshot_path(), "");
    for (std::size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(append(st, reqs[i]), i + 1);
    EXPECT_EQ(st.last_seq(), reqs.size());
    const auto recs = replay_all(st);  // replay while open
    ASSERT_EQ(recs.size(), reqs.size());
    for (std::size_t i = 0; i < reqs.size(); ++i) EXPECT_TRUE(same(recs[i], reqs[i])) << "record " << i;
  }
  Storage st(options_for(dir, dim));
  EXPECT_EQ(st.recovery().records, static_cast<std::int64_t>(reqs.size()));
  EXPECT_EQ(st.recovery().dropped_bytes, 0);
  EXPECT_EQ(st.recovery().dropped_records, 0);
  EXPECT_EQ(st.last_seq(), reqs.size());
  auto recs = replay_all(st);
  ASSERT_EQ(recs.size(), reqs.size());
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(recs[i].seq, i + 1);
    EXPECT_TRUE(same(recs[i], reqs[i])) << "record " << i;
  }
  // Replay from a base: only the records after it.
  recs = replay_all(st, 4);
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].seq, 5u);
  EXPECT_TRUE(replay_all(st, 6).empty());
  EXPECT_TRUE(replay_all(st, 100).empty());
  // Appends continue the sequence.
  EXPECT_EQ(append(st, make_delete({1})), 7u);
  EXPECT_EQ(st.stats().records_written, 1);
}

TEST(Wal, SegmentsRotateAndReplayInOrder) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  auto o = options_for(dir, 16);
  o.segment_bytes = 4096;
  std::vector<Request> reqs;
  {
    Storage st(o);
    for (int i = 0; i < 60; ++i) {
      reqs.push_back(make_upsert(10 + i, 1 + i % 7, 16, i * 10, i % 2 == 0));
      append(st, reqs.back());
    }
    EXPECT_GT(st.stats().segments, 5);
  }
  EXPECT_GT(segment_paths(dir).size(), 5u);
  Storage st(o);
  EXPECT_EQ(st.recovery().segments, static_cast<std::int64_t>(segment_paths(dir).size()));
  const auto recs = replay_all(st);
  ASSERT_EQ(recs.size(), reqs.size());
  for (std::size_t i = 0; i < reqs.size(); ++i) EXPECT_TRUE(same(recs[i], reqs[i])) << i;
  const auto tail = replay_all(st, 41);
  ASSERT_EQ(tail.size(), 19u);
  EXPECT_EQ(tail.front().seq, 42u);
}

TEST(Wal, BadInputIsRefusedAndChangesNothing) {
  TempDir tmp;
  auto o = options_for(tmp.file("s"), 4);
  o.max_record_bytes = 4096;
  Storage st(o);
  auto expect_error = [&](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error, expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Request r = make_upsert(1, 3, 4, 0, true);
  UpsertRows u = r.view();
  u.rows = 0;
  expect_error([&] { st.upsert(u); }, "rows = 0");
  u = r.view();
  u.vectors = nullptr;
  expect_error([&] { st.upsert(u); }, "null");
  Request nan = r;
  nan.vectors[2 * 4 + 3] = std::nanf("");
  expect_error([&] { st.upsert(nan.view()); }, "row 2 (id 2) column 3");
  nan.vectors[2 * 4 + 3] = INFINITY;
  expect_error([&] { st.upsert(nan.view()); }, "must be finite");
  u = r.view();
  u.attributes[1].name = "tenant";
  expect_error([&] { st.upsert(u); }, "'tenant' given twice");
  u = r.view();
  u.attributes[0].name = "a/b";
  expect_error([&] { st.upsert(u); }, "'a/b'");
  u = r.view();
  u.attributes[0].name = "";
  expect_error([&] { st.upsert(u); }, "1 .. 255 bytes");
  u = r.view();
  u.attributes[0].data = nullptr;
  expect_error([&] { st.upsert(u); }, "no data");
  Request big = make_upsert(2, 200, 4, 0, false);
  expect_error([&] { st.upsert(big.view()); }, "max_record_bytes");
  expect_error([&] { st.delete_ids(nullptr, 3); }, "null");
  const std::int64_t one = 1;
  expect_error([&] { st.delete_ids(&one, 0); }, "0 ids");
  EXPECT_EQ(st.last_seq(), 0u);
  EXPECT_TRUE(replay_all(st).empty());
  EXPECT_EQ(st.upsert(r.view()), 1u);  // still writable
}

TEST(Wal, OptionsAndDirectoryChecks) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  auto o = options_for(dir, 8);
  auto bad = o;
  bad.dim = 0;
  EXPECT_THROW(Storage{bad}, Error);
  bad = o;
  bad.segment_bytes = 100;
  EXPECT_THROW(Storage{bad}, Error);
  bad = o;
  bad.dir = "";
  EXPECT_THROW(Storage{bad}, Error);
  {
    Storage st(o);
    append(st, make_upsert(1, 2, 8, 0, false));
    // One writer per directory.
    EXPECT_THROW(Storage{o}, Error);
  }
  bad = o;
  bad.dim = 9;
  try {
    Storage st(bad);
    ADD_FAILURE() << "opened with the wrong dim";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dim 8, configured dim is 9"), std::string::npos) << e.what();
  }
  bad = o;
  bad.metric = Metric::kL2;
  EXPECT_THROW(Storage{bad}, Error);
  // Segments without a manifest are not silently adopted.
  fs::remove(dir + "/MANIFEST.json");
  try {
    Storage st(o);
    ADD_FAILURE() << "opened without a manifest";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no MANIFEST.json"), std::string::npos) << e.what();
  }
  // A path that is a file.
  write_text(tmp.file("f"), "x");
  EXPECT_THROW(Storage{options_for(tmp.file("f"), 8)}, Error);
}

// A start-up that fails (an exception in flight as the Storage ends) removes the directory this Storage made when nothing was written to it; a directory that was
// there before, one holding a record, or one holding another program's file is kept whole, and
// a Storage closed without an error keeps what it made.
TEST(Wal, AFailedStartUpRemovesOnlyTheUnusedDirectoryItMade) {
  TempDir tmp;
  const auto fail_with = [](const StorageOptions& o, const std::function<void(Storage&)>& before) {
    try {
      Storage st(o);
      before(st);
      throw std::runtime_error("start-up failed");
    } catch (const std::runtime_error&) {
    }
  };
  const auto nothing = [](Storage&) {};
  const std::string made = tmp.file("made/inner");
  fail_with(options_for(made, 8), nothing);
  EXPECT_FALSE(fs::exists(made));
  EXPECT_FALSE(fs::exists(tmp.file("made"))) << "a parent created with it is removed too";
  EXPECT_TRUE(fs::is_directory(tmp.file(""))) << "a parent that existed is kept";
  fs::create_directory(tmp.file("had"));
  fail_with(options_for(tmp.file("had/a/b"), 8), nothing);
  EXPECT_FALSE(fs::exists(tmp.file("had/a")));
  EXPECT_TRUE(fs::is_directory(tmp.file("had")));
  fail_with(options_for(tmp.file("via/a/../b"), 8), nothing);  // makes via, via/a and via/b
  EXPECT_FALSE(fs::exists(tmp.file("via"))) << "every directory made for the path is removed";

  const std::string existing = tmp.file("existing");
  fs::create_directory(existing);
  fail_with(options_for(existing, 8), nothing);
  EXPECT_TRUE(fs::exists(existing + "/MANIFEST.json"));

  const std::string written = tmp.file("written");
  fail_with(options_for(written, 8), [](Storage& st) { append(st, make_upsert(1, 2, 8, 0, false)); });
  EXPECT_TRUE(fs::exists(written + "/MANIFEST.json"));
  {
    Storage st(options_for(written, 8));
    EXPECT_EQ(st.last_seq(), 1u);
  }

  const std::string foreign = tmp.file("foreign");
  fail_with(options_for(foreign, 8), [&](Storage&) { write_text(foreign + "/notes.txt", "x"); });
  EXPECT_TRUE(fs::exists(foreign + "/notes.txt"));
  EXPECT_TRUE(fs::exists(foreign + "/MANIFEST.json"));

  const std::string kept = tmp.file("kept");
  { Storage st(options_for(kept, 8)); }
  EXPECT_TRUE(fs::exists(kept + "/MANIFEST.json")) << "closed without an error: kept";
}

TEST(Wal, ConfigKeysMapToOptions) {
  const Config d = parse_config("corpus: {path: x.h5}\n");
  EXPECT_EQ(d.storage.dir, "");
  EXPECT_EQ(d.storage.group_commit_window_us, 0);
  EXPECT_EQ(d.storage.segment_bytes, 64ll << 20);
  EXPECT_EQ(d.storage.max_pending_bytes, 256ll << 20);
  EXPECT_THROW(storage_options(d.storage, 8, Metric::kL2), Error);  // no directory
  Config c = parse_config(
      "corpus: {path: x.h5}\nstorage:\n  dir: /srv/log\n  group_commit_window_us: 250\n  segment_bytes: 8192\n  max_pending_bytes: 65536\n",
      "s.yaml");
  c = parse_config(to_yaml(c), "again");
  const StorageOptions o = storage_options(c.storage, 8, Metric::kL2);
  EXPECT_EQ(o.dir, "/srv/log");
  EXPECT_EQ(o.dim, 8);
  EXPECT_EQ(o.metric, Metric::kL2);
  EXPECT_EQ(o.group_commit_window_us, 250);
  EXPECT_EQ(o.segment_bytes, 8192);
  EXPECT_EQ(o.max_pending_bytes, 65536);
  for (const char* bad : {"storage: {segment_bytes: 100}", "storage: {group_commit_window_us: -1}",
                          "storage: {max_pending_bytes: 0}", "storage: {group_commit_window_us: 2000000}"}) {
    try {
      parse_config(bad, "b.yaml");
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    }
  }
}

// ------------------------------------------------------------------------------ group commit

TEST(Wal, ConcurrentAppendersShareGroupCommits) {
  TempDir tmp;
  auto o = options_for(tmp.file("s"), 8);
  WriterGate gate(1);
  std::vector<std::uint64_t> durable_order;
  auto hold = gate.hook();
  o.on_durable = [&](const WalRecord& r) {
    durable_order.push_back(r.seq);  // writer thread only
    hold(r);
  };
  Storage st(o);
  const int threads = 8, per_thread = 40;
  std::vector<std::vector<std::pair<std::uint64_t, Request>>> done(threads);
  std::thread first([&] { append(st, make_upsert(999, 1, 8, -1, false)); });  // held in on_durable
  gate.wait_held();
  std::vector<std::thread> pool;
  std::atomic<int> started{0};
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int c = 0; c < per_thread; ++c) {
        Request r = c % 5 == 4 ? make_delete({t * 1000 + c - 1})
                               : make_upsert(t * 7919 + c, 1 + (c % 4), 8, t * 1000 + c, c % 2 == 0);
        if (c == 0) ++started;
        const std::uint64_t seq = append(st, r);
        done[t].emplace_back(seq, std::move(r));
      }
    });
  // Every thread's first record queues behind the held writer: they must share one group commit.
  while (started.load() < threads) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  wait_queued(st, threads);
  gate.release();
  first.join();
  for (auto& th : pool) th.join();

  const std::int64_t total = 1 + threads * per_thread;
  const StorageStats s = st.stats();
  EXPECT_EQ(s.last_seq, static_cast<std::uint64_t>(total));
  EXPECT_EQ(s.records_written, total);
  EXPECT_LE(s.group_commits, total - threads + 1) << "the queued records did not share a group commit";
  std::cout << "records " << total << ", group commits " << s.group_commits << "\n";
  // on_durable ran once per record, in seq order.
  ASSERT_EQ(durable_order.size(), static_cast<std::size_t>(total));
  for (std::size_t i = 0; i < durable_order.size(); ++i) EXPECT_EQ(durable_order[i], i + 1);
  // Each appender got the seq under which its own record is stored; seqs are dense; a thread's
  // records are in its order.
  const auto recs = replay_all(st);
  ASSERT_EQ(recs.size(), static_cast<std::size_t>(total));
  std::set<std::uint64_t> seqs;
  for (int t = 0; t < threads; ++t) {
    std::uint64_t prev = 0;
    for (const auto& [seq, r] : done[t]) {
      EXPECT_GT(seq, prev);
      prev = seq;
      EXPECT_TRUE(seqs.insert(seq).second);
      ASSERT_GE(seq, 1u);
      ASSERT_LE(seq, recs.size());
      EXPECT_TRUE(same(recs[seq - 1], r)) << "thread " << t << " seq " << seq;
    }
  }
  EXPECT_EQ(seqs.size(), static_cast<std::size_t>(threads * per_thread));
}

TEST(Wal, GroupCommitWindowAndBoundedQueue) {
  TempDir tmp;
  auto o = options_for(tmp.file("s"), 256);
  o.group_commit_window_us = 2000;
  o.max_pending_bytes = 16384;  // about 4 records of 4 rows x 256 floats
  o.group_commit_max_bytes = 8192;
  Storage st(o);
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> worst{0};
  std::thread monitor([&] {
    while (!stop) {
      const auto s = st.stats();
      std::int64_t w = worst.load();
      while (s.queued_bytes > w && !worst.compare_exchange_weak(w, s.queued_bytes)) {
      }
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> pool;
  std::vector<std::vector<std::pair<std::uint64_t, Request>>> done(6);
  for (int t = 0; t < 6; ++t)
    pool.emplace_back([&, t] {
      for (int c = 0; c < 25; ++c) {
        Request r = make_upsert(t * 100 + c, 4, 256, t * 1000 + c * 4, false);
        const auto seq = append(st, r);
        done[t].emplace_back(seq, std::move(r));
      }
    });
  for (auto& th : pool) th.join();
  stop = true;
  monitor.join();
  EXPECT_LE(worst.load(), o.max_pending_bytes);
  std::cout << "largest queue seen: " << worst.load() << " bytes (limit " << o.max_pending_bytes << ")\n";
  const auto recs = replay_all(st);
  ASSERT_EQ(recs.size(), 150u);
  for (auto& per : done)
    for (auto& [seq, r] : per) EXPECT_TRUE(same(recs[seq - 1], r));
  // A record larger than the queue bound still goes through (alone).
  Request big = make_upsert(5, 40, 256, 90000, false);
  const auto seq = append(st, big);
  EXPECT_TRUE(same(replay_all(st, seq - 1).at(0), big));
}

// ------------------------------------------------------------------------------ torn tails

TEST(Wal, TornTailAtEveryByteOfTheLastRecordIsCut) {
  TempDir tmp;
  const std::string pristine = tmp.file("pristine");
  const auto reqs = five_records(pristine, 6);
  const auto segs = segment_paths(pristine);
  ASSERT_EQ(segs.size(), 1u);
  const auto spans = record_spans(segs[0]);
  ASSERT_EQ(spans.size(), 5u);
  const auto [begin, end] = spans.back();
  const std::string work = tmp.file("work");
  int cases = 0;
  for (std::uint64_t cut = begin; cut < end; ++cut) {
    copy_dir(pristine, work);
    const std::string seg = segment_paths(work)[0];
    fs::resize_file(seg, cut);
    LogCapture cap;
    Storage st(options_for(work, 6));
    const RecoveryReport& rep = st.recovery();
    EXPECT_EQ(rep.dropped_bytes, static_cast<std::int64_t>(cut - begin)) << "cut at " << cut;
    EXPECT_EQ(rep.dropped_records, cut > begin ? 1 : 0) << "cut at " << cut;
    // The directory was closed after record 5 was acknowledged: its loss is reported, also
    // when the cut leaves no partial record behind.
    EXPECT_EQ(rep.missing_acknowledged, 1) << "cut at " << cut;
    EXPECT_EQ(st.last_seq(), 4u);
    EXPECT_EQ(fs::file_size(seg), begin);
    if (cut > begin) {
      EXPECT_NE(cap.text().find("dropped " + std::to_string(cut - begin) + " bytes holding 1 record(s) from seq 5 on"),
                std::string::npos)
          << cap.text();
    }
    EXPECT_NE(cap.text().find("1 acknowledged record(s), seq 5 .. 5, are missing"), std::string::npos) << cap.text();
    const auto recs = replay_all(st);
    ASSERT_EQ(recs.size(), 4u);
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(same(recs[i], reqs[i]));
    // The cut log takes new records where the torn one was.
    EXPECT_EQ(append(st, reqs[4]), 5u);
    ++cases;
  }
  EXPECT_EQ(cases, static_cast<int>(end - begin));
  // And it reopens cleanly.
  Storage st(options_for(work, 6));
  EXPECT_EQ(st.recovery().dropped_bytes, 0);
  EXPECT_EQ(replay_all(st).size(), 5u);
}

TEST(Wal, GarbageAfterTheLastRecordIsCut) {
  TempDir tmp;
  const std::string pristine = tmp.file("pristine");
  five_records(pristine, 3);
  const std::string work = tmp.file("work");
  std::mt19937_64 rng(3);
  for (std::size_t extra : {1u, 7u, 8u, 31u, 32u, 33u, 4096u}) {
    for (int kind = 0; kind < 2; ++kind) {  // zeros (preallocated space), random bytes
      copy_dir(pristine, work);
      const std::string seg = segment_paths(work)[0];
      auto b = read_bytes(seg);
      const std::size_t size = b.size();
      for (std::size_t i = 0; i < extra; ++i) b.push_back(kind == 0 ? 0 : static_cast<unsigned char>(rng()));
      write_bytes(seg, b);
      Storage st(options_for(work, 3));
      EXPECT_EQ(st.recovery().dropped_bytes, static_cast<std::int64_t>(extra)) << extra << " kind " << kind;
      EXPECT_EQ(st.last_seq(), 5u);
      EXPECT_EQ(fs::file_size(seg), size);
    }
  }
}

TEST(Wal, FlippedBitInTheTailRecordIsCut) {
  TempDir tmp;
  const std::string pristine = tmp.file("pristine");
  const auto reqs = five_records(pristine, 4);
  const auto spans = record_spans(segment_paths(pristine)[0]);
  const auto [begin, end] = spans.back();
  const std::string work = tmp.file("work");
  for (std::uint64_t at = begin; at < end; ++at) {
    copy_dir(pristine, work);
    flip_bit(segment_paths(work)[0], at, static_cast<int>(at % 8));
    Storage st(options_for(work, 4));
    EXPECT_EQ(st.recovery().dropped_bytes, static_cast<std::int64_t>(end - begin)) << "byte " << at;
    EXPECT_EQ(st.recovery().dropped_records, 1) << "byte " << at;
    const auto recs = replay_all(st);
    ASSERT_EQ(recs.size(), 4u) << "byte " << at;
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(same(recs[i], reqs[i]));
  }
}

TEST(Wal, DamageInTheMiddleIsAnErrorNamingFileAndOffset) {
  TempDir tmp;
  const std::string pristine = tmp.file("pristine");
  five_records(pristine, 4);
  const auto spans = record_spans(segment_paths(pristine)[0]);
  const std::string work = tmp.file("work");
  // Every byte of records 1 .. 4 (record 5, a later group commit, follows intact).
  int errors = 0;
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::uint64_t at = spans[r].first; at < spans[r].second; ++at) {
      copy_dir(pristine, work);
      const std::string seg = segment_paths(work)[0];
      flip_bit(seg, at, static_cast<int>((at * 3) % 8));
      const auto before = read_bytes(seg);
      try {
        Storage st(options_for(work, 4));
        ADD_FAILURE() << "opened a log damaged at byte " << at << " of record " << r + 1;
      } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(fs::path(seg).filename().string()), std::string::npos) << msg;
        EXPECT_NE(msg.find("at offset " + std::to_string(spans[r].first)), std::string::npos) << msg;
        ++errors;
      }
      EXPECT_EQ(read_bytes(seg), before) << "a damaged log was modified";
    }
  }
  EXPECT_EQ(errors, static_cast<int>(spans[3].second - spans[0].first));
}

TEST(Wal, TornGroupCommitDropsItsWholeRecordsButDamageBeforeItIsAnError) {
  // Records 2 .. 5 in one group commit (the writer is held on record 1 while they queue).
  TempDir tmp;
  const std::string pristine = tmp.file("pristine");
  std::vector<Request> reqs;
  {
    auto o = options_for(pristine, 4);
    WriterGate gate(1);
    o.on_durable = gate.hook();
    Storage st(o);
    for (int i = 0; i < 5; ++i) reqs.push_back(make_upsert(50 + i, 3, 4, i * 10, false));
    std::thread first([&] { append(st, reqs[0]); });
    gate.wait_held();
    std::vector<std::thread> rest;
    for (int i = 1; i < 5; ++i) {
      rest.emplace_back([&, i] { append(st, reqs[i]); });
      wait_queued(st, i);  // queued in this order: seqs 2 .. 5
    }
    gate.release();
    first.join();
    for (auto& t : rest) t.join();
    EXPECT_EQ(st.stats().group_commits, 2);
  }
  const auto spans = record_spans(segment_paths(pristine)[0]);
  ASSERT_EQ(spans.size(), 5u);
  const std::string work = tmp.file("work");
  // Damage in record 3: records 4 and 5 are whole but belong to the same unfinished write as
  // far as recovery can tell: the write is cut from record 3 on, the earlier record 2 stays.
  copy_dir(pristine, work);
  flip_bit(segment_paths(work)[0], spans[2].first + 40, 1);
  {
    Storage st(options_for(work, 4));
    EXPECT_EQ(st.recovery().dropped_records, 3);
    EXPECT_EQ(st.recovery().dropped_bytes, static_cast<std::int64_t>(spans[4].second - spans[2].first));
    EXPECT_EQ(st.last_seq(), 2u);
  }
  // Damage in record 1 (an earlier group commit) followed by the valid second one: an error.
  copy_dir(pristine, work);
  flip_bit(segment_paths(work)[0], spans[0].first + 40, 1);
  EXPECT_THROW(Storage{options_for(work, 4)}, Error);
}

TEST(Wal, DamageInAnEarlierSegmentOrAMissingSegmentIsAnError) {
  TempDir tmp;
  const std::string pristine = tmp.file("pristine");
  auto o = options_for(pristine, 32);
  o.segment_bytes = 4096;
  {
    Storage st(o);
    for (int i = 0; i < 40; ++i) append(st, make_upsert(i, 3, 32, i * 3, false));
  }
  const auto segs = segment_paths(pristine);
  ASSERT_GE(segs.size(), 3u);
  const std::string work = tmp.file("work");
  // Torn tail of a segment that is not the last.
  copy_dir(pristine, work);
  const std::string second = segment_paths(work)[1];
  fs::resize_file(second, fs::file_size(second) - 5);
  try {
    Storage st(options_for(work, 32));
    ADD_FAILURE() << "opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not the last one"), std::string::npos) << e.what();
  }
  // Bad header of a segment that is not the last.
  copy_dir(pristine, work);
  flip_bit(segment_paths(work)[1], 3, 0);
  EXPECT_THROW(Storage{options_for(work, 32)}, Error);
  // A missing middle segment: a gap in the seqs.
  copy_dir(pristine, work);
  fs::remove(segment_paths(work)[1]);
  try {
    Storage st(options_for(work, 32));
    ADD_FAILURE() << "opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a segment is missing or damaged"), std::string::npos) << e.what();
  }
  // A missing first segment: the log no longer continues the (empty) base.
  copy_dir(pristine, work);
  fs::remove(segment_paths(work)[0]);
  EXPECT_THROW(Storage{options_for(work, 32)}, Error);
  // A last segment whose creation was interrupted (header torn) is removed.
  copy_dir(pristine, work);
  {
    std::vector<unsigned char> torn(20, 0);
    write_bytes(work + "/wal-00000000000000099999.log", torn);
    Storage st(options_for(work, 32));
    EXPECT_EQ(st.last_seq(), 40u);
    EXPECT_EQ(st.recovery().removed_files.size(), 1u);
  }
  EXPECT_FALSE(fs::exists(work + "/wal-00000000000000099999.log"));
}

// ------------------------------------------------------------------------------ write errors

// The child: appends from 4 threads until the file-size limit makes a write fail; exits 0 when
// every appender saw the error and later appends were refused.
int write_error_child(const std::string& dir, int fd) {
  auto o = options_for(dir, 64);
  Storage st(o);
  rlimit lim{};
  lim.rlim_cur = lim.rlim_max = 48 * 1024;  // the segment cannot grow past this
  std::signal(SIGXFSZ, SIG_IGN);             // a write past the limit then fails with EFBIG
  if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return 10;
  std::atomic<int> failed_threads{0}, bad{0};
  std::mutex out_mu;
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t)
    pool.emplace_back([&, t] {
      for (int c = 0; c < 100000; ++c) {
        Request r = make_upsert(t * 100000 + c, 2, 64, t * 100000 + c * 2, false);
        try {
          const std::uint64_t seq = append(st, r);
          std::lock_guard<std::mutex> lk(out_mu);
          const std::string line = std::to_string(seq) + " " + std::to_string(t) + " " + std::to_string(c) + "\n";
          if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) ++bad;
        } catch (const Error&) {
          ++failed_threads;
          // Every later append is refused at once.
          try {
            append(st, r);
            ++bad;
          } catch (const Error& e) {
            if (std::string(e.what()).find("refuses writes") == std::string::npos) ++bad;
          }
          return;
        }
      }
      ++bad;  // never failed
    });
  for (auto& th : pool) th.join();
  if (!st.stats().failed) return 11;
  if (st.stats().failure.find("File too large") == std::string::npos) return 12;
  return bad == 0 && failed_threads == 4 ? 0 : 13;
}

TEST(Wal, WriteErrorFailsEveryAppenderAndRefusesLaterWrites) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(p[0]);
    int rc = 20;
    try {
      rc = write_error_child(dir, p[1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    _exit(rc);
  }
  ::close(p[1]);
  std::string acks;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) acks.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "child checks failed (see its exit code)";
  // Every acknowledged record survives; the partial write is cut.
  Storage st(options_for(dir, 64));
  const auto recs = replay_all(st);
  std::istringstream in(acks);
  std::uint64_t seq;
  int t, c, count = 0;
  while (in >> seq >> t >> c) {
    ASSERT_LE(seq, recs.size());
    EXPECT_TRUE(same(recs[seq - 1], make_upsert(t * 100000 + c, 2, 64, t * 100000 + c * 2, false))) << seq;
    ++count;
  }
  EXPECT_GT(count, 0);
  std::cout << "acknowledged before the error: " << count << ", recovered " << recs.size() << ", cut "
            << st.recovery().dropped_bytes << " bytes\n";
  EXPECT_EQ(append(st, make_delete({1})), recs.size() + 1);  // writable again after a restart
}

TEST(Wal, FailingOnDurableFailsTheLogButTheRecordIsDurable) {
  TempDir tmp;
  auto o = options_for(tmp.file("s"), 4);
  o.on_durable = [](const WalRecord& r) {
    if (r.seq == 3) throw Error("index full");
  };
  {
    Storage st(o);
    EXPECT_EQ(append(st, make_upsert(1, 1, 4, 0, false)), 1u);
    EXPECT_EQ(append(st, make_upsert(2, 1, 4, 1, false)), 2u);
    try {
      append(st, make_upsert(3, 1, 4, 2, false));
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("index full"), std::string::npos) << e.what();
    }
    EXPECT_THROW(append(st, make_upsert(4, 1, 4, 3, false)), Error);
    EXPECT_TRUE(st.stats().failed);
    EXPECT_EQ(st.last_seq(), 3u);  // durable, though its on_durable failed
    EXPECT_THROW(st.begin_snapshot(SnapshotSpec{2, 0, Dtype::kFloat32, {}}), Error);
  }
  o.on_durable = nullptr;
  Storage st(o);
  EXPECT_EQ(st.last_seq(), 3u);  // the record was synced before the hook failed
}

}  // namespace
}  // namespace shardtopk::test
