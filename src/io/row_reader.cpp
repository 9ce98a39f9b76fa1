// Reading one rank's rows of a 2-D float dataset at storage speed (docs/PERFORMANCE.md,
// "Ingestion") without letting HDF5 substitute data for what is missing, and without ever
// reading other bytes than libhdf5 would (DESIGN.md invariant 8).
//
// Paths, chosen per dataset (choose_path):
//  - contiguous, little-endian IEEE float16/32/64: pread() of the raw bytes straight from the
//    dataset's file (H5Dget_offset), split over threads; values converted and checked on the
//    host. No HDF5 call touches the data, so no library lock and no soft conversion (16 MB/s for
//    float16).
//  - chunked through deflate, shuffle or both, and no other filter: each chunk's stored bytes
//    through libhdf5 (H5Dread_chunk, HDF5 >= 1.10.5 here) on the calling thread, then per chunk
//    on the threads: inflate (libdeflate; zlib decides a stream libdeflate refuses), unshuffle,
//    convert, check.
//  - anything else (compact, virtual, external storage, unfiltered chunks, other filters,
//    big-endian, other float formats): H5Dread of the raw values on the calling thread (HDF5 is
//    not thread-safe here), then the same conversion and checks on the threads.
// The contiguous path reads through a duplicate of libhdf5's own descriptor of the file the
// dataset lives in, so an external link's target is read, never the link file (open_data_file),
// and only bytes inside that file's allocated space, after its user block; the chunk path lets
// libhdf5 find and read each chunk.
// Every check names the global row and column of the first bad value in row-major order, so the
// message does not depend on the thread count. Value conversion and checks: value_convert.cpp;
// the refusal of data HDF5 would make up: substituted_data.cpp.
#include <fcntl.h>
#include <sys/stat.h>
#include <libdeflate.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <thread>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "io/h5_detail.hpp"
#include "io/substituted_data.hpp"
#include "io/value_convert.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {
namespace {

using h5::Handle;
using namespace io_detail;

// Why a float type's fields cannot describe a number stored in its bytes (the checks libhdf5
// makes when a type is built, which a damaged file's type message skips: libhdf5 then converts
// bits beyond each value, with results that depend on how many values one read converts), or "".
std::string float_type_fault(hid_t t) {
  const size_t size = H5Tget_size(t), prec = H5Tget_precision(t);
  const int off = H5Tget_offset(t);
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_class(t) != H5T_FLOAT || off < 0 || H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return "its fields cannot be read";
  }
  std::ostringstream os;
  if (prec == 0 || static_cast<size_t>(off) + prec > 8 * size)
    os << "precision " << prec << " at bit " << off << " in " << size << " bytes";
  else if (spos >= prec || esize == 0 || epos + esize > prec || msize == 0 || mpos + msize > prec)
    os << "sign at bit " << spos << ", exponent bits [" << epos << ", " << epos + esize << "), mantissa bits [" << mpos
       << ", " << mpos + msize << ") in a precision of " << prec << " bits";
  else if ((spos >= epos && spos < epos + esize) || (spos >= mpos && spos < mpos + msize) ||
           (epos < mpos + msize && mpos < epos + esize))
    os << "sign at bit " << spos << ", exponent bits [" << epos << ", " << epos + esize << ") and mantissa bits [" << mpos
       << ", " << mpos + msize << ") overlap";
  return os.str();
}

int resolve_threads(int t) {
  if (t > 0) return t;
#ifdef _OPENMP
  return std::max(1, omp_get_max_threads());
#else
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#endif
}

// Runs task(i, thread) for i in [0, n) on `threads` threads.
template <class F>
void parallel_for(std::int64_t n, int threads, F&& task) {
#ifdef _OPENMP
  const int t = static_cast<int>(std::min<std::int64_t>(threads, n));
  if (t > 1) {
#pragma omp parallel for num_threads(t) schedule(dynamic, 1)
    for (std::int64_t i = 0; i < n; ++i) task(i, omp_get_thread_num());
    return;
  }
#else
  (void)threads;
#endif
  for (std::int64_t i = 0; i < n; ++i) task(i, 0);
}

bool read_fully(int fd, void* buf, size_t bytes, std::int64_t off, std::string* err) {
  char* p = static_cast<char*>(buf);
  while (bytes > 0) {
    const ssize_t r = ::pread(fd, p, bytes, static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      *err = std::strerror(errno);
      return false;
    }
    if (r == 0) {
      *err = "unexpected end of file at byte " + std::to_string(off) + " (truncated file?)";
      return false;
    }
    p += r;
    bytes -= static_cast<size_t>(r);
    off += r;
  }
  return true;
}

// A libdeflate decompressor (one per reader thread: they are not thread-safe).
struct Inflater {
  libdeflate_decompressor* d = nullptr;
  Inflater() = default;
  Inflater(Inflater&& o) noexcept : d(o.d) { o.d = nullptr; }
  Inflater& operator=(Inflater&& o) noexcept {
    std::swap(d, o.d);
    return *this;
  }
  ~Inflater() { libdeflate_free_decompressor(d); }
};

struct ThreadScratch {
  std::vector<unsigned char> raw, inflated, unshuffled;
  std::vector<float> f32;
  std::vector<unsigned char> tmp;
  Inflater inflater;
};

