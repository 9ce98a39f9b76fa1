// libFuzzer target: the corpus reader (read_rows / read_row_blocks, direct reads on) against
// libhdf5's H5Dread on mutated HDF5 files. Seeds: the valid files of testing/hdf5_matrix.hpp
// (launch/fuzz.sh writes them with make_hdf5_seeds); the files they name (external-link
// targets, external raw storage, virtual sources) are written once per process into a
// temporary folder, where each input is written too, so that the seeds' relative names resolve
// (external links and virtual sources from the input's folder, external raw storage through
// HDF5_EXTFILE_PREFIX=${ORIGIN}).
//
// Contract, per input, for dataset "train" (2-D float, at most 65,536 values) over the whole
// dataset and an inner range (as a rank reads its rows), as float32 and as float16 bits:
//  - both read it: the values are equal bit for bit (libhdf5's read into float64, rounded to
//    nearest even);
//  - libhdf5 reads a non-finite or out-of-range value: the reader refuses, naming that value's
//    row and column (the first in row order);
//  - the reader refuses rows libhdf5 reads (other than for data libhdf5 would fill in, a float
//    type whose fields do not fit its bytes, a chunk that decodes to another size than a chunk's,
//    an external file list whose sizes add up past 2^63, or because a libhdf5 call of its own
//    failed): a disagreement;
//  - the reader reads what libhdf5 refuses to read: a disagreement.
// A disagreement prints both sides and aborts. Refusals of data libhdf5 would fill in (chunks
// never written, missing virtual sources) or take from memory it did not read (storage recorded
// as shorter than it is) and refusals by both are agreement. No crash, no
// sanitizer report in shardtopk's code, no exception other than shardtopk::Error, and no HDF5
// object left open.
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "hdf5_matrix.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"

namespace {

using namespace shardtopk;

std::string g_dir;    // side files; the working directory
std::string g_input;  // where each input is written

void remove_dir() {
  std::error_code ec;
  if (!g_dir.empty()) std::filesystem::remove_all(g_dir, ec);
}

// libhdf5's view of "train": whether it is a 2-D float dataset of 1 .. 65536 values, and if so
// its shape and every value read into float64 (exact for float16/32/64), or that H5Dread failed.
struct Libhdf5View {
  bool readable = false;
  std::int64_t rows = 0, cols = 0;
  bool read_ok = false;
  std::vector<double> values;
};

constexpr std::int64_t kBlockRows = 7;  // the reader's block size here (ReadOptions::chunk_rows)

// libhdf5's read of rows [lo, hi) in hyperslabs of kBlockRows rows, as the reader requests them,
// for when the whole dataset cannot be read: a rank reading other rows, or reading in blocks,
// may succeed (libhdf5 is not always consistent with itself on a damaged file).
bool libhdf5_rows(const std::string& file, RowRange r, std::int64_t cols, std::vector<double>* out) {
  bool ok = false;
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return false;
  const hid_t ds = H5Dopen2(f, "train", H5P_DEFAULT);
  if (ds >= 0) {
    const hid_t space = H5Dget_space(ds);
    out->assign(static_cast<size_t>(r.size() * cols), 0.0);
    ok = space >= 0;
    for (std::int64_t b0 = r.lo; ok && b0 < r.hi; b0 += kBlockRows) {
      const hsize_t start[2] = {static_cast<hsize_t>(b0), 0};
      const hsize_t count[2] = {static_cast<hsize_t>(std::min(kBlockRows, r.hi - b0)), static_cast<hsize_t>(cols)};
      const hid_t mspace = H5Screate_simple(2, count, nullptr);
      ok = mspace >= 0 && H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0 &&
           H5Dread(ds, H5T_NATIVE_DOUBLE, mspace, space, H5P_DEFAULT, out->data() + (b0 - r.lo) * cols) >= 0;
      if (mspace >= 0) H5Sclose(mspace);
    }
    if (space >= 0) H5Sclose(space);
    H5Dclose(ds);
  }
  H5Fclose(f);
  H5Eclear2(H5E_DEFAULT);
  return ok;
}

Libhdf5View libhdf5_view(const std::string& file) {
  Libhdf5View v;
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return v;
  const hid_t ds = H5Dopen2(f, "train", H5P_DEFAULT);
  if (ds >= 0) {
    const hid_t type = H5Dget_type(ds);
    const hid_t space = H5Dget_space(ds);
    hsize_t dims[2] = {0, 0};
    // 1 to 16 bytes a value, as the reader requires: libhdf5 converts a damaged 500 MB "float"
    // for minutes (fuzz/README.md, float_type_of_553mb_per_value.h5), and "reads" a float of 0
    // bytes, each value converted from no bits (float_type_of_0_bytes.h5); the reader refuses both
    // by name.
    if (type >= 0 && space >= 0 && H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) >= 1 &&
        H5Tget_size(type) <= 16 &&
        H5Sget_simple_extent_ndims(space) == 2 &&
        H5Sget_simple_extent_dims(space, dims, nullptr) == 2 && dims[0] >= 1 && dims[1] >= 1 && dims[0] <= 65536 &&
        dims[1] <= 65536 && dims[0] * dims[1] <= 65536) {
      v.readable = true;
      v.rows = static_cast<std::int64_t>(dims[0]);
      v.cols = static_cast<std::int64_t>(dims[1]);
      v.values.assign(static_cast<size_t>(dims[0] * dims[1]), 0.0);
      v.read_ok = H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.values.data()) >= 0;
    }
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    H5Dclose(ds);
  }
  H5Fclose(f);
  H5Eclear2(H5E_DEFAULT);
  return v;
}

