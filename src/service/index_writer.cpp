// WriteBackend over ShardedIndex's updates (the only place the service calls them).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/log.hpp"
#include "service/batcher.hpp"
#include "service/search_backend.hpp"
#include "service/write_backend.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/storage.hpp"

namespace shardtopk::service {
namespace {

using nlohmann::json;

int status_of(const WriteError& e) {
  switch (e.kind()) {
    case WriteError::Kind::kReadOnly: return 409;
    case WriteError::Kind::kCapacity: return 507;
    case WriteError::Kind::kInvalid: return 400;
  }
  return 400;
}

/// Whether a failure's reason is a full device (or quota) under storage.dir: the system's own
/// text, which the storage layer and HDF5's error stack carry.
bool out_of_space(const std::string& reason) {
  return reason.find(std::strerror(ENOSPC)) != std::string::npos || reason.find(std::strerror(EDQUOT)) != std::string::npos;
}

/// Whether a failure is the write-ahead log's earlier one: storage refuses every write and
/// snapshot after a log error until the directory is reopened (docs/STORAGE.md, "Errors").
bool after_log_error(const std::string& reason) { return reason.find(kAfterLogError) != std::string::npos; }

/// The status of a failed write or snapshot whose reason is not the client's: 507 (Insufficient
/// Storage) when the device is full now, 500 otherwise (an earlier log error included).
int failure_status(const std::string& reason) { return out_of_space(reason) && !after_log_error(reason) ? 507 : 500; }

/// A failure's message: what failed, that the device is full where it is, and, when the reason
/// names a file in storage.dir, that file relative to it. The reason itself (absolute paths,
/// library calls) goes to the log only.
std::string internal_error(const std::string& what, const std::string& reason, const std::string& dir) {
  spdlog::error("{} failed: {}", what, reason);
  if (after_log_error(reason))
    return what + " refused: the write-ahead log failed earlier (" +
           (out_of_space(reason) ? "no space left on storage.dir's device" : "an I/O error") +
           "); writes are refused until the service restarts, which recovers the log (rank 0's log has the reason)";
  std::string file;
  if (!dir.empty()) {
    const std::string prefix = dir.back() == '/' ? dir : dir + "/";
    const auto at = reason.find(prefix);
    if (at != std::string::npos) {
      const auto b = at + prefix.size();
      file = reason.substr(b, reason.find_first_of("'\" ,;:)\n", b) - b);
    }
  }
  const std::string where = file.empty() ? "" : " at '" + file + "' in storage.dir";
  if (out_of_space(reason))
    return what + " failed: no space left on storage.dir's device" + where +
           " (free space there, or raise the quota; rank 0's log has the reason)";
  return what + " failed: internal error" + where + " (rank 0's log has the reason)";
}

/// A path under storage.dir as relative to it (as given when it is elsewhere).
std::string relative_to(const std::string& path, const std::string& dir) {
  const std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  return !prefix.empty() && path.compare(0, prefix.size(), prefix) == 0 ? path.substr(prefix.size()) : path;
}

class IndexWriter final : public WriteBackend {
 public:
  explicit IndexWriter(ShardedIndex& index) : index_(index), info_(index.info()) {}

  bool writable() const override { return info_.writable; }
  std::int64_t dim() const override { return info_.dim; }
  const AttributeSchema& schema() const override { return info_.schema; }

  void upsert(const UpsertBody& b, Job& j) override {
    run(j, "upsert", [&] {
      UpsertRows rows;
      rows.rows = b.rows;
      rows.ids = b.ids.data();
      rows.vectors = b.vectors.data();
      for (const AttributeColumn& c : b.columns)
        rows.attributes.push_back(AttributeColumnView{
            c.name, c.type, c.type == AttributeType::kInt64 ? static_cast<const void*>(c.ints.data()) : c.reals.data()});
      const WriteResult r = index_.submit_upsert(rows);
      record(j, r.rows, r.seq);
      return json{{"upserted", r.rows}, {"seq", r.seq}}.dump();
    });
  }

  void remove(const DeleteBody& b, Job& j) override {
    run(j, "delete", [&] {
      const WriteResult r = b.by_filter ? index_.remove_matching(b.filter)
                                        : index_.submit_remove(b.ids.data(), static_cast<std::int64_t>(b.ids.size()));
      record(j, r.rows, r.seq);
      return json{{"deleted", r.rows}, {"seq", r.seq}}.dump();
    });
  }

  // A snapshot is written while searches go on: its job waits for the snapshot that starts
  // after it (one already running holds an older state) and is answered by background().
  void snapshot(Job& j) override {
    WriteJob& w = std::get<WriteJob>(j.work);
    waiting_start_.push_back(&j);
    if (!index_.snapshot_running()) {
      try {
        start_for_waiting();
      } catch (const CommError& e) {
        throw RankLost(e.what());
      }
    }
    if (!w.ready) {
      j.status = 200;
      w.deferred = true;
    }
  }

