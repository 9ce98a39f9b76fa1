// ShardedIndex: the facade over one rank's search protocol, batch admission and update
// coordinator (index_impl.hpp). Each call goes to the part that owns it.
#include "shardtopk/index.hpp"

#include <algorithm>

#include "index/index_impl.hpp"
#include "shardtopk/filter.hpp"
#include <nlohmann/json.hpp>

namespace shardtopk {

// ------------------------------------------------------------------------------ construction

ShardedIndex::Impl::Impl(const Config& cfg_in, Metric metric_in, std::int64_t total_rows, RowRange rows,
                         AttributeSchema schema_in, IngestStats stats_in, std::unique_ptr<Space> space,
                         std::unique_ptr<Engine> engine, std::unique_ptr<Communicator> host_comm,
                         std::unique_ptr<Communicator> data_comm)
    : cfg(cfg_in),
      metric(metric_in),
      schema(std::move(schema_in)),
      stats(stats_in),
      protocol(cfg_in, metric_in, rows, schema, std::move(space), std::move(engine), std::move(host_comm),
               std::move(data_comm)),
      updates(cfg, metric, schema,
              [&] {  // the start-up facts, completed from the protocol's
                stats.total_rows = total_rows;
                stats.rows = rows;
                stats.dim = protocol.dim();
                stats.engine_resident_bytes = protocol.resident_bytes();
                return stats;
              }(),
              protocol) {
  protocol.set_update_steps(&updates);
}

void ShardedIndex::Impl::finish() {
  SearchLimits l;
  l.dim = stats.dim;
  l.metric = metric;
  l.k_max = cfg.search.k_max;
  l.k_rows = updates.k_limit_rows();
  l.batch_max = cfg.search.batch_max;
  l.max_filters = std::min(cfg.search.max_filters, cfg.search.batch_max);
  l.schema = schema;
  l.device_queries = protocol.space().kind() == MemSpace::kDevice;
  l.max_row_norm = updates.norm_bound().max_row_norm;  // after the replay's writes
  l.max_row_norm_row = updates.norm_bound().max_row_norm_row;
  admission = std::make_unique<Admission>(std::move(l));
  updates.set_admission(admission.get());
  protocol.set_admission(admission.get());
}

std::unique_ptr<ShardedIndex> IndexAccess::from_parts(const Config& cfg, Metric metric, std::int64_t total_rows,
                                                      RowRange rows, std::unique_ptr<Space> space,
                                                      std::unique_ptr<Engine> engine,
                                                      std::unique_ptr<Communicator> host_comm,
                                                      std::unique_ptr<Communicator> data_comm) {
  auto impl = std::make_unique<ShardedIndex::Impl>(cfg, metric, total_rows, rows, AttributeSchema{}, IngestStats{},
                                                   std::move(space), std::move(engine), std::move(host_comm),
                                                   std::move(data_comm));
  impl->finish();
  return std::make_unique<ShardedIndex>(std::move(impl));
}

ShardedIndex::ShardedIndex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  SHARDTOPK_ASSERT(impl_ && impl_->admission, "ShardedIndex: an index is made complete (load_index, build_index)");
}

ShardedIndex::~ShardedIndex() = default;

IndexInfo ShardedIndex::info() const {
  const Impl& m = *impl_;
  SearchProtocol& p = impl_->protocol;
  const SearchLimits l = m.admission->limits();
  IndexInfo i;
  i.rank = p.rank();
  i.world_size = p.world_size();
  i.local_ranks = p.host().local_size();
  i.metric = m.metric;
  i.rows = m.stats.total_rows;
  i.dim = m.stats.dim;
  i.k_max = l.k_max;
  i.k_rows = l.k_rows;
  i.batch_max = l.batch_max;
  i.max_filters = l.max_filters;
  i.schema = m.schema;
  i.writable = m.updates.writable();
  i.storage_dir = m.cfg.storage.dir;
  i.engine = p.engine().info();
  i.comm = p.data().name();
  i.ingest = m.stats;
  i.ingest.max_row_norm = l.max_row_norm;
  i.ingest.max_row_norm_row = l.max_row_norm_row;
  return i;
}

