// `shardtopk search`: every rank loads its shard, rank 0 reads the queries file, the ranks
// search it batch by batch; rank 0 prints the timings and writes the result file.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/stats.hpp"
#include "shardtopk/ingest.hpp"
#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "core/log.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/index.hpp"
#include "shardtopk/results.hpp"

namespace shardtopk::cli {
namespace {

using Clock = std::chrono::steady_clock;


// --search-after SCORE,ID: a previous page's last (score, id), as a reply prints it.
std::pair<double, std::int64_t> parse_search_after(const std::string& text) {
  const std::size_t comma = text.find(',');
  std::size_t used_s = 0, used_i = 0;
  double score = 0;
  long long id = 0;
  bool ok = comma != std::string::npos;
  try {
    if (ok) score = std::stod(text.substr(0, comma), &used_s);
    if (ok) id = std::stoll(text.substr(comma + 1), &used_i);
  } catch (const std::exception&) {
    ok = false;
  }
  ok = ok && used_s == comma && used_i == text.size() - comma - 1 && std::isfinite(score);
  SHARDTOPK_EXPECTS(ok, "--search-after '", text, "': give SCORE,ID (a finite score and an int64 id, e.g. 0.75,1234)");
  // The score is read as the nearest float32 (a row's score, as the previous page reported it).
  SHARDTOPK_EXPECTS(std::isfinite(static_cast<float>(score)), "--search-after '", text, "': the score ",
                    text.substr(0, comma), " is beyond float32's range (scores are float32)");
  return {score, id};
}

// --min-score / --max-distance against the index's metric.
void check_bound_flags(const SearchArgs& a, Metric metric) {
  const bool l2 = metric == Metric::kL2;
  SHARDTOPK_EXPECTS(!a.min_score || !l2, "--min-score is for inner_product and cosine; this index ranks by l2 "
                    "distance: give --max-distance");
  SHARDTOPK_EXPECTS(!a.max_distance || l2, "--max-distance is for l2; this index ranks by similarity: give "
                    "--min-score");
}

// Argument checks that need no corpus rows (only file headers), made before the (possibly long)
// ingest. The same on every rank, so every rank fails alike and rank 0 speaks.
void check_search_args(const SearchArgs& a, const Config& cfg) {
  SHARDTOPK_EXPECTS(a.k >= 1, "--k ", a.k, " out of range: allowed 1 .. ", cfg.search.k_max,
                    " (K is the number of neighbours per query and must be at least 1)");
  SHARDTOPK_EXPECTS(a.k <= cfg.search.k_max, "--k ", a.k, " out of range: allowed 1 .. ", cfg.search.k_max,
                    " (search.k_max; raise it with --set search.k_max=", a.k, ")");
  check_corpus_path(cfg);
  // K larger than the corpus: the row count is in the file header, so say it before loading.
  // A file that cannot be inspected is left for the index to report (with the rank).
  std::int64_t corpus_rows = -1, corpus_dim = -1;
  try {
    const DatasetInfo ci = inspect_dataset(cfg.corpus.path, cfg.corpus.dataset);
    if (ci.dims.size() == 2) corpus_rows = ci.dims[0], corpus_dim = ci.dims[1];
  } catch (const Error&) {
  }
  SHARDTOPK_EXPECTS(corpus_rows < 0 || a.k <= corpus_rows, "--k ", a.k, " is larger than the corpus: '",
                    cfg.corpus.path, "' dataset '", cfg.corpus.dataset, "' has ", corpus_rows,
                    " rows (from the file header; nothing was loaded)");
  // An empty filter is a mistake, not a request for none: the search would run unfiltered.
  SHARDTOPK_EXPECTS(!a.filter_given || !a.filter_json.empty(),
                    "--filter-json: empty filter; omit the option for an unfiltered search");
  // A bad filter is refused before the ingest: compiled against the attributes' headers.
  if (a.filter_given && corpus_rows >= 0) {
    const std::string text = filter_text(a.filter_json);
    AttributeSchema schema;
    try {
      schema = corpus_attribute_schema(cfg, corpus_rows);
    } catch (const Error& e) {
      throw Error(std::string("corpus.attributes: ") + e.what());  // the config's mistake, not the filter's
    }
    try {
      (void)parse_filter(text, schema);
    } catch (const Error& e) {
      throw Error(std::string("--filter-json: ") + e.what());
    }
  }
  SHARDTOPK_EXPECTS(a.batch >= 0 && a.batch <= cfg.search.batch_max, "--batch ", a.batch,
                    " out of range: allowed 1 .. ", cfg.search.batch_max,
                    " (search.batch_max; raise it with --set search.batch_max=N), or 0 for search.batch_max");
  // A bound for the other metric, before the ingest (search.metric, or the corpus's `distance`
  // attribute; a file that cannot be read is left for the index to report).
  if (a.min_score || a.max_distance) {
    std::optional<Metric> metric;
    try {
      metric = resolve_metric(cfg);
    } catch (const Error&) {
    }
    if (metric) check_bound_flags(a, *metric);
  }
  if (!a.search_after.empty()) (void)parse_search_after(a.search_after);
  SHARDTOPK_EXPECTS(a.max_queries >= -1, "--max-queries ", a.max_queries, " must be -1 (all) or >= 0");
  DatasetInfo qi;
  try {
    qi = inspect_dataset(a.queries, a.queries_dataset);  // exists, names what is there
  } catch (const Error& e) {
    throw Error(std::string("--queries: ") + e.what());
  }
  SHARDTOPK_EXPECTS(qi.dims.size() == 2 && qi.is_float, "'", a.queries, "': queries dataset '", qi.name,
                    "' must be a 2-D float dataset [Q, dim]");
  // The queries' dimension against the corpus file's header (a storage directory holds rows of
  // the same dimension: its start-up checks it), before the ingest.
  SHARDTOPK_EXPECTS(corpus_dim < 0 || qi.dims[1] == corpus_dim, "'", a.queries, "': queries have dimension ",
                    qi.dims[1], " but the corpus has ", corpus_dim, " (from the file headers; nothing was loaded)");
  const std::vector<std::pair<std::string, std::string>> corpus = corpus_inputs(cfg);
  for (const std::string* out : {&a.out, &a.timings_json})
    if (!out->empty()) {
      std::vector<std::pair<std::string, std::string>> inputs = corpus;
      inputs.insert(inputs.end(), {{"queries", a.queries},
                                   {"config", a.config},
                                   {"-o output", out == &a.timings_json ? a.out : std::string()}});
      check_output_path(*out, inputs, out == &a.out ? OutputKind::kHdf5 : OutputKind::kText, cfg.storage.dir);
    }
}

// Searches every query of the file on a loaded index (every rank); rank 0 reports.
int search_all(ShardedIndex& index, const Config& cfg, const SearchArgs& a, int rank) {
  const IndexInfo info = index.info();
  const std::int64_t dim = info.dim;

  // Rank 0 reads the queries and compiles the filter; a bad file, query or filter stops every rank.
  HostMatrix q;
  std::int64_t nq = 0;
  std::optional<FilterProgram> filter;
  std::string filter_json;  // the filter as given, re-written compactly
  rank0_then_agree(rank, cfg.comm.timeout_s, [&] {
    if (a.filter_given) {
      const std::string text = filter_text(a.filter_json);
      try {
        filter = parse_filter(text, info.schema);
      } catch (const Error& e) {
        throw Error(std::string("--filter-json: ") + e.what());
      }
      filter_json = nlohmann::json::parse(text).dump();
    }
    check_bound_flags(a, info.metric);
    q = read_matrix(a.queries, a.queries_dataset, "query");
    SHARDTOPK_EXPECTS(q.cols == dim, "'", a.queries, "': queries have dimension ", q.cols, " but the corpus has ",
                      dim);
    nq = q.rows;
    if (a.max_queries >= 0) nq = std::min(nq, a.max_queries);
  });

  // Followers serve rank 0's searches until it shuts the index down (also on its errors).
  if (rank != 0) {
    index.follow();
    return 0;
  }
  ShutdownGuard guard{index};

  const int batch_max = a.batch > 0 ? std::min(a.batch, cfg.search.batch_max) : cfg.search.batch_max;
  std::vector<std::int64_t> ids(rank == 0 ? static_cast<size_t>(nq * a.k) : 0);
  std::vector<float> scores(ids.size());
  std::vector<std::int32_t> counts(static_cast<size_t>(nq), 0);  // real results per query
  // Every query has the one filter (or none).
  const std::vector<const FilterProgram*> filters(static_cast<size_t>(batch_max), filter ? &*filter : nullptr);
  std::vector<double> batch_ms;
  // Ranges and pages: one QueryBounds for every query; each query's stats (its total) come back.
  const bool ranged = a.min_score || a.max_distance;
  const bool bounded = ranged || !a.search_after.empty();
  std::vector<QueryBounds> bounds;
  std::vector<QueryStats> stats;
  if (bounded) {
    QueryBounds qb;
    qb.has_bound = ranged;
    if (ranged) qb.bound = bound_as_float(a.min_score ? *a.min_score : *a.max_distance, !a.min_score);
    if (!a.search_after.empty()) {
      const auto [score, id] = parse_search_after(a.search_after);
      qb.has_after = true;
      qb.after_score = static_cast<float>(score);
      qb.after_id = id;
    }
    bounds.assign(static_cast<size_t>(batch_max), qb);
    stats.assign(static_cast<size_t>(nq), QueryStats{});
  }
  // Queries [b0, b0 + b) of the file, admitted at the call; a batch rank 0 refuses is named by
  // those indices.
  auto search_batch = [&](std::int64_t b0, int b, std::int64_t* out_ids, float* out_scores, std::int32_t* out_counts) {
    try {
      if (bounded) {
        const SearchBatch sb =
            index.admit(q.data.data() + b0 * dim, b, a.k, filter ? filters.data() : nullptr, bounds.data(), true);
        index.search(sb, out_ids, out_scores, out_counts, stats.data() + b0);
      } else {
        index.search(q.data.data() + b0 * dim, b, a.k, out_ids, out_scores, filter ? filters.data() : nullptr,
                     out_counts);
      }
    } catch (const RemoteError&) {
      throw;
    } catch (const CommError&) {
      guard.comm_failed = true;
      throw;  // handled by run_search while the index is alive
    } catch (const Error& e) {
      throw RemoteError(a.queries + " '" + a.queries_dataset + "', queries [" + std::to_string(b0) + ", " +
                            std::to_string(b0 + b) + "): " + e.what(),
                        true);
    }
  };
  // One search per distinct batch size (full batches, the last one) before the timed loop:
  // the CUDA engine captures a graph per (batch size, k) on first use (tens of ms), which
  // would otherwise land in the timings. Answers are deterministic, so the warm-up's own
  // answers (of the first queries) are discarded.
  double warmup_ms = 0;
  if (info.engine.space == MemSpace::kDevice && nq > 0) {
    std::vector<int> sizes{static_cast<int>(std::min<std::int64_t>(batch_max, nq))};
    if (nq % batch_max != 0 && nq > batch_max) sizes.push_back(static_cast<int>(nq % batch_max));
    std::vector<std::int64_t> wid(static_cast<size_t>(sizes[0]) * a.k);
    std::vector<float> wsc(wid.size());
    std::vector<std::int32_t> wcounts(static_cast<size_t>(sizes[0]));
    const auto tw = Clock::now();
    for (int b : sizes) search_batch(0, b, wid.data(), wsc.data(), wcounts.data());
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
    search_batch(b0, b, ids.data() + b0 * a.k, scores.data() + b0 * a.k, counts.data() + b0);
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
    const IngestStats& st = info.ingest;
    const double qps = search_s > 0 ? static_cast<double>(nq) / search_s : 0;
    std::int64_t results = 0;
    for (const std::int32_t c : counts) results += c;
    nlohmann::json j = {
        {"corpus", cfg.corpus.path},
        {"rows", info.rows},
        {"dim", dim},
        {"metric", to_string(info.metric)},
        {"world_size", info.world_size},
        {"engine", info.engine.name},
        {"comm", info.comm},
        {"dtype", to_string(info.engine.dtype)},
        {"threads_per_rank", cfg.engine.threads > 0 ? cfg.engine.threads : resolve_threads(cfg, info.local_ranks)},
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
        {"batch_ms_p50", (batch_ms.empty() ? 0.0 : percentile(batch_ms, 50))},
        {"batch_ms_p99", (batch_ms.empty() ? 0.0 : percentile(batch_ms, 99))},
        {"batch_ms_mean", batch_ms.empty() ? 0.0 : search_s * 1000.0 / static_cast<double>(batch_ms.size())},
        {"resident_bytes_rank0", st.engine_resident_bytes},
        {"filtered", filter.has_value()},
        {"results", results},
    };
    std::printf("ingest %.2f s | %lld queries, k=%d, %zu batch(es) of <=%d | batch ms p50 %.3f p99 %.3f | QPS %.1f | "
                "%s/%s, %d rank(s)\n",
                st.total_s, static_cast<long long>(nq), a.k, batch_ms.size(), batch_max, (batch_ms.empty() ? 0.0 : percentile(batch_ms, 50)),
                (batch_ms.empty() ? 0.0 : percentile(batch_ms, 99)), qps, info.engine.name.c_str(), info.comm.c_str(),
                info.world_size);
    if (filter)
      std::printf("filter: %lld of %lld results (queries with fewer than k: %lld)\n", static_cast<long long>(results),
                  static_cast<long long>(nq * a.k),
                  static_cast<long long>(std::count_if(counts.begin(), counts.end(), [&](std::int32_t c) { return c < a.k; })));
    if (ranged) {
      std::vector<std::int64_t> totals;
      for (const QueryStats& x : stats) totals.push_back(x.total);
      j["totals"] = totals;
      const auto [lo, hi] = std::minmax_element(totals.begin(), totals.end());
      std::printf("range %s %g: rows within it per query %lld .. %lld (sum %lld); %lld results of at most %d per query\n",
                  a.min_score ? "min_score" : "max_distance", a.min_score ? *a.min_score : *a.max_distance,
                  static_cast<long long>(totals.empty() ? 0 : *lo), static_cast<long long>(totals.empty() ? 0 : *hi),
                  static_cast<long long>(std::accumulate(totals.begin(), totals.end(), std::int64_t{0})),
                  static_cast<long long>(results), a.k);
    }
    if (!a.timings_json.empty()) {
      std::ofstream out(a.timings_json);
      SHARDTOPK_EXPECTS(out.good(), "cannot write '", a.timings_json, "'");
      out << j.dump(2) << "\n";
    }
    if (!a.out.empty()) {
      ResultMeta m;
      m.metric = info.metric;
      m.k = a.k;
      m.world_size = info.world_size;
      m.engine = info.engine.name;
      m.comm = info.comm;
      m.dtype = info.engine.dtype;
      m.corpus_path = cfg.corpus.path;
      m.corpus_dataset = cfg.corpus.dataset;
      m.corpus_rows = info.rows;
      m.corpus_dim = dim;
      m.queries_path = a.queries;
      m.queries_dataset = a.queries_dataset;
      m.filter = filter_json;
      write_results(a.out, m, ids, scores, nq, filter || bounded ? &counts : nullptr);
      spdlog::info("wrote {} ([{} x {}] ids and scores{})", a.out, nq, a.k, filter ? ", [" + std::to_string(nq) + "] counts" : "");
    }
  }
  return 0;
}

}  // namespace

int run_search(const SearchArgs& args, int* argc, char*** argv) {
  SearchArgs a = args;
  if (a.limit > 0) a.k = a.limit;
  end_with_launcher();
  MpiSession mpi(argc, argv);
  const int rank = mpi.rank();
  init_logging(rank, mpi.world_size());
  try {
    Config cfg;
    try {
      cfg = load_with_overrides(a.config, a.overrides, rank);
      check_search_args(a, cfg);
    } catch (const Error& e) {
      // The config is the same file on every rank, so every rank fails alike; rank 0 speaks.
      if (rank == 0) print_error(e.what());
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
      print_error(e.what());
      abort_job(2);
    }
  } catch (const std::exception&) {
    return end_job(std::current_exception(), rank);
  }
}

}  // namespace shardtopk::cli
