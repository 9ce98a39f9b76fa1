#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <filesystem>
#include <tuple>

#include "core/log.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/storage.hpp"
#include "storage/crc32c.hpp"
#include "storage/segment.hpp"
#include "storage/storage_impl.hpp"

namespace shardtopk {
namespace storage {

namespace {

void check_options(const StorageOptions& o) {
  SHARDTOPK_EXPECTS(!o.dir.empty(), "storage: dir is empty");
  SHARDTOPK_EXPECTS(o.dim >= 1 && o.dim <= kMaxDim, "storage: dim = ", o.dim, " (allowed: 1 .. ", kMaxDim, ")");
  SHARDTOPK_EXPECTS(o.segment_bytes >= 4096 && o.segment_bytes <= (1ll << 40), "storage: segment_bytes = ",
                    o.segment_bytes, " (allowed: 4096 .. 2^40)");
  SHARDTOPK_EXPECTS(o.group_commit_window_us >= 0 && o.group_commit_window_us <= 1000000,
                    "storage: group_commit_window_us = ", o.group_commit_window_us, " (allowed: 0 .. 1000000)");
  SHARDTOPK_EXPECTS(o.group_commit_max_bytes >= 4096 && o.group_commit_max_bytes <= (1ll << 40),
                    "storage: group_commit_max_bytes = ", o.group_commit_max_bytes, " (allowed: 4096 .. 2^40)");
  SHARDTOPK_EXPECTS(o.max_pending_bytes >= 4096 && o.max_pending_bytes <= (1ll << 40),
                    "storage: max_pending_bytes = ", o.max_pending_bytes, " (allowed: 4096 .. 2^40)");
  SHARDTOPK_EXPECTS(o.max_record_bytes >= 64 && o.max_record_bytes <= static_cast<std::int64_t>(kMaxPayloadBytes),
                    "storage: max_record_bytes = ", o.max_record_bytes, " (allowed: 64 .. 2^40)");
  SHARDTOPK_EXPECTS(o.lock_wait_s >= 0 && o.lock_wait_s <= 86400, "storage: lock_wait_s = ", o.lock_wait_s,
                    " (allowed: 0 .. 86400)");
  SHARDTOPK_EXPECTS(o.keep_snapshots >= 1 && o.keep_snapshots <= 1000, "storage: keep_snapshots = ", o.keep_snapshots,
                    " (allowed: 1 .. 1000)");
}


}  // namespace
}  // namespace storage

using namespace storage;

std::string to_string(SnapshotStep s) {
  switch (s) {
    case SnapshotStep::kTempWritten: return "temp_written";
    case SnapshotStep::kRenamed: return "renamed";
    case SnapshotStep::kManifestWritten: return "manifest_written";
    case SnapshotStep::kCommitted: return "committed";
    case SnapshotStep::kLogTruncated: return "log_truncated";
  }
  return "?";
}

namespace {

// Replaces MANIFEST.json atomically (temp file, fsync, rename, directory fsync).
void write_manifest(const Storage::Impl& st, const Manifest& m) {
  const std::string mpath = st.path(kManifestName);
  write_file_synced(mpath + kTempSuffix, manifest_json(m));
  rename_synced(mpath + kTempSuffix, mpath, st.opt.dir);
}

void remove_leftover(Storage::Impl& st, const std::string& name, const std::string& why) {
  remove_file(st.path(name));
  st.report.removed_files.push_back(st.path(name));
  spdlog::info("storage '{}': removed {} ({})", st.opt.dir, name, why);
}

// Files a committed snapshot superseded (the previous snapshot, segments whose records it
// holds): with StorageOptions::defer_cleanup they stay until finish_recovery(), so that a start-up
// refused because the current snapshot is damaged keeps what could rebuild its state.
void remove_superseded(Storage::Impl& st, const std::string& name, const std::string& why) {
  if (!st.opt.defer_cleanup) return remove_leftover(st, name, why);
  st.superseded.emplace_back(name, why);
}

// The directory's manifest, created for a new directory. Leftover temp files and snapshots the
// manifest does not name (an interrupted or superseded snapshot) are removed.
void recover_manifest(Storage::Impl& st, const std::vector<std::string>& names) {
  const std::string mpath = st.path(kManifestName);
  bool has_manifest = false, has_data = false;
  for (const auto& n : names) {
    std::uint64_t s = 0;
    if (n == kManifestName) has_manifest = true;
    if (parse_segment_name(n, &s) || parse_snapshot_name(n, &s)) has_data = true;
  }
  if (!has_manifest) {
    SHARDTOPK_EXPECTS(!has_data, "storage '", st.opt.dir, "' holds log segments or snapshots but no ", kManifestName,
                      ": not opening it (restore the manifest from a backup, or move the files away)");
    Manifest m;
    m.dim = st.opt.dim;
    m.metric = st.opt.metric;
    write_manifest(st, m);
  }
  // The manifest itself, never what a link there points to (as for segments, snapshots and LOCK;
  // `storage verify` names it as damage too); a commit would replace the link with a file.
  struct stat mst {};
  if (::lstat(mpath.c_str(), &mst) != 0) throw_errno("lstat('" + mpath + "')", errno);
  SHARDTOPK_EXPECTS(S_ISREG(mst.st_mode), "storage '", st.opt.dir, "': ", kManifestName, " is ",
                    file_kind(mst.st_mode), ", not a regular file: not opening it (put the file itself there, "
                    "restored from a backup)");
  st.manifest = parse_manifest(read_small_file(mpath), mpath);
  SHARDTOPK_EXPECTS(st.manifest.dim == st.opt.dim, "storage '", st.opt.dir, "' holds rows of dim ", st.manifest.dim,
                    ", configured dim is ", st.opt.dim);
  SHARDTOPK_EXPECTS(st.manifest.metric == st.opt.metric, "storage '", st.opt.dir, "' was written for metric ",
                    to_string(st.manifest.metric), ", configured metric is ", to_string(st.opt.metric));
  if (!st.manifest.snapshot.empty()) {
    const std::string snap = st.path(st.manifest.snapshot);
    SHARDTOPK_EXPECTS(std::filesystem::is_regular_file(snap), "storage '", st.opt.dir, "': the manifest names snapshot '",
                      st.manifest.snapshot, "', which is missing");
    const std::uint64_t bytes = file_size(snap);
    SHARDTOPK_EXPECTS(st.manifest.snapshot_bytes < 0 || bytes == static_cast<std::uint64_t>(st.manifest.snapshot_bytes),
                      "storage '", st.opt.dir, "': snapshot '", st.manifest.snapshot, "' is ", bytes,
                      " bytes, the manifest recorded ", st.manifest.snapshot_bytes,
                      " when it was committed (the file was truncated or replaced; restore it from a backup)");
    // The manifest commits the snapshot by name and seq; the file's own attributes must agree.
    SnapshotInfo si;
    try {
      si = inspect_snapshot(snap);
    } catch (const Error& e) {
      throw Error(detail::concat("storage '", st.opt.dir, "': the snapshot the manifest names cannot be read (", e.what(),
                                 "); restore it from a backup"));
    }
    SHARDTOPK_EXPECTS(si.seq == st.manifest.seq && si.dim == st.manifest.dim && si.metric == st.manifest.metric,
                      "snapshot '", snap, "' holds seq ", si.seq, ", dim ", si.dim, ", metric ", to_string(si.metric),
                      " but the manifest of storage '", st.opt.dir, "' says seq ", st.manifest.seq, ", dim ",
                      st.manifest.dim, ", metric ", to_string(st.manifest.metric),
                      " (a file was replaced or the manifest edited)");
    if (st.manifest.snapshot_bytes < 0)
      spdlog::warn("storage '{}': the manifest records no checksum of snapshot {} (written before snapshots had one): "
                   "it is loaded unverified; the next snapshot records one",
                   st.opt.dir, st.manifest.snapshot);
  }
  std::vector<std::string> older;  // snapshots before the current one, oldest first (names sort by seq)
  for (const auto& n : names) {
    std::uint64_t s = 0;
    if (is_temp_leftover(n)) {
      remove_leftover(st, n, "temporary file of an interrupted write");
    } else if (parse_snapshot_name(n, &s) && n != st.manifest.snapshot) {
      if (s > st.manifest.seq)
        remove_leftover(st, n, "snapshot written but never committed to the manifest");
      else if (s < st.manifest.seq && !st.manifest.snapshot.empty())
        older.push_back(n);
      else
        remove_superseded(st, n, "snapshot superseded by " +
                                     (st.manifest.snapshot.empty() ? std::string("none") : st.manifest.snapshot));
    }
  }
  const std::size_t keep = static_cast<std::size_t>(st.opt.keep_snapshots - 1);
  for (std::size_t i = 0; i < older.size(); ++i) {
    if (i + keep < older.size())
      remove_superseded(st, older[i], "snapshot superseded by " + st.manifest.snapshot + " (storage.keep_snapshots " +
                                          std::to_string(st.opt.keep_snapshots) + ")");
    else
      st.older_snapshots.push_back(older[i]);
  }
  if (!st.manifest.snapshot.empty()) {
    struct stat sb {};
    if (::stat(st.path(st.manifest.snapshot).c_str(), &sb) == 0)
      st.base_time = std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::seconds(sb.st_mtim.tv_sec) + std::chrono::nanoseconds(sb.st_mtim.tv_nsec)));
  }
}

