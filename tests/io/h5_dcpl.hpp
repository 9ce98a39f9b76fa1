#pragma once
// Datasets written with the HDF5 C API and any creation properties (layout, filters, external
// storage, virtual mappings' sources), and a float16 file type, for the row reader's suites.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <string>
#include <vector>

namespace shardtopk::test {

// Writes `values` (row-major [rows, cols]) as dataset `name` with file type `ftype` and the
// creation properties `dcpl` (layout, filters, external storage, ...), with the HDF5 C API.
inline void write_with_dcpl(const std::string& path, const std::string& name, hid_t ftype, hsize_t rows, hsize_t cols,
                     hid_t dcpl, const std::vector<double>* values) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0) << path;
  const hsize_t dims[2] = {rows, cols};
  hid_t space = H5Screate_simple(2, dims, nullptr);
  hid_t ds = H5Dcreate2(f, name.c_str(), ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(ds, 0) << name;
  if (values) ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values->data()), 0);
  H5Dclose(ds);
  H5Sclose(space);
  H5Fclose(f);
}

/// An IEEE binary16 file type (HDF5 has no predefined one); the caller closes it.
inline hid_t half_type() {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(t, 15, 10, 5, 0, 10);
  H5Tset_size(t, 2);
  H5Tset_ebias(t, 15);
  return t;
}

}  // namespace shardtopk::test
