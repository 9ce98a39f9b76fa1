// Writes the HDF5 seed files of fuzz/corpus/hdf5 (committed; rerun to refresh them):
//   make_hdf5_seeds OUT_DIR
// Small valid files covering what inspect_dataset looks at: contiguous and chunked+deflate
// float32, float16, float64, int64 ids, a nested group, numeric root attributes. No
// variable-length strings: libhdf5 1.10.8 overruns memory on a damaged global heap (where
// those live), which would stop every run at that library bug (fuzz/README.md, finding 3).
#include <cstdint>
#include <string>
#include <vector>

#include "shardtopk/corpus_io.hpp"

int main(int argc, char** argv) {
  using namespace shardtopk;
  const std::string dir = argc > 1 ? argv[1] : ".";
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, -1, 0.5f, 1e20f, -1e20f};
  const std::vector<double> xd(x.begin(), x.end());
  const std::vector<std::int64_t> ids = {10, 11, 12, 13, 14, 15};
  {
    H5Writer w(dir + "/contiguous_f32.h5");
    w.write_f32("train", x.data(), 6, 2);
    w.write_f32("test", x.data(), 2, 2);
    w.set_attr("dim", std::int64_t{2});
    w.close();
  }
  {
    H5Writer w(dir + "/chunked_deflate_f32_ids.h5");
    w.write_f32("train", x.data(), 6, 2, 2);
    w.write_i64("ids", ids.data(), 6, 0);
    w.set_attr("k", std::int64_t{3});
    w.close();
  }
  {
    H5Writer w(dir + "/f16_f64_nested.h5");
    w.write_f16("train", x.data(), 3, 4);
    w.write_f64("emb/vectors", xd.data(), 4, 3);
    w.set_attr("scale", 0.5);
    w.close();
  }
  return 0;
}
