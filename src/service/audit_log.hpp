#pragma once
// The audit log (service.audit_log): one JSON line per write request and per refused request,
// appended and made durable (fdatasync) before the request is answered, so that every write and
// every refusal the clients saw is attributable to a key name.
//
// Line: {"time":"2026-12-03T10:11:12.123456Z","key":"ingest","route":"/v1/upsert","method":"POST",
//        "status":200,"rows":4,"seq":17,"client":"10.0.0.7:40312"}
// with "key": null when no key matched (then "token": the first 8 hex digits of an unknown key's
// SHA-256, when one was sent), "rows"/"seq" null when the request wrote nothing, and "why" on a
// refusal. A writer thread appends what is queued with one write and one fdatasync (a group),
// then calls each record's callback: the loop threads never wait for the disk.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace shardtopk::service {

struct AuditRecord {
  std::chrono::system_clock::time_point time;
  std::string key;           ///< the key's name; "" when none matched
  std::string token_prefix;  ///< an unknown key's digest prefix (Access::token_prefix)
  std::string route;         ///< "/v1/upsert", ...
  std::string method;
  int status = 0;
  std::int64_t rows = -1;    ///< rows written or deleted (-1: none)
  std::int64_t seq = -1;     ///< the log sequence number of the write (-1: none)
  std::string client;        ///< "ADDRESS:PORT"
  std::string why;           ///< a refusal's reason
};

class AuditLog {
 public:
  /// Called once per record, on the writer thread, after its line is on stable storage
  /// (`durable` true) or its write or fdatasync failed (false). Must not block.
  using Done = std::function<void(bool durable)>;

  /// Opens `path` for appending (created with mode 0600; its directory is synced when it was
  /// created) and starts the writer thread. @throws Error naming the file and why.
  explicit AuditLog(std::string path);
  /// Writes what is queued, then stops.
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  /// Queues one line (any thread).
  void append(const AuditRecord& rec, Done done);

  /// Opens the file again at its path (after a rotation; SIGHUP). On failure the old file stays
  /// in use. Returns a line for the log.
  bool reopen(std::string* message);

  /// "" while every write succeeded; else why the last one failed (writes are refused then).
  std::string failure() const;
  /// failure() is not empty (without a lock).
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  const std::string& path() const { return path_; }

  /// The JSON line of `rec`, without the newline.
  static std::string format(const AuditRecord& rec);

 private:
  struct Item {
    std::string line;
    Done done;
  };
  void loop();
  static int open_file(const std::string& path);

  const std::string path_;
  mutable std::mutex m_;  // queue_, stop_, failure_
  std::condition_variable cv_;
  std::vector<Item> queue_;
  bool stop_ = false;
  std::string failure_;
  std::atomic<bool> failed_{false};
  // writer thread only: failures are logged when they start and then at most once a minute, so a
  // client sending refused requests cannot grow rank 0's log line by line.
  std::chrono::steady_clock::time_point last_error_logged_{};
  std::int64_t unlogged_failures_ = 0;
  std::mutex fd_m_;  // fd_: the writer's writes and reopen()
  int fd_ = -1;
  std::thread thread_;
};

}  // namespace shardtopk::service
