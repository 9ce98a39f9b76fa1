#include "service/audit_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include <nlohmann/json.hpp>

#include "core/log.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::service {
namespace {

std::string utc_time(std::chrono::system_clock::time_point t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  const std::time_t s = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[64];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%06lldZ", static_cast<long long>(us % 1000000));
  return buf;
}

std::string parent_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

int AuditLog::open_file(const std::string& path) {
  struct stat st{};
  const bool existed = ::stat(path.c_str(), &st) == 0;
  // A FIFO (or socket, or directory) is refused before it is opened: nothing reads a FIFO back,
  // so its writes would block, and with them every write request waiting for its line. (A
  // character device is taken: its writes and syncs answer at once, failing or not.)
  auto pipe_like = [](const struct stat& x) { return S_ISFIFO(x.st_mode) || S_ISSOCK(x.st_mode) || S_ISDIR(x.st_mode); };
  SHARDTOPK_EXPECTS(!existed || !pipe_like(st), "service.audit_log '", path, "' is ",
                    S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a socket",
                    ", not a file: name a file the service appends to");
  const int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0600);
  SHARDTOPK_EXPECTS(fd >= 0, "service.audit_log '", path, "' cannot be opened for appending: ", std::strerror(errno));
  struct stat opened {};
  if (::fstat(fd, &opened) != 0 || pipe_like(opened)) {  // replaced between the look and the open
    ::close(fd);
    throw Error("service.audit_log '" + path + "' is not a file: name a file the service appends to");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  // A line left unterminated (a crash in the middle of a write, or a short write whose cut could
  // not be undone) is ended here, so the next record starts a line of its own.
  struct stat now {};
  char last = '\n';
  if (::fstat(fd, &now) == 0 && now.st_size > 0 && ::pread(fd, &last, 1, now.st_size - 1) == 1 && last != '\n') {
    if (::write(fd, "\n", 1) != 1 || ::fdatasync(fd) != 0) {
      const int err = errno;
      ::close(fd);
      throw Error(detail::concat("service.audit_log '", path, "': cannot end its unterminated last line: ",
                                 std::strerror(err)));
    }
  }
  if (!existed) {
    // The new file's name must survive a crash too, like the lines in it.
    const int dir = ::open(parent_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const bool synced = dir >= 0 && ::fsync(dir) == 0;
    const int err = errno;
    if (dir >= 0) ::close(dir);
    if (!synced) {
      ::close(fd);
      throw Error("service.audit_log '" + path + "': cannot sync its directory: " + std::strerror(err));
    }
  }
  return fd;
}

AuditLog::AuditLog(std::string path) : path_(std::move(path)) {
  fd_ = open_file(path_);
  thread_ = std::thread([this] { loop(); });
}

AuditLog::~AuditLog() {
  {
    std::lock_guard<std::mutex> l(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

void AuditLog::append(const AuditRecord& rec, Done done) {
  std::string line = format(rec);
  line += '\n';
  {
    std::lock_guard<std::mutex> l(m_);
    queue_.push_back(Item{std::move(line), std::move(done)});
  }
  cv_.notify_one();
}

std::string AuditLog::failure() const {
  std::lock_guard<std::mutex> l(m_);
  return failure_;
}

bool AuditLog::reopen(std::string* message) {
  int fd = -1;
  try {
    fd = open_file(path_);
  } catch (const Error& e) {
    if (message) *message = std::string(e.what()) + "; still appending to the file opened before";
    return false;
  }
  {
    std::lock_guard<std::mutex> l(fd_m_);
    std::swap(fd, fd_);
  }
  ::close(fd);
  {
    std::lock_guard<std::mutex> l(m_);
    failure_.clear();  // a fresh file: let writes through again
    failed_.store(false, std::memory_order_release);
  }
  if (message) *message = "service.audit_log '" + path_ + "' reopened";
  return true;
}

void AuditLog::loop() {
  std::vector<Item> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> l(m_);
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_, and nothing left
      batch.swap(queue_);
    }
    std::string bytes;
    for (const Item& i : batch) bytes += i.line;
    std::string error;
    {
      std::lock_guard<std::mutex> l(fd_m_);
      const off_t start = ::lseek(fd_, 0, SEEK_END);  // where this batch's lines begin (O_APPEND)
      std::size_t off = 0;
      while (off < bytes.size() && error.empty()) {
        const ssize_t n = ::write(fd_, bytes.data() + off, bytes.size() - off);
        if (n > 0) off += static_cast<std::size_t>(n);
        else if (n < 0 && errno == EINTR) continue;
        else error = std::string("write: ") + (n < 0 ? std::strerror(errno) : "no progress");
      }
      // A batch cut short (a full disk) leaves no half line behind: the file is cut back to where
      // the batch began (every line of the batch is reported as failed). Should that fail too,
      // the next open ends the half line.
      if (!error.empty() && off > 0 && start >= 0) (void)::ftruncate(fd_, start);
      if (error.empty() && ::fdatasync(fd_) != 0) error = std::string("fdatasync: ") + std::strerror(errno);
    }
    if (!error.empty()) {
      const auto now = std::chrono::steady_clock::now();
      unlogged_failures_ += static_cast<std::int64_t>(batch.size());
      if (!failed_.load(std::memory_order_acquire) || now - last_error_logged_ >= std::chrono::minutes(1)) {
        spdlog::error("service.audit_log '{}': {} ({} line(s) not known to be durable since the last message); "
                      "writes are refused until the file can be written again (SIGHUP reopens it)",
                      path_, error, unlogged_failures_);
        last_error_logged_ = now;
        unlogged_failures_ = 0;
      }
      std::lock_guard<std::mutex> l(m_);
      failure_ = "the audit log '" + path_ + "' cannot be written (" + error + ")";
      failed_.store(true, std::memory_order_release);
    }
    for (Item& i : batch)
      if (i.done) i.done(error.empty());
    batch.clear();
  }
}

std::string AuditLog::format(const AuditRecord& r) {
  using json = nlohmann::ordered_json;  // fields in the order of the header's example
  json j = {{"time", utc_time(r.time)},
            {"key", r.key.empty() ? json(nullptr) : json(r.key)},
            {"route", r.route},
            {"method", r.method},
            {"status", r.status},
            {"rows", r.rows >= 0 ? json(r.rows) : json(nullptr)},
            {"seq", r.seq >= 0 ? json(r.seq) : json(nullptr)},
            {"client", r.client}};
  if (!r.token_prefix.empty()) j["token"] = r.token_prefix;
  if (!r.why.empty()) j["why"] = r.why;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace shardtopk::service
