#include "io/graph_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "io/h5_detail.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {
namespace {

using h5::Handle;
using h5::hdf5_reason;

constexpr const char* kKind = "knn_graph";

// One identity field as stored (a root attribute) and as named in a refusal.
struct Field {
  const char* attr;     // attribute name
  const char* what;     // how a user sets it
  bool is_int;
  std::int64_t i = 0;
  std::string s;
};

std::vector<Field> fields_of(const GraphIdentity& g) {
  std::vector<Field> f = {
      {"corpus_rows", "corpus rows", true, g.rows, {}},
      {"corpus_dim", "corpus dimension", true, g.dim, {}},
      {"corpus_bytes", "corpus file size in bytes (corpus.path)", true, g.corpus_bytes, {}},
      {"corpus_sample_crc32c", "corpus file checksum (CRC-32C of its first and last MiB)", true,
       static_cast<std::int64_t>(g.corpus_sample_crc32c), {}},
      {"corpus_dataset", "corpus.dataset", false, 0, g.corpus_dataset},
      {"corpus_ids_dataset", "corpus.ids_dataset", false, 0, g.ids_dataset},
      {"metric", "metric (search.metric)", false, 0, to_string(g.metric)},
      {"dtype", "engine.dtype", false, 0, to_string(g.dtype)},
      {"k", "k (-k)", true, g.k, {}},
      {"exclude_self", "--exclude-self (1: given)", true, g.exclude_self ? 1 : 0, {}},
  };
  if (!g.engine.empty()) f.push_back({"engine", "engine (engine.backend)", false, 0, g.engine});
  return f;
}

std::string text(const Field& f) { return f.is_int ? std::to_string(f.i) : "'" + f.s + "'"; }

void write_string_attr(hid_t file, const std::string& path, const char* name, const std::string& value) {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(file, name, t.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  STK_H5_CHECK(a.get(), "'", path, "': creating attribute '", name, "'");
  const char* p = value.c_str();
  STK_H5_CHECK(H5Awrite(a.get(), t.get(), &p), "'", path, "': writing attribute '", name, "'");
}

void write_int_attr(hid_t file, const std::string& path, const char* name, std::int64_t value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(file, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  STK_H5_CHECK(a.get(), "'", path, "': creating attribute '", name, "'");
  STK_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_INT64, &value), "'", path, "': writing attribute '", name, "'");
}

// A root attribute as the writer stores it; false when absent or of another kind.
bool read_attr(hid_t file, const char* name, bool is_int, std::int64_t* i, std::string* s) {
  if (H5Aexists(file, name) <= 0) return false;
  Handle a(H5Aopen(file, name, H5P_DEFAULT), H5Aclose);
  if (!a.ok()) return false;
  Handle t(H5Aget_type(a.get()), H5Tclose);
  const H5T_class_t cls = H5Tget_class(t.get());
  if (is_int) return cls == H5T_INTEGER && H5Aread(a.get(), H5T_NATIVE_INT64, i) >= 0;
  if (cls != H5T_STRING || H5Tis_variable_str(t.get()) <= 0) return false;
  char* p = nullptr;
  Handle mt(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mt.get(), H5T_VARIABLE);
  H5Tset_cset(mt.get(), H5Tget_cset(t.get()));
  if (H5Aread(a.get(), mt.get(), &p) < 0) return false;
  *s = p ? p : "";
  H5free_memory(p);
  return true;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

const char* kHowToStartOver = "pass --overwrite to start over (its rows are lost), or choose another output path";

// Refuses an existing output that another process has open: HDF5 locks the files it opens (flock:
// exclusive to write, shared to read), and creating the file again would truncate it under a
// writer (a second job with --overwrite on a running job's output) before HDF5's own lock check
// refuses. Without HDF5's locks (HDF5_USE_FILE_LOCKING=FALSE) there is nothing to see.
void refuse_if_in_use(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  SHARDTOPK_EXPECTS(S_ISREG(st.st_mode), "output '", path, "' is not a regular file (",
                    S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a special file",
                    "); choose another output path");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return;  // what cannot be read is refused by the open that follows, naming why
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases the probe's own lock
  SHARDTOPK_EXPECTS(!held, "output '", path, "' is in use: another process has it open (a knn-graph job still ",
                    "writing it, or a reader); wait for it to end, or choose another output path");
}

// The rows_done of an existing file opened as `file`, after checking that it is a knn-graph file
// of identity `want` with ids and scores of its shape.
std::int64_t check_open(hid_t file, const std::string& path, const GraphIdentity& want) {
  std::int64_t i = 0;
  std::string kind;
  SHARDTOPK_EXPECTS(read_attr(file, "kind", false, &i, &kind) && kind == kKind, "output '", path,
                    "' exists and is not a knn-graph file (no attribute kind='", kKind, "'); ", kHowToStartOver);
  std::string diffs;
  for (const Field& f : fields_of(want)) {
    Field there = f;
    if (!read_attr(file, f.attr, f.is_int, &there.i, &there.s)) {
      diffs += std::string(diffs.empty() ? "" : "; ") + f.what + ": not recorded there, " + text(f) + " here";
      continue;
    }
    if (f.is_int ? there.i != f.i : there.s != f.s)
      diffs += std::string(diffs.empty() ? "" : "; ") + f.what + ": " + text(there) + " there, " + text(f) + " here";
  }
  SHARDTOPK_EXPECTS(diffs.empty(), "output '", path, "' holds a knn-graph job with other arguments (", diffs,
                    "); rerun with that job's arguments to continue it, or ", kHowToStartOver);
  std::int64_t done = -1;
  SHARDTOPK_EXPECTS(read_attr(file, "rows_done", true, &done, nullptr) && done >= 0 && done <= want.rows, "output '",
                    path, "': attribute rows_done is missing or outside 0 .. ", want.rows, "; ", kHowToStartOver);
  for (const char* name : {"ids", "scores"}) {
    Handle ds(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
    SHARDTOPK_EXPECTS(ds.ok(), "output '", path, "': dataset '", name, "' is missing; ", kHowToStartOver);
    Handle sp(H5Dget_space(ds.get()), H5Sclose);
    hsize_t dims[2] = {0, 0};
    SHARDTOPK_EXPECTS(H5Sget_simple_extent_ndims(sp.get()) == 2 && H5Sget_simple_extent_dims(sp.get(), dims, nullptr) == 2 &&
                          dims[0] == static_cast<hsize_t>(want.rows) && dims[1] == static_cast<hsize_t>(want.k),
                      "output '", path, "': dataset '", name, "' is not [", want.rows, ", ", want.k, "]; ",
                      kHowToStartOver);
    // The type the job writes (int64 ids, float32 scores): rows continued into a dataset of another
    // type would be converted by HDF5 on the way in, and the file would not be the job's.
    Handle type(H5Dget_type(ds.get()), H5Tclose);
    const bool ids = std::string(name) == "ids";
    const bool right = type.ok() && H5Tget_class(type.get()) == (ids ? H5T_INTEGER : H5T_FLOAT) &&
                       H5Tget_size(type.get()) == (ids ? 8u : 4u) && (!ids || H5Tget_sign(type.get()) == H5T_SGN_2);
    SHARDTOPK_EXPECTS(right, "output '", path, "': dataset '", name, "' is not ", ids ? "int64" : "float32", "; ",
                      kHowToStartOver);
  }
  return done;
}

void create_dataset(hid_t file, const std::string& path, const char* name, hid_t type, std::int64_t rows, int k) {
  const hsize_t dims[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(k)};
  Handle space(H5Screate_simple(2, dims, nullptr), H5Sclose);
  Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  // Contiguous and allocated at creation: appending rows writes raw data only, never the
  // file's metadata, so the one metadata change per block is the rows_done attribute.
  STK_H5_CHECK(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), "'", path, "': dataset '", name, "': layout");
  STK_H5_CHECK(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "'", path, "': dataset '", name, "': allocation");
  STK_H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "'", path, "': dataset '", name, "': fill");
  // No modification times: one job gives the same bytes whenever and wherever it runs.
  STK_H5_CHECK(H5Pset_obj_track_times(dcpl.get(), false), "'", path, "': dataset '", name, "': times");
  Handle ds(H5Dcreate2(file, name, type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose);
  STK_H5_CHECK(ds.get(), "'", path, "': creating dataset '", name, "' [", rows, ", ", k, "]");
}

// Everything written so far reaches the disk: HDF5's caches to the file, then the file to the
// device (fsync of the sec2 driver's descriptor).
void sync(hid_t file, const std::string& path) {
  STK_H5_CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL), "'", path, "': flushing");
  void* handle = nullptr;
  STK_H5_CHECK(H5Fget_vfd_handle(file, H5P_DEFAULT, &handle), "'", path, "': file descriptor");
  const int fd = *static_cast<int*>(handle);
  if (::fsync(fd) != 0) {
    const int err = errno;
    throw Error(detail::concat("'", path, "': fsync failed: ", std::strerror(err)));
  }
}

