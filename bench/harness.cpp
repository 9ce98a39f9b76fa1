#include <ctime>
#include "harness.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "shardtopk/error.hpp"

#ifndef SHARDTOPK_GIT_COMMIT
#define SHARDTOPK_GIT_COMMIT "unknown"
#endif

namespace shardtopk::bench {

std::int64_t parse_count(const std::string& s) {
  SHARDTOPK_EXPECTS(!s.empty(), "empty number in a list");
  double mul = 1;
  std::string t = s;
  const char c = t.back();
  if (c == 'k' || c == 'K') mul = 1e3;
  if (c == 'm' || c == 'M') mul = 1e6;
  if (c == 'g' || c == 'G') mul = 1e9;
  if (mul != 1) t.pop_back();
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  SHARDTOPK_EXPECTS(end && *end == '\0' && v >= 0, "'", s, "' is not a count (e.g. 1000, 10k, 1M)");
  return static_cast<std::int64_t>(std::llround(v * mul));
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  SHARDTOPK_EXPECTS(!out.empty(), "empty list '", s, "'");
  return out;
}

namespace {

template <typename T>
std::vector<T> parse_counts(const std::string& s, const char* flag) {
  std::vector<T> out;
  for (const auto& x : split_commas(s)) {
    const std::int64_t v = parse_count(x);
    SHARDTOPK_EXPECTS(v >= 1, flag, ": values must be >= 1, got '", x, "'");
    out.push_back(static_cast<T>(v));
  }
  return out;
}

}  // namespace

bool parse_options(int argc, char** argv, const std::string& program, const std::string& about, Options* o,
                   int* exit_code) {
  CLI::App app{about, program};
  std::string rows, rpr, dims, ks, bs, dts, mode = "auto";
  app.add_option("-N,--rows", rows, "total corpus rows, comma list (strong scaling; 10k, 1M accepted)");
  app.add_option("--rows-per-rank", rpr, "rows per rank, comma list (weak scaling; overrides -N)");
  app.add_option("-d,--dim", dims, "dimensions, comma list");
  app.add_option("-k,--k", ks, "K values, comma list");
  app.add_option("-B,--batch", bs, "batch sizes, comma list");
  app.add_option("-t,--dtype", dts, "storage dtypes, comma list: float32, float16, bfloat16");
  app.add_option("-m,--metric", o->metric, "inner_product | cosine | l2 (with --corpus, default: the file's)");
  app.add_option("-n,--iters", o->iters, "timed batches per configuration")->check(CLI::PositiveNumber);
  app.add_option("-w,--warmup", o->warmup, "warm-up batches per configuration")->check(CLI::NonNegativeNumber);
  app.add_option("-c,--check", o->check, "check sampled answers (0|1); a wrong answer exits non-zero")
      ->check(CLI::Range(0, 1));
  app.add_option("-J,--json", o->json_path, "append one JSON record per configuration to FILE ('-': stdout)");
  app.add_option("--set", o->sets, "config override key=value (engine.backend, comm.backend, engine.threads, ...)");
  app.add_option("--corpus", o->corpus, "HDF5 corpus instead of generated rows (-N/-d taken from the file)");
  app.add_option("--dataset", o->dataset, "dataset inside --corpus");
  app.add_option("--seed", o->seed, "generator seed of the corpus (queries: seed + 1)");
  app.add_option("--check-queries", o->check_queries, "sampled queries checked per configuration")
      ->check(CLI::PositiveNumber);
  app.add_option("--check-mode", mode, "auto | oracle (float64 top-K) | count (rows beating the returned K-th)");
  app.add_option("--check-device", o->check_device,
                 "count mode: 0 scan rows on the host, 1 count on the rank's GPU when available (generated "
                 "corpus, inner_product or l2), 2 both: wrong where they disagree, exit 77 (skipped) when a rank "
                 "had no device pass")
      ->check(CLI::Range(0, 2));
  app.add_option("--oracle-max-values", o->oracle_max_values, "auto mode: oracle top-K up to N*D values, count above");
  app.add_option("--split", o->split, "extra instrumented iterations timing broadcast/scan/all-gather/merge (0|1)")
      ->check(CLI::Range(0, 1));
  app.add_option("--host-rows", o->host_rows,
                 "CUDA engine: materialise generated rows on the host and upload them (default: generated on the device)")
      ->check(CLI::Range(0, 1));
  app.add_option("--floor-GBps", o->floor_gbps, "read floor per GPU in GB/s (H200 measured: 4500)");
  app.add_option("--baseline", o->baseline, "JSON lines holding 1-rank records: strong/weak scaling efficiency");
  app.add_option("--check-threads", o->check_threads, "host threads for checks (0: cores / ranks per node)");
  app.add_option("--tag", o->tag, "free text copied into every JSON record");
  app.add_option("--git", o->git, "commit recorded in every JSON record (default: the source's at configure time)");
  app.add_option("--corrupt", o->corrupt, "tests only: 1 damages returned ids, 2 the count check's device pass")
      ->check(CLI::Range(0, 2));
  try {
    app.parse(argc, argv);
    if (!rows.empty()) o->rows = parse_counts<std::int64_t>(rows, "-N");
    if (!rpr.empty()) o->rows_per_rank = parse_counts<std::int64_t>(rpr, "--rows-per-rank");
    if (!dims.empty()) o->dims = parse_counts<std::int64_t>(dims, "-d");
    if (!ks.empty()) o->ks = parse_counts<int>(ks, "-k");
    if (!bs.empty()) o->batches = parse_counts<int>(bs, "-B");
    if (!dts.empty()) {
      o->dtypes.clear();
      for (const auto& x : split_commas(dts)) o->dtypes.push_back(parse_dtype(x, "-t"));
    }
    SHARDTOPK_EXPECTS(mode == "auto" || mode == "oracle" || mode == "count", "--check-mode '", mode,
                      "': expected auto, oracle or count");
    o->check_mode = mode == "oracle" ? CheckMode::kOracle : mode == "count" ? CheckMode::kCount : CheckMode::kAuto;
    if (!o->metric.empty()) (void)parse_metric(o->metric, "-m");
    Config probe;
    for (const auto& s : o->sets) apply_override(probe, s);  // reject bad keys before any work
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    return false;
  } catch (const Error& e) {
    std::cerr << program << ": " << e.what() << "\n";
    *exit_code = 2;
    return false;
  }
  return true;
}

std::string git_commit(const std::string& override) {
  return override.empty() ? std::string(SHARDTOPK_GIT_COMMIT) : override;
}

std::string utc_now() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto p = line.find(':');
      if (p != std::string::npos) return line.substr(line.find_first_not_of(" \t", p + 1));
    }
  }
  return "cpu";
}

