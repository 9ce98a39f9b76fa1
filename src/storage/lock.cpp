#include "storage/lock.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/log.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::storage {
namespace {

using Clock = std::chrono::steady_clock;

// Whether `pid` is a process of this host that has not exited (a zombie has).
bool running_here(long long pid) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == EPERM;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: kill() said it exists
  const std::size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || (line[close + 2] != 'Z' && line[close + 2] != 'X');
}

bool try_lock(int fd, const std::string& path) {
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno == EWOULDBLOCK) return false;
    if (errno != EINTR) throw_errno("flock('" + path + "')", errno);
  }
}

std::string parent_dir(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// LOCK itself, never what a link there points to: the holder record is written into it, and the
// service often runs as root. O_NONBLOCK: a FIFO or device is refused, not waited on.
Fd open_lock_file(const std::string& path) {
  int fd;
  do fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  while (fd < 0 && errno == EINTR);
  const std::string refuse = "storage directory lock '" + path + "' is ";
  const std::string fix = ", not a regular file: remove it (the lock file is made anew) and start again";
  if (fd < 0 && errno == ELOOP) throw Error(refuse + "a symbolic link" + fix);
  if (fd < 0 && errno == EISDIR) throw Error(refuse + "a directory" + fix);
  if (fd < 0 && errno == ENOENT)  // the directory went between its creation and here
    throw LockedFileRemoved("storage directory lock '" + path + "': the directory was removed before its lock "
                            "could be taken");
  if (fd < 0) throw_errno("open('" + path + "')", errno);
  Fd f(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno("fstat('" + path + "')", errno);
  if (!S_ISREG(st.st_mode)) throw Error(refuse + file_kind(st.st_mode) + fix);
  return f;
}

// Whether `path` names the file open as `fd` (the same device and inode; a link at `path` is not
// followed unless `follow`).
bool still_at(const std::string& path, int fd, bool follow) {
  struct stat at {}, open {};
  if ((follow ? ::stat(path.c_str(), &at) : ::lstat(path.c_str(), &at)) != 0) return false;
  if (::fstat(fd, &open) != 0) return false;
  return at.st_dev == open.st_dev && at.st_ino == open.st_ino;
}

}  // namespace

bool DirLock::try_take(const std::string& path) {
  if (dir_fd_) {
    for (;;) {
      if (::flock(dir_fd_.get(), LOCK_EX | LOCK_NB) == 0) break;
      if (errno == EWOULDBLOCK) return false;
      if (errno == EINTR) continue;
      // NFS emulates flock with byte-range locks, which a directory opened read-only cannot take.
      spdlog::warn("storage directory '{}': cannot lock the directory itself ({}); only its LOCK file keeps a second "
                   "writer out: never remove LOCK while a service runs",
                   parent_dir(path), std::strerror(errno));
      dir_fd_ = Fd();
      break;
    }
  }
  if (try_lock(fd_.get(), path)) return true;
  if (dir_fd_) ::flock(dir_fd_.get(), LOCK_UN);
  return false;
}

std::string this_host() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

std::string LockHolder::describe() const {
  if (pid < 0) return problem.empty() ? "a process that recorded no pid" : "a process not recorded (" + problem + ")";
  std::string s = "pid " + std::to_string(pid) + " on host '" + (host.empty() ? "?" : host) + "'";
  if (!host.empty() && host == this_host())
    s += running_here(pid) ? " (running)" : " (no longer running)";
  return s;
}

bool LockHolder::exited_here() const { return pid >= 0 && !host.empty() && host == this_host() && !running_here(pid); }

LockHolder read_lock_holder(const std::string& path) {
  LockHolder h;
  int fd;
  do fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ELOOP) h.problem = "LOCK is not a regular file (a symbolic link)";
    else if (errno != ENOENT) h.problem = std::string("LOCK cannot be read: ") + std::strerror(errno);
    return h;
  }
  const Fd f(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    h.problem = std::string("LOCK cannot be read: fstat: ") + std::strerror(errno);
    return h;
  }
  if (!S_ISREG(st.st_mode)) {
    h.problem = "LOCK is not a regular file (" + file_kind(st.st_mode) + ")";
    return h;
  }
  // A holder does not write into a LOCK with other names (DirLock): what it holds is not theirs.
  if (st.st_nlink > 1) {
    h.problem = "LOCK has " + std::to_string(static_cast<unsigned long long>(st.st_nlink)) +
                " hard links, so no holder is recorded in it";
    return h;
  }
  // A holder writes two short lines; anything longer is not a record worth reading whole.
  std::string text(4096, '\0');
  std::size_t got = 0;
  while (got < text.size()) {
    const ssize_t r = ::pread(fd, &text[got], text.size() - got, static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<std::size_t>(r);
  }
  text.resize(got);
  std::istringstream in(text);
  std::string key, value;
  while (in >> key >> value) {
    if (key == "pid") {
      try {
        h.pid = std::stoll(value);
      } catch (const std::exception&) {
        h.pid = -1;
      }
    }
    if (key == "host") h.host = value;
  }
  return h;
}

