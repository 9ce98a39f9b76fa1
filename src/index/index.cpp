#include "shardtopk/index.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "common/log.hpp"
#include "index/admission.hpp"
#include "shardtopk/corpus_io.hpp"

namespace shardtopk {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Rank 0's verdict on a batch, broadcast before any data so all ranks take the same path.
struct BatchHeader {
  std::int32_t status = 0;  // 0 ok, 1 rejected
  std::int32_t batch = 0;
  std::int32_t k = 0;
  std::int32_t pad = 0;
};

// Fault injection for tests of invariant 7 (never hang): SHARDTOPK_FAULT="stall:RANK:BATCH:SECONDS"
// makes RANK sleep before its local search of batch number BATCH (0-based, counted per index);
// "exit:RANK:BATCH" makes it exit(17) there, as a crashed rank would.
struct Fault {
  enum Kind { kNone, kStall, kExit } kind = kNone;
  int rank = -1;
  long batch = -1;
  double seconds = 0;
};

Fault parse_fault() {
  Fault f;
  const char* env = std::getenv("SHARDTOPK_FAULT");
  if (!env || !*env) return f;
  char kind[16] = {0};
  int rank = -1;
  long batch = -1;
  double secs = 0;
  const int n = std::sscanf(env, "%15[a-z]:%d:%ld:%lf", kind, &rank, &batch, &secs);
  const std::string k = kind;
  SHARDTOPK_EXPECTS((k == "stall" && n == 4) || (k == "exit" && n >= 3), "SHARDTOPK_FAULT='", env,
                    "': expected stall:RANK:BATCH:SECONDS or exit:RANK:BATCH");
  f.kind = k == "stall" ? Fault::kStall : Fault::kExit;
  f.rank = rank;
  f.batch = batch;
  f.seconds = secs;
  return f;
}

void maybe_inject_fault(int rank, long batch) {
  static const Fault f = parse_fault();
  if (f.kind == Fault::kNone || f.rank != rank || f.batch != batch) return;
  if (f.kind == Fault::kStall) {
    spdlog::warn("SHARDTOPK_FAULT: rank {} stalls {} s before batch {}", rank, f.seconds, batch);
    std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
  } else {
    spdlog::warn("SHARDTOPK_FAULT: rank {} exits during batch {}", rank, batch);
    std::fflush(nullptr);
    std::_Exit(17);
  }
}

}  // namespace

Metric resolve_metric(const Config& cfg) {
  if (cfg.search.metric) return *cfg.search.metric;
  const std::string d = read_string_attribute(cfg.corpus.path, "distance");
  if (d.empty()) return Metric::kInnerProduct;
  if (d == "angular" || d == "cosine") return Metric::kCosine;
  if (d == "euclidean" || d == "l2") return Metric::kL2;
  if (d == "dot" || d == "ip" || d == "inner_product") return Metric::kInnerProduct;
  throw Error("'" + cfg.corpus.path + "': attribute distance='" + d +
              "' is not understood; set search.metric (inner_product, cosine, l2)");
}

int resolve_threads(const Config& cfg, int local_size) {
  if (cfg.engine.threads > 0) return cfg.engine.threads;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, hw / std::max(1, local_size));
}

