// The rank protocol of a collective search: one header broadcast per step, then the data path,
// the status each rank reports with its candidates, and the export of rank 0's answer. Batches
// arrive admitted (search_batch.hpp); files, backends and communicator choice live in load.cpp;
// memory in the Space.
#include "index/search_protocol.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/log.hpp"

namespace shardtopk {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// The first 16 bytes a rank sends in the all-gather: whether its local search succeeded.
/// Written only on failure (and reset after the gather), so a successful search costs nothing.
struct RankStatus {
  std::int32_t failed = 0;
  std::int32_t rank = 0;
  std::int64_t reserved = 0;
};
static_assert(sizeof(RankStatus) == sizeof(Candidate), "a rank status travels in a candidate slot");

Candidate status_slot(bool failed, int rank) {
  RankStatus s;
  s.failed = failed ? 1 : 0;
  s.rank = rank;
  Candidate c;
  std::memcpy(static_cast<void*>(&c), &s, sizeof c);
  return c;
}

RankStatus read_status(const Candidate& c) {
  RankStatus s;
  std::memcpy(static_cast<void*>(&s), &c, sizeof s);
  return s;
}

/// The filter bytes of a batch: [int32 n][int32 index[batch]] padded to 8 bytes, then
/// pack_filter_programs's bytes.
std::size_t filter_head_bytes(int batch) { return (4 + 4 * static_cast<std::size_t>(batch) + 7) / 8 * 8; }

#ifdef SHARDTOPK_FAULT_INJECTION
// testing.fault (tests of DESIGN.md invariant 7; fault-injection builds only).
void maybe_inject_fault(const FaultSpec& f, int rank, long batch) {
  if (f.kind == FaultSpec::kNone || f.rank != rank || f.batch != batch) return;
  if (f.kind == FaultSpec::kStall) {
    spdlog::warn("testing.fault {}: rank {} stalls {} s before batch {}", f.text, rank, f.seconds, batch);
    std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
  } else if (f.kind == FaultSpec::kFail) {
    throw Error("testing.fault " + f.text + ": injected local search failure in batch " + std::to_string(batch));
  } else {
    spdlog::warn("testing.fault {}: rank {} exits during batch {}", f.text, rank, batch);
    std::fflush(nullptr);
    std::_Exit(17);
  }
}
#endif

}  // namespace

// ------------------------------------------------------------------------------ export

/// Rank 0's answer: ids and reported scores of the final list (and, on several ranks, every
/// rank's status) written by one kernel into host memory that the device writes directly
/// (mapped pinned memory; plain memory on the host). enqueue() only queues device work: the
/// CUDA engine captures it into its search graph, so it must not keep per-search host state.
/// One rank: the same memory is the direct target, which the CUDA engine's final sort writes
/// itself where it can (no split step).
class SearchProtocol::Exporter final : public SearchEpilogue {
 public:
  Exporter(Space& space, Metric metric, std::size_t max_n, int world) : space_(space), l2_(metric == Metric::kL2) {
    ids_ = static_cast<std::int64_t*>(space.alloc_host(max_n * sizeof(std::int64_t)));
    scores_ = static_cast<float*>(space.alloc_host(max_n * sizeof(float)));
    statuses_ = static_cast<Candidate*>(space.alloc_host(static_cast<std::size_t>(world) * sizeof(Candidate)));
    d_ids_ = static_cast<std::int64_t*>(space.mapped(ids_));
    d_scores_ = static_cast<float*>(space.mapped(scores_));
    d_statuses_ = static_cast<Candidate*>(space.mapped(statuses_));
    direct_ = Direct{d_ids_, d_scores_, l2_};
  }

  const Direct* direct() const override { return &direct_; }

  void enqueue(const Candidate* list, int batch, int k, void* stream) override {
    space_.split(list, static_cast<std::int64_t>(batch) * k, l2_, d_ids_, d_scores_, stream);
  }

