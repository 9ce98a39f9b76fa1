// ShardedIndex: the rank protocol of a collective search (one header broadcast per step, then
// the data path), the status each rank reports with its candidates, and the export of rank 0's
// answer. Files, backends and communicator choice live in load.cpp; memory in the Space.
#include "shardtopk/index.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "core/log.hpp"
#include "shardtopk/space.hpp"
#include "index/admission.hpp"
#include "index/updates.hpp"

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
class ShardedIndex::Exporter final : public SearchEpilogue {
 public:
  Exporter(Space& space, Metric metric, std::size_t max_n, int world) : space_(space), l2_(metric == Metric::kL2) {
    ids_ = static_cast<std::int64_t*>(space.alloc_host(max_n * sizeof(std::int64_t)));
    scores_ = static_cast<float*>(space.alloc_host(max_n * sizeof(float)));
    statuses_ = static_cast<Candidate*>(space.alloc_host(static_cast<std::size_t>(world) * sizeof(Candidate)));
    d_ids_ = static_cast<std::int64_t*>(space.mapped(ids_));
    d_scores_ = static_cast<float*>(space.mapped(scores_));
    d_statuses_ = static_cast<Candidate*>(space.mapped(statuses_));
  }

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
};

// ------------------------------------------------------------------------------ limits

void check_k(long long k, std::int64_t k_max, std::int64_t total_rows) {
  const std::int64_t kmax = std::min<std::int64_t>(k_max, total_rows);
  SHARDTOPK_EXPECTS(k >= 1 && k <= kmax, "k=", k, " out of range: allowed 1 .. ", kmax,
                    (k <= kmax ? "" : kmax == total_rows ? " (the corpus rows)" : " (search.k_max)"));
}

EngineLimits index_engine_limits(const SearchConfig& search) {
  return EngineLimits{search.batch_max, search.k_max, std::min(search.max_filters, search.batch_max)};
}

std::uint64_t index_buffer_bytes(const SearchConfig& search, int world_size, std::int64_t dim) {
  const std::uint64_t bk = static_cast<std::uint64_t>(search.batch_max) * static_cast<std::uint64_t>(search.k_max);
  const std::uint64_t cand = sizeof(Candidate);
  const std::uint64_t queries = static_cast<std::uint64_t>(search.batch_max) * static_cast<std::uint64_t>(dim) * 4;
  const std::uint64_t local = (1 + bk) * cand;
  return queries + local + local * static_cast<std::uint64_t>(world_size) + bk * cand +
         static_cast<std::uint64_t>(search.batch_max);
}

// ------------------------------------------------------------------------------ construction

ShardedIndex::ShardedIndex(const Config& cfg, Metric metric, std::int64_t total_rows, RowRange rows,
                           std::unique_ptr<Space> space, std::unique_ptr<Engine> engine,
                           std::unique_ptr<Communicator> host_comm, std::unique_ptr<Communicator> data_comm)
    : cfg_(cfg),
      metric_(metric),
      space_(std::move(space)),
      host_comm_(std::move(host_comm)),
      data_comm_(std::move(data_comm)),
      engine_(std::move(engine)) {
  stats_.total_rows = total_rows;
  stats_.rows = rows;
  SHARDTOPK_EXPECTS(engine_ && host_comm_ && space_, "ShardedIndex: an engine, a space and a host communicator are required");
  // Checks and allocations may fail on one rank only: the failure travels to every rank.
  bool ok = true;
  std::string msg;
  try {
    init();
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
  }
  host_comm_->check(ok, msg);
}

