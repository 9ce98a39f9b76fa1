#include "shardtopk/corpus_io.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>
#include <string_view>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <hdf5.h>

#include "io/h5_detail.hpp"

#include "core/half.hpp"
#include "core/parallel.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {
namespace h5 {

// Silence HDF5's own error-stack printing; we turn every failure into an Error. Once per thread:
// a thread-safe libhdf5 (Debian's serial build is one) keeps the setting per thread.
struct SilenceHdf5 {
  SilenceHdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};
void silence() { thread_local SilenceHdf5 s; }

// The message of HDF5's outermost failed call, for context in our errors, followed by the
// operating system's reason when the innermost entry recorded one (the sec2 driver writes
// "errno = 28, error message = 'No space left on device'" into its description).
std::string hdf5_reason() {
  struct Walk {
    std::string outer, inner, filter;
  } w;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
        auto* w = static_cast<Walk*>(data);
        if (!e->desc) return 0;
        if (n == 0) w->outer = e->desc;
        w->inner = e->desc;  // the last one walked is the innermost
        // A filter libhdf5 cannot apply (a compression plugin that is not installed) fails the
        // read as "can't read data": the entry that names the filter says why.
        const std::string d = e->desc;
        if (w->filter.empty() && d.rfind("required filter '", 0) == 0 && d.find("not registered") != std::string::npos)
          w->filter = d;
        return 0;
      },
      &w);
  H5Eclear2(H5E_DEFAULT);
  if (!w.filter.empty())
    return w.outer + ": " + w.filter + " (its plugin is not installed; HDF5_PLUGIN_PATH names where plugins are "
           "looked for)";
  static constexpr std::string_view kOs = "error message = '";
  const std::size_t at = w.inner.find(kOs);
  if (at != std::string::npos) {
    const std::size_t from = at + kOs.size(), to = w.inner.find('\'', from);
    if (to != std::string::npos && to > from && to - from <= 200) {
      const std::string os = w.inner.substr(from, to - from);
      if (w.outer.find(os) == std::string::npos) w.outer += (w.outer.empty() ? "" : ": ") + os;
    }
  }
  return w.outer;
}

Handle open_file(const std::string& path) {
  silence();
  // OS-level causes first, each named from stat/errno: a directory, a missing file, no
  // permission are not "truncated or corrupt" HDF5.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    throw Error(detail::concat("cannot open '", path, "': ", std::strerror(err),
                               err == ENOENT && path.rfind("data/", 0) == 0
                                   ? " (launch/import_datasets.sh imports the public datasets into data/)"
                                   : ""));
  }
  SHARDTOPK_EXPECTS(!S_ISDIR(st.st_mode), "'", path, "' is a directory, not an HDF5 file (name the .h5 file itself)");
  SHARDTOPK_EXPECTS(S_ISREG(st.st_mode), "'", path, "' is not a regular file (",
                    S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) ? "a character device"
                                                    : S_ISSOCK(st.st_mode) ? "a socket" : "a block device or other",
                    "); HDF5 needs a seekable file");
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) {
    const int err = errno;
    throw Error(detail::concat("cannot open '", path, "': ", std::strerror(err)));
  }
  ::close(fd);
  SHARDTOPK_EXPECTS(st.st_size > 0, "'", path, "' is empty (0 bytes), not an HDF5 file");
  const htri_t is = H5Fis_hdf5(path.c_str());
  if (is <= 0) {
    const std::string r = hdf5_reason();
    throw Error(detail::concat("'", path, "' is not a readable HDF5 file",
                               is < 0 ? " (truncated or corrupt" + (r.empty() ? std::string() : ": " + r) + ")"
                                      : " (no HDF5 signature; " + std::to_string(st.st_size) + " bytes)"));
  }
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) {
    const std::string r = hdf5_reason();
    throw Error("cannot open HDF5 file '" + path + "' (truncated or corrupt?)" + (r.empty() ? "" : ": " + r));
  }
  return Handle(id, H5Fclose);
}

std::string type_name(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) return "float" + std::to_string(size * 8);
  if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    return std::string(is_signed ? "int" : "uint") + std::to_string(size * 8);
  }
  if (cls == H5T_STRING) return "string";
  if (cls == H5T_COMPOUND) return "compound";
  if (cls == H5T_ENUM) return "enum";
  return "other";
}

