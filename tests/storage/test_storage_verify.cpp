// `storage verify` and `storage info` (verify_storage_dir, inspect_storage_dir): each damage the
// recovery tests make (test_wal, test_snapshot, and the start-up checks of test_updates) is
// found and named, a torn tail is told from damage, every directory a crash can leave is clean,
// and neither reads a directory through its lock nor changes a byte of it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <thread>

#include "shardtopk/error.hpp"
#include "shardtopk/storage_inspect.hpp"
#include "storage/crc32c.hpp"
#include "storage/format.hpp"
#include "storage_test_support.hpp"

namespace shardtopk::test {
namespace {

using Kind = StorageProblem::Kind;

// Every file's bytes, to show that verify and info change nothing.
std::map<std::string, std::vector<unsigned char>> dir_bytes(const std::string& dir) {
  std::map<std::string, std::vector<unsigned char>> out;
  for (const auto& n : dir_names(dir)) out[n] = read_bytes(dir + "/" + n);
  return out;
}

std::string listing(const StorageVerifyReport& r) {
  std::string s;
  for (const auto& c : r.checked) s += "ok " + c + "\n";
  for (const auto& n : r.notes) s += "note " + n + "\n";
  for (const auto& p : r.problems)
    s += std::string(p.kind == Kind::kDamage ? "DAMAGED " : "TORN ") + p.file + ": " + p.what + "\n";
  return s;
}

StorageVerifyReport verify(const std::string& dir, const std::string& corpus = "") {
  const auto before = dir_bytes(dir);
  StorageVerifyReport r = verify_storage_dir(dir, corpus);
  EXPECT_EQ(dir_bytes(dir), before) << "verify changed the directory";
  return r;
}

void expect_clean(const std::string& dir, const std::string& corpus = "") {
  const StorageVerifyReport r = verify(dir, corpus);
  EXPECT_TRUE(r.clean()) << listing(r);
}

// One problem of `kind` naming `file` (by its name) and saying `what`.
void expect_problem(const std::string& dir, Kind kind, const std::string& file, const std::string& what,
                    const std::string& corpus = "") {
  const StorageVerifyReport r = verify(dir, corpus);
  bool found = false;
  for (const auto& p : r.problems)
    found = found || (p.kind == kind && p.file.find(file) != std::string::npos && p.what.find(what) != std::string::npos);
  EXPECT_TRUE(found) << "expected " << (kind == Kind::kDamage ? "damage" : "a torn tail") << " in '" << file
                     << "' saying '" << what << "':\n"
                     << listing(r);
  EXPECT_EQ(r.damaged(), kind == Kind::kDamage) << listing(r);
}

std::string name_of(const std::string& path) { return fs::path(path).filename().string(); }

// The manifest as a crash leaves it: without the seq a clean close records (`log_seq`), so the
// last records are not known to be acknowledged.
void as_after_a_crash(const std::string& dir) {
  std::istringstream in(read_text(dir + "/MANIFEST.json"));
  std::string text;
  for (std::string line; std::getline(in, line);)
    if (line.find("\"log_seq\"") == std::string::npos) text += line + "\n";
  write_text(dir + "/MANIFEST.json", text);
}

// ------------------------------------------------------------------------------ good directories

TEST(StorageVerify, GoodDirectoriesAreClean) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(40, 40, 3);
  auto o = options_for(dir, 40);
  o.segment_bytes = 4096;
  {
    Storage st(o);  // a new directory
  }
  expect_clean(dir);
  {
    Storage st(o);
    for (std::size_t i = 0; i < 25; ++i) append(st, reqs[i]);
  }
  expect_clean(dir);
  ASSERT_GT(segment_paths(dir).size(), 2u);
  {
    Storage st(o);
    write_snapshot(st, model_at(reqs, 20), 20, Dtype::kFloat32, 4)->commit();
    for (std::size_t i = 25; i < 40; ++i) append(st, reqs[i]);
  }
  const StorageVerifyReport r = verify(dir);
  EXPECT_TRUE(r.clean()) << listing(r);
  EXPECT_GE(r.checked.size(), 3u) << listing(r);  // manifest, snapshot, segments
  // With retention: the older snapshot and the log from it on are checked too.
  o.keep_snapshots = 3;
  {
    Storage st(o);
    write_snapshot(st, model_at(reqs, 40), 40, Dtype::kFloat16, 4)->commit();
  }
  const StorageVerifyReport k = verify(dir);
  EXPECT_TRUE(k.clean()) << listing(k);
  EXPECT_NE(listing(k).find("older snapshot, seq 20"), std::string::npos) << listing(k);
  EXPECT_NE(listing(k).find("(kept for an older snapshot)"), std::string::npos) << listing(k);
}

// Whatever a crash at any step of a snapshot leaves (test_snapshot's crash points), a start-up
// recovers to the old or the new snapshot: no problem, the leftovers as notes.
TEST(StorageVerify, EveryDirectoryASnapshotCrashLeavesIsClean) {
  const std::int64_t dim = 40;
  const auto reqs = workload(15, dim, 11);
  for (int step = -1; step <= static_cast<int>(SnapshotStep::kLogTruncated); ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    TempDir tmp;
    const std::string dir = tmp.file("s");
    auto o = options_for(dir, dim);
    o.segment_bytes = 4096;
    {
      Storage st(o);
      for (std::size_t i = 0; i < 15; ++i) append(st, reqs[i]);
      write_snapshot(st, model_at(reqs, 5), 5, Dtype::kFloat32, 3)->commit();
    }
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      try {
        auto oc = o;
        oc.on_snapshot_step = [&](SnapshotStep s) {
          if (static_cast<int>(s) == step) _exit(0);
        };
        Storage st(oc);
        auto w = write_snapshot(st, model_at(reqs, 12), 12, Dtype::kFloat32, 2);
        if (step == -1) _exit(0);
        w->commit();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child: %s\n", e.what());
      }
      _exit(3);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    expect_clean(dir);
  }
}

// ------------------------------------------------------------------------------ the log (test_wal)

TEST(StorageVerify, ATornLastRecordIsATornTailAtEveryByte) {
  TempDir tmp;
  const std::string pristine = tmp.file("pristine");
  five_records(pristine, 6);
  as_after_a_crash(pristine);
  const auto spans = record_spans(segment_paths(pristine)[0]);
  const auto [begin, end] = spans.back();
  const std::string work = tmp.file("work");
  for (std::uint64_t cut = begin; cut < end; ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    copy_dir(pristine, work);
    const std::string seg = segment_paths(work)[0];
    fs::resize_file(seg, cut);
    if (cut == begin) {
      expect_clean(work);  // whole records only
      continue;
    }
    expect_problem(work, Kind::kTornTail, name_of(seg),
                   "a start-up cuts " + std::to_string(cut - begin) + " bytes at offset " + std::to_string(begin));
  }
}

// After a clean close the manifest records the log's last seq: a log cut short afterwards,
// at a record's boundary or inside it, has lost acknowledged records.
TEST(StorageVerify, ALogCutShortAfterACleanCloseLostAcknowledgedRecords) {
  TempDir tmp;
  const std::string pristine = tmp.file("pristine");
  five_records(pristine, 6);
  expect_clean(pristine);
  const auto spans = record_spans(segment_paths(pristine)[0]);
  const std::string work = tmp.file("work");
  for (std::uint64_t cut : {spans[3].first, spans.back().first, spans.back().first + 9}) {
    copy_dir(pristine, work);
    fs::resize_file(segment_paths(work)[0], cut);
    const std::uint64_t end = cut < spans.back().first ? 3 : 4;
    expect_problem(work, Kind::kDamage, "wal-",
                   "the log ends at seq " + std::to_string(end) + " but had reached seq 5 when the directory was last "
                   "closed or snapshotted: " + std::to_string(5 - end) + " acknowledged record(s)");
  }
  copy_dir(pristine, work);
  fs::remove(segment_paths(work)[0]);
  expect_problem(work, Kind::kDamage, "", "the log ends at seq 0 but had reached seq 5");
}

TEST(StorageVerify, GarbageAfterTheLastRecordAndAFlippedBitInItAreTornTails) {
  TempDir tmp;
  const std::string pristine = tmp.file("pristine");
  five_records(pristine, 4);
  as_after_a_crash(pristine);
  const auto spans = record_spans(segment_paths(pristine)[0]);
  const std::string work = tmp.file("work");
  for (std::size_t extra : {1u, 8u, 33u, 4096u}) {
    copy_dir(pristine, work);
    const std::string seg = segment_paths(work)[0];
    auto b = read_bytes(seg);
    b.resize(b.size() + extra, static_cast<unsigned char>(extra));
    write_bytes(seg, b);
    expect_problem(work, Kind::kTornTail, name_of(seg), "cuts " + std::to_string(extra) + " bytes");
  }
  for (std::uint64_t at = spans.back().first; at < spans.back().second; ++at) {
    copy_dir(pristine, work);
    flip_bit(segment_paths(work)[0], at, static_cast<int>(at % 8));
    expect_problem(work, Kind::kTornTail, "wal-", "1 record(s) from seq 5");
  }
}

TEST(StorageVerify, DamageInTheMiddleIsNamedWithItsOffsetAtEveryByte) {
  TempDir tmp;
  const std::string pristine = tmp.file("pristine");
  five_records(pristine, 4);
  const auto spans = record_spans(segment_paths(pristine)[0]);
  const std::string work = tmp.file("work");
  for (std::size_t r = 0; r < 4; ++r) {
    for (std::uint64_t at = spans[r].first; at < spans[r].second; ++at) {
      SCOPED_TRACE("byte " + std::to_string(at));
      copy_dir(pristine, work);
      const std::string seg = segment_paths(work)[0];
      flip_bit(seg, at, static_cast<int>((at * 3) % 8));
      expect_problem(work, Kind::kDamage, name_of(seg), "at offset " + std::to_string(spans[r].first));
    }
  }
}

TEST(StorageVerify, DamageInsideTheLastGroupCommitIsATornTailBeforeItDamage) {
  TempDir tmp;
  const std::string pristine = tmp.file("pristine");
  {
    auto o = options_for(pristine, 4);
    WriterGate gate(1);
    o.on_durable = gate.hook();
    Storage st(o);
    std::vector<Request> reqs;
    for (int i = 0; i < 5; ++i) reqs.push_back(make_upsert(50 + i, 3, 4, i * 10, false));
    std::thread first([&] { append(st, reqs[0]); });
    gate.wait_held();
    std::vector<std::thread> rest;
    for (int i = 1; i < 5; ++i) {
      rest.emplace_back([&, i] { append(st, reqs[i]); });
      wait_queued(st, i);
    }
    gate.release();
    first.join();
    for (auto& t : rest) t.join();
    ASSERT_EQ(st.stats().group_commits, 2);
  }
  as_after_a_crash(pristine);
  const auto spans = record_spans(segment_paths(pristine)[0]);
  const std::string work = tmp.file("work");
  copy_dir(pristine, work);
  flip_bit(segment_paths(work)[0], spans[2].first + 40, 1);
  expect_problem(work, Kind::kTornTail, "wal-", "3 record(s) from seq 3");
  copy_dir(pristine, work);
  flip_bit(segment_paths(work)[0], spans[0].first + 40, 1);
  expect_problem(work, Kind::kDamage, "wal-", "the log is damaged in the middle");
}

// A record whose checksums hold but whose values a start-up's replay refuses (a value that is
// not finite, an id twice, the reserved id): the service never writes one, and verify names it
// as damage instead of passing the directory.
TEST(StorageVerify, ARecordAStartUpWouldRefuseIsDamage) {
  struct Case {
    const char* name;
    std::function<void(unsigned char* payload, std::int64_t rows)> edit;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"nan", [](unsigned char* p, std::int64_t rows) {
         const float nan = std::numeric_limits<float>::quiet_NaN();
         std::memcpy(p + 16 + 8 * rows + 4 * 5, &nan, 4);  // row 1, column 1 of dim 4
       }, "row 1 (id 501) column 1 is nan (values must be finite)"},
      {"id twice", [](unsigned char* p, std::int64_t) { std::memcpy(p + 16 + 8, p + 16, 8); }, "gives id 500 twice"},
      {"reserved id", [](unsigned char* p, std::int64_t) {
         const std::int64_t pad = std::numeric_limits<std::int64_t>::max();
         std::memcpy(p + 16, &pad, 8);
       }, "row 0 has the reserved id 9223372036854775807"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir tmp;
    const std::string dir = tmp.file("s");
    {
      Storage st(options_for(dir, 4));
      append(st, make_upsert(3, 2, 4, 500, false));
    }
    expect_clean(dir);
    const std::string seg = segment_paths(dir).back();
    auto bytes = read_bytes(seg);
    const auto spans = record_spans(seg);
    ASSERT_EQ(spans.size(), 1u);
    unsigned char* h = bytes.data() + spans[0].first;
    using storage::kRecordHeaderBytes;
    c.edit(h + kRecordHeaderBytes, 2);
    // the checksums again, as a writer would have computed them over these bytes
    const std::uint32_t payload_crc = storage::crc32c(h + kRecordHeaderBytes, spans[0].second - spans[0].first - kRecordHeaderBytes);
    const std::uint32_t crc = storage::record_crc(payload_crc, h);
    std::memcpy(h, &crc, 4);
    {
      std::ofstream out(seg, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    expect_problem(dir, Kind::kDamage, name_of(seg), c.says);
  }
}

TEST(StorageVerify, DamageInAnEarlierSegmentAndMissingSegmentsAreNamed) {
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
  expect_clean(pristine);
  copy_dir(pristine, work);
  fs::resize_file(segment_paths(work)[1], fs::file_size(segment_paths(work)[1]) - 5);
  expect_problem(work, Kind::kDamage, name_of(segs[1]), "not the last one");
  copy_dir(pristine, work);
  flip_bit(segment_paths(work)[1], 3, 0);
  expect_problem(work, Kind::kDamage, name_of(segs[1]), "bad magic");
  copy_dir(pristine, work);
  fs::remove(segment_paths(work)[1]);
  expect_problem(work, Kind::kDamage, name_of(segs[2]), "a segment is missing or damaged");
  copy_dir(pristine, work);
  fs::remove(segment_paths(work)[0]);
  expect_problem(work, Kind::kDamage, name_of(segs[1]), "records 1 .. ");
  // A last segment whose creation was cut short: a start-up removes it.
  copy_dir(pristine, work);
  write_bytes(work + "/wal-00000000000000099999.log", std::vector<unsigned char>(20, 0));
  expect_problem(work, Kind::kTornTail, "wal-00000000000000099999.log", "creation was cut short");
}

TEST(StorageVerify, SegmentsWithoutAManifestAreDamageAndAnEmptyDirectoryIsNotAStorageDirectory) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  five_records(dir, 4);
  fs::remove(dir + "/MANIFEST.json");
  expect_problem(dir, Kind::kDamage, "MANIFEST.json", "missing, but the directory holds 1 log segment(s)");
  EXPECT_FALSE(verify_storage_dir(dir).empty);
  // Nothing of a storage directory in it (another file, or nothing): not damage, nothing to verify.
  fs::create_directories(tmp.file("empty"));
  write_bytes(tmp.file("empty") + "/notes.txt", std::vector<unsigned char>(5, 'x'));
  const StorageVerifyReport e = verify_storage_dir(tmp.file("empty"));
  EXPECT_TRUE(e.empty);
  EXPECT_TRUE(e.problems.empty()) << e.problems.front().what;
  EXPECT_FALSE(e.damaged());
  EXPECT_TRUE(inspect_storage_dir(tmp.file("empty")).empty);
  EXPECT_FALSE(inspect_storage_dir(dir).empty);
  EXPECT_THROW(verify_storage_dir(tmp.file("absent")), Error);
}

TEST(StorageVerify, AFifoNamedLikeASegmentIsRefusedNotOpened) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  five_records(dir, 4);
  const std::string fifo = dir + "/wal-00000000000000000099.log";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const StorageVerifyReport r = verify_storage_dir(dir);  // not verify(): reading the FIFO here would block
  EXPECT_NE(listing(r).find("DAMAGED wal-00000000000000000099.log: is a FIFO, not a regular file"), std::string::npos)
      << listing(r);
  try {
    (void)inspect_storage_dir(dir);
    ADD_FAILURE() << "a FIFO segment was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wal-00000000000000000099.log' is not a regular file"), std::string::npos)
        << e.what();
  }
}