void ShardedIndex::init() {
  const EngineInfo info = engine_->info();
  SHARDTOPK_EXPECTS(info.metric == metric_, "ShardedIndex: engine metric ", to_string(info.metric),
                    " differs from the index metric ", to_string(metric_));
  SHARDTOPK_EXPECTS(info.rows == stats_.rows.size(), "ShardedIndex: engine holds ", info.rows,
                    " rows but this rank's range has ", stats_.rows.size());
  SHARDTOPK_EXPECTS(info.space == space_->kind(), "ShardedIndex: the engine's memory (", to_string(info.space),
                    ") is not the data path's (", to_string(space_->kind()), ")");
  SHARDTOPK_EXPECTS(cfg_.search.batch_max >= 1 && cfg_.search.k_max >= 1, "ShardedIndex: bad search limits");
  SHARDTOPK_EXPECTS(engine_->limits().batch_max >= cfg_.search.batch_max && engine_->limits().k_max >= cfg_.search.k_max,
                    "ShardedIndex: the engine was built for batches of ", engine_->limits().batch_max, " and k_max ",
                    engine_->limits().k_max, ", less than search.batch_max=", cfg_.search.batch_max,
                    " / search.k_max=", cfg_.search.k_max);
  stats_.dim = info.dim;
  stats_.engine_resident_bytes = info.resident_bytes;

  const int world = host_comm_->world_size();
  const std::size_t bmax = static_cast<std::size_t>(cfg_.search.batch_max);
  const std::size_t bk = bmax * static_cast<std::size_t>(cfg_.search.k_max);
  const std::size_t qbytes = bmax * static_cast<std::size_t>(stats_.dim) * sizeof(float);
  queries_ = static_cast<float*>(space_->alloc(qbytes));
  // On the host the caller's batch is copied once, straight into the search buffer.
  host_queries_ = space_->kind() == MemSpace::kHost ? queries_ : static_cast<float*>(space_->alloc_host(qbytes));
  local_ = static_cast<Candidate*>(space_->alloc((1 + bk) * sizeof(Candidate)));
  gathered_ = static_cast<Candidate*>(space_->alloc(static_cast<std::size_t>(world) * (1 + bk) * sizeof(Candidate)));
  merged_ = static_cast<Candidate*>(space_->alloc(bk * sizeof(Candidate)));
  invalid_ = static_cast<std::uint8_t*>(space_->alloc(bmax));
  space_->fill_pad(local_ + 1, static_cast<std::int64_t>(bk));
  space_->fill_pad(gathered_, static_cast<std::int64_t>(world) * static_cast<std::int64_t>(1 + bk));
  space_->fill_pad(merged_, static_cast<std::int64_t>(bk));
  set_status(true);  // this rank's status slot, sent with every all-gather, says "ok" from now on
  export_ = std::make_unique<Exporter>(*space_, metric_, bk, world);
  if (metric_ == Metric::kCosine) normalized_.assign(bmax * static_cast<std::size_t>(stats_.dim), 0.0f);
  space_->synchronize();
  space_->counters() = {};  // the start-up copies above are not search traffic
  stats_.engine_resident_bytes += index_buffer_bytes(cfg_.search, world, stats_.dim);
}

ShardedIndex::~ShardedIndex() {
  // The data communicator first: NCCL's replayed graphs and registrations refer to the index's
  // buffers and the space's stream, which must outlive them; then the engine, then the space.
  data_comm_.reset();
  engine_.reset();
  export_.reset();
}

int ShardedIndex::rank() const { return host_comm_->rank(); }
int ShardedIndex::world_size() const { return host_comm_->world_size(); }

TransferCounters ShardedIndex::transfer_counters() const {
  TransferCounters t = space_->counters();
  t.batched_fallbacks += engine_->transfer_counters().batched_fallbacks;
  return t;
}

void ShardedIndex::reset_transfer_counters() {
  space_->counters() = {};
  engine_->reset_transfer_counters();
}

void ShardedIndex::set_status(bool ok) {
  const Candidate c = status_slot(!ok, rank());
  space_->from_host(local_, &c, sizeof c, /*wait=*/true);
}

// ------------------------------------------------------------------------------ rank 0 entry points

void ShardedIndex::search(const float* queries, int batch, int k, std::int64_t* ids, float* scores,
                          const FilterProgram* const* filters, std::int32_t* counts) {
  if (rank() != 0) {
    follow_one(/*lock_step=*/true);
    return;
  }
  admit_batch(batch, k, /*prepare_on_device=*/false, [&] {
    // Validated and (cosine) normalised on the host — normalize_rows is the arithmetic every
    // engine's prepare_queries uses — then copied to the space without a wait.
    SHARDTOPK_EXPECTS(queries != nullptr, "no queries given");
    const std::int64_t d = stats_.dim;
    const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(batch) * static_cast<std::size_t>(d);
    const NormSummary corpus{stats_.max_row_norm, stats_.max_row_norm_row};
    // The previous batch's upload must have left the staging buffer (the stream is idle between
    // searches on this path; a rejected batch may have left its upload queued).
    if (host_queries_ != queries_) space_->synchronize();
    if (metric_ == Metric::kCosine) {  // checked and normalised in a copy, then staged
      admit_query_values(metric_, corpus, queries, batch, d);
      std::copy(queries, queries + static_cast<std::int64_t>(batch) * d, normalized_.begin());
      normalize_rows(normalized_.data(), batch, d, 0, "query");
      std::memcpy(host_queries_, normalized_.data(), bytes);
      if (host_queries_ != queries_) space_->from_host(queries_, host_queries_, bytes, /*wait=*/false);
    } else {
      // Staged first (the copy to the device is queued), then checked in one pass over that
      // copy, still in the CPU's cache, while the copy runs. A rejected batch changes only the
      // staging and query buffers, which every later search stages anew.
      std::memcpy(host_queries_, queries, bytes);
      if (host_queries_ != queries_) space_->from_host(queries_, host_queries_, bytes, /*wait=*/false);
      admit_query_values(metric_, corpus, host_queries_, batch, d);
    }
    queries_on_host_ = true;
  }, filters);
  run_search(batch, k, ids, scores);
  if (counts) {
    // Padding (fewer rows passed a filter, or fewer rows are live, than k) ends a query's row.
    for (int q = 0; q < batch; ++q) {
      int c = 0;
      while (c < k && ids[static_cast<std::size_t>(q) * k + c] != kPadId) ++c;
      counts[q] = c;
    }
  }
}

