#pragma once
// What the service needs to change the index: upserts, deletes and snapshots run on the index
// thread (as Batcher jobs), a commit that makes the group of writes just submitted durable and
// visible, and the counters for /metrics and /v1/info. index_writer.cpp adapts ShardedIndex.
#include <cstdint>
#include <memory>
#include <string>

#include "service/write_parse.hpp"

namespace shardtopk {
class ShardedIndex;
}

namespace shardtopk::service {

struct Job;

class WriteBackend {
 public:
  virtual ~WriteBackend() = default;

  /// False for a read-only index (storage.dir empty): every write route answers 409.
  virtual bool writable() const = 0;
  virtual std::int64_t dim() const = 0;
  virtual const AttributeSchema& schema() const = 0;

  /// Index thread. Each sets job.status and job.body: 200 with the JSON answer, or 400 (bad
  /// input), 409 (read-only), 507 (capacity exhausted), 500 (the log or a file failed) with
  /// job.error. A 500's error is short: what failed and the file relative to storage.dir; the
  /// full reason goes to rank 0's log (absolute paths and library calls are not for clients).
  /// upsert and delete by ids are only submitted here (durable and visible after commit());
  /// a delete by filter completes here (it applies what was submitted before it first); a
  /// snapshot takes its view here (the same) and is written by background(), which answers it.
  /// @throws RankLost when a rank is gone.
  virtual void upsert(const UpsertBody& body, Job& job) = 0;
  virtual void remove(const DeleteBody& body, Job& job) = 0;
  virtual void snapshot(Job& job) = 0;

  /// Index thread: waits until every submitted write is durable, then applies them on every
  /// rank (one group commit and one step between searches for a group of requests).
  /// @throws RankLost when a rank is gone; Error when the log failed (the writes' fate is
  ///   unknown until a restart: answer 500), with a short message as a 500's (above).
  virtual void commit() = 0;

  /// Index thread, after a committed group has been answered: the snapshot policy
  /// (storage.snapshot_log_bytes, storage.snapshot_interval_s), which starts a snapshot written
  /// by background(). A failed snapshot is logged, never thrown. @throws RankLost when a rank is gone.
  virtual void after_commit() {}

  /// Index thread, between batches: one step of a snapshot being written (snapshot() defers
  /// its job to it: WriteJob::deferred, then ready once answered). Returns as
  /// Batcher::Options::background: 0 nothing left, 1 progress, 2 waiting for the file writer.
  /// @throws RankLost when a rank is gone.
  virtual int background() { return 0; }

  /// Rows a search can return now, all ranks (any thread).
  virtual std::int64_t live_rows() const = 0;
  /// Prometheus lines (any thread): live rows, tombstones, capacity, log bytes, seqs.
  virtual std::string metrics() const = 0;
  /// Fields for /v1/info (any thread), as a JSON object's members without braces.
  virtual std::string info_fields() const = 0;
};

/// The index must outlive the writer; writes run on rank 0's MPI thread.
std::unique_ptr<WriteBackend> make_index_writer(ShardedIndex& index);

}  // namespace shardtopk::service
