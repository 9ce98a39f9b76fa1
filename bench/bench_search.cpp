// bench_search: the kernel benchmark (batch 1 and batched). One process per rank (one rank per GPU,
// CPU ranks where none); sweeps N, D, dtype, K and B; per configuration host-to-host p50/p99,
// device-only search time, QPS, TFLOP/s, fraction of the read floor and #wrong.
#include "bench_main.hpp"

int main(int argc, char** argv) {
  shardtopk::bench::Options d;
  d.rows = {10'000, 100'000, 1'000'000, 10'000'000};
  d.dims = {384, 768, 1024};
  d.ks = {1, 8, 100, 1024};
  d.batches = {1};
  d.dtypes = {shardtopk::Dtype::kFloat32, shardtopk::Dtype::kFloat16};
  return shardtopk::bench::bench_main(argc, argv, "bench_search",
                                      "shardtopk kernel benchmark: exact top-K over a generated corpus", d,
                                      shardtopk::bench::View::kSearch);
}