void ShardedIndex::search_device(const float* d_queries, void* cuda_stream, int batch, int k, std::int64_t* ids,
                                 float* scores) {
  SHARDTOPK_EXPECTS(space_->kind() == MemSpace::kDevice, "search_device needs the CUDA engine (engine is ",
                    engine_->info().name, ")");
  if (rank() != 0) {
    follow_one(/*lock_step=*/true);
    return;
  }
  admit_batch(batch, k, /*prepare_on_device=*/true, [&] {
    queries_on_host_ = false;
    SHARDTOPK_EXPECTS(d_queries != nullptr, "no queries given");
    // Ordered after the caller's work on its stream; no device-wide synchronisation.
    space_->copy(queries_, d_queries, sizeof(float) * static_cast<std::size_t>(batch) * stats_.dim, cuda_stream);
  });
  run_search(batch, k, ids, scores);
}

void ShardedIndex::search_async(const float* d_queries, int batch, int k, std::int64_t* d_ids, float* d_scores,
                                void* cuda_stream, const FilterProgram* const* filters) {
  SHARDTOPK_EXPECTS(space_->kind() == MemSpace::kDevice, "search_async needs the CUDA engine (engine is ",
                    engine_->info().name, "); use search() with host arrays");
  if (rank() != 0) {
    follow_one(/*lock_step=*/true);
    return;
  }
  admit_batch(batch, k, /*prepare_on_device=*/false, [&] {
    queries_on_host_ = false;
    SHARDTOPK_EXPECTS(d_queries != nullptr && d_ids != nullptr && d_scores != nullptr,
                      "search_async: null query or answer pointer");
    // Ordered after the caller's work on its stream; checked on the device, no host wait.
    space_->copy(queries_, d_queries, sizeof(float) * static_cast<std::size_t>(batch) * stats_.dim, cuda_stream);
    engine_->prepare_queries(queries_, batch, space_->stream(), invalid_);
  }, filters);
  device_answer_ = DeviceAnswer{d_ids, d_scores, cuda_stream};
  struct Reset {
    DeviceAnswer& a;
    ~Reset() { a = DeviceAnswer{}; }
  } reset{device_answer_};
  run_search(batch, k, nullptr, nullptr);
}

void ShardedIndex::encode_filters(const FilterProgram* const* filters, int batch) {
  std::vector<const FilterProgram*> distinct;
  std::vector<std::int32_t> index(static_cast<std::size_t>(batch), -1);
  for (int q = 0; q < batch; ++q) {
    const FilterProgram* f = filters ? filters[q] : nullptr;
    if (!f || f->passes_everything()) continue;
    check_filter_fits(*f, schema_);
    std::size_t j = 0;
    while (j < distinct.size() && !(*distinct[j] == *f)) ++j;
    if (j == distinct.size()) {
      SHARDTOPK_EXPECTS(static_cast<int>(distinct.size()) < std::min(cfg_.search.max_filters, cfg_.search.batch_max),
                        "the batch holds more than ", std::min(cfg_.search.max_filters, cfg_.search.batch_max),
                        " distinct filters (search.max_filters)");
      distinct.push_back(f);
    }
    index[static_cast<std::size_t>(q)] = static_cast<std::int32_t>(j);
  }
  filter_bytes_.clear();
  if (distinct.empty()) return;
  // [int32 n][int32 index[batch]] padded to 8 bytes, then pack_filter_programs's bytes.
  const std::size_t head = (4 + 4 * static_cast<std::size_t>(batch) + 7) / 8 * 8;
  const std::size_t packed = packed_filter_programs_bytes(distinct.data(), static_cast<int>(distinct.size()));
  SHARDTOPK_EXPECTS(head + packed <= (std::size_t{1} << 30), "the batch's filters take ", head + packed,
                    " bytes compiled, more than 1 GiB");
  filter_bytes_.assign(head + packed, 0);
  const std::int32_t n = static_cast<std::int32_t>(distinct.size());
  std::memcpy(filter_bytes_.data(), &n, 4);
  std::memcpy(filter_bytes_.data() + 4, index.data(), 4 * index.size());
  pack_filter_programs(distinct.data(), n, filter_bytes_.data() + head, packed);
}

