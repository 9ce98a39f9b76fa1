#pragma once
// An HDF5 writer independent of shardtopk's H5Writer, for fixtures it cannot make (chunked
// float16/float64, 3-D datasets), written with the HDF5 C API directly.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <string>
#include <vector>

namespace shardtopk::test {

enum class Disk { kF16, kF32, kF64 };
inline const char* disk_name(Disk d) { return d == Disk::kF16 ? "float16" : d == Disk::kF32 ? "float32" : "float64"; }

// Writes a dataset of any float dtype and any rank with the HDF5 C API directly (H5Writer has
// no chunked float16/float64 and no 3-D): an independent writer for the reader under test.
inline void write_raw_dataset(const std::string& path, const std::string& name, Disk dt, const std::vector<double>& values,
                       const std::vector<hsize_t>& dims, hsize_t chunk_rows) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0) << path;
  hid_t ftype = -1;
  if (dt == Disk::kF16) {
    ftype = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(ftype, 15, 10, 5, 0, 10);
    H5Tset_size(ftype, 2);
    H5Tset_ebias(ftype, 15);
  } else {
    ftype = H5Tcopy(dt == Disk::kF32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE);
  }
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (chunk_rows > 0) {
    std::vector<hsize_t> chunk = dims;
    chunk[0] = std::min(chunk_rows, dims[0]);
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    H5Pset_deflate(dcpl, 6);
  }
  hid_t ds = H5Dcreate2(f, name.c_str(), ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(ds, 0) << name;
  if (!values.empty()) ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Tclose(ftype);
  H5Fclose(f);
}

}  // namespace shardtopk::test
