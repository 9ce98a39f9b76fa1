// Reading a small configuration file the service names (keys, TLS certificate and key) without
// blocking on what is not a regular file: a FIFO opened for reading would wait for a writer (a
// start-up that never listens, a SIGHUP reload that never ends while the old keys stay in
// force), a directory reads as no bytes.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "shardtopk/error.hpp"
#include "storage/fs.hpp"

namespace shardtopk::service {

/// A regular file's bytes and mode.
struct FileBytes {
  std::string bytes;
  mode_t mode = 0;
};

/// Reads `path` whole. @throws Error naming `what` and `path`: it cannot be opened or read, or it
/// is not a regular file (a directory, a FIFO, a socket, a device), which is not read at all.
inline FileBytes read_regular_file(const std::string& what, const std::string& path) {
  const storage::Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  SHARDTOPK_EXPECTS(fd, what, " '", path, "' cannot be read: ", std::strerror(errno));
  struct stat st {};
  SHARDTOPK_EXPECTS(::fstat(fd.get(), &st) == 0, what, " '", path, "' cannot be read: ", std::strerror(errno));
  SHARDTOPK_EXPECTS(S_ISREG(st.st_mode), what, " '", path, "' is ", storage::file_kind(st.st_mode), ", not a regular file");
  FileBytes out;
  out.mode = st.st_mode;
  out.bytes = storage::read_to_end(fd.get(), path);
  return out;
}

}  // namespace shardtopk::service
