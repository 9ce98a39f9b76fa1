// Operating a storage directory: the lock handed over from a process that is exiting (and
// refused, naming the holder, to one that is not), snapshot retention, the recorded capacity,
// the snapshot's age, and the config keys for them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <thread>

#include "shardtopk/config.hpp"
#include "shardtopk/error.hpp"
#include "storage_test_support.hpp"

namespace shardtopk::test {
namespace {

std::string host_name() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

/// A child process that opens `o.dir` (taking its lock) and appends `records`, then holds the
/// directory until release() (or until this object ends), and exits without closing anything:
/// the lock goes when the process does, as with a killed rank.
class HolderProcess {
 public:
  /// `fail_on_release`: on release() the child's start-up fails instead (an exception unwinds
  /// its Storage, which removes a directory it created and wrote nothing to) before it exits.
  HolderProcess(const StorageOptions& o, const std::vector<Request>& records, bool fail_on_release = false) {
    int ready[2], hold[2];
    if (pipe(ready) != 0 || pipe(hold) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      close(hold[1]);
      char c = 0;
      try {
        if (fail_on_release) {
          Storage st(o);
          for (const Request& r : records) append(st, r);
          c = 1;
          if (write(ready[1], &c, 1) != 1) _exit(2);
          if (read(hold[0], &c, 1) < 0) _exit(3);
          throw std::runtime_error("a later step of the start-up failed");  // ~Storage while unwinding
        }
        Storage* st = new Storage(o);  // never closed: the process ends holding it
        for (const Request& r : records) append(*st, r);
        c = 1;
      } catch (const std::exception& e) {
        if (fail_on_release && c == 1) _exit(0);
        std::fprintf(stderr, "holder: %s\n", e.what());
      }
      if (write(ready[1], &c, 1) != 1) _exit(2);
      if (read(hold[0], &c, 1) < 0) _exit(3);  // a byte, or the parent's end closed
      _exit(0);
    }
    close(ready[1]);
    close(hold[0]);
    hold_ = hold[1];
    char c = 0;
    ok_ = read(ready[0], &c, 1) == 1 && c == 1;
    close(ready[0]);
  }
  ~HolderProcess() { release(); }
  bool holding() const { return ok_; }
  pid_t pid() const { return pid_; }
  /// Lets it exit and reaps it.
  void release() {
    if (hold_ < 0) return;
    const char c = 1;
    (void)!write(hold_, &c, 1);
    close(hold_);
    hold_ = -1;
    int status = 0;
    waitpid(pid_, &status, 0);
  }

