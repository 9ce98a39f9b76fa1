// Snapshots: the file's contents, the log truncated behind it, bad requests, recovery after a
// crash at every step of the protocol (a forked process that exits at the step), and the
// manifest's other records: the corpus the log was written against, a seq only a snapshot may
// hold, and the log's end at the last close.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <map>

#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "storage_test_support.hpp"

namespace shardtopk::test {
namespace {

bool has_temp_files(const std::string& dir) {
  for (const auto& n : dir_names(dir))
    if (n.size() > 4 && n.substr(n.size() - 4) == ".tmp") return true;
  return false;
}

// ------------------------------------------------------------------------------ tests

TEST(Snapshot, RoundTripTruncatesTheLog) {
  for (Dtype dtype : {Dtype::kFloat32, Dtype::kFloat16}) {
    SCOPED_TRACE(to_string(dtype));
    TempDir tmp;
    const std::string dir = tmp.file("s");
    auto o = options_for(dir, 6);
    o.segment_bytes = 4096;
    const auto reqs = workload(60, 6, 5);
    {
      Storage st(o);
      for (std::size_t i = 0; i < 40; ++i) append(st, reqs[i]);
      const auto before = segment_paths(dir).size();
      EXPECT_GT(before, 2u);
      const State at40 = model_at(reqs, 40);
      ASSERT_GT(at40.size(), 5u);
      auto w = write_snapshot(st, at40, 40, dtype, 7);
      const std::string path = w->commit();
      EXPECT_EQ(path, dir + "/snapshot-00000000000000000040.h5");
      EXPECT_EQ(st.snapshot_path(), path);
      EXPECT_EQ(st.snapshot_seq(), 40u);
      // Only a fresh segment is left, and nothing replays before the snapshot.
      EXPECT_EQ(segment_paths(dir).size(), 1u);
      EXPECT_EQ(st.stats().records_since_snapshot, 0);
      EXPECT_THROW(replay_all(st, 39), Error);
      EXPECT_TRUE(replay_all(st, 40).empty());
      const SnapshotInfo info = inspect_snapshot(path);
      EXPECT_EQ(info.seq, 40u);
      EXPECT_EQ(info.rows, static_cast<std::int64_t>(at40.size()));
      EXPECT_EQ(info.dim, 6);
      EXPECT_EQ(info.metric, Metric::kInnerProduct);
      EXPECT_EQ(info.dtype, dtype);
      auto by_name = kColumns;
      std::sort(by_name.begin(), by_name.end());
      EXPECT_EQ(info.attributes, by_name);
      EXPECT_EQ(read_string_attribute(path, "distance"), "inner_product");
      for (std::size_t i = 40; i < 60; ++i) append(st, reqs[i]);
      EXPECT_EQ(recovered_state(st), model_at(reqs, 60));
    }
    Storage st(o);
    EXPECT_EQ(st.snapshot_seq(), 40u);
    EXPECT_EQ(st.recovery().records, 20);
    EXPECT_EQ(recovered_state(st), model_at(reqs, 60));  // float16 holds these small integers exactly
    EXPECT_FALSE(has_temp_files(dir));
  }
}

// A snapshot begun at the last record while writes go on: the records written meanwhile go to a
// segment of their own, and the commit leaves only that segment (the log's bytes are theirs, so
// a size policy sees the log shrink). Begun behind the last record, nothing is rotated.
TEST(Snapshot, WritesDuringASnapshotAtTheLastRecordAreTheWholeLogAfterIt) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  auto o = options_for(dir, 4);
  o.segment_bytes = 1 << 20;  // one segment would hold every record
  const auto reqs = workload(40, 4, 3);
  {
    Storage st(o);
    for (std::size_t i = 0; i < 20; ++i) append(st, reqs[i]);
    ASSERT_EQ(segment_paths(dir).size(), 1u);
    auto w = write_snapshot(st, model_at(reqs, 20), 20, Dtype::kFloat32, 7);
    for (std::size_t i = 20; i < 30; ++i) append(st, reqs[i]);
    const std::int64_t before = st.stats().log_bytes;
    w->commit();
    w.reset();  // a writer holds the directory's one snapshot slot until it goes
    const std::vector<std::string> segs = segment_paths(dir);
    ASSERT_EQ(segs.size(), 1u);
    EXPECT_NE(segs[0].find("00000000000000000021"), std::string::npos) << segs[0] << ": the segment starts at seq 21";
    const StorageStats after = st.stats();
    EXPECT_EQ(after.log_bytes, static_cast<std::int64_t>(fs::file_size(segs[0])));
    EXPECT_LT(after.log_bytes, before);
    EXPECT_EQ(after.records_since_snapshot, 10);
    EXPECT_EQ(replay_all(st, 20).size(), 10u);
    // Behind the last record (seq 25 of 30): the active segment holds later records and stays.
    auto behind = write_snapshot(st, model_at(reqs, 25), 25, Dtype::kFloat32, 7);
    for (std::size_t i = 30; i < 35; ++i) append(st, reqs[i]);
    behind->commit();
    EXPECT_EQ(segment_paths(dir), segs);
    EXPECT_EQ(replay_all(st, 25).size(), 10u);
    for (std::size_t i = 35; i < 40; ++i) append(st, reqs[i]);
  }
  Storage st(o);
  EXPECT_EQ(st.snapshot_seq(), 25u);
  EXPECT_EQ(st.recovery().records, 15);
  EXPECT_EQ(recovered_state(st), model_at(reqs, 40));
}

TEST(Snapshot, BehindTheLogKeepsLaterRecordsAndReplacesThePrevious) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  auto o = options_for(dir, 3);
  o.segment_bytes = 4096;
  const auto reqs = workload(80, 3, 9);
  Storage st(o);
  for (std::size_t i = 0; i < 30; ++i) append(st, reqs[i]);
  write_snapshot(st, model_at(reqs, 20), 20, Dtype::kFloat32, 1000)->commit();
  EXPECT_EQ(recovered_state(st), model_at(reqs, 30));
  for (std::size_t i = 30; i < 80; ++i) append(st, reqs[i]);
  write_snapshot(st, model_at(reqs, 70), 70, Dtype::kFloat32, 3)->commit();
  EXPECT_FALSE(fs::exists(dir + "/snapshot-00000000000000000020.h5"));
  EXPECT_EQ(replay_all(st, 70).size(), 10u);
  EXPECT_EQ(recovered_state(st), model_at(reqs, 80));
  // A snapshot of everything deleted: zero rows.
  State none;
  std::vector<std::int64_t> all;
  for (const auto& [id, r] : model_at(reqs, 80)) all.push_back(id);
  append(st, make_delete(all));
  write_snapshot(st, none, 81, Dtype::kFloat32, 5)->commit();
  EXPECT_TRUE(recovered_state(st).empty());
  EXPECT_EQ(inspect_snapshot(st.snapshot_path()).rows, 0);
}