// A LOCK that is a directory or a symbolic link: a start-up refuses the directory, so verify
// names it as damage (reading neither it nor what the link points to), and changes nothing.
// A manifest that is a link to a file elsewhere: verify names it as damage and a start-up
// refuses it alike (it followed the link and served from it, where verify said it refuses).
TEST(StorageVerify, AManifestThatIsALinkIsRefusedByVerifyAndStartUpAlike) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  five_records(dir, 4);
  const std::string manifest = dir + "/MANIFEST.json", target = tmp.file("manifest.json");
  fs::copy_file(manifest, target);
  fs::remove(manifest);
  fs::create_symlink(target, manifest);
  const StorageVerifyReport r = verify_storage_dir(dir);
  EXPECT_NE(listing(r).find("DAMAGED MANIFEST.json: is a symbolic link, not a regular file"), std::string::npos)
      << listing(r);
  try {
    Storage st(options_for(dir, 4));
    ADD_FAILURE() << "a start-up took a MANIFEST.json that is a link";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MANIFEST.json is a symbolic link, not a regular file"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fs::is_symlink(manifest)) << "the refused start-up changed the directory";
}

TEST(StorageVerify, ALockThatIsNotARegularFileIsNamed) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  five_records(dir, 4);
  const std::string lock = dir + "/LOCK";
  fs::remove(lock);
  const std::string target = tmp.file("elsewhere");
  write_text(target, "not a lock\n");
  for (const std::string kind : {"a directory", "a symbolic link"}) {
    SCOPED_TRACE(kind);
    if (kind == "a directory") ASSERT_TRUE(fs::create_directory(lock));
    else fs::create_symlink(target, lock);
    const std::vector<std::string> names = dir_names(dir);
    const StorageVerifyReport r = verify_storage_dir(dir);  // not verify(): LOCK cannot be read as bytes
    EXPECT_NE(listing(r).find("DAMAGED LOCK: is " + kind + ", not a regular file: a start-up refuses"),
              std::string::npos)
        << listing(r);
    EXPECT_TRUE(r.damaged()) << listing(r);
    EXPECT_EQ(dir_names(dir), names);
    EXPECT_EQ(read_text(target), "not a lock\n");
    try {
      Storage st(options_for(dir, 4));
      ADD_FAILURE() << "a start-up took a LOCK that is " << kind;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is " + kind + ", not a regular file"), std::string::npos) << e.what();
    }
    fs::remove(lock);
  }
  expect_clean(dir);
}

