// bench_write_corpus: writes a generated corpus (shardtopk/generator.hpp, the rows bench_scaling
// generates) to an HDF5 file in the ann-benchmarks layout, streaming blocks of rows so that a
// corpus larger than memory can be written. Used to measure ingestion (`shardtopk search` logs
// the read rate and the ingest time) on files of the size users load.
//
//   bench_write_corpus -o FILE -N ROWS -d DIM [-t float16|float32] [-q QUERIES] [--seed S]
//                      [--distance dot|euclidean|angular] [--chunk-rows R]
//
// Datasets: `train` [ROWS, DIM] = generated_value(S, row, col) rounded to the dtype (ties to
// even, as the engines store it), contiguous, unless --chunk-rows R > 0 (chunked, deflate 1);
// `test` [QUERIES, DIM] float32 = rows 0.. of seed S + 1 (the benchmarks' queries). File
// attribute `distance` (ann-benchmarks names). Progress on stderr with MB/s.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "shardtopk/corpus_io.hpp"
#include "shardtopk/generator.hpp"

int main(int argc, char** argv) {
  using namespace shardtopk;
  CLI::App app{"bench_write_corpus: a generated corpus as an HDF5 file (ann-benchmarks layout)"};
  std::string out, dtype = "float16", distance = "dot";
  std::int64_t rows = 0, dim = 0, queries = 100, chunk_rows = 0;
  std::uint64_t seed = 1;
  app.add_option("-o,--output", out, "HDF5 file to create (overwritten)")->required();
  app.add_option("-N,--rows", rows, "corpus rows")->required()->check(CLI::PositiveNumber);
  app.add_option("-d,--dim", dim, "dimensions")->required()->check(CLI::PositiveNumber);
  app.add_option("-t,--dtype", dtype, "stored type of `train`")->check(CLI::IsMember({"float16", "float32"}))
      ->capture_default_str();
  app.add_option("-q,--queries", queries, "rows of `test` (float32)")->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", seed, "generator seed of the corpus (queries: seed + 1)")->capture_default_str();
  app.add_option("--distance", distance, "file attribute `distance`")
      ->check(CLI::IsMember({"dot", "euclidean", "angular"}))
      ->capture_default_str();
  app.add_option("--chunk-rows", chunk_rows, "0: contiguous; else chunked (R rows) with deflate level 1")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    // The project's writer (H5Writer): file, streamed `train`, `test`, the attribute; HDF5's
    // reason in every error.
    H5Writer w(out);
    const Dtype dt = parse_dtype(dtype);
    w.create_rows("train", dt, rows, dim, chunk_rows);
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t{1} << 26) / dim);  // 64 Mi values
    std::vector<float> f(static_cast<size_t>(std::min(block, rows) * dim));
    const auto t0 = std::chrono::steady_clock::now();
    const double elem = dt == Dtype::kFloat16 ? 2.0 : 4.0;
    double last = 0;
    for (std::int64_t r0 = 0; r0 < rows; r0 += block) {
      const std::int64_t n = std::min(block, rows - r0);
      generate_rows(seed, r0, n, dim, f.data(), threads);
      w.write_rows(r0, n, f.data());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s - last > 2.0 || r0 + n == rows) {
        last = s;
        std::fprintf(stderr, "bench_write_corpus: %lld/%lld rows, %.1f s, %.0f MB/s\n", static_cast<long long>(r0 + n),
                     static_cast<long long>(rows), s, (r0 + n) * dim * elem / s / 1e6);
      }
    }
    if (queries > 0) {
      std::vector<float> q(static_cast<size_t>(queries * dim));
      generate_rows(seed + 1, 0, queries, dim, q.data(), threads);
      w.write_f32("test", q.data(), queries, dim);
    }
    w.set_attr("distance", distance);
    w.close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_write_corpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
