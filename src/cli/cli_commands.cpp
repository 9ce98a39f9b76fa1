#include "cli/cli_commands.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/log.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/ingest.hpp"
#include "core/stats.hpp"
#include "service/service.hpp"
#include "shardtopk/results.hpp"

namespace shardtopk::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Argument checks that need no corpus rows (only file headers), made before the (possibly long)
// ingest. The same on every rank, so every rank fails alike and rank 0 speaks.
/// True when both paths name one existing file (same device and inode).
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void check_search_args(const SearchArgs& a, const Config& cfg) {
  SHARDTOPK_EXPECTS(a.k >= 1, "--k ", a.k, " out of range: allowed 1 .. ", cfg.search.k_max,
                    " (K is the number of neighbours per query and must be at least 1)");
  SHARDTOPK_EXPECTS(a.k <= cfg.search.k_max, "--k ", a.k, " out of range: allowed 1 .. ", cfg.search.k_max,
                    " (search.k_max; raise it with --set search.k_max=", a.k, ")");
  // K larger than the corpus: the row count is in the file header, so say it before loading.
  // A file that cannot be inspected is left for the index to report (with the rank).
  std::int64_t corpus_rows = -1;
  try {
    const DatasetInfo ci = inspect_dataset(cfg.corpus.path, cfg.corpus.dataset);
    if (ci.dims.size() == 2) corpus_rows = ci.dims[0];
  } catch (const Error&) {
  }
  SHARDTOPK_EXPECTS(corpus_rows < 0 || a.k <= corpus_rows, "--k ", a.k, " is larger than the corpus: '",
                    cfg.corpus.path, "' dataset '", cfg.corpus.dataset, "' has ", corpus_rows,
                    " rows (from the file header; nothing was loaded)");
  SHARDTOPK_EXPECTS(a.batch >= 0 && a.batch <= cfg.search.batch_max, "--batch ", a.batch,
                    " out of range: allowed 1 .. ", cfg.search.batch_max,
                    " (search.batch_max; raise it with --set search.batch_max=N), or 0 for search.batch_max");
  SHARDTOPK_EXPECTS(a.max_queries >= -1, "--max-queries ", a.max_queries, " must be -1 (all) or >= 0");
  const DatasetInfo qi = inspect_dataset(a.queries, a.queries_dataset);  // exists, names what is there
  SHARDTOPK_EXPECTS(qi.dims.size() == 2 && qi.is_float, "'", a.queries, "': queries dataset '", qi.name,
                    "' must be a 2-D float dataset [Q, dim]");
  for (const std::string* out : {&a.out, &a.timings_json}) {
    if (out->empty()) continue;
    for (const std::string* in : {&cfg.corpus.path, &a.queries})
      SHARDTOPK_EXPECTS(!same_file(*out, *in), "refusing to write '", *out, "': it is the ",
                        (in == &a.queries ? "queries" : "corpus"), " file '", *in, "' (choose another output path)");
    const auto slash = out->find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : out->substr(0, slash));
    SHARDTOPK_EXPECTS(::access(dir.c_str(), W_OK) == 0, "cannot write '", *out, "': folder '", dir,
                      "' does not exist or is not writable");
  }
}

Config load_with_overrides(const std::string& path, const std::vector<std::string>& overrides) {
  Config cfg = load_config(path);
  for (const auto& kv : overrides) apply_override(cfg, kv);
  validate(cfg);
  return cfg;
}

/// How a job command (search, serve) ends on an error that escaped it, on every rank: a failed
/// or timed-out collective ends the job (exit 2) without unwinding the NCCL/CUDA state a dead
/// peer may hold; an error every rank knows (RemoteError) is printed by rank 0 (exit 1); any other
/// error is known to this rank alone, so it ends every rank (exit 1) rather than leave them waiting.
int end_job(std::exception_ptr err, int rank) {
  try {
    std::rethrow_exception(err);
  } catch (const CommError& e) {
    std::fprintf(stderr, "shardtopk: error: %s\n", e.what());
    abort_job(2);
  } catch (const RemoteError& e) {
    if (rank == 0) std::fprintf(stderr, "shardtopk: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardtopk: error: rank %d: %s\n", rank, e.what());
    abort_job(1);
  }
}

}  // namespace