ShardedIndex::ShardedIndex(const Config& cfg, bool log_progress) : cfg_(cfg) {
  const auto t0 = Clock::now();
  host_comm_ = make_mpi_communicator(cfg.comm.timeout_s);
  const int rank = host_comm_->rank(), world = host_comm_->world_size();
  init_logging(rank, world);

  bool ok = true;
  std::string msg;
  EngineBackend backend = cfg.engine.backend;
  try {
    validate(cfg_);
    const DatasetInfo info = inspect_dataset(cfg_.corpus.path, cfg_.corpus.dataset);
    SHARDTOPK_EXPECTS(info.dims.size() == 2, "'", cfg_.corpus.path, "': dataset '", info.name,
                      "' must be 2-D [rows, dim], but it is ", info.dims.size(), "-D");
    SHARDTOPK_EXPECTS(info.is_float, "'", cfg_.corpus.path, "': dataset '", info.name, "' has dtype ", info.dtype,
                      "; expected float16, float32 or float64");
    SHARDTOPK_EXPECTS(info.dims[0] >= 1 && info.dims[1] >= 1, "'", cfg_.corpus.path, "': dataset '", info.name,
                      "' is empty [", info.dims[0], ", ", info.dims[1], "]");
    metric_ = resolve_metric(cfg_);
    stats_.total_rows = info.dims[0];
    stats_.dim = info.dims[1];
    stats_.rows = shard_rows(stats_.total_rows, world, rank);
    spdlog::debug("shard plan: rank {} of {} holds rows [{}, {}) ({} of {} rows, dim {})", rank, world, stats_.rows.lo,
                  stats_.rows.hi, stats_.rows.size(), stats_.total_rows, stats_.dim);

    if (backend == EngineBackend::kAuto) backend = cuda_available() ? EngineBackend::kCuda : EngineBackend::kCpu;
    if (backend == EngineBackend::kCuda) {
      SHARDTOPK_EXPECTS(built_with_cuda(), "engine.backend 'cuda': this shardtopk was built without CUDA "
                                           "(reconfigure with -DSHARDTOPK_CUDA=ON) ; use engine.backend 'cpu'");
      const int ngpu = cuda_device_count();
      SHARDTOPK_EXPECTS(ngpu > 0, "engine.backend 'cuda': no GPU is visible; use engine.backend 'cpu' or 'auto'");
      SHARDTOPK_EXPECTS(host_comm_->local_size() <= ngpu, "engine.backend 'cuda': ", host_comm_->local_size(),
                        " ranks on this node but only ", ngpu, " GPU(s) visible; start at most ", ngpu,
                        " ranks per node (one rank per GPU)");
    }

    // Read this rank's rows only (hyperslab), in bounded chunks.
    const auto tr = Clock::now();
    auto last_log = Clock::now();
    ReadProgress progress;
    if (log_progress && rank == 0) {
      progress = [&](std::int64_t done, std::int64_t total) {
        if (seconds_since(last_log) > 1.0 || (done == total && seconds_since(tr) > 1.0)) {
          last_log = Clock::now();
          spdlog::info("reading shard: {}/{} rows ({:.0f}%), {:.1f} s", done, total, 100.0 * done / total,
                       seconds_since(tr));
        }
      };
    }
    HostMatrix rows = read_rows(cfg_.corpus.path, cfg_.corpus.dataset, stats_.rows, cfg_.engine.read_chunk_rows,
                                progress, "corpus row");
    // Score range (admission.hpp): raw row norms, before any cosine normalisation.
    const NormSummary norms = shard_norms(rows.data.data(), rows.rows, rows.cols, stats_.rows.lo);
    stats_.max_row_norm = norms.max_norm;
    stats_.max_row_norm_row = norms.row;
    check_corpus_norms(metric_, norms, rows.cols, "'" + cfg_.corpus.path + "': corpus row");
    std::vector<std::int64_t> ids(static_cast<size_t>(stats_.rows.size()));
    if (!cfg_.corpus.ids_dataset.empty()) {
      std::vector<std::int64_t> all = read_int64_vector(cfg_.corpus.path, cfg_.corpus.ids_dataset);
      SHARDTOPK_EXPECTS(static_cast<std::int64_t>(all.size()) == stats_.total_rows, "'", cfg_.corpus.path,
                        "': ids dataset '", cfg_.corpus.ids_dataset, "' has ", all.size(), " entries but '",
                        cfg_.corpus.dataset, "' has ", stats_.total_rows, " rows");
      std::copy(all.begin() + stats_.rows.lo, all.begin() + stats_.rows.hi, ids.begin());
      std::vector<std::int64_t> sorted = std::move(all);
      std::sort(sorted.begin(), sorted.end());
      const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
      SHARDTOPK_EXPECTS(dup == sorted.end(), "'", cfg_.corpus.path, "': ids dataset '", cfg_.corpus.ids_dataset,
                        "' is not unique: id ", (dup == sorted.end() ? 0 : *dup), " appears more than once");
      SHARDTOPK_EXPECTS(sorted.empty() || sorted.back() != kPadId, "ids dataset: id ", kPadId, " is reserved");
    } else {
      for (std::int64_t i = 0; i < stats_.rows.size(); ++i) ids[i] = stats_.rows.lo + i;
    }
    if (metric_ == Metric::kCosine) {
      // norms computed once at ingest: rows are stored normalised. Messages use global rows.
      for (std::int64_t i = 0; i < rows.rows; ++i)
        normalize_rows(rows.data.data() + i * rows.cols, 1, rows.cols, stats_.rows.lo + i, "corpus row");
    }
    stats_.read_s = seconds_since(tr);

    const auto tu = Clock::now();
    EngineLimits lim{cfg_.search.batch_max, cfg_.search.k_max, world};
    ShardInput in{rows.data.data(), rows.rows, rows.cols, ids.data()};
    if (backend == EngineBackend::kCuda) {
      engine_ = make_cuda_engine(in, metric_, cfg_.engine.dtype, host_comm_->local_rank(), lim);
    } else {
      engine_ = make_cpu_engine(in, metric_, cfg_.engine.dtype, resolve_threads(cfg_, host_comm_->local_size()), lim);
    }
    stats_.upload_s = seconds_since(tu);
    spdlog::debug("rank {}: read + validated {} rows in {:.3f} s, engine built in {:.3f} s", rank, stats_.rows.size(),
                  stats_.read_s, stats_.upload_s);
    stats_.engine_resident_bytes = engine_->resident_bytes();
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
  }
  host_comm_->check(ok, msg);
  allgather_norms(*host_comm_, metric_, &stats_);

  // Communicator for the data path.
  CommBackend cb = cfg_.comm.backend;
  if (cb == CommBackend::kAuto) cb = (engine_->space() == MemSpace::kDevice && built_with_nccl()) ? CommBackend::kNccl : CommBackend::kMpi;
  ok = true;
  try {
    if (cb == CommBackend::kNccl) {
      SHARDTOPK_EXPECTS(engine_->space() == MemSpace::kDevice,
                        "comm.backend 'nccl' needs the CUDA engine (engine.backend 'cuda' or 'auto' with GPUs)");
      data_comm_ = make_nccl_communicator(*host_comm_, engine_->stream(), host_comm_->local_rank(), cfg_.comm.timeout_s);
    }
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
  }
  host_comm_->check(ok, msg);

  const size_t bk = static_cast<size_t>(cfg_.search.batch_max) * cfg_.search.k_max;
  host_queries_.assign(static_cast<size_t>(cfg_.search.batch_max) * stats_.dim, 0.0f);
  host_candidates_.assign(bk, pad_candidate());
  host_ids_.assign(bk, 0);
  host_scores_.assign(bk, 0.0f);
  if (engine_->space() == MemSpace::kDevice && data_comm().space() == MemSpace::kHost)
    host_gathered_.assign(bk * world, pad_candidate());

  double mine = seconds_since(t0);
  std::vector<double> all(static_cast<size_t>(world));
  host_comm_->allgather(&mine, all.data(), sizeof(double));
  stats_.total_s = *std::max_element(all.begin(), all.end());
  if (rank == 0) {
    spdlog::info("corpus {} '{}' [{} x {}], metric {}, {} rank(s); engine {} ({}), comm {}; ingest {:.2f} s",
                 cfg_.corpus.path, cfg_.corpus.dataset, stats_.total_rows, stats_.dim, to_string(metric_), world,
                 engine_->name(), to_string(engine_->dtype()), data_comm().name(), stats_.total_s);
  }
}