// ------------------------------------------------------------------------------ search

SearchBatch ShardedIndex::admit(const float* queries, int batch, long long k,
                                const FilterProgram* const* filters) const {
  return impl_->admission->admit(queries, batch, k, filters);
}

SearchBatch ShardedIndex::admit(const float* queries, int batch, long long k, const FilterProgram* const* filters,
                                const QueryBounds* bounds, bool stats) const {
  return impl_->admission->admit(queries, batch, k, filters, bounds, stats);
}

SearchBatch ShardedIndex::admit_device(const float* d_queries, void* cuda_stream, int batch, long long k,
                                       const FilterProgram* const* filters) const {
  return impl_->admission->admit_device(d_queries, cuda_stream, batch, k, filters);
}

void ShardedIndex::search(const SearchBatch& batch, std::int64_t* ids, float* scores, std::int32_t* counts,
                          QueryStats* stats) {
  impl_->protocol.search(batch, ids, scores, counts, stats);
}

// Two searches: the ids' own scores (one query, filter ids_in, k = the distinct ids), then one
// count query per id, bounded by (its score, its id), under the caller's filter.
void ShardedIndex::rank(const float* query, const std::int64_t* ids, int n, const FilterProgram* filter,
                        std::int64_t* ranks, float* scores) {
  SearchProtocol& p = impl_->protocol;
  if (p.rank() != 0) {
    p.follow_one(/*lock_step=*/true);
    p.follow_one(/*lock_step=*/true);
    return;
  }
  const SearchLimits lim = impl_->admission->limits();
  std::vector<std::int64_t> distinct;
  std::vector<float> found_scores;
  try {
    const int n_max = std::min(lim.batch_max, lim.k_max);
    SHARDTOPK_EXPECTS(n >= 1 && n <= n_max, "ids: ", n, " ids out of range: allowed 1 .. ", n_max,
                      " (search.batch_max and search.k_max)");
    SHARDTOPK_EXPECTS(ids != nullptr && ranks != nullptr && scores != nullptr, "rank: null ids or output");
    distinct.assign(ids, ids + n);
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    const FilterProgram own = compile_filter(nlohmann::json{{"ids_in", distinct}}, lim.schema);
    const FilterProgram* f = &own;
    const int k = static_cast<int>(distinct.size());
    const SearchBatch b = impl_->admission->admit(query, 1, std::min<std::int64_t>(k, lim.k_rows), &f);
    std::vector<std::int64_t> got(static_cast<std::size_t>(b.k()));
    found_scores.resize(got.size());
    p.search(b, got.data(), found_scores.data(), nullptr);
    for (int i = 0; i < n; ++i) {
      // kPadId pads a list shorter than k: it is no row's id
      const auto at = ids[i] == kPadId ? got.end() : std::find(got.begin(), got.end(), ids[i]);
      SHARDTOPK_EXPECTS(at != got.end(), "ids: unknown id ", ids[i], " (no live row has it)");
      scores[i] = found_scores[static_cast<std::size_t>(at - got.begin())];
    }
  } catch (const Error&) {
    p.reject();  // lock-step followers wait for a second step
    throw;
  }
  std::vector<float> repeated(static_cast<std::size_t>(n) * static_cast<std::size_t>(lim.dim));
  std::vector<QueryBounds> bounds(static_cast<std::size_t>(n));
  std::vector<const FilterProgram*> filters(static_cast<std::size_t>(n), filter);
  for (int i = 0; i < n; ++i) {
    std::copy(query, query + lim.dim, repeated.begin() + static_cast<std::ptrdiff_t>(i) * lim.dim);
    QueryBounds& q = bounds[static_cast<std::size_t>(i)];
    q.has_bound = true;
    q.bound = scores[i];
    q.bound_id = ids[i];
  }
  SearchBatch b;
  try {
    b = impl_->admission->admit(repeated.data(), n, 1, filters.data(), bounds.data(), true);
  } catch (const Error&) {
    p.reject();
    throw;
  }
  std::vector<std::int64_t> top_ids(static_cast<std::size_t>(n));
  std::vector<float> top_scores(static_cast<std::size_t>(n));
  std::vector<QueryStats> st(static_cast<std::size_t>(n));
  p.search(b, top_ids.data(), top_scores.data(), nullptr, st.data());
  for (int i = 0; i < n; ++i) ranks[i] = 1 + st[static_cast<std::size_t>(i)].total;
}