DirLock::DirLock(const std::string& path, double wait_s, const std::function<void()>& tick)
    : fd_(open_lock_file(path)), dir_fd_(open_file(parent_dir(path), O_RDONLY | O_DIRECTORY)) {
  if (!try_take(path)) {
    LockHolder holder = read_lock_holder(path);
    const bool me = holder.pid == static_cast<long long>(::getpid()) && holder.host == this_host();
    const auto t0 = Clock::now();
    const auto deadline = t0 + std::chrono::duration<double>(me ? 0.0 : wait_s);
    auto next_tick = t0 + std::chrono::seconds(1);
    bool got = false;
    if (!me && wait_s > 0)
      spdlog::warn("storage directory lock '{}' is held by {}: waiting up to {:g} s (storage.lock_wait_s) for it "
                   "to be released",
                   path, holder.describe(), wait_s);
    while (Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if ((got = try_take(path))) break;
      if (tick && Clock::now() >= next_tick) {
        tick();
        next_tick += std::chrono::seconds(1);
      }
    }
    if (!got) {
      holder = read_lock_holder(path);  // it may have changed hands meanwhile
      throw Error(detail::concat(
          "storage directory lock '", path, "' is held by another process, ", holder.describe(),
          holder.exited_here() ? " (a process it started may hold the lock)" : "",
          me ? ": this process has the directory open already (one writer per directory)"
             : wait_s > 0 ? detail::concat(", still after waiting ", wait_s,
                                           " s (storage.lock_wait_s): one writer per directory; stop it, or use "
                                           "another storage.dir")
                          : ": one writer per directory (storage.lock_wait_s = 0: no wait)"));
    }
    spdlog::info("storage directory lock '{}' taken after waiting {:.2f} s", path,
                 std::chrono::duration<double>(Clock::now() - t0).count());
  }
  // The holder it waited for may have removed what it locked (a start-up that created the
  // directory and failed removes LOCK and the directory): then these locks guard nothing.
  if (!still_at(path, fd_.get(), false) || (dir_fd_ && !still_at(parent_dir(path), dir_fd_.get(), true)))
    throw LockedFileRemoved(detail::concat("storage directory lock '", path,
                                           "': the directory or its LOCK was removed while this process waited "
                                           "for it (by the start-up that held it)"));
  // Who holds it, for the messages of the next process that finds it taken (advisory: a
  // failure to record it does not stop the start-up).
  // Not into a LOCK with other names (a hard link planted in the directory, or a backup made
  // with `cp -al`): the record would be written into the file behind those names as well.
  struct stat st {};
  if (::fstat(fd_.get(), &st) == 0 && st.st_nlink > 1) {
    spdlog::warn("storage directory lock '{}' has {} hard links: its holder is not recorded in it, so as not to "
                 "write into the file behind the other names (remove LOCK while nothing runs to end this)",
                 path, static_cast<unsigned long long>(st.st_nlink));
    return;
  }
  const std::string record = "pid " + std::to_string(::getpid()) + "\nhost " + this_host() + "\n";
  try {
    ftruncate_checked(fd_.get(), 0, path);
    pwrite_all(fd_.get(), record.data(), record.size(), 0, path);
  } catch (const std::exception& e) {
    spdlog::warn("storage directory lock '{}': recording its holder: {}", path, e.what());
  }
}

}  // namespace shardtopk::storage
