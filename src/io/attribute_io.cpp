// Reading one rank's rows of the per-row attribute datasets (corpus.attributes): 1-D int64 or
// float64 datasets of N values, read with a hyperslab through libhdf5.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <hdf5.h>

#include "io/h5_detail.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk {

using namespace h5;

namespace {

// Refuses storage HDF5 would fill in for rows [lo, hi) instead of reading it: layouts whose
// sources live elsewhere (virtual, external), storage never allocated, unwritten chunks.
void refuse_unwritten(hid_t ds, const std::string& where, std::int64_t lo, std::int64_t hi) {
  Handle dcpl(H5Dget_create_plist(ds), H5Pclose);
  STK_H5_CHECK(dcpl.get(), where, ": creation properties");
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  SHARDTOPK_EXPECTS(layout != H5D_VIRTUAL && H5Pget_external_count(dcpl.get()) <= 0, where, " is ",
                    layout == H5D_VIRTUAL ? "a virtual dataset" : "stored in external files",
                    "; attribute datasets must be stored in the file itself (contiguous, compact or chunked)");
  if (hi <= lo) return;
  H5D_space_status_t status;
  STK_H5_CHECK(H5Dget_space_status(ds, &status), where, ": storage status");
  SHARDTOPK_EXPECTS(status != H5D_SPACE_STATUS_NOT_ALLOCATED, where,
                    " has no data written (its storage was never allocated): HDF5 would return its fill value for rows ",
                    lo, " .. ", hi - 1);
  if (layout != H5D_CHUNKED || status == H5D_SPACE_STATUS_ALLOCATED) return;
  hsize_t chunk = 1;
  STK_H5_CHECK(H5Pget_chunk(dcpl.get(), 1, &chunk), where, ": chunk shape");
  const auto cr = static_cast<std::int64_t>(chunk);
#if H5_VERSION_GE(1, 10, 5)
  for (std::int64_t r0 = lo / cr * cr; r0 < hi; r0 += cr) {
    const hsize_t off = static_cast<hsize_t>(r0);
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    STK_H5_CHECK(H5Dget_chunk_info_by_coord(ds, &off, &mask, &addr, &size), where, ": chunk at row ", r0);
    SHARDTOPK_EXPECTS(addr != HADDR_UNDEF, where, ": rows ", std::max(r0, lo), " .. ", std::min(r0 + cr, hi) - 1,
                      " were never written (the chunk at row ", r0,
                      " is not allocated): HDF5 would return its fill value for them");
  }
#else
  throw Error(where + " has chunks that were never written: HDF5 would return its fill value for them");
#endif
}

AttributeColumn read_one(hid_t file, const std::string& path, const std::string& dataset, std::int64_t corpus_rows,
                         RowRange range) {
  Handle ds = open_dataset(file, path, dataset);
  const DatasetInfo info = describe(ds.get(), strip_slash(dataset));
  const std::string where = "'" + path + "': attribute dataset '" + info.name + "'";
  SHARDTOPK_EXPECTS(info.dims.size() == 1, where, " must be 1-D [", corpus_rows, "], but it is ", info.dims.size(),
                    "-D");
  SHARDTOPK_EXPECTS(info.dims[0] == corpus_rows, where, " has ", info.dims[0], " values, but the corpus has ",
                    corpus_rows, " rows (one value per row)");
  AttributeColumn col;
  col.name = attribute_name(info.name);
  // Integers that fit int64 exactly are read as int64, floats as float64 (libhdf5 converts).
  if (attribute_dtype(info.dtype) && info.dtype.rfind("float", 0) != 0) {
    col.type = AttributeType::kInt64;
  } else if (attribute_dtype(info.dtype)) {
    col.type = AttributeType::kFloat64;
  } else {
    throw Error(where + " is " + info.dtype + "; attributes must be integers that fit int64 (int8 .. int64, uint8 .. " +
                "uint32) or floats (float32, float64); write a converted copy under another name and list that, " +
                "e.g. with h5py: f['" + info.name + "_i64'] = f['" + info.name + "'][:].astype('int64')");
  }
  refuse_unwritten(ds.get(), where, range.lo, range.hi);
  const auto n = static_cast<std::size_t>(range.size());
  void* out = nullptr;
  if (col.type == AttributeType::kInt64) {
    col.ints.resize(n);
    out = col.ints.data();
  } else {
    col.reals.resize(n);
    out = col.reals.data();
  }
  if (n == 0) return col;
  Handle fspace(H5Dget_space(ds.get()), H5Sclose);
  STK_H5_CHECK(fspace.get(), where, ": dataspace");
  const hsize_t start = static_cast<hsize_t>(range.lo), count = static_cast<hsize_t>(n);
  STK_H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr), where,
               ": selecting rows ", range.lo, " .. ", range.hi - 1);
  Handle mspace(H5Screate_simple(1, &count, nullptr), H5Sclose);
  STK_H5_CHECK(mspace.get(), where, ": memory dataspace");
  const hid_t mtype = col.type == AttributeType::kInt64 ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
  STK_H5_CHECK(H5Dread(ds.get(), mtype, mspace.get(), fspace.get(), H5P_DEFAULT, out), where, ": reading rows ",
               range.lo, " .. ", range.hi - 1);
  if (col.type == AttributeType::kFloat64)
    for (std::size_t i = 0; i < n; ++i)
      SHARDTOPK_EXPECTS(!std::isnan(col.reals[i]), where, " is NaN at row ", range.lo + static_cast<std::int64_t>(i),
                        "; attributes must not be NaN (a filter could neither match nor exclude it by ordering)");
  return col;
}

}  // namespace

bool attribute_dtype(const std::string& dtype) {
  static const char* const kTypes[] = {"int8",   "int16",  "int32",   "int64",  "uint8",
                                       "uint16", "uint32", "float32", "float64"};
  return std::find(std::begin(kTypes), std::end(kTypes), dtype) != std::end(kTypes);
}

std::vector<AttributeColumn> read_attribute_columns(const std::string& path, const std::vector<std::string>& datasets,
                                                    std::int64_t corpus_rows, RowRange range) {
  SHARDTOPK_EXPECTS(range.lo >= 0 && range.lo <= range.hi && range.hi <= corpus_rows, "'", path,
                    "': attribute rows [", range.lo, ", ", range.hi, ") are outside the corpus's ", corpus_rows, " rows");
  SHARDTOPK_EXPECTS(datasets.size() <= static_cast<std::size_t>(kFilterMaxAttributes), "'", path, "': ",
                    datasets.size(), " attribute datasets, at most ", kFilterMaxAttributes, " are supported");
  std::set<std::string> names;
  for (const std::string& d : datasets) {
    const std::string name = attribute_name(d);
    SHARDTOPK_EXPECTS(!name.empty(), "'", path, "': attribute dataset path '", d, "' names no dataset");
    SHARDTOPK_EXPECTS(names.insert(name).second, "'", path, "': two attribute datasets are named '", name,
                      "' (an attribute's name is the last component of its path; names must be unique)");
  }
  if (datasets.empty()) return {};
  Handle f = open_file(path);
  std::vector<AttributeColumn> out;
  out.reserve(datasets.size());
  for (const std::string& d : datasets) out.push_back(read_one(f.get(), path, d, corpus_rows, range));
  return out;
}

}  // namespace shardtopk