 private:
  pid_t pid_ = -1;
  int hold_ = -1;
  bool ok_ = false;
};

/// Polls `cap` until it holds `needle` (a bound against hangs, not a timing assertion).
bool wait_for_log(const LogCapture& cap, const std::string& needle) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (cap.text().find(needle) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

/// A thread that opens a Storage with `o` (waiting for its lock as the options say).
class Opener {
 public:
  explicit Opener(const StorageOptions& o)
      : thread_([this, o] {
          try {
            opened = std::make_unique<Storage>(o);
          } catch (const Error& e) {
            error = e.what();
          }
          done = true;
        }) {}
  ~Opener() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::atomic<bool> done{false};
  std::unique_ptr<Storage> opened;  ///< after join(): the open Storage, or null and `error`
  std::string error;

 private:
  std::thread thread_;
};

// ------------------------------------------------------------------------------ lock hand-over

TEST(StorageLock, AnOpenWaitsForTheHolderToExitLoggingOnceWhomItWaitsFor) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(3, 4, 7);
  HolderProcess holder(options_for(dir, 4), reqs);
  ASSERT_TRUE(holder.holding());
  LogCapture cap;
  auto o = options_for(dir, 4);
  o.lock_wait_s = 600;
  Opener opener(o);
  const std::string waiting = "is held by pid " + std::to_string(holder.pid()) + " on host '" + host_name() +
                              "' (running): waiting up to 600 s (storage.lock_wait_s)";
  const bool logged = wait_for_log(cap, waiting);
  EXPECT_TRUE(logged) << cap.text();
  EXPECT_FALSE(opener.done) << "opened while the holder still held the directory";  // never two writers
  holder.release();
  opener.join();
  ASSERT_TRUE(opener.opened) << opener.error;
  EXPECT_EQ(count_of(cap.text(), "waiting up to"), 1) << cap.text();
  EXPECT_EQ(recovered_state(*opener.opened), model_at(reqs, 3)) << "the holder's records";
  EXPECT_EQ(append(*opener.opened, make_delete({1})), 4u);
  // The lock file names its holder now.
  EXPECT_NE(read_text(dir + "/LOCK").find("pid " + std::to_string(getpid()) + "\n"), std::string::npos);
}

// A start-up that creates a new directory and fails removes it again (nothing was written to
// it). One that waited for its lock meanwhile then holds the locks of removed files: it creates
// the directory again and opens that.
TEST(StorageLock, AStartThatWaitedForAFailedStartOfANewDirectoryCreatesItAgain) {
  TempDir tmp;
  const std::string dir = tmp.file("new/s");
  HolderProcess holder(options_for(dir, 4), {}, /*fail_on_release=*/true);  // creates the directory
  ASSERT_TRUE(holder.holding()) << "the first start-up did not open the directory";
  LogCapture cap;
  auto o = options_for(dir, 4);
  o.lock_wait_s = 600;
  Opener opener(o);
  EXPECT_TRUE(wait_for_log(cap, "waiting up to 600 s")) << cap.text();
  holder.release();  // the first start-up fails now, removing the directory
  opener.join();
  ASSERT_TRUE(opener.opened) << opener.error << "\n" << cap.text();
  EXPECT_NE(cap.text().find("was removed while this process waited for it"), std::string::npos) << cap.text();
  EXPECT_NE(read_text(dir + "/LOCK").find("pid " + std::to_string(getpid()) + "\n"), std::string::npos);
  EXPECT_EQ(append(*opener.opened, make_delete({1})), 1u) << "a fresh directory's first record";
  opener.opened.reset();
  EXPECT_TRUE(fs::exists(dir + "/MANIFEST.json"));
}

TEST(StorageLock, AHolderThatDoesNotExitIsNamedAfterTheWaitAndNothingChanges) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  HolderProcess holder(options_for(dir, 4), workload(2, 4, 9));
  ASSERT_TRUE(holder.holding());
  const auto before = dir_names(dir);
  const std::string manifest = read_text(dir + "/MANIFEST.json");
  const std::string who = "is held by another process, pid " + std::to_string(holder.pid()) + " on host '" +
                          host_name() + "' (running)";
  auto o = options_for(dir, 4);
  std::string e = error_of([&] { Storage st(o); });  // lock_wait_s 0: at once
  EXPECT_NE(e.find(who), std::string::npos) << e;
  EXPECT_NE(e.find("storage.lock_wait_s = 0"), std::string::npos) << e;
  o.lock_wait_s = 0.2;
  e = error_of([&] { Storage st(o); });
  EXPECT_NE(e.find(who), std::string::npos) << e;
  EXPECT_NE(e.find("still after waiting 0.2 s (storage.lock_wait_s)"), std::string::npos) << e;
  // The waiter's ticks run, and what one throws ends the wait with its error.
  o.lock_wait_s = 600;
  int ticks = 0;
  o.on_lock_wait = [&] {
    if (++ticks == 2) throw Error("the other ranks are gone");
  };
  e = error_of([&] { Storage st(o); });
  EXPECT_EQ(e, "the other ranks are gone");
  EXPECT_EQ(ticks, 2);
  EXPECT_EQ(dir_names(dir), before);
  EXPECT_EQ(read_text(dir + "/MANIFEST.json"), manifest);
}

TEST(StorageLock, ARemovedLockFileStillKeepsASecondWriterOut) {
  // An operator who deletes LOCK as "stale" while a service runs: a lock on the file alone would
  // let a second process lock a new LOCK and append records of the same seqs to the same log.
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(3, 4, 13);
  HolderProcess holder(options_for(dir, 4), reqs);
  ASSERT_TRUE(holder.holding());
  fs::remove(dir + "/LOCK");
  const auto before = dir_names(dir);
  const std::string manifest = read_text(dir + "/MANIFEST.json");
  auto o = options_for(dir, 4);
  const std::string e = error_of([&] { Storage st(o); });
  EXPECT_NE(e.find("is held by another process"), std::string::npos) << e;
  EXPECT_EQ(read_text(dir + "/MANIFEST.json"), manifest);
  std::vector<std::string> after = dir_names(dir);
  after.erase(std::remove(after.begin(), after.end(), "LOCK"), after.end());
  EXPECT_EQ(after, before);
  holder.release();
  Storage st(o);
  EXPECT_EQ(recovered_state(st), model_at(reqs, 3));
}

TEST(StorageLock, ASecondOpenInTheSameProcessFailsAtOnce) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  auto o = options_for(dir, 4);
  Storage first(o);
  o.lock_wait_s = 3600;  // not waited for: this process would wait for itself
  const std::string e = error_of([&] { Storage second(o); });
  EXPECT_NE(e.find("pid " + std::to_string(getpid())), std::string::npos) << e;
  EXPECT_NE(e.find("this process has the directory open already"), std::string::npos) << e;
}

