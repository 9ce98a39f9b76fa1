#pragma once
// HDF5 helpers shared by the corpus I/O sources (src/io): RAII handles, checked calls, opening a
// file with the OS-level cause named, opening a dataset with the datasets present listed.
// Internal: not part of the public headers.
#include <hdf5.h>

#include <string>
#include <vector>

#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::h5 {

void silence();
std::string hdf5_reason();

// RAII for hid_t handles.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer c) : id_(id), close_(c) {}
  ~Handle() {
    if (id_ >= 0 && close_) close_(id_);
  }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    std::swap(id_, o.id_);
    std::swap(close_, o.close_);
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  /// The id, no longer closed by this handle (to close it and check the result).
  hid_t release() {
    const hid_t id = id_;
    id_ = -1;
    return id;
  }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

#define STK_H5_CHECK(expr, ...)                                                                \
  do {                                                                                         \
    if ((expr) < 0) {                                                                          \
      const std::string reason_ = ::shardtopk::h5::hdf5_reason();                              \
      throw Error(detail::concat(__VA_ARGS__, " (", #expr, " failed",                          \
                                 reason_.empty() ? "" : ": " + reason_, ")"));                 \
    }                                                                                          \
  } while (0)

/// Checks the path at the OS level first (missing, a directory, not a regular file, no
/// permission: each named from errno/stat), then opens it read-only as HDF5.
Handle open_file(const std::string& path);
std::string type_name(hid_t type);
DatasetInfo describe(hid_t ds, const std::string& name);
std::string strip_slash(const std::string& s);
std::string list_datasets(hid_t file);
Handle open_dataset(hid_t file, const std::string& path, const std::string& dataset);
/// The name of the file an open object's bytes come from as libhdf5 opened it (H5Fget_name of
/// H5Iget_file_id: the target of an external link, not the file that links to it); "" when
/// libhdf5 cannot say.
std::string file_name_of(hid_t object);

}  // namespace shardtopk::h5