void collect(hid_t file, const std::string& group, std::vector<DatasetInfo>* out);

DatasetInfo describe(hid_t ds, const std::string& name) {
  DatasetInfo info;
  info.name = name;
  Handle type(H5Dget_type(ds), H5Tclose);
  Handle space(H5Dget_space(ds), H5Sclose);
  if (type.ok()) {
    info.dtype = type_name(type.get());
    info.is_float = H5Tget_class(type.get()) == H5T_FLOAT;
  }
  if (space.ok()) {
    const int nd = H5Sget_simple_extent_ndims(space.get());
    if (nd > 0) {
      std::vector<hsize_t> d(nd);
      H5Sget_simple_extent_dims(space.get(), d.data(), nullptr);
      for (auto v : d) info.dims.push_back(static_cast<std::int64_t>(v));
    }
  }
  Handle plist(H5Dget_create_plist(ds), H5Pclose);
  if (plist.ok()) {
    info.chunked = H5Pget_layout(plist.get()) == H5D_CHUNKED;
    const int nf = H5Pget_nfilters(plist.get());
    for (int i = 0; i < nf; ++i) {
      unsigned flags = 0;
      size_t nelem = 4;
      unsigned vals[4] = {0, 0, 0, 0};
      char fname[64] = {0};
      H5Z_filter_t f = H5Pget_filter2(plist.get(), i, &flags, &nelem, vals, sizeof fname, fname, nullptr);
      std::string s = fname[0] ? fname : ("filter" + std::to_string(f));
      if (f == H5Z_FILTER_DEFLATE && nelem > 0) s = "deflate(" + std::to_string(vals[0]) + ")";
      info.filters += (info.filters.empty() ? "" : ",") + s;
    }
  }
  return info;
}

// Where an object lives in the file, as a key (1.10: its address; 1.12+: its token).
std::string object_key(const H5O_info_t& oi) {
#if H5_VERSION_GE(1, 12, 0)
  return std::string(reinterpret_cast<const char*>(&oi.token), sizeof oi.token);
#else
  return std::to_string(static_cast<unsigned long long>(oi.addr));
#endif
}

// Groups can link to themselves or to an ancestor (hard links form cycles, in valid files
// too): each group is walked once (fuzz/regressions/hdf5/group_cycle_timeout.h5).
void collect_walk(hid_t file, const std::string& group, std::vector<DatasetInfo>* out, std::set<std::string>* seen);

void collect(hid_t file, const std::string& group, std::vector<DatasetInfo>* out) {
  std::set<std::string> seen;
  collect_walk(file, group, out, &seen);
}

