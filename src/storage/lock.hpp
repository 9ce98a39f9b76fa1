#pragma once
// The storage directory's lock: an exclusive flock() on the directory itself and on LOCK, whose
// contents name the holder (pid and host) for the messages of a process that finds it taken.
// The directory's lock is what a deleted LOCK cannot undo. Internal header.
#include <functional>
#include <string>

#include "shardtopk/error.hpp"
#include "storage/fs.hpp"

namespace shardtopk::storage {

/// Who holds, or last held, a directory's lock, as its LOCK file says.
struct LockHolder {
  long long pid = -1;  ///< -1: not recorded (an empty LOCK file)
  std::string host;    ///< "": not recorded
  /// Why no record could be read ("LOCK is not a regular file (a FIFO)"); "" when it was, or
  /// when the file is missing.
  std::string problem;
  /// "pid 123 on host h", with whether it still runs when it is on this host.
  std::string describe() const;
  /// It recorded this host, and no process with its pid runs here now.
  bool exited_here() const;
};

/// The holder record in the LOCK file at `path`, read without locking (for messages and
/// `storage info`); an empty record when the file is missing or holds none. Reads at most 4 KiB,
/// never through a symbolic link, and never blocks: a LOCK that is not a regular file (a FIFO
/// would block an open for good), or that has other names (no holder writes into it), is
/// reported in `problem`, not read.
LockHolder read_lock_holder(const std::string& path);

/// This machine's host name (gethostname; "" when it fails).
std::string this_host();

/// Thrown by DirLock when the lock it waited for was released by a holder that removed the
/// directory, or LOCK, meanwhile (a start-up that created the directory and failed removes it):
/// the locks taken are of files no longer at the path. The caller may create the directory again
/// and start over.
class LockedFileRemoved : public shardtopk::Error {
 public:
  using shardtopk::Error::Error;
};

/// An exclusive flock() on a directory and on its LOCK file, held for the object's lifetime.
class DirLock {
 public:
  /// Takes the lock on `path` (created when missing; refused, naming what it is, when it is not a
  /// regular file: the holder record is never written through a link) and on the directory that holds it, and
  /// records this process's pid and host in `path`. Where the file system cannot flock a
  /// directory (some network file systems) only `path` is locked, with a warning. While another process holds it, polls for up to `wait_s` seconds, logging once whom it
  /// waits for and calling `tick` about once a second: a process that is exiting (a rank
  /// orphaned by a killed launcher) releases it within seconds. Never two holders: flock decides.
  /// @throws Error naming the holder (pid, host) when it still holds the lock after `wait_s`,
  ///   at once when the holder is this very process (a second Storage on one directory), or
  ///   what `tick` throws; LockedFileRemoved when, once taken, `path` or its directory is no
  ///   longer the file that was locked.
  DirLock(const std::string& path, double wait_s = 0, const std::function<void()>& tick = {});

 private:
  /// Both locks, or neither: the directory's first, so that a process holding it keeps every
  /// later one out even after LOCK was removed and made anew.
  bool try_take(const std::string& path);

  Fd fd_;
  Fd dir_fd_;  ///< the directory, flocked; closed where directories cannot be
};

}  // namespace shardtopk::storage