// The seq of the oldest snapshot kept: the log is kept from it on.
std::uint64_t retention_anchor(const Storage::Impl& st) {
  std::uint64_t anchor = st.manifest.seq;
  for (const std::string& n : st.older_snapshots) {
    std::uint64_t s = 0;
    if (parse_snapshot_name(n, &s)) anchor = std::min(anchor, s);
  }
  return anchor;
}

// Without a snapshot the log's records apply to the configured corpus file: the file the
// manifest recorded, or, while the log is empty, any (whose identity is then recorded).
void check_base_corpus(Storage::Impl& st, std::uint64_t last_seq) {
  Manifest& m = st.manifest;
  if (!m.snapshot.empty() || st.opt.base_corpus.empty()) return;
  const std::string& path = st.opt.base_corpus;
  const std::uint64_t bytes = file_size(path);
  const std::uint32_t crc = corpus_sample_crc32c(path, bytes);
  const bool same = m.corpus_bytes >= 0 && static_cast<std::uint64_t>(m.corpus_bytes) == bytes &&
                    m.corpus_sample_crc32c == crc;
  if (same) return;
  if (m.corpus_bytes >= 0 && last_seq > m.seq)
    throw Error(detail::concat(
        "storage '", st.opt.dir, "': its log holds ", last_seq - m.seq, " record(s) written against corpus '",
        m.corpus_path, "' (", m.corpus_bytes, " bytes, sample CRC-32C ", m.corpus_sample_crc32c, "), but corpus.path '",
        path, "' is another file (", bytes, " bytes, sample CRC-32C ", crc,
        "): point corpus.path at the file the directory was made with, or use a new storage.dir"));
  if (m.corpus_bytes < 0 && last_seq > m.seq)
    spdlog::warn("storage '{}': the manifest does not record which corpus file its {} log record(s) were written "
                 "against; recording '{}' now",
                 st.opt.dir, last_seq - m.seq, path);
  Manifest next = m;
  next.corpus_path = path;
  next.corpus_bytes = static_cast<std::int64_t>(bytes);
  next.corpus_sample_crc32c = crc;
  write_manifest(st, next);
  m = next;
}