// ------------------------------------------------------------------------------ retention

// Rolls `dir` back by hand to the snapshot at `seq` (docs/OPERATIONS.md): the manifest names it,
// without a checksum.
void point_manifest_at(const std::string& dir, std::int64_t dim, std::uint64_t seq) {
  char name[64];
  std::snprintf(name, sizeof name, "snapshot-%020llu.h5", static_cast<unsigned long long>(seq));
  write_text(dir + "/MANIFEST.json", "{\"format\": \"shardtopk-storage\", \"version\": 1, \"dim\": " +
                                         std::to_string(dim) + ", \"metric\": \"inner_product\", \"snapshot\": \"" +
                                         name + "\", \"seq\": " + std::to_string(seq) + "}\n");
}

int count_snapshots(const std::string& dir) {
  int n = 0;
  for (const auto& f : dir_names(dir)) n += f.rfind("snapshot-", 0) == 0;
  return n;
}

TEST(Retention, OlderSnapshotsAreKeptWithTheLogFromTheOldestSoEachRebuildsTheState) {
  const std::int64_t dim = 40;  // records of about 1 KB: several 4 KB segments between snapshots
  const auto reqs = workload(45, dim, 21);
  TempDir tmp;
  const std::string dir = tmp.file("s");
  auto o = options_for(dir, dim);
  o.segment_bytes = 4096;
  o.keep_snapshots = 2;
  {
    Storage st(o);
    for (std::uint64_t at : {10u, 20u, 30u}) {
      for (std::uint64_t i = at - 10; i < at; ++i) append(st, reqs[i]);
      write_snapshot(st, model_at(reqs, at), at, Dtype::kFloat32, 4)->commit();
    }
    for (std::size_t i = 30; i < 40; ++i) append(st, reqs[i]);
    const StorageStats s = st.stats();
    EXPECT_EQ(s.snapshot_seq, 30u);
    EXPECT_EQ(s.older_snapshots, 1);
    EXPECT_GT(s.retained_log_bytes, 0);
    EXPECT_EQ(s.records_since_snapshot, 10);
    EXPECT_EQ(recovered_state(st), model_at(reqs, 40));
  }
  EXPECT_EQ(count_snapshots(dir), 2);
  EXPECT_FALSE(fs::exists(dir + "/snapshot-00000000000000000010.h5"));
  EXPECT_TRUE(fs::exists(dir + "/snapshot-00000000000000000020.h5"));
  const std::string kept = tmp.file("kept");
  copy_dir(dir, kept);
  // A restart with the same retention keeps them (and reads only the log after the current one).
  {
    Storage st(o);
    EXPECT_TRUE(st.recovery().removed_files.empty());
    EXPECT_EQ(st.stats().older_snapshots, 1);
    EXPECT_EQ(recovered_state(st), model_at(reqs, 40));
  }
  // Rolled back to the older snapshot by hand: its log rebuilds the same state.
  copy_dir(kept, tmp.file("rollback"));
  point_manifest_at(tmp.file("rollback"), dim, 20);
  {
    Storage st(options_for(tmp.file("rollback"), dim));
    EXPECT_EQ(st.snapshot_seq(), 20u);
    EXPECT_EQ(recovered_state(st), model_at(reqs, 40));
  }
  // keep_snapshots 1 (the default): the older snapshot and the log only it needed go.
  {
    Storage st(options_for(dir, dim));
    EXPECT_FALSE(st.recovery().removed_files.empty());
    EXPECT_EQ(st.stats().older_snapshots, 0);
    EXPECT_EQ(st.stats().retained_log_bytes, 0);
    EXPECT_EQ(recovered_state(st), model_at(reqs, 40));
    for (const auto& seg : segment_paths(dir)) EXPECT_GE(fs::path(seg).filename().string(), "wal-00000000000000000031.log");
  }
  EXPECT_EQ(count_snapshots(dir), 1);
  // With a snapshot at every commit and keep 3, the oldest two stay and the third older goes.
  auto o3 = o;
  o3.keep_snapshots = 3;
  o3.dir = kept;
  {
    Storage st(o3);
    write_snapshot(st, model_at(reqs, 40), 40, Dtype::kFloat32, 4)->commit();
    EXPECT_EQ(st.stats().older_snapshots, 2);
    for (std::size_t i = 40; i < 45; ++i) append(st, reqs[i]);
    write_snapshot(st, model_at(reqs, 45), 45, Dtype::kFloat32, 4)->commit();
    EXPECT_EQ(st.stats().older_snapshots, 2);
  }
  EXPECT_EQ(count_snapshots(kept), 3);
  EXPECT_FALSE(fs::exists(kept + "/snapshot-00000000000000000020.h5"));
  point_manifest_at(kept, dim, 30);
  Storage st(options_for(kept, dim));
  EXPECT_EQ(recovered_state(st), model_at(reqs, 45));
}

