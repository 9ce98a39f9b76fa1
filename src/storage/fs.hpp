#pragma once
// Checked file-system calls for the storage directory: every failure throws shardtopk::Error
// naming the call, the path and errno's text. Internal header.
#include <fcntl.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shardtopk::storage {

/// Throws Error("<what>: <strerror(err)>").
[[noreturn]] void throw_errno(const std::string& what, int err);

/// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  /// close(2), checked (a deferred write error shows here on some file systems).
  void close(const std::string& path);

 private:
  int fd_ = -1;
};

/// open(2), checked.
Fd open_file(const std::string& path, int flags, unsigned mode = 0644);

/// Writes all of `iov[0..n)` at `offset` (pwritev, resumed after short writes, IOV_MAX at a time).
void pwritev_all(int fd, const struct iovec* iov, std::size_t n, std::uint64_t offset, const std::string& path);
void pwrite_all(int fd, const void* data, std::size_t n, std::uint64_t offset, const std::string& path);
void fdatasync_checked(int fd, const std::string& path);
void fsync_checked(int fd, const std::string& path);
void ftruncate_checked(int fd, std::uint64_t size, const std::string& path);
/// fsync of a directory, so that entries created, renamed or removed in it are durable.
void fsync_dir(const std::string& dir);
/// Opens `path` read-only and fsyncs it (for files written by another library, e.g. HDF5).
void fsync_path(const std::string& path);
/// Removes whatever is at `path` (unlink(2): a symbolic link itself, never its target) and creates
/// a new regular file there with O_CREAT | O_EXCL | O_NOFOLLOW, so that a link or FIFO planted at
/// a temporary name cannot redirect the write (the service often runs as root).
/// @throws Error naming the path when something there cannot be removed, or reappears first.
Fd create_fresh(const std::string& path, int flags = O_WRONLY);
/// Writes `content` to a fresh file at `path` (create_fresh) and fsyncs it.
void write_file_synced(const std::string& path, const std::string& content);
/// What a file of `mode` (stat's st_mode) is, for messages: "a regular file", "a directory",
/// "a symbolic link", "a FIFO", "a socket", "a character device", "a block device".
std::string file_kind(unsigned mode);
/// rename(2), checked.
void rename_file(const std::string& from, const std::string& to);
/// rename(2) then fsync of `dir`.
void rename_synced(const std::string& from, const std::string& to, const std::string& dir);
/// unlink(2); a missing file is not an error.
void remove_file(const std::string& path);
std::uint64_t file_size(int fd, const std::string& path);
/// The whole file's bytes (small files: the manifest).
std::string read_small_file(const std::string& path);
/// The rest of open descriptor `fd`'s bytes, read to its end. @throws Error naming `path`.
std::string read_to_end(int fd, const std::string& path);
/// CRC-32C (crc32c.hpp) of `length` bytes of `path` from `offset`, read in 4 MiB pieces.
/// @throws Error naming the file when it is shorter or cannot be read.
std::uint32_t file_crc32c(const std::string& path, std::uint64_t offset, std::uint64_t length);
/// Size of the file at `path` in bytes. @throws Error naming it when it cannot be opened.
std::uint64_t file_size(const std::string& path);
/// Names in `dir` (not "." and ".."), sorted.
std::vector<std::string> list_dir(const std::string& dir);

/// A read-only mapping of the first `size` bytes of a file (size 0: no mapping).
class MappedFile {
 public:
  MappedFile(const std::string& path, std::uint64_t size);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return data_; }
  std::uint64_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  std::uint64_t size_ = 0;
};


}  // namespace shardtopk::storage