// Scans the segments, cuts a torn tail of the last one, removes those a snapshot superseded,
// and checks that the kept ones continue the snapshot without a gap.
std::vector<SegmentInfo> recover_log(Storage::Impl& st, const std::vector<std::string>& names, std::uint64_t* last_seq) {
  const std::uint64_t S = st.manifest.seq, anchor = retention_anchor(st);
  std::vector<std::pair<std::uint64_t, std::string>> found;
  for (const auto& n : names) {
    std::uint64_t first = 0;
    if (parse_segment_name(n, &first)) found.emplace_back(first, n);
  }
  std::sort(found.begin(), found.end());
  std::vector<SegmentInfo> kept;
  std::uint64_t last = S;
  // Every record is read and checked here: a long log says how far it is every few seconds.
  const auto t0 = std::chrono::steady_clock::now();
  auto last_line = t0;
  for (std::size_t i = 0; i < found.size(); ++i) {
    const auto& [first, name] = found[i];
    const bool is_last = i + 1 == found.size();
    const auto now = std::chrono::steady_clock::now();
    if (i > 0 && now - last_line >= std::chrono::seconds(2)) {
      last_line = now;
      const double s = std::chrono::duration<double>(now - t0).count();
      spdlog::info("storage '{}': checking the log: segment {}/{}, {} record(s) and {:.0f} MB verified in {:.1f} s "
                   "({:.0f} MB/s)",
                   st.opt.dir, i + 1, found.size(), st.report.records, st.report.log_bytes / 1e6, s,
                   st.report.log_bytes / 1e6 / std::max(s, 1e-9));
    }
    if (!is_last && found[i + 1].first - 1 <= S) {
      if (found[i + 1].first - 1 <= anchor)
        remove_superseded(st, name, "every record is in snapshot seq " + std::to_string(anchor));
      else  // kept for an older snapshot (retention), not read
        st.retained.push_back(SegmentInfo{st.path(name), first, file_size(st.path(name)), found[i + 1].first - 1});
      continue;
    }
    const std::string path = st.path(name);
    Fd fd = open_file(path, O_RDWR);
    const std::uint64_t size = file_size(fd.get(), path);
    SegmentScan scan;
    {
      MappedFile map(path, size);
      SegmentHeader h;
      if (is_last && size <= kSegmentHeaderBytes && !decode_segment_header(map.data(), size, &h).empty()) {
        fd = Fd();
        remove_leftover(st, name, "segment whose creation was interrupted (" + std::to_string(size) + " bytes)");
        continue;
      }
      scan = scan_segment(path, map.data(), size, is_last, nullptr);
    }
    SHARDTOPK_EXPECTS(scan.header.first_seq == first, "log segment '", path, "': header says first seq ",
                      scan.header.first_seq, ", the name says ", first);
    SHARDTOPK_EXPECTS(scan.header.dim == static_cast<std::uint32_t>(st.opt.dim), "log segment '", path,
                      "' holds rows of dim ", scan.header.dim, ", configured dim is ", st.opt.dim);
    if (scan.end < size) {
      ftruncate_checked(fd.get(), scan.end, path);
      fsync_checked(fd.get(), path);
      st.report.dropped_bytes += static_cast<std::int64_t>(size - scan.end);
      st.report.dropped_records += scan.tail_records;
      // A crash tears only the last group commit, whose records were never acknowledged; a file
      // cut short afterwards may have lost acknowledged ones, and more than began in the tail:
      // open_dir compares the log's end with the seq the manifest recorded.
      spdlog::warn(
          "storage '{}': {}: cut a torn tail at offset {} ({}): dropped {} bytes holding {} record(s) from seq {} on "
          "(after a crash: never acknowledged); the log ends at seq {}",
          st.opt.dir, name, scan.end, scan.tail_reason, size - scan.end, scan.tail_records, scan.last_seq + 1,
          scan.last_seq);
    }
    fd.close(path);
    if (is_last && scan.last_seq <= S && first <= S) {
      if (scan.last_seq <= anchor)
        remove_superseded(st, name, "every record is in snapshot seq " + std::to_string(anchor));
      else
        st.retained.push_back(SegmentInfo{path, first, scan.end, scan.last_seq});
      continue;
    }
    if (kept.empty()) {
      SHARDTOPK_EXPECTS(first <= S + 1, "storage '", st.opt.dir, "': records ", S + 1, " .. ", first - 1,
                        " are missing: the snapshot ends at seq ", S, ", the log starts at ", name);
    } else {
      SHARDTOPK_EXPECTS(first == last + 1, "storage '", st.opt.dir, "': log segment '", name, "' starts at seq ",
                        first, " but the previous one ends at seq ", last, " (a segment is missing or damaged)");
    }
    last = std::max(last, scan.last_seq);
    kept.push_back(SegmentInfo{path, first, scan.end});
    st.report.records += static_cast<std::int64_t>(scan.last_seq > S ? scan.last_seq - std::max(S, first - 1) : 0);
    st.report.log_bytes += static_cast<std::int64_t>(scan.end);
  }
  st.report.segments = static_cast<std::int64_t>(kept.size());
  *last_seq = last;
  return kept;
}