TEST(Retention, BadValuesAreRefused) {
  TempDir tmp;
  auto o = options_for(tmp.file("s"), 4);
  o.keep_snapshots = 0;
  EXPECT_NE(error_of([&] { Storage st(o); }).find("keep_snapshots = 0 (allowed: 1 .. 1000)"), std::string::npos);
  o.keep_snapshots = 1;
  o.lock_wait_s = -1;
  EXPECT_NE(error_of([&] { Storage st(o); }).find("lock_wait_s = -1 (allowed: 0 .. 86400)"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp.file("s")));
}

// ------------------------------------------------------------------------------ capacity, age

TEST(StorageManifest, TheCapacityIsRecordedAndKeptBySnapshotsAndRestarts) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(8, 4, 5);
  {
    Storage st(options_for(dir, 4));
    EXPECT_EQ(st.recorded_capacity(), 0);
    EXPECT_EQ(read_storage_manifest(dir)->capacity_rows, 0);
    st.record_capacity(12500);
    EXPECT_EQ(st.recorded_capacity(), 12500);
    for (const auto& r : reqs) append(st, r);
    write_snapshot(st, model_at(reqs, 8), 8, Dtype::kFloat32, 3)->commit();
    EXPECT_THROW(st.record_capacity(0), Error);
  }
  EXPECT_NE(read_text(dir + "/MANIFEST.json").find("\"capacity_rows\": 12500"), std::string::npos);
  EXPECT_EQ(read_storage_manifest(dir)->capacity_rows, 12500);
  {
    Storage st(options_for(dir, 4));
    EXPECT_EQ(st.recorded_capacity(), 12500);
    st.record_capacity(20000);  // storage.capacity_rows raised: the next start keeps that
  }
  EXPECT_EQ(read_storage_manifest(dir)->capacity_rows, 20000);
  // Read strictly, as the manifest's other integers.
  const std::string good = read_text(dir + "/MANIFEST.json");
  std::string bad = good;
  bad.replace(bad.find("20000"), 5, "0");
  write_text(dir + "/MANIFEST.json", bad);
  EXPECT_NE(error_of([&] { Storage st(options_for(dir, 4)); }).find("'capacity_rows' is 0 (expected an integer 1 .. "),
            std::string::npos);
  bad = good;
  bad.replace(bad.find("20000"), 5, "-5");
  write_text(dir + "/MANIFEST.json", bad);
  EXPECT_NE(error_of([&] { Storage st(options_for(dir, 4)); }).find("'capacity_rows' is -5 (expected an integer 1 .. "),
            std::string::npos);
  bad = good;
  bad.replace(bad.find("20000"), 5, "\"20000\"");
  write_text(dir + "/MANIFEST.json", bad);
  EXPECT_NE(error_of([&] { Storage st(options_for(dir, 4)); }).find("'capacity_rows' is \"20000\""), std::string::npos);
}

