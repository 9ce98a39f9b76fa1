// bench_device_api: the stream-ordered device API from C++ (ShardedIndex::search_async), the
// reference for the Python module's call overhead (bench/python_inprocess.py runs both).
//
//   bench_device_api [-N 10000] [-d 768] [-t float32] [-k 100] [-B 1] [-n 2000] [-w 200] [-J out.jsonl]
//
// One process, one GPU, a generated corpus (shardtopk/generator.hpp) built on the device;
// queries and answers in device memory, on a stream of the program's own (non-blocking). Per
// configuration it measures
//   host_us     the host's time per call, n calls back to back (the call's issue cost: it does
//               not wait for the device at batch 1)
//   stream_us   CUDA events around the same n calls, divided by n (throughput on the stream)
//   latency_us  median of isolated calls, events just before and after each, the stream idle
//               in between (one search's time on the stream)
// and checks every answer against the host path of the same index (search(): bit-identical is
// required; #wrong counts the differing entries). Exit code 1 when any is wrong.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "core/cuda_check.cuh"
#include "core/stats.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/config.hpp"
#include "shardtopk/generator.hpp"
#include "shardtopk/ingest.hpp"

namespace {

using namespace shardtopk;

struct Result {
  std::string dtype;
  int batch = 0, k = 0;
  double host_us = 0, stream_us = 0, latency_us = 0;
  long long wrong = 0;
};

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  CLI::App app{"The device API (search_async) from C++: host issue cost, stream time, latency"};
  long long rows = 10000, dim = 768;
  std::vector<std::string> dtypes{"float32"};
  std::vector<int> ks{100}, batches{1};
  int iters = 2000, warmup = 200, isolated = 200;
  std::string metric = "inner_product", json_path;
  std::vector<std::string> sets;
  app.add_option("-N", rows, "corpus rows")->capture_default_str();
  app.add_option("-d", dim, "dimension")->capture_default_str();
  app.add_option("-t", dtypes, "storage dtypes")->delimiter(',')->capture_default_str();
  app.add_option("-k", ks, "k values")->delimiter(',')->capture_default_str();
  app.add_option("-B", batches, "batch sizes")->delimiter(',')->capture_default_str();
  app.add_option("-m", metric, "inner_product or l2")->capture_default_str();
  app.add_option("-n", iters, "calls timed back to back")->capture_default_str();
  app.add_option("-w", warmup, "warm-up calls")->capture_default_str();
  app.add_option("--isolated", isolated, "isolated calls for the latency")->capture_default_str();
  app.add_option("-J", json_path, "JSON lines output (- for stdout)");
  app.add_option("--set", sets, "config key=value (repeatable)");
  CLI11_PARSE(app, argc, argv);