int search_all(ShardedIndex& index, const Config& cfg, const SearchArgs& a, int rank);

int run_search(const SearchArgs& a, int* argc, char*** argv) {
  MpiSession mpi(argc, argv);
  const int rank = mpi.rank();
  init_logging(rank, mpi.world_size());
  try {
    Config cfg;
    try {
      cfg = load_with_overrides(a.config, a.overrides);
      check_search_args(a, cfg);
    } catch (const Error& e) {
      // The config is the same file on every rank, so every rank fails alike; rank 0 speaks.
      if (rank == 0) std::fprintf(stderr, "shardtopk: error: %s\n", e.what());
      return 1;
    }
    std::unique_ptr<ShardedIndex> holder = load_index(cfg);
    ShardedIndex& index = *holder;
    try {
      return search_all(index, cfg, a, rank);
    } catch (const CommError& e) {
      // A collective timed out or failed: a peer is stalled or dead. End the job here, while the
      // index is alive: unwinding would run the NCCL/CUDA destructors, which may wait on work
      // that depends on the missing peer.
      std::fprintf(stderr, "shardtopk: error: %s\n", e.what());
      abort_job(2);
    }
  } catch (const std::exception&) {
    return end_job(std::current_exception(), rank);
  }
}

int search_all(ShardedIndex& index, const Config& cfg, const SearchArgs& a, int rank) {
  {
    const std::int64_t dim = index.dim();

    // Rank 0 reads the queries; a bad file or a bad query stops every rank.
    HostMatrix q;
    std::int64_t nq = 0;
    bool ok = true;
    std::string msg;
    if (rank == 0) {
      try {
        q = read_matrix(a.queries, a.queries_dataset, "query");
        SHARDTOPK_EXPECTS(q.cols == dim, "'", a.queries, "': queries have dimension ", q.cols, " but the corpus has ",
                          dim);
        nq = q.rows;
        if (a.max_queries >= 0) nq = std::min(nq, a.max_queries);
        if (index.metric() == Metric::kCosine) {
          // name the query index of a zero-norm query before any batch starts
          for (std::int64_t i = 0; i < nq; ++i) {
            bool zero = true;
            for (std::int64_t d = 0; d < dim && zero; ++d) zero = q.data[i * dim + d] == 0.0f;
            SHARDTOPK_EXPECTS(!zero, "'", a.queries, "': query ", i, " has zero norm (cosine needs a direction)");
          }
        }
      } catch (const std::exception& e) {
        ok = false;
        msg = e.what();
      }
    }
    index.host_comm().check(ok, msg);
    index.host_comm().broadcast(&nq, sizeof nq, 0);

    // Followers serve rank 0's searches until it shuts the index down (also on its errors).
    if (rank != 0) {
      index.follow();
      return 0;
    }
    struct ShutdownGuard {  // not after a CommError: the collective could not complete
      ShardedIndex& idx;
      bool comm_failed = false;
      ~ShutdownGuard() {
        if (comm_failed) return;
        try {
          idx.shutdown();
        } catch (const std::exception& e) {
          std::fprintf(stderr, "shardtopk: error: %s\n", e.what());
          abort_job(2);
        }
      }
    } guard{index};

    const int batch_max = a.batch > 0 ? std::min(a.batch, cfg.search.batch_max) : cfg.search.batch_max;
    std::vector<std::int64_t> ids(rank == 0 ? static_cast<size_t>(nq * a.k) : 0);
    std::vector<float> scores(ids.size());
    std::vector<double> batch_ms;
    // Queries [b0, b0 + b) of the file; a batch rank 0 rejects is named by those indices.
    auto search_batch = [&](std::int64_t b0, int b, std::int64_t* out_ids, float* out_scores) {
      try {
        index.search(q.data.data() + b0 * dim, b, a.k, out_ids, out_scores);
      } catch (const RemoteError&) {
        throw;
      } catch (const CommError&) {
        guard.comm_failed = true;
        throw;  // handled by run_search while the index is alive
      } catch (const Error& e) {
        throw RemoteError(std::string("queries [") + std::to_string(b0) + ", " + std::to_string(b0 + b) + "): " +
                              e.what(),
                          true);
      }
    };
    // One search per distinct batch size (full batches, the last one) before the timed loop:
    // the CUDA engine captures a graph per (batch size, k) on first use (tens of ms), which
    // would otherwise land in the timings. Answers are deterministic, so the warm-up's own
    // answers (of the first queries) are discarded.
    double warmup_ms = 0;
    if (index.engine_info().space == MemSpace::kDevice && nq > 0) {
      std::vector<int> sizes{static_cast<int>(std::min<std::int64_t>(batch_max, nq))};
      if (nq % batch_max != 0 && nq > batch_max) sizes.push_back(static_cast<int>(nq % batch_max));
      std::vector<std::int64_t> wid(static_cast<size_t>(sizes[0]) * a.k);
      std::vector<float> wsc(wid.size());
      const auto tw = Clock::now();
      for (int b : sizes) search_batch(0, b, wid.data(), wsc.data());
      warmup_ms = std::chrono::duration<double, std::milli>(Clock::now() - tw).count();
      spdlog::info("warm-up: {} batch(es) (sizes {}) in {:.1f} ms, not in the timings", sizes.size(),
                   sizes.size() == 1 ? std::to_string(sizes[0]) : std::to_string(sizes[0]) + ", " + std::to_string(sizes[1]),
                   warmup_ms);
    }
    if (rank == 0) spdlog::info("searching {} queries, k={}, batches of {}", nq, a.k, batch_max);
    const auto t0 = Clock::now();
    auto last_log = t0;
    for (std::int64_t b0 = 0; b0 < nq; b0 += batch_max) {
      const int b = static_cast<int>(std::min<std::int64_t>(batch_max, nq - b0));
      const auto tb = Clock::now();
      search_batch(b0, b, ids.data() + b0 * a.k, scores.data() + b0 * a.k);
      batch_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - tb).count());
      if (rank == 0)
        spdlog::debug("batch {}: queries [{}, {}), k={}, {:.3f} ms", batch_ms.size() - 1, b0, b0 + b, a.k,
                      batch_ms.back());
      if (rank == 0 && std::chrono::duration<double>(Clock::now() - last_log).count() > 2.0) {
        last_log = Clock::now();
        spdlog::info("searched {}/{} queries", b0 + b, nq);
      }
    }
    const double search_s = std::chrono::duration<double>(Clock::now() - t0).count();

    if (rank == 0) {
      const IngestStats& st = index.ingest_stats();
      const double qps = search_s > 0 ? static_cast<double>(nq) / search_s : 0;
      nlohmann::json j = {
          {"corpus", cfg.corpus.path},
          {"rows", index.total_rows()},
          {"dim", dim},
          {"metric", to_string(index.metric())},
          {"world_size", index.world_size()},
          {"engine", index.engine_info().name},
          {"comm", index.data_comm().name()},
          {"dtype", to_string(index.engine_info().dtype)},
          {"threads_per_rank", cfg.engine.threads > 0 ? cfg.engine.threads : resolve_threads(cfg, index.host_comm().local_size())},
          {"queries", nq},
          {"k", a.k},
          {"batch", batch_max},
          {"batches", batch_ms.size()},
          {"ingest_s", st.total_s},
          {"read_s_rank0", st.read_s},
          {"upload_s_rank0", st.upload_s},
          {"warmup_ms", warmup_ms},
          {"search_s", search_s},
          {"qps", qps},
          {"batch_ms_p50", percentile(batch_ms, 50)},
          {"batch_ms_p99", percentile(batch_ms, 99)},
          {"batch_ms_mean", batch_ms.empty() ? 0.0 : search_s * 1000.0 / static_cast<double>(batch_ms.size())},
          {"resident_bytes_rank0", st.engine_resident_bytes},
      };
      std::printf("ingest %.2f s | %lld queries, k=%d, %zu batch(es) of <=%d | batch ms p50 %.3f p99 %.3f | QPS %.1f | "
                  "%s/%s, %d rank(s)\n",
                  st.total_s, static_cast<long long>(nq), a.k, batch_ms.size(), batch_max, percentile(batch_ms, 50),
                  percentile(batch_ms, 99), qps, index.engine_info().name.c_str(), index.data_comm().name().c_str(),
                  index.world_size());
      if (!a.timings_json.empty()) {
        std::ofstream out(a.timings_json);
        SHARDTOPK_EXPECTS(out.good(), "cannot write '", a.timings_json, "'");
        out << j.dump(2) << "\n";
      }
      if (!a.out.empty()) {
        ResultMeta m;
        m.metric = index.metric();
        m.k = a.k;
        m.world_size = index.world_size();
        m.engine = index.engine_info().name;
        m.comm = index.data_comm().name();
        m.dtype = index.engine_info().dtype;
        m.corpus_path = cfg.corpus.path;
        m.corpus_dataset = cfg.corpus.dataset;
        m.corpus_rows = index.total_rows();
        m.corpus_dim = dim;
        m.queries_path = a.queries;
        m.queries_dataset = a.queries_dataset;
        write_results(a.out, m, ids, scores, nq);
        spdlog::info("wrote {} ([{} x {}] ids and scores)", a.out, nq, a.k);
      }
    }
    return 0;
  }
}

