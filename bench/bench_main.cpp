#include "bench_main.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include <mpi.h>

#include "core/log.hpp"
#include "pipeline.hpp"
#include "shardtopk/ingest.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/generator.hpp"

namespace shardtopk::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Entry {
  int k = 0, batch = 0;
  std::vector<double> lat_ms;  // host to host, per batch (rank 0)
  double wall_s = 0;
  std::vector<StepTimes> steps;
};

double p50_of(const std::vector<StepTimes>& v, double StepTimes::*f) {
  std::vector<double> x;
  for (const auto& s : v) x.push_back(s.*f);
  return percentile(x, 50);
}

// 1-rank record matching `r` (same shape; strong: same total rows, weak: same rows per rank).
const json* find_baseline(const std::vector<json>& base, const json& r) {
  for (const auto& b : base) {
    if (b.value("ranks", 0) != 1) continue;
    bool same = b.value("dim", 0) == r["dim"] && b.value("dtype", "") == r["dtype"] &&
                b.value("metric", "") == r["metric"] && b.value("k", 0) == r["k"] && b.value("batch", 0) == r["batch"];
    if (r["scaling"] == "weak") {
      same = same && b.value("rows_per_rank", 0LL) == r["rows_per_rank"].get<long long>();
    } else {
      same = same && b.value("rows_total", 0LL) == r["rows_total"].get<long long>();
    }
    if (same) return &b;
  }
  return nullptr;
}

Table make_table(View v) {
  if (v == View::kSearch)
    return Table({{"N", "(rows)", 10},
                  {"D", "", 5},
                  {"dtype", "", 8},
                  {"K", "", 5},
                  {"B", "", 5},
                  {"ranks", "", 5},
                  {"p50", "(us)", 9},
                  {"p99", "(us)", 9},
                  {"dev p50", "(us)", 9},
                  {"QPS", "(q/s)", 10},
                  {"TFLOP/s", "(h2h)", 8},
                  {"GB/s", "(/rank)", 8},
                  {"floor", "(dev)", 6},
                  {"floor", "(h2h)", 6},
                  {"#wrong", "", 6}});
  return Table({{"ranks", "", 5},
                {"rows/rank", "(rows)", 10},
                {"D", "", 5},
                {"dtype", "", 8},
                {"K", "", 5},
                {"B", "", 5},
                {"p50", "(us)", 9},
                {"p99", "(us)", 9},
                {"QPS", "(q/s)", 10},
                {"GB/s", "(/rank)", 8},
                {"floor", "(frac)", 6},
                {"bcast", "(us)", 7},
                {"scan", "(us)", 8},
                {"gather", "(us)", 7},
                {"merge", "(us)", 7},
                {"eff", "(frac)", 6},
                {"#wrong", "", 6}});
}

std::string table_line(const Table& t, View v, const json& r) {
  auto d = [&](const char* key) { return r[key].is_number() ? r[key].get<double>() : NAN; };
  if (v == View::kSearch)
    return t.line({fmt_int(r["rows_total"]), fmt_int(r["dim"]), r["dtype"], fmt_int(r["k"]), fmt_int(r["batch"]),
                   fmt_int(r["ranks"]), fmt_num(d("p50_ms") * 1e3), fmt_num(d("p99_ms") * 1e3),
                   fmt_num(d("dev_p50_ms") * 1e3), fmt_num(d("qps"), 0), fmt_num(d("tflops_h2h"), 2),
                   fmt_num(d("scan_GBps_per_rank"), 0), fmt_num(d("frac_floor_dev"), 3), fmt_num(d("frac_floor_h2h"), 3),
                   fmt_int(r["wrong"])});
  return t.line({fmt_int(r["ranks"]), fmt_int(r["rows_per_rank"]), fmt_int(r["dim"]), r["dtype"], fmt_int(r["k"]),
                 fmt_int(r["batch"]), fmt_num(d("p50_ms") * 1e3), fmt_num(d("p99_ms") * 1e3), fmt_num(d("qps"), 0),
                 fmt_num(d("scan_GBps_per_rank"), 0), fmt_num(d("frac_floor_dev"), 3), fmt_num(d("bcast_ms") * 1e3),
                 fmt_num(d("scan_ms") * 1e3), fmt_num(d("gather_ms") * 1e3), fmt_num(d("merge_ms") * 1e3),
                 fmt_num(d("efficiency"), 3), fmt_int(r["wrong"])});
}