  /// The final list of a multi-rank search and the ranks' statuses (each at gathered + r · stride).
  void enqueue_with_status(const Candidate* list, int batch, int k, const Candidate* gathered, std::int64_t stride,
                           int world) {
    Space::StatusCopy st{gathered, stride, world, d_statuses_};
    space_.split(list, static_cast<std::int64_t>(batch) * k, l2_, d_ids_, d_scores_, space_.stream(), &st);
  }

  /// Once the stream has passed the export: the answer [n] and rank r's status.
  void read(std::int64_t n, std::int64_t* ids, float* scores) const {
    if (ids) std::memcpy(ids, ids_, static_cast<std::size_t>(n) * sizeof(std::int64_t));
    if (scores) std::memcpy(scores, scores_, static_cast<std::size_t>(n) * sizeof(float));
  }
  RankStatus status(int r) const { return read_status(statuses_[r]); }

 private:
  Space& space_;
  bool l2_;
  std::int64_t* ids_ = nullptr;  // host views
  float* scores_ = nullptr;
  Candidate* statuses_ = nullptr;
  std::int64_t* d_ids_ = nullptr;  // the same memory as the device addresses it
  float* d_scores_ = nullptr;
  Candidate* d_statuses_ = nullptr;
  Direct direct_;
};

// ------------------------------------------------------------------------------ limits

EngineLimits index_engine_limits(const SearchConfig& search) {
  return EngineLimits{search.batch_max, search.k_max, std::min(search.max_filters, search.batch_max)};
}

std::uint64_t index_buffer_bytes(const SearchConfig& search, int world_size, std::int64_t dim) {
  const std::uint64_t bk = static_cast<std::uint64_t>(search.batch_max) * static_cast<std::uint64_t>(search.k_max);
  const std::uint64_t cand = sizeof(Candidate);
  const std::uint64_t queries = static_cast<std::uint64_t>(search.batch_max) * static_cast<std::uint64_t>(dim) * 4;
  // status, candidates, then QueryCounts (two slots per query)
  const std::uint64_t local = (1 + bk + 2 * static_cast<std::uint64_t>(search.batch_max)) * cand;
  return queries + local + local * static_cast<std::uint64_t>(world_size) + bk * cand +
         static_cast<std::uint64_t>(search.batch_max);
}

// ------------------------------------------------------------------------------ construction

SearchProtocol::SearchProtocol(const Config& cfg, Metric metric, RowRange rows, AttributeSchema schema,
                               std::unique_ptr<Space> space, std::unique_ptr<Engine> engine,
                               std::unique_ptr<Communicator> host_comm, std::unique_ptr<Communicator> data_comm)
    : metric_(metric),
      rows_(rows),
      schema_(std::move(schema)),
      space_(std::move(space)),
      host_(std::move(host_comm)),
      data_(std::move(data_comm)),
      engine_(std::move(engine)) {
  SHARDTOPK_EXPECTS(engine_ && host_ && space_, "ShardedIndex: an engine, a space and a host communicator are required");
  // Checks and allocations may fail on one rank only: the failure travels to every rank.
  bool ok = true;
  std::string msg;
  try {
    init(cfg);
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
  }
  host_->check(ok, msg);
}

