#pragma once
// The log's writer: a queue of encoded records, one thread that writes them in seq order in
// group commits (one pwritev + fdatasync per group), segment rotation, and removal of
// segments a snapshot has superseded. Internal header.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shardtopk/storage.hpp"
#include "storage/format.hpp"
#include "storage/fs.hpp"

namespace shardtopk::storage {

/// One segment file of the log.
struct SegmentInfo {
  std::string path;
  std::uint64_t first_seq = 0;
  std::uint64_t bytes = 0;  ///< durable bytes (header + whole records)
  std::uint64_t last_seq = 0;  ///< its last record's seq, where known (segments detached from the log)
};

class LogWriter {
 public:
  struct Config {
    std::string dir;
    std::uint32_t dim = 0;
    std::uint64_t segment_bytes = 0;
    std::chrono::microseconds window{0};
    std::uint64_t max_batch_bytes = 0;
    std::uint64_t max_pending_bytes = 0;
    std::function<void(const WalRecord&)> on_durable;
  };

  /// `segments`: the recovered segments in order (may be empty); the last one is appended to.
  /// `last_seq`: the highest seq already in the log or in the base snapshot.
  LogWriter(Config cfg, std::vector<SegmentInfo> segments, std::uint64_t last_seq);
  /// Writes what is queued (unless the log has failed), then stops the thread.
  ~LogWriter();
  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  /// Queues `rec`, assigns its seq, waits until it is durable and on_durable has run.
  /// @throws Error when the log has failed or is closing.
  std::uint64_t append(EncodedRecord&& rec);
  /// append() in two halves: enqueue() queues the record (waiting for queue space) and returns
  /// its seq at once; wait(seq) returns once that record is durable and on_durable has run.
  /// @throws Error as append().
  std::uint64_t enqueue(EncodedRecord&& rec);
  void wait(std::uint64_t seq);

  /// Highest seq that is durable (on_durable may still be running for it).
  std::uint64_t durable_seq() const;
  std::vector<SegmentInfo> segments() const;
  /// "" while the log accepts writes, else why it stopped.
  std::string failure() const;
  std::int64_t group_commits() const;
  std::int64_t records_written() const;
  /// Records and bytes queued, not yet taken by a group commit.
  std::pair<std::int64_t, std::int64_t> queued() const;

  /// Before a snapshot of the state after record `seq`: when the active segment's last record
  /// is `seq`, starts a new segment, so that what is written while the snapshot is taken goes
  /// there and detach_through(seq) at its commit takes every older segment out of the log
  /// (otherwise a log written to all along keeps its whole active segment, up to segment_bytes,
  /// after each snapshot, and a size policy below that takes snapshot after snapshot).
  /// @throws Error on a file-system failure (the log then refuses writes) or a failed log.
  void start_segment_after(std::uint64_t seq);

  /// After a snapshot at `seq`: when every record of the active segment is ≤ seq, starts a new
  /// segment; then takes every segment whose records are all ≤ seq (not the active one) out of
  /// the log and returns them, oldest first, with their last_seq: the caller removes their
  /// files or keeps them (retention). @throws Error on a file-system failure.
  std::vector<SegmentInfo> detach_through(std::uint64_t seq);

 private:
  struct Pending {
    EncodedRecord rec;
    std::chrono::steady_clock::time_point queued;
  };

  void run();
  void write_batch(std::vector<Pending>& batch);
  void open_segment(std::uint64_t first_seq);  // io_mu_ held
  /// io_mu_ held: a new segment when the active one has records, all of them ≤ `seq` (the
  /// active segment holds the last durable record, so before a snapshot at `seq` ≤ that record
  /// this means: it ends at `seq`); the log fails when that cannot be done.
  void close_active_through(std::uint64_t seq);
  void fail(const std::string& why);           // mu_ held

  Config cfg_;

  mutable std::mutex mu_;                // queue, seqs, failure, segment list, counters
  std::condition_variable work_cv_;      // the writer: records queued, or stopping
  std::condition_variable space_cv_;     // appenders: queue space freed
  std::condition_variable durable_cv_;   // appenders: acked_seq_ advanced, or failure
  std::deque<Pending> queue_;
  std::uint64_t queued_bytes_ = 0;
  std::uint64_t next_seq_ = 1;
  std::uint64_t durable_seq_ = 0;
  std::uint64_t acked_seq_ = 0;
  std::string failure_;
  bool stopping_ = false;
  std::vector<SegmentInfo> segments_;
  std::int64_t group_commits_ = 0;
  std::int64_t records_written_ = 0;

  std::mutex io_mu_;  // the active segment's file: held while a group commit is written
  Fd active_fd_;
  std::uint64_t active_size_ = 0;
  std::uint64_t active_last_seq_ = 0;  // seq of the active segment's last record; first_seq - 1 when empty
  std::uint64_t active_first_seq_ = 0;

  std::thread thread_;
};

}  // namespace shardtopk::storage
