#pragma once
// The `shardtopk` subcommands. Each returns the process exit code.
#include <cstdint>
#include <string>
#include <vector>

namespace shardtopk::cli {

struct SearchArgs {
  std::string config;
  std::vector<std::string> overrides;  // key=value
  std::string queries;
  std::string queries_dataset = "test";
  int k = 10;
  std::string out;
  std::string timings_json;
  std::int64_t max_queries = -1;
  int batch = 0;  // 0: search.batch_max
};
int run_search(const SearchArgs& a, int* argc, char*** argv);

struct ServeArgs {
  std::string config;
  std::vector<std::string> overrides;  // key=value
  std::string port_file;
};
int run_serve(const ServeArgs& a, int* argc, char*** argv);

int run_info(const std::string& path, bool json);

struct EvalArgs {
  std::string results, truth, json_out;
  int show = 0;  // print the first N queries' results with labels/words when the truth file has them
};
int run_eval(const EvalArgs& a);

struct PlanArgs {
  std::string config;
  std::vector<std::string> overrides;
  int ranks = 1;
  int ranks_per_node = 0;  // 0: = ranks
};
int run_plan(const PlanArgs& a);

}  // namespace shardtopk::cli
