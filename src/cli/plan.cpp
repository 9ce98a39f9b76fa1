// `shardtopk plan`: each rank's rows, loading peak and engine bytes from the config and the
// corpus header alone, and whether each shard's engine fits (the check `search` and `serve`
// make on every rank before reading the shard: check_engine_fits).
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "core/log.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/ingest.hpp"
#include "shardtopk/shard_plan.hpp"
#include "shardtopk/storage.hpp"

namespace shardtopk::cli {

int run_plan(const PlanArgs& a) {
  init_logging(0, 1);
  Config cfg = load_with_overrides(a.config, a.overrides);
  // With storage.dir, the base a start-up loads (the snapshot the directory names, else the
  // corpus) and the capacity the directory recorded (read without opening it).
  std::optional<StorageManifest> manifest;
  if (!cfg.storage.dir.empty()) manifest = read_storage_manifest(cfg.storage.dir);
  if (manifest && !manifest->snapshot_path.empty()) {
    cfg.corpus.path = manifest->snapshot_path;
    cfg.corpus.dataset = "train";
  } else {
    check_corpus_path(cfg);
  }
  const std::int64_t recorded = manifest ? manifest->capacity_rows : 0;
  const DatasetInfo info = inspect_dataset(cfg.corpus.path, cfg.corpus.dataset);
  SHARDTOPK_EXPECTS(info.dims.size() == 2, "'", cfg.corpus.path, "': dataset '", info.name, "' must be 2-D");
  const std::int64_t n = info.dims[0], dim = info.dims[1];
  SHARDTOPK_EXPECTS(a.ranks_per_node >= 0, "--ranks-per-node ", a.ranks_per_node,
                    " out of range: give 1 or more (left out: every rank on this node)");
  const int per_node = a.ranks_per_node > 0 ? a.ranks_per_node : a.ranks;
  const int on_host = std::min(per_node, a.ranks);  // ranks sharing one machine's memory
  const int ngpu = cuda_device_count();
  const bool use_gpu = cfg.engine.backend == EngineBackend::kCuda ||
                       (cfg.engine.backend == EngineBackend::kAuto && ngpu > 0);
  const bool streamed = streams_shard(use_gpu, resolve_metric(cfg));
  const int threads = resolve_threads(cfg, per_node);
  std::printf("corpus %s '%s' [%lld x %lld], %s storage, %d rank(s), %d per node, engine %s, %d GPU(s) visible\n",
              cfg.corpus.path.c_str(), info.name.c_str(), static_cast<long long>(n), static_cast<long long>(dim),
              to_string(cfg.engine.dtype).c_str(), a.ranks, per_node, use_gpu ? "cuda" : "cpu", ngpu);
  if (!cfg.corpus.attributes.empty()) {
    // What filters may name, checked from the headers as loading checks them.
    std::string names;
    for (const AttributeSpec& s : corpus_attribute_schema(cfg, n))
      names += (names.empty() ? "" : ", ") + s.name + " (" + to_string(s.type) + ")";
    std::printf("attributes (corpus.attributes; filters name these): %s; %zu bytes per row on each rank, beside its "
                "shard (not in engine_bytes)\n",
                names.c_str(), 8 * cfg.corpus.attributes.size());
  }
  std::printf("%6s %12s %12s %20s %20s %20s  %s\n", "rank", "row_lo", "rows", "load_peak_host_bytes", "engine_bytes",
              "limit_bytes", "fits");
  bool all_fit = true;
  std::string first_refusal;
  for (int r = 0; r < a.ranks; ++r) {
    const RowRange rr = shard_rows(n, a.ranks, r);
    // engine_bytes: what the engine and the index's buffers beside it allocate at start-up, and
    // what is refused before anything is read when it cannot be had (device memory for cuda,
    // host memory for cpu); equals the rank's resident bytes.
    // With storage.dir the engine holds storage.capacity_rows slots (rank_capacity_rows).
    const std::int64_t slots = rank_capacity_rows(cfg, rr.size(), a.ranks, recorded, r);
    const std::uint64_t dev = rank_resident_bytes(use_gpu, slots, dim, cfg.engine.dtype, cfg.search, a.ranks, threads);
    // load_peak_host_bytes: host memory at the peak of loading: the rows read from the file and
    // their ids (streamed into the CUDA engine: the ids and its pinned blocks), plus the CPU
    // engine's buffers (built while the rows are still held).
    const std::uint64_t rows_bytes = load_peak_host_bytes(rr.size(), dim, streamed, cfg.engine.read_chunk_rows);
    const std::uint64_t host = use_gpu ? rows_bytes : (dev > UINT64_MAX - rows_bytes ? UINT64_MAX : rows_bytes + dev);
    std::string fits = "-";
    std::uint64_t limit = 0, total_b = 0;
    const int local = r % per_node;
    if (use_gpu && local >= ngpu) {
      fits = "no GPU (local rank " + std::to_string(local) + " >= " + std::to_string(ngpu) + " GPUs)";
      all_fit = false;
    } else if (!use_gpu || cuda_device_memory(local, &limit, &total_b)) {
      if (!use_gpu) limit = host_memory_bytes() / static_cast<std::uint64_t>(on_host);
      // The verdict is the start-up check's own, so that plan and search cannot disagree.
      try {
        check_engine_fits(use_gpu ? EngineBackend::kCuda : EngineBackend::kCpu, slots, dim, cfg.engine.dtype,
                          cfg.search, a.ranks, threads, local, on_host);
        fits = "yes";
      } catch (const Error& e) {
        fits = "NO";
        all_fit = false;
        if (first_refusal.empty()) first_refusal = "rank " + std::to_string(r) + ": " + e.what();
      }
    }
    std::printf("%6d %12lld %12lld %20llu %20llu %20llu  %s\n", r, static_cast<long long>(rr.lo),
                static_cast<long long>(rr.size()), static_cast<unsigned long long>(host),
                static_cast<unsigned long long>(dev), static_cast<unsigned long long>(limit), fits.c_str());
  }
  std::printf("load_peak_host_bytes: peak host memory while loading a shard%s; engine_bytes: %s memory the %s engine "
              "allocates at start-up; limit_bytes: %s (engine_bytes are checked against it on every rank before the "
              "shard is read)\n",
              streamed ? " (streamed: ids and pinned blocks of engine.read_chunk_rows rows)" : "",
              use_gpu ? "device" : "host", use_gpu ? "cuda" : "cpu",
              use_gpu ? "free memory of the rank's GPU on this node"
                      : "this machine's physical memory over the ranks on a node (--ranks-per-node)");
  if (!cfg.storage.dir.empty())
    std::printf("updatable (storage.dir '%s'): each rank's engine holds %lld slots (storage.capacity_rows%s), "
                "engine_bytes counts them\n",
                cfg.storage.dir.c_str(),
                static_cast<long long>(rank_capacity_rows(cfg, shard_rows(n, a.ranks, 0).size(), a.ranks, recorded)),
                cfg.storage.capacity_rows > 0 ? ""
                : recorded > 0 ? " = 0: the directory's recorded capacity over the ranks"
                               : " = 0: rank 0's rows + max(1024, rows / 4)");
  if (!first_refusal.empty()) std::printf("does not fit: %s\n", first_refusal.c_str());
  return all_fit ? 0 : 3;
}

}  // namespace shardtopk::cli