json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace

namespace {
int bench_main_impl(MpiSession& mpi, int argc, char** argv, const char* program, const char* about, Options opt,
                    View view) {
  const int rank = mpi.rank(), world = mpi.world_size();
  int code = 0;
  if (!parse_options(argc, argv, program, about, &opt, &code)) return code;
  init_logging(rank, world);
  if (!log_level_from_environment()) spdlog::set_level(spdlog::level::warn);

  Config cfg;
  for (const auto& s : opt.sets) apply_override(cfg, s);
  cfg.search.batch_max = std::max(cfg.search.batch_max, *std::max_element(opt.batches.begin(), opt.batches.end()));
  cfg.search.k_max = std::max(cfg.search.k_max, *std::max_element(opt.ks.begin(), opt.ks.end()));
  if (!opt.metric.empty()) cfg.search.metric = parse_metric(opt.metric);

  const int corrupt = opt.corrupt;
  std::vector<json> baseline;
  if (rank == 0 && !opt.baseline.empty()) {
    if (std::ifstream(opt.baseline).good()) {
      baseline = read_json_lines(opt.baseline);
    } else {
      std::cout << "# baseline " << opt.baseline << " not found: efficiency only at 1 rank\n";
    }
  }

  // Corpora of the sweep.
  std::vector<CorpusSpec> corpora;
  const bool weak = !opt.rows_per_rank.empty();
  if (!opt.corpus.empty()) {
    for (Dtype dt : opt.dtypes) {
      CorpusSpec c;
      c.generated = false;
      c.path = opt.corpus;
      c.dataset = opt.dataset;
      c.dtype = dt;
      corpora.push_back(c);
    }
  } else {
    for (std::int64_t n : weak ? opt.rows_per_rank : opt.rows)
      for (std::int64_t d : opt.dims)
        for (Dtype dt : opt.dtypes) {
          CorpusSpec c;
          c.seed = opt.seed;
          c.rows = weak ? n * world : n;
          c.dim = d;
          c.metric = cfg.search.metric.value_or(Metric::kInnerProduct);
          c.dtype = dt;
          corpora.push_back(c);
        }
  }
  if (corpora.empty() && rank == 0) std::cerr << program << ": nothing to run (give -N or --rows-per-rank)\n";

  const Table table = make_table(view);
  bool header_printed = false, failed = false, skipped = false;
  long long total_wrong = 0;
  std::ostringstream summary;
  for (const CorpusSpec& spec : corpora) {
    std::unique_ptr<BenchIndex> idx;
    try {
      Config c = cfg;
      c.engine.dtype = spec.dtype;
      if (!spec.generated) {
        c.corpus.path = spec.path;
        c.corpus.dataset = spec.dataset;
      }
      idx = std::make_unique<BenchIndex>(spec, c, opt);
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      if (rank == 0)
        std::cerr << program << ": corpus " << spec.rows << " x " << spec.dim << " " << to_string(spec.dtype)
                  << ": " << e.what() << "\n";
      failed = true;
      continue;
    }
    const CorpusSpec& corpus = idx->corpus();
    Communicator& host = idx->host();
    if (rank == 0 && !header_printed) {
      std::cout << "# " << program << ": " << world << " rank(s), engine " << idx->engine_name() << " ("
                << idx->device_name() << "), comm " << idx->comm_name() << ", rows "
                << (spec.generated ? "generated on the " + idx->generated_on() : "from " + spec.path)
                << ", git " << git_commit(opt.git) << "\n"
                << "# iters " << opt.iters << ", warm-up " << opt.warmup << ", check " << opt.check
                << ", read floor " << opt.floor_gbps << " GB/s per rank\n"
                << table.header() << std::flush;
      header_printed = true;
    }

    // Query pool: generated (seed + 1); every rank holds it (the checks need it).
    const int bmax = *std::max_element(opt.batches.begin(), opt.batches.end());
    const int pool = std::max({2 * bmax, opt.check_queries + bmax, 64});
    std::vector<float> queries(static_cast<size_t>(pool) * corpus.dim);
    generate_rows(opt.seed + 1, 0, pool, corpus.dim, queries.data(), 0);

    std::vector<Entry> entries;
    for (int k : opt.ks)
      for (int b : opt.batches) {
        if (k > corpus.rows) {
          if (rank == 0) std::cout << "# skipped K=" << k << ": more than the corpus' " << corpus.rows << " rows\n";
          continue;
        }
        entries.push_back(Entry{k, b, {}, 0, {}});
      }

    std::vector<Sample> samples;
    bool corpus_failed = false;
    try {
      for (size_t ei = 0; ei < entries.size(); ++ei) {
        Entry& en = entries[ei];
        const int k = en.k, b = en.batch;
        std::vector<std::int64_t> ids(static_cast<size_t>(b) * k);
        std::vector<float> scores(ids.size());
        auto qptr = [&](long it) {
          long off = (it * b) % pool;
          if (off + b > pool) off = 0;
          return queries.data() + static_cast<size_t>(off) * corpus.dim;
        };
        for (int it = 0; it < opt.warmup; ++it) idx->search(qptr(it), b, k, ids.data(), scores.data());
        host.barrier();
        const auto t0 = Clock::now();
        for (int it = 0; it < opt.iters; ++it) {
          const auto tb = Clock::now();
          idx->search(qptr(it), b, k, ids.data(), scores.data());
          en.lat_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - tb).count());
        }
        en.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
        host.barrier();
        if (opt.split)
          for (int it = 0; it < opt.iters; ++it) {
            StepTimes st;
            idx->search_split(qptr(it), b, k, ids.data(), scores.data(), &st);
            en.steps.push_back(st);
          }
        if (opt.check) {
          for (int s0 = 0; s0 < opt.check_queries; s0 += b) {
            idx->search(queries.data() + static_cast<size_t>(s0) * corpus.dim, b, k, ids.data(), scores.data());
            if (rank != 0) continue;
            for (int j = 0; j < b && s0 + j < opt.check_queries; ++j) {
              Sample s;
              s.entry = static_cast<int>(ei);
              s.query = s0 + j;
              s.k = k;
              s.ids.assign(ids.begin() + static_cast<size_t>(j) * k, ids.begin() + static_cast<size_t>(j + 1) * k);
              s.scores.assign(scores.begin() + static_cast<size_t>(j) * k,
                              scores.begin() + static_cast<size_t>(j + 1) * k);
              // Test hooks, so a test can see the check catch a wrong answer: --corrupt 1
              // swaps the returned K-th id for another row (bench_search_catches_wrong: a bad score);
              // 2 swaps the best id instead, scores kept, so (K >= 2, no near tie) the true best row
              // beats the returned K-th and is missing: the count check's miss count must see it
              // (bench_search_count_catches_missed).
              if (corrupt == 1 && !s.ids.empty()) s.ids.back() = (s.ids.back() + corpus.rows / 2 + 1) % corpus.rows;
              if (corrupt == 2 && !s.ids.empty()) s.ids.front() = (s.ids.front() + corpus.rows / 2 + 1) % corpus.rows;
              samples.push_back(std::move(s));
            }
          }
        }
      }
    } catch (const CommError&) {
      throw;
    } catch (const std::exception& e) {
      if (rank == 0) std::cerr << program << ": search failed: " << e.what() << "\n";
      failed = corpus_failed = true;
    }
    if (corpus_failed) continue;