ShardedIndex::~ShardedIndex() = default;

int ShardedIndex::rank() const { return host_comm_->rank(); }
int ShardedIndex::world_size() const { return host_comm_->world_size(); }

void ShardedIndex::search(const float* queries, int batch, int k, std::int64_t* ids, float* scores) {
  admit_batch(batch, k, [&] {
    SHARDTOPK_EXPECTS(queries != nullptr, "no queries given");
    const std::int64_t d = stats_.dim;
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(batch) * d; ++i)
      SHARDTOPK_EXPECTS(std::isfinite(queries[i]), "query ", i / d, " of the batch has a non-finite value (",
                        queries[i], ") at column ", i % d);
    check_query_norms(metric_, NormSummary{stats_.max_row_norm, stats_.max_row_norm_row}, queries, batch, d);
    engine_->copy_from_host(engine_->query_buffer(), queries, sizeof(float) * batch * d);
  });
  run_search(pending_batch_, pending_k_, ids, scores);
}

void ShardedIndex::search_device(const float* d_queries, void* cuda_stream, int batch, int k, std::int64_t* ids,
                                 float* scores) {
  SHARDTOPK_EXPECTS(engine_->space() == MemSpace::kDevice, "search_device needs the CUDA engine (engine is ",
                    engine_->name(), ")");
  admit_batch(batch, k, [&] {
    SHARDTOPK_EXPECTS(d_queries != nullptr, "no queries given");
    (void)cuda_stream;  // copy_within synchronises the device first, so work on any stream is done
    engine_->copy_within(engine_->query_buffer(), d_queries, sizeof(float) * batch * stats_.dim);
  });
  run_search(pending_batch_, pending_k_, ids, scores);
}