void ShardedIndex::decode_filters(int batch) {
  filter_programs_.clear();
  filter_batch_programs_.clear();
  query_program_.assign(static_cast<std::size_t>(batch), -1);
  filtered_ = !filter_bytes_.empty();
  if (!filtered_) return;
  const std::size_t head = (4 + 4 * static_cast<std::size_t>(batch) + 7) / 8 * 8;
  SHARDTOPK_ASSERT(filter_bytes_.size() >= head + 8);
  std::int32_t n = 0;
  std::memcpy(&n, filter_bytes_.data(), 4);
  const std::uint8_t* packed = filter_bytes_.data() + head;
  const std::size_t packed_size = filter_bytes_.size() - head;
  std::uint64_t count = 0;
  std::memcpy(&count, packed, 8);
  SHARDTOPK_ASSERT(count == static_cast<std::uint64_t>(n));
  filter_programs_.reserve(static_cast<std::size_t>(n));
  for (std::int32_t p = 0; p < n; ++p) {
    std::uint64_t off = 0, end = packed_size;
    std::memcpy(&off, packed + 8 * (1 + p), 8);
    if (p + 1 < n) std::memcpy(&end, packed + 8 * (2 + p), 8);
    SHARDTOPK_ASSERT(off < end && end <= packed_size);
    filter_programs_.push_back(deserialize_filter(packed + off, end - off, schema_));
  }
  for (const FilterProgram& p : filter_programs_) filter_batch_programs_.push_back(&p);
  std::memcpy(query_program_.data(), filter_bytes_.data() + 4, 4 * static_cast<std::size_t>(batch));
  for (std::int32_t i : query_program_) SHARDTOPK_ASSERT(i >= -1 && i < n);
}

void ShardedIndex::admit_batch(int batch, int k, bool prepare_on_device, const std::function<void()>& stage_queries,
                               const FilterProgram* const* filters) {
  // Rank 0 checks the batch and stages the queries (device queries are then validated and, for
  // cosine, normalised by the engine), then broadcasts the step's header. A rejected batch is
  // announced too, so that followers calling search() in lock step throw with rank 0; a
  // follow() loop skips it. The index stays usable.
  SHARDTOPK_EXPECTS(!shut_down_, "the index was shut down");
  Header h;
  std::string reject;
  try {
    check_k(k, cfg_.search.k_max, k_limit_rows());
    SHARDTOPK_EXPECTS(batch >= 1 && batch <= cfg_.search.batch_max, "batch of ", batch,
                      " queries out of range: allowed 1 .. ", cfg_.search.batch_max, " (search.batch_max)");
    encode_filters(filters, batch);
    stage_queries();
    if (prepare_on_device) engine_->prepare_queries(queries_, batch, space_->stream());
    h.op = static_cast<std::int32_t>(IndexOp::kSearch);
    h.batch = batch;
    h.k = k;
    h.filter_bytes = static_cast<std::int32_t>(filter_bytes_.size());
  } catch (const Error& e) {
    h.op = static_cast<std::int32_t>(IndexOp::kRejected);
    reject = e.what();
  }
  host_comm_->broadcast(&h, sizeof h, 0);
  if (h.op != static_cast<std::int32_t>(IndexOp::kSearch)) throw Error(reject);
  if (h.filter_bytes > 0) host_comm_->broadcast(filter_bytes_.data(), filter_bytes_.size(), 0);
  decode_filters(batch);
}

// ------------------------------------------------------------------------------ the loop

void ShardedIndex::follow() {
  SHARDTOPK_EXPECTS(rank() != 0, "follow() is for ranks 1 .. P-1; rank 0 drives the index");
  while (follow_one(/*lock_step=*/false)) {
  }
}

