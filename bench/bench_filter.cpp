// bench_filter: filtered search against unfiltered search on one generated corpus (rows made on
// the device by the CUDA engine, or on the host by the CPU engine) with two generated int64
// attributes: "clustered" (contiguous runs of a value: summary blocks prove most blocks empty)
// and "scattered" (hashed: every block holds about every value). A filter is a range of values
// passing a given fraction of the rows. Per configuration (layout x selectivity x batch x kind):
// host to host latency, QPS, the ratio to the unfiltered search of the same batch, and #wrong:
// sampled answers checked against float64 scores over the rows that pass (pipeline.hpp
// check_samples, count mode on the host). Kinds: "own" (batch 1: one filter per search; larger
// batches: each query its own range of the same width), "shared" (one range for the whole batch:
// a tenant's batch), "ids_in" (batch 1: an allow-list of the global ids whose scattered attribute
// lies in a range: the same rows as that range, named one by one). JSON lines per configuration
// (-J), then a table.
//
//   mpirun -np 1 build/bench/bench_filter -N 10M -d 768 -k 100 -t float16 -B 1,256 -J out.jsonl
#include <CLI/CLI.hpp>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <iostream>
#include <sstream>

#include "core/log.hpp"
#include "core/stats.hpp"
#include "harness.hpp"
#include "pipeline.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"
#include "shardtopk/generator.hpp"
#include "shardtopk/ingest.hpp"
#include "shardtopk/ordering.hpp"

namespace shardtopk::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr std::int64_t kValues = 1000;  // generated attributes take values 0 .. 999