TEST(StorageInspect, SnapshotsBesideAMissingOrUnreadableManifestAreNotLeftovers) {
  // A start-up refuses such a directory before it removes anything, and the snapshot may hold the
  // only copy of the rows: neither command may call it something a start-up removes.
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(6, 4, 23);
  std::string path;
  {
    Storage st(options_for(dir, 4));
    for (const auto& r : reqs) append(st, r);
    path = write_snapshot(st, model_at(reqs, 6), 6, Dtype::kFloat32, 4)->commit();
  }
  const std::string name = name_of(path), mpath = dir + "/MANIFEST.json", good = read_text(mpath);
  for (const bool unreadable : {true, false}) {
    SCOPED_TRACE(unreadable ? "unreadable manifest" : "no manifest");
    if (unreadable) write_text(mpath, good.substr(0, good.size() / 2));
    else fs::remove(mpath);
    const StorageDirSummary s = inspect_storage_dir(dir);
    EXPECT_NE(s.manifest_error, "");
    EXPECT_TRUE(s.leftovers.empty()) << s.leftovers.front();
    EXPECT_EQ(s.unclaimed_snapshots, std::vector<std::string>{name});
    const StorageVerifyReport r = verify(dir);
    EXPECT_TRUE(r.damaged()) << listing(r);
    for (const auto& n : r.notes)
      if (n.find(name) != std::string::npos) EXPECT_EQ(n.find("a start-up removes it"), std::string::npos) << n;
    EXPECT_NE(listing(r).find(name + ": not checked: no readable manifest names it"), std::string::npos) << listing(r);
  }
}

