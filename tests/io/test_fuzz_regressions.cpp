// Every input the fuzzers (fuzz/) found that broke shardtopk's contract, replayed through the
// same harness code in every build: it must end with shardtopk::Error or success, promptly (the
// harness aborts on any other outcome). fuzz/regressions/{config,hdf5}/ hold the inputs;
// fuzz/regressions/libhdf5/ holds inputs that crash libhdf5 itself and are not replayed here
// (fuzz/README.md).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define LLVMFuzzerTestOneInput fuzz_config_one
#include "../../fuzz/fuzz_config.cpp"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_hdf5_one
#include "../../fuzz/fuzz_hdf5_meta.cpp"
#undef LLVMFuzzerTestOneInput

#include "shardtopk/corpus_io.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

std::vector<std::string> inputs(const std::string& sub) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/" + sub))
    if (e.is_regular_file()) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void replay(const std::string& sub, int (*one)(const std::uint8_t*, std::size_t)) {
  const auto files = inputs(sub);
  ASSERT_FALSE(files.empty()) << "no inputs in fuzz/regressions/" << sub;
  for (const auto& f : files) {
    const std::string b = bytes_of(f);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(one(reinterpret_cast<const std::uint8_t*>(b.data()), b.size()), 0) << f;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 5.0) << f << " took " << s << " s";
    std::printf("  replayed %s (%zu bytes) in %.3f s\n", f.c_str(), b.size(), s);
  }
}

TEST(FuzzRegressions, ConfigInputs) { replay("config", fuzz_config_one); }
TEST(FuzzRegressions, Hdf5Inputs) { replay("hdf5", fuzz_hdf5_one); }

// Finding 1 (fuzz_hdf5_meta, timeout): on a damaged root object header H5Oget_info failed;
// inspect_file ignored that and looped over the uninitialised attribute count (billions of
// failing H5Aopen_by_idx calls: `shardtopk info` hung). It now checks the call (Error naming the
// file) and stops at the first attribute that cannot be opened.
TEST(FuzzRegressions, DamagedAttributeCountEndsPromptly) {
  const std::string f = std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/hdf5/attr_count_timeout.h5";
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const FileInfo fi = inspect_file(f);
    EXPECT_LE(fi.attributes.size(), 16u);
  } catch (const Error& e) {
    std::printf("  error: %s\n", e.what());
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

// Finding 9 (fuzz_hdf5_meta, timeout in CI): a group linking to its ancestor made the dataset
// walk of inspect_file (and of every "has no dataset" message) recurse forever. Each group is
// now walked once.
TEST(FuzzRegressions, GroupCycleEndsPromptly) {
  const std::string f = std::string(SHARDTOPK_SOURCE_DIR) + "/fuzz/regressions/hdf5/group_cycle_timeout.h5";
  const auto t0 = std::chrono::steady_clock::now();
  try {
    inspect_file(f);
    inspect_dataset(f, "no-such-dataset");
  } catch (const Error& e) {
    std::printf("  error: %s\n", e.what());
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

}  // namespace
}  // namespace shardtopk