void ShardedIndex::search(const float* queries, int batch, int k, std::int64_t* ids, float* scores,
                          const FilterProgram* const* filters, std::int32_t* counts) {
  SearchProtocol& p = impl_->protocol;
  if (p.rank() != 0) {
    p.follow_one(/*lock_step=*/true);
    return;
  }
  SHARDTOPK_EXPECTS(!p.shut_down(), "the index was shut down");
  SearchBatch b;
  try {
    // Inner product and L2: staged and uploading first, then checked in that copy, still in the
    // CPU's cache, while the copy runs (a refused batch changes only the staging buffers).
    const float* staged = p.stage_early(queries, batch);
    b = impl_->admission->admit(staged ? staged : queries, batch, k, filters);
  } catch (const Error&) {
    p.reject();  // followers in lock step throw with rank 0; a follow() loop skips the step
    throw;
  }
  p.search(b, ids, scores, counts);
}

void ShardedIndex::search_async(const SearchBatch& batch, std::int64_t* d_ids, float* d_scores) {
  impl_->protocol.search_async(batch, d_ids, d_scores);
}

void ShardedIndex::follow() {
  SearchProtocol& p = impl_->protocol;
  SHARDTOPK_EXPECTS(p.rank() != 0, "follow() is for ranks 1 .. P-1; rank 0 drives the index");
  while (p.follow_one(/*lock_step=*/false)) {
  }
}

void ShardedIndex::shutdown() { impl_->protocol.shutdown(); }

std::vector<RankStats> ShardedIndex::rank_stats() { return impl_->protocol.rank_stats(); }

// ------------------------------------------------------------------------------ updates

WriteResult ShardedIndex::upsert(const UpsertRows& rows) { return impl_->updates.upsert(rows); }

WriteResult ShardedIndex::remove(const std::int64_t* ids, std::int64_t n) { return impl_->updates.remove(ids, n); }

WriteResult ShardedIndex::remove_matching(const FilterProgram& filter) {
  return impl_->updates.remove_matching(filter);
}

SnapshotResult ShardedIndex::snapshot() { return impl_->updates.snapshot(); }

std::optional<SnapshotResult> ShardedIndex::snapshot_if_log_exceeds() {
  return impl_->updates.snapshot_if_log_exceeds();
}

std::optional<SnapshotResult> ShardedIndex::start_snapshot() { return impl_->updates.start_snapshot(); }

bool ShardedIndex::start_snapshot_if_due() { return impl_->updates.start_snapshot_if_due(); }

SnapshotProgress ShardedIndex::snapshot_step() { return impl_->updates.snapshot_step(); }

bool ShardedIndex::snapshot_running() const { return impl_->updates.snapshot_running(); }

WriteResult ShardedIndex::submit_upsert(const UpsertRows& rows) { return impl_->updates.submit_upsert(rows); }

WriteResult ShardedIndex::submit_remove(const std::int64_t* ids, std::int64_t n) {
  return impl_->updates.submit_remove(ids, n);
}

void ShardedIndex::apply_writes() { impl_->updates.apply_writes(); }

UpdateStats ShardedIndex::update_stats() const { return impl_->updates.update_stats(); }

}  // namespace shardtopk