void SearchProtocol::init(const Config& cfg) {
  const EngineInfo info = engine_->info();
  SHARDTOPK_EXPECTS(info.metric == metric_, "ShardedIndex: engine metric ", to_string(info.metric),
                    " differs from the index metric ", to_string(metric_));
  SHARDTOPK_EXPECTS(info.rows == rows_.size(), "ShardedIndex: engine holds ", info.rows,
                    " rows but this rank's range has ", rows_.size());
  SHARDTOPK_EXPECTS(info.space == space_->kind(), "ShardedIndex: the engine's memory (", to_string(info.space),
                    ") is not the data path's (", to_string(space_->kind()), ")");
  SHARDTOPK_EXPECTS(cfg.search.batch_max >= 1 && cfg.search.k_max >= 1, "ShardedIndex: bad search limits");
  SHARDTOPK_EXPECTS(engine_->limits().batch_max >= cfg.search.batch_max && engine_->limits().k_max >= cfg.search.k_max,
                    "ShardedIndex: the engine was built for batches of ", engine_->limits().batch_max, " and k_max ",
                    engine_->limits().k_max, ", less than search.batch_max=", cfg.search.batch_max,
                    " / search.k_max=", cfg.search.k_max);
  batch_max_ = cfg.search.batch_max;
  k_max_ = cfg.search.k_max;
  fault_ = cfg.testing.fault;
  dim_ = info.dim;

  const int world = host_->world_size();
  const std::size_t bmax = static_cast<std::size_t>(batch_max_);
  const std::size_t bk = bmax * static_cast<std::size_t>(k_max_);
  const std::size_t qbytes = bmax * static_cast<std::size_t>(dim_) * sizeof(float);
  queries_ = static_cast<float*>(space_->alloc(qbytes));
  // On the host the caller's batch is copied once, straight into the search buffer.
  host_queries_ = space_->kind() == MemSpace::kHost ? queries_ : static_cast<float*>(space_->alloc_host(qbytes));
  const std::size_t block = 1 + bk + 2 * bmax;  // status, candidates, counts
  local_ = static_cast<Candidate*>(space_->alloc(block * sizeof(Candidate)));
  gathered_ = static_cast<Candidate*>(space_->alloc(static_cast<std::size_t>(world) * block * sizeof(Candidate)));
  windows_buf_.resize(bmax);
  counts_host_.resize(bmax);
  merged_ = static_cast<Candidate*>(space_->alloc(bk * sizeof(Candidate)));
  invalid_ = static_cast<std::uint8_t*>(space_->alloc(bmax));
  space_->fill_pad(local_ + 1, static_cast<std::int64_t>(bk));
  space_->fill_pad(gathered_, static_cast<std::int64_t>(world) * static_cast<std::int64_t>(block));
  space_->fill_pad(merged_, static_cast<std::int64_t>(bk));
  set_status(true);  // this rank's status slot, sent with every all-gather, says "ok" from now on
  export_ = std::make_unique<Exporter>(*space_, metric_, bk, world);
  space_->synchronize();
  space_->counters() = {};  // the start-up copies above are not search traffic
  resident_bytes_ = info.resident_bytes + index_buffer_bytes(cfg.search, world, dim_);
}

SearchProtocol::~SearchProtocol() {
  // The data communicator first: NCCL's replayed graphs and registrations refer to the index's
  // buffers and the space's stream, which must outlive them; then the engine, then the space.
  data_.reset();
  engine_.reset();
  export_.reset();
}

TransferCounters SearchProtocol::transfer_counters() const {
  TransferCounters t = space_->counters();
  t.batched_fallbacks += engine_->transfer_counters().batched_fallbacks;
  return t;
}

void SearchProtocol::reset_transfer_counters() {
  space_->counters() = {};
  engine_->reset_transfer_counters();
}

void SearchProtocol::set_status(bool ok) {
  const Candidate c = status_slot(!ok, rank());
  space_->from_host(local_, &c, sizeof c, /*wait=*/true);
}

// ------------------------------------------------------------------------------ rank 0 entry points

void SearchProtocol::search(const SearchBatch& batch, std::int64_t* ids, float* scores, std::int32_t* counts,
                            QueryStats* stats) {
  if (rank() != 0) {
    follow_one(/*lock_step=*/true);
    return;
  }
  start(batch, /*device_answer=*/false);
  const int k = batch.k();
  run_search(batch.size(), k, ids, scores);
  if (stats && stats_) read_stats(batch.size(), k, stats);
  if (counts) {
    // Padding (fewer rows passed a filter, or fewer rows are live, than k) ends a query's row.
    for (int q = 0; q < batch.size(); ++q) {
      int c = 0;
      while (c < k && ids[static_cast<std::size_t>(q) * k + c] != kPadId) ++c;
      counts[q] = c;
    }
  }
}