// Inflates one zlib stream (HDF5's deflate filter) into out[0, cap): its length, or an error.
// libdeflate (about twice zlib's speed on embeddings, docs/PERFORMANCE.md "Ingestion") reads it;
// a stream libdeflate refuses goes to zlib's uncompress(), libhdf5's own inflater, so a stream
// zlib reads is never refused, and the error of a damaged one is zlib's.
std::size_t inflate_chunk(Inflater& inf, const unsigned char* in, std::size_t have, unsigned char* out,
                          std::size_t cap, std::string* err) {
  if (!inf.d) inf.d = libdeflate_alloc_decompressor();
  std::size_t got = 0;
  if (inf.d && libdeflate_zlib_decompress(inf.d, in, have, out, cap, &got) == LIBDEFLATE_SUCCESS) return got;
  uLongf zout = static_cast<uLongf>(cap);
  const int zr = ::uncompress(out, &zout, in, static_cast<uLong>(have));
  if (zr != Z_OK) *err = std::string("deflate data is corrupt (zlib: ") + zError(zr) + ")";
  return zr == Z_OK ? static_cast<std::size_t>(zout) : 0;
}

// HDF5's shuffle filter undone: ES byte planes of ne bytes each back to ne elements of ES bytes.
// The element-major loop is what compilers vectorize (interleaving stores).
template <int ES>
void unshuffle_planes(const unsigned char* __restrict in, unsigned char* __restrict out, std::size_t ne) {
  const unsigned char* plane[ES];
  for (int b = 0; b < ES; ++b) plane[b] = in + static_cast<std::size_t>(b) * ne;
  for (std::size_t j = 0; j < ne; ++j)
    for (int b = 0; b < ES; ++b) out[j * ES + static_cast<std::size_t>(b)] = plane[b][j];
}

void unshuffle(const unsigned char* in, unsigned char* out, std::size_t ne, std::size_t es) {
  switch (es) {
    case 2: return unshuffle_planes<2>(in, out, ne);
    case 4: return unshuffle_planes<4>(in, out, ne);
    case 8: return unshuffle_planes<8>(in, out, ne);
    default:
      for (std::size_t b = 0; b < es; ++b)
        for (std::size_t j = 0; j < ne; ++j) out[j * es + b] = in[b * ne + j];
  }
}

struct ChunkPlan {
  bool direct = false;     // read chunks ourselves
  std::int64_t cr = 0, cc = 0;
  std::vector<int> filters;  // pipeline order: H5Z_FILTER_SHUFFLE / H5Z_FILTER_DEFLATE
};

class RowReader {
 public:
  RowReader(const std::string& path, const std::string& dataset, RowRange range, RowFormat format, const ReadOptions& opt)
      : path_(path), range_(range), format_(format), opt_(opt) {
    file_ = h5::open_file(path);
    ds_ = h5::open_dataset(file_.get(), path, dataset);
    info_ = h5::describe(ds_.get(), h5::strip_slash(dataset));
    SHARDTOPK_EXPECTS(info_.dims.size() == 2, "'", path, "': dataset '", info_.name,
                      "' must be 2-D [rows, dim], but it is ", info_.dims.size(), "-D");
    SHARDTOPK_EXPECTS(info_.is_float, "'", path, "': dataset '", info_.name, "' has dtype ", info_.dtype,
                      "; expected float16, float32 or float64");
    n_ = info_.dims[0];
    d_ = info_.dims[1];
    SHARDTOPK_EXPECTS(d_ >= 1, "'", path, "': dataset '", info_.name, "' has dimension 0");
    // byte counts (rows x dim x 8 at most) must fit in 64 bits (a damaged shape can be ~2^64)
    SHARDTOPK_EXPECTS(n_ >= 0 && n_ <= std::numeric_limits<std::int64_t>::max() / 8 / d_, "'", path, "': dataset '",
                      info_.name, "' of [", static_cast<std::uint64_t>(n_), ", ", d_, "] is too large to read");
    SHARDTOPK_EXPECTS(range.lo >= 0 && range.lo <= range.hi && range.hi <= n_, "'", path, "': rows [", range.lo, ", ",
                      range.hi, ") outside dataset '", info_.name, "' of ", n_, " rows");
    SHARDTOPK_EXPECTS(opt.chunk_rows >= 1, "read chunk must be >= 1 row, got ", opt.chunk_rows);
    threads_ = resolve_threads(opt.threads);
    limit_ = limit_for(format, opt.storage);
    f16c_ = cpu_has_f16c() && opt.f16c;

    ftype_ = Handle(H5Dget_type(ds_.get()), H5Tclose);
    STK_H5_CHECK(ftype_.get(), "'", path, "': type of '", info_.name, "'");
    // libhdf5 converts any float layout, one element at a time: a damaged size (hundreds of MB per
    // value) would take it hours. No float format is wider than 16 bytes.
    const size_t type_bytes = H5Tget_size(ftype_.get());
    SHARDTOPK_EXPECTS(type_bytes >= 1 && type_bytes <= 16, "'", path, "': dataset '", info_.name, "' has a float type of ",
                      type_bytes, " bytes; expected float16, float32 or float64");
    const std::string bad_type = float_type_fault(ftype_.get());
    SHARDTOPK_EXPECTS(bad_type.empty(), "'", path, "': dataset '", info_.name, "' has an invalid float type (", bad_type,
                      "): the file is damaged");
    dcpl_ = Handle(H5Dget_create_plist(ds_.get()), H5Pclose);
    STK_H5_CHECK(dcpl_.get(), "'", path, "': creation properties of '", info_.name, "'");
    classify_type();
    // external storage holds the file type's bytes, whatever we convert them to
    refuse_substituted_data(file_.get(), ds_.get(), dcpl_.get(), path_, info_.name, n_, d_, H5Tget_size(ftype_.get()),
                            range_);
    choose_path();
  }

