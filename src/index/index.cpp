#include "shardtopk/index.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <limits>
#include <thread>

#include "common/log.hpp"
#include "common/parallel.hpp"
#include "index/admission.hpp"
#include "shardtopk/corpus_io.hpp"

namespace shardtopk {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A failing rank's status row (see ShardedIndex::run_data_path): slot 0 holds this marker,
// score +inf and id kPadId - 1 - rank. No engine produces it: scores are finite for finite
// inputs and the id is far outside any corpus row count (an ids dataset would need exactly this
// id with an infinite score). The merge ranks +inf first, so the merged status row starts with
// the failing ranks' markers.
constexpr std::int64_t kFailIdBase = kPadId - 1;
Candidate fail_marker(int rank) { return Candidate{std::numeric_limits<float>::infinity(), kFailIdBase - rank}; }
bool is_fail_marker(std::int64_t id, float reported_score, int world) {
  return std::isinf(reported_score) && id <= kFailIdBase && id > kFailIdBase - world;
}

// Fault injection for tests of invariant 7 (never hang): SHARDTOPK_FAULT="stall:RANK:BATCH:SECONDS"
// makes RANK sleep before its local search of batch number BATCH (0-based, counted per index);
// "exit:RANK:BATCH" makes it exit(17) there, as a crashed rank would; "fail:RANK:BATCH" makes its
// local search throw (a recoverable failure: rank 0 reports it, every rank keeps serving).
struct Fault {
  enum Kind { kNone, kStall, kExit, kFail } kind = kNone;
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
  SHARDTOPK_EXPECTS((k == "stall" && n == 4) || ((k == "exit" || k == "fail") && n >= 3), "SHARDTOPK_FAULT='", env,
                    "': expected stall:RANK:BATCH:SECONDS, exit:RANK:BATCH or fail:RANK:BATCH");
  f.kind = k == "stall" ? Fault::kStall : k == "exit" ? Fault::kExit : Fault::kFail;
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
  } else if (f.kind == Fault::kFail) {
    throw Error("SHARDTOPK_FAULT: injected local search failure in batch " + std::to_string(batch));
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

bool streams_shard(bool cuda_engine, Metric metric) { return cuda_engine && metric != Metric::kCosine; }

std::uint64_t load_peak_host_bytes(std::int64_t rows, std::int64_t dim, bool streamed, long long read_chunk_rows) {
  const std::uint64_t r = static_cast<std::uint64_t>(std::max<std::int64_t>(rows, 0));
  const std::uint64_t d = static_cast<std::uint64_t>(std::max<std::int64_t>(dim, 0));
  if (!streamed) return r * (4 * d + 8);
  const std::uint64_t block = std::min<std::uint64_t>(r, static_cast<std::uint64_t>(std::max(1LL, read_chunk_rows)));
  const std::uint64_t buffers = r > block ? 2 : (r > 0 ? 1 : 0);
  return r * 8 + buffers * block * d * 4;
}

int resolve_threads(const Config& cfg, int local_size) {
  if (cfg.engine.threads > 0) return cfg.engine.threads;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, hw / std::max(1, local_size));
}

// comm.backend 'auto' with the CUDA engine on several ranks: NCCL or MPI staged through host
// memory, whichever moves a batch-1 search's collectives faster, measured here at start-up
// (median of 30 rounds of each, alternating, after 5 warm-ups; rank 0's clock; rank 0 decides
// for all). On two NVLink-connected H200s a batch-1 search's broadcast + all-gather took
// 19-20 us with NCCL (collectives replayed from CUDA graphs) against 35-37 us staged; issued
// eagerly on NCCL's non-blocking communicator they took 120 us (bench/NOTES.md, "Fifth session").
// Returns the NCCL communicator when it wins, nullptr for staged MPI.
static std::unique_ptr<Communicator> measure_auto_comm(Engine& e, Communicator& host, const Config& cfg) {
  auto nccl = make_nccl_communicator(host, e.stream(), host.local_rank(), cfg.comm.timeout_s);
  const int world = host.world_size();
  const size_t qbytes = sizeof(float) * static_cast<size_t>(e.dim());
  const size_t cbytes = sizeof(Candidate) * 2 * static_cast<size_t>(std::min(cfg.search.k_max, 100));
  // Every rank must enter every host collective below, also after a local failure (pinned memory
  // refused, a CUDA error): a rank that threw straight to build_index's status check would meet
  // the others' barrier or broadcast with its all-reduce, and mismatched MPI collectives end in
  // MPI_ERR_TRUNCATE or garbage instead of the reason. So local steps are guarded, a failed rank
  // skips its remaining local steps but not the collectives, and the failure travels in
  // host.check, which stands in for the barrier.
  bool ok = true;
  std::string msg;
  auto local = [&](const std::function<void()>& f) {
    if (!ok) return;
    try {
      f();
    } catch (const std::exception& ex) {
      ok = false;
      msg = ex.what();
    }
  };
  void *hq = nullptr, *hc = nullptr, *hg = nullptr;
  local([&] {
    hq = e.alloc_host_staging(qbytes);  // pinned, as the index's staged path uses
    hc = e.alloc_host_staging(cbytes);
    hg = e.alloc_host_staging(cbytes * world);
    // The engine's buffers are not initialised before the first search: give the timed copies
    // and collectives defined bytes (compute-sanitizer initcheck reads NCCL's loads of them).
    std::memset(hq, 0, qbytes);
    std::memset(hc, 0, cbytes);
    e.copy_from_host(e.query_buffer(), hq, qbytes);
    e.copy_from_host(e.local_buffer(), hc, cbytes);
  });
  host.check(ok, msg);
  auto staged = [&] {
    if (host.rank() == 0) local([&] { e.copy_to_host(hq, e.query_buffer(), qbytes); });
    host.broadcast(hq, qbytes, 0);
    if (host.rank() != 0) local([&] { e.copy_from_host(e.query_buffer(), hq, qbytes); });
    local([&] { e.copy_to_host(hc, e.local_buffer(), cbytes); });
    host.allgather(hc, hg, cbytes);
    if (host.rank() == 0) local([&] { e.copy_from_host(e.gathered_buffer(), hg, cbytes * world); });
  };
  auto direct = [&] {
    local([&] {
      nccl->broadcast_async(e.query_buffer(), qbytes, 0);
      nccl->allgather_async(e.local_buffer(), e.gathered_buffer(), cbytes);
      nccl->wait("ncclAllGather (comm.backend auto: timing)");
    });
  };
  // The two alternate round by round, so that a drift in clocks or load over the measurement
  // (the GPU still settling after the upload) weighs on both alike.
  std::vector<double> t_nccl, t_mpi;
  for (int i = 0; i < 35; ++i) {
    for (int which = 0; which < 2; ++which) {
      host.check(ok, msg);  // the barrier; it also ends the timing on every rank after a failure
      const auto t0 = Clock::now();
      which == 0 ? direct() : staged();
      if (i >= 5) (which == 0 ? t_nccl : t_mpi).push_back(seconds_since(t0) * 1e6);
    }
  }
  host.check(ok, msg);
  auto median = [](std::vector<double>& t) {
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    return t[t.size() / 2];
  };
  const double us_nccl = median(t_nccl), us_mpi = median(t_mpi);
  int pick_nccl = us_nccl <= us_mpi ? 1 : 0;
  host.broadcast(&pick_nccl, sizeof pick_nccl, 0);
  if (host.rank() == 0)
    spdlog::info("comm.backend auto: {} (a batch-1 search's broadcast + all-gather took {:.0f} us with nccl, {:.0f} us "
                 "with mpi staged through host memory)",
                 pick_nccl ? "nccl" : "mpi", us_nccl, us_mpi);
  if (!pick_nccl) nccl.reset();
  return nccl;
}

void check_k(long long k, std::int64_t k_max, std::int64_t total_rows) {
  const std::int64_t kmax = std::min<std::int64_t>(k_max, total_rows);
  SHARDTOPK_EXPECTS(k >= 1 && k <= kmax, "k=", k, " out of range: allowed 1 .. ", kmax,
                    (k <= kmax ? "" : kmax == total_rows ? " (the corpus rows)" : " (search.k_max)"));
}

EngineLimits index_engine_limits(const SearchConfig& search, int world_size) {
  // One query row more than batch_max: the status row of run_data_path.
  return EngineLimits{search.batch_max + 1, search.k_max, world_size, 1};
}

EngineBackend choose_backend(const Config& cfg, const Communicator& host_comm) {
  EngineBackend backend = cfg.engine.backend;
  if (backend == EngineBackend::kAuto) backend = cuda_available() ? EngineBackend::kCuda : EngineBackend::kCpu;
  if (backend == EngineBackend::kCuda) {
    SHARDTOPK_EXPECTS(built_with_cuda(), "engine.backend 'cuda': this shardtopk was built without CUDA "
                                         "(reconfigure with -DSHARDTOPK_CUDA=ON) ; use engine.backend 'cpu'");
    const int ngpu = cuda_device_count();
    SHARDTOPK_EXPECTS(ngpu > 0, "engine.backend 'cuda': no GPU is visible; use engine.backend 'cpu' or 'auto'");
    SHARDTOPK_EXPECTS(host_comm.local_size() <= ngpu, "engine.backend 'cuda': ", host_comm.local_size(),
                      " ranks on this node but only ", ngpu, " GPU(s) visible; start at most ", ngpu,
                      " ranks per node (one rank per GPU)");
  }
  return backend;
}

namespace {

/// Streams a ShardInput::streamed shard's rows into the just-built engine; returns their norms.
using StreamRows = std::function<NormSummary(Engine&)>;

std::unique_ptr<ShardedIndex> build_index_impl(const Config& cfg, Metric metric, std::int64_t total_rows,
                                               RowRange rows, const ShardInput& shard,
                                               std::unique_ptr<Communicator> host_comm, IngestStats stats,
                                               const StreamRows& stream_rows);
}  // namespace

std::unique_ptr<ShardedIndex> build_index(const Config& cfg, Metric metric, std::int64_t total_rows, RowRange rows,
                                          const ShardInput& shard, std::unique_ptr<Communicator> host_comm,
                                          IngestStats stats) {
  SHARDTOPK_EXPECTS(!shard.streamed, "build_index: a streamed shard is load_index's own (ShardInput::streamed)");
  return build_index_impl(cfg, metric, total_rows, rows, shard, std::move(host_comm), stats, {});
}

namespace {
std::unique_ptr<ShardedIndex> build_index_impl(const Config& cfg, Metric metric, std::int64_t total_rows,
                                               RowRange rows, const ShardInput& shard,
                                               std::unique_ptr<Communicator> host_comm, IngestStats stats,
                                               const StreamRows& stream_rows) {
  const auto tu = Clock::now();
  const int world = host_comm->world_size();
  bool ok = true;
  std::string msg;
  std::unique_ptr<Engine> engine;
  try {
    if (stats.max_row_norm_row < 0 && shard.rows > 0 && !shard.streamed) {  // norms not measured by the caller
      NormSummary norms;
      if (shard.generated) {  // every generated value is below 4 in magnitude (generator.hpp): a bound
        norms = NormSummary{4.0 * std::sqrt(static_cast<double>(shard.dim)), shard.first_row};
      } else {
        norms = shard_norms(shard.data, shard.rows, shard.dim, rows.lo, resolve_threads(cfg, host_comm->local_size()));
        check_corpus_norms(metric, norms, shard.dim, "corpus row");
      }
      stats.max_row_norm = norms.max_norm;
      stats.max_row_norm_row = norms.row;
    }
    const EngineBackend backend = choose_backend(cfg, *host_comm);
    const EngineLimits lim = index_engine_limits(cfg.search, world);
    if (backend == EngineBackend::kCuda) {
      engine = make_cuda_engine(shard, metric, cfg.engine.dtype, host_comm->local_rank(), lim);
    } else {
      engine = make_cpu_engine(shard, metric, cfg.engine.dtype, resolve_threads(cfg, host_comm->local_size()), lim);
    }
    if (shard.streamed) {  // the rows now, while the engine copies the previous block to its device
      const auto ts = Clock::now();
      const NormSummary norms = stream_rows(*engine);
      stats.read_s = seconds_since(ts);
      stats.max_row_norm = norms.max_norm;
      stats.max_row_norm_row = norms.row;
    }
    stats.upload_s = seconds_since(tu);
    if (host_comm->rank() == 0 && !shard.generated)
      spdlog::info("rank 0: engine {} built (rows uploaded) in {:.2f} s", engine->name(), stats.upload_s);
    else
      spdlog::debug("rank {}: engine built in {:.3f} s", host_comm->rank(), stats.upload_s);
    stats.engine_resident_bytes = engine->resident_bytes();
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
  }
  host_comm->check(ok, msg);
  allgather_norms(*host_comm, metric, &stats);

  // Communicator for the data path.
  std::unique_ptr<Communicator> data_comm;
  CommBackend cb = cfg.comm.backend;
  if (cb == CommBackend::kAuto)
    cb = (engine->space() == MemSpace::kDevice && built_with_nccl()) ? CommBackend::kNccl : CommBackend::kMpi;
  const bool measure = cfg.comm.backend == CommBackend::kAuto && cb == CommBackend::kNccl && world > 1;
  ok = true;
  try {
    if (measure) {
      data_comm = measure_auto_comm(*engine, *host_comm, cfg);
    } else if (cb == CommBackend::kNccl) {
      SHARDTOPK_EXPECTS(engine->space() == MemSpace::kDevice,
                        "comm.backend 'nccl' needs the CUDA engine (engine.backend 'cuda' or 'auto' with GPUs)");
      data_comm = make_nccl_communicator(*host_comm, engine->stream(), host_comm->local_rank(), cfg.comm.timeout_s);
    }
  } catch (const CommError&) {
    // A host collective timed out or failed: its request is abandoned (MpiCommunicator::wait),
    // so no further collective may follow on this rank (it would be matched with the abandoned
    // one, or write into its dead stack buffers). End the job with this message (the callers'
    // end_job / abort_job), as a CommError anywhere else does.
    throw;
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
  }
  host_comm->check(ok, msg);
  stats.total_rows = total_rows;
  stats.dim = shard.dim;
  stats.rows = rows;
  auto index = std::make_unique<ShardedIndex>(cfg, metric, total_rows, rows, std::move(engine), std::move(host_comm),
                                              std::move(data_comm));
  index->set_ingest_stats(stats);
  return index;
}
}  // namespace

std::unique_ptr<ShardedIndex> load_index(const Config& cfg_in, bool log_progress) {
  const auto t0 = Clock::now();
  Config cfg = cfg_in;
  std::unique_ptr<Communicator> host_comm = make_mpi_communicator(cfg.comm.timeout_s);
  const int rank = host_comm->rank(), world = host_comm->world_size();
  init_logging(rank, world);

  bool ok = true;
  std::string msg;
  Metric metric = Metric::kInnerProduct;
  IngestStats stats;
  std::unique_ptr<float[]> shard;
  std::int64_t nrows = 0;
  std::vector<std::int64_t> ids;
  // Read state shared with the streamed path, which reads inside build_index_impl.
  ReadOptions ropt;
  auto tr = Clock::now();
  auto last_log = tr;
  double row_bytes = 0;
  bool streamed = false;
  StreamRows stream_rows;
  try {
    validate(cfg);
    const DatasetInfo info = inspect_dataset(cfg.corpus.path, cfg.corpus.dataset);
    SHARDTOPK_EXPECTS(info.dims.size() == 2, "'", cfg.corpus.path, "': dataset '", info.name,
                      "' must be 2-D [rows, dim], but it is ", info.dims.size(), "-D");
    SHARDTOPK_EXPECTS(info.is_float, "'", cfg.corpus.path, "': dataset '", info.name, "' has dtype ", info.dtype,
                      "; expected float16, float32 or float64");
    SHARDTOPK_EXPECTS(info.dims[0] >= 1 && info.dims[1] >= 1, "'", cfg.corpus.path, "': dataset '", info.name,
                      "' is empty [", info.dims[0], ", ", info.dims[1], "]");
    metric = resolve_metric(cfg);
    stats.total_rows = info.dims[0];
    stats.dim = info.dims[1];
    stats.rows = shard_rows(stats.total_rows, world, rank);
    spdlog::debug("shard plan: rank {} of {} holds rows [{}, {}) ({} of {} rows, dim {})", rank, world, stats.rows.lo,
                  stats.rows.hi, stats.rows.size(), stats.total_rows, stats.dim);
    // Refuse a bad backend before reading anything. The CUDA engine takes inner-product and L2
    // rows streamed: each block is read into pinned memory while the previous one is copied to
    // the GPU (no host copy of the shard). Cosine rows are normalised on the host first.
    streamed = streams_shard(choose_backend(cfg, *host_comm) == EngineBackend::kCuda, metric);

    // Read this rank's rows only, in blocks, on the rank's cores.
    tr = Clock::now();
    last_log = tr;
    ropt.chunk_rows = cfg.engine.read_chunk_rows;
    ropt.threads = resolve_threads(cfg, host_comm->local_size());
    ropt.label = "corpus row";
    ropt.direct_reads = cfg.io.direct_reads;
    ropt.f16c = cfg.io.f16c;
    // Values the engine's storage cannot hold are refused by name (cosine rows are normalised
    // first, so only float32's range applies to them).
    ropt.storage = metric == Metric::kCosine ? Dtype::kFloat32 : cfg.engine.dtype;
    row_bytes = static_cast<double>(stats.dim) * (info.dtype == "float16" ? 2 : info.dtype == "float64" ? 8 : 4);
    if (log_progress && rank == 0) {
      ropt.progress = [&](std::int64_t done, std::int64_t total) {
        if (seconds_since(last_log) > 1.0 || (done == total && seconds_since(tr) > 1.0)) {
          last_log = Clock::now();
          const double sec = seconds_since(tr);
          spdlog::info("reading shard: {}/{} rows ({:.0f}%), {:.1f} s, {:.0f} MB/s", done, total, 100.0 * done / total,
                       sec, done * row_bytes / std::max(sec, 1e-9) / 1e6);
        }
      };
    }
    nrows = stats.rows.size();
    ids.resize(static_cast<size_t>(stats.rows.size()));
    if (!cfg.corpus.ids_dataset.empty()) {
      std::vector<std::int64_t> all = read_int64_vector(cfg.corpus.path, cfg.corpus.ids_dataset);
      SHARDTOPK_EXPECTS(static_cast<std::int64_t>(all.size()) == stats.total_rows, "'", cfg.corpus.path,
                        "': ids dataset '", cfg.corpus.ids_dataset, "' has ", all.size(), " entries but '",
                        cfg.corpus.dataset, "' has ", stats.total_rows, " rows");
      std::copy(all.begin() + stats.rows.lo, all.begin() + stats.rows.hi, ids.begin());
      std::vector<std::int64_t> sorted = std::move(all);
      std::sort(sorted.begin(), sorted.end());
      const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
      SHARDTOPK_EXPECTS(dup == sorted.end(), "'", cfg.corpus.path, "': ids dataset '", cfg.corpus.ids_dataset,
                        "' is not unique: id ", (dup == sorted.end() ? 0 : *dup), " appears more than once");
      SHARDTOPK_EXPECTS(sorted.empty() || sorted.back() != kPadId, "ids dataset: id ", kPadId, " is reserved");
    } else {
      for (std::int64_t i = 0; i < stats.rows.size(); ++i) ids[i] = stats.rows.lo + i;
    }
    if (streamed) {
      stream_rows = [&](Engine& e) {
        tr = Clock::now();
        last_log = tr;
        std::vector<NormSummary> parts;
        read_row_blocks(
            cfg.corpus.path, cfg.corpus.dataset, stats.rows, RowFormat::kFloat32, ropt,
            [&](const RowBlock& b) {
              const float* x = static_cast<const float*>(b.data);
              e.upload_rows(b.first_row - stats.rows.lo, b.rows, x);  // queued: the copy runs meanwhile
              parts.push_back(shard_norms(x, b.rows, b.cols, b.first_row, ropt.threads));
            },
            [&](std::int64_t, std::int64_t n) -> void* { return e.upload_buffer(n); });
        e.finish_upload();
        const NormSummary norms = combine_norms(parts);
        check_corpus_norms(metric, norms, stats.dim, "'" + cfg.corpus.path + "': corpus row");
        if (log_progress && rank == 0) {
          const double sec = seconds_since(tr);
          spdlog::info("rank 0 read its {} rows into its GPU in {:.2f} s ({:.0f} MB/s as stored; each block read "
                       "while the previous one is copied)",
                       nrows, sec, nrows * row_bytes / std::max(sec, 1e-9) / 1e6);
        }
        return norms;
      };
    }
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
  }
  if (ok && !streamed) try {
    // new float[] (not a zeroed std::vector): the reader's threads fault the pages in in parallel.
    shard.reset(new float[static_cast<size_t>(std::max<std::int64_t>(1, nrows * stats.dim))]);
    read_rows_into(cfg.corpus.path, cfg.corpus.dataset, stats.rows, ropt, shard.get());
    const double read_only_s = seconds_since(tr);
    // Score range (admission.hpp): raw row norms, before any cosine normalisation.
    const NormSummary norms = shard_norms(shard.get(), nrows, stats.dim, stats.rows.lo, ropt.threads);
    stats.max_row_norm = norms.max_norm;
    stats.max_row_norm_row = norms.row;
    check_corpus_norms(metric, norms, stats.dim, "'" + cfg.corpus.path + "': corpus row");
    if (metric == Metric::kCosine) {
      // norms computed once at ingest: rows are stored normalised. Messages use global rows;
      // parts are in row order, so the first error names the first zero-norm row.
      parallel_ranges(nrows, range_parts(nrows, std::max(1, ropt.threads), 4096),
                      [&](std::int64_t lo, std::int64_t hi, int) {
                        normalize_rows(shard.get() + lo * stats.dim, hi - lo, stats.dim, stats.rows.lo + lo,
                                       "corpus row");
                      });
    }
    stats.read_s = seconds_since(tr);
    if (log_progress && rank == 0)
      spdlog::info("rank 0 read its {} rows in {:.2f} s ({:.0f} MB/s as stored), then norms{} in {:.2f} s", nrows,
                   read_only_s, nrows * row_bytes / std::max(read_only_s, 1e-9) / 1e6,
                   metric == Metric::kCosine ? " and normalisation" : "", stats.read_s - read_only_s);
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
  }
  host_comm->check(ok, msg);

  ShardInput in{shard.get(), nrows, stats.dim, ids.data()};
  in.streamed = streamed;
  auto index = build_index_impl(cfg, metric, stats.total_rows, stats.rows, in, std::move(host_comm), stats, stream_rows);
  IngestStats final_stats = index->ingest_stats();
  double mine = seconds_since(t0);
  std::vector<double> all(static_cast<size_t>(world));
  index->host_comm().allgather(&mine, all.data(), sizeof(double));
  final_stats.total_s = *std::max_element(all.begin(), all.end());
  index->set_ingest_stats(final_stats);
  if (rank == 0) {
    spdlog::info("corpus {} '{}' [{} x {}], metric {}, {} rank(s); engine {} ({}), comm {}; ingest {:.2f} s",
                 cfg.corpus.path, cfg.corpus.dataset, final_stats.total_rows, final_stats.dim, to_string(metric),
                 world, index->engine().name(), to_string(index->engine().dtype()), index->data_comm().name(),
                 final_stats.total_s);
  }
  return index;
}

ShardedIndex::ShardedIndex(const Config& cfg, Metric metric, std::int64_t total_rows, RowRange rows,
                           std::unique_ptr<Engine> engine, std::unique_ptr<Communicator> host_comm,
                           std::unique_ptr<Communicator> data_comm)
    : cfg_(cfg), metric_(metric), host_comm_(std::move(host_comm)), data_comm_(std::move(data_comm)),
      engine_(std::move(engine)) {
  SHARDTOPK_EXPECTS(engine_ && host_comm_, "ShardedIndex: an engine and a host communicator are required");
  SHARDTOPK_EXPECTS(engine_->metric() == metric, "ShardedIndex: engine metric ", to_string(engine_->metric()),
                    " differs from the index metric ", to_string(metric));
  SHARDTOPK_EXPECTS(engine_->rows() == rows.size(), "ShardedIndex: engine holds ", engine_->rows(),
                    " rows but this rank's range has ", rows.size());
  SHARDTOPK_EXPECTS(cfg_.search.batch_max >= 1 && cfg_.search.k_max >= 1, "ShardedIndex: bad search limits");
  stats_.total_rows = total_rows;
  stats_.dim = engine_->dim();
  stats_.rows = rows;
  stats_.engine_resident_bytes = engine_->resident_bytes();
  const int world = host_comm_->world_size();
  const size_t bk1 = static_cast<size_t>(cfg_.search.batch_max + 1) * cfg_.search.k_max;
  if (metric_ == Metric::kCosine)  // normalised copies; other metrics stage the caller's queries
    host_queries_.assign(static_cast<size_t>(cfg_.search.batch_max) * stats_.dim, 0.0f);
  host_status_.assign(static_cast<size_t>(cfg_.search.k_max), pad_candidate());
  host_ids_.assign(bk1, 0);
  host_scores_.assign(bk1, 0.0f);
  if (engine_->space() == MemSpace::kDevice && this->data_comm().space() == MemSpace::kHost && world > 1) {
    staged_queries_ = static_cast<float*>(
        engine_->alloc_host_staging(sizeof(float) * static_cast<size_t>(cfg_.search.batch_max) * stats_.dim));
    staged_candidates_ = static_cast<Candidate*>(engine_->alloc_host_staging(sizeof(Candidate) * bk1));
    staged_gathered_ = static_cast<Candidate*>(engine_->alloc_host_staging(sizeof(Candidate) * bk1 * world));
  }
}

ShardedIndex::~ShardedIndex() {
  // The data communicator first: NCCL's replayed graphs and registrations refer to the engine's
  // buffers and stream, which must outlive them.
  data_comm_.reset();
}

int ShardedIndex::rank() const { return host_comm_->rank(); }
int ShardedIndex::world_size() const { return host_comm_->world_size(); }

void ShardedIndex::search(const float* queries, int batch, int k, std::int64_t* ids, float* scores) {
  if (rank() != 0) {
    follow_one(/*lock_step=*/true);
    return;
  }
  admit_batch(batch, k, /*prepare_on_device=*/false, [&] {
    // Validated and (cosine) normalised on the host — normalize_rows is the arithmetic every
    // engine's prepare_queries uses — then staged without a wait.
    SHARDTOPK_EXPECTS(queries != nullptr, "no queries given");
    const std::int64_t d = stats_.dim;
    const NormSummary corpus{stats_.max_row_norm, stats_.max_row_norm_row};
    if (metric_ == Metric::kCosine) {  // checked and normalised in a copy, then staged
      admit_query_values(metric_, corpus, queries, batch, d);
      std::copy(queries, queries + static_cast<std::int64_t>(batch) * d, host_queries_.begin());
      normalize_rows(host_queries_.data(), batch, d, 0, "query");
      engine_->stage_queries(host_queries_.data(), batch);
    } else {
      // Staged first (a device engine copies them into pinned memory and queues the upload), then
      // checked in one pass over that copy, still in the CPU's cache, while the upload runs. A
      // rejected batch changes only the staging and query buffers, which every later search
      // stages anew, and counts its upload in the engine's transfer counters.
      engine_->stage_queries(queries, batch);
      const float* staged = engine_->staged_host_queries();
      admit_query_values(metric_, corpus, staged ? staged : queries, batch, d);
    }
    queries_on_host_ = true;
  });
  run_search(batch, k, ids, scores);
}

void ShardedIndex::search_device(const float* d_queries, void* cuda_stream, int batch, int k, std::int64_t* ids,
                                 float* scores) {
  SHARDTOPK_EXPECTS(engine_->space() == MemSpace::kDevice, "search_device needs the CUDA engine (engine is ",
                    engine_->name(), ")");
  if (rank() != 0) {
    follow_one(/*lock_step=*/true);
    return;
  }
  admit_batch(batch, k, /*prepare_on_device=*/true, [&] {
    queries_on_host_ = false;
    SHARDTOPK_EXPECTS(d_queries != nullptr, "no queries given");
    (void)cuda_stream;  // copy_within synchronises the device first, so work on any stream is done
    engine_->copy_within(engine_->query_buffer(), d_queries, sizeof(float) * batch * stats_.dim);
  });
  run_search(batch, k, ids, scores);
}

void ShardedIndex::admit_batch(int batch, int k, bool prepare_on_device, const std::function<void()>& stage_queries) {
  // Rank 0 checks the batch and stages the queries into the engine (device queries are then
  // validated and, for cosine, normalised by the engine), then broadcasts the step's header. A
  // rejected batch is announced too, so that followers calling search() in lock step throw with
  // rank 0; a follow() loop skips it. The index stays usable.
  SHARDTOPK_EXPECTS(!shut_down_, "the index was shut down");
  Header h;
  std::string reject;
  try {
    check_k(k, cfg_.search.k_max, stats_.total_rows);
    SHARDTOPK_EXPECTS(batch >= 1 && batch <= cfg_.search.batch_max, "batch of ", batch,
                      " queries out of range: allowed 1 .. ", cfg_.search.batch_max, " (search.batch_max)");
    stage_queries();
    if (prepare_on_device) engine_->prepare_queries(engine_->query_buffer(), batch);
    h.op = static_cast<std::int32_t>(IndexOp::kSearch);
    h.batch = batch;
    h.k = k;
  } catch (const Error& e) {
    h.op = static_cast<std::int32_t>(IndexOp::kRejected);
    reject = e.what();
  }
  host_comm_->broadcast(&h, sizeof h, 0);
  if (h.op != static_cast<std::int32_t>(IndexOp::kSearch)) throw Error(reject);
}

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
      run_search(h.batch, h.k, nullptr, nullptr);
      return true;
    case IndexOp::kRejected:
      if (lock_step) throw Error("rank 0 rejected the batch");
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

void ShardedIndex::run_search(int batch, int k, std::int64_t* ids, float* scores) {
  bool ok = true;
  const std::string local_error = run_data_path(batch, k, &ok);
  last_batch_ = batch;
  last_k_ = k;
  if (!ok) spdlog::error("rank {}: local search of batch {} (k={}) failed: {}", rank(), batches_ - 1, k, local_error);
  if (rank() != 0) return;

  // Rank 0: the merged status row (row `batch`, multi-rank only) names the failing ranks.
  const int world = world_size();
  std::vector<int> failed;
  if (world > 1) {
    const size_t st = static_cast<size_t>(batch) * k;
    for (int j = 0; j < k; ++j)
      if (is_fail_marker(host_ids_[st + j], host_scores_[st + j], world))
        failed.push_back(static_cast<int>(kFailIdBase - host_ids_[st + j]));
  } else if (!ok) {
    failed.push_back(0);
  }
  if (!failed.empty()) {
    std::sort(failed.begin(), failed.end());
    std::string text;
    for (int r : failed) {
      text += (text.empty() ? "" : "\n") + std::string("rank ") + std::to_string(r) + ": ";
      text += r == 0 ? local_error : "local search failed (the rank's log has the reason)";
    }
    if (static_cast<int>(failed.size()) == k && world > k) text += "\n(only the first k failing ranks are named)";
    throw RemoteError(text, !ok);
  }
  const size_t n = static_cast<size_t>(batch) * k;
  if (ids) std::copy(host_ids_.begin(), host_ids_.begin() + n, ids);
  if (scores) std::copy(host_scores_.begin(), host_scores_.begin() + n, scores);
}

// The data path of one search, on every rank, in stream order:
//   broadcast queries → engine.search → status row → all-gather → merge → export.
// With the CUDA engine and NCCL (or one GPU rank) every step is only queued on the engine's
// stream and the host waits once, at the end, inside the communicator's timeout polling
// (`queued`). Exceptions: batches of 2 or more wait for the broadcast first (the batched engine
// path synchronises its stream once, which must not wait on a collective without a timeout),
// and the failure path. The header broadcast (admit_batch / follow_one) stays outside. With one
// rank the engine queues the export together with its search (search_and_export), so the
// batched path's own wait (its overflow flags) is the only one.
//
// Local failures travel in the all-gather payload, not in an extra collective: every rank
// sends [batch + 1, k] candidates, the last row being its status row. On success that row is
// left as it is (stale candidates, never a marker); on failure slot 0 holds fail_marker(rank)
// and, after the gather, the row is reset to padding. The merge ranks markers (+inf) first, so
// rank 0 reads the failing ranks from row `batch` of the exported answer. Cost: k more
// candidates per rank in the gather, one more merged row and k × 12 bytes more to the host.
// Returns this rank's error message ("" and *ok = true on success).
std::string ShardedIndex::run_data_path(int batch, int k, bool* ok) {
  const int world = world_size();
  const size_t qbytes = sizeof(float) * batch * stats_.dim;
  const int rows_out = world > 1 ? batch + 1 : batch;  // + the status row
  const size_t cbytes = sizeof(Candidate) * rows_out * k;
  Engine& e = *engine_;
  Communicator& dc = data_comm();
  const bool device = e.space() == MemSpace::kDevice;
  const bool staged = device && dc.space() == MemSpace::kHost && world > 1;
  const bool queued = device && !staged;

  // 1. queries from rank 0 to every rank
  if (world > 1) {
    if (staged) {
      // Rank 0 sends what it staged (search(): the engine's pinned copy, read-only here while its
      // upload also reads it); device queries (search_device) come back to the host first.
      float* send = staged_queries_;
      if (rank() == 0) {
        if (queries_on_host_) {
          send = const_cast<float*>(e.staged_host_queries());  // the root's buffer is only read
          SHARDTOPK_ASSERT(send != nullptr);  // a device engine keeps a host copy of what it staged
        } else {
          e.copy_to_host(staged_queries_, e.query_buffer(), qbytes);
        }
      }
      dc.broadcast(send, qbytes, 0);
      if (rank() != 0) e.copy_from_host(e.query_buffer(), staged_queries_, qbytes);
    } else {
      dc.broadcast_async(e.query_buffer(), qbytes, 0);
      if (batch > 1) dc.wait("ncclBroadcast");
    }
  }

  // 2. local top-k; a failure marks this rank's status row (multi-rank) instead of a collective
  *ok = true;
  std::string msg;
  const auto ts = Clock::now();
  try {
    maybe_inject_fault(rank(), batches_++);
    if (world == 1)  // the answer is this search's list: its export is queued with it (one wait)
      e.search_and_export(e.query_buffer(), batch, k, e.local_buffer());
    else
      e.search(e.query_buffer(), batch, k, e.local_buffer());
  } catch (const std::exception& ex) {
    *ok = false;
    msg = ex.what();
  }
  local_search_s_ += seconds_since(ts);
  Candidate* status_row = e.local_buffer() + static_cast<size_t>(batch) * k;
  if (!*ok && world > 1) {
    if (queued) dc.wait("ncclBroadcast");  // failure path: the stream must be idle before the copy
    std::fill(host_status_.begin(), host_status_.begin() + k, pad_candidate());
    host_status_[0] = fail_marker(rank());
    e.copy_from_host(status_row, host_status_.data(), sizeof(Candidate) * k);
  }

  // 3. all-gather [batch + 1, k] candidates per rank, merge on rank 0
  const Candidate* final_list = e.local_buffer();
  if (world > 1) {
    if (staged) {
      e.copy_to_host(staged_candidates_, e.local_buffer(), cbytes);
      dc.allgather(staged_candidates_, staged_gathered_, cbytes);
      if (rank() == 0) e.copy_from_host(e.gathered_buffer(), staged_gathered_, cbytes * world);
    } else {
      dc.allgather_async(e.local_buffer(), e.gathered_buffer(), cbytes);
    }
    if (!*ok) {  // failure path only: clear the marker so a later search cannot read it again
      dc.wait("ncclAllGather");
      std::fill(host_status_.begin(), host_status_.begin() + k, pad_candidate());
      e.copy_from_host(status_row, host_status_.data(), sizeof(Candidate) * k);
    }
    if (rank() == 0) {
      e.merge(e.gathered_buffer(), world, rows_out, k, e.merged_buffer());
      final_list = e.merged_buffer();
    }
  }
  if (rank() != 0) {
    if (queued) dc.wait("ncclAllGather");  // this step's collectives done, within the timeout
    return msg;
  }

  // 4. only the final [batch (+1), k] ids and scores come back to the host: one wait
  if (world == 1 && !*ok) return msg;
  if (world > 1) e.enqueue_export(final_list, rows_out, k);
  if (queued && world > 1) dc.wait("ncclAllGather");
  else if (device) e.synchronize();
  e.read_export(host_ids_.data(), host_scores_.data());
  return msg;
}

std::vector<Candidate> ShardedIndex::last_local_candidates() const {
  std::vector<Candidate> out(static_cast<size_t>(last_batch_) * last_k_);
  if (!out.empty()) engine_->copy_to_host(out.data(), engine_->local_buffer(), out.size() * sizeof(Candidate));
  return out;
}

}  // namespace shardtopk
