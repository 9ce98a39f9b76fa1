// Writes HDF5 seed files:
//   make_hdf5_seeds META_DIR
//   make_hdf5_seeds --differential DIFF_DIR
// META_DIR: the seeds of fuzz_hdf5_meta (fuzz/corpus/hdf5, committed; rerun to refresh them).
// Small valid files covering what inspect_dataset looks at: contiguous and chunked+deflate
// float32, float16, float64, int64 ids, a nested group, numeric root attributes. No
// variable-length strings: libhdf5 1.10.8 overruns memory on a damaged global heap (where
// those live), which would stop every run at that library bug (fuzz/README.md,
// vlen_*_global_heap_overlap.h5).
// DIFF_DIR: the seeds of fuzz_hdf5_differential (launch/fuzz.sh writes them into build-fuzz/):
// the files of testing/hdf5_matrix.hpp that name other files by relative names only, one
// per case (the target writes the files they name itself).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <stdlib.h>

#include "hdf5_matrix.hpp"
#include "shardtopk/corpus_io.hpp"

namespace {
// The differential seeds: the matrix written into a scratch folder, its seed cases copied.
int write_differential_seeds(const std::string& out) {
  namespace fs = std::filesystem;
  shardtopk::test::h5m::set_prefix_environment();
  std::string tmpl = (fs::temp_directory_path() / "shardtopk-seeds-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) return 1;
  fs::create_directories(out);
  int n = 0;
  for (const auto& c : shardtopk::test::h5m::write_matrix(tmpl)) {
    if (!c.seed) continue;
    fs::copy_file(tmpl + "/" + c.file, out + "/" + c.name + ".h5", fs::copy_options::overwrite_existing);
    ++n;
  }
  fs::remove_all(tmpl);
  std::printf("make_hdf5_seeds: %d differential seeds in %s\n", n, out.c_str());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace shardtopk;
  if (argc > 2 && std::string(argv[1]) == "--differential") return write_differential_seeds(argv[2]);
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
