// Entries of a storage directory that are not what their names say (symbolic links, FIFOs,
// directories), links planted at the names a snapshot writes, and files a snapshot removes while
// `storage info` or `storage verify` reads them: writes never follow a link, reads never block,
// and each such entry is named instead of ending the run.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <future>
#include <thread>

#include "shardtopk/error.hpp"
#include "shardtopk/storage_inspect.hpp"
#include "storage/lock.hpp"
#include "storage_test_support.hpp"

namespace shardtopk::test {
namespace {

using Kind = StorageProblem::Kind;

std::string listing(const StorageVerifyReport& r) {
  std::string s;
  for (const auto& c : r.checked) s += "ok " + c + "\n";
  for (const auto& n : r.notes) s += "note " + n + "\n";
  for (const auto& p : r.problems)
    s += std::string(p.kind == Kind::kDamage ? "DAMAGED " : "TORN ") + p.file + ": " + p.what + "\n";
  return s;
}

bool is_link(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

bool is_regular(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string open_error(const StorageOptions& o) {
  try {
    Storage st(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ------------------------------------------------------------------------------ writes follow no link

TEST(StorageFiles, ALockThatIsALinkFifoOrDirectoryIsRefusedAndNothingIsWrittenThroughIt) {
  TempDir tmp;
  const std::string dir = tmp.file("s"), lock = dir + "/LOCK";
  five_records(dir, 4);
  const std::string victim = tmp.file("victim.txt"), absent = tmp.file("absent.txt");
  write_text(victim, "keep me\n");

  fs::remove(lock);
  fs::create_symlink(victim, lock);
  EXPECT_NE(open_error(options_for(dir, 4)).find("'" + lock + "' is a symbolic link, not a regular file"),
            std::string::npos)
      << open_error(options_for(dir, 4));
  EXPECT_EQ(read_text(victim), "keep me\n");

  fs::remove(lock);
  fs::create_symlink(absent, lock);  // dangling: an open with O_CREAT would make the target
  EXPECT_NE(open_error(options_for(dir, 4)).find("is a symbolic link"), std::string::npos);
  EXPECT_FALSE(fs::exists(absent));

  fs::remove(lock);
  ASSERT_EQ(mkfifo(lock.c_str(), 0600), 0);
  EXPECT_NE(open_error(options_for(dir, 4)).find("'" + lock + "' is a FIFO, not a regular file"), std::string::npos)
      << open_error(options_for(dir, 4));

  fs::remove(lock);
  fs::create_directory(lock);
  EXPECT_NE(open_error(options_for(dir, 4)).find("'" + lock + "' is a directory, not a regular file"),
            std::string::npos)
      << open_error(options_for(dir, 4));

  fs::remove(lock);
  EXPECT_EQ(open_error(options_for(dir, 4)), "");  // a regular LOCK is made anew
  EXPECT_TRUE(is_regular(lock));

  // A LOCK with a second name (a planted hard link, or a `cp -al` backup): taken, as one writer
  // still needs it, but the holder is not written into the file behind the other name.
  fs::remove(lock);
  write_text(victim, "pid 1\nhost " + storage::this_host() + "\n");  // a record that is not the holder's
  ASSERT_EQ(::link(victim.c_str(), lock.c_str()), 0);
  EXPECT_EQ(open_error(options_for(dir, 4)), "");
  EXPECT_EQ(read_text(victim), "pid 1\nhost " + storage::this_host() + "\n");
  {
    Storage held(options_for(dir, 4));
    auto o = options_for(dir, 4);
    o.lock_wait_s = 0;
    // Neither the waiting start-up nor `storage info` names pid 1 as the holder.
    const std::string why = open_error(o);
    EXPECT_NE(why.find("is held by another process, a process not recorded (LOCK has 2 hard links, so no holder "
                       "is recorded in it)"),
              std::string::npos)
        << why;
    const StorageDirSummary s = inspect_storage_dir(dir);
    EXPECT_EQ(s.lock_holder, "");
    EXPECT_EQ(s.lock_error, "LOCK has 2 hard links, so no holder is recorded in it");
  }
  EXPECT_EQ(read_text(victim), "pid 1\nhost " + storage::this_host() + "\n");
}

TEST(StorageFiles, LinksAtTheTemporaryNamesDoNotRedirectASnapshotOrTheManifest) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(6, 4, 31);
  const std::string v1 = tmp.file("v1.txt"), v2 = tmp.file("v2.txt"), v3 = tmp.file("v3.txt");
  for (const auto& v : {v1, v2, v3}) write_text(v, "keep me\n");
  const std::string snap = dir + "/snapshot-00000000000000000006.h5";
  {
    Storage st(options_for(dir, 4));
    for (const auto& r : reqs) append(st, r);
    fs::create_symlink(v1, snap + ".tmp");
    fs::create_symlink(v2, dir + "/MANIFEST.json.tmp");
    write_snapshot(st, model_at(reqs, 6), 6, Dtype::kFloat32, 4)->commit();
  }
  EXPECT_EQ(read_text(v1), "keep me\n");
  EXPECT_EQ(read_text(v2), "keep me\n");
  EXPECT_TRUE(is_regular(snap));
  EXPECT_TRUE(is_regular(dir + "/MANIFEST.json"));
  // The manifest written at an open goes through the same temporary name.
  fs::create_symlink(v3, dir + "/MANIFEST.json.tmp");
  {
    Storage st(options_for(dir, 4));
    EXPECT_EQ(recovered_state(st), model_at(reqs, 6));
  }
  EXPECT_EQ(read_text(v3), "keep me\n");
  EXPECT_FALSE(is_link(dir + "/MANIFEST.json"));
  const StorageVerifyReport r = verify_storage_dir(dir);
  EXPECT_TRUE(r.clean()) << listing(r);
}

// ------------------------------------------------------------------------------ reading LOCK

TEST(StorageFiles, InfoReportsALockThatIsNotARegularFileWithoutBlockingAndReadsAFewKiB) {
  TempDir tmp;
  const std::string dir = tmp.file("s"), lock = dir + "/LOCK";
  five_records(dir, 4);
  fs::remove(lock);
  ASSERT_EQ(mkfifo(lock.c_str(), 0600), 0);
  auto done = std::async(std::launch::async, [&] { return inspect_storage_dir(dir); });
  if (done.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    ADD_FAILURE() << "storage info blocked on a FIFO LOCK";
    const int w = ::open(lock.c_str(), O_WRONLY | O_NONBLOCK);  // lets the blocked reader see EOF
    if (w >= 0) ::close(w);
  }
  const StorageDirSummary s = done.get();
  EXPECT_EQ(s.lock_error, "LOCK is not a regular file (a FIFO)");
  EXPECT_EQ(s.lock_holder, "");

  // A record is two short lines: what lies past the first 4 KiB is not read.
  fs::remove(lock);
  write_text(lock, std::string(5000, ' ') + "pid 77\nhost far-away\n");
  EXPECT_EQ(inspect_storage_dir(dir).lock_holder, "");
  write_text(lock, "pid 77\nhost far-away\n" + std::string(8 << 20, ' '));
  const StorageDirSummary big = inspect_storage_dir(dir);
  EXPECT_EQ(big.lock_holder, "pid 77 on host 'far-away'");
  EXPECT_EQ(big.lock_error, "");
}

// ------------------------------------------------------------------------------ beside a service

TEST(StorageFiles, InfoAndVerifyBesideSnapshotsThatRemoveFilesReportNoFalseDamage) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  const auto reqs = workload(400, 4, 41);
  Storage st(options_for(dir, 4));  // keep_snapshots 1: each snapshot removes the previous one and its log
  std::atomic<bool> stop{false};
  std::atomic<int> snapshots{0};
  std::string writer_error;
  std::thread writer([&] {
    try {
      for (std::size_t i = 0; i < reqs.size() && !stop; ++i) {
        append(st, reqs[i]);
        if (i % 4 == 3) {
          write_snapshot(st, model_at(reqs, i + 1), i + 1, Dtype::kFloat32, 64)->commit();
          ++snapshots;
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
      }
    } catch (const std::exception& e) {
      writer_error = e.what();
    }
  });
  int runs = 0, failures = 0;
  std::string first_failure;
  while (snapshots < 100 && writer_error.empty() && runs < 5000) {
    ++runs;
    try {
      const StorageVerifyReport r = verify_storage_dir(dir);
      if (r.damaged()) ++failures, first_failure = first_failure.empty() ? listing(r) : first_failure;
      const StorageDirSummary s = inspect_storage_dir(dir);
      if (!s.manifest_error.empty() || !s.snapshot_error.empty())
        ++failures, first_failure = first_failure.empty() ? s.manifest_error + s.snapshot_error : first_failure;
    } catch (const Error& e) {
      ++failures;
      if (first_failure.empty()) first_failure = e.what();
    }
  }
  stop = true;
  writer.join();
  EXPECT_EQ(writer_error, "");
  EXPECT_GE(snapshots, 20);
  EXPECT_EQ(failures, 0) << "of " << runs << " runs beside " << snapshots << " snapshots; the first:\n"
                         << first_failure;
}

// A manifest that cannot be read, and cannot again for the same reason (permission): that is the
// directory's state, reported by the first run, not a directory moving on that is run again and
// again. Read by an unprivileged user (a child process that drops to nobody when run as root).
TEST(StorageFiles, AManifestUnreadableForTheSameReasonIsReportedByTheFirstRun) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  fs::create_directory(dir);
  write_text(dir + "/MANIFEST.json", "{}\n");
  ASSERT_EQ(::chmod(tmp.path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir + "/MANIFEST.json").c_str(), 0), 0);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) {
      out = "SKIP cannot drop to uid 65534";
    } else if (::access((dir + "/MANIFEST.json").c_str(), R_OK) == 0) {
      out = "SKIP the manifest stays readable";
    } else {
      try {
        out += "info: " + inspect_storage_dir(dir).manifest_error + "\n";
        out += "verify: " + listing(verify_storage_dir(dir));
      } catch (const std::exception& e) {
        out += std::string("threw: ") + e.what();
      }
    }
    (void)!::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t r; (r = ::read(fds[0], buf, sizeof buf)) != 0;)
    if (r > 0) got.append(buf, static_cast<std::size_t>(r));
    else if (errno != EINTR) break;
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (got.rfind("SKIP", 0) == 0) GTEST_SKIP() << got.substr(5);
  EXPECT_NE(got.find("info: open('" + dir + "/MANIFEST.json'): Permission denied"), std::string::npos) << got;
  EXPECT_NE(got.find("DAMAGED MANIFEST.json: open('" + dir + "/MANIFEST.json'): Permission denied"),
            std::string::npos)
      << got;
  EXPECT_EQ(got.find("changed during each of"), std::string::npos) << got;
}

// ------------------------------------------------------------------------------ entries verify names

TEST(StorageFiles, VerifyNamesEachEntryThatIsNotARegularFileAndChecksTheRest) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  five_records(dir, 4);
  const std::string d = "wal-00000000000000000097.log", l = "wal-00000000000000000098.log",
                    f = "wal-00000000000000000099.log";
  fs::create_directory(dir + "/" + d);
  fs::create_symlink(tmp.file("nowhere"), dir + "/" + l);
  ASSERT_EQ(mkfifo((dir + "/" + f).c_str(), 0600), 0);
  StorageVerifyReport r;
  ASSERT_NO_THROW(r = verify_storage_dir(dir));
  const std::string text = listing(r);
  EXPECT_TRUE(r.damaged()) << text;
  EXPECT_NE(text.find("DAMAGED " + d + ": is a directory, not a regular file"), std::string::npos) << text;
  EXPECT_NE(text.find("DAMAGED " + l + ": is a symbolic link, not a regular file"), std::string::npos) << text;
  EXPECT_NE(text.find("DAMAGED " + f + ": is a FIFO, not a regular file"), std::string::npos) << text;
  EXPECT_NE(text.find("ok wal-00000000000000000001.log: 5 record(s)"), std::string::npos) << text;
  // `info` does not open them either: it names the first and stops.
  try {
    (void)inspect_storage_dir(dir);
    ADD_FAILURE() << "info accepted a directory named like a segment";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(d + "' is not a regular file (a directory)"), std::string::npos) << e.what();
  }