TEST(Snapshot, BadRequestsAreRefusedAndLeaveTheDirectoryAsItWas) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  Storage st(options_for(dir, 4));
  const auto reqs = workload(10, 4, 2);
  for (const auto& r : reqs) append(st, r);
  const State s = model_at(reqs, 10);
  const auto n = static_cast<std::int64_t>(s.size());
  EXPECT_THROW(st.begin_snapshot(SnapshotSpec{11, n, Dtype::kFloat32, kColumns}), Error);   // not yet logged
  EXPECT_THROW(st.begin_snapshot(SnapshotSpec{5, n, Dtype::kBFloat16, kColumns}), Error);   // dtype
  EXPECT_THROW(st.begin_snapshot(SnapshotSpec{5, -1, Dtype::kFloat32, kColumns}), Error);   // rows
  EXPECT_THROW(st.begin_snapshot(SnapshotSpec{5, n, Dtype::kFloat32, {{"a/b", AttributeType::kInt64}}}), Error);
  EXPECT_THROW(st.begin_snapshot(SnapshotSpec{5, n, Dtype::kFloat32, {{"t", AttributeType::kInt64}, {"t", AttributeType::kInt64}}}),
               Error);
  {
    auto w = st.begin_snapshot(SnapshotSpec{5, 2, Dtype::kFloat32, kColumns});
    EXPECT_THROW(st.begin_snapshot(SnapshotSpec{6, 2, Dtype::kFloat32, kColumns}), Error);  // one at a time
    const std::int64_t ids[3] = {1, 2, 3};
    const float v[12] = {};
    const std::int64_t t[3] = {};
    const double sc[3] = {};
    const std::vector<AttributeColumnView> cols = {{"tenant", AttributeType::kInt64, t},
                                                   {"score", AttributeType::kFloat64, sc}};
    EXPECT_THROW(w->write(3, ids, v, cols), Error);  // more rows than announced
    EXPECT_THROW(w->write(1, ids, v, {cols[1], cols[0]}), Error);  // column order
    EXPECT_THROW(w->write(1, ids, v, {cols[0]}), Error);           // a column missing
    w->write(1, ids, v, cols);
    EXPECT_THROW(w->commit(), Error);  // fewer rows than announced
    EXPECT_TRUE(has_temp_files(dir));
  }  // abandoned
  EXPECT_FALSE(has_temp_files(dir));
  EXPECT_EQ(st.snapshot_path(), "");
  EXPECT_EQ(recovered_state(st), s);
  write_snapshot(st, model_at(reqs, 8), 8, Dtype::kFloat32, 4)->commit();
  EXPECT_THROW(st.begin_snapshot(SnapshotSpec{8, 1, Dtype::kFloat32, kColumns}), Error);  // already at 8
  EXPECT_THROW(st.begin_snapshot(SnapshotSpec{7, 1, Dtype::kFloat32, kColumns}), Error);  // older
  EXPECT_EQ(recovered_state(st), s);
}

