// `storage info` and `storage verify`: a storage directory read as recovery reads it, but
// without its lock and without changing anything (docs/STORAGE.md, "Inspecting and verifying").
#include "shardtopk/storage_inspect.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <optional>
#include <thread>
#include <type_traits>

#include "shardtopk/error.hpp"
#include "storage/fs.hpp"
#include "storage/lock.hpp"
#include "storage/segment.hpp"
#include "storage/storage_impl.hpp"

namespace shardtopk {

using namespace storage;

namespace {

// `n` bytes at `off`; false when the file ends first.
bool read_at(int fd, void* buf, std::size_t n, std::uint64_t off, const std::string& path) {
  auto* p = static_cast<unsigned char*>(buf);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw_errno("reading '" + path + "'", errno);
    if (r == 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
    off += static_cast<std::uint64_t>(r);
  }
  return true;
}

// A segment's records counted by their headers alone (type, seq, length; no checksum): one small
// read per record, so that `info` stays fast on a long log.
void walk_headers(const std::string& path, StorageSegmentSummary& s) {
  Fd fd = open_file(path, O_RDONLY);
  const std::uint64_t size = file_size(fd.get(), path);
  s.bytes = static_cast<std::int64_t>(size);
  s.last_seq = s.first_seq - 1;
  unsigned char h[kSegmentHeaderBytes];
  SegmentHeader sh;
  if (!read_at(fd.get(), h, sizeof h, 0, path) || !decode_segment_header(h, sizeof h, &sh).empty()) {
    s.tail_bytes = s.bytes;
    return;
  }
  std::uint64_t off = kSegmentHeaderBytes, expected = sh.first_seq;
  while (off + kRecordHeaderBytes <= size && read_at(fd.get(), h, kRecordHeaderBytes, off, path)) {
    const RecordHeader r = read_record_header(h);
    if ((r.type != static_cast<std::uint32_t>(WalRecordType::kUpsert) &&
         r.type != static_cast<std::uint32_t>(WalRecordType::kDelete)) ||
        r.seq != expected || r.payload_bytes > kMaxPayloadBytes ||
        pad8(r.payload_bytes) > size - off - kRecordHeaderBytes)
      break;
    ++s.records;
    s.last_seq = r.seq;
    ++expected;
    off += kRecordHeaderBytes + pad8(r.payload_bytes);
  }
  s.tail_bytes = static_cast<std::int64_t>(size - off);
}

// The directory's files by kind.
struct Listing {
  std::vector<std::pair<std::uint64_t, std::string>> segments, snapshots;  // (seq, name), in seq order
  std::vector<std::string> temps;
  bool manifest = false;
  // Named like the manifest, a segment or a snapshot but not a regular file: (name, what it is).
  std::vector<std::pair<std::string, std::string>> odd;
  bool odd_manifest = false;
};

Listing list_storage(const std::string& dir) {
  std::error_code ec;
  SHARDTOPK_EXPECTS(std::filesystem::exists(dir, ec), "storage: '", dir, "' does not exist (storage.dir: the directory "
                    "a service with updates keeps its log and snapshots in)");
  SHARDTOPK_EXPECTS(std::filesystem::is_directory(dir, ec), "storage: '", dir, "' is not a directory");
  Listing l;
  for (const std::string& n : list_dir(dir)) {
    std::uint64_t s = 0;
    const bool named = n == kManifestName || parse_segment_name(n, &s) || parse_snapshot_name(n, &s);
    // A FIFO or device named like a segment would block its open() for good, and a link leads out
    // of the directory: set such entries apart before anything opens them.
    if (named) {
      struct stat st {};
      if (::lstat((dir + "/" + n).c_str(), &st) != 0) {
        if (errno == ENOENT) continue;  // removed since the listing (a snapshot committed beside us)
        throw_errno("lstat('" + dir + "/" + n + "')", errno);
      }
      if (!S_ISREG(st.st_mode)) {
        l.odd.emplace_back(n, file_kind(st.st_mode));
        l.odd_manifest = l.odd_manifest || n == kManifestName;
        continue;
      }
    }
    if (n == kManifestName) l.manifest = true;
    else if (parse_segment_name(n, &s)) l.segments.emplace_back(s, n);
    else if (parse_snapshot_name(n, &s)) l.snapshots.emplace_back(s, n);
    else if (is_temp_leftover(n)) l.temps.push_back(n);
  }
  std::sort(l.segments.begin(), l.segments.end());
  std::sort(l.snapshots.begin(), l.snapshots.end());
  return l;
}

// Which segments hold records after the snapshot ("log"), which only older snapshots need
// ("retained") and which a start-up removes ("superseded"), as recovery decides from the names
// (the last segment by its last record; a last segment that starts after the snapshot is the one
// the log goes on in, even while it holds no record).
std::string segment_role(std::uint64_t last_seq, std::uint64_t first_seq, bool is_last, std::uint64_t snapshot_seq,
                         std::uint64_t anchor) {
  if (last_seq > snapshot_seq || (is_last && first_seq > snapshot_seq)) return "log";
  return last_seq > anchor ? "retained" : "superseded";
}

std::uint64_t oldest_kept(const Listing& l, std::uint64_t snapshot_seq, bool has_snapshot) {
  std::uint64_t anchor = snapshot_seq;
  if (has_snapshot)
    for (const auto& [s, n] : l.snapshots) anchor = std::min(anchor, s);
  return anchor;
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// One look at the directory: its listing and the manifest's bytes as they were then.
struct Seen {
  Listing l;
  bool manifest_read = false;
  std::string manifest, manifest_error;
};

Seen look(const std::string& dir) {
  Seen s;
  s.l = list_storage(dir);
  if (s.l.manifest) {
    try {
      s.manifest = read_small_file(dir + "/" + kManifestName);
      s.manifest_read = true;
    } catch (const Error& e) {
      s.manifest_error = e.what();
    }
  }
  return s;
}

// Whether the directory moved on since `s`: a file it listed is gone or the manifest changed. A
// snapshot committed by the service beside us does both (it removes the segments and the older
// snapshot it supersedes), so what one run read may not fit together.
bool moved_on(const std::string& dir, const Seen& s) {
  auto gone = [&](const std::string& n) {
    struct stat st {};
    return ::lstat((dir + "/" + n).c_str(), &st) != 0 && errno == ENOENT;
  };
  for (const auto& [seq, n] : s.l.segments)
    if (gone(n)) return true;
  for (const auto& [seq, n] : s.l.snapshots)
    if (gone(n)) return true;
  if (!s.l.manifest) return false;
  try {
    const std::string now = read_small_file(dir + "/" + kManifestName);
    return !s.manifest_read || now != s.manifest;
  } catch (const Error& e) {
    // Unreadable again for the same reason (e.g. permission): that is how the directory is.
    return s.manifest_read || e.what() != s.manifest_error;
  }
}

// `run` over one look at the directory, again from a fresh look while a run that failed or found
// trouble saw a directory that has moved on since: only what is wrong in one consistent state is
// reported. A snapshot committed beside us moves it on; the pause between runs (1 ms doubling to
// 64 ms) lets a commit that is under way finish. After kRetryFor of a directory that moved on
// during every run, the last run's failure is thrown, saying so. Never locks and never writes.
constexpr auto kRetryFor = std::chrono::seconds(20);

template <class Result, class Run, class Troubled>
Result consistent_run(const std::string& dir, Run run, Troubled troubled) {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::milliseconds(1);
  for (int attempt = 1;; ++attempt) {
    const Seen seen = look(dir);
    std::optional<Result> r;
    std::exception_ptr error;
    try {
      r.emplace(run(seen));
    } catch (const Error&) {
      error = std::current_exception();
    }
    if ((!error && !troubled(*r)) || !moved_on(dir, seen)) {
      if (error) std::rethrow_exception(error);
      return std::move(*r);
    }
    if (std::chrono::steady_clock::now() - start >= kRetryFor) {
      const std::string why = detail::concat("storage: '", dir, "' changed during each of ", attempt, " runs over ",
                                             std::chrono::duration_cast<std::chrono::seconds>(kRetryFor).count(),
                                             " s (snapshots committed beside it); run again when it is quieter. ");
      if (!error) {  // the last run's findings stand, as found, with why they may not fit together
        if constexpr (std::is_same_v<Result, StorageVerifyReport>) r->notes.push_back(why);
        if constexpr (std::is_same_v<Result, StorageDirSummary>) {
          if (!r->manifest_error.empty()) r->manifest_error = why + r->manifest_error;
          if (!r->snapshot_error.empty()) r->snapshot_error = why + r->snapshot_error;
        }
        return std::move(*r);
      }
      try {
        std::rethrow_exception(error);
      } catch (const Error& e) {
        throw Error(why + "The last run: " + e.what());
      }
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(64));
  }
}

// The manifest as `seen` read it. @throws Error when it could not be read.
Manifest parse_seen_manifest(const std::string& dir, const Seen& seen) {
  const std::string mpath = dir + "/" + kManifestName;
  if (!seen.manifest_read) throw Error(seen.manifest_error);
  return parse_manifest(seen.manifest, mpath);
}

// An operator-named file that cannot be opened is an error, not a check skipped with a note.
void expect_readable_file(const std::string& path, const std::string& what) {
  int fd;
  do fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_errno(what + " '" + path + "' cannot be opened", errno);
  const Fd f(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno("fstat('" + path + "')", errno);
  SHARDTOPK_EXPECTS(S_ISREG(st.st_mode), what, " '", path, "' is ", file_kind(st.st_mode), ", not a regular file");
}

StorageDirSummary inspect_once(const std::string& dir, const Seen& seen);
StorageVerifyReport verify_once(const std::string& dir, const std::string& corpus, const Seen& seen);

}  // namespace

bool StorageVerifyReport::damaged() const {
  return std::any_of(problems.begin(), problems.end(),
                     [](const StorageProblem& p) { return p.kind == StorageProblem::Kind::kDamage; });
}

StorageDirSummary inspect_storage_dir(const std::string& dir) {
  return consistent_run<StorageDirSummary>(
      dir, [&](const Seen& seen) { return inspect_once(dir, seen); },
      [](const StorageDirSummary& s) { return !s.manifest_error.empty() || !s.snapshot_error.empty(); });
}

StorageVerifyReport verify_storage_dir(const std::string& dir, const std::string& corpus) {
  if (!corpus.empty()) expect_readable_file(corpus, "storage verify: the corpus file");
  return consistent_run<StorageVerifyReport>(
      dir, [&](const Seen& seen) { return verify_once(dir, corpus, seen); },
      [](const StorageVerifyReport& r) { return r.damaged(); });
}

namespace {

StorageDirSummary inspect_once(const std::string& dir, const Seen& seen) {
  StorageDirSummary out;
  out.dir = dir;
  const Listing& l = seen.l;
  if (!l.odd.empty())
    throw Error(detail::concat("storage: '", dir, "/", l.odd.front().first, "' is not a regular file (",
                               l.odd.front().second, ")"));
  Manifest m;
  bool have = false;
  if (!l.manifest) {
    out.manifest_error = "no " + std::string(kManifestName);
    out.empty = l.segments.empty() && l.snapshots.empty();
  } else {
    try {
      m = parse_seen_manifest(dir, seen);
      have = true;
    } catch (const Error& e) {
      out.manifest_error = e.what();
    }
  }
  if (have) {
    out.dim = m.dim;
    out.metric = m.metric;
    out.snapshot = m.snapshot;
    out.snapshot_seq = m.seq;
    out.snapshot_bytes = m.snapshot_bytes;
    out.snapshot_crc32c = m.snapshot_crc32c;
    out.corpus_path = m.corpus_path;
    out.corpus_bytes = m.corpus_bytes;
    out.corpus_sample_crc32c = m.corpus_sample_crc32c;
    out.capacity_rows = m.capacity_rows;
    out.base = m.base;
    out.recorded_log_seq = m.log_seq;
    if (!m.snapshot.empty()) {
      try {
        out.snapshot_info = inspect_snapshot(dir + "/" + m.snapshot);
      } catch (const Error& e) {
        out.snapshot_error = e.what();
      }
    }
  }
  for (const auto& [s, n] : l.snapshots) {
    if (n == m.snapshot) continue;
    // Without a readable manifest a start-up refuses the directory before it removes anything:
    // such a snapshot may be the only copy of the rows, not a leftover.
    if (!have) out.unclaimed_snapshots.push_back(n);
    else (s < m.seq && !m.snapshot.empty() ? out.older_snapshots : out.leftovers).push_back(n);
  }
  out.leftovers.insert(out.leftovers.end(), l.temps.begin(), l.temps.end());
  const std::uint64_t anchor = oldest_kept(l, m.seq, have && !m.snapshot.empty());
  out.last_seq = m.seq;
  for (std::size_t i = 0; i < l.segments.size(); ++i) {
    StorageSegmentSummary s;
    s.name = l.segments[i].second;
    s.first_seq = l.segments[i].first;
    walk_headers(dir + "/" + s.name, s);
    const std::uint64_t last = i + 1 < l.segments.size() ? l.segments[i + 1].first - 1 : s.last_seq;
    s.role = segment_role(std::max(last, s.first_seq - 1), s.first_seq, i + 1 == l.segments.size(), m.seq, anchor);
    if (s.role == "log") {
      out.log_bytes += s.bytes;
      if (s.last_seq > m.seq) out.log_records += static_cast<std::int64_t>(s.last_seq - std::max(m.seq, s.first_seq - 1));
      out.last_seq = std::max(out.last_seq, s.last_seq);
    }
    out.segments.push_back(std::move(s));
  }
  const LockHolder h = read_lock_holder(dir + "/" + kLockName);
  if (h.pid >= 0) out.lock_holder = h.describe();
  out.lock_error = h.problem;
  return out;
}

StorageVerifyReport verify_once(const std::string& dir, const std::string& corpus, const Seen& seen) {
  StorageVerifyReport r;
  auto damage = [&](const std::string& file, const std::string& what) {
    r.problems.push_back({StorageProblem::Kind::kDamage, file, what});
  };
  const Listing& l = seen.l;
  for (const auto& [n, what] : l.odd)
    damage(n, "is " + what + ", not a regular file (restore the file itself from a backup)");
  // LOCK itself (never what a link there points to): a start-up refuses one that is not a file.
  struct stat lock_st {};
  if (::lstat((dir + "/" + kLockName).c_str(), &lock_st) == 0 && !S_ISREG(lock_st.st_mode))
    damage(kLockName, "is " + file_kind(lock_st.st_mode) +
                          ", not a regular file: a start-up refuses the directory (remove it: the lock file is "
                          "made anew)");

  // The manifest, read as strictly as a start-up reads it.
  Manifest m;
  bool have = false;
  if (l.odd_manifest) {
    // named above
  } else if (!l.manifest) {
    if (!l.segments.empty() || !l.snapshots.empty() || !l.odd.empty())
      damage(kManifestName, detail::concat("missing, but the directory holds ", l.segments.size(),
                                           " log segment(s) and ", l.snapshots.size(),
                                           " snapshot(s): a start-up refuses it (restore the manifest from a backup)"));
    else {
      // Nothing to verify, and nothing damaged: a start-up makes a fresh directory here.
      r.empty = true;
      return r;
    }
  } else {
    try {
      m = parse_seen_manifest(dir, seen);
      have = true;
      r.checked.push_back(detail::concat(kManifestName, ": dim ", m.dim, ", metric ", to_string(m.metric), ", ",
                                         m.snapshot.empty() ? std::string("no snapshot") : "snapshot " + m.snapshot,
                                         ", seq ", m.seq));
    } catch (const Error& e) {
      damage(kManifestName, e.what());
    }
  }

  // The snapshot the manifest names: size, checksum, and its own attributes.
  const bool snapshot_odd = std::any_of(l.odd.begin(), l.odd.end(), [&](const auto& e) { return e.first == m.snapshot; });
  const bool snapshot_listed =
      std::any_of(l.snapshots.begin(), l.snapshots.end(), [&](const auto& e) { return e.second == m.snapshot; });
  if (have && !m.snapshot.empty() && snapshot_odd) {
    // named above: not a regular file
  } else if (have && !m.snapshot.empty()) {
    const std::string path = dir + "/" + m.snapshot;
    if (!snapshot_listed) {
      damage(m.snapshot, "named by the manifest but missing: a start-up refuses the directory");
    } else {
      bool ok = true;
      const std::uint64_t bytes = file_size(path);
      if (m.snapshot_bytes >= 0 && bytes != static_cast<std::uint64_t>(m.snapshot_bytes)) {
        damage(m.snapshot, detail::concat("is ", bytes, " bytes, the manifest recorded ", m.snapshot_bytes,
                                          " (truncated or replaced; restore it from a backup)"));
        ok = false;
      } else if (m.snapshot_bytes >= 0) {
        const std::uint32_t crc = file_crc32c(path, 0, bytes);
        if (crc != m.snapshot_crc32c) {
          damage(m.snapshot, detail::concat("is damaged: its CRC-32C is ", hex32(crc), ", the manifest recorded ",
                                            hex32(m.snapshot_crc32c), " (restore it from a backup)"));
          ok = false;
        }
      } else {
        r.notes.push_back(m.snapshot + ": the manifest records no checksum of it; its bytes were not verified");
      }
      try {
        const SnapshotInfo si = inspect_snapshot(path);
        if (si.seq != m.seq || si.dim != m.dim || si.metric != m.metric) {
          damage(m.snapshot, detail::concat("holds seq ", si.seq, ", dim ", si.dim, ", metric ", to_string(si.metric),
                                            " but the manifest says seq ", m.seq, ", dim ", m.dim, ", metric ",
                                            to_string(m.metric), " (a file was replaced or the manifest edited)"));
          ok = false;
        }
        if (ok)
          r.checked.push_back(detail::concat(m.snapshot, ": ", bytes, " bytes",
                                             m.snapshot_bytes >= 0 ? ", CRC-32C " + hex32(m.snapshot_crc32c) + " as recorded" : "",
                                             "; seq ", si.seq, ", ", si.rows, " rows, dim ", si.dim, ", ",
                                             to_string(si.dtype)));
      } catch (const Error& e) {
        damage(m.snapshot, detail::concat("cannot be read as a snapshot: ", e.what()));
      }
    }
  }

  // Other snapshots: older ones kept by retention must be whole; later ones were never committed.
  for (const auto& [s, n] : l.snapshots) {
    if (have && n == m.snapshot) continue;
    if (!have) {
      r.notes.push_back(n + ": not checked: no readable manifest names it (a start-up refuses the directory and "
                            "removes nothing; keep it)");
      continue;
    }
    if (m.snapshot.empty() || s >= m.seq) {
      r.notes.push_back(n + ": not named by the manifest (never committed, or superseded): a start-up removes it");
      continue;
    }
    try {
      const SnapshotInfo si = inspect_snapshot(dir + "/" + n);
      if (si.seq != s || si.dim != m.dim || si.metric != m.metric)
        damage(n, detail::concat("an older snapshot holding seq ", si.seq, ", dim ", si.dim, ", metric ",
                                 to_string(si.metric), ", not what its name and the manifest say (seq ", s, ", dim ",
                                 m.dim, ", metric ", to_string(m.metric), ")"));
      else
        r.checked.push_back(detail::concat(n, ": older snapshot, seq ", si.seq, ", ", si.rows,
                                           " rows (no checksum is recorded for it)"));
    } catch (const Error& e) {
      damage(n, detail::concat("an older snapshot that cannot be read: ", e.what()));
    }
  }
  for (const std::string& t : l.temps) r.notes.push_back(t + ": temporary file of an interrupted write: a start-up removes it");

  // Every record of every segment, and the seqs from the snapshot on without a gap.
  const std::uint64_t S = have ? m.seq : 0;
  const std::uint64_t anchor = oldest_kept(l, S, have && !m.snapshot.empty());
  std::uint64_t log_end = S;  // the last seq of the log after the snapshot, as far as it is known
  bool log_started = false, log_known = true;
  std::uint64_t chain_end = anchor;  // the same for the log retained for older snapshots
  bool chain_known = true;
  for (std::size_t i = 0; i < l.segments.size(); ++i) {
    const auto& [first, name] = l.segments[i];
    const bool is_last = i + 1 == l.segments.size();
    const std::string path = dir + "/" + name;
    const std::uint64_t size = file_size(path);
    SegmentScan scan;
    bool scanned = false;
    std::string error;
    {
      MappedFile map(path, size);
      SegmentHeader h;
      if (is_last && size <= kSegmentHeaderBytes && !decode_segment_header(map.data(), size, &h).empty()) {
        r.problems.push_back({StorageProblem::Kind::kTornTail, name,
                              detail::concat("a segment whose creation was cut short (", size,
                                             " bytes, no whole header): a start-up removes it")});
        continue;
      }
      try {
        // Every record's values too: what a start-up's replay would refuse is damage here.
        scan = scan_segment(path, map.data(), size, is_last,
                            [&](const RecordHeader&, const WalRecord& rec, std::uint64_t off) {
                              check_record_values(rec, detail::concat("log segment '", path, "' at offset ", off));
                            });
        scanned = true;
      } catch (const Error& e) {
        error = e.what();
      }
    }
    const std::uint64_t last = scanned ? scan.last_seq : (is_last ? first - 1 : l.segments[i + 1].first - 1);
    const std::uint64_t ends = is_last ? last : l.segments[i + 1].first - 1;
    // A start-up reads the last segment whatever it holds: damage in it is never superseded.
    const std::string role = !scanned && is_last ? "log" : segment_role(std::max(ends, first - 1), first, is_last, S, anchor);
    if (!scanned) {
      if (role == "superseded")
        r.notes.push_back(name + ": damaged, but every record in it is in the snapshot, and a start-up removes it "
                                 "unread: " + error);
      else
        damage(name, error);
      (role == "log" ? log_known : chain_known) = false;
      continue;
    }
    if (scan.header.first_seq != first)
      damage(name, detail::concat("its header says first seq ", scan.header.first_seq, ", its name says ", first));
    if (have && scan.header.dim != static_cast<std::uint32_t>(m.dim))
      damage(name, detail::concat("holds rows of dim ", scan.header.dim, ", the manifest's dim is ", m.dim));
    if (scan.end < size)
      r.problems.push_back({StorageProblem::Kind::kTornTail, name,
                            detail::concat("a start-up cuts ", size - scan.end, " bytes at offset ", scan.end, " (",
                                           scan.tail_reason, "): ", scan.tail_records, " record(s) from seq ",
                                           scan.last_seq + 1, " (after a crash: never acknowledged)")});
    if (role == "superseded") {
      r.notes.push_back(name + ": every record in it is in the snapshot: a start-up removes it");
      continue;
    }
    if (role == "log") {
      if (!log_started && first > S + 1)
        damage(name, detail::concat("records ", S + 1, " .. ", first - 1, " are missing: the snapshot ends at seq ", S,
                                    ", the log starts at seq ", first, " (a start-up refuses the directory)"));
      else if (log_started && log_known && first != log_end + 1)
        damage(name, detail::concat("starts at seq ", first, " but the previous segment ends at seq ", log_end,
                                    " (a segment is missing or damaged; a start-up refuses the directory)"));
      log_started = true;
      log_known = true;
      log_end = std::max(log_end, scan.last_seq);
    } else if (chain_known && first > chain_end + 1) {
      r.notes.push_back(detail::concat(name, ": records ", chain_end + 1, " .. ", first - 1,
                                       " are not in the log kept for the older snapshots: the state cannot be rebuilt "
                                       "from an older snapshot (the current snapshot is not affected)"));
    }
    if (role != "log") {
      chain_known = true;
      chain_end = std::max(chain_end, scan.last_seq);
    }
    r.checked.push_back(detail::concat(name, ": ", scan.records, " record(s)",
                                       scan.records > 0 ? detail::concat(", seq ", first, " .. ", scan.last_seq) : "",
                                       ", ", scan.end, " bytes, every checksum ok",
                                       role == "retained" ? " (kept for an older snapshot)" : ""));
  }

  // Records the log had reached at the last clean close or snapshot were acknowledged: a log
  // that ends before that lost some (a segment cut short or removed after the fact).
  if (have && log_known && m.log_seq > log_end)
    damage(l.segments.empty() ? "" : l.segments.back().second,
           detail::concat("the log ends at seq ", log_end, " but had reached seq ", m.log_seq,
                          " when the directory was last closed or snapshotted: ", m.log_seq - log_end,
                          " acknowledged record(s), seq ", log_end + 1, " .. ", m.log_seq,
                          ", are missing (restore the segment from a backup)"));

  // Without a snapshot, the log's records apply to the corpus file the manifest identifies.
  if (have && m.snapshot.empty() && m.corpus_bytes >= 0) {
    const std::string file = corpus.empty() ? m.corpus_path : corpus;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) {
      r.notes.push_back("corpus file '" + file + "' not found here: its identity was not checked (" +
                        (corpus.empty() ? "give the file with --corpus" : "check the path") + ")");
    } else {
      const std::uint64_t bytes = file_size(file);
      const std::uint32_t crc = corpus_sample_crc32c(file, bytes);
      if (static_cast<std::uint64_t>(m.corpus_bytes) == bytes && crc == m.corpus_sample_crc32c)
        r.checked.push_back(detail::concat("corpus '", file, "': ", bytes, " bytes, sample CRC-32C ", hex32(crc),
                                           " as recorded"));
      else if (log_end > S)
        damage("", detail::concat("the log's records were written against corpus '", m.corpus_path, "' (",
                                  m.corpus_bytes, " bytes, sample CRC-32C ", hex32(m.corpus_sample_crc32c), "), but '",
                                  file, "' is another file (", bytes, " bytes, sample CRC-32C ", hex32(crc),
                                  "): a start-up with it refuses the directory"));
      else
        r.notes.push_back("corpus '" + file + "' is not the file the manifest records, but the log holds no "
                          "records: a start-up with it records it instead");
    }
  } else if (!corpus.empty() && have && !m.snapshot.empty()) {
    r.notes.push_back("the base is snapshot " + m.snapshot + ": the corpus file is not read (--corpus not checked)");
  }
  return r;
}

}  // namespace

}  // namespace shardtopk