void ShardedIndex::admit_batch(int batch, int k, const std::function<void()>& stage_queries) {
  // Rank 0 checks the batch, stages the queries into the engine and prepares them (cosine
  // normalisation; the CUDA engine also checks finiteness on the device), then broadcasts its
  // verdict so every rank takes the same path. A rejected batch leaves the index usable.
  BatchHeader h;
  std::string reject;
  if (rank() == 0) {
    try {
      const std::int64_t kmax = std::min<std::int64_t>(cfg_.search.k_max, stats_.total_rows);
      SHARDTOPK_EXPECTS(k >= 1 && k <= kmax, "k=", k, " out of range: allowed 1 .. ", kmax,
                        (k > cfg_.search.k_max ? " (search.k_max)" : k > stats_.total_rows ? " (corpus rows)" : ""));
      SHARDTOPK_EXPECTS(batch >= 1 && batch <= cfg_.search.batch_max, "batch of ", batch,
                        " queries out of range: allowed 1 .. ", cfg_.search.batch_max, " (search.batch_max)");
      stage_queries();
      engine_->prepare_queries(engine_->query_buffer(), batch);
      h.batch = batch;
      h.k = k;
    } catch (const Error& e) {
      h.status = 1;
      reject = e.what();
    }
  }
  host_comm_->broadcast(&h, sizeof h, 0);
  if (h.status != 0) throw Error(rank() == 0 ? reject : "rank 0 rejected the batch");
  pending_batch_ = h.batch;
  pending_k_ = h.k;
}

void ShardedIndex::run_search(int batch, int k, std::int64_t* ids, float* scores) {
  const int world = world_size();
  const size_t qbytes = sizeof(float) * batch * stats_.dim;
  const size_t cbytes = sizeof(Candidate) * batch * k;
  Engine& e = *engine_;
  Communicator& dc = data_comm();
  const bool staged = e.space() == MemSpace::kDevice && dc.space() == MemSpace::kHost;

  // 1. queries from rank 0 to every rank
  if (world > 1) {
    if (staged) {
      if (rank() == 0) e.copy_to_host(host_queries_.data(), e.query_buffer(), qbytes);
      dc.broadcast(host_queries_.data(), qbytes, 0);
      if (rank() != 0) e.copy_from_host(e.query_buffer(), host_queries_.data(), qbytes);
    } else {
      dc.broadcast(e.query_buffer(), qbytes, 0);
    }
  }

  // 2. local top-k; a failure on any rank reaches all of them
  maybe_inject_fault(rank(), batches_++);
  bool ok = true;
  std::string msg;
  try {
    e.search(e.query_buffer(), batch, k, e.local_buffer());
  } catch (const std::exception& ex) {
    ok = false;
    msg = ex.what();
  }
  host_comm_->check(ok, msg);
  last_batch_ = batch;
  last_k_ = k;

  // 3. all-gather K candidates per rank, merge on rank 0
  const Candidate* final_list = e.local_buffer();
  if (world > 1) {
    if (staged) {
      e.copy_to_host(host_candidates_.data(), e.local_buffer(), cbytes);
      dc.allgather(host_candidates_.data(), host_gathered_.data(), cbytes);
      if (rank() == 0) e.copy_from_host(e.gathered_buffer(), host_gathered_.data(), cbytes * world);
    } else {
      dc.allgather(e.local_buffer(), e.gathered_buffer(), cbytes);
    }
    if (rank() == 0) {
      e.merge(e.gathered_buffer(), world, batch, k, e.merged_buffer());
      final_list = e.merged_buffer();
    }
  }
  if (rank() != 0) return;

  // 4. only the final [batch, k] ids and scores come back to the host
  e.export_results(final_list, batch, k, ids ? ids : host_ids_.data(), scores ? scores : host_scores_.data());
}

std::vector<Candidate> ShardedIndex::last_local_candidates() const {
  std::vector<Candidate> out(static_cast<size_t>(last_batch_) * last_k_);
  if (!out.empty()) engine_->copy_to_host(out.data(), engine_->local_buffer(), out.size() * sizeof(Candidate));
  return out;
}

}  // namespace shardtopk
