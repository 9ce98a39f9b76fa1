// ingest_bench: how fast one rank reads its rows of an HDF5 corpus into host memory (float32),
// the CPU path's load step. A program, not a test: prints one JSON line per run, then a table.
//
//   build/bench/ingest_bench -f /tmp/f32.h5 [-d train] [-r ROWS] [-c CHUNK_ROWS] [-t THREADS]
//                            [-n ITERS] [-w WARMUP] [--blocks [--as-f32] | --vector]
//                            [--hdf5-only] [--no-f16c]
//
// -r reads the first ROWS rows (default: all); -t is the reader's thread count (0 = all cores).
// Default: read_rows_into a fresh `new float[]` (what ShardedIndex does); --vector: read_rows
// into a HostMatrix (its std::vector is zeroed on one thread first); --blocks: stream the rows
// through read_row_blocks (the engine seam: float16 datasets as raw bits, or float32 with
// --as-f32) into a reused buffer. --hdf5-only: every read through H5Dread (io.direct_reads false);
// --no-f16c: the portable float16 conversion (io.f16c false). --check: after the timed runs, the
// rows read once more with these options and once through H5Dread alone (libhdf5 decodes and
// converts), compared bit for bit; the wrong values are counted (#wrong) and make the exit
// status 1.
// MB/s counts bytes of the dataset as stored (rows x dim x element size on disk), so float16 and
// float32 rates compare per byte read. The file should be in the page cache (a warm-up run puts
// it there when it fits in memory).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sys/resource.h>
#include <string>
#include <vector>

#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"

using namespace shardtopk;

// CPU seconds (user + system, all threads) of this process: on a shared machine the rate per
// CPU second is steadier than the wall-clock rate.
static double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

int main(int argc, char** argv) {
  std::string path, dataset = "train";
  long long rows = -1, chunk = 65536;
  int threads = 0, iters = 3, warmup = 1;
  bool blocks = false, into = true, as_f32 = false, direct = true, f16c = true, check_values = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-f") path = next();
    else if (a == "-d") dataset = next();
    else if (a == "-r") rows = std::atoll(next());
    else if (a == "-c") chunk = std::atoll(next());
    else if (a == "-t") threads = std::atoi(next());
    else if (a == "-n") iters = std::atoi(next());
    else if (a == "-w") warmup = std::atoi(next());
    else if (a == "--blocks") blocks = true, into = false;
    else if (a == "--vector") into = false;
    else if (a == "--hdf5-only") direct = false;
    else if (a == "--no-f16c") f16c = false;
    else if (a == "--as-f32") as_f32 = true;
    else if (a == "--check") check_values = true;
    else {
      std::fprintf(stderr, "usage: %s -f FILE [-d DATASET] [-r ROWS] [-c CHUNK_ROWS] [-t THREADS] [-n ITERS] [-w WARMUP] [--blocks [--as-f32] | --vector] [--hdf5-only] [--no-f16c] [--check]\n", argv[0]);
      return 2;
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "-f FILE is required\n");
    return 2;
  }
  try {
    const DatasetInfo info = inspect_dataset(path, dataset);
    if (info.dims.size() != 2) throw Error("dataset must be 2-D");
    const long long n = rows < 0 ? info.dims[0] : std::min<long long>(rows, info.dims[0]);
    const long long d = info.dims[1];
    const int esize = info.dtype == "float16" ? 2 : info.dtype == "float64" ? 8 : 4;
    const double bytes = double(n) * d * esize;
#ifdef INGEST_BENCH_LEGACY
    const char* mode = "vector";
#else
    const char* mode = into ? "into" : blocks ? (as_f32 ? "blk-f32" : "blocks") : "vector";
#endif
    std::printf("# ingest_bench %s '%s' [%lld x %lld] %s%s, %lld rows per read, threads %d, mode %s\n", path.c_str(),
                dataset.c_str(), n, d, info.dtype.c_str(), info.chunked ? (" chunked " + info.filters).c_str() : " contiguous",
                chunk, threads, mode);
    std::vector<double> secs, cpus;
    for (int it = 0; it < warmup + iters; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = cpu_seconds();
      double check = 0;
#ifdef INGEST_BENCH_LEGACY
      (void)threads;
      (void)blocks;
      (void)into;
      (void)as_f32;
      (void)direct;
      (void)f16c;
      const HostMatrix m = read_rows(path, dataset, RowRange{0, n}, chunk);
      check = m.data.empty() ? 0 : m.data[m.data.size() / 2];
#else
      ReadOptions opt;
      opt.chunk_rows = chunk;
      opt.threads = threads;
      opt.direct_reads = direct;
      opt.f16c = f16c;
      if (into) {
        std::unique_ptr<float[]> out(new float[static_cast<size_t>(n * d)]);
        read_rows_into(path, dataset, RowRange{0, n}, opt, out.get());
        check = out[static_cast<size_t>(n * d / 2)];
      } else if (blocks) {
        read_row_blocks(path, dataset, RowRange{0, n}, info.dtype == "float16" && !as_f32 ? RowFormat::kFloat16Bits : RowFormat::kFloat32,
                        opt, [&](const RowBlock& b) { check += b.rows; });
      } else {
        const HostMatrix m = read_rows(path, dataset, RowRange{0, n}, opt);
        check = m.data.empty() ? 0 : m.data[m.data.size() / 2];
      }
#endif
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double cs = cpu_seconds() - c0;
      if (it >= warmup) {
        secs.push_back(s);
        std::printf("{\"bench\":\"ingest\",\"file\":\"%s\",\"dtype\":\"%s\",\"chunked\":%s,\"rows\":%lld,\"dim\":%lld,"
                    "\"chunk_rows\":%lld,\"threads\":%d,\"mode\":\"%s\",\"seconds\":%.4f,\"MBps\":%.1f,\"check\":%g}\n",
                    path.c_str(), info.dtype.c_str(), info.chunked ? "true" : "false", n, d, chunk, threads,
                    mode, s, bytes / s / 1e6, cs, bytes / cs / 1e6, check);
        cpus.push_back(cs);
      }
    }
    std::sort(secs.begin(), secs.end());
    std::sort(cpus.begin(), cpus.end());
    std::printf("# %-10s %-7s %10s %10s %10s %12s\n", "dtype", "mode", "MB", "best s", "best MB/s", "MB/cpu-s");
    std::printf("  %-10s %-7s %10.1f %10.4f %10.1f %12.1f\n", info.dtype.c_str(), mode, bytes / 1e6, secs.front(),
                bytes / secs.front() / 1e6, bytes / cpus.front() / 1e6);
#ifndef INGEST_BENCH_LEGACY
    if (check_values) {
      ReadOptions opt;
      opt.chunk_rows = chunk;
      opt.threads = threads;
      opt.direct_reads = direct;
      opt.f16c = f16c;
      const HostMatrix got = read_rows(path, dataset, RowRange{0, n}, opt);
      opt.direct_reads = false;
      const HostMatrix ref = read_rows(path, dataset, RowRange{0, n}, opt);
      long long wrong = 0;
      for (size_t i = 0; i < got.data.size(); ++i)
        wrong += std::memcmp(&got.data[i], &ref.data[i], sizeof(float)) != 0;
      std::printf("# check against H5Dread: %zu values, #wrong %lld\n", got.data.size(), wrong);
      if (wrong) return 1;
    }
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ingest_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