struct Flags {
  std::string rows = "10M";
  std::int64_t dim = 768;
  int k = 100;
  std::string dtype = "float16";
  std::string metric = "inner_product";
  std::string batches = "1,256";
  std::string layouts = "clustered,scattered";
  std::string selectivities = "10,1";   // percent, batch 1
  std::string batched_selectivities = "10";  // percent, batches > 1 (each query its own range)
  std::string shared_selectivities;          // percent, batches > 1 (one range for the batch)
  std::string ids_in;                        // allow-list lengths, batch 1
  int iters = 20, warmup = 5, check = 1, check_queries = 4;
  std::uint64_t seed = 1;
  std::string json_path, git, tag;
  std::vector<std::string> sets;
  int corrupt = 0;  // tests only: damage sampled answers so that the check must fail
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::int64_t parse_rows(const std::string& s) {
  double mul = 1;
  std::string t = s;
  if (!t.empty() && (t.back() == 'k' || t.back() == 'K')) mul = 1e3;
  if (!t.empty() && (t.back() == 'm' || t.back() == 'M')) mul = 1e6;
  if (mul != 1) t.pop_back();
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  SHARDTOPK_EXPECTS(end && *end == '\0' && v >= 1, "-N '", s, "' is not a row count (e.g. 200k, 10M)");
  return static_cast<std::int64_t>(std::llround(v * mul));
}

// One configuration: a batch size, and either no filter or ranges of `width` values of one layout.
struct Config1 {
  int batch = 1;
  std::string layout;  // "" : unfiltered
  std::string kind = "own";  // own | shared | ids_in
  int column = -1;     // index in the corpus's attributes
  double percent = 100;
  std::int64_t width = kValues;
  std::vector<double> lat_ms;
  double wall_s = 0;
  std::int64_t results = 0, slots = 0;  // real results and k x queries of the timed searches
  std::uint64_t fallbacks = 0;          // batched queries re-run by the batch-1 scan (this rank's engine)
};

// The range of query q (q: its index in the pool): `width` values starting where q puts it.
std::int64_t range_lo(int q, std::int64_t width) { return (static_cast<std::int64_t>(q) * 337) % (kValues - width + 1); }

int run(MpiSession& mpi, int argc, char** argv) {
  const int rank = mpi.rank(), world = mpi.world_size();
  Flags f;
  CLI::App app{"shardtopk filtered-search benchmark: generated corpus and attributes, filtered vs unfiltered",
               "bench_filter"};
  app.add_option("-N,--rows", f.rows, "corpus rows (10M, 200k)")->capture_default_str();
  app.add_option("-d,--dim", f.dim, "dimension")->capture_default_str();
  app.add_option("-k,--k", f.k, "K")->capture_default_str();
  app.add_option("-t,--dtype", f.dtype, "storage: float32, float16, bfloat16")->capture_default_str();
  app.add_option("-m,--metric", f.metric, "inner_product | cosine | l2")->capture_default_str();
  app.add_option("-B,--batch", f.batches, "batch sizes, comma list")->capture_default_str();
  app.add_option("--layouts", f.layouts, "attribute layouts: clustered, scattered")->capture_default_str();
  app.add_option("--selectivities", f.selectivities, "percent of rows passing, batch 1 (comma list)")
      ->capture_default_str();
  app.add_option("--batched-selectivities", f.batched_selectivities,
                 "percent of rows passing each query's own filter, batches > 1")
      ->capture_default_str();
  app.add_option("--shared-selectivities", f.shared_selectivities,
                 "percent of rows passing one filter shared by the whole batch, batches > 1 (comma list)")
      ->capture_default_str();
  app.add_option("--ids-in", f.ids_in,
                 "ids_in allow-list lengths, batch 1 (comma list; the ids of the rows whose scattered attribute "
                 "lies in a range)")
      ->capture_default_str();
  app.add_option("-n,--iters", f.iters, "timed searches per configuration")->capture_default_str();
  app.add_option("-w,--warmup", f.warmup, "warm-up searches per configuration")->capture_default_str();
  app.add_option("-c,--check", f.check, "check sampled answers (0|1); a wrong answer exits non-zero")
      ->capture_default_str();
  app.add_option("--check-queries", f.check_queries, "queries checked per configuration")->capture_default_str();
  app.add_option("--seed", f.seed, "corpus seed (queries: seed + 1)")->capture_default_str();
  app.add_option("-J,--json", f.json_path, "append one JSON record per configuration to FILE ('-': stdout)");
  app.add_option("--set", f.sets, "config override key=value (engine.backend, engine.threads, ...)");
  app.add_option("--git", f.git, "the commit to record");
  app.add_option("--tag", f.tag, "free text copied into every record");
  app.add_option("--corrupt", f.corrupt,
                 "tests only: 1 puts a row the filter excludes among a filtered answer's results, 2 drops a "
                 "filtered answer's best result (the check must count both)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
  }
  init_logging(rank, world);
  if (!log_level_from_environment()) spdlog::set_level(spdlog::level::warn);

  std::vector<int> batches;
  for (const auto& b : split(f.batches)) batches.push_back(std::stoi(b));
  const int bmax = *std::max_element(batches.begin(), batches.end());
  Config cfg;
  for (const auto& s : f.sets) apply_override(cfg, s);
  cfg.search.batch_max = std::max(cfg.search.batch_max, bmax);
  cfg.search.k_max = std::max(cfg.search.k_max, f.k);
  cfg.search.max_filters = std::max(cfg.search.max_filters, bmax);  // a batch of bmax different filters
  cfg.search.metric = parse_metric(f.metric);
  cfg.engine.dtype = parse_dtype(f.dtype);

  CorpusSpec spec;
  spec.seed = f.seed;
  spec.rows = parse_rows(f.rows);
  spec.dim = f.dim;
  spec.metric = *cfg.search.metric;
  spec.dtype = cfg.engine.dtype;
  const std::vector<std::string> layouts = split(f.layouts);
  spec.attributes = layouts;
  Options opt;  // BenchIndex's options: rows generated where the engine runs
  const auto t_build = Clock::now();
  BenchIndex idx(spec, cfg, opt);
  const double build_s = std::chrono::duration<double>(Clock::now() - t_build).count();
  Communicator& host = idx.host();

  // Configurations: per batch, unfiltered first (the ratios' reference), then each layout x
  // selectivity.
  std::vector<Config1> configs;
  auto add = [&](int b, const std::string& kind, int column, double percent) {
    Config1 c{b};
    c.kind = kind;
    c.layout = layouts[static_cast<size_t>(column)];
    c.column = column;
    c.percent = percent;
    c.width = std::max<std::int64_t>(1, std::llround(c.percent * kValues / 100.0));
    SHARDTOPK_EXPECTS(c.width <= kValues, "selectivity ", percent, " % is above 100");
    configs.push_back(c);
  };
  for (int b : batches) {
    configs.push_back(Config1{b});
    for (size_t li = 0; li < layouts.size(); ++li) {
      for (const auto& p : split(b == 1 ? f.selectivities : f.batched_selectivities))
        add(b, "own", static_cast<int>(li), std::stod(p));
      if (b > 1)
        for (const auto& p : split(f.shared_selectivities)) add(b, "shared", static_cast<int>(li), std::stod(p));
    }
    if (b == 1 && !f.ids_in.empty()) {
      const auto it = std::find(layouts.begin(), layouts.end(), "scattered");
      SHARDTOPK_EXPECTS(it != layouts.end(), "--ids-in needs the scattered layout (--layouts)");
      for (const auto& n : split(f.ids_in))
        add(1, "ids_in", static_cast<int>(it - layouts.begin()), 100.0 * std::stod(n) / static_cast<double>(spec.rows));
    }
  }

  // Query pool (seed + 1), every rank holds it (the check needs it); filters compiled once here.
  const int pool = std::max({2 * bmax, f.check_queries + bmax, 64});
  std::vector<float> queries(static_cast<size_t>(pool) * spec.dim);
  generate_rows(f.seed + 1, 0, pool, spec.dim, queries.data(), 0);

  std::vector<Sample> samples;
  std::vector<std::int64_t> ids(static_cast<size_t>(bmax) * f.k);
  std::vector<float> scores(ids.size());
  std::vector<std::int32_t> counts(static_cast<size_t>(bmax));
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    Config1& c = configs[ci];
    const int b = c.batch;
    // Each query of the pool with its own range (compiled for every query of the pool); ids_in:
    // the ids of the rows in that range, listed (the same rows as the range).
    std::vector<FilterProgram> programs;
    if (c.column >= 0 && rank == 0) {
      std::vector<std::vector<std::int64_t>> rows_of(c.kind == "ids_in" ? kValues : 0);  // value -> its rows
      for (std::int64_t r = 0; !rows_of.empty() && r < spec.rows; ++r)
        rows_of[static_cast<size_t>(generated_attribute(c.layout, spec.seed, r, spec.rows))].push_back(r);
      // ids_in lists are long: only the queries the timed and checked searches use
      const int used = rows_of.empty() ? pool : std::min(pool, f.warmup + f.iters + f.check_queries);
      for (int q = 0; q < used; ++q) {
        const std::int64_t lo = range_lo(q, c.width), hi = lo + c.width - 1;
        if (rows_of.empty()) {
          programs.push_back(compile_filter(json{{"range", {{c.layout, {lo, hi}}}}}, idx.attribute_schema()));
          continue;
        }
        std::vector<std::int64_t> list;
        for (std::int64_t v = lo; v <= hi; ++v) list.insert(list.end(), rows_of[v].begin(), rows_of[v].end());
        programs.push_back(compile_filter(json{{"ids_in", list}}, idx.attribute_schema()));
      }
    }
    const bool shared = c.kind == "shared";
    std::vector<const FilterProgram*> fp(static_cast<size_t>(b));
    auto search = [&](int q0) {  // queries [q0, q0 + b) of the pool, each with its filter (shared: q0's)
      for (int j = 0; j < b; ++j)
        fp[j] = programs.empty() ? nullptr : &programs[static_cast<size_t>(shared ? q0 : q0 + j)];
      idx.search(queries.data() + static_cast<size_t>(q0) * spec.dim, b, f.k, ids.data(), scores.data(),
                 programs.empty() ? nullptr : fp.data(), counts.data());
    };
    auto q0_of = [&](long it) { return static_cast<int>((it * b) % (pool - b + 1)); };
    for (int it = 0; it < f.warmup; ++it) search(q0_of(it));
    host.barrier();
    idx.engine().reset_transfer_counters();
    const auto t0 = Clock::now();
    for (int it = 0; it < f.iters; ++it) {
      const auto tb = Clock::now();
      search(q0_of(it));
      c.lat_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - tb).count());
      for (int j = 0; j < b; ++j) c.results += counts[j];
      c.slots += static_cast<std::int64_t>(b) * f.k;
    }
    c.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    c.fallbacks = idx.engine().transfer_counters().batched_fallbacks;
    host.barrier();
    if (f.check) {
      for (int s0 = 0; s0 < f.check_queries; s0 += b) {
        search(s0);
        if (rank != 0) continue;
        for (int j = 0; j < b && s0 + j < f.check_queries; ++j) {
          Sample s;
          s.entry = static_cast<int>(ci);
          s.query = s0 + j;
          s.k = f.k;
          s.ids.assign(ids.begin() + static_cast<size_t>(j) * f.k, ids.begin() + static_cast<size_t>(j + 1) * f.k);
          s.scores.assign(scores.begin() + static_cast<size_t>(j) * f.k, scores.begin() + static_cast<size_t>(j + 1) * f.k);
          if (c.column >= 0) {
            s.filter_column = c.column;
            s.filter_lo = range_lo(shared ? s0 : s0 + j, c.width);
            s.filter_hi = s.filter_lo + c.width - 1;
            // Test hooks (bench_filter_catches_wrong): a row whose attribute is outside the range
            // in place of the last result, or the best result dropped (the rest moved up, padding
            // at the end) so that a passing row is missing.
            if (f.corrupt == 1) {
              std::int64_t row = 0;
              while (row < spec.rows - 1) {
                const std::int64_t v = generated_attribute(c.layout, spec.seed, row, spec.rows);
                if (v < s.filter_lo || v > s.filter_hi) break;
                ++row;
              }
              s.ids.back() = row;
            } else if (f.corrupt == 2) {
              s.ids.erase(s.ids.begin());
              s.ids.push_back(kPadId);
              s.scores.erase(s.scores.begin());
              s.scores.push_back(spec.metric == Metric::kL2 ? INFINITY : -INFINITY);
            }
          }
          samples.push_back(std::move(s));
        }
      }
    }
  }

  std::vector<CheckResult> checks(configs.size());
  CheckInfo info;
  info.mode = "none";
  double check_s = 0;
  if (f.check) {
    const auto tc = Clock::now();
    checks = check_samples(idx.corpus(), host, idx.my_rows(), queries, samples, static_cast<int>(configs.size()),
                           CheckMode::kCount, resolve_threads(cfg, host.local_size()), 0, &info);
    check_s = std::chrono::duration<double>(Clock::now() - tc).count();
  }

  long long total_wrong = 0;
  if (rank == 0) {
    const Table table({{"B", "", 5},
                       {"layout", "", 10},
                       {"filter", "", 7},
                       {"select", "(%)", 7},
                       {"p50", "(us)", 10},
                       {"p99", "(us)", 10},
                       {"QPS", "(q/s)", 10},
                       {"time", "(/unf)", 7},
                       {"QPS", "(/unf)", 7},
                       {"results", "(frac)", 7},
                       {"#wrong", "", 6}});
    std::cout << "# bench_filter: " << world << " rank(s), engine " << idx.engine_name() << " (" << idx.device_name()
              << "), comm " << idx.comm_name() << ", " << spec.rows << " x " << spec.dim << " " << f.dtype << " "
              << f.metric << ", K " << f.k << ", rows generated on the " << idx.generated_on() << ", build "
              << fmt_num(build_s, 1) << " s, git " << git_commit(f.git) << "\n"
              << "# iters " << f.iters << ", warm-up " << f.warmup << ", check " << f.check << " ("
              << f.check_queries << " queries per configuration)\n"
              << table.header();
    const Config1* unfiltered = nullptr;
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      const Config1& c = configs[ci];
      if (c.column < 0) unfiltered = &c;
      const double p50 = percentile(c.lat_ms, 50), p99 = percentile(c.lat_ms, 99);
      const double qps = c.wall_s > 0 ? static_cast<double>(c.batch) * f.iters / c.wall_s : NAN;
      const double up50 = percentile(unfiltered->lat_ms, 50);
      const double uqps = static_cast<double>(unfiltered->batch) * f.iters / unfiltered->wall_s;
      json r;
      r["bench"] = "bench_filter";
      r["ranks"] = world;
      r["rows_total"] = spec.rows;
      r["dim"] = spec.dim;
      r["dtype"] = f.dtype;
      r["metric"] = f.metric;
      r["k"] = f.k;
      r["batch"] = c.batch;
      r["layout"] = c.column < 0 ? "none" : c.layout;
      r["filter"] = c.column < 0 ? "none" : c.kind;
      r["selectivity_pct"] = c.percent;
      r["per_query_filters"] = c.column >= 0 && c.batch > 1 && c.kind == "own";
      r["filter_scan"] = to_string(cfg.engine.filter_scan);
      r["column_orders"] = cfg.engine.column_orders;
      r["iters"] = f.iters;
      r["warmup"] = f.warmup;
      r["p50_ms"] = p50;
      r["p99_ms"] = p99;
      r["mean_ms"] = c.wall_s * 1e3 / f.iters;
      r["qps"] = qps;
      r["time_ratio_p50"] = p50 / up50;
      r["qps_ratio"] = qps / uqps;
      r["results_frac"] = c.slots ? static_cast<double>(c.results) / static_cast<double>(c.slots) : NAN;
      r["batched_fallbacks"] = c.fallbacks;
      r["check"] = f.check;
      r["check_mode"] = info.mode;
      r["checked_queries"] = checks[ci].queries;
      r["wrong"] = checks[ci].wrong;
      r["near_tie_swaps"] = checks[ci].near_ties;
      if (!checks[ci].first_problem.empty()) r["first_problem"] = checks[ci].first_problem;
      r["check_s"] = check_s;
      r["engine"] = idx.engine_name();
      r["device"] = idx.device_name();
      r["rows_from"] = "generated:" + idx.generated_on();
      r["seed"] = f.seed;
      r["git"] = git_commit(f.git);
      r["host"] = host_name();
      r["time"] = utc_now();
      if (!f.tag.empty()) r["tag"] = f.tag;
      write_json_line(f.json_path, r);
      std::cout << table.line({fmt_int(c.batch), c.column < 0 ? "none" : c.layout, c.column < 0 ? "-" : c.kind,
                               fmt_num(c.percent, 1),
                               fmt_num(p50 * 1e3), fmt_num(p99 * 1e3), fmt_num(qps, 0), fmt_num(p50 / up50, 3),
                               fmt_num(qps / uqps, 3), fmt_num(r["results_frac"].get<double>(), 3),
                               fmt_int(checks[ci].wrong)})
                << std::flush;
      total_wrong += checks[ci].wrong;
      if (checks[ci].wrong > 0)
        std::cout << "# WRONG: B=" << c.batch << " " << r["layout"].get<std::string>() << " " << c.kind << " " << c.percent
                  << " %: " << checks[ci].first_problem << "\n";
    }
    if (f.check)
      std::cout << "# checked " << samples.size() << " answers (" << info.mode << ") in " << fmt_num(check_s, 2)
                << " s\n";
  }
  MPI_Bcast(&total_wrong, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  if (rank == 0) std::cout << "# " << (total_wrong ? "FAILED" : "OK") << ": #wrong total " << total_wrong << "\n";
  return total_wrong ? 1 : 0;
}

}  // namespace
}  // namespace shardtopk::bench

int main(int argc, char** argv) {
  return shardtopk::bench::run_on_ranks(argc, argv, "bench_filter", &shardtopk::bench::run);
}