bool ShardedIndex::follow_one(bool lock_step) {
  SHARDTOPK_EXPECTS(!shut_down_, "the index was shut down");
  Header h;
  host_comm_->broadcast_untimed(&h, sizeof h, 0);
  switch (static_cast<IndexOp>(h.op)) {
    case IndexOp::kSearch:
      filter_bytes_.assign(static_cast<std::size_t>(std::max(h.filter_bytes, 0)), 0);
      if (h.filter_bytes > 0) host_comm_->broadcast(filter_bytes_.data(), filter_bytes_.size(), 0);
      decode_filters(h.batch);
      run_search(h.batch, h.k, nullptr, nullptr);
      return true;
    case IndexOp::kRejected:
      if (lock_step) throw Error("rank 0 rejected the batch or the write");
      return true;
    case IndexOp::kStats: {
      RankStats mine{static_cast<double>(batches_), local_search_s_};
      std::vector<RankStats> all(static_cast<size_t>(world_size()));
      host_comm_->allgather(&mine, all.data(), sizeof mine);
      if (lock_step) throw Error("rank 0 asked for statistics");
      return true;
    }
    case IndexOp::kShutdown:
      shut_down_ = true;
      if (lock_step) throw Error("rank 0 shut the index down");
      return false;
    case IndexOp::kWrite:
    case IndexOp::kSnapshot:
    case IndexOp::kResolve:
    case IndexOp::kReplayDone:
      return follow_update_op(h, lock_step);
  }
  // A newer rank 0 than this follower: nothing sensible to do but end the job.
  throw CommError("rank " + std::to_string(rank()) + ": unknown index op " + std::to_string(h.op) + " from rank 0");
}

std::vector<RankStats> ShardedIndex::rank_stats() {
  SHARDTOPK_EXPECTS(rank() == 0 && !shut_down_, "rank_stats() is for rank 0 of a running index");
  Header h;
  h.op = static_cast<std::int32_t>(IndexOp::kStats);
  host_comm_->broadcast(&h, sizeof h, 0);
  RankStats mine{static_cast<double>(batches_), local_search_s_};
  std::vector<RankStats> all(static_cast<size_t>(world_size()));
  host_comm_->allgather(&mine, all.data(), sizeof mine);
  return all;
}

void ShardedIndex::shutdown() {
  if (rank() != 0 || shut_down_) return;
  shut_down_ = true;
  Header h;
  h.op = static_cast<std::int32_t>(IndexOp::kShutdown);
  host_comm_->broadcast(&h, sizeof h, 0);
}

// ------------------------------------------------------------------------------ one search

void ShardedIndex::run_search(int batch, int k, std::int64_t* ids, float* scores) {
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

void ShardedIndex::local_search(int batch, int k) {
#ifdef SHARDTOPK_FAULT_INJECTION
  maybe_inject_fault(cfg_.testing.fault, rank(), batches_);
#endif
  SearchArgs a;
  a.queries = queries_;
  a.batch = batch;
  a.k = k;
  a.out = local_ + 1;
  a.stream = space_->stream();
  if (filtered_)
    a.filters = FilterBatch{filter_batch_programs_.data(), static_cast<int>(filter_batch_programs_.size()),
                            query_program_.data()};
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
// path. The header broadcast (admit_batch / follow_one) stays outside.
//
// Local failures travel in the all-gather payload, not in an extra collective: each rank sends
// [1 + batch · k] slots, its RankStatus first. A successful search leaves the slot as it is
// ("ok", written at construction); a failure writes "failed" before the gather and "ok" again
// after it. Rank 0 reads every rank's status with the answer (the export's status copy).
// Returns this rank's error message ("" and *ok = true on success).
std::string ShardedIndex::run_data_path(int batch, int k, bool* ok) {
  const int world = world_size();
  const std::size_t qbytes = sizeof(float) * static_cast<std::size_t>(batch) * static_cast<std::size_t>(stats_.dim);
  const std::int64_t slots = 1 + static_cast<std::int64_t>(batch) * k;
  const std::size_t cbytes = sizeof(Candidate) * static_cast<std::size_t>(slots);
  Communicator& dc = data_comm();
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

std::vector<Candidate> ShardedIndex::last_local_candidates() {
  std::vector<Candidate> out(static_cast<size_t>(last_batch_) * last_k_);
  if (!out.empty()) space_->to_host(out.data(), local_ + 1, out.size() * sizeof(Candidate), /*wait=*/true);
  return out;
}

}  // namespace shardtopk