  void run(const RowBlockSink& sink, const RowBlockBuffer& buffer) {
    std::vector<unsigned char> own;
    const size_t fb = format_bytes(format_);
    for (std::int64_t done = 0; done < range_.size();) {
      const std::int64_t take = std::min<std::int64_t>(opt_.chunk_rows, range_.size() - done);
      const std::int64_t b0 = range_.lo + done;
      void* dst = nullptr;
      if (buffer) {
        dst = buffer(b0, take);
        SHARDTOPK_ASSERT(dst != nullptr, "RowBlockBuffer returned null");
      } else {
        own.resize(static_cast<size_t>(take * d_) * fb);
        dst = own.data();
      }
      Fault f;
      if (contiguous_) f = read_contiguous(b0, take, dst);
      else if (chunks_.direct) f = read_chunks(b0, take, dst);
      else f = read_hdf5(b0, take, dst);
      if (f.kind != Fault::kNone) throw Error(message(f));
      sink(RowBlock{b0, take, d_, format_, dst});
      done += take;
      if (opt_.progress) opt_.progress(done, range_.size());
    }
  }

  std::int64_t cols() const { return d_; }
  const ReadPlan& plan() const { return plan_; }

 private:
  void classify_type() {
    const hid_t t = ftype_.get();
    size_t spos, epos, esize, mpos, msize;
    const size_t size = H5Tget_size(t);
    const bool le = H5Tget_order(t) == H5T_ORDER_LE;
    le_ = le;
    elem_ = Elem::kOther;
    if (H5Tget_class(t) != H5T_FLOAT || H5Tget_fields(t, &spos, &epos, &esize, &mpos, &msize) < 0) {
      H5Eclear2(H5E_DEFAULT);
      return;
    }
    const size_t bias = H5Tget_ebias(t);
    const bool no_pad = H5Tget_offset(t) == 0 && H5Tget_precision(t) == size * 8;
    // IEEE 754 binary formats have an implied leading mantissa bit; a type with the same fields
    // but another normalisation is another number format (libhdf5 converts it).
    if (!no_pad || H5Tget_norm(t) != H5T_NORM_IMPLIED) {
      H5Eclear2(H5E_DEFAULT);
      return;
    }
    if (size == 2 && spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 && bias == 15) elem_ = Elem::kF16;
    if (size == 4 && spos == 31 && epos == 23 && esize == 8 && mpos == 0 && msize == 23 && bias == 127) elem_ = Elem::kF32;
    if (size == 8 && spos == 63 && epos == 52 && esize == 11 && mpos == 0 && msize == 52 && bias == 1023) elem_ = Elem::kF64;
  }

  // The memory type H5Dread uses: the file's own layout in little-endian order (HDF5 then only
  // swaps bytes, if anything), or native double for float formats we do not decode ourselves
  // (every float16/32-sized format converts to it exactly; float32 is then rounded here, once).
  Handle memory_type() const {
    if (elem_ == Elem::kOther) return Handle(H5Tcopy(H5T_NATIVE_DOUBLE), H5Tclose);
    Handle t(H5Tcopy(ftype_.get()), H5Tclose);
    H5Tset_order(t.get(), H5T_ORDER_LE);
    return t;
  }