// The reader's rows as bits (float32, or float16 widened), or its refusal.
bool reader_rows(RowRange r, RowFormat fmt, std::vector<std::uint32_t>* out, std::string* err) {
  ReadOptions opt;
  opt.chunk_rows = kBlockRows;
  opt.threads = 1;
  opt.direct_reads = true;
  out->clear();
  try {
    if (fmt == RowFormat::kFloat32) {
      const HostMatrix m = read_rows(g_input, "train", r, opt);
      for (float x : m.data) out->push_back(half::bits(x));
    } else {
      read_row_blocks(g_input, "train", r, fmt, opt, [&](const RowBlock& b) {
        const auto* h = static_cast<const std::uint16_t*>(b.data);
        for (std::int64_t i = 0; i < b.rows * b.cols; ++i) out->push_back(h[i]);
      });
    }
    return true;
  } catch (const Error& e) {
    *err = e.what();
    return false;
  }
}

[[noreturn]] void disagree(const std::string& what, RowRange r, RowFormat fmt, const std::string& detail) {
  std::fprintf(stderr, "fuzz_hdf5_differential: DISAGREEMENT (%s), rows [%lld, %lld) as %s: %s\n", what.c_str(),
               static_cast<long long>(r.lo), static_cast<long long>(r.hi),
               fmt == RowFormat::kFloat32 ? "float32" : "float16 bits", detail.c_str());
  std::abort();
}

// The reader refused values libhdf5 would make up: fill values or zeros for storage that is
// missing, or bytes of memory it did not read them into (contiguous storage or an unfiltered chunk
// recorded as shorter than it is: fuzz/README.md, contiguous_storage_recorded_short.h5 and
// unfiltered_chunk_lengths_not_chunk_size.h5).
bool is_refusal_of_filled_data(const std::string& e) {
  return e.find("HDF5 would return") != std::string::npos || e.find("would read as") != std::string::npos;
}
// The reader passed on a refusal of libhdf5's own (a checked HDF5 call failed: "(H5Dread(...)
// failed: ...)"). libhdf5 is not always consistent with itself on a damaged file: a contiguous
// dataset that ends past the file's allocated space reads whole, the part beyond it as zeros,
// but a hyperslab there fails ("addr overflow"; fuzz/README.md, contiguous_past_end_of_file.h5).
bool is_libhdf5_refusal(const std::string& e) {
  return e.find("(H5") != std::string::npos && e.find(" failed") != std::string::npos;
}
bool is_value_refusal(const std::string& e) {
  return e.find("non-finite value") != std::string::npos || e.find(", out of range of ") != std::string::npos;
}

