#include "storage/log_writer.hpp"

#include <fcntl.h>
#include <sys/uio.h>

#include <exception>

#include "core/log.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/storage.hpp"
#include "storage/segment.hpp"

namespace shardtopk::storage {

LogWriter::LogWriter(Config cfg, std::vector<SegmentInfo> segments, std::uint64_t last_seq)
    : cfg_(std::move(cfg)), next_seq_(last_seq + 1), durable_seq_(last_seq), acked_seq_(last_seq),
      segments_(std::move(segments)) {
  if (!segments_.empty()) {
    const SegmentInfo& s = segments_.back();
    active_fd_ = open_file(s.path, O_WRONLY);
    active_size_ = s.bytes;
    active_first_seq_ = s.first_seq;
    // The recovered log ends in this segment: its last record is the log's last one, or it is
    // empty (a segment is started at the seq its first record will have).
    active_last_seq_ = s.bytes > kSegmentHeaderBytes ? last_seq : s.first_seq - 1;
    SHARDTOPK_ASSERT(active_last_seq_ == last_seq, "active segment '", s.path, "' does not end the log");
  }
  thread_ = std::thread([this] { run(); });
}

LogWriter::~LogWriter() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  space_cv_.notify_all();
  thread_.join();
}

std::uint64_t LogWriter::append(EncodedRecord&& rec) {
  const std::uint64_t seq = enqueue(std::move(rec));
  wait(seq);
  return seq;
}

std::uint64_t LogWriter::enqueue(EncodedRecord&& rec) {
  std::unique_lock<std::mutex> lk(mu_);
  const std::uint64_t bytes = rec.framed_bytes;
  space_cv_.wait(lk, [&] {
    return stopping_ || !failure_.empty() || queued_bytes_ == 0 || queued_bytes_ + bytes <= cfg_.max_pending_bytes;
  });
  SHARDTOPK_EXPECTS(failure_.empty(), "storage '", cfg_.dir, "' refuses writes ", kAfterLogError, ": ", failure_);
  SHARDTOPK_EXPECTS(!stopping_, "storage '", cfg_.dir, "' is closing");
  const std::uint64_t seq = next_seq_++;
  rec.seq = seq;
  queue_.push_back(Pending{std::move(rec), std::chrono::steady_clock::now()});
  queued_bytes_ += bytes;
  work_cv_.notify_one();
  return seq;
}

void LogWriter::wait(std::uint64_t seq) {
  std::unique_lock<std::mutex> lk(mu_);
  durable_cv_.wait(lk, [&] { return acked_seq_ >= seq || !failure_.empty(); });
  if (acked_seq_ >= seq) return;
  throw Error("storage '" + cfg_.dir + "': record seq " + std::to_string(seq) +
              " not acknowledged (it may or may not survive a restart): " + failure_);
}

void LogWriter::fail(const std::string& why) {
  if (failure_.empty()) {
    failure_ = why;
    spdlog::error("storage '{}': the log refuses further writes: {}", cfg_.dir, why);
  }
  // Queued records will never be written: drop them (their appenders see the failure).
  queue_.clear();
  queued_bytes_ = 0;
  durable_cv_.notify_all();
  space_cv_.notify_all();
}

void LogWriter::run() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, nothing left
    if (cfg_.window.count() > 0 && !stopping_) {
      const auto deadline = queue_.front().queued + cfg_.window;
      work_cv_.wait_until(lk, deadline, [&] { return stopping_ || queued_bytes_ >= cfg_.max_batch_bytes; });
    }
    if (queue_.empty()) continue;  // failed meanwhile
    std::vector<Pending> batch;
    std::uint64_t bytes = 0;
    while (!queue_.empty() && (batch.empty() || bytes + queue_.front().rec.framed_bytes <= cfg_.max_batch_bytes)) {
      bytes += queue_.front().rec.framed_bytes;
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    queued_bytes_ -= bytes;
    space_cv_.notify_all();
    lk.unlock();

    std::string error;
    bool synced = false;
    std::uint64_t acked = 0;  // last seq through on_durable
    try {
      write_batch(batch);
      synced = true;
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "unknown exception while writing";
    }
    if (synced && cfg_.on_durable) {
      for (const Pending& p : batch) {
        try {
          const unsigned char* h = p.rec.bytes();
          cfg_.on_durable(decode_record(read_record_header(h), h + kRecordHeaderBytes, "on_durable"));
        } catch (const std::exception& e) {
          error = "on_durable failed for record seq " + std::to_string(p.rec.seq) + ": " + e.what();
          break;
        } catch (...) {
          error = "on_durable failed for record seq " + std::to_string(p.rec.seq) + ": unknown exception";
          break;
        }
        acked = p.rec.seq;
      }
    } else if (synced) {
      acked = batch.back().rec.seq;
    }
    batch.clear();  // free the records before taking the lock

    lk.lock();
    if (acked > 0) acked_seq_ = acked;
    if (!error.empty()) fail(error);
    durable_cv_.notify_all();
  }
}