void collect_walk(hid_t file, const std::string& group, std::vector<DatasetInfo>* out, std::set<std::string>* seen) {
  Handle g(H5Gopen2(file, group.empty() ? "/" : group.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.ok()) return;
  H5G_info_t ginfo;
  if (H5Gget_info(g.get(), &ginfo) < 0) return;
  for (hsize_t i = 0; i < ginfo.nlinks; ++i) {
    char name[1024];
    if (H5Lget_name_by_idx(g.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT) < 0)
      continue;
    const std::string full = group.empty() ? name : group + "/" + name;
    H5O_info_t oinfo;
#if H5_VERSION_GE(1, 12, 0)
    if (H5Oget_info_by_name3(file, full.c_str(), &oinfo, H5O_INFO_BASIC, H5P_DEFAULT) < 0) continue;
#else
    if (H5Oget_info_by_name2(file, full.c_str(), &oinfo, H5O_INFO_BASIC, H5P_DEFAULT) < 0) continue;
#endif
    if (oinfo.type == H5O_TYPE_GROUP) {
      if (seen->insert(object_key(oinfo)).second) collect_walk(file, full, out, seen);
    } else if (oinfo.type == H5O_TYPE_DATASET) {
      Handle ds(H5Dopen2(file, full.c_str(), H5P_DEFAULT), H5Dclose);
      if (ds.ok()) out->push_back(describe(ds.get(), full));
    }
  }
}

std::string strip_slash(const std::string& s) {
  std::string out = s;
  while (!out.empty() && out.front() == '/') out.erase(out.begin());
  return out;
}

std::string list_datasets(hid_t file) {
  std::vector<DatasetInfo> all;
  collect(file, "", &all);
  std::ostringstream os;
  for (size_t i = 0; i < all.size(); ++i) {
    os << (i ? ", " : "") << all[i].name << " [";
    for (size_t j = 0; j < all[i].dims.size(); ++j) os << (j ? "," : "") << all[i].dims[j];
    os << "] " << all[i].dtype;
  }
  return all.empty() ? "none" : os.str();
}

Handle open_dataset(hid_t file, const std::string& path, const std::string& dataset) {
  const std::string name = strip_slash(dataset);
  SHARDTOPK_EXPECTS(!name.empty(), "'", path, "': empty dataset name");
  // Check each path component exists, so a missing dataset is an Error that lists what exists.
  bool exists = true;
  std::string prefix;
  std::stringstream ss(name);
  std::string part;
  while (std::getline(ss, part, '/')) {
    prefix += (prefix.empty() ? "" : "/") + part;
    if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) {
      exists = false;
      break;
    }
  }
  H5Eclear2(H5E_DEFAULT);
  SHARDTOPK_EXPECTS(exists, "'", path, "' has no dataset '", name, "' (datasets present: ", list_datasets(file), ")");
  hid_t id = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  SHARDTOPK_EXPECTS(id >= 0, "'", path, "': '", name, "' is not a dataset (datasets present: ", list_datasets(file), ")");
  return Handle(id, H5Dclose);
}

}  // namespace h5

using namespace h5;