TEST(Snapshot, MissingSnapshotNamedByTheManifestIsAnError) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(10, 4, 3);
  {
    Storage st(options_for(dir, 4));
    for (const auto& r : reqs) append(st, r);
    write_snapshot(st, model_at(reqs, 10), 10, Dtype::kFloat32, 4)->commit();
  }
  fs::remove(dir + "/snapshot-00000000000000000010.h5");
  try {
    Storage st(options_for(dir, 4));
    ADD_FAILURE() << "opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("which is missing"), std::string::npos) << e.what();
  }
}

TEST(Snapshot, TheManifestRecordsItsSizeAndChecksumAndADamagedOrCutFileIsRefused) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(12, 4, 11);
  std::string path;
  {
    Storage st(options_for(dir, 4));
    for (const auto& r : reqs) append(st, r);
    path = write_snapshot(st, model_at(reqs, 12), 12, Dtype::kFloat32, 4)->commit();
    EXPECT_NO_THROW(st.verify_snapshot());
  }
  const std::string manifest = read_text(dir + "/MANIFEST.json");
  EXPECT_NE(manifest.find("\"snapshot_bytes\": " + std::to_string(fs::file_size(path))), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("\"snapshot_crc32c\""), std::string::npos) << manifest;
  const auto size = fs::file_size(path);
  // One bit changed in the middle of the rows: the size still matches, the checksum does not.
  flip_bit(path, size / 2, 4);
  {
    Storage st(options_for(dir, 4));  // opening checks the size only
    const std::string e = error_of([&] { st.verify_snapshot(); });
    EXPECT_NE(e.find("snapshot '" + path + "' is damaged: its CRC-32C is "), std::string::npos) << e;
  }
  flip_bit(path, size / 2, 4);  // repaired
  EXPECT_NO_THROW(Storage(options_for(dir, 4)).verify_snapshot());
  fs::resize_file(path, size - 100);
  const std::string e = error_of([&] { Storage st(options_for(dir, 4)); });
  EXPECT_NE(e.find("is " + std::to_string(size - 100) + " bytes, the manifest recorded " + std::to_string(size)),
            std::string::npos)
      << e;
}