// ------------------------------------------------------------------------------ snapshots and the base

TEST(StorageVerify, AMissingDamagedCutOrReplacedSnapshotIsNamed) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(12, 4, 11);
  std::string path, older;
  {
    Storage st(options_for(dir, 4));
    for (std::size_t i = 0; i < 6; ++i) append(st, reqs[i]);
    older = write_snapshot(st, model_at(reqs, 6), 6, Dtype::kFloat32, 4)->commit();
    fs::copy_file(older, tmp.file("older.h5"));
    for (std::size_t i = 6; i < 12; ++i) append(st, reqs[i]);
    path = write_snapshot(st, model_at(reqs, 12), 12, Dtype::kFloat32, 4)->commit();
  }
  const std::string name = name_of(path);
  const auto size = fs::file_size(path);
  expect_clean(dir);
  // A superseded snapshot a crash left beside it is no damage.
  fs::copy_file(tmp.file("older.h5"), older);
  expect_clean(dir);
  fs::remove(older);
  flip_bit(path, size / 2, 4);
  expect_problem(dir, Kind::kDamage, name, "is damaged: its CRC-32C is ");
  flip_bit(path, size / 2, 4);
  expect_clean(dir);
  const std::string saved = tmp.file("saved.h5");
  fs::copy_file(path, saved);
  fs::resize_file(path, size - 100);
  expect_problem(dir, Kind::kDamage, name,
                 "is " + std::to_string(size - 100) + " bytes, the manifest recorded " + std::to_string(size));
  // The older snapshot under the current one's name: its bytes and its own seq differ; with the
  // manifest's record of its bytes gone, its seq still does.
  fs::copy_file(tmp.file("older.h5"), path, fs::copy_options::overwrite_existing);
  expect_problem(dir, Kind::kDamage, name, "holds seq 6, dim 4, metric inner_product but the manifest says seq 12");
  const std::string mpath = dir + "/MANIFEST.json";
  const std::string manifest = read_text(mpath);
  {
    std::istringstream in(manifest);
    std::string text;
    for (std::string line; std::getline(in, line);)
      if (line.find("snapshot_bytes") == std::string::npos && line.find("snapshot_crc32c") == std::string::npos)
        text += line + "\n";
    write_text(mpath, text);
  }
  expect_problem(dir, Kind::kDamage, name, "holds seq 6, dim 4, metric inner_product but the manifest says seq 12");
  write_text(mpath, manifest);
  fs::remove(path);
  expect_problem(dir, Kind::kDamage, name, "named by the manifest but missing");
  fs::copy_file(saved, path);
  expect_clean(dir);
}

