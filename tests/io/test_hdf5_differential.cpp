// Differential test of the corpus reader against libhdf5: for every file of the matrix in
// testing/hdf5_matrix.hpp (layouts, byte orders, float16/32/64, user blocks, soft, hard and
// external links, external raw storage, virtual datasets, fill values), and for row ranges as
// ranks read them, the rows read_rows / read_row_blocks return with direct reads on must equal,
// bit for bit, libhdf5's H5Dread of the same hyperslab after the project's conversion (float64
// rounded to float32 to nearest even, float32 to float16 bits likewise). Where libhdf5 would
// return fill values for storage never written, the reader must refuse naming it; where the
// dataset cannot be opened, both refuse. The reading method chosen (plan_row_reads) is checked
// too, so that the direct paths are exercised where they apply and avoided where they do not.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <iostream>
#include <map>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include "core/half.hpp"
#include "hdf5_matrix.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/shard_plan.hpp"
#include "test_support.hpp"

namespace shardtopk {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const char* method_name(ReadMethod m) {
  return m == ReadMethod::kDirectContiguous ? "direct contiguous" : m == ReadMethod::kDirectChunks ? "direct chunks" : "H5Dread";
}

// libhdf5's read of rows [lo, hi): H5Dread of that hyperslab into native double, which holds
// every float16/32/64 value exactly. `error` is set when libhdf5 refuses.
struct Reference {
  std::string error;
  std::vector<double> values;
};

Reference libhdf5_rows(const std::string& file, const std::string& dataset, RowRange r) {
  Reference out;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return {"H5Fopen failed", {}};
  const hid_t ds = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
  if (ds < 0) {
    H5Fclose(f);
    return {"H5Dopen2 failed", {}};
  }
  const hid_t space = H5Dget_space(ds);
  hsize_t dims[2] = {0, 0};
  H5Sget_simple_extent_dims(space, dims, nullptr);
  const hsize_t start[2] = {static_cast<hsize_t>(r.lo), 0};
  const hsize_t count[2] = {static_cast<hsize_t>(r.size()), dims[1]};
  out.values.resize(static_cast<size_t>(count[0] * count[1]));
  const hid_t mspace = H5Screate_simple(2, count, nullptr);
  if (H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
      H5Dread(ds, H5T_NATIVE_DOUBLE, mspace, space, H5P_DEFAULT, out.values.data()) < 0)
    out.error = "H5Dread failed";
  H5Sclose(mspace);
  H5Sclose(space);
  H5Dclose(ds);
  H5Fclose(f);
  H5Eclear2(H5E_DEFAULT);
  return out;
}

// HDF5_EXTFILE_PREFIX and HDF5_VDS_PREFIX as the matrix's prefix cases need them, set before
// libhdf5 starts (it reads them once, at its first call; the reader learns them from libhdf5).
const bool kPrefixEnvironment = (test::h5m::set_prefix_environment(), true);

struct Read {
  RowFormat format;
  std::int64_t block;  // 0: the whole range in one block
  int threads;
  bool f16c;
};

// The reader's rows as bits: float32 (4 bytes each) or float16 (2 bytes each), widened to 32.
std::vector<std::uint32_t> reader_rows(const std::string& file, RowRange r, const Read& how, bool direct) {
  ReadOptions opt;
  opt.chunk_rows = how.block > 0 ? how.block : std::max<std::int64_t>(1, r.size());
  opt.threads = how.threads;
  opt.f16c = how.f16c;
  opt.direct_reads = direct;
  std::vector<std::uint32_t> out;
  if (how.format == RowFormat::kFloat32) {
    const HostMatrix m = read_rows(file, "train", r, opt);
    for (float x : m.data) out.push_back(half::bits(x));
    return out;
  }
  std::int64_t next = r.lo;
  read_row_blocks(file, "train", r, RowFormat::kFloat16Bits, opt, [&](const RowBlock& b) {
    EXPECT_EQ(b.first_row, next);
    next = b.first_row + b.rows;
    const auto* h = static_cast<const std::uint16_t*>(b.data);
    for (std::int64_t i = 0; i < b.rows * b.cols; ++i) out.push_back(h[i]);
  });
  EXPECT_EQ(next, r.hi);
  return out;
}

std::vector<std::uint32_t> expected_rows(const Reference& ref, RowFormat f) {
  std::vector<std::uint32_t> out;
  for (double v : ref.values) {
    const float x = static_cast<float>(v);  // round to nearest even, as the reader does
    out.push_back(f == RowFormat::kFloat32 ? half::bits(x) : half::to_f16(x));
  }
  return out;
}

// Row ranges as ranks read them (balanced contiguous shards of 2, 3 and 5 ranks), the whole
// dataset, and a few inner ones.
std::vector<RowRange> ranges_of(std::int64_t n) {
  std::vector<RowRange> out = {{0, n}, {1, n - 1}, {n - 1, n}, {n / 2, n / 2 + 1}};
  for (int p : {2, 3, 5})
    for (int r = 0; r < p; ++r) out.push_back(shard_rows(n, p, r));
  return out;
}

class Hdf5Differential : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    ASSERT_TRUE(kPrefixEnvironment);
    cases_ = new std::vector<test::h5m::Case>(test::h5m::write_matrix(dir_->path()));
  }
  static void TearDownTestSuite() {
    delete cases_;
    delete dir_;
    cases_ = nullptr;
    dir_ = nullptr;
  }
  static test::TempDir* dir_;
  static std::vector<test::h5m::Case>* cases_;
};
test::TempDir* Hdf5Differential::dir_ = nullptr;
std::vector<test::h5m::Case>* Hdf5Differential::cases_ = nullptr;