TEST(Snapshot, ALogIsTiedToTheCorpusFileItWasWrittenAgainst) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  // Two corpus stand-ins of one size (3 MiB: the identity samples the first and last MiB).
  const std::string a = tmp.file("a.h5"), b = tmp.file("b.h5"), c = tmp.file("c.h5");
  {
    std::string bytes(3u << 20, '\0');
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131) >> 7);
    std::ofstream(a, std::ios::binary) << bytes;
    bytes[bytes.size() - 5] ^= 1;  // a change in the last MiB
    std::ofstream(b, std::ios::binary) << bytes;
    bytes[bytes.size() - 5] ^= 1;
    bytes[(3u << 20) / 2] ^= 1;  // the middle MiB is not sampled: the same identity as a
    std::ofstream(c, std::ios::binary) << bytes;
  }
  auto with = [&](const std::string& corpus) {
    auto o = options_for(dir, 4);
    o.base_corpus = corpus;
    return o;
  };
  const auto reqs = workload(6, 4, 13);
  {
    Storage st(with(b));  // an empty log: any corpus; the last one opened is recorded
  }
  EXPECT_NE(read_text(dir + "/MANIFEST.json").find(b), std::string::npos);
  {
    Storage st(with(a));
    for (const auto& r : reqs) append(st, r);
  }
  EXPECT_NE(read_text(dir + "/MANIFEST.json").find(a), std::string::npos);
  const std::string manifest = read_text(dir + "/MANIFEST.json");
  const std::string e = error_of([&] { Storage st(with(b)); });
  EXPECT_NE(e.find("its log holds 6 record(s) written against corpus '" + a + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("but corpus.path '" + b + "' is another file"), std::string::npos) << e;
  EXPECT_EQ(read_text(dir + "/MANIFEST.json"), manifest) << "a refused open changes nothing";
  EXPECT_EQ(recovered_state(*std::make_unique<Storage>(with(a))), model_at(reqs, 6));
  EXPECT_NO_THROW(Storage st(with(c)));  // the documented limit of the sampled identity
  // After a snapshot the corpus file no longer matters.
  {
    Storage st(with(a));
    write_snapshot(st, model_at(reqs, 6), 6, Dtype::kFloat32, 4)->commit();
  }
  EXPECT_EQ(read_text(dir + "/MANIFEST.json").find("corpus"), std::string::npos);
  Storage st(with(b));
  EXPECT_EQ(recovered_state(st), model_at(reqs, 6));
}

// A hand-edited manifest is read strictly: integers are JSON integers in range, the checksum's
// two keys come together, no key twice; each refusal names the key and changes nothing.
TEST(Snapshot, AnEditedManifestIsReadStrictly) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(8, 4, 17);
  {
    Storage st(options_for(dir, 4));
    for (const auto& r : reqs) append(st, r);
    write_snapshot(st, model_at(reqs, 8), 8, Dtype::kFloat32, 4)->commit();
  }
  const std::string mpath = dir + "/MANIFEST.json", good = read_text(mpath);
  auto value_of = [&](const std::string& key) {
    const auto at = good.find("\"" + key + "\": ") + key.size() + 4;
    return good.substr(at, good.find_first_of(",\n", at) - at);
  };
  const std::string bytes = value_of("snapshot_bytes"), crc = value_of("snapshot_crc32c");
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? t : t.replace(at, from.size(), to);
  };
  struct Case {
    std::string what, text, needle;
  };
  const std::vector<Case> cases = {
      {"checksum without size", edited("\"snapshot_bytes\": " + bytes + ",", ""),
       "'snapshot_bytes' and 'snapshot_crc32c' come together (the manifest has only 'snapshot_crc32c')"},
      {"size without checksum", edited(",\n  \"snapshot_crc32c\": " + crc, ""),
       "'snapshot_bytes' and 'snapshot_crc32c' come together (the manifest has only 'snapshot_bytes')"},
      {"checksum past 32 bits", edited("\"snapshot_crc32c\": " + crc, "\"snapshot_crc32c\": 4294967296"),
       "'snapshot_crc32c' is 4294967296 (expected an integer 0 .. 4294967295)"},
      {"a real size", edited("\"snapshot_bytes\": " + bytes, "\"snapshot_bytes\": " + bytes + ".5"),
       "'snapshot_bytes' is " + bytes + ".5 (expected an integer"},
      {"a negative checksum", edited("\"snapshot_crc32c\": " + crc, "\"snapshot_crc32c\": -1"),
       "'snapshot_crc32c' is -1 (expected an integer"},
      {"a real dim", edited("\"dim\": 4", "\"dim\": 4.9"), "'dim' is 4.9 (expected an integer"},
      {"a negative seq", edited("\"seq\": 8", "\"seq\": -1"), "'seq' is -1 (expected an integer"},
      {"a string size", edited("\"snapshot_bytes\": " + bytes, "\"snapshot_bytes\": \"" + bytes + "\""),
       "'snapshot_bytes' is \"" + bytes + "\" (expected an integer"},
      {"a key twice", edited("\"seq\": 8", "\"seq\": 8, \"seq\": 8"), "key 'seq' appears more than once"},
      {"a corpus that is not an object", edited("\"seq\": 8", "\"seq\": 8, \"corpus\": []"),
       "'corpus' is [] (expected an object)"},
      {"a NUL byte and more after the object", good + std::string("\0{}", 3), "a NUL byte at offset"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    write_text(mpath, c.text);
    const std::string e = error_of([&] { Storage st(options_for(dir, 4)); });
    EXPECT_NE(e.find(c.needle), std::string::npos) << e;
    EXPECT_EQ(read_text(mpath), c.text) << "a refused open changed the manifest";
    EXPECT_TRUE(fs::exists(dir + "/snapshot-00000000000000000008.h5"));
  }
  write_text(mpath, good);
  Storage st(options_for(dir, 4));
  EXPECT_EQ(recovered_state(st), model_at(reqs, 8));
}