void write_rows(hid_t file, const std::string& path, const char* name, hid_t mem_type, std::int64_t first,
                std::int64_t n, int k, const void* data) {
  Handle ds(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  STK_H5_CHECK(ds.get(), "'", path, "': opening dataset '", name, "'");
  const hsize_t start[2] = {static_cast<hsize_t>(first), 0};
  const hsize_t count[2] = {static_cast<hsize_t>(n), static_cast<hsize_t>(k)};
  Handle fspace(H5Dget_space(ds.get()), H5Sclose);
  STK_H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), "'", path,
               "': selecting rows [", first, ", ", first + n, ") of '", name, "'");
  Handle mspace(H5Screate_simple(2, count, nullptr), H5Sclose);
  STK_H5_CHECK(H5Dwrite(ds.get(), mem_type, mspace.get(), fspace.get(), H5P_DEFAULT, data), "'", path,
               "': writing rows [", first, ", ", first + n, ") of '", name, "'");
  // Closing the dataset writes what libhdf5 still holds of it; a failure there (a full disk) is
  // a failed write of these rows, before rows_done can cover them.
  STK_H5_CHECK(H5Dclose(ds.release()), "'", path, "': writing rows [", first, ", ", first + n, ") of '", name,
               "' (closing the dataset)");
}