void compare(const Libhdf5View& s, RowRange r, RowFormat fmt) {
  std::vector<std::uint32_t> got;
  std::string err;
  const bool ok = reader_rows(r, fmt, &got, &err);
  std::vector<double> ref;
  if (s.read_ok) {
    ref.assign(s.values.begin() + r.lo * s.cols, s.values.begin() + r.hi * s.cols);
  } else if (!libhdf5_rows(g_input, r, s.cols, &ref)) {
    if (ok) disagree("the reader read rows libhdf5 cannot read", r, fmt, "libhdf5's H5Dread failed");
    return;
  }
  // libhdf5's values after the project's conversion, and the first one the reader must refuse
  std::vector<std::uint32_t> want(ref.size());
  std::ptrdiff_t bad = -1;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float x = static_cast<float>(ref[i]);
    const bool out_of_range = std::isinf(x) || (fmt == RowFormat::kFloat16Bits && std::fabs(x) >= 65520.0f);
    if (bad < 0 && (!std::isfinite(ref[i]) || out_of_range)) bad = static_cast<std::ptrdiff_t>(i);
    want[i] = fmt == RowFormat::kFloat32 ? half::bits(x) : half::to_f16(x);
  }
  if (ok) {
    if (bad >= 0)
      disagree("the reader accepted a value libhdf5 reads as non-finite or out of range", r, fmt,
               "row " + std::to_string(r.lo + bad / s.cols) + ", column " + std::to_string(bad % s.cols));
    for (size_t i = 0; i < want.size(); ++i) {
      if (got.size() != want.size() || got[i] != want[i]) {
        char b[160];
        std::snprintf(b, sizeof b, "first difference at row %lld, column %lld: reader 0x%x, libhdf5 0x%x (%.9g)",
                      static_cast<long long>(r.lo + static_cast<std::int64_t>(i) / s.cols),
                      static_cast<long long>(static_cast<std::int64_t>(i) % s.cols), i < got.size() ? got[i] : 0u,
                      want[i], ref[i]);
        disagree("different values", r, fmt, b);
      }
    }
    return;
  }
  if (is_value_refusal(err)) {
    if (bad < 0) disagree("the reader refused a value libhdf5 reads as valid", r, fmt, err);
    const std::string row = "row " + std::to_string(r.lo + bad / s.cols) + " of '";
    const std::string col = "at column " + std::to_string(bad % s.cols);
    if (err.find(row) == std::string::npos || err.find(col) == std::string::npos)
      disagree("the reader named another bad value than libhdf5's first", r, fmt,
               err + " (libhdf5's first: " + row + "..." + col + ")");
    return;
  }
  if (is_refusal_of_filled_data(err)) return;  // libhdf5 would substitute the fill value
  // an external file list whose sizes add up past 2^63: libhdf5 maps bytes through sums that
  // wrap past 2^64 (fuzz/README.md, external_sizes_past_2_63.h5)
  if (err.find("external file sizes add up to more than") != std::string::npos) return;
  if (is_libhdf5_refusal(err)) return;
  // a type message whose fields do not fit its bytes: libhdf5 converts bits beyond each value,
  // differently for different read sizes (fuzz/README.md, float_type_precision_beyond_size.h5)
  if (err.find("has an invalid float type") != std::string::npos) return;
  // a chunk that decodes to another size than a chunk's: libhdf5 keeps the first chunk's worth
  // of a longer one (fuzz/README.md, chunk_decodes_past_its_size.h5)
  if (err.find("decoded to ") != std::string::npos && err.find(" bytes, expected ") != std::string::npos) return;
  disagree("the reader refused rows libhdf5 reads", r, fmt, err);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // libhdf5 reads these once, at its first call (testing/hdf5_matrix.hpp)
  test::h5m::set_prefix_environment();
  // Files libhdf5 cannot close (above) would crash its own clean-up at exit (H5F__close_cb).
  H5dont_atexit();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/shardtopk-fuzz-diff-XXXXXX";
  if (!::mkdtemp(tmpl.data())) std::abort();
  g_dir = tmpl;
  std::atexit(remove_dir);
  test::h5m::write_matrix(g_dir);
  g_input = g_dir + "/fuzz_input.h5";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 1 << 20) return 0;
  {
    // A new file (inode) per input: libhdf5 shares an open file with any H5Fopen of the same
    // inode, and it may hold the previous input open (below).
    ::unlink(g_input.c_str());
    std::FILE* f = std::fopen(g_input.c_str(), "wb");
    if (!f) std::abort();
    if (size && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
  }
  const Libhdf5View s = libhdf5_view(g_input);
  if (s.readable) {
    compare(s, RowRange{0, s.rows}, RowFormat::kFloat32);
    compare(s, RowRange{0, s.rows}, RowFormat::kFloat16Bits);
    const RowRange inner{s.rows / 3, s.rows - s.rows / 4};
    if (inner.size() > 0 && inner.size() < s.rows) compare(s, inner, RowFormat::kFloat32);
  } else {
    // libhdf5 cannot read it as a small 2-D float dataset: the reader must not crash either
    try {
      (void)plan_row_reads(g_input, "train");
    } catch (const Error&) {
    }
  }
  // Every handle the reader and the harness opened is closed again (RAII): no dataset, group,
  // datatype or attribute may stay open. File ids are not counted: on some damaged files
  // libhdf5's own H5Fclose fails and leaves the id open, half torn down (closing it again
  // crashes inside the library; fuzz/README.md, h5fclose_fails_file_id_stays_open.h5).
  const ssize_t open_objects =
      H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_DATASET | H5F_OBJ_GROUP | H5F_OBJ_DATATYPE | H5F_OBJ_ATTR);
  if (open_objects != 0) {
    std::fprintf(stderr, "fuzz_hdf5_differential: %zd HDF5 object(s) still open after an input\n", open_objects);
    std::abort();
  }
  return 0;
}
