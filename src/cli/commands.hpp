#pragma once
// The `shardtopk` subcommands, one file each (search.cpp, knn_graph.cpp, serve.cpp, info.cpp, eval.cpp,
// import.cpp, plan.cpp): the arguments main.cpp parses into, and the function that runs the
// command with them and returns the process exit code. The flags themselves are declared in
// main.cpp, the one file that includes CLI11 (a heavy header: one copy keeps the build short).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardtopk/importers.hpp"

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
  std::string filter_json;  // one filter for every query (docs/FILTERS.md), or @FILE
  bool filter_given = false;  // --filter-json was given: its text must then be a filter (empty is an error)
  // Ranges and pages over the total order (CPU engine), the same for every query:
  std::optional<double> min_score;     // inner_product, cosine: rows scoring >= this
  std::optional<double> max_distance;  // l2: rows at squared distance <= this
  int limit = 0;                       // k under another name (0: --k)
  std::string search_after;            // "SCORE,ID": rows after that pair in the order ("": none)
};
/// search and serve start MPI (MpiSession) with main's argc/argv.
int run_search(const SearchArgs& a, int* argc, char*** argv);

struct KnnGraphArgs {
  std::string config;
  std::vector<std::string> overrides;  // key=value
  int k = 10;
  std::string out;
  bool exclude_self = false;
  bool overwrite = false;
  int batch = 1024;                    // rows per search
  std::int64_t block_rows = 65536;     // rows per durable append to the output
  std::string timings_json;
  std::int64_t stop_after_blocks = -1; // tests: kill the job after this many blocks (-1: never)
};
/// The exact k-NN graph of the corpus (docs/KNN_GRAPH.md); starts MPI like search.
int run_knn_graph(const KnnGraphArgs& a, int* argc, char*** argv);

struct ServeArgs {
  std::string config;
  std::vector<std::string> overrides;  // key=value
  std::string port_file;
};
int run_serve(const ServeArgs& a, int* argc, char*** argv);

struct InfoArgs {
  std::string path;
  bool json = false;
};
int run_info(const InfoArgs& a);

struct EvalArgs {
  std::string results, truth, json_out;
  int show = 0;  // print the first N queries' results with labels/words when the truth file has them
};
int run_eval(const EvalArgs& a);

struct ImportArgs {
  std::string source;  // fashion-mnist, glove or raw
  ImportOptions io;
  std::string train_dtype = "float32";
  std::string fm_dir = "/usr/share/datasets/fashion-mnist";
  std::string glove_json;
  std::uint64_t glove_seed = 42;
  int glove_queries = 1000;
  std::string raw_corpus, raw_queries, raw_metric = "inner_product";
  std::int64_t raw_dim = 0, raw_rows = -1, raw_query_rows = -1;  // -1: inferred from the file size
};
int run_import(const ImportArgs& a);

struct StorageArgs {
  std::string action;  // info or verify
  std::string dir;
  std::string corpus;  // verify: the corpus file to check against the recorded identity
  bool json = false;
};
/// `storage info` (exit 0) and `storage verify` (exit 0: every check passed; 1: damage; 3: only a
/// torn log tail, which a start-up cuts). Neither takes the directory's lock.
int run_storage(const StorageArgs& a);

struct PlanArgs {
  std::string config;
  std::vector<std::string> overrides;
  int ranks = 1;
  int ranks_per_node = 0;  // 0: = ranks
};
int run_plan(const PlanArgs& a);

struct KeygenArgs {
  std::string name, role;
  double rate = 0;   // requests per second; 0: not limited
  double burst = 0;  // 0: one second's worth
};
int run_keygen(const KeygenArgs& a);

}  // namespace shardtopk::cli
