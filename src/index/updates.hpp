#pragma once
// The state of an updatable ShardedIndex (src/index/updates.cpp). Internal header.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "index/row_directory.hpp"
#include "index/write_ops.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/storage.hpp"

namespace shardtopk {

struct ShardedIndex::Updates {
  // ---- every rank
  std::vector<std::int64_t> capacities;  // [ranks] slots per rank
  std::int64_t capacity_total = 0;
  std::vector<std::uint8_t> live;        // [this rank's slots] 1: live
  bool replay_done = false;              // followers: the start-up replay is over

  // ---- rank 0
  std::unique_ptr<Storage> storage;
  std::unique_ptr<RowDirectory> dir;     // the state after every submitted write
  std::vector<WriteOp> pending;          // submitted, not yet applied, in seq order
  std::size_t pending_bytes = 0;
  std::uint64_t submitted_seq = 0;       // seq of the last submitted write (or the base's)
  std::string failure;                   // set when the log failed with writes pending
  std::int64_t auto_snapshot_after_bytes = 0;  // a failed automatic snapshot: retry past this log size

  // counters for update_stats (any thread)
  std::atomic<std::uint64_t> applied_seq{0};
  std::atomic<std::int64_t> live_rows{0}, tombstones{0};
};

}  // namespace shardtopk