  int background() override {
    try {
      if (!index_.snapshot_running()) {
        if (waiting_start_.empty()) return 0;
        start_for_waiting();
        return 1;
      }
      const SnapshotProgress p = index_.snapshot_step();
      if (p.done || !p.failed.empty()) {
        for (Job* j : waiting_done_) {
          WriteJob& w = std::get<WriteJob>(j->work);
          if (p.done) {
            record(*j, p.done->rows, p.done->seq);
            w.body = answer(*p.done);
            j->status = 200;
          } else {
            j->status = failure_status(p.failed);
            j->error = internal_error("snapshot", p.failed, dir());
          }
          w.ready = true;
        }
        waiting_done_.clear();
      }
      if (!p.running) return waiting_start_.empty() ? 0 : 1;
      return p.progressed ? 1 : 2;
    } catch (const CommError& e) {
      throw RankLost(e.what());
    } catch (const std::exception& e) {  // a rank could not read its rows: the run is dropped
      for (Job* j : waiting_done_) {
        j->status = failure_status(e.what());
        j->error = internal_error("snapshot", e.what(), dir());
        std::get<WriteJob>(j->work).ready = true;
      }
      waiting_done_.clear();
      return waiting_start_.empty() ? 0 : 1;
    }
  }

  void commit() override {
    try {
      index_.apply_writes();
    } catch (const CommError& e) {
      throw RankLost(e.what());
    } catch (const std::exception& e) {
      throw Error(internal_error("the log write", e.what(), dir()));
    }
  }

  std::int64_t live_rows() const override { return index_.update_stats().live_rows; }

  void after_commit() override {
    try {
      index_.start_snapshot_if_due();
    } catch (const CommError& e) {
      throw RankLost(e.what());
    }
  }

  std::string metrics() const override {
    const UpdateStats s = index_.update_stats();
    std::string out;
    auto gauge = [&](const char* name, const char* help, double v) {
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " +
             json(v).dump() + "\n";
    };
    gauge("shardtopk_writable", "1 when the index accepts writes (storage.dir set).", s.writable ? 1 : 0);
    gauge("shardtopk_live_rows", "Rows a search can return, all ranks.", static_cast<double>(s.live_rows));
    gauge("shardtopk_capacity_rows", "Row slots reserved on all ranks (storage.capacity_rows x ranks).",
          static_cast<double>(s.capacity_rows));
    gauge("shardtopk_tombstones", "Slots freed by deletes and not reused yet (still scanned).",
          static_cast<double>(s.tombstones));
    gauge("shardtopk_applied_seq", "Sequence number of the last write visible to searches.",
          static_cast<double>(s.applied_seq));
    gauge("shardtopk_snapshot_seq", "Sequence number of the base snapshot (0: the configured corpus).",
          static_cast<double>(s.snapshot_seq));
    gauge("shardtopk_log_bytes", "Bytes of the write-ahead log's segments.", static_cast<double>(s.log_bytes));
    gauge("shardtopk_log_records", "Log records after the base snapshot.", static_cast<double>(s.log_records));
    return out;
  }

  std::string info_fields() const override {
    const UpdateStats s = index_.update_stats();
    const json j{{"writable", s.writable},       {"capacity_rows", s.capacity_rows}, {"live_rows", s.live_rows},
                 {"applied_seq", s.applied_seq}, {"snapshot_seq", s.snapshot_seq}};
    const std::string t = j.dump();
    return t.substr(1, t.size() - 2);
  }

 private:
  const std::string& dir() const { return info_.storage_dir; }

  static std::string answer(const SnapshotResult& r, const std::string& dir) {
    return json{{"path", relative_to(r.path, dir)}, {"seq", r.seq}, {"rows", r.rows}}.dump();
  }
  std::string answer(const SnapshotResult& r) const { return answer(r, dir()); }

  // Starts the snapshot the jobs in waiting_start_ wait for (none running): answers them at once
  // when nothing is new or it cannot start, else they wait for it in waiting_done_.
  void start_for_waiting() {
    std::vector<Job*> jobs;
    jobs.swap(waiting_start_);
    std::optional<SnapshotResult> now;
    int status = 200;
    std::string error;
    try {
      now = index_.start_snapshot();
    } catch (const WriteError& e) {
      status = status_of(e);
      error = e.what();
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      status = failure_status(e.what());
      error = internal_error("snapshot", e.what(), dir());
    }
    for (Job* j : jobs) {
      WriteJob& w = std::get<WriteJob>(j->work);
      if (status == 200 && !now) {
        waiting_done_.push_back(j);
        continue;
      }
      j->status = status;
      j->error = error;
      if (now) {
        record(*j, now->rows, now->seq);
        w.body = answer(*now);
      }
      w.ready = true;
    }
  }

  // The rows and seq of an answered write, for the audit log.
  static void record(Job& j, std::int64_t rows, std::uint64_t seq) {
    WriteJob& w = std::get<WriteJob>(j.work);
    w.rows = rows;
    w.seq = static_cast<std::int64_t>(seq);
  }

  template <typename F>
  void run(Job& j, const char* what, F&& f) {
    try {
      std::get<WriteJob>(j.work).body = f();
      j.status = 200;
    } catch (const WriteError& e) {
      j.status = status_of(e);
      j.error = e.what();
    } catch (const CommError& e) {
      throw RankLost(e.what());
    } catch (const std::exception& e) {
      j.status = failure_status(e.what());
      j.error = internal_error(what, e.what(), dir());
    }
  }

  ShardedIndex& index_;
  const IndexInfo info_;  // fixed once the index is ready
  // Snapshot jobs (the batcher keeps them until they are ready): waiting for a snapshot to
  // start, and waiting for the running one to be committed.
  std::vector<Job*> waiting_start_, waiting_done_;
};

}  // namespace

std::unique_ptr<WriteBackend> make_index_writer(ShardedIndex& index) { return std::make_unique<IndexWriter>(index); }

}  // namespace shardtopk::service