void SearchProtocol::search_async(const SearchBatch& batch, std::int64_t* d_ids, float* d_scores) {
  SHARDTOPK_EXPECTS(space_->kind() == MemSpace::kDevice, "search_async needs the CUDA engine (engine is ",
                    engine_->info().name, "); use search() with host arrays");
  if (rank() != 0) {
    follow_one(/*lock_step=*/true);
    return;
  }
  device_answer_ = DeviceAnswer{d_ids, d_scores, batch.stream()};
  struct Reset {
    DeviceAnswer& a;
    ~Reset() { a = DeviceAnswer{}; }
  } reset{device_answer_};
  start(batch, /*device_answer=*/true);
  run_search(batch.size(), batch.k(), nullptr, nullptr);
}

// Rank 0 stages the admitted queries (host queries: copied, and for cosine normalised, in the
// staging buffer, then uploaded without a wait; device queries: copied after the caller's work
// and checked, and for cosine normalised, on the device), then broadcasts the step's header and
// the batch's filters. A batch refused here is announced too, so that followers calling in lock
// step throw with rank 0; a follow() loop skips it. The index stays usable.
void SearchProtocol::start(const SearchBatch& batch, bool device_answer) {
  SHARDTOPK_EXPECTS(!shut_down_, "the index was shut down");
  StepHeader h;
  std::string reject;
  try {
    SHARDTOPK_EXPECTS(batch.size() >= 1, "rank 0 passes an admitted batch (ShardedIndex::admit), not an empty one");
    if (admission_) admission_->recheck_norms(batch);
    stage(batch, device_answer);
    h.op = static_cast<std::int32_t>(IndexOp::kSearch);
    h.batch = batch.size();
    h.k = batch.k();
    h.filter_bytes = world_size() > 1 ? encode_filters(batch) : 0;
    h.windows = batch.windows() ? 1 : 0;
    h.stats = batch.wants_stats() ? 1 : 0;
  } catch (const Error& e) {
    h.op = static_cast<std::int32_t>(IndexOp::kRejected);
    reject = e.what();
  }
  host_->broadcast(&h, sizeof h, 0);
  if (h.op != static_cast<std::int32_t>(IndexOp::kSearch)) throw Error(reject);
  if (h.filter_bytes > 0) host_->broadcast(filter_bytes_.data(), filter_bytes_.size(), 0);
  if (h.windows && world_size() > 1)
    host_->broadcast(const_cast<QueryWindow*>(batch.windows()), sizeof(QueryWindow) * static_cast<std::size_t>(h.batch), 0);
  // Rank 0 keeps the programs it admitted; the other ranks rebuild them from the bytes.
  use_filters(batch.filter_programs(), batch.filter_count(), batch.query_program());
  windows_ = batch.windows();
  stats_ = h.stats != 0;
}