  void use_hdf5(const std::string& why) {
    plan_.method = ReadMethod::kHdf5;
    plan_.reason = why;
    contiguous_ = false;
    chunks_.direct = false;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // The file libhdf5 reads the dataset from (H5Iget_file_id: the opened file, or the target of
  // an external link), as a duplicate of libhdf5's own descriptor of it, so that pread reads the
  // very bytes libhdf5 would; with its user block size (where HDF5 addresses start), allocated
  // size (end of address space, relative to the user block) and size on disk. "" or why not.
  std::string open_data_file() {
    Handle f(H5Iget_file_id(ds_.get()), H5Fclose);
    if (!f.ok()) return "libhdf5 cannot name the dataset's file";
    plan_.file = h5::file_name_of(ds_.get());
    Handle fapl(H5Fget_access_plist(f.get()), H5Pclose);
    if (!fapl.ok() || H5Pget_driver(fapl.get()) != H5FD_SEC2)
      return "libhdf5 reads '" + plan_.file + "' through a driver other than its POSIX one (sec2)";
    void* handle = nullptr;
    if (H5Fget_vfd_handle(f.get(), fapl.get(), &handle) < 0 || handle == nullptr)
      return "libhdf5 does not give its descriptor of '" + plan_.file + "'";
    const int fd = ::fcntl(*static_cast<int*>(handle), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return std::string("cannot duplicate libhdf5's descriptor: ") + std::strerror(errno);
    fd_ = fd;
    struct stat st;
    if (::fstat(fd_, &st) != 0) return std::string("cannot stat '") + plan_.file + "': " + std::strerror(errno);
    file_bytes_ = static_cast<std::int64_t>(st.st_size);
    Handle fcpl(H5Fget_create_plist(f.get()), H5Pclose);
    hsize_t ub = 0;
    if (!fcpl.ok() || H5Pget_userblock(fcpl.get(), &ub) < 0) return "cannot read the user block size of '" + plan_.file + "'";
    user_block_ = static_cast<std::int64_t>(ub);
    haddr_t eoa = HADDR_UNDEF;
    if (H5Fget_eoa(f.get(), &eoa) < 0 || eoa == HADDR_UNDEF) return "cannot read the allocated size of '" + plan_.file + "'";
    eoa_ = static_cast<std::int64_t>(eoa);
    return "";
  }

  // How rows are read. The direct paths bypass libhdf5, so one is taken only when every
  // condition that makes its bytes the dataset's holds; otherwise H5Dread, with the reason kept
  // (plan_row_reads).
  // The filters of the dataset this libhdf5 cannot apply (a compression plugin that is not
  // installed, such as h5py's lzf or blosc), as "filter 32000 ('lzf')"; "" when there are none.
  std::string unavailable_filters() {
    std::string out;
    const int nf = H5Pget_nfilters(dcpl_.get());
    for (int i = 0; i < nf; ++i) {
      unsigned flags = 0;
      size_t nelem = 0;
      char name[64] = {0};
      const H5Z_filter_t f = H5Pget_filter2(dcpl_.get(), static_cast<unsigned>(i), &flags, &nelem, nullptr,
                                            sizeof name, name, nullptr);
      if (f < 0 || H5Zfilter_avail(f) > 0) continue;
      out += detail::concat(out.empty() ? "" : ", ", "filter ", f, name[0] ? detail::concat(" ('", name, "')") : "");
    }
    H5Eclear2(H5E_DEFAULT);
    return out;
  }

  void choose_path() {
    plan_ = ReadPlan{};
    plan_.file = path_;
    const H5D_layout_t layout = H5Pget_layout(dcpl_.get());
    if (!opt_.direct_reads) return use_hdf5("direct reads are off (io.direct_reads)");
    if (elem_ == Elem::kOther) return use_hdf5("the file type is not an IEEE float16/32/64 format");
    if (!le_) return use_hdf5("the file type is big-endian");
    if (layout == H5D_COMPACT) return use_hdf5("compact layout (the values live in the object header)");
    if (layout == H5D_VIRTUAL) return use_hdf5("virtual dataset (its values come from source datasets)");
    if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED) return use_hdf5("unknown layout");
    if (H5Pget_external_count(dcpl_.get()) != 0) return use_hdf5("external raw storage (H5Pset_external)");
    const std::string no_file = open_data_file();
    if (!no_file.empty()) return use_hdf5(no_file);
    const std::int64_t es = static_cast<std::int64_t>(elem_bytes(elem_));
    if (layout == H5D_CONTIGUOUS) {
      if (H5Pget_nfilters(dcpl_.get()) != 0) return use_hdf5("a contiguous dataset with filters");
      const haddr_t off = H5Dget_offset(ds_.get());  // absolute: includes the user block
      H5Eclear2(H5E_DEFAULT);
      if (off == HADDR_UNDEF) return use_hdf5("libhdf5 gives no file offset for the dataset");
      const std::int64_t bytes = n_ * d_ * es;
      if (static_cast<std::int64_t>(H5Dget_storage_size(ds_.get())) < bytes)
        return use_hdf5("its storage is smaller than its shape");
      data_offset_ = static_cast<std::int64_t>(off);
      const std::int64_t end = data_offset_ + bytes;
      // libhdf5 refuses to read past the end of the file's allocated space ("addr overflow")
      if (data_offset_ < user_block_ || end - user_block_ > eoa_)
        return use_hdf5("its bytes lie outside the file's allocated space");
      SHARDTOPK_EXPECTS(file_bytes_ >= end, "'", plan_.file, "' is truncated: dataset '", info_.name,
                        "' needs bytes [", data_offset_, ", ", end, ") but the file has ", file_bytes_, " bytes");
      contiguous_ = true;
      plan_.method = ReadMethod::kDirectContiguous;
      return;
    }
#if H5_VERSION_GE(1, 10, 5)
    hsize_t cd[2] = {0, 0};
    if (H5Pget_chunk(dcpl_.get(), 2, cd) != 2 || cd[0] == 0 || cd[1] == 0) {
      H5Eclear2(H5E_DEFAULT);
      return use_hdf5("the chunk shape is not 2-D");
    }
    // libhdf5's own limit: a chunk holds less than 4 GiB (a damaged shape could overflow below)
    if (cd[0] > 0xFFFFFFFFull || cd[1] > 0xFFFFFFFFull / cd[0] || cd[0] * cd[1] > 0xFFFFFFFFull / static_cast<hsize_t>(es))
      return use_hdf5("chunks of 4 GiB or more");
    unsigned chunk_opts = 0;
    if (H5Pget_chunk_opts(dcpl_.get(), &chunk_opts) < 0 || (chunk_opts & H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS) != 0) {
      H5Eclear2(H5E_DEFAULT);
      return use_hdf5("partial edge chunks are stored unfiltered (H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS)");
    }
    chunks_.cr = static_cast<std::int64_t>(cd[0]);
    chunks_.cc = static_cast<std::int64_t>(cd[1]);
    chunks_.filters.clear();
    const int nf = H5Pget_nfilters(dcpl_.get());
    for (int i = 0; i < nf; ++i) {
      unsigned flags = 0, cdv[4] = {0, 0, 0, 0};
      size_t nelem = 4;
      const H5Z_filter_t f = H5Pget_filter2(dcpl_.get(), static_cast<unsigned>(i), &flags, &nelem, cdv, 0, nullptr,
                                            nullptr);
      if (f == H5Z_FILTER_DEFLATE) {
        // libhdf5's deflate filter refuses every chunk whose parameters are not one level 0 .. 9
        // (H5Z__filter_deflate: "invalid deflate aggression level"), though inflating needs none
        if (nelem != 1 || cdv[0] > 9) {
          H5Eclear2(H5E_DEFAULT);
          return use_hdf5("a deflate filter whose parameters libhdf5 refuses");
        }
        chunks_.filters.push_back(static_cast<int>(f));
      } else if (f == H5Z_FILTER_SHUFFLE) {
        // libhdf5 unshuffles with the element size stored with the filter, not the type's
        // (H5Z__filter_shuffle refuses any other number of parameters than one)
        if (nelem != 1 || static_cast<std::int64_t>(cdv[0]) != es) {
          H5Eclear2(H5E_DEFAULT);
          return use_hdf5("a shuffle filter whose element size is not the type's");
        }
        chunks_.filters.push_back(static_cast<int>(f));
      } else {  // fletcher32, szip, lzf, blosc, ...: libhdf5 applies them
        H5Eclear2(H5E_DEFAULT);
        return use_hdf5("a filter other than deflate and shuffle (filter " + std::to_string(f) + ")");
      }
    }
    // H5Dread_chunk copies as many bytes as the chunk index records for the chunk, and only for
    // filtered chunks does any call report that length (H5Dget_chunk_storage_size); for unfiltered
    // ones it reports the chunk's size, while a v1 B-tree index records a length of its own for
    // every chunk (any length, in a damaged file: refuse_substituted_data refuses one shorter
    // than the chunk, which H5Dread would read past).
    if (chunks_.filters.empty())
      return use_hdf5("chunks without filters (H5Dread reads them in place; there is nothing to decode)");
    // Decoding needs a chunk-sized buffer per reader thread (inflated, then unshuffled): larger
    // chunks are decoded by libhdf5, one at a time. A chunk shape is the writer's choice (h5py's
    // automatic chunks hold at most 1 MiB), and a damaged one can name a chunk of gigabytes.
    constexpr hsize_t kMaxDecodedChunkBytes = hsize_t{64} << 20;
    if (!chunks_.filters.empty() && cd[0] * cd[1] * static_cast<hsize_t>(es) > kMaxDecodedChunkBytes)
      return use_hdf5("filtered chunks of more than 64 MiB");
    chunks_.direct = true;
    plan_.method = ReadMethod::kDirectChunks;
#else
    use_hdf5("libhdf5 " H5_VERS_INFO " cannot locate chunks (1.10.5 or newer can)");
#endif
  }

  std::string message(const Fault& f) const {
    if (f.kind == Fault::kIo) return f.io;
    if (f.kind == Fault::kNonFinite)
      return detail::concat("'", path_, "': ", opt_.label, " ", f.row, " of '", info_.name,
                            "' has a non-finite value (", f.value, ") at column ", f.col);
    const bool storage = std::string(f.range_type) != "float32";
    return detail::concat("'", path_, "': ", opt_.label, " ", f.row, " of '", info_.name, "' has value ", f.value,
                          " at column ", f.col, ", out of range of ", f.range_type, " (largest finite ", f.range_max, ")",
                          storage ? std::string(": it overflows ") + f.range_type +
                                        ", the storage type (engine.dtype); use engine.dtype float32"
                                  : std::string());
  }

  // A run of values starting at dataset (row, col), `n` of them in row-major order of width d_.
  static void note(Fault* worst, const RunBad& b, std::int64_t row, std::int64_t col, std::int64_t width) {
    if (b.index < 0) return;
    Fault f;
    f.kind = b.kind;
    f.row = row + (col + b.index) / width;
    f.col = (col + b.index) % width;
    f.value = b.value;
    f.range_type = b.range_type;
    f.range_max = b.range_max;
    if (f.before(*worst)) *worst = f;
  }

  Fault merge(std::vector<Fault>& per_thread) const {
    Fault w;
    for (auto& f : per_thread)
      if (f.before(w)) w = f;
    return w;
  }

  std::vector<ThreadScratch>& scratch() {
    if (scratch_.size() < static_cast<size_t>(threads_)) scratch_.resize(static_cast<size_t>(threads_));
    return scratch_;
  }

  // Contiguous: pieces of about 1 MiB of the file, each read and converted by one thread.
  Fault read_contiguous(std::int64_t b0, std::int64_t rows, void* dst) {
    const size_t es = elem_bytes(elem_), fb = format_bytes(format_);
    const std::int64_t total = rows * d_;
    const std::int64_t piece = std::max<std::int64_t>(1, (1 << 20) / static_cast<std::int64_t>(es));
    const std::int64_t pieces = (total + piece - 1) / piece;
    const bool in_place = es == fb && (elem_ == Elem::kF32) == (format_ == RowFormat::kFloat32);
    auto& sc = scratch();
    std::vector<Fault> faults(static_cast<size_t>(threads_));
    const std::int64_t base = data_offset_ + b0 * d_ * static_cast<std::int64_t>(es);
    parallel_for(pieces, threads_, [&](std::int64_t p, int t) {
      const std::int64_t i0 = p * piece, cnt = std::min(piece, total - i0);
      unsigned char* out = static_cast<unsigned char*>(dst) + static_cast<size_t>(i0) * fb;
      ThreadScratch& s = sc[static_cast<size_t>(t)];
      void* in = out;
      if (!in_place) {
        s.raw.resize(static_cast<size_t>(cnt) * es);
        in = s.raw.data();
      }
      std::string err;
      if (!read_fully(fd_, in, static_cast<size_t>(cnt) * es, base + i0 * static_cast<std::int64_t>(es), &err)) {
        Fault f;
        f.kind = Fault::kIo;
        f.io = detail::concat("'", plan_.file, "': reading ", rows_text(b0 + i0 / d_, b0 + (i0 + cnt + d_ - 1) / d_), " of '",
                              info_.name, "': ", err);
        if (f.before(faults[static_cast<size_t>(t)])) faults[static_cast<size_t>(t)] = f;
        return;
      }
      if (elem_ == Elem::kF64 && format_ == RowFormat::kFloat16Bits) s.f32.resize(static_cast<size_t>(cnt));
      const RunBad b = convert_run(elem_, in, format_, out, static_cast<size_t>(cnt), limit_, s.f32.data(), f16c_);
      note(&faults[static_cast<size_t>(t)], b, b0 + i0 / d_, i0 % d_, d_);
    });
    return merge(faults);
  }

  // Through HDF5 (on this thread), then conversion and checks on the threads.
  Fault read_hdf5(std::int64_t b0, std::int64_t rows, void* dst) {
    const Elem e = elem_ == Elem::kOther ? Elem::kF64 : elem_;  // kOther arrives as float64 (memory_type)
    const size_t es = elem_bytes(e), fb = format_bytes(format_);
    const bool in_place = es == fb && (e == Elem::kF32) == (format_ == RowFormat::kFloat32);
    void* raw = dst;
    if (!in_place) {
      hdf5_buf_.resize(static_cast<size_t>(rows * d_) * es);
      raw = hdf5_buf_.data();
    }
    Handle fspace(H5Dget_space(ds_.get()), H5Sclose);
    STK_H5_CHECK(fspace.get(), "'", path_, "': dataspace of '", info_.name, "'");
    const hsize_t start[2] = {static_cast<hsize_t>(b0), 0};
    const hsize_t count[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(d_)};
    STK_H5_CHECK(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), "'", path_,
                 "': selecting rows of '", info_.name, "'");
    Handle mspace(H5Screate_simple(2, count, nullptr), H5Sclose);
    Handle mt = memory_type();
    if (H5Dread(ds_.get(), mt.get(), mspace.get(), fspace.get(), H5P_DEFAULT, raw) < 0) {
      // A filter libhdf5 cannot apply fails every read as if the file were damaged: name it.
      const std::string reason = h5::hdf5_reason(), missing = unavailable_filters();
      if (!missing.empty())
        throw Error(detail::concat("'", path_, "': dataset '", info_.name, "' is stored through ", missing,
                                   ", which this HDF5 library cannot decode: install the filter's plugin "
                                   "(HDF5_PLUGIN_PATH names where plugins are looked for), or rewrite the dataset "
                                   "with gzip or without compression where it can be read (h5py reads its own lzf)"));
      throw Error(detail::concat("'", path_, "': reading rows [", b0, ", ", b0 + rows, ") of '", info_.name,
                                 "' (truncated or corrupt file?) (H5Dread failed", reason.empty() ? "" : ": " + reason,
                                 ")"));
    }
    const std::int64_t total = rows * d_;
    const std::int64_t piece = std::max<std::int64_t>(1, (1 << 18) / static_cast<std::int64_t>(es));
    const std::int64_t pieces = (total + piece - 1) / piece;
    auto& sc = scratch();
    std::vector<Fault> faults(static_cast<size_t>(threads_));
    const Elem conv = e;
    parallel_for(pieces, threads_, [&](std::int64_t p, int t) {
      const std::int64_t i0 = p * piece, cnt = std::min(piece, total - i0);
      ThreadScratch& s = sc[static_cast<size_t>(t)];
      if (conv == Elem::kF64 && format_ == RowFormat::kFloat16Bits) s.f32.resize(static_cast<size_t>(cnt));
      const RunBad b = convert_run(conv, static_cast<unsigned char*>(raw) + static_cast<size_t>(i0) * es, format_,
                                   static_cast<unsigned char*>(dst) + static_cast<size_t>(i0) * fb,
                                   static_cast<size_t>(cnt), limit_, s.f32.data(), f16c_);
      note(&faults[static_cast<size_t>(t)], b, b0 + i0 / d_, i0 % d_, d_);
    });
    return merge(faults);
  }