// A manifest that claims records no snapshot holds ("seq" above 0 with "snapshot": null, as a
// hand edit leaves it) is refused naming the key, and no log segment is touched: recovery
// would otherwise skip those records and remove their segments.
TEST(Snapshot, AManifestClaimingRecordsNoSnapshotHoldsIsRefusedAndKeepsTheLog) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(12, 4, 23);
  {
    Storage st(options_for(dir, 4));
    for (const auto& r : reqs) append(st, r);
  }
  const std::string mpath = dir + "/MANIFEST.json", good = read_text(mpath);
  ASSERT_NE(good.find("\"seq\": 0,"), std::string::npos) << good;
  const auto segments = segment_paths(dir);
  std::vector<std::string> bytes;
  for (const auto& p : segments) bytes.push_back(read_text(p));
  for (const std::string seq : {"100", "5", "12"}) {
    SCOPED_TRACE("seq " + seq);
    std::string text = good;
    text.replace(text.find("\"seq\": 0,"), 9, "\"seq\": " + seq + ",");
    write_text(mpath, text);
    const std::string e = error_of([&] { Storage st(options_for(dir, 4)); });
    EXPECT_NE(e.find("'seq' is " + seq + " but 'snapshot' is null: no snapshot holds records 1 .. " + seq),
              std::string::npos)
        << e;
    EXPECT_EQ(read_text(mpath), text) << "a refused open changed the manifest";
    EXPECT_THROW(read_storage_manifest(dir), Error);
  }
  ASSERT_EQ(segment_paths(dir), segments);
  for (std::size_t i = 0; i < segments.size(); ++i) EXPECT_EQ(read_text(segments[i]), bytes[i]) << segments[i];
  write_text(mpath, good);
  Storage st(options_for(dir, 4));
  EXPECT_EQ(recovered_state(st), model_at(reqs, 12));
}

// Acknowledged records lost after the directory was closed are counted and reported: the
// manifest records the log's end at a clean close, and the next open compares. Cut short in
// the middle of a record of an earlier group commit, cut to its header, or deleted: the last
// segment's acknowledged records are all counted, not only the one the cut tore.
TEST(Snapshot, AcknowledgedRecordsCutFromAClosedLogAreCounted) {
  TempDir tmp;
  const std::string pristine = tmp.file("pristine");
  std::vector<Request> reqs;
  auto opts = [](const std::string& d) {
    auto o = options_for(d, 4);
    o.segment_bytes = 4096;
    return o;
  };
  {
    Storage st(opts(pristine));
    for (int i = 0; i < 40; ++i) {  // one group commit each
      reqs.push_back(make_upsert(500 + i, 8, 4, i * 10, false));
      append(st, reqs.back());
    }
  }
  const auto segs = segment_paths(pristine);
  ASSERT_GE(segs.size(), 3u);
  const auto spans = record_spans(segs.back());
  ASSERT_GE(spans.size(), 3u);
  const std::int64_t in_last = static_cast<std::int64_t>(spans.size());
  const std::string work = tmp.file("work");
  struct Case {
    const char* what;
    std::function<void(const std::string&)> damage;
    std::int64_t missing;
  };
  const std::vector<Case> cases = {
      {"cut in the middle of the second-last record",
       [&](const std::string& seg) {
         const auto [begin, end] = spans[spans.size() - 2];
         fs::resize_file(seg, (begin + end) / 2);
       },
       2},
      {"cut to its header", [&](const std::string& seg) { fs::resize_file(seg, 32); }, in_last},
      {"deleted", [&](const std::string& seg) { fs::remove(seg); }, in_last},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    copy_dir(pristine, work);
    c.damage(segment_paths(work).back());
    Storage st(opts(work));
    EXPECT_EQ(st.recovery().missing_acknowledged, c.missing);
    EXPECT_EQ(st.last_seq(), 40u - static_cast<std::uint64_t>(c.missing));
    EXPECT_EQ(replay_all(st).size(), 40u - static_cast<std::size_t>(c.missing));
  }
  // Undamaged, or closed again after the loss was reported: nothing is missing.
  EXPECT_EQ(Storage(opts(pristine)).recovery().missing_acknowledged, 0);
  EXPECT_EQ(Storage(opts(work)).recovery().missing_acknowledged, 0);
}

