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
#include <hdf5.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/half.hpp"
#include "shardtopk/generator.hpp"

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench_write_corpus: %s\n", what.c_str());
  std::exit(1);
}

hid_t f16_type() {
  const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, 10, 5, 0, 10);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, 15);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_write_corpus: a generated corpus as an HDF5 file (ann-benchmarks layout)"};
  std::string out, dtype = "float16", distance = "dot";
  std::int64_t rows = 0, dim = 0, queries = 100, chunk_rows = 0;
  std::uint64_t seed = 1;
  app.add_option("-o,--output", out, "HDF5 file to create (overwritten)")->required();
  app.add_option("-N,--rows", rows, "corpus rows")->required()->check(CLI::PositiveNumber);
  app.add_option("-d,--dim", dim, "dimensions")->required()->check(CLI::PositiveNumber);
  app.add_option("-t,--dtype", dtype, "stored type of `train`")->check(CLI::IsMember({"float16", "float32"}));
  app.add_option("-q,--queries", queries, "rows of `test` (float32)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "generator seed of the corpus (queries: seed + 1)");
  app.add_option("--distance", distance, "file attribute `distance`")
      ->check(CLI::IsMember({"dot", "euclidean", "angular"}));
  app.add_option("--chunk-rows", chunk_rows, "0: contiguous; else chunked (R rows) with deflate level 1")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);

  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t file = H5Fcreate(out.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) die("cannot create '" + out + "'");
  const bool half = dtype == "float16";
  const hid_t ftype = half ? f16_type() : H5Tcopy(H5T_IEEE_F32LE);
  const hsize_t dims[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(dim)};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (chunk_rows > 0) {
    const hsize_t chunk[2] = {static_cast<hsize_t>(std::min(chunk_rows, rows)), static_cast<hsize_t>(dim)};
    H5Pset_chunk(dcpl, 2, chunk);
    H5Pset_deflate(dcpl, 1);
  } else {
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
  }
  const hid_t ds = H5Dcreate2(file, "train", ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (ds < 0) die("cannot create dataset 'train' in '" + out + "' (" + std::to_string(rows) + " x " +
                  std::to_string(dim) + " " + dtype + ")");

  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::int64_t block = std::max<std::int64_t>(1, (std::int64_t{1} << 26) / dim);  // 64 Mi values
  std::vector<float> f(static_cast<size_t>(std::min(block, rows) * dim));
  std::vector<std::uint16_t> h(half ? f.size() : 0);
  const auto t0 = std::chrono::steady_clock::now();
  double last = 0;
  const double elem = half ? 2.0 : 4.0;
  for (std::int64_t r0 = 0; r0 < rows; r0 += block) {
    const std::int64_t n = std::min(block, rows - r0);
    shardtopk::generate_rows(seed, r0, n, dim, f.data(), threads);
    const void* data = f.data();
    if (half) {
      const std::int64_t total = n * dim, per = (total + threads - 1) / threads;
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          for (std::int64_t i = t * per; i < std::min(total, (t + 1) * per); ++i)
            h[static_cast<size_t>(i)] = shardtopk::half::to_f16(f[static_cast<size_t>(i)]);
        });
      for (auto& th : pool) th.join();
      data = h.data();
    }
    const hsize_t start[2] = {static_cast<hsize_t>(r0), 0}, count[2] = {static_cast<hsize_t>(n), dims[1]};
    const hid_t mspace = H5Screate_simple(2, count, nullptr);
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
    if (H5Dwrite(ds, ftype, mspace, space, H5P_DEFAULT, data) < 0)
      die("writing rows " + std::to_string(r0) + " .. " + std::to_string(r0 + n - 1) + " of '" + out + "' failed");
    H5Sclose(mspace);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s - last > 2.0 || r0 + n == rows) {
      last = s;
      std::fprintf(stderr, "bench_write_corpus: %lld/%lld rows, %.1f s, %.0f MB/s\n", static_cast<long long>(r0 + n),
                   static_cast<long long>(rows), s, (r0 + n) * dim * elem / s / 1e6);
    }
  }
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Tclose(ftype);

  if (queries > 0) {
    std::vector<float> q(static_cast<size_t>(queries * dim));
    shardtopk::generate_rows(seed + 1, 0, queries, dim, q.data(), threads);
    const hsize_t qd[2] = {static_cast<hsize_t>(queries), static_cast<hsize_t>(dim)};
    const hid_t qs = H5Screate_simple(2, qd, nullptr);
    const hid_t qds = H5Dcreate2(file, "test", H5T_IEEE_F32LE, qs, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (qds < 0 || H5Dwrite(qds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, q.data()) < 0)
      die("writing dataset 'test' of '" + out + "' failed");
    H5Dclose(qds);
    H5Sclose(qs);
  }
  const hid_t st = H5Tcopy(H5T_C_S1);
  H5Tset_size(st, H5T_VARIABLE);
  const hid_t as = H5Screate(H5S_SCALAR);
  const hid_t a = H5Acreate2(file, "distance", st, as, H5P_DEFAULT, H5P_DEFAULT);
  const char* p = distance.c_str();
  if (a < 0 || H5Awrite(a, st, &p) < 0) die("writing attribute 'distance' of '" + out + "' failed");
  H5Aclose(a);
  H5Sclose(as);
  H5Tclose(st);
  if (H5Fclose(file) < 0) die("closing '" + out + "' failed");
  return 0;
}