void SearchProtocol::stage(const SearchBatch& batch, bool device_answer) {
  const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(batch.size()) * static_cast<std::size_t>(dim_);
  if (!batch.on_device()) {
    SHARDTOPK_EXPECTS(!device_answer, "search_async takes device queries (ShardedIndex::admit_device)");
    // The previous batch's upload must have left the staging buffer (the stream is idle between
    // searches on this path; a refused batch may have left its upload queued).
    const int early = early_staged_;
    early_staged_ = 0;
    if (early == batch.size() && batch.queries() == host_queries_ && metric_ != Metric::kCosine) {
      queries_on_host_ = true;  // staged and queued by stage_early()
      return;
    }
    if (host_queries_ != queries_) space_->synchronize();
    std::memcpy(host_queries_, batch.queries(), bytes);
    // normalize_rows is the arithmetic every engine's prepare_queries uses.
    if (metric_ == Metric::kCosine) normalize_rows(host_queries_, batch.size(), dim_, 0, "query");
    if (host_queries_ != queries_) space_->from_host(queries_, host_queries_, bytes, /*wait=*/false);
    queries_on_host_ = true;
    return;
  }
  SHARDTOPK_ASSERT(space_->kind() == MemSpace::kDevice, "device queries on the ", engine_->info().name, " engine");
  queries_on_host_ = false;
  if (device_answer)
    SHARDTOPK_EXPECTS(device_answer_.ids != nullptr && device_answer_.scores != nullptr,
                      "search_async: null query or answer pointer");
  // Ordered after the caller's work on its stream; no device-wide synchronisation.
  space_->copy(queries_, batch.queries(), bytes, batch.stream());
  // search_async: checked on the device, no host wait (rejected queries are marked); search():
  // a rejected query throws, naming it.
  engine_->prepare_queries(queries_, batch.size(), space_->stream(), device_answer ? invalid_ : nullptr);
}

std::int32_t SearchProtocol::encode_filters(const SearchBatch& batch) {
  filter_bytes_.clear();
  const int n = batch.filter_count();
  if (n == 0) return 0;
  const std::size_t head = filter_head_bytes(batch.size());
  const std::size_t packed = packed_filter_programs_bytes(batch.filter_programs(), n);
  SHARDTOPK_EXPECTS(head + packed <= (std::size_t{1} << 30), "the batch's filters take ", head + packed,
                    " bytes compiled, more than 1 GiB");
  filter_bytes_.assign(head + packed, 0);
  std::memcpy(filter_bytes_.data(), &n, 4);
  std::memcpy(filter_bytes_.data() + 4, batch.query_program(), 4 * static_cast<std::size_t>(batch.size()));
  pack_filter_programs(batch.filter_programs(), n, filter_bytes_.data() + head, packed);
  return static_cast<std::int32_t>(filter_bytes_.size());
}

void SearchProtocol::decode_filters(int batch) {
  programs_.clear();
  program_ptrs_.clear();
  query_program_.clear();
  if (filter_bytes_.empty()) {
    use_filters(nullptr, 0, nullptr);
    return;
  }
  const std::size_t head = filter_head_bytes(batch);
  SHARDTOPK_ASSERT(filter_bytes_.size() >= head + 8);
  std::int32_t n = 0;
  std::memcpy(&n, filter_bytes_.data(), 4);
  const std::uint8_t* packed = filter_bytes_.data() + head;
  const std::size_t packed_size = filter_bytes_.size() - head;
  std::uint64_t count = 0;
  std::memcpy(&count, packed, 8);
  SHARDTOPK_ASSERT(count == static_cast<std::uint64_t>(n));
  programs_.reserve(static_cast<std::size_t>(n));
  for (std::int32_t p = 0; p < n; ++p) {
    std::uint64_t off = 0, end = packed_size;
    std::memcpy(&off, packed + 8 * (1 + p), 8);
    if (p + 1 < n) std::memcpy(&end, packed + 8 * (2 + p), 8);
    SHARDTOPK_ASSERT(off < end && end <= packed_size);
    programs_.push_back(deserialize_filter(packed + off, end - off, schema_));
  }
  for (const FilterProgram& p : programs_) program_ptrs_.push_back(&p);
  query_program_.resize(static_cast<std::size_t>(batch));
  std::memcpy(query_program_.data(), filter_bytes_.data() + 4, 4 * static_cast<std::size_t>(batch));
  for (std::int32_t i : query_program_) SHARDTOPK_ASSERT(i >= -1 && i < n);
  use_filters(program_ptrs_.data(), n, query_program_.data());
}

void SearchProtocol::use_filters(const FilterProgram* const* programs, int count, const std::int32_t* query_program) {
  filters_ = count > 0 ? FilterBatch{programs, count, query_program} : FilterBatch{};
}

