// bench_graph_rows: rows of a `shardtopk knn-graph` output as JSON, for checks in languages
// without an HDF5 reader (bench/torch_knn_graph.py):
//
//   bench_graph_rows GRAPH.h5 ROW [ROW ...]
//
// prints {"rows_done": R, "k": K, "ids": [[...] per ROW], "scores": [[...] per ROW]} (each score
// the float64 value of its float32, exactly). Exit 1 naming the file or the row when it cannot.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"

int main(int argc, char** argv) {
  using namespace shardtopk;
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_graph_rows GRAPH.h5 ROW [ROW ...]\n");
    return 2;
  }
  try {
    const std::string path = argv[1];
    std::int64_t n = 0, k = 0;
    const std::vector<std::int64_t> ids = read_int64_matrix(path, "ids", &n, &k);
    const HostMatrix scores = read_matrix(path, "scores", "graph row");
    const FileInfo fi = inspect_file(path);
    const auto done = fi.int_attributes.find("rows_done");
    SHARDTOPK_EXPECTS(done != fi.int_attributes.end() && done->second.size() == 1, "'", path,
                      "' has no rows_done attribute (not a knn-graph output)");
    nlohmann::json out = {{"rows_done", done->second[0]}, {"k", k}, {"ids", nlohmann::json::array()},
                          {"scores", nlohmann::json::array()}};
    for (int a = 2; a < argc; ++a) {
      const std::int64_t r = std::stoll(argv[a]);
      SHARDTOPK_EXPECTS(r >= 0 && r < n, "row ", r, " outside '", path, "' [", n, " x ", k, "]");
      out["ids"].push_back(std::vector<std::int64_t>(ids.begin() + r * k, ids.begin() + (r + 1) * k));
      out["scores"].push_back(std::vector<float>(scores.data.begin() + r * k, scores.data.begin() + (r + 1) * k));
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_graph_rows: %s\n", e.what());
    return 1;
  }
}
