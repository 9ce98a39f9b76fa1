// From a corpus to a rank's running index: shard plan, the read of this rank's rows, checks,
// backend and communicator choice, engine construction and upload (DESIGN.md "Data flow").
#include "shardtopk/ingest.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "shardtopk/communicator.hpp"
#include "core/log.hpp"
#include "core/parallel.hpp"
#include "shardtopk/space.hpp"
#include "index/admission.hpp"
#include "index/index_impl.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/storage.hpp"

namespace shardtopk {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// What a pass over a shard's rows measures: their norms (admission.hpp) and, for a base that
/// a storage directory's log applies to, their part of its identity (Storage::check_base).
struct RowsSeen {
  NormSummary norms;
  BaseIdentity base;
};

/// Streams a ShardInput::streamed shard's rows into the just-built engine.
using StreamRows = std::function<RowsSeen(Engine&)>;

/// Rank 0 runs `open` (which opens the storage directory and may wait up to storage.lock_wait_s
/// for its lock, calling the tick it is given about once a second) while the other ranks wait in
/// broadcasts that each tick feeds: the wait may exceed comm.timeout_s. What `open` throws is
/// rank 0's error (`ok`, `msg`), checked by the caller.
void rank0_opens_storage(Communicator& comm, const std::function<void(const std::function<void()>&)>& open, bool* ok,
                         std::string* msg) {
  std::int64_t waiting = 1;
  if (comm.rank() == 0) {
    try {
      open([&] {
        if (comm.world_size() > 1) comm.broadcast(&waiting, sizeof waiting, 0);
      });
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      *ok = false;
      *msg = e.what();
    }
    waiting = 0;
  }
  do comm.broadcast(&waiting, sizeof waiting, 0);
  while (waiting != 0);
}

/// A string from rank 0 to every rank.
void broadcast_string(Communicator& comm, std::string* s) {
  std::uint64_t n = s->size();
  comm.broadcast(&n, sizeof n, 0);
  s->resize(static_cast<std::size_t>(n));
  if (n > 0) comm.broadcast(&(*s)[0], static_cast<std::size_t>(n), 0);
}

std::unique_ptr<ShardedIndex::Impl> build_index_impl(const Config& cfg, Metric metric, std::int64_t total_rows,
                                               RowRange rows, const ShardInput& shard,
                                               std::unique_ptr<Communicator> host_comm, IngestStats stats,
                                               const StreamRows& stream_rows, std::unique_ptr<Storage> storage = nullptr,
                                               std::uint64_t base_seq = 0,
                                               std::future<void>* snapshot_check = nullptr) {
  // The check reads through `storage`: it ends before `storage` does, whatever throws here.
  struct JoinCheck {
    std::future<void>* f;
    ~JoinCheck() {
      if (f && f->valid()) f->wait();
    }
  } join_check{snapshot_check};
  const auto tu = Clock::now();
  bool ok = true;
  std::string msg;
  std::unique_ptr<Space> space;
  std::unique_ptr<Engine> engine;
  // The log's base when it is not a snapshot: its identity ties the directory to these rows.
  const bool tie_base = !cfg.storage.dir.empty() && base_seq == 0 && !shard.generated;
  BaseIdentity base{0, shard.dim, 0, 0};
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
    EngineLimits lim = index_engine_limits(cfg.search);
    lim.attribute_columns = shard.attributes ? shard.attributes->columns() : 0;
    const int threads = resolve_threads(cfg, host_comm->local_size());
    if (backend == EngineBackend::kCuda) {
      const int device = host_comm->local_rank();
      space = make_cuda_space(device);
      engine = make_cuda_engine(shard, metric, cfg.engine.dtype, lim, engine_options(cfg, device, threads),
                                space->stream());
    } else {
      space = make_host_space();
      engine = make_cpu_engine(shard, metric, cfg.engine.dtype, lim, engine_options(cfg, -1, threads));
    }
    if (shard.streamed) {  // the rows now, while the engine copies the previous block to its device
      const auto ts = Clock::now();
      const RowsSeen seen = stream_rows(*engine);
      stats.read_s = seconds_since(ts);
      stats.max_row_norm = seen.norms.max_norm;
      stats.max_row_norm_row = seen.norms.row;
      base = seen.base;
    } else if (tie_base) {
      base = base_identity_part(shard.data, shard.ids, shard.rows, shard.dim, rows.lo,
                                resolve_threads(cfg, host_comm->local_size()));
    }
    // Messages name the largest row by its id (the row's position in a snapshot means nothing).
    const std::int64_t at = stats.max_row_norm_row - rows.lo;
    if (shard.ids && at >= 0 && at < shard.rows) stats.max_row_norm_row = shard.ids[at];
    stats.upload_s = seconds_since(tu);
    if (host_comm->rank() == 0 && !shard.generated)
      spdlog::info("rank 0: engine {} built (rows uploaded) in {:.2f} s", engine->info().name, stats.upload_s);
    else
      spdlog::debug("rank {}: engine built in {:.3f} s", host_comm->rank(), stats.upload_s);
  } catch (const std::exception& e) {
    ok = false;
    msg = e.what();
  }
  host_comm->check(ok, msg);
  allgather_norms(*host_comm, metric, &stats);
  if (tie_base) {
    std::vector<BaseIdentity> parts(static_cast<std::size_t>(host_comm->world_size()));
    host_comm->allgather(&base, parts.data(), sizeof base);
    base = BaseIdentity{0, shard.dim, 0, 0};
    for (const BaseIdentity& p : parts) base = add_base_parts(base, p);
  }