  std::vector<Result> results;
  try {
    int bmax = 1, kmax = 1;
    for (int b : batches) bmax = std::max(bmax, b);
    for (int k : ks) kmax = std::max(kmax, k);
    std::unique_ptr<std::ostream> jfile;
    std::ostream* jout = nullptr;
    if (json_path == "-") jout = &std::cout;
    else if (!json_path.empty()) jout = (jfile = std::make_unique<std::ofstream>(json_path, std::ios::app)).get();

    // Queries on the device, answers on the device, a stream of our own.
    const std::uint64_t seed = 1;
    std::vector<float> hq(static_cast<std::size_t>(bmax) * dim);
    for (int q = 0; q < bmax; ++q)
      for (long long j = 0; j < dim; ++j) hq[q * dim + j] = generated_value(seed + 1, q, j);
    float* dq = nullptr;
    std::int64_t* dids = nullptr;
    float* dscores = nullptr;
    CHECK_CUDA(cudaMalloc(&dq, hq.size() * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&dids, static_cast<std::size_t>(bmax) * kmax * sizeof(std::int64_t)));
    CHECK_CUDA(cudaMalloc(&dscores, static_cast<std::size_t>(bmax) * kmax * sizeof(float)));
    CHECK_CUDA(cudaMemcpy(dq, hq.data(), hq.size() * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t stream = nullptr;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));

    for (const std::string& dt : dtypes) {
      Config cfg;
      apply_override(cfg, "engine.backend=cuda");
      apply_override(cfg, "engine.dtype=" + dt);
      apply_override(cfg, "search.metric=" + metric);
      apply_override(cfg, "search.k_max=" + std::to_string(kmax));
      apply_override(cfg, "search.batch_max=" + std::to_string(bmax));
      for (const std::string& s : sets) apply_override(cfg, s);
      ShardInput in;
      in.generated = true;
      in.seed = seed;
      in.rows = rows;
      in.dim = dim;
      auto comm = make_mpi_communicator(cfg.comm.timeout_s);
      SHARDTOPK_EXPECTS(comm->world_size() == 1, "bench_device_api runs as one process");
      auto index = build_index(cfg, cfg.search.metric.value_or(Metric::kInnerProduct), rows, RowRange{0, rows}, in,
                               std::move(comm));
      for (int b : batches) {
        for (int k : ks) {
          // The call as an application makes it: admitted (k, batch), then searched.
          const auto call = [&] { index->search_async(index->admit_device(dq, stream, b, k), dids, dscores); };
          for (int i = 0; i < warmup; ++i) call();
          CHECK_CUDA(cudaStreamSynchronize(stream));
          Result r;
          r.dtype = dt;
          r.batch = b;
          r.k = k;
          CHECK_CUDA(cudaEventRecord(e0, stream));
          Stopwatch host;
          for (int i = 0; i < iters; ++i) call();
          r.host_us = host.us() / iters;
          CHECK_CUDA(cudaEventRecord(e1, stream));
          CHECK_CUDA(cudaEventSynchronize(e1));
          float ms = 0;
          CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
          r.stream_us = 1e3 * ms / iters;
          std::vector<double> lat;
          for (int i = 0; i < isolated; ++i) {
            CHECK_CUDA(cudaEventRecord(e0, stream));
            call();
            CHECK_CUDA(cudaEventRecord(e1, stream));
            CHECK_CUDA(cudaEventSynchronize(e1));
            CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
            lat.push_back(1e3 * ms);
          }
          r.latency_us = percentile(lat, 50);
          // The device answer against the host path's, entry by entry (bit-identical).
          const std::size_t n = static_cast<std::size_t>(b) * k;
          std::vector<std::int64_t> ids(n), want_ids(n);
          std::vector<float> scores(n), want_scores(n);
          CHECK_CUDA(cudaMemcpy(ids.data(), dids, n * sizeof(std::int64_t), cudaMemcpyDeviceToHost));
          CHECK_CUDA(cudaMemcpy(scores.data(), dscores, n * sizeof(float), cudaMemcpyDeviceToHost));
          index->search(hq.data(), b, k, want_ids.data(), want_scores.data());
          for (std::size_t i = 0; i < n; ++i)
            r.wrong += ids[i] != want_ids[i] || std::memcmp(&scores[i], &want_scores[i], sizeof(float)) != 0;
          results.push_back(r);
          if (jout) {
            nlohmann::json j = {{"bench", "device_api"}, {"api", "c++ search_async"}, {"rows", rows},
                                {"dim", dim},           {"dtype", dt},                {"metric", metric},
                                {"k", k},               {"batch", b},                 {"iters", iters},
                                {"host_us", r.host_us}, {"stream_us", r.stream_us},   {"latency_us", r.latency_us},
                                {"wrong", r.wrong},     {"version", version()}};
            *jout << j.dump() << "\n" << std::flush;
          }
        }
      }
    }
    cudaFree(dq);
    cudaFree(dids);
    cudaFree(dscores);
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_device_api: %s\n", e.what());
    return 2;
  }
  std::printf("# bench_device_api: N=%lld D=%lld %s, one GPU, device queries and answers\n", rows, dim, metric.c_str());
  std::printf("# %-9s %6s %6s %10s %10s %11s %7s\n", "dtype", "batch", "k", "host", "stream", "latency", "#wrong");
  std::printf("# %-9s %6s %6s %10s %10s %11s %7s\n", "", "", "", "(us/call)", "(us/call)", "(us, p50)", "");
  long long wrong = 0;
  for (const Result& r : results) {
    std::printf("  %-9s %6d %6d %10.2f %10.2f %11.2f %7lld\n", r.dtype.c_str(), r.batch, r.k, r.host_us, r.stream_us,
                r.latency_us, r.wrong);
    wrong += r.wrong;
  }
  return wrong ? 1 : 0;
}