// A directory this Storage created and to which nothing was written holds only the lock and a
// manifest without a snapshot: when the start-up that made it fails, it is removed again, so a
// mistyped storage.dir leaves nothing behind. Anything else in it (a record, a snapshot, a file
// of another program) keeps it whole. Runs with the lock held and the writer stopped.
void remove_unused_new_dir(Storage::Impl& st) {
  if (!st.created_dir || !st.lock) return;
  if (st.writer) {
    const auto [queued_records, queued_bytes] = st.writer->queued();
    if (st.writer->durable_seq() != 0 || st.writer->records_written() != 0 || !st.writer->segments().empty() ||
        queued_records != 0 || queued_bytes != 0)
      return;
    st.writer.reset();
  }
  if (st.manifest.seq != 0 || !st.manifest.snapshot.empty()) return;
  for (const std::string& n : list_dir(st.opt.dir))
    if (n != kLockName && n != kManifestName) return;
  remove_file(st.path(kManifestName));
  remove_file(st.path(kLockName));
  st.lock.reset();
  std::error_code ec;
  if (std::filesystem::remove(st.opt.dir, ec)) {
    spdlog::info("storage '{}': start-up failed; removed the directory it had created (nothing was written to it)",
                 st.opt.dir);
    for (const std::string& p : st.created_parents)  // deepest first; each only while empty
      if (!std::filesystem::remove(p, ec)) break;
  }
}

