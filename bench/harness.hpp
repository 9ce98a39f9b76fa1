#pragma once
/// @file harness.hpp
/// The small harness every shardtopk benchmark binary shares (nccl-tests style): one set of
/// flags, percentiles, JSON-lines records, a fixed-width table with a units row and a `#wrong`
/// column. Benchmarks verify their own answers; `main` exits non-zero when anything is wrong.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/stats.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/config.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::bench {

enum class CheckMode { kAuto, kOracle, kCount };

/// Every flag of bench_search / bench_scaling (one parser, the same flags for both).
struct Options {
  std::vector<std::int64_t> rows;           ///< -N: total rows (strong scaling); a list sweeps
  std::vector<std::int64_t> rows_per_rank;  ///< --rows-per-rank: weak scaling (overrides -N)
  std::vector<std::int64_t> dims{768};      ///< -d
  std::vector<int> ks{100};                 ///< -k
  std::vector<int> batches{1};              ///< -B
  std::vector<Dtype> dtypes{Dtype::kFloat16};  ///< -t
  std::string metric;                       ///< -m ("": inner_product, or the --corpus file's distance attribute)
  int iters = 20;                           ///< -n: timed batches per configuration
  int warmup = 5;                           ///< -w
  int check = 1;                            ///< -c 0|1
  std::string json_path;                    ///< -J: JSON lines, one record per configuration ("-": stdout)
  std::vector<std::string> sets;            ///< --set key=value (config keys, as the CLI)
  std::string corpus;                       ///< --corpus file.h5 (else generated rows)
  std::string dataset = "train";
  std::uint64_t seed = 1;                   ///< corpus seed; queries use seed + 1
  int check_queries = 8;                    ///< sampled queries checked per configuration
  CheckMode check_mode = CheckMode::kAuto;
  int check_device = 1;                     ///< count mode: 0 host scan, 1 GPU when available, 2 both (must agree)
  double oracle_max_values = 4e9;           ///< auto: oracle top-K below N·D, independent count above
  int split = 1;                            ///< extra instrumented iterations timing each step
  int host_rows = 0;                        ///< CUDA: materialise rows on the host (engines without `generated`)
  double floor_gbps = 4500;                 ///< read floor per GPU (GB/s)
  std::string baseline;                     ///< JSON lines with 1-rank records for efficiency
  int check_threads = 0;                    ///< host threads for checks (0: cores / local ranks)
  std::string tag;                          ///< free text copied into every record
  std::string git;                          ///< --git: the commit to record (default: CMake's at configure time)
  int corrupt = 0;                          ///< --corrupt 1|2 (tests only): damage returned answers so the check must fail
};

/// Parse argv (CLI11). `defaults` supplies the binary's default sweep. Returns false when the
/// program should exit now (--help), with `exit_code` set.
bool parse_options(int argc, char** argv, const std::string& program, const std::string& about,
                   Options* opt, int* exit_code);

/// "10k", "1M", "2.5M" → an integer (k/M/G suffixes are powers of ten). @throws Error naming s.
std::int64_t parse_count(const std::string& s);
/// "a,b,c" → its non-empty items. @throws Error for a list with none.
std::vector<std::string> split_commas(const std::string& s);

/// Git commit of the source: `override` when given (--git), else the one CMake saw at configure time.
std::string git_commit(const std::string& override = "");
std::string host_name();
/// The current time as UTC ISO 8601 (`2026-12-02T09:30:00Z`): the `date` of every record.
std::string utc_now();
/// Model name of this CPU (/proc/cpuinfo).
std::string cpu_name();

/// A fixed-width table: `#` header lines (names and units), one line per row.
class Table {
 public:
  struct Col {
    std::string name, unit;
    int width;
  };
  explicit Table(std::vector<Col> cols) : cols_(std::move(cols)) {}
  std::string header() const;
  /// One line from preformatted cells (right-aligned to each column's width).
  std::string line(const std::vector<std::string>& cells) const;

 private:
  std::vector<Col> cols_;
};

/// Fixed-point / general formatting helpers for table cells ("-" for NaN).
std::string fmt_num(double v, int precision = 1);
std::string fmt_int(long long v);

/// Append one JSON record as a line to `path` ("-": stdout). Empty path: nothing.
void write_json_line(const std::string& path, const nlohmann::json& j);
/// Read JSON lines (blank lines and lines starting with '#' skipped). @throws Error.
std::vector<nlohmann::json> read_json_lines(const std::string& path);

/// A benchmark's main(): starts MPI, runs `body` on every rank and returns its exit status. An
/// exception on a rank is printed as "PROGRAM: rank R: what" and, with several ranks, ends the
/// whole job (a collective may be half done on the others); the status is then 1.
int run_on_ranks(int argc, char** argv, const char* program, int (*body)(MpiSession&, int, char**));

}  // namespace shardtopk::bench