  // The snapshot the manifest names, as a directory or a link: named as such, not "missing".
  TempDir t2;
  const std::string dir2 = t2.file("s");
  const auto reqs = workload(6, 4, 3);
  std::string snap;
  {
    Storage st(options_for(dir2, 4));
    for (const auto& q : reqs) append(st, q);
    snap = write_snapshot(st, model_at(reqs, 6), 6, Dtype::kFloat32, 4)->commit();
  }
  fs::rename(snap, t2.file("saved.h5"));
  fs::create_directory(snap);
  const std::string name = fs::path(snap).filename().string();
  const StorageVerifyReport r2 = verify_storage_dir(dir2);
  EXPECT_NE(listing(r2).find("DAMAGED " + name + ": is a directory, not a regular file"), std::string::npos)
      << listing(r2);
  EXPECT_EQ(listing(r2).find("missing"), std::string::npos) << listing(r2);
  fs::remove(snap);
  fs::create_symlink(t2.file("saved.h5"), snap);
  EXPECT_NE(listing(verify_storage_dir(dir2)).find("DAMAGED " + name + ": is a symbolic link"), std::string::npos);
  // The manifest as a directory: named as such, not "missing" or an empty directory.
  fs::remove(snap);
  fs::rename(t2.file("saved.h5"), snap);
  fs::rename(dir2 + "/MANIFEST.json", t2.file("manifest.json"));
  fs::create_directory(dir2 + "/MANIFEST.json");
  const StorageVerifyReport r3 = verify_storage_dir(dir2);
  EXPECT_FALSE(r3.empty);
  EXPECT_NE(listing(r3).find("DAMAGED MANIFEST.json: is a directory, not a regular file"), std::string::npos)
      << listing(r3);
}

// ------------------------------------------------------------------------------ --corpus

TEST(StorageFiles, VerifyFailsNamingACorpusFileItWasGivenThatCannotBeOpened) {
  TempDir tmp;
  const std::string dir = tmp.file("s");
  five_records(dir, 4);
  for (const std::string& corpus : {tmp.file("absent.h5"), tmp.file("adir")}) {
    if (corpus == tmp.file("adir")) fs::create_directory(corpus);
    try {
      const StorageVerifyReport r = verify_storage_dir(dir, corpus);
      ADD_FAILURE() << "verify passed with --corpus " << corpus << ":\n" << listing(r);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the corpus file '" + corpus + "'"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(verify_storage_dir(dir).clean());
}

}  // namespace
}  // namespace shardtopk::test