FileInfo inspect_file(const std::string& path) {
  Handle f = open_file(path);
  FileInfo info;
  info.path = path;
  collect(f.get(), "", &info.datasets);
  H5O_info_t oinfo{};
#if H5_VERSION_GE(1, 12, 0)
  const herr_t got_info = H5Oget_info3(f.get(), &oinfo, H5O_INFO_NUM_ATTRS);
#else
  const herr_t got_info = H5Oget_info2(f.get(), &oinfo, H5O_INFO_NUM_ATTRS);
#endif
  SHARDTOPK_EXPECTS(got_info >= 0, "'", path, "': cannot read the root group's attributes (", hdf5_reason(), ")");
  for (hsize_t i = 0; i < oinfo.num_attrs; ++i) {
    Handle a(H5Aopen_by_idx(f.get(), "/", H5_INDEX_NAME, H5_ITER_INC, i, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    // A damaged header can claim more attributes than it holds (fuzz/regressions/hdf5/
    // attr_count_timeout.h5):
    // the first one that cannot be opened ends the list instead of trying every index.
    if (!a.ok()) break;
    char name[512];
    H5Aget_name(a.get(), sizeof name, name);
    Handle t(H5Aget_type(a.get()), H5Tclose);
    Handle s(H5Aget_space(a.get()), H5Sclose);
    const hssize_t n = H5Sget_simple_extent_npoints(s.get());
    std::string value;
    const H5T_class_t cls = H5Tget_class(t.get());
    if (cls == H5T_STRING) {
      value = read_string_attribute(path, name);
    } else if (cls == H5T_INTEGER && n >= 1 && n <= 16) {
      std::vector<std::int64_t> v(static_cast<size_t>(n));
      if (H5Aread(a.get(), H5T_NATIVE_INT64, v.data()) >= 0) {
        for (size_t j = 0; j < v.size(); ++j) value += (j ? "," : "") + std::to_string(v[j]);
        info.int_attributes[name] = v;
      }
    } else if (cls == H5T_FLOAT && n >= 1 && n <= 16) {
      // Each value as its shortest decimal at the stored precision (a float32 0.1 is "0.1").
      const bool single = H5Tget_size(t.get()) <= 4;
      std::vector<double> v(static_cast<size_t>(n));
      std::vector<float> f(single ? v.size() : 0);
      if (H5Aread(a.get(), single ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE, single ? static_cast<void*>(f.data())
                                                                                : static_cast<void*>(v.data())) >= 0) {
        for (size_t j = 0; j < v.size(); ++j) {
          const std::string text = single ? fmt::format("{}", f[j]) : fmt::format("{}", v[j]);
          if (single) v[j] = std::strtod(text.c_str(), nullptr);
          value += (j ? "," : "") + text;
        }
        info.float_attributes[name] = v;
      }
    } else {
      value = "<" + type_name(t.get()) + " x" + std::to_string(n) + ">";
    }
    info.attributes[name] = value;
  }
  H5Eclear2(H5E_DEFAULT);
  return info;
}

DatasetInfo inspect_dataset(const std::string& path, const std::string& dataset) {
  Handle f = open_file(path);
  Handle ds = open_dataset(f.get(), path, dataset);
  return describe(ds.get(), strip_slash(dataset));
}

std::string h5::file_name_of(hid_t object) {
  Handle file(H5Iget_file_id(object), H5Fclose);
  if (!file.ok()) return "";
  const ssize_t n = H5Fget_name(file.get(), nullptr, 0);
  if (n <= 0) return "";
  std::string b(static_cast<size_t>(n) + 1, '\0');
  return H5Fget_name(file.get(), b.data(), b.size()) >= 0 ? std::string(b.c_str()) : std::string();
}

std::vector<std::string> dataset_files(const std::string& path, const std::vector<std::string>& datasets) {
  Handle f = open_file(path);
  const auto slash = path.find_last_of('/');
  const std::string folder = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  auto relative = [&](const std::string& name) { return name.empty() || name[0] == '/' ? name : folder + name; };
  std::vector<std::string> out;
  auto add = [&](const std::string& file) {
    if (!file.empty() && file != path && std::find(out.begin(), out.end(), file) == out.end()) out.push_back(file);
  };
  for (const std::string& name : datasets) {
    if (name.empty()) continue;
    const htri_t exists = H5Lexists(f.get(), name.c_str(), H5P_DEFAULT);
    H5Eclear2(H5E_DEFAULT);
    if (exists <= 0) continue;
    Handle ds(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
    H5Eclear2(H5E_DEFAULT);
    if (!ds.ok()) continue;  // not a dataset, or a link libhdf5 cannot follow: the read says why
    add(file_name_of(ds.get()));  // an external link's target
    Handle dcpl(H5Dget_create_plist(ds.get()), H5Pclose);
    if (!dcpl.ok()) continue;
    if (H5Pget_layout(dcpl.get()) == H5D_VIRTUAL) {
      size_t count = 0;
      if (H5Pget_virtual_count(dcpl.get(), &count) >= 0)
        for (size_t i = 0; i < count; ++i) {
          const ssize_t n = H5Pget_virtual_filename(dcpl.get(), i, nullptr, 0);
          if (n <= 0) continue;
          std::string b(static_cast<size_t>(n) + 1, '\0');
          if (H5Pget_virtual_filename(dcpl.get(), i, b.data(), b.size()) < 0) continue;
          const std::string source = b.c_str();
          if (source != ".") add(relative(source));
        }
    }
    const int external = H5Pget_external_count(dcpl.get());
    for (int i = 0; i < external; ++i) {
      char name_buf[4096] = {0};
      off_t offset = 0;
      hsize_t bytes = 0;
      if (H5Pget_external(dcpl.get(), static_cast<unsigned>(i), sizeof name_buf - 1, name_buf, &offset, &bytes) >= 0)
        add(relative(name_buf));
    }
    H5Eclear2(H5E_DEFAULT);
  }
  return out;
}

std::string read_string_attribute(const std::string& path, const std::string& name) {
  Handle f = open_file(path);
  if (H5Aexists(f.get(), name.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return "";
  }
  Handle a(H5Aopen(f.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
  Handle t(H5Aget_type(a.get()), H5Tclose);
  if (H5Tget_class(t.get()) != H5T_STRING) return "";
  std::string out;
  if (H5Tis_variable_str(t.get()) > 0) {
    Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt.get(), H5T_VARIABLE);
    H5Tset_cset(mt.get(), H5Tget_cset(t.get()));
    char* s = nullptr;
    STK_H5_CHECK(H5Aread(a.get(), mt.get(), &s), "'", path, "': reading attribute '", name, "'");
    if (s) {
      out = s;
      H5free_memory(s);
    }
  } else {
    const size_t n = H5Tget_size(t.get());
    std::vector<char> buf(n + 1, 0);
    STK_H5_CHECK(H5Aread(a.get(), t.get(), buf.data()), "'", path, "': reading attribute '", name, "'");
    out.assign(buf.data(), strnlen(buf.data(), n));
  }
  return out;
}

namespace {
// Reads a whole integer dataset as int64. Unsigned 64-bit values above INT64_MAX would be
// clipped to INT64_MAX by HDF5's conversion (and then look like the reserved padding id), so
// they are read as uint64 first and refused by name, with their position.
std::vector<std::int64_t> read_all_as_int64(hid_t ds, const std::string& path, const DatasetInfo& info,
                                            std::int64_t cols) {
  size_t n = 1;
  for (auto d : info.dims) n *= static_cast<size_t>(d);
  std::vector<std::int64_t> v(n);
  if (n == 0) return v;
  Handle ftype(H5Dget_type(ds), H5Tclose);
  STK_H5_CHECK(ftype.get(), "'", path, "': type of '", info.name, "'");
  // A damaged (or exotic) file can declare integers of any width; HDF5 would allocate its
  // conversion buffers for them (fuzzing found a 1.6 GB-wide "integer").
  const size_t width = H5Tget_size(ftype.get());
  SHARDTOPK_EXPECTS(width == 1 || width == 2 || width == 4 || width == 8, "'", path, "': dataset '", info.name,
                    "' has integers of ", width, " bytes; ids must be 1, 2, 4 or 8-byte integers");
  if (H5Tget_sign(ftype.get()) == H5T_SGN_NONE && width == 8) {
    std::vector<std::uint64_t> u(n);
    STK_H5_CHECK(H5Dread(ds, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, u.data()), "'", path, "': reading '",
                 info.name, "'");
    for (size_t i = 0; i < n; ++i) {
      if (u[i] > static_cast<std::uint64_t>(INT64_MAX)) {
        throw Error(detail::concat("'", path, "': dataset '", info.name, "' is ", info.dtype, " and holds ", u[i],
                                   cols > 0 ? " at row " + std::to_string(i / cols) + ", column " + std::to_string(i % cols)
                                            : " at index " + std::to_string(i),
                                   ", above the largest int64 id ", INT64_MAX,
                                   "; ids must be in [0, 2^63 - 1) (HDF5 would clip it to 2^63 - 1)"));
      }
      v[i] = static_cast<std::int64_t>(u[i]);
    }
    return v;
  }
  STK_H5_CHECK(H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), "'", path, "': reading '",
               info.name, "'");
  return v;
}
}  // namespace

std::vector<std::int64_t> read_int64_vector(const std::string& path, const std::string& dataset) {
  Handle f = open_file(path);
  Handle ds = open_dataset(f.get(), path, dataset);
  const DatasetInfo info = describe(ds.get(), strip_slash(dataset));
  SHARDTOPK_EXPECTS(info.dims.size() == 1, "'", path, "': dataset '", info.name, "' must be 1-D, but it is ",
                    info.dims.size(), "-D");
  SHARDTOPK_EXPECTS(info.dtype.find("int") == 0 || info.dtype.find("uint") == 0, "'", path, "': dataset '",
                    info.name, "' has dtype ", info.dtype, "; expected an integer type");
  return read_all_as_int64(ds.get(), path, info, 0);
}

std::vector<std::string> read_string_vector(const std::string& path, const std::string& dataset) {
  Handle f = open_file(path);
  Handle ds = open_dataset(f.get(), path, dataset);
  const DatasetInfo info = describe(ds.get(), strip_slash(dataset));
  SHARDTOPK_EXPECTS(info.dims.size() == 1 && info.dtype == "string", "'", path, "': dataset '", info.name,
                    "' must be a 1-D string dataset");
  Handle ftype(H5Dget_type(ds.get()), H5Tclose);
  const size_t n = static_cast<size_t>(info.dims[0]);
  std::vector<std::string> out(n);
  if (n == 0) return out;
  if (H5Tis_variable_str(ftype.get()) > 0) {
    Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt.get(), H5T_VARIABLE);
    H5Tset_cset(mt.get(), H5Tget_cset(ftype.get()));
    std::vector<char*> ptrs(n, nullptr);
    STK_H5_CHECK(H5Dread(ds.get(), mt.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, ptrs.data()), "'", path, "': reading '",
                 info.name, "'");
    for (size_t i = 0; i < n; ++i) out[i] = ptrs[i] ? ptrs[i] : "";
    Handle space(H5Dget_space(ds.get()), H5Sclose);
    H5Dvlen_reclaim(mt.get(), space.get(), H5P_DEFAULT, ptrs.data());
  } else {
    const size_t w = H5Tget_size(ftype.get());
    std::vector<char> buf(n * w);
    STK_H5_CHECK(H5Dread(ds.get(), ftype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()), "'", path,
                 "': reading '", info.name, "'");
    for (size_t i = 0; i < n; ++i) out[i].assign(&buf[i * w], strnlen(&buf[i * w], w));
  }
  return out;
}

std::vector<std::int64_t> read_int64_matrix(const std::string& path, const std::string& dataset,
                                            std::int64_t* rows, std::int64_t* cols) {
  Handle f = open_file(path);
  Handle ds = open_dataset(f.get(), path, dataset);
  const DatasetInfo info = describe(ds.get(), strip_slash(dataset));
  SHARDTOPK_EXPECTS(info.dims.size() == 2, "'", path, "': dataset '", info.name, "' must be 2-D, but it is ",
                    info.dims.size(), "-D");
  SHARDTOPK_EXPECTS(info.dtype.find("int") == 0 || info.dtype.find("uint") == 0, "'", path, "': dataset '",
                    info.name, "' has dtype ", info.dtype, "; expected an integer type");
  *rows = info.dims[0];
  *cols = info.dims[1];
  return read_all_as_int64(ds.get(), path, info, *cols);
}

// ------------------------------------------------------------------------------- writer

H5Writer::H5Writer(const std::string& path, bool exclusive) : path_(path) {
  silence();
  const hid_t id = H5Fcreate(path.c_str(), exclusive ? H5F_ACC_EXCL : H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) throw Error("cannot create HDF5 file '" + path + "': " + hdf5_reason());
  file_ = id;
}

H5Writer::~H5Writer() {
  if (rows_ds_ >= 0) H5Dclose(static_cast<hid_t>(rows_ds_));
  if (file_ >= 0) H5Fclose(static_cast<hid_t>(file_));
}

void H5Writer::end_rows() {
  if (rows_ds_ < 0) return;
  const herr_t st = H5Dclose(static_cast<hid_t>(rows_ds_));
  rows_ds_ = -1;
  STK_H5_CHECK(st, "'", path_, "': closing dataset '", rows_name_, "'");
}

void H5Writer::close() {
  end_rows();
  if (file_ >= 0) {
    const herr_t st = H5Fclose(static_cast<hid_t>(file_));
    file_ = -1;
    STK_H5_CHECK(st, "closing '", path_, "'");
  }
}

namespace {
void write_any(hid_t file, const std::string& path, const std::string& name, hid_t file_type, hid_t mem_type,
               const void* data, std::int64_t rows, std::int64_t cols, std::int64_t chunk_rows) {
  SHARDTOPK_ASSERT(file >= 0, "writer closed");
  const int nd = cols > 0 ? 2 : 1;
  const hsize_t dims[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(cols)};
  Handle space(H5Screate_simple(nd, dims, nullptr), H5Sclose);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (chunk_rows > 0 && rows > 0) {
    const hsize_t chunk[2] = {static_cast<hsize_t>(std::min(chunk_rows, rows)), static_cast<hsize_t>(cols > 0 ? cols : 1)};
    H5Pset_chunk(dcpl.get(), nd, chunk);
    H5Pset_deflate(dcpl.get(), 4);
  }
  Handle ds(H5Dcreate2(file, strip_slash(name).c_str(), file_type, space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
            H5Dclose);
  STK_H5_CHECK(ds.get(), "'", path, "': creating dataset '", name, "'");
  if (rows > 0)
    STK_H5_CHECK(H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "'", path, "': writing dataset '",
            name, "'");
}
}  // namespace

void H5Writer::write_f32(const std::string& name, const float* data, std::int64_t rows, std::int64_t cols,
                         std::int64_t chunk_rows) {
  write_any(file_, path_, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, data, rows, cols, chunk_rows);
}

namespace {
// IEEE binary16 as HDF5 sees it (the layout h5py and numpy use for float16).
Handle f16_file_type() {
  Handle t(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
  H5Tset_fields(t.get(), 15, 10, 5, 0, 10);
  H5Tset_size(t.get(), 2);
  H5Tset_ebias(t.get(), 15);
  return t;
}

// float16 bits of data [n], on all cores. Rounded with half::to_f16 (nearest, ties to even: the
// engines' float16 storage) instead of HDF5's float->half conversion, which rounds ties away
// from zero; the file then holds exactly what an engine stores for the same float32 values.
void f16_bits(const float* data, std::int64_t n, std::vector<std::uint16_t>& bits) {
  bits.resize(static_cast<size_t>(n));
  parallel_ranges(n, range_parts(n, 0, 1 << 20), [&](std::int64_t lo, std::int64_t hi, int) {
    for (std::int64_t i = lo; i < hi; ++i) bits[static_cast<size_t>(i)] = half::to_f16(data[i]);
  });
}
}  // namespace

void H5Writer::write_f16(const std::string& name, const float* data, std::int64_t rows, std::int64_t cols) {
  Handle t = f16_file_type();
  std::vector<std::uint16_t> bits;
  f16_bits(data, rows * std::max<std::int64_t>(cols, 1), bits);
  write_any(file_, path_, name, t.get(), t.get(), bits.data(), rows, cols, 0);
}

void H5Writer::create_rows(const std::string& name, Dtype dtype, std::int64_t rows, std::int64_t cols,
                           std::int64_t chunk_rows) {
  SHARDTOPK_ASSERT(file_ >= 0, "writer closed");
  SHARDTOPK_EXPECTS(dtype == Dtype::kFloat32 || dtype == Dtype::kFloat16, "'", path_, "': dataset '", name,
                    "': create_rows stores float32 or float16, not ", to_string(dtype));
  SHARDTOPK_EXPECTS(rows >= 1 && cols >= 1 && chunk_rows >= 0, "'", path_, "': dataset '", name, "': bad shape [",
                    rows, ", ", cols, "] or chunk_rows ", chunk_rows);
  end_rows();
  const hsize_t dims[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(cols)};
  Handle space(H5Screate_simple(2, dims, nullptr), H5Sclose);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (chunk_rows > 0) {
    const hsize_t chunk[2] = {static_cast<hsize_t>(std::min(chunk_rows, rows)), dims[1]};
    STK_H5_CHECK(H5Pset_chunk(dcpl.get(), 2, chunk), "'", path_, "': dataset '", name, "': chunks of ",
                 chunk[0], " rows");
    STK_H5_CHECK(H5Pset_deflate(dcpl.get(), 1), "'", path_, "': dataset '", name, "': deflate");
  } else {
    STK_H5_CHECK(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), "'", path_, "': dataset '", name, "': layout");
    STK_H5_CHECK(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "'", path_, "': dataset '", name,
                 "': allocation");
  }
  Handle t = dtype == Dtype::kFloat16 ? f16_file_type() : Handle(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
  const hid_t ds = H5Dcreate2(static_cast<hid_t>(file_), strip_slash(name).c_str(), t.get(), space.get(), lcpl.get(),
                              dcpl.get(), H5P_DEFAULT);
  STK_H5_CHECK(ds, "'", path_, "': creating dataset '", name, "' [", rows, ", ", cols, "] ", to_string(dtype));
  rows_ds_ = ds;
  rows_name_ = name;
  rows_dtype_ = dtype;
  rows_n_ = rows;
  rows_cols_ = cols;
}

void H5Writer::write_rows(std::int64_t first, std::int64_t n, const float* data) {
  SHARDTOPK_EXPECTS(rows_ds_ >= 0, "'", path_, "': write_rows without create_rows");
  SHARDTOPK_EXPECTS(first >= 0 && n >= 0 && first + n <= rows_n_, "'", path_, "': rows [", first, ", ", first + n,
                    ") outside dataset '", rows_name_, "' of ", rows_n_, " rows");
  if (n == 0) return;
  const void* src = data;
  Handle mem = rows_dtype_ == Dtype::kFloat16 ? f16_file_type() : Handle(H5Tcopy(H5T_NATIVE_FLOAT), H5Tclose);
  if (rows_dtype_ == Dtype::kFloat16) {
    f16_bits(data, n * rows_cols_, rows_bits_);  // rounded as write_f16 does
    src = rows_bits_.data();
  }
  const hsize_t start[2] = {static_cast<hsize_t>(first), 0};
  const hsize_t count[2] = {static_cast<hsize_t>(n), static_cast<hsize_t>(rows_cols_)};
  Handle fspace(H5Dget_space(static_cast<hid_t>(rows_ds_)), H5Sclose);
  STK_H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), "'", path_,
               "': selecting rows [", first, ", ", first + n, ") of '", rows_name_, "'");
  Handle mspace(H5Screate_simple(2, count, nullptr), H5Sclose);
  STK_H5_CHECK(H5Dwrite(static_cast<hid_t>(rows_ds_), mem.get(), mspace.get(), fspace.get(), H5P_DEFAULT, src), "'",
               path_, "': writing rows [", first, ", ", first + n, ") of '", rows_name_, "'");
}

void H5Writer::write_f64(const std::string& name, const double* data, std::int64_t rows, std::int64_t cols) {
  write_any(file_, path_, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, data, rows, cols, 0);
}
void H5Writer::write_i64(const std::string& name, const std::int64_t* data, std::int64_t rows, std::int64_t cols) {
  write_any(file_, path_, name, H5T_STD_I64LE, H5T_NATIVE_INT64, data, rows, cols, 0);
}
void H5Writer::write_i32(const std::string& name, const std::int32_t* data, std::int64_t rows, std::int64_t cols) {
  write_any(file_, path_, name, H5T_STD_I32LE, H5T_NATIVE_INT32, data, rows, cols, 0);
}
void H5Writer::write_u8(const std::string& name, const std::uint8_t* data, std::int64_t rows, std::int64_t cols) {
  write_any(file_, path_, name, H5T_STD_U8LE, H5T_NATIVE_UINT8, data, rows, cols, 0);
}

void H5Writer::write_strings(const std::string& name, const std::vector<std::string>& values) {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  std::vector<const char*> ptrs;
  ptrs.reserve(values.size());
  for (const auto& s : values) ptrs.push_back(s.c_str());
  write_any(file_, path_, name, t.get(), t.get(), ptrs.data(), static_cast<std::int64_t>(values.size()), 0, 0);
}

void H5Writer::set_attr(const std::string& name, const std::string& value) {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (H5Aexists(file_, name.c_str()) > 0) H5Adelete(file_, name.c_str());
  Handle a(H5Acreate2(file_, name.c_str(), t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  STK_H5_CHECK(a.get(), "'", path_, "': creating attribute '", name, "'");
  const char* p = value.c_str();
  STK_H5_CHECK(H5Awrite(a.get(), t.get(), &p), "'", path_, "': writing attribute '", name, "'");
}

void H5Writer::set_attr(const std::string& name, std::int64_t value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (H5Aexists(file_, name.c_str()) > 0) H5Adelete(file_, name.c_str());
  Handle a(H5Acreate2(file_, name.c_str(), H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  STK_H5_CHECK(a.get(), "'", path_, "': creating attribute '", name, "'");
  STK_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_INT64, &value), "'", path_, "': writing attribute '", name, "'");
}

void H5Writer::set_attr(const std::string& name, double value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (H5Aexists(file_, name.c_str()) > 0) H5Adelete(file_, name.c_str());
  Handle a(H5Acreate2(file_, name.c_str(), H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  STK_H5_CHECK(a.get(), "'", path_, "': creating attribute '", name, "'");
  STK_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &value), "'", path_, "': writing attribute '", name, "'");
}

}  // namespace shardtopk