const float* SearchProtocol::stage_early(const float* queries, int batch) {
  early_staged_ = 0;
  if (metric_ == Metric::kCosine || queries == nullptr || batch < 1 || batch > batch_max_) return nullptr;
  const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(batch) * static_cast<std::size_t>(dim_);
  // The previous batch's upload must have left the staging buffer (see stage()).
  if (host_queries_ != queries_) space_->synchronize();
  std::memcpy(host_queries_, queries, bytes);
  if (host_queries_ != queries_) space_->from_host(queries_, host_queries_, bytes, /*wait=*/false);
  early_staged_ = batch;
  return host_queries_;
}

void SearchProtocol::reject() {
  early_staged_ = 0;
  StepHeader h;
  h.op = static_cast<std::int32_t>(IndexOp::kRejected);
  host_->broadcast(&h, sizeof h, 0);
}

// ------------------------------------------------------------------------------ the loop

bool SearchProtocol::follow_one(bool lock_step) {
  SHARDTOPK_EXPECTS(!shut_down_, "the index was shut down");
  StepHeader h;
  host_->broadcast_untimed(&h, sizeof h, 0);
  switch (static_cast<IndexOp>(h.op)) {
    case IndexOp::kSearch:
      filter_bytes_.assign(static_cast<std::size_t>(std::max(h.filter_bytes, 0)), 0);
      if (h.filter_bytes > 0) host_->broadcast(filter_bytes_.data(), filter_bytes_.size(), 0);
      decode_filters(h.batch);
      windows_ = nullptr;
      if (h.windows) {
        SHARDTOPK_ASSERT(h.batch >= 1 && h.batch <= batch_max_);
        host_->broadcast(windows_buf_.data(), sizeof(QueryWindow) * static_cast<std::size_t>(h.batch), 0);
        windows_ = windows_buf_.data();
      }
      stats_ = h.stats != 0;
      run_search(h.batch, h.k, nullptr, nullptr);
      return true;
    case IndexOp::kRejected:
      if (lock_step) throw Error("rank 0 rejected the batch or the write");
      return true;
    case IndexOp::kStats: {
      RankStats mine{static_cast<double>(batches_), local_search_s_};
      std::vector<RankStats> all(static_cast<size_t>(world_size()));
      host_->allgather(&mine, all.data(), sizeof mine);
      if (lock_step) throw Error("rank 0 asked for statistics");
      return true;
    }
    case IndexOp::kShutdown:
      shut_down_ = true;
      if (lock_step) throw Error("rank 0 shut the index down");
      return false;
    case IndexOp::kWrite:
    case IndexOp::kSnapshot:
    case IndexOp::kSnapshotBlock:
    case IndexOp::kResolve:
    case IndexOp::kReplayDone:
      SHARDTOPK_ASSERT(updates_, "update step ", h.op, " on a read-only index");
      return updates_->follow_step(h, lock_step);
  }
  // A newer rank 0 than this follower: nothing sensible to do but end the job.
  throw CommError("rank " + std::to_string(rank()) + ": unknown index op " + std::to_string(h.op) + " from rank 0");
}

std::vector<RankStats> SearchProtocol::rank_stats() {
  SHARDTOPK_EXPECTS(rank() == 0 && !shut_down_, "rank_stats() is for rank 0 of a running index");
  StepHeader h;
  h.op = static_cast<std::int32_t>(IndexOp::kStats);
  host_->broadcast(&h, sizeof h, 0);
  RankStats mine{static_cast<double>(batches_), local_search_s_};
  std::vector<RankStats> all(static_cast<size_t>(world_size()));
  host_->allgather(&mine, all.data(), sizeof mine);
  return all;
}

void SearchProtocol::shutdown() {
  if (rank() != 0 || shut_down_) return;
  shut_down_ = true;
  StepHeader h;
  h.op = static_cast<std::int32_t>(IndexOp::kShutdown);
  host_->broadcast(&h, sizeof h, 0);
}