// A clean close: the log's last durable seq into the manifest (every record up to it was
// acknowledged or is durable), so that a later open can tell a log cut short after the fact.
void record_log_end(Storage::Impl& st) {
  if (!st.writer || !st.lock) return;
  try {
    const std::uint64_t end = st.writer->durable_seq();
    const bool failed = !st.writer->failure().empty();
    st.writer.reset();
    Manifest next;
    {
      std::lock_guard<std::mutex> lk(st.state_mu);
      if (failed || st.manifest.log_seq == end) return;
      next = st.manifest;
    }
    next.log_seq = end;
    write_manifest(st, next);
    std::lock_guard<std::mutex> lk(st.state_mu);
    st.manifest = next;
  } catch (const std::exception& e) {
    spdlog::warn("storage '{}': recording the log's end in {} at close: {}", st.opt.dir, kManifestName, e.what());
  }
}

}  // namespace

void Storage::finish_recovery() {
  Impl& st = *impl_;
  std::unique_lock<std::shared_mutex> files(st.files_mu);
  for (const auto& [name, why] : st.superseded) remove_leftover(st, name, why);
  if (!st.superseded.empty()) fsync_dir(st.opt.dir);
  st.superseded.clear();
}

std::int64_t Storage::recorded_capacity() const {
  std::lock_guard<std::mutex> lk(impl_->state_mu);
  return impl_->manifest.capacity_rows;
}

void Storage::record_capacity(std::int64_t rows) {
  Impl& st = *impl_;
  SHARDTOPK_EXPECTS(rows >= 1, "storage '", st.opt.dir, "': capacity of ", rows, " rows");
  std::lock_guard<std::mutex> writing(st.manifest_mu);
  Manifest next;
  {
    std::lock_guard<std::mutex> lk(st.state_mu);
    if (st.manifest.capacity_rows == rows) return;
    next = st.manifest;
  }
  next.capacity_rows = rows;
  write_manifest(st, next);
  std::lock_guard<std::mutex> lk(st.state_mu);
  st.manifest.capacity_rows = rows;
}

void Storage::check_base(const BaseIdentity& base) {
  Impl& st = *impl_;
  std::lock_guard<std::mutex> writing(st.manifest_mu);
  Manifest next;
  {
    std::lock_guard<std::mutex> lk(st.state_mu);
    if (!st.manifest.snapshot.empty()) return;
    next = st.manifest;
  }
  const BaseIdentity& was = next.base;
  const std::uint64_t last = st.writer->durable_seq();
  if (was.rows == base.rows && was.dim == base.dim && was.ids_digest == base.ids_digest &&
      was.data_digest == base.data_digest)
    return;
  if (was.rows >= 0 && last > next.seq) {
    std::string what;
    if (was.rows != base.rows || was.dim != base.dim)
      what = detail::concat("[", base.rows, " x ", base.dim, "] rows, not the [", was.rows, " x ", was.dim, "]");
    else if (was.ids_digest != base.ids_digest)
      what = detail::concat("other ids (digest ", digest_text(base.ids_digest), ", recorded ",
                            digest_text(was.ids_digest), ")");
    else
      what = detail::concat("the same ids but other row values (digest ", digest_text(base.data_digest), ", recorded ",
                            digest_text(was.data_digest), ")");
    throw Error(detail::concat("storage '", st.opt.dir, "': its log holds ", last - next.seq,
                               " record(s) written against a base of ", was.rows, " rows of dim ", was.dim,
                               ", but the index was given ", what,
                               ": replayed over other rows they would give wrong answers; load the rows the directory "
                               "was made with (the same corpus file, or the same arrays), or use a new storage.dir"));
  }
  if (was.rows < 0 && last > next.seq)
    spdlog::warn("storage '{}': the manifest does not record which rows its {} log record(s) were written against; "
                 "recording the given [{} x {}] rows now",
                 st.opt.dir, last - next.seq, base.rows, base.dim);
  next.base = base;
  write_manifest(st, next);
  std::lock_guard<std::mutex> lk(st.state_mu);
  st.manifest = next;
}