  // Chunked with deflate/shuffle: chunk addresses here, then pread + inflate + unshuffle +
  // convert per chunk on the threads. A chunk that straddles two blocks is decoded for each.
  Fault read_chunks(std::int64_t b0, std::int64_t rows, void* dst) {
#if H5_VERSION_GE(1, 10, 5)
    // The chunks' stored bytes come from libhdf5 (H5Dread_chunk: the lookup H5Dread itself uses;
    // H5Dget_chunk_info_by_coord walks the index another way and can disagree with it on a
    // damaged index), on this thread; inflating, unshuffling and converting them is done here,
    // on the threads. Each buffer has the length H5Dget_chunk_storage_size finds by that same
    // lookup, which is the length H5Dread_chunk copies for a filtered dataset (choose_path
    // sends unfiltered ones to H5Dread).
    struct Chunk {
      std::int64_t r0, c0;
      std::uint32_t mask;
      size_t slot;  // chunk_raw_ entry holding its bytes
    };
    std::vector<Chunk> list;
    const std::int64_t cr = chunks_.cr, cc = chunks_.cc;
    for (std::int64_t r0 = b0 / cr * cr; r0 < b0 + rows; r0 += cr) {
      for (std::int64_t c0 = 0; c0 < d_; c0 += cc) {
        const hsize_t off[2] = {static_cast<hsize_t>(r0), static_cast<hsize_t>(c0)};
        hsize_t size = 0;
        const bool stored = H5Dget_chunk_storage_size(ds_.get(), off, &size) >= 0 && size > 0;
        H5Eclear2(H5E_DEFAULT);
        SHARDTOPK_EXPECTS(stored, "'", path_, "': dataset '", info_.name, "': ",
                          rows_text(std::max(r0, b0), std::min({r0 + cr, b0 + rows, n_})),
                          " were never written (the chunk at row ", r0, ", column ", c0,
                          " is not allocated): HDF5 would return ", fill_value_text(dcpl_.get()), " for them");
        // no chunk is larger than the file's allocated space: a damaged size is libhdf5's to judge
        if (size > static_cast<hsize_t>(eoa_)) return read_hdf5(b0, rows, dst);
        Chunk c{r0, c0, 0, list.size()};
        if (chunk_raw_.size() <= c.slot) chunk_raw_.resize(c.slot + 1);
        chunk_raw_[c.slot].resize(static_cast<size_t>(size));
        STK_H5_CHECK(H5Dread_chunk(ds_.get(), H5P_DEFAULT, off, &c.mask, chunk_raw_[c.slot].data()), "'", path_,
                     "': reading the chunk at row ", r0, ", column ", c0, " of '", info_.name, "'");
        list.push_back(c);
      }
    }
    const size_t es = elem_bytes(elem_), fb = format_bytes(format_);
    const size_t chunk_bytes = static_cast<size_t>(cr * cc) * es;
    auto& sc = scratch();
    std::vector<Fault> faults(static_cast<size_t>(threads_));
    parallel_for(static_cast<std::int64_t>(list.size()), threads_, [&](std::int64_t k, int t) {
      const Chunk& c = list[static_cast<size_t>(k)];
      ThreadScratch& s = sc[static_cast<size_t>(t)];
      Fault& worst = faults[static_cast<size_t>(t)];
      auto io_fault = [&](const std::string& why) {
        Fault f;
        f.kind = Fault::kIo;
        f.io = detail::concat("'", plan_.file, "': chunk at row ", c.r0, ", column ", c.c0, " of '", info_.name, "' (",
                              rows_text(c.r0, std::min(c.r0 + cr, n_)), "): ", why);
        if (f.before(worst)) worst = f;
      };
      const std::vector<unsigned char>& raw = chunk_raw_[c.slot];
      const unsigned char* data = raw.data();
      size_t have = raw.size();
      for (int fi = static_cast<int>(chunks_.filters.size()) - 1; fi >= 0; --fi) {
        if (c.mask & (1u << fi)) continue;  // this filter was skipped for this chunk
        if (chunks_.filters[static_cast<size_t>(fi)] == H5Z_FILTER_DEFLATE) {
          s.inflated.resize(chunk_bytes);
          std::string why;
          const size_t out = inflate_chunk(s.inflater, data, have, s.inflated.data(), chunk_bytes, &why);
          if (!why.empty()) return io_fault(why);
          data = s.inflated.data();
          have = out;
        } else {  // shuffle: byte planes back to elements
          s.unshuffled.resize(have);
          const size_t ne = have / es;
          unshuffle(data, s.unshuffled.data(), ne, es);
          std::memcpy(s.unshuffled.data() + ne * es, data + ne * es, have - ne * es);
          data = s.unshuffled.data();
        }
      }
      if (have != chunk_bytes)
        return io_fault("decoded to " + std::to_string(have) + " bytes, expected " + std::to_string(chunk_bytes));
      const std::int64_t r_lo = std::max(c.r0, b0), r_hi = std::min({c.r0 + cr, b0 + rows, n_});
      const std::int64_t w = std::min(cc, d_ - c.c0);
      if (elem_ == Elem::kF64 && format_ == RowFormat::kFloat16Bits) s.f32.resize(static_cast<size_t>(w));
      for (std::int64_t r = r_lo; r < r_hi; ++r) {
        const unsigned char* src = data + static_cast<size_t>((r - c.r0) * cc) * es;
        unsigned char* out = static_cast<unsigned char*>(dst) + static_cast<size_t>((r - b0) * d_ + c.c0) * fb;
        const RunBad b = convert_run(elem_, src, format_, out, static_cast<size_t>(w), limit_, s.f32.data(), f16c_);
        if (b.index >= 0) {
          note(&worst, b, r, c.c0, d_);  // (r, c0 + index): c0 + index < d_, so no wrap
          return;
        }
      }
    });
    return merge(faults);
#else
    return read_hdf5(b0, rows, dst);
#endif
  }