// ------------------------------------------------------------------------------ one search

void SearchProtocol::run_search(int batch, int k, std::int64_t* ids, float* scores) {
  bool ok = true;
  const std::string local_error = run_data_path(batch, k, &ok);
  last_batch_ = batch;
  last_k_ = k;
  if (!ok) spdlog::error("rank {}: local search of batch {} (k={}) failed: {}", rank(), batches_ - 1, k, local_error);
  if (rank() != 0) return;

  // Rank 0: the gathered statuses name the failing ranks.
  const int world = world_size();
  std::vector<int> failed;
  if (world > 1) {
    for (int r = 0; r < world; ++r)
      if (export_->status(r).failed) failed.push_back(r);
  } else if (!ok) {
    failed.push_back(0);
  }
  if (!failed.empty()) {
    std::string text;
    for (int r : failed) {
      text += (text.empty() ? "" : "\n") + std::string("rank ") + std::to_string(r) + ": ";
      text += r == 0 ? local_error : "local search failed (the rank's log has the reason)";
    }
    throw RemoteError(text, !ok);
  }
  if (!device_answer_.ids) export_->read(static_cast<std::int64_t>(batch) * k, ids, scores);
}

void SearchProtocol::local_search(int batch, int k) {
#ifdef SHARDTOPK_FAULT_INJECTION
  maybe_inject_fault(fault_, rank(), batches_);
#endif
  SearchArgs a;
  a.queries = queries_;
  a.batch = batch;
  a.k = k;
  a.out = local_ + 1;
  a.stream = space_->stream();
  a.filters = filters_;
  a.windows = windows_;
  a.counts = stats_ ? reinterpret_cast<QueryCounts*>(local_ + 1 + static_cast<std::int64_t>(batch) * k) : nullptr;
  // One rank: the answer is this search's list; its export rides in the engine's launch (host
  // answers; a device answer goes to the caller's buffers, which change from call to call).
  a.epilogue = world_size() == 1 && !device_answer_.ids ? export_.get() : nullptr;
  engine_->search(a);
}