    CheckMode mode = opt.check_mode;
    if (mode == CheckMode::kAuto)
      mode = static_cast<double>(corpus.rows) * corpus.dim > opt.oracle_max_values ? CheckMode::kCount
                                                                                     : CheckMode::kOracle;
    std::vector<CheckResult> checks(entries.size());
    double check_s = 0;
    CheckInfo info;
    info.mode = "none";
    if (opt.check) {
      const auto tc = Clock::now();
      const int threads = opt.check_threads > 0 ? opt.check_threads : resolve_threads(cfg, host.local_size());
      try {
        checks = check_samples(corpus, host, idx->my_rows(), queries, samples, static_cast<int>(entries.size()), mode,
                               threads, opt.check_device, &info);
      } catch (const RemoteError& e) {  // from host.check: every rank is here
        if (rank == 0) std::cerr << program << ": check failed: " << e.what() << "\n";
        failed = true;
        continue;
      }
      check_s = std::chrono::duration<double>(Clock::now() - tc).count();
      // --check-device 2 is a comparison: when some rank could not run the device pass there was
      // none, and the run says so (exit 77, "skipped") unless something else failed.
      if (opt.check_device == 2 && mode == CheckMode::kCount && info.mode != "count-device+host") {
        skipped = true;
        if (rank == 0)
          std::cout << "# --check-device 2: device and host counts not compared (" << info.mode
                    << ": some rank had no device pass)\n";
      }
    }
    if (rank != 0) continue;