 public:
  ~RowReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  RowReader(const RowReader&) = delete;
  RowReader& operator=(const RowReader&) = delete;

 private:
  std::string path_;
  RowRange range_;
  RowFormat format_;
  ReadOptions opt_;
  Handle file_, ds_, ftype_, dcpl_;
  DatasetInfo info_;
  std::int64_t n_ = 0, d_ = 0;
  int threads_ = 1;
  Limit limit_;
  Elem elem_ = Elem::kOther;
  bool le_ = true;
  bool contiguous_ = false;
  bool f16c_ = false;           // ReadOptions::f16c and the CPU has F16C
  ReadPlan plan_;
  std::int64_t data_offset_ = 0;  // contiguous: byte offset of the values in the file
  std::int64_t user_block_ = 0;   // bytes before HDF5's address 0 in the dataset's file
  std::int64_t eoa_ = 0;          // end of the file's allocated space (HDF5 address)
  std::int64_t file_bytes_ = 0;   // size of the dataset's file on disk
  std::vector<std::vector<unsigned char>> chunk_raw_;  // read_chunks: each chunk's stored bytes
  ChunkPlan chunks_;
  int fd_ = -1;                   // duplicate of libhdf5's descriptor of the dataset's file
  std::vector<ThreadScratch> scratch_;
  std::vector<unsigned char> hdf5_buf_;
};

}  // namespace