TEST(StorageVerify, EachStrictManifestRuleIsNamed) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(8, 4, 17);
  {
    Storage st(options_for(dir, 4));
    for (const auto& r : reqs) append(st, r);
    write_snapshot(st, model_at(reqs, 8), 8, Dtype::kFloat32, 4)->commit();
  }
  const std::string mpath = dir + "/MANIFEST.json", good = read_text(mpath);
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? t : t.replace(at, from.size(), to);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {edited("\"seq\": 8", "\"seq\": 8, \"seq\": 8"), "key 'seq' appears more than once"},
      {edited("\"dim\": 4", "\"dim\": 4.9"), "'dim' is 4.9 (expected an integer"},
      {edited("\"seq\": 8", "\"seq\": -1"), "'seq' is -1"},
      {edited("\"seq\": 8", "\"seq\": 8, \"corpus\": []"), "'corpus' is [] (expected an object)"},
      {good + std::string("\0{}", 3), "a NUL byte at offset"},
      {"{", "unreadable manifest"},
  };
  for (const auto& [text, needle] : cases) {
    write_text(mpath, text);
    expect_problem(dir, Kind::kDamage, "MANIFEST.json", needle);
  }
  write_text(mpath, good);
  expect_clean(dir);
}

TEST(StorageVerify, ALogIsCheckedAgainstTheCorpusFileItWasWrittenAgainst) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const std::string a = tmp.file("a.h5"), b = tmp.file("b.h5");
  {
    std::string bytes(3u << 20, '\0');
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131) >> 7);
    std::ofstream(a, std::ios::binary) << bytes;
    bytes[bytes.size() - 5] ^= 1;
    std::ofstream(b, std::ios::binary) << bytes;
  }
  auto o = options_for(dir, 4);
  o.base_corpus = a;
  {
    Storage st(o);  // an empty log: another file would simply be recorded
  }
  expect_clean(dir, b);
  const StorageVerifyReport r = verify(dir, b);
  EXPECT_NE(listing(r).find("a start-up with it records it instead"), std::string::npos) << listing(r);
  {
    Storage st(o);
    for (const auto& req : workload(3, 4, 2)) append(st, req);
  }
  expect_clean(dir);  // the recorded path, which holds the recorded file
  expect_problem(dir, Kind::kDamage, "", "but '" + b + "' is another file", b);
  fs::remove(a);
  const StorageVerifyReport n = verify(dir);
  EXPECT_TRUE(n.clean()) << listing(n);
  EXPECT_NE(listing(n).find("its identity was not checked"), std::string::npos) << listing(n);
}

