// `shardtopk import`: Fashion-MNIST, GloVe and raw float32 files into the ann-benchmarks HDF5
// layout with float64 ground truth (the importers live in src/tools/importers.cpp).
#include <string>

#include "cli/cli_util.hpp"
#include "cli/commands.hpp"
#include "core/log.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/importers.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::cli {

int run_import(const ImportArgs& a) {
  init_logging(0, 1);
  ImportOptions io = a.io;
  io.train_dtype = parse_dtype(a.train_dtype, "--train-dtype");
  // The output never replaces an input (the raw files, GloVe's JSON).
  check_output_path(io.out, {{"corpus", a.raw_corpus}, {"queries", a.raw_queries}, {"GloVe", a.glove_json}});
  if (a.source == "fashion-mnist") {
    import_fashion_mnist(a.fm_dir, io);
  } else if (a.source == "glove") {
    import_glove_wink(a.glove_json, a.glove_seed, a.glove_queries, io);
  } else {
    SHARDTOPK_ASSERT(a.source == "raw");
    std::string deprecation;
    const Metric m = parse_metric(a.raw_metric, "--metric", &deprecation);
    if (!deprecation.empty()) spdlog::warn("{}", deprecation);
    import_raw_f32(a.raw_corpus, a.raw_dim, a.raw_queries, m, io, a.raw_rows, a.raw_query_rows);
  }
  return 0;
}

}  // namespace shardtopk::cli