// Where the child stops: in the middle of writing rows (before any step), or right after a step.
struct CrashPoint {
  const char* name;
  int step;  // -1: mid-write; else a SnapshotStep
  std::uint64_t expect_seq;
  std::size_t expect_removed;  // files recovery removes
};

TEST(Snapshot, CrashAtEveryStepRecoversOldOrNewSnapshotWithTheFullState) {
  const CrashPoint points[] = {
      {"mid-write", -1, 5, 1},                                                   // the temp file
      {"temp_written", static_cast<int>(SnapshotStep::kTempWritten), 5, 1},      // the temp file
      {"renamed", static_cast<int>(SnapshotStep::kRenamed), 5, 1},               // the uncommitted snapshot
      {"manifest_written", static_cast<int>(SnapshotStep::kManifestWritten), 5, 2},  // + the manifest's temp
      {"committed", static_cast<int>(SnapshotStep::kCommitted), 12, 2},          // old snapshot + a segment
      {"log_truncated", static_cast<int>(SnapshotStep::kLogTruncated), 12, 0},
  };
  const std::int64_t dim = 40;  // records of about 1 KB: several 4 KB segments
  const auto reqs = workload(25, dim, 11);
  for (const CrashPoint& cp : points) {
    SCOPED_TRACE(cp.name);
    TempDir tmp;
    const std::string dir = tmp.file("s");
    auto o = options_for(dir, dim);
    o.segment_bytes = 4096;
    {
      // A previous snapshot at 5 and log records up to 15, across several segments.
      Storage st(o);
      for (std::size_t i = 0; i < 15; ++i) append(st, reqs[i]);
      write_snapshot(st, model_at(reqs, 5), 5, Dtype::kFloat32, 3)->commit();
    }
    const std::size_t segments_before = segment_paths(dir).size();
    ASSERT_GT(segments_before, 1u);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 3;
      try {
        auto oc = o;
        oc.on_snapshot_step = [&](SnapshotStep s) {
          if (static_cast<int>(s) == cp.step) _exit(0);  // the crash: no cleanup, no destructors
        };
        Storage st(oc);
        auto w = write_snapshot(st, model_at(reqs, 12), 12, Dtype::kFloat32, 2);
        if (cp.step == -1) _exit(0);
        w->commit();
        rc = 4;  // the step was never reached
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
      }
      _exit(rc);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;

    {
      Storage st(o);
      EXPECT_EQ(st.snapshot_seq(), cp.expect_seq);
      EXPECT_EQ(st.last_seq(), 15u);
      EXPECT_EQ(st.recovery().removed_files.size(), cp.expect_removed);
      EXPECT_FALSE(has_temp_files(dir));
      EXPECT_EQ(recovered_state(st), model_at(reqs, 15));
      // Exactly one snapshot file: the manifest's.
      int snapshots = 0;
      for (const auto& n : dir_names(dir)) snapshots += n.rfind("snapshot-", 0) == 0;
      EXPECT_EQ(snapshots, 1);
      std::cout << cp.name << ": snapshot seq " << st.snapshot_seq() << ", removed " << st.recovery().removed_files.size()
                << " file(s), " << segment_paths(dir).size() << " segment(s) (" << segments_before << " before)\n";
      // Life goes on: more records, another snapshot, a restart.
      for (std::size_t i = 15; i < 25; ++i) append(st, reqs[i]);
      write_snapshot(st, model_at(reqs, 20), 20, Dtype::kFloat32, 4)->commit();
    }
    Storage st(o);
    EXPECT_EQ(st.snapshot_seq(), 20u);
    EXPECT_EQ(recovered_state(st), model_at(reqs, 25));
  }
}

}  // namespace
}  // namespace shardtopk::test