// ------------------------------------------------------------------------------ beside a service

// A snapshot of the whole log leaves the log's last segment empty, starting after the snapshot:
// it is the segment the next write goes into, not one the snapshot superseded, and info and
// verify say so; a restart then writes into it.
TEST(StorageInspect, TheEmptySegmentAfterASnapshotOfTheWholeLogIsTheLog) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(6, 8, 9);
  const auto o = options_for(dir, 8);
  {
    Storage st(o);
    for (std::size_t i = 0; i < 5; ++i) append(st, reqs[i]);
    write_snapshot(st, model_at(reqs, 5), 5, Dtype::kFloat32, 2)->commit();
  }
  const StorageDirSummary s = inspect_storage_dir(dir);
  ASSERT_FALSE(s.segments.empty());
  const StorageSegmentSummary last = s.segments.back();
  ASSERT_EQ(last.first_seq, 6u) << last.name;
  EXPECT_EQ(last.records, 0);
  EXPECT_EQ(last.role, "log") << last.name;
  const StorageVerifyReport r = verify(dir);
  EXPECT_TRUE(r.clean()) << listing(r);
  EXPECT_EQ(listing(r).find(last.name + ": every record in it is in the snapshot"), std::string::npos) << listing(r);
  {
    Storage st(o);
    append(st, reqs[5]);
  }
  const StorageDirSummary after = inspect_storage_dir(dir);
  ASSERT_FALSE(after.segments.empty());
  EXPECT_EQ(after.segments.back().name, last.name) << "the restart wrote into another segment";
  EXPECT_EQ(after.segments.back().records, 1);
  EXPECT_EQ(after.segments.back().role, "log");
  EXPECT_EQ(after.log_records, 1);
}