// The data path of one search, on every rank, in stream order:
//   broadcast queries → engine search → all-gather (status + candidates) → merge → export.
// With the CUDA engine and NCCL (or one GPU rank) every step is only queued on the space's
// stream and the host waits once, at the end, inside the communicator's timeout polling.
// Exceptions: batches of 2 or more wait for the broadcast first (the batched engine path waits
// for its stream once, which must not wait on a collective without a timeout), and the failure
// path. The header broadcast (start / follow_one) stays outside.
//
// Local failures travel in the all-gather payload, not in an extra collective: each rank sends
// [1 + batch · k] slots, its RankStatus first. A successful search leaves the slot as it is
// ("ok", written at construction); a failure writes "failed" before the gather and "ok" again
// after it. Rank 0 reads every rank's status with the answer (the export's status copy).
// Returns this rank's error message ("" and *ok = true on success).
std::string SearchProtocol::run_data_path(int batch, int k, bool* ok) {
  const int world = world_size();
  const std::size_t qbytes = sizeof(float) * static_cast<std::size_t>(batch) * static_cast<std::size_t>(dim_);
  const std::int64_t slots = 1 + static_cast<std::int64_t>(batch) * k + (stats_ ? 2 * batch : 0);
  const std::size_t cbytes = sizeof(Candidate) * static_cast<std::size_t>(slots);
  Communicator& dc = data();
  const bool device = space_->kind() == MemSpace::kDevice;

  // 1. queries from rank 0 to every rank
  if (world > 1) {
    dc.broadcast_async(queries_, qbytes, 0, rank() == 0 && queries_on_host_ ? host_queries_ : nullptr);
    if (batch > 1 && dc.asynchronous()) dc.wait("ncclBroadcast");
  }

  // 2. local top-k; a failure marks this rank's status slot instead of a collective
  *ok = true;
  std::string msg;
  const auto ts = Clock::now();
  try {
    local_search(batch, k);
  } catch (const std::exception& ex) {
    *ok = false;
    msg = ex.what();
  }
  ++batches_;
  local_search_s_ += seconds_since(ts);
  if (!*ok && world > 1) {
    if (dc.asynchronous()) dc.wait("ncclBroadcast");  // failure path: the stream must be idle first
    set_status(false);
  }

  // 3. all-gather [1 + batch · k] slots per rank, merge on rank 0
  const Candidate* final_list = local_ + 1;
  if (world > 1) {
    dc.allgather_async(local_, gathered_, cbytes);
    if (!*ok) {  // failure path only: "ok" again, so that a later search cannot report it
      dc.wait("ncclAllGather");
      set_status(true);
    }
    if (rank() == 0) {
      space_->merge(gathered_ + 1, world, slots, batch, k, merged_);
      final_list = merged_;
    }
  }
  if (rank() != 0) {
    if (device) dc.wait("ncclAllGather");  // this step's collectives done, within the timeout
    return msg;
  }

  // 4. only the final [batch, k] ids and scores (and the ranks' statuses) come back to the host
  if (world == 1 && !*ok) return msg;
  const std::uint64_t answer_bytes = static_cast<std::uint64_t>(batch) * k * (sizeof(std::int64_t) + sizeof(float));
  if (device_answer_.ids) {  // search_async: the answer stays on the device, on the caller's stream
    const Space::InvalidRows inv{invalid_, k};
    space_->split(final_list, static_cast<std::int64_t>(batch) * k, metric_ == Metric::kL2, device_answer_.ids,
                  device_answer_.scores, space_->stream(), nullptr, &inv);
    if (world > 1) {
      export_->enqueue_with_status(nullptr, 0, k, gathered_, slots, world);
      dc.wait("ncclAllGather");
    }
    space_->join_into(device_answer_.stream);
    return msg;
  }
  if (world > 1) {
    export_->enqueue_with_status(final_list, batch, k, gathered_, slots, world);
    if (device) space_->counters().device_to_host += answer_bytes + static_cast<std::uint64_t>(world) * sizeof(Candidate);
    if (device) dc.wait("ncclAllGather");
  } else {
    if (device) space_->counters().device_to_host += answer_bytes;  // the epilogue of the search
    if (device) space_->synchronize();
  }
  return msg;
}

// Rank 0, after a search with stats: every rank's QueryCounts [batch] (behind its candidates in
// the gathered blocks; one rank: in its own block), summed.
void SearchProtocol::read_stats(int batch, int k, QueryStats* out) {
  const int world = world_size();
  const std::int64_t cand = static_cast<std::int64_t>(batch) * k;
  const std::int64_t slots = 1 + cand + 2 * batch;
  std::vector<QueryCounts>& part = counts_host_;
  for (int q = 0; q < batch; ++q) out[q] = QueryStats{windows_ && windows_[q].count ? 0 : -1, 0, 0};
  for (int r = 0; r < world; ++r) {
    const Candidate* block = world == 1 ? local_ : gathered_ + r * slots;
    space_->to_host(part.data(), block + 1 + cand, static_cast<std::size_t>(batch) * sizeof(QueryCounts), /*wait=*/true);
    for (int q = 0; q < batch; ++q) {
      const QueryCounts& c = part[static_cast<std::size_t>(q)];
      if (out[q].total >= 0) out[q].total += c.within;
      out[q].passing += c.passing;
      out[q].scanned += c.scanned;
    }
  }
}

std::vector<Candidate> SearchProtocol::last_local_candidates() {
  std::vector<Candidate> out(static_cast<size_t>(last_batch_) * last_k_);
  if (!out.empty()) space_->to_host(out.data(), local_ + 1, out.size() * sizeof(Candidate), /*wait=*/true);
  return out;
}

}  // namespace shardtopk
