#pragma once
// What a ShardedIndex is made of: the search protocol, the admission of batches and the update
// coordinator, built in one go by the loaders (load.cpp). IndexAccess is the way in for the
// library's loaders, its tests and its benchmarks; the product's callers use index.hpp only.
// Internal header.
#include <memory>
#include <vector>

#include "index/search_protocol.hpp"
#include "index/update_coordinator.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/search_batch.hpp"

namespace shardtopk {

struct ShardedIndex::Impl {
  /// Collective over host_comm (SearchProtocol's construction): the data path's buffers; the
  /// index is read-only until enable_updates(), and takes batches once finish() has run.
  /// `stats`: what start-up measured (read times, the corpus's norm bound); completed here with
  /// the corpus rows, this rank's rows, dim and the resident bytes.
  Impl(const Config& cfg, Metric metric, std::int64_t total_rows, RowRange rows, AttributeSchema schema,
       IngestStats stats, std::unique_ptr<Space> space, std::unique_ptr<Engine> engine,
       std::unique_ptr<Communicator> host_comm, std::unique_ptr<Communicator> data_comm);

  /// Collective: UpdateCoordinator::enable_updates (the log is replayed).
  void enable_updates(std::unique_ptr<Storage> storage, std::uint64_t base_seq) {
    updates.enable_updates(std::move(storage), base_seq);
  }
  /// The last step of construction: the admission, against the limits as they now are.
  void finish();

  const Config cfg;
  const Metric metric;
  const AttributeSchema schema;
  IngestStats stats;  // the start-up facts; the norm bound as of now is the admission's
  SearchProtocol protocol;
  UpdateCoordinator updates;
  std::unique_ptr<Admission> admission;
};

/// Tests' and benchmarks' access to an index's parts (and the loaders' to its construction).
struct IndexAccess {
  static ShardedIndex::Impl& impl(ShardedIndex& index) { return *index.impl_; }
  static SearchProtocol& protocol(ShardedIndex& index) { return index.impl_->protocol; }

  /// An index from parts already built: the caller's engine, space and communicators (tests of
  /// the protocol over a hand-made engine). Collective; read-only.
  static std::unique_ptr<ShardedIndex> from_parts(const Config& cfg, Metric metric, std::int64_t total_rows,
                                                  RowRange rows, std::unique_ptr<Space> space,
                                                  std::unique_ptr<Engine> engine,
                                                  std::unique_ptr<Communicator> host_comm,
                                                  std::unique_ptr<Communicator> data_comm = nullptr);

  /// This rank's local candidates of the last search [batch, k] (copied to the host), for tests
  /// that check each rank's candidates come from its own rows.
  static std::vector<Candidate> last_local_candidates(ShardedIndex& index) {
    return index.impl_->protocol.last_local_candidates();
  }
  /// Host↔device bytes moved by this rank's data path (queries in, answers out), plus the
  /// engine's batched fallbacks.
  static TransferCounters transfer_counters(ShardedIndex& index) { return index.impl_->protocol.transfer_counters(); }
  static void reset_transfer_counters(ShardedIndex& index) { index.impl_->protocol.reset_transfer_counters(); }
  /// Searches run on this rank (successful or not).
  static long searches(ShardedIndex& index) { return index.impl_->protocol.searches(); }
};

}  // namespace shardtopk