TEST(StorageManifest, TheSnapshotsAgeComesFromItsFileAndRestartsWithTheNextOne) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(6, 4, 3);
  std::string snap;
  {
    Storage st(options_for(dir, 4));
    for (const auto& r : reqs) append(st, r);
    snap = write_snapshot(st, model_at(reqs, 6), 6, Dtype::kFloat32, 3)->commit();
  }
  // Written two hours ago, as far as the file system says.
  const struct timespec times[2] = {{0, UTIME_OMIT}, {time(nullptr) - 7200, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, snap.c_str(), times, 0), 0);
  Storage st(options_for(dir, 4));
  EXPECT_GE(st.stats().seconds_since_snapshot, 7200.0);
  append(st, make_delete({1}));
  write_snapshot(st, model_at(reqs, 6), 7, Dtype::kFloat32, 3)->commit();
  EXPECT_LT(st.stats().seconds_since_snapshot, 7200.0);
}

TEST(StorageConfig, TheKeysHaveDefaultsBoundsAndMapToOptions) {
  const Config d = parse_config("corpus: {path: x.h5}\n");
  EXPECT_EQ(d.storage.lock_wait_s, 30.0);
  EXPECT_EQ(d.storage.keep_snapshots, 1);
  EXPECT_EQ(d.storage.snapshot_interval_s, 0.0);
  Config c = parse_config(
      "corpus: {path: x.h5}\nstorage:\n  dir: /srv/log\n  lock_wait_s: 2.5\n  keep_snapshots: 3\n"
      "  snapshot_interval_s: 600\n",
      "s.yaml");
  c = parse_config(to_yaml(c), "again");
  EXPECT_EQ(c.storage.snapshot_interval_s, 600.0);
  const StorageOptions o = storage_options(c.storage, 8, Metric::kL2);
  EXPECT_EQ(o.lock_wait_s, 2.5);
  EXPECT_EQ(o.keep_snapshots, 3);
  const StorageOptions od = storage_options(parse_config("corpus: {path: x.h5}\nstorage: {dir: /a}\n").storage, 8,
                                            Metric::kL2);
  EXPECT_EQ(od.lock_wait_s, 30.0);
  EXPECT_EQ(od.keep_snapshots, 1);
}

}  // namespace
}  // namespace shardtopk::test