// Reads `c` as the reader does and as libhdf5 does over every range and way of reading; returns
// "" or the first disagreement. Counts reads compared and refusals checked.
std::string check_case(const test::h5m::Case& c, const std::string& file, int* compared, int* refused) {
  for (const RowRange r : ranges_of(c.rows)) {
    std::vector<Read> reads = {{RowFormat::kFloat32, 7, 2, true}, {RowFormat::kFloat16Bits, 0, 1, false}};
    if (r.lo == 0 && r.hi == c.rows) {
      reads.push_back({RowFormat::kFloat32, 1, 3, false});
      reads.push_back({RowFormat::kFloat16Bits, 5, 2, true});
    }
    const bool unwritten = r.lo < c.unwritten_hi && c.unwritten_lo < r.hi;
    const std::string rows = "rows [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + ")";
    const Reference ref = libhdf5_rows(file, c.dataset, r);
    if (!ref.error.empty()) return "libhdf5 cannot read this valid file: " + rows + ": " + ref.error;
    for (const Read& how : reads) {
      const std::string where = rows + " as " + (how.format == RowFormat::kFloat32 ? "float32" : "float16 bits") +
                                ", block " + std::to_string(how.block) + ", threads " + std::to_string(how.threads);
      if (unwritten) {
        // libhdf5 would return fill values here: the reader refuses, naming what is missing
        const std::string e = test::error_of([&] { reader_rows(file, r, how, true); });
        if (e.find(c.file) == std::string::npos || e.find("written") == std::string::npos ||
            e.find("fill value") == std::string::npos)
          return where + ": expected a refusal naming the rows never written, got: " + e;
        ++*refused;
        continue;
      }
      std::vector<std::uint32_t> got;
      try {
        got = reader_rows(file, r, how, true);
      } catch (const Error& e) {
        return where + ": the reader refused a valid file: " + e.what();
      }
      const std::vector<std::uint32_t> want = expected_rows(ref, how.format);
      if (got.size() != want.size())
        return where + ": " + std::to_string(got.size()) + " values, libhdf5 " + std::to_string(want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        if (got[i] == want[i]) continue;
        std::ostringstream os;
        os << where << ": first difference at row " << r.lo + static_cast<std::int64_t>(i) / c.cols << ", column "
           << static_cast<std::int64_t>(i) % c.cols << ": bits 0x" << std::hex << got[i] << ", libhdf5 0x" << want[i]
           << std::dec << " (" << ref.values[i] << ")";
        return os.str();
      }
      ++*compared;
    }
  }
  return "";
}