int run_serve(const ServeArgs& a, int* argc, char*** argv) {
  MpiSession mpi(argc, argv);
  const int rank = mpi.rank();
  init_logging(rank, mpi.world_size());
  Config cfg;
  try {
    cfg = load_with_overrides(a.config, a.overrides);
  } catch (const Error& e) {
    if (rank == 0) std::fprintf(stderr, "shardtopk: error: %s\n", e.what());
    return 1;
  }
  try {
    service::ServeOptions o;
    o.port_file = a.port_file;
    return service::serve(cfg, o);
  } catch (const std::exception&) {
    return end_job(std::current_exception(), rank);
  }
}

int run_info(const std::string& path, bool json) {
  const FileInfo fi = inspect_file(path);
  if (json) {
    nlohmann::json j;
    j["path"] = fi.path;
    for (const auto& d : fi.datasets)
      j["datasets"].push_back({{"name", d.name}, {"shape", d.dims}, {"dtype", d.dtype}, {"chunked", d.chunked},
                               {"filters", d.filters}});
    for (const auto& kv : fi.attributes) j["attributes"][kv.first] = kv.second;
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("%s\n", fi.path.c_str());
  std::printf("  %-28s %-20s %-9s %s\n", "dataset", "shape", "dtype", "layout");
  for (const auto& d : fi.datasets) {
    std::string shape = "[";
    for (size_t i = 0; i < d.dims.size(); ++i) shape += (i ? ", " : "") + std::to_string(d.dims[i]);
    shape += "]";
    std::string layout = d.chunked ? "chunked" : "contiguous";
    if (!d.filters.empty()) layout += " " + d.filters;
    std::printf("  %-28s %-20s %-9s %s\n", d.name.c_str(), shape.c_str(), d.dtype.c_str(), layout.c_str());
  }
  if (!fi.attributes.empty()) {
    std::printf("  attributes:\n");
    for (const auto& kv : fi.attributes) std::printf("    %s = %s\n", kv.first.c_str(), kv.second.c_str());
  }
  return 0;
}

int run_eval(const EvalArgs& a) {
  const EvalReport r = evaluate(a.results, a.truth);
  std::printf("%lld queries, K=%d, metric %s (tie-tolerant, eps = 1e-5*(max(|best|,|kth|)+1))\n",
              static_cast<long long>(r.queries), r.k, r.metric.c_str());
  if (r.result_k > r.k)
    std::printf("  note: '%s' has K=%d columns but the truth has %d neighbours per query: recall is evaluated at "
                "K=%d on the first %d columns of each (best-first) result list\n",
                a.results.c_str(), r.result_k, r.k, r.k, r.k);
  nlohmann::json j = {{"queries", r.queries}, {"k", r.k}, {"result_k", r.result_k}, {"metric", r.metric}, {"near_tie_swaps", r.near_tie_swaps},
                      {"misses", r.misses}, {"duplicates", r.duplicates}, {"scores_verified", r.scores_verified}};
  for (const auto& kv : r.recall) {
    std::printf("  recall@%-4d %.4f\n", kv.first, kv.second);
    j["recall@" + std::to_string(kv.first)] = kv.second;
  }
  std::printf("  near-tie swaps (id differs from the truth, score within eps): %lld; misses at K: %lld"
              " (of which repeated ids: %lld)\n",
              static_cast<long long>(r.near_tie_swaps), static_cast<long long>(r.misses),
              static_cast<long long>(r.duplicates));
  if (!r.scores_verified)
    std::printf("  note: the truth file has no train/test rows, so near ties are judged by the result file's own"
                " scores\n");
  if (a.show > 0) {
    // Show a few answers with their class labels (Fashion-MNIST) or words (GloVe).
    std::int64_t nq = 0, k = 0;
    const auto ids = read_int64_matrix(a.results, "ids", &nq, &k);
    const FileInfo fi = inspect_file(a.truth);
    auto has = [&](const std::string& n) {
      return std::any_of(fi.datasets.begin(), fi.datasets.end(), [&](const DatasetInfo& d) { return d.name == n; });
    };
    static const char* kFashion[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                     "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
    std::vector<std::int64_t> train_lab, test_lab;
    if (has("train_labels") && has("test_labels")) {
      train_lab = read_int64_vector(a.truth, "train_labels");
      test_lab = read_int64_vector(a.truth, "test_labels");
    }
    std::vector<std::string> train_words, test_words;
    if (has("train_words") && has("test_words")) {
      train_words = read_string_vector(a.truth, "train_words");
      test_words = read_string_vector(a.truth, "test_words");
    }
    auto label = [&](const std::vector<std::int64_t>& lab, std::int64_t i) -> std::string {
      if (i < 0 || i >= static_cast<std::int64_t>(lab.size())) return "?";
      const auto v = lab[i];
      return v >= 0 && v < 10 ? kFashion[v] : std::to_string(v);
    };
    auto word = [](const std::vector<std::string>& w, std::int64_t i) -> std::string {
      return i >= 0 && i < static_cast<std::int64_t>(w.size()) ? w[i] : "?";
    };
    const int shown_k = static_cast<int>(std::min<std::int64_t>(k, 5));
    for (std::int64_t qi = 0; qi < std::min<std::int64_t>(a.show, nq); ++qi) {
      std::printf("  query %lld", static_cast<long long>(qi));
      if (!test_lab.empty()) std::printf(" (%s)", label(test_lab, qi).c_str());
      if (!test_words.empty()) std::printf(" '%s'", word(test_words, qi).c_str());
      std::printf(" ->");
      for (int j2 = 0; j2 < shown_k; ++j2) {
        const auto id = ids[qi * k + j2];
        std::printf(" %lld", static_cast<long long>(id));
        if (!train_lab.empty()) std::printf(" (%s)", label(train_lab, id).c_str());
        if (!train_words.empty()) std::printf(" '%s'", word(train_words, id).c_str());
      }
      std::printf("\n");
    }
  }
  if (!a.json_out.empty()) {
    std::ofstream out(a.json_out);
    SHARDTOPK_EXPECTS(out.good(), "cannot write '", a.json_out, "'");
    out << j.dump(2) << "\n";
  }
  return 0;
}

int run_plan(const PlanArgs& a) {
  Config cfg = load_with_overrides(a.config, a.overrides);
  const DatasetInfo info = inspect_dataset(cfg.corpus.path, cfg.corpus.dataset);
  SHARDTOPK_EXPECTS(info.dims.size() == 2, "'", cfg.corpus.path, "': dataset '", info.name, "' must be 2-D");
  const std::int64_t n = info.dims[0], dim = info.dims[1];
  const int per_node = a.ranks_per_node > 0 ? a.ranks_per_node : a.ranks;
  const int ngpu = cuda_device_count();
  const bool use_gpu = cfg.engine.backend == EngineBackend::kCuda ||
                       (cfg.engine.backend == EngineBackend::kAuto && ngpu > 0);
  const EngineLimits lim = index_engine_limits(cfg.search);  // what load_index builds
  const bool streamed = streams_shard(use_gpu, resolve_metric(cfg));
  std::printf("corpus %s '%s' [%lld x %lld], %s storage, %d rank(s), %d per node, engine %s, %d GPU(s) visible\n",
              cfg.corpus.path.c_str(), info.name.c_str(), static_cast<long long>(n), static_cast<long long>(dim),
              to_string(cfg.engine.dtype).c_str(), a.ranks, per_node, use_gpu ? "cuda" : "cpu", ngpu);
  std::printf("%6s %12s %12s %20s %16s %16s  %s\n", "rank", "row_lo", "rows", "load_peak_host_bytes", "engine_bytes",
              "gpu_free_bytes", "fits");
  bool all_fit = true;
  for (int r = 0; r < a.ranks; ++r) {
    const RowRange rr = shard_rows(n, a.ranks, r);
    // engine_bytes: what the engine allocates at start-up and refuses before allocating when it
    // cannot have it (device memory for cuda, host memory for cpu); equals its resident bytes.
    // The index's own buffers (queries, candidates) live beside the engine's.
    const std::uint64_t eng =
        use_gpu ? cuda_engine_device_bytes(rr.size(), dim, cfg.engine.dtype, lim)
                : cpu_engine_host_bytes(rr.size(), dim, cfg.engine.dtype, lim, resolve_threads(cfg, per_node));
    const std::uint64_t idx = index_buffer_bytes(cfg.search, a.ranks, dim);
    const std::uint64_t dev = eng > UINT64_MAX - idx ? UINT64_MAX : eng + idx;
    // load_peak_host_bytes: host memory at the peak of loading: the rows read from the file and
    // their ids (streamed into the CUDA engine: the ids and its pinned blocks), plus the CPU
    // engine's buffers (built while the rows are still held).
    const std::uint64_t rows_bytes = load_peak_host_bytes(rr.size(), dim, streamed, cfg.engine.read_chunk_rows);
    const std::uint64_t host = use_gpu ? rows_bytes : (dev > UINT64_MAX - rows_bytes ? UINT64_MAX : rows_bytes + dev);
    std::string fits = "-";
    std::uint64_t free_b = 0, total_b = 0;
    if (use_gpu) {
      const int local = r % per_node;
      if (local >= ngpu) {
        fits = "no GPU (local rank " + std::to_string(local) + " >= " + std::to_string(ngpu) + " GPUs)";
        all_fit = false;
      } else if (cuda_device_memory(local, &free_b, &total_b)) {
        fits = dev <= free_b ? "yes" : "NO: add ranks";
        all_fit = all_fit && dev <= free_b;
      }
    }
    std::printf("%6d %12lld %12lld %20llu %16llu %16llu  %s\n", r, static_cast<long long>(rr.lo),
                static_cast<long long>(rr.size()), static_cast<unsigned long long>(host),
                static_cast<unsigned long long>(dev), static_cast<unsigned long long>(free_b), fits.c_str());
  }
  std::printf("load_peak_host_bytes: peak host memory while loading a shard%s; engine_bytes: %s memory the %s engine "
              "allocates at start-up (checked before allocating)\n",
              streamed ? " (streamed: ids and pinned blocks of engine.read_chunk_rows rows)" : "",
              use_gpu ? "device" : "host", use_gpu ? "cuda" : "cpu");
  return all_fit ? 0 : 3;
}

}  // namespace shardtopk::cli