    const std::int64_t rows_rank = shard_rows(corpus.rows, world, 0).size();  // the largest shard
    const double bytes_rank = static_cast<double>(rows_rank) * corpus.dim * dtype_bytes(corpus.dtype);
    const double floor_ms = bytes_rank / (opt.floor_gbps * 1e9) * 1e3;
    for (size_t ei = 0; ei < entries.size(); ++ei) {
      const Entry& en = entries[ei];
      json r;
      r["bench"] = program;
      r["scaling"] = weak ? "weak" : "strong";
      r["ranks"] = world;
      r["rows_total"] = corpus.rows;
      r["rows_per_rank"] = rows_rank;
      r["dim"] = corpus.dim;
      r["dtype"] = to_string(corpus.dtype);
      r["metric"] = to_string(corpus.metric);
      r["k"] = en.k;
      r["batch"] = en.batch;
      r["iters"] = opt.iters;
      r["warmup"] = opt.warmup;
      const double p50 = percentile(en.lat_ms, 50), p99 = percentile(en.lat_ms, 99);
      r["p50_ms"] = p50;
      r["p99_ms"] = p99;
      r["mean_ms"] = en.lat_ms.empty() ? NAN : en.wall_s * 1e3 / en.lat_ms.size();
      r["qps"] = en.wall_s > 0 ? static_cast<double>(en.batch) * opt.iters / en.wall_s : NAN;
      double dev50 = NAN, dev99 = NAN;
      if (!en.steps.empty()) {
        std::vector<double> dv;
        for (const auto& s : en.steps) dv.push_back(s.scan_dev);
        dev50 = percentile(dv, 50);
        dev99 = percentile(dv, 99);
        r["admit_ms"] = p50_of(en.steps, &StepTimes::admit);
        r["bcast_ms"] = p50_of(en.steps, &StepTimes::bcast);
        r["scan_ms"] = p50_of(en.steps, &StepTimes::scan);
        r["skew_ms"] = p50_of(en.steps, &StepTimes::skew);
        r["gather_ms"] = p50_of(en.steps, &StepTimes::gather);
        r["merge_ms"] = p50_of(en.steps, &StepTimes::merge);
        r["export_ms"] = p50_of(en.steps, &StepTimes::exported);
      } else {
        for (const char* key : {"admit_ms", "bcast_ms", "scan_ms", "skew_ms", "gather_ms", "merge_ms", "export_ms"})
          r[key] = nullptr;
      }
      r["dev_p50_ms"] = num_or_null(dev50);
      r["dev_p99_ms"] = num_or_null(dev99);
      r["bytes_per_rank"] = bytes_rank;
      r["floor_GBps"] = opt.floor_gbps;
      r["floor_ms"] = floor_ms;
      r["scan_GBps_per_rank"] = num_or_null(bytes_rank / (dev50 * 1e-3) / 1e9);
      r["frac_floor_dev"] = num_or_null(floor_ms / dev50);
      r["frac_floor_h2h"] = num_or_null(floor_ms / p50);
      const double flop = 2.0 * en.batch * static_cast<double>(corpus.rows) * corpus.dim;
      r["tflops_h2h"] = num_or_null(flop / (p50 * 1e-3) / 1e12);
      r["tflops_dev_per_rank"] =
          num_or_null(2.0 * en.batch * static_cast<double>(rows_rank) * corpus.dim / (dev50 * 1e-3) / 1e12);
      double eff = world == 1 ? 1.0 : NAN;
      if (const json* b = find_baseline(baseline, r)) {
        const double p1 = (*b)["p50_ms"].get<double>();
        eff = weak ? p1 / p50 : p1 / (world * p50);
        r["baseline_p50_ms"] = p1;
      }
      r["efficiency"] = num_or_null(eff);
      r["check"] = opt.check;
      r["check_mode"] = info.mode;
      r["check_device_s"] = info.device_s >= 0 ? json(info.device_s) : json(nullptr);
      r["checked_queries"] = checks[ei].queries;
      r["wrong"] = checks[ei].wrong;
      r["near_tie_swaps"] = checks[ei].near_ties;
      if (!checks[ei].first_problem.empty()) r["first_problem"] = checks[ei].first_problem;
      r["check_s"] = check_s;
      r["engine"] = idx->engine_name();
      r["comm"] = idx->comm_name();
      r["rows_from"] = spec.generated ? "generated:" + idx->generated_on() : spec.path;
      r["seed"] = opt.seed;
      r["device"] = idx->device_name();
      r["git"] = git_commit(opt.git);
      r["host"] = host_name();
      r["time"] = utc_now();
      if (!opt.tag.empty()) r["tag"] = opt.tag;
      write_json_line(opt.json_path, r);
      std::cout << table_line(table, view, r) << std::flush;
      total_wrong += checks[ei].wrong;
      if (checks[ei].wrong > 0)
        summary << "# WRONG: N=" << corpus.rows << " D=" << corpus.dim << " " << to_string(corpus.dtype)
                << " K=" << en.k << " B=" << en.batch << ": " << checks[ei].wrong << " (" << checks[ei].first_problem
                << ")\n";
    }
    if (opt.check) {
      std::cout << "# checked " << samples.size() << " answers (" << info.mode << ") in " << fmt_num(check_s, 2)
                << " s";
      if (info.device_s >= 0) std::cout << " (device pass on rank 0: " << fmt_num(info.device_s, 2) << " s)";
      if (!info.note.empty()) std::cout << "; count on the host: " << info.note;
      std::cout << "\n" << std::flush;
    }
  }
  // Every rank takes the same exit code.
  long long flags[3] = {total_wrong, failed ? 1 : 0, skipped ? 1 : 0};
  MPI_Bcast(flags, 3, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  const bool ok = flags[0] == 0 && flags[1] == 0;
  if (rank == 0) {
    std::cout << summary.str();
    std::cout << "# " << (!ok ? "FAILED" : flags[2] ? "SKIPPED" : "OK") << ": #wrong total " << flags[0]
              << (flags[1] ? ", some configurations failed" : "")
              << (flags[2] ? ", --check-device 2 compared nothing (no device pass; exit 77)" : "") << "\n";
  }
  return !ok ? 1 : flags[2] ? 77 : 0;
}
}  // namespace

int bench_main(int argc, char** argv, const char* program, const char* about, Options opt, View view) {
  MpiSession mpi(&argc, &argv);
  try {
    return bench_main_impl(mpi, argc, argv, program, about, std::move(opt), view);
  } catch (const std::exception& e) {
    // A collective may be half done on the other ranks: end them all, naming this rank.
    std::cerr << program << ": rank " << mpi.rank() << ": " << e.what() << std::endl;
    if (mpi.world_size() > 1) abort_job(1);
    return 1;
  }
}

}  // namespace shardtopk::bench