TEST_F(Hdf5Differential, EveryFileReadsAsLibhdf5ReadsIt) {
  ASSERT_GE(cases_->size(), 100u);
  int compared = 0, refused = 0, failed = 0;
  for (const auto& c : *cases_) {
    if (c.open_fails) continue;
    const std::string why = check_case(c, dir_->file(c.file), &compared, &refused);
    if (!why.empty()) {
      ADD_FAILURE() << "case " << c.name << ": " << why;
      ++failed;
    }
  }
  std::cout << "[ matrix   ] " << cases_->size() << " files, " << compared << " reads equal to libhdf5's, " << refused
            << " refused where libhdf5 would fill, " << failed << " files disagree\n";
}

// The direct paths are taken where the bytes are proven to be the dataset's (the speed of the
// normal case) and nowhere else.
TEST_F(Hdf5Differential, DirectReadsOnlyWhereProven) {
  std::map<std::string, int> by_method;
  for (const auto& c : *cases_) {
    if (c.open_fails || !c.method) continue;
    SCOPED_TRACE("case " + c.name);
    const ReadPlan plan = plan_row_reads(dir_->file(c.file), "train");
    EXPECT_EQ(method_name(plan.method), std::string(method_name(*c.method))) << plan.reason;
    EXPECT_EQ(plan.reason.empty(), plan.method != ReadMethod::kHdf5) << plan.reason;
    ++by_method[method_name(plan.method)];
    // An external link's target is read, never the link file.
    if (c.name.rfind("extlink_", 0) == 0 && c.name != "extlink_self") EXPECT_NE(plan.file, dir_->file(c.file));
    ReadOptions off;
    off.direct_reads = false;
    const ReadPlan hdf5_only = plan_row_reads(dir_->file(c.file), "train", off);
    EXPECT_EQ(hdf5_only.method, ReadMethod::kHdf5);
    EXPECT_THAT(hdf5_only.reason, HasSubstr("io.direct_reads"));
  }
  for (const auto& [m, n] : by_method) std::cout << "[ plan     ] " << m << ": " << n << " files\n";
  EXPECT_GE(by_method["direct contiguous"], 10);
  EXPECT_GE(by_method["direct chunks"], 10);
  EXPECT_GE(by_method["H5Dread"], 10);
}

// With direct reads off, every file still reads as libhdf5 reads it (the H5Dread path).
TEST_F(Hdf5Differential, Hdf5OnlyReadsTheSame) {
  for (const auto& c : *cases_) {
    if (c.open_fails || c.unwritten_hi > c.unwritten_lo) continue;
    SCOPED_TRACE("case " + c.name);
    const std::string file = dir_->file(c.file);
    const RowRange r{1, c.rows};
    const Reference ref = libhdf5_rows(file, c.dataset, r);
    ASSERT_EQ(ref.error, "");
    for (RowFormat f : {RowFormat::kFloat32, RowFormat::kFloat16Bits})
      EXPECT_EQ(reader_rows(file, r, Read{f, 6, 2, true}, false), expected_rows(ref, f));
  }
}

// A dataset that cannot be opened (a dangling external link) is refused by both, the reader
// naming the file and dataset.
TEST_F(Hdf5Differential, BothRefuseWhatCannotBeOpened) {
  int n = 0;
  for (const auto& c : *cases_) {
    if (!c.open_fails) continue;
    SCOPED_TRACE("case " + c.name);
    const std::string file = dir_->file(c.file);
    EXPECT_NE(libhdf5_rows(file, c.dataset, RowRange{0, 1}).error, "");
    EXPECT_THAT(test::error_of([&] { reader_rows(file, RowRange{0, 1}, Read{RowFormat::kFloat32, 0, 1, true}, true); }),
                AllOf(HasSubstr(file), HasSubstr("train")));
    ++n;
  }
  EXPECT_GE(n, 1);
}

}  // namespace
}  // namespace shardtopk