  // The data path's communicator: its staging (if any) is sized for the largest broadcast and
  // all-gather block (a rank's status slot and its [batch_max, k_max] candidates).
  const std::size_t query_bytes = sizeof(float) * static_cast<std::size_t>(std::max<std::int64_t>(shard.dim, 1));
  const std::size_t block = sizeof(Candidate) * (1 + static_cast<std::size_t>(cfg.search.batch_max) *
                                                         static_cast<std::size_t>(cfg.search.k_max));
  std::unique_ptr<Communicator> data_comm = choose_data_comm(
      cfg, *host_comm, *space, query_bytes, std::max(block, query_bytes * static_cast<std::size_t>(cfg.search.batch_max)));
  auto index = std::make_unique<ShardedIndex::Impl>(
      cfg, metric, total_rows, rows, shard.attributes ? shard.attributes->schema() : AttributeSchema{}, stats,
      std::move(space), std::move(engine), std::move(host_comm), std::move(data_comm));
  if (!cfg.storage.dir.empty()) {
    // Rank 0's snapshot checksum (read while the rows loaded), before any log record is applied.
    bool sum_ok = true;
    std::string sum_msg;
    if (snapshot_check && snapshot_check->valid()) {
      const auto tw = Clock::now();
      try {
        snapshot_check->get();
      } catch (const std::exception& e) {
        sum_ok = false;
        sum_msg = e.what();
      }
      if (sum_ok)
        spdlog::info("rank 0: snapshot checksum verified ({:.2f} s waited after the rows loaded)", seconds_since(tw));
    }
    index->protocol.host().check(sum_ok, sum_msg);
    if (storage) {
      try {
        storage->finish_recovery();
      } catch (const std::exception& e) {  // the files stay; the next start-up removes them
        spdlog::warn("storage '{}': removing superseded files: {}", cfg.storage.dir, e.what());
      }
    }
    // Rank 0 opens the directory here when the caller did not (rows given in memory) and checks
    // that its log was written against these rows before any record is replayed. The capacity
    // this start gives the index is recorded once the log has replayed (a restart without
    // storage.capacity_rows keeps it): a start that fails leaves the recorded one as it was.
    std::int64_t capacity = shard.capacity, total_capacity = 0;
    std::vector<std::int64_t> capacities(static_cast<std::size_t>(index->protocol.world_size()));
    index->protocol.host().allgather(&capacity, capacities.data(), sizeof capacity);
    for (std::int64_t c : capacities) total_capacity += c;
    bool base_ok = true;
    std::string base_msg;
    rank0_opens_storage(
        index->protocol.host(),
        [&](const std::function<void()>& tick) {
          if (!storage) {
            StorageOptions so = storage_options(cfg.storage, shard.dim, metric);
            so.on_lock_wait = tick;
            storage = std::make_unique<Storage>(so);
          }
          if (tie_base) storage->check_base(base);
        },
        &base_ok, &base_msg);
    index->protocol.host().check(base_ok, base_msg);
    Storage* const opened = storage.get();  // rank 0's; owned by the index from here on
    index->enable_updates(std::move(storage), base_seq);
    bool cap_ok = true;
    std::string cap_msg;
    if (opened && total_capacity > 0) {
      try {
        opened->record_capacity(total_capacity);
      } catch (const std::exception& e) {
        cap_ok = false;
        cap_msg = e.what();
      }
    }
    index->protocol.host().check(cap_ok, cap_msg);
  }
  index->finish();
  return index;
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

RowFormat stream_format(bool cuda_engine, Metric metric, const std::string& stored_dtype) {
  return streams_shard(cuda_engine, metric) && stored_dtype == "float16" ? RowFormat::kFloat16Bits
                                                                          : RowFormat::kFloat32;
}

std::int64_t rank_capacity_rows(const Config& cfg, std::int64_t shard_rows, int world, std::int64_t recorded_rows,
                                int rank) {
  if (cfg.storage.dir.empty()) return shard_rows;
  if (cfg.storage.capacity_rows > 0) {
    SHARDTOPK_EXPECTS(cfg.storage.capacity_rows >= shard_rows, "storage.capacity_rows = ", cfg.storage.capacity_rows,
                      " is less than a rank's ", shard_rows, " rows: raise it, or add ranks");
    return cfg.storage.capacity_rows;
  }
  if (recorded_rows > 0 && world >= 1) {  // the directory's capacity, split over this run's ranks as rows are
    const std::int64_t share = shardtopk::shard_rows(recorded_rows, world, rank).size();
    if (share >= shard_rows) return share;
  }
  return shard_rows + std::max<std::int64_t>(1024, shard_rows / 4);
}

std::int64_t total_capacity_rows(const Config& cfg, std::int64_t total_rows, int world, std::int64_t recorded_rows) {
  std::int64_t sum = 0;
  for (int r = 0; r < world; ++r)
    sum += rank_capacity_rows(cfg, shard_rows(total_rows, world, r).size(), world, recorded_rows, r);
  return sum;
}

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

std::uint64_t rank_resident_bytes(bool cuda, std::int64_t rows, std::int64_t dim, Dtype dtype,
                                  const SearchConfig& search, int world_size, int threads) {
  const EngineLimits lim = index_engine_limits(search);
  const std::uint64_t eng = cuda ? cuda_engine_device_bytes(rows, dim, dtype, lim)
                                 : cpu_engine_host_bytes(rows, dim, dtype, lim, threads);
  const std::uint64_t idx = index_buffer_bytes(search, world_size, dim);
  return eng > UINT64_MAX - idx ? UINT64_MAX : eng + idx;
}

void check_engine_fits(EngineBackend backend, std::int64_t rows, std::int64_t dim, Dtype dtype,
                       const SearchConfig& search, int world_size, int threads, int device, int ranks_on_host) {
  const EngineLimits lim = index_engine_limits(search);
  if (backend != EngineBackend::kCuda) {
    check_cpu_engine_fits(rows, dim, dtype, lim, threads, index_buffer_bytes(search, world_size, dim), ranks_on_host);
    return;
  }
  std::uint64_t free_b = 0, total_b = 0;
  if (!cuda_device_memory(device, &free_b, &total_b)) return;
  const std::uint64_t need = rank_resident_bytes(true, rows, dim, dtype, search, world_size, threads);
  SHARDTOPK_EXPECTS(need <= free_b, "CUDA engine on device ", device, ": the shard of ", rows, " rows x ", dim,
                    " dims in ", to_string(dtype), " with search.batch_max=", search.batch_max,
                    " and search.k_max=", search.k_max, " needs ", need, " bytes of device memory (`shardtopk plan` "
                    "shows it as engine_bytes) but only ", free_b, " of ", total_b, " bytes are free; add ranks "
                    "(mpirun -np) so that each shard is smaller",
                    (dtype == Dtype::kFloat32 ? ", or store the shard as float16/bfloat16 (engine.dtype)" : ""),
                    ", or lower search.batch_max / search.k_max");
}

std::unique_ptr<ShardedIndex> build_index(const Config& cfg, Metric metric, std::int64_t total_rows, RowRange rows,
                                          const ShardInput& shard, std::unique_ptr<Communicator> host_comm,
                                          IngestStats stats) {
  SHARDTOPK_EXPECTS(!shard.streamed, "build_index: a streamed shard is load_index's own (ShardInput::streamed)");
  // The log lines of an index built from memory read like the CLI's: its time format, the rank.
  if (host_comm) init_logging(host_comm->rank(), host_comm->world_size());
  ShardInput in = shard;
  if (!cfg.storage.dir.empty() && in.capacity == 0) {
    // The directory's recorded capacity (read without opening it; build_index_impl opens it).
    std::int64_t recorded = 0;
    bool ok = true;
    std::string msg;
    if (host_comm->rank() == 0) {
      try {
        const std::optional<StorageManifest> m = read_storage_manifest(cfg.storage.dir);
        recorded = m ? m->capacity_rows : 0;
      } catch (const std::exception& e) {
        ok = false;
        msg = e.what();
      }
    }
    host_comm->check(ok, msg);
    host_comm->broadcast(&recorded, sizeof recorded, 0);
    in.capacity = rank_capacity_rows(cfg, shard.rows, host_comm->world_size(), recorded, host_comm->rank());
  }
  return std::make_unique<ShardedIndex>(build_index_impl(cfg, metric, total_rows, rows, in, std::move(host_comm), stats, {}));
}

std::unique_ptr<ShardedIndex> load_index(const Config& cfg_in, bool log_progress) {
  const auto t0 = Clock::now();
  Config cfg = cfg_in;
  std::unique_ptr<Communicator> host_comm = make_mpi_communicator(cfg.comm.timeout_s);
  const int rank = host_comm->rank(), world = host_comm->world_size();
  init_logging(rank, world);

  bool ok = true;
  std::string msg;
  // An updatable index (storage.dir): rank 0 opens and recovers the directory first; the
  // snapshot it holds, if any, is the base every rank loads instead of corpus.path.
  std::unique_ptr<Storage> storage;
  // Rank 0 reads the snapshot whole for its checksum while the ranks load their rows from it;
  // build_index_impl checks the result before replaying the log (declared after `storage`:
  // destroyed, and so joined, before it).
  std::future<void> snapshot_check;
  std::uint64_t base_seq = 0;
  std::int64_t base_normalized = 0;
  std::int64_t recorded_capacity = 0;  // the directory's slots over all ranks (0: none recorded)
  std::string snapshot;
  if (!cfg.storage.dir.empty()) {
    // While another process holds the directory's lock (the orphaned ranks of a killed job, for
    // a few seconds), rank 0 waits up to storage.lock_wait_s and the other ranks with it.
    rank0_opens_storage(
        *host_comm,
        [&](const std::function<void()>& tick) {
          validate(cfg);
          const std::optional<StorageManifest> man = read_storage_manifest(cfg.storage.dir);
          std::int64_t dim = 0;
          Metric m = Metric::kInnerProduct;
          if (man && !man->snapshot_path.empty()) {
            dim = man->dim;
            m = man->metric;
            // The snapshot's rows were stored for its metric (cosine: normalised): another one
            // would score them wrongly.
            const Metric want = resolve_metric(cfg);
            SHARDTOPK_EXPECTS(want == m, "storage '", cfg.storage.dir, "' holds a snapshot written for metric ",
                              to_string(m), ", configured metric is ", to_string(want));
          } else {
            m = resolve_metric(cfg);
            const DatasetInfo di = inspect_dataset(cfg.corpus.path, cfg.corpus.dataset);
            SHARDTOPK_EXPECTS(di.dims.size() == 2, "'", cfg.corpus.path, "': dataset '", di.name,
                              "' must be 2-D [rows, dim]");
            dim = di.dims[1];
          }
          StorageOptions so = storage_options(cfg.storage, dim, m);
          if (!man || man->snapshot_path.empty()) so.base_corpus = cfg.corpus.path;
          so.defer_cleanup = true;  // superseded files stay until the snapshot is verified
          so.on_lock_wait = tick;
          storage = std::make_unique<Storage>(so);
          recorded_capacity = storage->recorded_capacity();
          snapshot = storage->snapshot_path();
          base_seq = storage->snapshot_seq();
          if (!snapshot.empty()) {
            const SnapshotInfo si = inspect_snapshot(snapshot);
            snapshot_check = std::async(std::launch::async, [s = storage.get()] { s->verify_snapshot(); });
            base_normalized = si.normalized ? 1 : 0;
            for (const std::string& a : cfg.corpus.attributes) {
              bool found = false;
              for (const auto& [name, type] : si.attributes) found = found || name == attribute_name(a);
              SHARDTOPK_EXPECTS(found, "snapshot '", snapshot, "' has no attribute '", attribute_name(a),
                                "' (corpus.attributes names it)");
            }
            spdlog::info("storage '{}': loading snapshot {} (seq {}, {} rows) instead of corpus.path", cfg.storage.dir,
                         snapshot, base_seq, si.rows);
          }
        },
        &ok, &msg);
    host_comm->check(ok, msg);
    broadcast_string(*host_comm, &snapshot);
    host_comm->broadcast(&recorded_capacity, sizeof recorded_capacity, 0);
    host_comm->broadcast(&base_seq, sizeof base_seq, 0);
    host_comm->broadcast(&base_normalized, sizeof base_normalized, 0);
    if (!snapshot.empty()) {
      cfg.corpus.path = snapshot;
      cfg.corpus.dataset = "train";
      cfg.corpus.ids_dataset = "ids";
      for (std::string& a : cfg.corpus.attributes) a = "attributes/" + attribute_name(a);
    }
  }
  Metric metric = Metric::kInnerProduct;
  IngestStats stats;
  std::unique_ptr<float[]> shard;
  std::int64_t nrows = 0;
  std::vector<std::int64_t> ids;
  AttributeTable attributes;
  // Read state shared with the streamed path, which reads inside build_index_impl.
  ReadOptions ropt;
  auto tr = Clock::now();
  auto last_log = tr;
  double row_bytes = 0;
  bool streamed = false;
  RowFormat format = RowFormat::kFloat32;  // of the streamed blocks
  StreamRows stream_rows;
  try {
    validate(cfg);
    const DatasetInfo info = inspect_dataset(cfg.corpus.path, cfg.corpus.dataset);
    SHARDTOPK_EXPECTS(info.dims.size() == 2, "'", cfg.corpus.path, "': dataset '", info.name,
                      "' must be 2-D [rows, dim], but it is ", info.dims.size(), "-D");
    SHARDTOPK_EXPECTS(info.is_float, "'", cfg.corpus.path, "': dataset '", info.name, "' has dtype ", info.dtype,
                      "; expected float16, float32 or float64");
    SHARDTOPK_EXPECTS((info.dims[0] >= 1 || !snapshot.empty()) && info.dims[1] >= 1, "'", cfg.corpus.path,
                      "': dataset '", info.name, "' is empty [", info.dims[0], ", ", info.dims[1], "]");
    metric = resolve_metric(cfg);
    stats.total_rows = info.dims[0];
    stats.dim = info.dims[1];
    stats.rows = shard_rows(stats.total_rows, world, rank);
    spdlog::debug("shard plan: rank {} of {} holds rows [{}, {}) ({} of {} rows, dim {})", rank, world, stats.rows.lo,
                  stats.rows.hi, stats.rows.size(), stats.total_rows, stats.dim);
    // Refuse a bad backend before reading anything. The CUDA engine takes inner-product and L2
    // rows streamed: each block is read into pinned memory while the previous one is copied to
    // the GPU (no host copy of the shard). Cosine rows are normalised on the host first.
    const EngineBackend backend = choose_backend(cfg, *host_comm);
    streamed = streams_shard(backend == EngineBackend::kCuda, metric);
    format = stream_format(backend == EngineBackend::kCuda, metric, info.dtype);
    // The engine's and the index's start-up bytes against this machine, before any row is read
    // (`plan` shows them).
    check_engine_fits(backend, rank_capacity_rows(cfg, stats.rows.size(), world, recorded_capacity, rank), stats.dim,
                      cfg.engine.dtype, cfg.search, world, resolve_threads(cfg, host_comm->local_size()),
                      host_comm->local_rank(), host_comm->local_size());

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
          const double rate = done / std::max(sec, 1e-9);
          spdlog::info("reading shard: {}/{} rows ({:.0f}%), {:.1f} s, {:.0f} rows/s, {:.0f} MB/s, ETA {:.0f} s", done,
                       total, 100.0 * done / total, sec, rate, rate * row_bytes / 1e6,
                       done > 0 ? (total - done) / rate : 0.0);
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
      const auto pad = std::find(all.begin(), all.end(), kPadId);
      SHARDTOPK_EXPECTS(pad == all.end(), "'", cfg.corpus.path, "': ids dataset '", cfg.corpus.ids_dataset,
                        "' holds id ", kPadId, " (INT64_MAX, reserved: it marks the empty slots of short answers) at "
                        "row ", pad - all.begin(), "; give that row another id");
      std::vector<std::int64_t> sorted = std::move(all);
      std::sort(sorted.begin(), sorted.end());
      const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
      SHARDTOPK_EXPECTS(dup == sorted.end(), "'", cfg.corpus.path, "': ids dataset '", cfg.corpus.ids_dataset,
                        "' is not unique: id ", (dup == sorted.end() ? 0 : *dup), " appears more than once");
    } else {
      for (std::int64_t i = 0; i < stats.rows.size(); ++i) ids[i] = stats.rows.lo + i;
    }
    // Attribute columns for filters: this rank's rows of each corpus.attributes dataset.
    attributes = AttributeTable(read_attribute_columns(cfg.corpus.path, cfg.corpus.attributes, stats.total_rows,
                                                       stats.rows),
                                ids, ropt.threads);
    if (streamed) {
      stream_rows = [&](Engine& e) {
        tr = Clock::now();
        last_log = tr;
        std::vector<NormSummary> parts;
        BaseIdentity base{0, stats.dim, 0, 0};
        // float16 datasets travel as their binary16 bits (stream_format): the norms and the
        // base identity convert each value exactly, giving the bits of the float32 values.
        const bool bits = format == RowFormat::kFloat16Bits;
        // The row norms: measured by the engine as it stores the rows (the CUDA engine, on the
        // device), else here. The base identity of a storage directory: here.
        const bool host_norms = !e.measures_loaded_norms();
        const bool identity = !cfg.storage.dir.empty() && snapshot.empty();
        // A block's host work runs between its read and the next (on a helper thread, beside
        // the next read, it measured no faster: docs/PERFORMANCE.md, "Ingestion").
        double host_work = 0, wait_copies = 0;  // seconds (debug log)
        read_row_blocks(
            cfg.corpus.path, cfg.corpus.dataset, stats.rows, format, ropt,
            [&](const RowBlock& b) {
              const std::int64_t local = b.first_row - stats.rows.lo;
              if (bits)  // queued: the copy runs meanwhile
                e.load_rows_bits(local, b.rows, static_cast<const std::uint16_t*>(b.data));
              else
                e.load_rows(local, b.rows, static_cast<const float*>(b.data));
              const auto t = Clock::now();
              if (host_norms)
                parts.push_back(shard_norms(b.data, format, b.rows, b.cols, b.first_row, ropt.threads, ropt.f16c));
              if (identity)
                base = add_base_parts(base, base_identity_part(b.data, format, ids.data() + local, b.rows, b.cols,
                                                               b.first_row, ropt.threads, ropt.f16c));
              host_work += seconds_since(t);
            },
            [&](std::int64_t, std::int64_t n) -> void* {
              const auto t = Clock::now();
              void* buf = bits ? static_cast<void*>(e.load_buffer_bits(n)) : static_cast<void*>(e.load_buffer(n));
              wait_copies += seconds_since(t);
              return buf;
            });
        const auto tf = Clock::now();
        e.finish_load();
        spdlog::debug("rank {}: streamed load: {:.3f} s waiting for free buffers (copies to the GPU), {:.3f} s "
                      "for the host's work on the rows ({}), {:.3f} s in finish_load",
                      rank, wait_copies, host_work,
                      host_norms ? (identity ? "row norms, base identity" : "row norms")
                                 : (identity ? "base identity" : "none"),
                      seconds_since(tf));
        NormSummary norms = combine_norms(parts);
        if (!host_norms) {  // the engine's: its local row, as a row of the file
          const Engine::LoadedNorms n = e.loaded_norms();
          norms = n.row < 0 ? NormSummary{} : NormSummary{n.max_norm, stats.rows.lo + n.row};
        }
        check_corpus_norms(metric, norms, stats.dim, "'" + cfg.corpus.path + "': corpus row");
        if (log_progress && rank == 0) {
          const double sec = seconds_since(tr);
          spdlog::info("rank 0 read its {} rows into its GPU in {:.2f} s ({:.0f} MB/s as stored; blocks sent as {}; "
                       "each block read while the previous one is copied; row norms on the {})",
                       nrows, sec, nrows * row_bytes / std::max(sec, 1e-9) / 1e6,
                       bits ? "float16 bits" : "float32", host_norms ? "host" : "GPU");
        }
        return RowsSeen{norms, base};
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
    if (metric == Metric::kCosine && !base_normalized) {  // a snapshot holds them normalised already
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
  in.stream_format = format;
  in.attributes = &attributes;
  in.capacity = rank_capacity_rows(cfg, nrows, world, recorded_capacity, rank);
  auto index = build_index_impl(cfg, metric, stats.total_rows, stats.rows, in, std::move(host_comm), stats, stream_rows,
                                std::move(storage), base_seq, &snapshot_check);
  double mine = seconds_since(t0);
  std::vector<double> all(static_cast<size_t>(world));
  index->protocol.host().allgather(&mine, all.data(), sizeof(double));
  index->stats.total_s = *std::max_element(all.begin(), all.end());
  if (rank == 0) {
    const EngineInfo e = index->protocol.engine().info();
    spdlog::info("corpus {} '{}' [{} x {}], metric {}, {} rank(s); engine {} ({}), comm {}; ingest {:.2f} s",
                 cfg.corpus.path, cfg.corpus.dataset, index->stats.total_rows, index->stats.dim, to_string(metric),
                 world, e.name, to_string(e.dtype), index->protocol.data().name(), index->stats.total_s);
  }
  return std::make_unique<ShardedIndex>(std::move(index));
}

}  // namespace shardtopk
