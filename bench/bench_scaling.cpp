// bench_scaling: scaling by rank count. Strong (-N) or weak (--rows-per-rank) scaling
// of one corpus shape; per configuration latency, QPS, scan GB/s per GPU, the time split into
// broadcast / scan / all-gather / merge, efficiency against one rank and #wrong.
#include "bench_main.hpp"

int main(int argc, char** argv) {
  shardtopk::bench::Options d;
  d.rows = {10'000'000};
  d.dims = {768};
  d.ks = {100};
  d.batches = {1, 64};
  d.dtypes = {shardtopk::Dtype::kFloat16};
  return shardtopk::bench::bench_main(argc, argv, "bench_scaling",
                                      "shardtopk scaling benchmark: one rank per GPU (or CPU ranks), generated corpus",
                                      d, shardtopk::bench::View::kScaling);
}