TEST(StorageInspect, InfoAndVerifyReadAnOpenDirectoryWithoutItsLock) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(20, 6, 5);
  auto o = options_for(dir, 6);
  o.metric = Metric::kL2;
  Storage st(o);  // holds the lock throughout
  st.record_capacity(4096);
  for (std::size_t i = 0; i < 10; ++i) append(st, reqs[i]);
  write_snapshot(st, model_at(reqs, 10), 10, Dtype::kFloat16, 4)->commit();
  for (std::size_t i = 10; i < 20; ++i) append(st, reqs[i]);
  const auto before = dir_bytes(dir);
  const StorageDirSummary s = inspect_storage_dir(dir);
  EXPECT_EQ(dir_bytes(dir), before);
  EXPECT_EQ(s.manifest_error, "");
  EXPECT_EQ(s.dim, 6);
  EXPECT_EQ(s.metric, Metric::kL2);
  EXPECT_EQ(s.snapshot, "snapshot-00000000000000000010.h5");
  EXPECT_EQ(s.snapshot_seq, 10u);
  EXPECT_EQ(s.snapshot_bytes, static_cast<std::int64_t>(fs::file_size(dir + "/" + s.snapshot)));
  ASSERT_TRUE(s.snapshot_info.has_value()) << s.snapshot_error;
  EXPECT_EQ(s.snapshot_info->rows, static_cast<std::int64_t>(model_at(reqs, 10).size()));
  EXPECT_EQ(s.snapshot_info->dtype, Dtype::kFloat16);
  EXPECT_EQ(s.capacity_rows, 4096);
  EXPECT_EQ(s.last_seq, 20u);
  EXPECT_EQ(s.log_records, 10);
  EXPECT_EQ(s.log_bytes, st.stats().log_bytes);
  EXPECT_NE(s.lock_holder.find("pid " + std::to_string(getpid())), std::string::npos) << s.lock_holder;
  std::int64_t records = 0;
  for (const auto& g : s.segments) records += g.role == "log" ? g.records : 0;
  EXPECT_EQ(records, 10);
  const StorageVerifyReport r = verify(dir);
  EXPECT_TRUE(r.clean()) << listing(r);
  // Without a snapshot: the corpus identity, and nothing after the base.
  TempDir t2;
  const std::string corpus = t2.file("c.bin");
  write_text(corpus, "rows");
  auto o2 = options_for(t2.file("s"), 3);
  o2.base_corpus = corpus;
  Storage st2(o2);
  const StorageDirSummary s2 = inspect_storage_dir(t2.file("s"));
  EXPECT_EQ(s2.snapshot, "");
  EXPECT_EQ(s2.corpus_path, corpus);
  EXPECT_EQ(s2.corpus_bytes, 4);
  EXPECT_EQ(s2.log_records, 0);
  EXPECT_EQ(s2.capacity_rows, 0);
}

}  // namespace
}  // namespace shardtopk::test