void Storage::verify_snapshot() const {
  Manifest m;
  {
    std::lock_guard<std::mutex> lk(impl_->state_mu);
    m = impl_->manifest;
  }
  if (m.snapshot.empty() || m.snapshot_bytes < 0) return;
  const std::string path = impl_->path(m.snapshot);
  const std::uint64_t bytes = file_size(path);
  SHARDTOPK_EXPECTS(bytes == static_cast<std::uint64_t>(m.snapshot_bytes), "snapshot '", path, "' is ", bytes,
                    " bytes, the manifest recorded ", m.snapshot_bytes, " (restore it from a backup)");
  const std::uint32_t crc = file_crc32c(path, 0, bytes);
  SHARDTOPK_EXPECTS(crc == m.snapshot_crc32c, "snapshot '", path, "' is damaged: its CRC-32C is ", crc,
                    ", the manifest recorded ", m.snapshot_crc32c, " when it was committed (restore it from a backup)");
}

StorageOptions storage_options(const StorageConfig& cfg, std::int64_t dim, Metric metric) {
  SHARDTOPK_EXPECTS(!cfg.dir.empty(), "storage.dir is not set: updates need a directory for the write-ahead log");
  StorageOptions o;
  o.dir = cfg.dir;
  o.dim = dim;
  o.metric = metric;
  o.group_commit_window_us = cfg.group_commit_window_us;
  o.segment_bytes = cfg.segment_bytes;
  o.max_pending_bytes = cfg.max_pending_bytes;
  o.lock_wait_s = cfg.lock_wait_s;
  o.keep_snapshots = static_cast<int>(cfg.keep_snapshots);
  return o;
}