std::string Table::header() const {
  std::ostringstream a, b;
  a << "#";
  b << "#";
  for (const auto& c : cols_) {
    a << ' ' << std::string(std::max<int>(0, c.width - static_cast<int>(c.name.size())), ' ') << c.name;
    b << ' ' << std::string(std::max<int>(0, c.width - static_cast<int>(c.unit.size())), ' ') << c.unit;
  }
  return a.str() + "\n" + b.str() + "\n";
}

std::string Table::line(const std::vector<std::string>& cells) const {
  std::ostringstream a;
  a << ' ';
  for (size_t i = 0; i < cols_.size(); ++i) {
    const std::string& s = i < cells.size() ? cells[i] : std::string("-");
    a << ' ' << std::string(std::max<int>(0, cols_[i].width - static_cast<int>(s.size())), ' ') << s;
  }
  return a.str() + "\n";
}

std::string fmt_num(double v, int precision) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

std::string fmt_int(long long v) { return std::to_string(v); }

void write_json_line(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  if (path == "-") {
    std::cout << j.dump() << std::endl;
    return;
  }
  std::ofstream f(path, std::ios::app);
  SHARDTOPK_EXPECTS(f.good(), "cannot open '", path, "' for writing");
  f << j.dump() << "\n";
  SHARDTOPK_EXPECTS(f.good(), "cannot write '", path, "'");
}

std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::ifstream f(path);
  SHARDTOPK_EXPECTS(f.good(), "cannot open '", path, "'");
  std::vector<nlohmann::json> out;
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[0] == '#') continue;
    try {
      out.push_back(nlohmann::json::parse(line));
    } catch (const std::exception& e) {
      throw Error("'" + path + "' line " + std::to_string(n) + ": not JSON (" + e.what() + ")");
    }
  }
  return out;
}

int run_on_ranks(int argc, char** argv, const char* program, int (*body)(MpiSession&, int, char**)) {
  MpiSession mpi(&argc, &argv);
  try {
    return body(mpi, argc, argv);
  } catch (const std::exception& e) {
    std::cerr << program << ": rank " << mpi.rank() << ": " << e.what() << std::endl;
    if (mpi.world_size() > 1) abort_job(1);
    return 1;
  }
}

}  // namespace shardtopk::bench