void read_row_blocks(const std::string& path, const std::string& dataset, RowRange range, RowFormat format,
                     const ReadOptions& opt, const RowBlockSink& sink, const RowBlockBuffer& buffer) {
  RowReader r(path, dataset, range, format, opt);
  r.run(sink, buffer);
}

std::int64_t read_rows_into(const std::string& path, const std::string& dataset, RowRange range,
                            const ReadOptions& opt, float* out) {
  RowReader r(path, dataset, range, RowFormat::kFloat32, opt);
  const std::int64_t d = r.cols();
  // No MADV_HUGEPAGE on `out`: with THP defrag "madvise" (Debian's default) its faults compact
  // memory synchronously; measured 1.5-2x slower on 2 cores (docs/PERFORMANCE.md, "Ingest").
  r.run([](const RowBlock&) {},
        [&](std::int64_t first_row, std::int64_t) -> void* { return out + (first_row - range.lo) * d; });
  return d;
}

ReadPlan plan_row_reads(const std::string& path, const std::string& dataset, const ReadOptions& opt) {
  return RowReader(path, dataset, RowRange{0, 0}, RowFormat::kFloat32, opt).plan();
}

HostMatrix read_rows(const std::string& path, const std::string& dataset, RowRange range, const ReadOptions& opt) {
  RowReader r(path, dataset, range, RowFormat::kFloat32, opt);
  HostMatrix m;
  m.rows = range.size();
  m.cols = r.cols();
  m.data.resize(static_cast<size_t>(m.rows * m.cols));
  // blocks are written straight into the result: no copy
  r.run([](const RowBlock&) {},
        [&](std::int64_t first_row, std::int64_t) -> void* {
          return m.data.data() + (first_row - range.lo) * m.cols;
        });
  return m;
}

HostMatrix read_rows(const std::string& path, const std::string& dataset, RowRange range, std::int64_t chunk_rows,
                     const ReadProgress& progress, const std::string& label) {
  ReadOptions opt;
  opt.chunk_rows = chunk_rows;
  opt.progress = progress;
  opt.label = label;
  return read_rows(path, dataset, range, opt);
}

HostMatrix read_matrix(const std::string& path, const std::string& dataset, const std::string& label) {
  const DatasetInfo info = inspect_dataset(path, dataset);
  SHARDTOPK_EXPECTS(info.dims.size() == 2, "'", path, "': dataset '", info.name, "' must be 2-D [rows, dim], but it is ",
                    info.dims.size(), "-D");
  return read_rows(path, dataset, RowRange{0, info.dims[0]}, 1 << 16, {}, label);
}

}  // namespace shardtopk