namespace {

// The constructor's work once the directory exists: lock, recover, start the writer.
void open_dir(Storage::Impl& st, bool created) {
  if (created) {  // the new directory's own name durable in its parent
    auto self = std::filesystem::absolute(st.opt.dir).lexically_normal();
    if (self.filename().empty()) self = self.parent_path();  // "a/b/" names "a/b"
    const auto parent = self.parent_path();
    fsync_dir(parent.empty() ? std::string("/") : parent.string());
  }
  std::error_code ec;
  const auto kind = std::filesystem::status(st.opt.dir, ec).type();
  if (kind == std::filesystem::file_type::not_found)  // removed since create_directories saw it
    throw LockedFileRemoved(detail::concat("storage: '", st.opt.dir, "' was removed while it was being opened"));
  SHARDTOPK_EXPECTS(!ec || kind != std::filesystem::file_type::none, "storage: cannot stat '", st.opt.dir, "': ",
                    ec.message());
  SHARDTOPK_EXPECTS(kind == std::filesystem::file_type::directory, "storage: '", st.opt.dir, "' is not a directory");
  st.lock.emplace(st.path(kLockName), st.opt.lock_wait_s, st.opt.on_lock_wait);

  const std::vector<std::string> names = list_dir(st.opt.dir);
  recover_manifest(st, names);
  std::uint64_t last = 0;
  std::vector<SegmentInfo> segments = recover_log(st, list_dir(st.opt.dir), &last);
  if (!st.report.removed_files.empty()) fsync_dir(st.opt.dir);

  check_base_corpus(st, last);
  if (st.manifest.log_seq > last) {
    st.report.missing_acknowledged = static_cast<std::int64_t>(st.manifest.log_seq - last);
    spdlog::error("storage '{}': the log ends at seq {} but had reached seq {} when the directory was last closed: {} "
                  "acknowledged record(s), seq {} .. {}, are missing (a log segment was truncated or deleted since; "
                  "restore it from a backup to get them back)",
                  st.opt.dir, last, st.manifest.log_seq, st.report.missing_acknowledged, last + 1, st.manifest.log_seq);
  }

  st.report.snapshot_path = st.manifest.snapshot.empty() ? "" : st.path(st.manifest.snapshot);
  st.report.snapshot_seq = st.manifest.seq;
  st.report.last_seq = last;
  spdlog::info("storage '{}': snapshot {} (seq {}), log: {} segment(s), {} record(s) after it, last seq {}",
               st.opt.dir, st.manifest.snapshot.empty() ? "none" : st.manifest.snapshot, st.manifest.seq,
               st.report.segments, st.report.records, last);

  LogWriter::Config wc;
  wc.dir = st.opt.dir;
  wc.dim = static_cast<std::uint32_t>(st.opt.dim);
  wc.segment_bytes = static_cast<std::uint64_t>(st.opt.segment_bytes);
  wc.window = std::chrono::microseconds(st.opt.group_commit_window_us);
  wc.max_batch_bytes = static_cast<std::uint64_t>(st.opt.group_commit_max_bytes);
  wc.max_pending_bytes = static_cast<std::uint64_t>(st.opt.max_pending_bytes);
  wc.on_durable = st.opt.on_durable;
  st.writer = std::make_unique<LogWriter>(std::move(wc), std::move(segments), last);
}

// Creates the directory when missing, then locks it and recovers it (open_dir); a directory it
// created and left unused is removed again when that fails.
void open_or_create(Storage::Impl& st) {
  std::error_code ec;
  // The parents create_directories is about to make too (deepest first), for the clean-up:
  // each prefix of the path as written that does not exist yet ("." and ".." steps skipped).
  {
    const auto abs = std::filesystem::absolute(st.opt.dir, ec);
    std::vector<std::filesystem::path> steps(abs.begin(), abs.end());
    while (!steps.empty() && steps.back().empty()) steps.pop_back();  // "a/b/" names "a/b"
    std::filesystem::path prefix;
    for (std::size_t i = 0; !ec && i + 1 < steps.size(); ++i) {
      prefix /= steps[i];
      if (steps[i] == "." || steps[i] == ".." || prefix == prefix.root_path()) continue;
      if (!std::filesystem::exists(prefix, ec)) st.created_parents.insert(st.created_parents.begin(), prefix.string());
    }
    ec.clear();
  }
  const bool created = std::filesystem::create_directories(st.opt.dir, ec);
  if (ec == std::errc::no_such_file_or_directory)  // a parent it had just made was removed meanwhile
    throw LockedFileRemoved(detail::concat("storage: cannot create directory '", st.opt.dir, "': ", ec.message(),
                                           " (a parent was removed while it was being created)"));
  SHARDTOPK_EXPECTS(!ec, "storage: cannot create directory '", st.opt.dir, "': ", ec.message());
  st.created_dir = created;
  st.uncaught_at_open = std::uncaught_exceptions();
  try {
    open_dir(st, created);
  } catch (...) {
    try {
      remove_unused_new_dir(st);
    } catch (const std::exception& e) {
      spdlog::warn("storage '{}': could not remove the directory it had created: {}", st.opt.dir, e.what());
    }
    throw;
  }
}

}  // namespace

Storage::Storage(StorageOptions opt) : impl_(std::make_unique<Impl>()) {
  check_options(opt);
  Impl& st = *impl_;
  st.opt = std::move(opt);
  // A start-up that waited for the lock of one that created the directory and then failed finds
  // the directory removed (LockedFileRemoved): it creates it again and starts over.
  for (int attempt = 1;; ++attempt) {
    try {
      open_or_create(st);
      return;
    } catch (const LockedFileRemoved& e) {
      if (attempt == 3) throw;
      spdlog::warn("{}; starting over", e.what());
      st.created_parents.clear();
      st.report = RecoveryReport{};
    }
  }
}

Storage::~Storage() {
  // Destroyed while an exception unwinds the start-up (or the run) that opened it.
  if (std::uncaught_exceptions() <= impl_->uncaught_at_open) {
    record_log_end(*impl_);
    return;
  }
  try {
    remove_unused_new_dir(*impl_);
  } catch (const std::exception& e) {
    spdlog::warn("storage '{}': could not remove the directory it had created: {}", impl_->opt.dir, e.what());
  }
}

