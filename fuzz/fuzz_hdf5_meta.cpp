// libFuzzer target: the HDF5 metadata checks (inspect_file, inspect_dataset, attributes, and
// reads of small integer datasets) on mutated HDF5 files. The seeds (fuzz/corpus/hdf5) are valid small
// files written by shardtopk's H5Writer; libFuzzer mutates their bytes. Each input is written
// to a temporary file (HDF5 reads files, not memory) and opened as a corpus would be.
// Set FUZZ_HDF5_STRINGS=1 to also read string datasets (a libhdf5 bug; see below).
// Contract checked: a damaged file throws shardtopk::Error (no crash, no sanitizer report in
// shardtopk's code, no other exception type). Crashes inside libhdf5 itself are reported by
// libFuzzer too; they are the library's, and are listed in fuzz/README.md when found.
#include <hdf5.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"

namespace {
std::string temp_path() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/shardtopk-fuzz-" + std::to_string(::getpid()) + ".h5";
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shardtopk;
  static const std::string path = temp_path();
  if (size > 1 << 20) return 0;
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (size && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
  }
  try {
    const FileInfo fi = inspect_file(path);
    for (const DatasetInfo& d : fi.datasets) {
      try {
        const DatasetInfo again = inspect_dataset(path, d.name);
        std::int64_t elems = 1;
        for (std::int64_t n : again.dims) elems = (n > 0 && elems <= (1 << 16) / n) ? elems * n : (1 << 16) + 1;
        if (elems > 4096) continue;  // metadata is the target; small reads exercise the checks
        // Rows (read_matrix, src/io/row_reader.cpp) are not read here: that file does not
        // build with clang 14 (fuzz/CMakeLists.txt); fuzz_hdf5_differential reads rows.
        static const bool strings = std::getenv("FUZZ_HDF5_STRINGS") != nullptr;
        if (strings && again.dtype == "string") read_string_vector(path, d.name);
        if (again.dims.size() == 1 && again.dtype.rfind("int", 0) == 0) read_int64_vector(path, d.name);
        // Not read_string_vector: libhdf5 1.10.8 itself overruns memory reading variable-length
        // strings from a damaged global heap (H5HG_read memcpy; fuzz/README.md,
        // vlen_*_global_heap_overlap.h5).
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  try {
    inspect_dataset(path, "train");
    read_string_attribute(path, "distance");
  } catch (const Error&) {
  }
  // Every handle shardtopk opened is closed again (RAII), on success and on every error path.
  // Checked per input: a handle leak in shardtopk's code fails at once with this message rather
  // than as memory piling up over a run (fuzz/README.md, "How a report is judged").
  const ssize_t open_objects = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  if (open_objects != 0) {
    std::fprintf(stderr, "fuzz_hdf5_meta: %zd HDF5 object(s) still open after an input\n", open_objects);
    std::abort();
  }
  return 0;
}