void LogWriter::open_segment(std::uint64_t first_seq) {
  const std::string path = cfg_.dir + "/" + segment_name(first_seq);
  Fd fd = open_file(path, O_WRONLY | O_CREAT | O_EXCL);
  unsigned char header[kSegmentHeaderBytes];
  encode_segment_header(SegmentHeader{first_seq, cfg_.dim}, header);
  pwrite_all(fd.get(), header, sizeof header, 0, path);
  fdatasync_checked(fd.get(), path);
  fsync_dir(cfg_.dir);  // the new name is durable before any acknowledged record lives in it
  if (active_fd_) active_fd_.close(segments_.back().path);
  active_fd_ = std::move(fd);
  active_size_ = kSegmentHeaderBytes;
  active_first_seq_ = first_seq;
  active_last_seq_ = first_seq - 1;
  std::lock_guard<std::mutex> lk(mu_);
  segments_.push_back(SegmentInfo{path, first_seq, kSegmentHeaderBytes});
}

void LogWriter::write_batch(std::vector<Pending>& batch) {
  std::lock_guard<std::mutex> io(io_mu_);
  const std::uint64_t first = batch.front().rec.seq;
  if (!active_fd_ || active_size_ >= cfg_.segment_bytes) open_segment(first);
  SHARDTOPK_ASSERT(first == active_last_seq_ + 1, "batch starts at seq ", first, " after ", active_last_seq_);
  const std::uint64_t batch_offset = active_size_;
  std::vector<struct iovec> iov;
  iov.reserve(batch.size());
  std::uint64_t bytes = 0;
  for (Pending& p : batch) {
    finish_record(p.rec, p.rec.seq, batch_offset);
    iov.push_back({p.rec.bytes(), static_cast<std::size_t>(p.rec.framed_bytes)});
    bytes += p.rec.framed_bytes;
  }
  const std::string& path = segments_.back().path;  // only this thread and detach_through change the list
  pwritev_all(active_fd_.get(), iov.data(), iov.size(), batch_offset, path);
  fdatasync_checked(active_fd_.get(), path);
  active_size_ += bytes;
  active_last_seq_ = batch.back().rec.seq;
  std::lock_guard<std::mutex> lk(mu_);
  segments_.back().bytes = active_size_;
  durable_seq_ = active_last_seq_;
  ++group_commits_;
  records_written_ += static_cast<std::int64_t>(batch.size());
}

void LogWriter::close_active_through(std::uint64_t seq) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    SHARDTOPK_EXPECTS(failure_.empty(), "storage '", cfg_.dir, "' refuses writes ", kAfterLogError, ": ", failure_);
  }
  // Only a segment with records, all of them ≤ seq.
  if (!active_fd_ || active_last_seq_ < active_first_seq_ || active_last_seq_ > seq) return;
  // A failed rotation may leave a new segment file behind while the old one is still active;
  // appending to the old one then would break the seq order across files, so the log stops.
  try {
    open_segment(active_last_seq_ + 1);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lk(mu_);
    fail(std::string("starting a new segment: ") + e.what());
    throw;
  }
}

void LogWriter::start_segment_after(std::uint64_t seq) {
  std::lock_guard<std::mutex> io(io_mu_);
  close_active_through(seq);
}

std::vector<SegmentInfo> LogWriter::detach_through(std::uint64_t seq) {
  std::lock_guard<std::mutex> io(io_mu_);
  close_active_through(seq);  // a segment all in the snapshot goes with the others
  std::lock_guard<std::mutex> lk(mu_);
  std::size_t keep = 0;
  while (keep + 1 < segments_.size() && segments_[keep + 1].first_seq <= seq + 1) ++keep;
  std::vector<SegmentInfo> out(segments_.begin(), segments_.begin() + static_cast<std::ptrdiff_t>(keep));
  for (std::size_t i = 0; i < out.size(); ++i) out[i].last_seq = segments_[i + 1].first_seq - 1;
  segments_.erase(segments_.begin(), segments_.begin() + static_cast<std::ptrdiff_t>(keep));
  return out;
}

std::uint64_t LogWriter::durable_seq() const {
  std::lock_guard<std::mutex> lk(mu_);
  return durable_seq_;
}

std::vector<SegmentInfo> LogWriter::segments() const {
  std::lock_guard<std::mutex> lk(mu_);
  return segments_;
}

std::string LogWriter::failure() const {
  std::lock_guard<std::mutex> lk(mu_);
  return failure_;
}

std::int64_t LogWriter::group_commits() const {
  std::lock_guard<std::mutex> lk(mu_);
  return group_commits_;
}

std::int64_t LogWriter::records_written() const {
  std::lock_guard<std::mutex> lk(mu_);
  return records_written_;
}

std::pair<std::int64_t, std::int64_t> LogWriter::queued() const {
  std::lock_guard<std::mutex> lk(mu_);
  return {static_cast<std::int64_t>(queue_.size()), static_cast<std::int64_t>(queued_bytes_)};
}

}  // namespace shardtopk::storage
