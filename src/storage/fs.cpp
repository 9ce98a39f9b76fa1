#include "storage/fs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "shardtopk/error.hpp"
#include "storage/crc32c.hpp"

namespace shardtopk::storage {

void throw_errno(const std::string& what, int err) { throw Error(what + ": " + std::strerror(err)); }

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Fd::close(const std::string& path) {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw_errno("close('" + path + "')", errno);
}

Fd open_file(const std::string& path, int flags, unsigned mode) {
  int fd;
  do fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_errno("open('" + path + "')", errno);
  return Fd(fd);
}

void pwritev_all(int fd, const struct iovec* iov_in, std::size_t n, std::uint64_t offset, const std::string& path) {
  std::vector<struct iovec> iov(iov_in, iov_in + n);
  std::size_t first = 0;
  while (first < iov.size()) {
    const int count = static_cast<int>(std::min<std::size_t>(iov.size() - first, IOV_MAX));
    const ssize_t w = ::pwritev(fd, iov.data() + first, count, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw_errno("writing '" + path + "' at offset " + std::to_string(offset), errno);
    }
    if (w == 0) throw Error("writing '" + path + "' at offset " + std::to_string(offset) + ": no progress");
    offset += static_cast<std::uint64_t>(w);
    auto left = static_cast<std::size_t>(w);
    while (left > 0 && first < iov.size()) {  // skip what was written, resume inside an iovec
      if (left >= iov[first].iov_len) {
        left -= iov[first].iov_len;
        ++first;
      } else {
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
        left = 0;
      }
    }
    while (first < iov.size() && iov[first].iov_len == 0) ++first;
  }
}

void pwrite_all(int fd, const void* data, std::size_t n, std::uint64_t offset, const std::string& path) {
  struct iovec v {
    const_cast<void*>(data), n
  };
  pwritev_all(fd, &v, 1, offset, path);
}

void fdatasync_checked(int fd, const std::string& path) {
  if (::fdatasync(fd) != 0) throw_errno("fdatasync('" + path + "')", errno);
}

void fsync_checked(int fd, const std::string& path) {
  if (::fsync(fd) != 0) throw_errno("fsync('" + path + "')", errno);
}

void ftruncate_checked(int fd, std::uint64_t size, const std::string& path) {
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0)
    throw_errno("truncating '" + path + "' to " + std::to_string(size) + " bytes", errno);
}

void fsync_dir(const std::string& dir) {
  Fd fd = open_file(dir, O_RDONLY | O_DIRECTORY);
  fsync_checked(fd.get(), dir);
  fd.close(dir);
}

void fsync_path(const std::string& path) {
  Fd fd = open_file(path, O_RDONLY);
  fsync_checked(fd.get(), path);
  fd.close(path);
}

Fd create_fresh(const std::string& path, int flags) {
  remove_file(path);
  return open_file(path, flags | O_CREAT | O_EXCL | O_NOFOLLOW);
}

void write_file_synced(const std::string& path, const std::string& content) {
  Fd fd = create_fresh(path);
  pwrite_all(fd.get(), content.data(), content.size(), 0, path);
  fsync_checked(fd.get(), path);
  fd.close(path);
}

std::string file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symbolic link";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
  }
  return "not a regular file";
}

void rename_file(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw_errno("rename('" + from + "' -> '" + to + "')", errno);
}

void rename_synced(const std::string& from, const std::string& to, const std::string& dir) {
  rename_file(from, to);
  fsync_dir(dir);
}

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw_errno("removing '" + path + "'", errno);
}

std::uint64_t file_size(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno("fstat('" + path + "')", errno);
  return static_cast<std::uint64_t>(st.st_size);
}

std::string read_small_file(const std::string& path) {
  Fd fd = open_file(path, O_RDONLY);
  return read_to_end(fd.get(), path);
}

std::string read_to_end(int fd, const std::string& path) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno("reading '" + path + "'", errno);
    }
    if (r == 0) break;
    out.append(buf, static_cast<std::size_t>(r));
  }
  return out;
}

std::uint32_t file_crc32c(const std::string& path, std::uint64_t offset, std::uint64_t length) {
  Fd fd = open_file(path, O_RDONLY);
  std::vector<unsigned char> buf(std::size_t(4) << 20);
  std::uint32_t crc = 0;
  while (length > 0) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(length, buf.size()));
    const ssize_t r = ::pread(fd.get(), buf.data(), want, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno("reading '" + path + "'", errno);
    }
    if (r == 0) throw Error("reading '" + path + "': the file ends at byte " + std::to_string(offset) + ", " +
                            std::to_string(length) + " byte(s) short");
    crc = crc32c_extend(crc, buf.data(), static_cast<std::size_t>(r));
    offset += static_cast<std::uint64_t>(r);
    length -= static_cast<std::uint64_t>(r);
  }
  return crc;
}

std::uint64_t file_size(const std::string& path) {
  Fd fd = open_file(path, O_RDONLY);
  return file_size(fd.get(), path);
}

std::vector<std::string> list_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw_errno("opendir('" + dir + "')", errno);
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) throw_errno("readdir('" + dir + "')", err);
  std::sort(names.begin(), names.end());
  return names;
}

MappedFile::MappedFile(const std::string& path, std::uint64_t size) : size_(size) {
  if (size == 0) return;
  Fd fd = open_file(path, O_RDONLY);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED) throw_errno("mmap('" + path + "', " + std::to_string(size) + " bytes)", errno);
  ::madvise(p, size, MADV_SEQUENTIAL);
  data_ = static_cast<const unsigned char*>(p);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

}  // namespace shardtopk::storage
