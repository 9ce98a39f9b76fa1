#pragma once
// The output file of `shardtopk knn-graph` (docs/KNN_GRAPH.md): `ids` int64 [rows, k] and
// `scores` float32 [rows, k] with root attributes naming the job, and `rows_done`, the rows
// [0, rows_done) that are complete and on stable storage. A job is continued only by a run with
// the same identity (GraphIdentity); anything else is refused naming each difference.
// Internal header (src/io).
#include <cstdint>
#include <string>

#include "shardtopk/types.hpp"

namespace shardtopk {

/// What makes two runs' rows interchangeable: a job continues a file only when every compared
/// field is equal. The rank count, batch and block sizes are not part of it (the answer does not
/// depend on them).
struct GraphIdentity {
  std::int64_t rows = 0;       ///< corpus rows N (the file's rows)
  std::int64_t dim = 0;        ///< corpus dimension
  int k = 0;                   ///< neighbours per row (the file's columns)
  bool exclude_self = false;
  Metric metric = Metric::kInnerProduct;
  Dtype dtype = Dtype::kFloat32;  ///< the engine's storage type (engine.dtype)
  std::string engine;          ///< "cpu" or "cuda"; "" when not known yet: not compared
  std::string corpus_path;     ///< recorded for people, not compared (a moved file is the same corpus)
  std::string corpus_dataset;
  std::string ids_dataset;     ///< corpus.ids_dataset ("" : ids are row positions)
  std::int64_t corpus_bytes = 0;          ///< size of the corpus file
  std::uint32_t corpus_sample_crc32c = 0; ///< CRC-32C of its first and last MiB (storage's identity)
};

/// An open knn-graph output file on rank 0. Rows are appended in order, each append made
/// durable (data, then the rows_done marker, each flushed and fsync'ed) before it returns, so a
/// job killed at any moment leaves a file whose rows [0, rows_done) are complete.
class GraphFile {
 public:
  /// Read-only check, before a job loads its corpus: the rows a run with `want` would continue
  /// from (0 when `path` does not exist or `overwrite`). @throws Error when `path` exists and is
  /// not a knn-graph file, or was written with another identity (naming every differing field
  /// with both values), unless `overwrite`; and, overwrite or not, when another process has it
  /// open (HDF5's file lock: a job still writing it).
  static std::int64_t check(const std::string& path, const GraphIdentity& want, bool overwrite);

  /// Opens `path` for `want`: creates it (absent, or `overwrite`: truncated) with `ids` and
  /// `scores` [want.rows, want.k] allocated, or continues it after the checks of check().
  /// @throws Error as check(), or when the file cannot be created or written.
  GraphFile(const std::string& path, const GraphIdentity& want, bool overwrite);
  ~GraphFile();
  GraphFile(const GraphFile&) = delete;
  GraphFile& operator=(const GraphFile&) = delete;

  /// Rows [0, rows_done()) are complete.
  std::int64_t rows_done() const { return rows_done_; }

  /// Writes rows [rows_done(), rows_done() + n): ids [n, k], scores [n, k]; then records the new
  /// rows_done. Durable when it returns. @throws Error past the last row or on an I/O failure.
  void append(std::int64_t n, const std::int64_t* ids, const float* scores);

  /// Closes the file (the destructor closes without throwing).
  void close();

 private:
  std::string path_;
  long long file_ = -1;  // hid_t, opaque here
  std::int64_t rows_ = 0;
  int k_ = 0;
  std::int64_t rows_done_ = 0;
};

}  // namespace shardtopk