// The output's file access: no data sieve buffer, so each block's rows go to the file in its
// own write calls, whose failures H5Dwrite reports (a buffered write of a small block would
// reach the file only later, where a failure is easy to lose).
Handle output_fapl() {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (fapl.ok()) (void)H5Pset_sieve_buf_size(fapl.get(), 0);
  return fapl;
}

}  // namespace

std::int64_t GraphFile::check(const std::string& path, const GraphIdentity& want, bool overwrite) {
  if (!exists(path)) return 0;
  refuse_if_in_use(path);
  if (overwrite) return 0;
  h5::silence();
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  SHARDTOPK_EXPECTS(id >= 0, "output '", path, "' exists and cannot be opened as HDF5 (", hdf5_reason(), "); ",
                    kHowToStartOver);
  Handle file(id, H5Fclose);
  return check_open(file.get(), path, want);
}

GraphFile::GraphFile(const std::string& path, const GraphIdentity& want, bool overwrite)
    : path_(path), rows_(want.rows), k_(want.k) {
  SHARDTOPK_ASSERT(want.rows >= 1 && want.k >= 1);
  h5::silence();
  if (exists(path)) refuse_if_in_use(path);
  if (!overwrite && exists(path)) {
    const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDWR, output_fapl().get());
    SHARDTOPK_EXPECTS(id >= 0, "output '", path, "' exists and cannot be opened for writing as HDF5 (", hdf5_reason(),
                      "); ", kHowToStartOver);
    file_ = id;
    try {
      rows_done_ = check_open(id, path, want);
    } catch (...) {
      H5Fclose(id);
      file_ = -1;
      throw;
    }
    return;
  }
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, output_fapl().get());
  SHARDTOPK_EXPECTS(id >= 0, "cannot create '", path, "': ", hdf5_reason());
  file_ = id;
  try {
    create_dataset(id, path, "ids", H5T_STD_I64LE, want.rows, want.k);
    create_dataset(id, path, "scores", H5T_IEEE_F32LE, want.rows, want.k);
    write_string_attr(id, path, "kind", kKind);
    for (const Field& f : fields_of(want)) {
      if (f.is_int) write_int_attr(id, path, f.attr, f.i);
      else write_string_attr(id, path, f.attr, f.s);
    }
    write_string_attr(id, path, "corpus_path", want.corpus_path);
    write_string_attr(id, path, "score_units",
                      want.metric == Metric::kL2 ? "squared_l2_distance" : "similarity");
    write_string_attr(id, path, "version", version());
    write_int_attr(id, path, "rows_done", 0);
    sync(id, path);
  } catch (...) {
    H5Fclose(id);
    file_ = -1;
    throw;
  }
}

GraphFile::~GraphFile() {
  if (file_ >= 0) H5Fclose(static_cast<hid_t>(file_));
}

void GraphFile::append(std::int64_t n, const std::int64_t* ids, const float* scores) {
  SHARDTOPK_EXPECTS(file_ >= 0, "'", path_, "': closed");
  h5::silence();  // appends may come from a thread of their own
  SHARDTOPK_EXPECTS(n >= 0 && rows_done_ + n <= rows_, "'", path_, "': rows [", rows_done_, ", ", rows_done_ + n,
                    ") outside its ", rows_, " rows");
  if (n == 0) return;
  const hid_t file = static_cast<hid_t>(file_);
  write_rows(file, path_, "ids", H5T_NATIVE_INT64, rows_done_, n, k_, ids);
  write_rows(file, path_, "scores", H5T_NATIVE_FLOAT, rows_done_, n, k_, scores);
  sync(file, path_);  // the rows are on disk before the marker that covers them
  const std::int64_t done = rows_done_ + n;
  {
    Handle a(H5Aopen(file, "rows_done", H5P_DEFAULT), H5Aclose);
    STK_H5_CHECK(a.get(), "'", path_, "': opening attribute rows_done");
    STK_H5_CHECK(H5Awrite(a.get(), H5T_NATIVE_INT64, &done), "'", path_, "': writing attribute rows_done");
  }
  sync(file, path_);
  rows_done_ = done;
}

void GraphFile::close() {
  if (file_ < 0) return;
  h5::silence();
  const herr_t st = H5Fclose(static_cast<hid_t>(file_));
  file_ = -1;
  STK_H5_CHECK(st, "closing '", path_, "'");
}

}  // namespace shardtopk
