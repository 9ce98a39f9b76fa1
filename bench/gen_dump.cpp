// bench_gen_dump SEED FIRST_ROW ROWS DIM: writes generate_rows() as raw little-endian float32
// [ROWS, DIM] to stdout. bench/test_generator.py compares the Python ports (numpy, torch) with it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "shardtopk/generator.hpp"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s SEED FIRST_ROW ROWS DIM > rows.f32\n", argv[0]);
    return 2;
  }
  const std::uint64_t seed = std::strtoull(argv[1], nullptr, 0);
  const std::int64_t first = std::atoll(argv[2]), rows = std::atoll(argv[3]), dim = std::atoll(argv[4]);
  std::vector<float> out(static_cast<size_t>(rows * dim));
  shardtopk::generate_rows(seed, first, rows, dim, out.data(), 0);
  return std::fwrite(out.data(), sizeof(float), out.size(), stdout) == out.size() ? 0 : 1;
}