const StorageOptions& Storage::options() const { return impl_->opt; }
const RecoveryReport& Storage::recovery() const { return impl_->report; }

std::string Storage::snapshot_path() const {
  std::lock_guard<std::mutex> lk(impl_->state_mu);
  return impl_->manifest.snapshot.empty() ? "" : impl_->path(impl_->manifest.snapshot);
}

std::uint64_t Storage::snapshot_seq() const {
  std::lock_guard<std::mutex> lk(impl_->state_mu);
  return impl_->manifest.seq;
}

std::uint64_t Storage::last_seq() const { return impl_->writer->durable_seq(); }

StorageStats Storage::stats() const {
  StorageStats s;
  {
    std::lock_guard<std::mutex> lk(impl_->state_mu);
    s.snapshot_seq = impl_->manifest.seq;
    s.snapshot_path = impl_->manifest.snapshot.empty() ? "" : impl_->path(impl_->manifest.snapshot);
  }
  s.last_seq = impl_->writer->durable_seq();
  for (const auto& seg : impl_->writer->segments()) {
    ++s.segments;
    s.log_bytes += static_cast<std::int64_t>(seg.bytes);
  }
  s.records_since_snapshot = static_cast<std::int64_t>(s.last_seq - std::min(s.last_seq, s.snapshot_seq));
  s.group_commits = impl_->writer->group_commits();
  s.records_written = impl_->writer->records_written();
  std::tie(s.queued_records, s.queued_bytes) = impl_->writer->queued();
  s.failure = impl_->writer->failure();
  s.failed = !s.failure.empty();
  std::lock_guard<std::mutex> lk(impl_->state_mu);
  s.seconds_since_snapshot = std::chrono::duration<double>(std::chrono::system_clock::now() - impl_->base_time).count();
  s.older_snapshots = static_cast<std::int64_t>(impl_->older_snapshots.size());
  for (const auto& seg : impl_->retained) s.retained_log_bytes += static_cast<std::int64_t>(seg.bytes);
  return s;
}

std::uint64_t Storage::upsert(const UpsertRows& rows) {
  return impl_->writer->append(encode_upsert(rows, impl_->opt.dim, impl_->opt.max_record_bytes));
}

std::uint64_t Storage::delete_ids(const std::int64_t* ids, std::int64_t n) {
  return impl_->writer->append(encode_delete(ids, n, impl_->opt.max_record_bytes));
}

std::uint64_t Storage::submit_upsert(const UpsertRows& rows) {
  return impl_->writer->enqueue(encode_upsert(rows, impl_->opt.dim, impl_->opt.max_record_bytes));
}

std::uint64_t Storage::submit_delete(const std::int64_t* ids, std::int64_t n) {
  return impl_->writer->enqueue(encode_delete(ids, n, impl_->opt.max_record_bytes));
}

void Storage::wait_durable(std::uint64_t seq) { impl_->writer->wait(seq); }

void Storage::replay(std::uint64_t after_seq, const std::function<void(const WalRecord&)>& fn) const {
  std::shared_lock<std::shared_mutex> files(impl_->files_mu);
  const std::uint64_t upto = impl_->writer->durable_seq();
  if (after_seq >= upto) return;
  const std::vector<SegmentInfo> segments = impl_->writer->segments();
  const std::uint64_t first_kept = segments.empty() ? upto + 1 : segments.front().first_seq;
  SHARDTOPK_EXPECTS(after_seq + 1 >= first_kept, "storage '", impl_->opt.dir, "': records ", after_seq + 1, " .. ",
                    first_kept - 1, " are no longer in the log (a snapshot at seq ", snapshot_seq(),
                    " superseded them): load that snapshot instead");
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const SegmentInfo& seg = segments[i];
    if (i + 1 < segments.size() && segments[i + 1].first_seq <= after_seq + 1) continue;
    if (seg.first_seq > upto) break;
    MappedFile map(seg.path, seg.bytes);
    scan_segment(seg.path, map.data(), seg.bytes, false,
                 [&](const RecordHeader& h, const WalRecord& rec, std::uint64_t) {
                   if (h.seq <= after_seq || h.seq > upto) return;
                   fn(rec);
                 });
  }
}

}  // namespace shardtopk
