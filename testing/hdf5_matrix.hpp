#pragma once
// A matrix of valid HDF5 files that a corpus reader must read exactly as libhdf5 does, written
// with the libhdf5 C API only (no shardtopk writer): every layout (contiguous, chunked with the
// B-tree, fixed-array, extensible-array, single-chunk and implicit indexes, with and without
// deflate/shuffle/fletcher32, compact), both byte orders, float16/32/64, user blocks, soft, hard
// and external links (absolute and relative, the link file smaller and larger than its target,
// chains, a file linking to itself), external raw storage, virtual datasets over several files,
// fill values and datasets partly or never written. Used by tests/io/test_hdf5_differential.cpp,
// fuzz/fuzz_hdf5_differential.cpp (its side files) and fuzz/make_hdf5_seeds.cpp (its seeds).
#include <hdf5.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "shardtopk/corpus_io.hpp"

namespace shardtopk::test::h5m {

enum class Elem {
  kF16,
  kF32,
  kF64,
  kF32NormNone,  // float32's fields without the implied leading mantissa bit: another format
  kF32Bias126,   // float32's fields with another exponent bias
  kF24,          // 3 bytes: sign, 7-bit exponent, 16-bit mantissa
  kF64Padded,    // float64 in 8 bytes with its 4 lowest bits padding (precision 60)
};
enum class Layout {
  kContiguous,
  kChunked,             // no filter
  kDeflate,
  kShuffleDeflate,
  kShuffle,
  kFletcherDeflate,     // a filter the reader leaves to libhdf5
  kPartialUnfiltered,   // deflate, edge chunks stored unfiltered (H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS)
  kCompact,
};
enum class Index { kDefault, kLatest, kSingleChunk, kImplicit, kExtensible };  // chunk index kinds

inline const char* elem_name(Elem e) {
  switch (e) {
    case Elem::kF16: return "f16";
    case Elem::kF32: return "f32";
    case Elem::kF64: return "f64";
    case Elem::kF32NormNone: return "f32_norm_none";
    case Elem::kF32Bias126: return "f32_bias126";
    case Elem::kF24: return "f24";
    case Elem::kF64Padded: return "f64_padded";
  }
  return "?";
}
inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kContiguous: return "contiguous";
    case Layout::kChunked: return "chunked";
    case Layout::kDeflate: return "deflate";
    case Layout::kShuffleDeflate: return "shuffle_deflate";
    case Layout::kShuffle: return "shuffle";
    case Layout::kFletcherDeflate: return "fletcher32_deflate";
    case Layout::kPartialUnfiltered: return "partial_unfiltered";
    case Layout::kCompact: return "compact";
  }
  return "?";
}
inline size_t elem_size(Elem e) {
  return e == Elem::kF16 ? 2 : e == Elem::kF24 ? 3 : e == Elem::kF64 || e == Elem::kF64Padded ? 8 : 4;
}

/// One file of the matrix and what a reader must do with it.
struct Case {
  std::string name;               ///< unique, usable as a file name
  std::string file;               ///< the file to open, relative to the matrix directory
  std::string dataset = "train";  ///< always reached as "train" (a dataset or a link)
  std::int64_t rows = 0, cols = 0;
  std::optional<ReadMethod> method;                 ///< what plan_row_reads must choose
  std::int64_t unwritten_lo = 0, unwritten_hi = 0;  ///< rows libhdf5 would fill: the reader must refuse them
  bool open_fails = false;        ///< the dataset cannot be opened (both readers refuse)
  bool needs_prefix_env = false;  ///< readable only with set_prefix_environment()'s variables
  /// A fuzz seed: names other files by relative names only, and keeps no metadata in the global
  /// heap (virtual datasets do; libhdf5 1.10.8 loops forever or overruns memory reading a
  /// damaged one: fuzz/README.md, vlen_*_global_heap_overlap.h5 and
  /// virtual_layout_global_heap_loop_in_h5dopen.h5).
  bool seed = true;
};

/// The environment under which the external-storage and virtual-prefix cases resolve: relative
/// external file names from the directory of the file naming them, virtual sources also from
/// its vprefix/ folder. libhdf5 1.10 reads these variables once, when it starts, so this must
/// run before the process's first HDF5 call.
inline void set_prefix_environment() {
  setenv("HDF5_EXTFILE_PREFIX", "${ORIGIN}", 1);
  setenv("HDF5_VDS_PREFIX", "${ORIGIN}/vprefix", 1);
}

/// How one dataset is stored.
struct DsetSpec {
  Elem elem = Elem::kF32;
  bool big_endian = false;
  Layout layout = Layout::kContiguous;
  Index index = Index::kDefault;
  std::int64_t rows = 37, cols = 5;
  hsize_t chunk_rows = 8, chunk_cols = 3;
  unsigned seed = 1;
  std::int64_t written_rows = -1;  ///< -1: every row; else rows [0, written_rows) only (none: 0)
  std::optional<double> fill;      ///< a user fill value
  bool early_alloc = false;
  bool fill_never = false;
  /// External raw storage: (file name, bytes; 0 = unlimited) in order, and the first file's offset.
  std::vector<std::pair<std::string, hsize_t>> external;
  off_t external_offset = 0;
};

inline void need(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("hdf5 matrix: " + what + " failed");
}

/// IEEE layouts, float16 built from float32 (HDF5 1.10 has no predefined float16), and other
/// float formats that libhdf5 converts.
inline hid_t make_type(Elem e, bool big_endian) {
  hid_t t = -1;
  if (e == Elem::kF16) {
    t = H5Tcopy(H5T_IEEE_F32LE);
    need(t >= 0 && H5Tset_fields(t, 15, 10, 5, 0, 10) >= 0 && H5Tset_size(t, 2) >= 0 && H5Tset_ebias(t, 15) >= 0,
         "float16 type");
  } else if (e == Elem::kF24) {
    t = H5Tcopy(H5T_IEEE_F32LE);
    need(t >= 0 && H5Tset_fields(t, 23, 16, 7, 0, 16) >= 0 && H5Tset_size(t, 3) >= 0 && H5Tset_ebias(t, 63) >= 0,
         "24-bit float type");
  } else if (e == Elem::kF64Padded) {
    t = H5Tcopy(H5T_IEEE_F64LE);
    need(t >= 0 && H5Tset_fields(t, 59, 48, 11, 0, 48) >= 0 && H5Tset_precision(t, 60) >= 0 && H5Tset_offset(t, 4) >= 0,
         "padded float64 type");
  } else {
    t = H5Tcopy(e == Elem::kF64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE);
    if (e == Elem::kF32NormNone) need(H5Tset_norm(t, H5T_NORM_NONE) >= 0, "normalisation");
    if (e == Elem::kF32Bias126) need(H5Tset_ebias(t, 126) >= 0, "exponent bias");
  }
  if (big_endian) need(H5Tset_order(t, H5T_ORDER_BE) >= 0, "big-endian type");
  return t;
}

/// Values within float16's range (|x| <= 1000.2), with float16 subnormals, signed zeros and
/// values halfway between two float32 values (where rounding rules differ).
inline std::vector<double> values(std::int64_t rows, std::int64_t cols, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> u(-8.0, 8.0);
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = u(g);
    if (i % 11 == 3) v[i] *= 4e-7;  // float16 subnormals
    if (i % 17 == 5) v[i] = -0.0;
    if (i % 23 == 7) v[i] = 1000.0 + v[i] / 37.0;
    if (i % 29 == 9) v[i] = (i % 2 ? -1.0 : 1.0) * (1.0 + 0x1p-24);  // a tie when rounded to float32
    if (i % 31 == 10) v[i] = 3.0 + 0x1p-22 + 0x1p-23;                // a tie that rounds up (to even)
  }
  return v;
}

/// A new file (truncated); `user_block` bytes before the HDF5 data; `latest`: the 1.10 file
/// format (new chunk indexes; needed for some chunk options).
inline hid_t create_file(const std::string& path, hsize_t user_block = 0, bool latest = false) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (user_block) need(H5Pset_userblock(fcpl, user_block) >= 0, "user block");
  if (latest) need(H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) >= 0, "libver bounds");
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl);
  H5Pclose(fcpl);
  H5Pclose(fapl);
  need(f >= 0, "creating " + path);
  return f;
}

inline hid_t intermediate_groups() {
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  return lcpl;
}

/// Writes dataset `name` into `loc` as `s` says. `dapl`: access properties at creation (an
/// external-file prefix, so that relative external names land in the matrix directory).
inline void write_dataset(hid_t loc, const std::string& name, const DsetSpec& s, hid_t dapl = H5P_DEFAULT) {
  const hsize_t dims[2] = {static_cast<hsize_t>(s.rows), static_cast<hsize_t>(s.cols)};
  const hsize_t maxdims[2] = {H5S_UNLIMITED, static_cast<hsize_t>(s.cols)};
  const hid_t space = H5Screate_simple(2, dims, s.index == Index::kExtensible ? maxdims : nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (s.layout == Layout::kCompact) {
    need(H5Pset_layout(dcpl, H5D_COMPACT) >= 0, "compact layout");
  } else if (s.layout != Layout::kContiguous) {
    hsize_t chunk[2] = {s.chunk_rows, s.chunk_cols};
    if (s.index == Index::kSingleChunk) chunk[0] = dims[0], chunk[1] = dims[1];
    need(H5Pset_chunk(dcpl, 2, chunk) >= 0, "chunk shape");
    if (s.layout == Layout::kFletcherDeflate) need(H5Pset_fletcher32(dcpl) >= 0, "fletcher32");
    if (s.layout == Layout::kShuffle || s.layout == Layout::kShuffleDeflate) need(H5Pset_shuffle(dcpl) >= 0, "shuffle");
    if (s.layout == Layout::kDeflate || s.layout == Layout::kShuffleDeflate || s.layout == Layout::kFletcherDeflate ||
        s.layout == Layout::kPartialUnfiltered)
      need(H5Pset_deflate(dcpl, 6) >= 0, "deflate");
    if (s.layout == Layout::kPartialUnfiltered)
      need(H5Pset_chunk_opts(dcpl, H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS) >= 0, "chunk options");
  }
  for (size_t i = 0; i < s.external.size(); ++i)
    need(H5Pset_external(dcpl, s.external[i].first.c_str(), i == 0 ? s.external_offset : 0,
                         s.external[i].second ? s.external[i].second : H5F_UNLIMITED) >= 0,
         "external file");
  if (s.fill) need(H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &*s.fill) >= 0, "fill value");
  if (s.early_alloc || s.index == Index::kImplicit) need(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) >= 0, "alloc time");
  if (s.fill_never) need(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) >= 0, "fill time");
  const hid_t ftype = make_type(s.elem, s.big_endian);
  const hid_t lcpl = intermediate_groups();
  const hid_t ds = H5Dcreate2(loc, name.c_str(), ftype, space, lcpl, dcpl, dapl);
  need(ds >= 0, "creating dataset " + name);
  const std::int64_t w = s.written_rows < 0 ? s.rows : s.written_rows;
  if (w > 0) {
    const std::vector<double> v = values(w, s.cols, s.seed);
    const hsize_t start[2] = {0, 0}, count[2] = {static_cast<hsize_t>(w), static_cast<hsize_t>(s.cols)};
    const hid_t fsel = H5Scopy(space);
    need(H5Sselect_hyperslab(fsel, H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0, "selecting rows");
    const hid_t mspace = H5Screate_simple(2, count, nullptr);
    need(H5Dwrite(ds, H5T_NATIVE_DOUBLE, mspace, fsel, H5P_DEFAULT, v.data()) >= 0, "writing " + name);
    H5Sclose(mspace);
    H5Sclose(fsel);
  }
  H5Dclose(ds);
  H5Pclose(lcpl);
  H5Tclose(ftype);
  H5Pclose(dcpl);
  H5Sclose(space);
}

/// A byte dataset of `bytes` bytes of 0x3F (float32 0.747, float16 1.81: finite garbage that a
/// reader reading the wrong file would take for values).
inline void write_padding(hid_t loc, const std::string& name, hsize_t bytes) {
  const hid_t space = H5Screate_simple(1, &bytes, nullptr);
  const hid_t ds = H5Dcreate2(loc, name.c_str(), H5T_NATIVE_UCHAR, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  need(ds >= 0, "padding dataset");
  const std::vector<unsigned char> pad(bytes, 0x3F);
  need(H5Dwrite(ds, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, pad.data()) >= 0, "writing padding");
  H5Dclose(ds);
  H5Sclose(space);
}

/// A file holding one dataset "train" (after `padding` bytes of another dataset, so that its
/// offset is large), with a user block.
inline void write_file(const std::string& path, const DsetSpec& s, hsize_t padding = 0, hsize_t user_block = 0) {
  const bool latest = s.layout == Layout::kPartialUnfiltered || s.index == Index::kLatest ||
                      s.index == Index::kSingleChunk || s.index == Index::kImplicit || s.index == Index::kExtensible;
  const hid_t f = create_file(path, user_block, latest);
  if (padding) write_padding(f, "padding", padding);
  write_dataset(f, "train", s);
  H5Fclose(f);
}

/// A file whose "train" is an external link to (target, target_path), after `padding` bytes.
inline void write_link_file(const std::string& path, const std::string& target, const std::string& target_path,
                            hsize_t padding = 0) {
  const hid_t f = create_file(path);
  if (padding) write_padding(f, "padding", padding);
  need(H5Lcreate_external(target.c_str(), target_path.c_str(), f, "train", H5P_DEFAULT, H5P_DEFAULT) >= 0,
       "external link in " + path);
  H5Fclose(f);
}

/// A virtual [rows, cols] "train" in `path`: rows [b_i, b_{i+1}) from each (file, dataset) of
/// `sources` in turn, each source holding exactly its rows.
inline void write_vds(const std::string& path, const std::vector<std::pair<std::string, std::string>>& sources,
                      const std::vector<std::int64_t>& bounds, std::int64_t cols, Elem e, bool big_endian) {
  const hid_t f = create_file(path);
  const hsize_t dims[2] = {static_cast<hsize_t>(bounds.back()), static_cast<hsize_t>(cols)};
  const hid_t vspace = H5Screate_simple(2, dims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  for (size_t i = 0; i < sources.size(); ++i) {
    const hsize_t n = static_cast<hsize_t>(bounds[i + 1] - bounds[i]);
    const hsize_t sdims[2] = {n, static_cast<hsize_t>(cols)};
    const hid_t sspace = H5Screate_simple(2, sdims, nullptr);
    const hsize_t start[2] = {static_cast<hsize_t>(bounds[i]), 0};
    need(H5Sselect_hyperslab(vspace, H5S_SELECT_SET, start, nullptr, sdims, nullptr) >= 0, "virtual selection");
    need(H5Pset_virtual(dcpl, vspace, sources[i].first.c_str(), sources[i].second.c_str(), sspace) >= 0, "mapping");
    H5Sclose(sspace);
  }
  H5Sselect_all(vspace);
  const hid_t ftype = make_type(e, big_endian);
  const hid_t ds = H5Dcreate2(f, "train", ftype, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  need(ds >= 0, "virtual dataset in " + path);
  H5Dclose(ds);
  H5Tclose(ftype);
  H5Pclose(dcpl);
  H5Sclose(vspace);
  H5Fclose(f);
}

inline std::optional<ReadMethod> method_of(const DsetSpec& s) {
  if (s.big_endian || !s.external.empty() || elem_size(s.elem) == 3 || s.elem > Elem::kF64) return ReadMethod::kHdf5;
  switch (s.layout) {
    case Layout::kContiguous: return ReadMethod::kDirectContiguous;
    case Layout::kDeflate:
    case Layout::kShuffleDeflate:
    case Layout::kShuffle: return ReadMethod::kDirectChunks;
    default: return ReadMethod::kHdf5;
  }
}

/// Writes every file of the matrix into `dir` (which must exist) and returns the cases.
inline std::vector<Case> write_matrix(const std::string& dir) {
  std::vector<Case> cases;
  unsigned seed = 100;
  auto add = [&](Case c, const DsetSpec& s) {
    c.rows = s.rows;
    c.cols = s.cols;
    cases.push_back(std::move(c));
  };
  auto at = [&](const std::string& f) { return dir + "/" + f; };

  // Element type x byte order x layout, and the chunk indexes.
  for (Elem e : {Elem::kF16, Elem::kF32, Elem::kF64}) {
    for (bool be : {false, true}) {
      for (Layout l : {Layout::kContiguous, Layout::kChunked, Layout::kDeflate, Layout::kShuffleDeflate, Layout::kShuffle,
                       Layout::kFletcherDeflate, Layout::kPartialUnfiltered, Layout::kCompact}) {
        DsetSpec s;
        s.elem = e, s.big_endian = be, s.layout = l, s.seed = ++seed;
        const std::string name = std::string("type_") + elem_name(e) + (be ? "be_" : "le_") + layout_name(l);
        write_file(at(name + ".h5"), s);
        Case c;
        c.name = name, c.file = name + ".h5", c.method = method_of(s);
        add(c, s);
      }
    }
  }
  // Float formats other than IEEE float16/32/64, which libhdf5 converts.
  for (Elem e : {Elem::kF32NormNone, Elem::kF32Bias126, Elem::kF24, Elem::kF64Padded}) {
    for (Layout l : {Layout::kContiguous, Layout::kShuffleDeflate}) {
      DsetSpec s;
      s.elem = e, s.layout = l, s.seed = ++seed;
      const std::string name = std::string("type_") + elem_name(e) + "_" + layout_name(l);
      write_file(at(name + ".h5"), s);
      Case c;
      c.name = name, c.file = name + ".h5", c.method = method_of(s);
      add(c, s);
    }
  }
  for (Index ix : {Index::kLatest, Index::kSingleChunk, Index::kImplicit, Index::kExtensible}) {
    for (Layout l : {Layout::kChunked, Layout::kShuffleDeflate}) {
      if (ix == Index::kImplicit && l != Layout::kChunked) continue;  // implicit: no filters
      for (Elem e : {Elem::kF16, Elem::kF32}) {
        DsetSpec s;
        s.elem = e, s.layout = l, s.index = ix, s.seed = ++seed;
        const char* ixn = ix == Index::kLatest ? "fixed_array" : ix == Index::kSingleChunk ? "single_chunk"
                                                             : ix == Index::kImplicit     ? "implicit"
                                                                                          : "extensible_array";
        const std::string name = std::string("index_") + ixn + "_" + elem_name(e) + "_" + layout_name(l);
        write_file(at(name + ".h5"), s);
        Case c;
        c.name = name, c.file = name + ".h5", c.method = method_of(s);
        add(c, s);
      }
    }
  }

  // User blocks (HDF5 addresses start after them).
  for (hsize_t ub : {hsize_t{512}, hsize_t{4096}}) {
    for (Layout l : {Layout::kContiguous, Layout::kChunked, Layout::kShuffleDeflate, Layout::kCompact}) {
      for (Elem e : {Elem::kF16, Elem::kF32}) {
        DsetSpec s;
        s.elem = e, s.layout = l, s.seed = ++seed;
        const std::string name = "userblock" + std::to_string(ub) + "_" + elem_name(e) + "_" + layout_name(l);
        write_file(at(name + ".h5"), s, 0, ub);
        Case c;
        c.name = name, c.file = name + ".h5", c.method = method_of(s);
        add(c, s);
      }
    }
  }

  // Soft and hard links inside one file.
  for (Layout l : {Layout::kContiguous, Layout::kShuffleDeflate}) {
    for (bool soft : {true, false}) {
      DsetSpec s;
      s.elem = Elem::kF16, s.layout = l, s.seed = ++seed;
      const std::string name = std::string(soft ? "softlink_" : "hardlink_") + layout_name(l);
      const hid_t f = create_file(at(name + ".h5"));
      write_padding(f, "padding", 3000);
      write_dataset(f, "data/orig", s);
      if (soft) need(H5Lcreate_soft("/data/orig", f, "train", H5P_DEFAULT, H5P_DEFAULT) >= 0, "soft link");
      else need(H5Lcreate_hard(f, "data/orig", f, "train", H5P_DEFAULT, H5P_DEFAULT) >= 0, "hard link");
      H5Fclose(f);
      Case c;
      c.name = name, c.file = name + ".h5", c.method = method_of(s);
      add(c, s);
    }
  }

  // External links. Targets: small files with "train" near the start, and big ones with 8 KiB
  // before it (so that a reader taking the target's offsets into a small link file runs past
  // its end, and one reading a big link file reads its padding).
  struct Target {
    std::string file;
    DsetSpec spec;
    hsize_t padding, user_block;
  };
  std::vector<Target> targets;
  auto target = [&](const std::string& file, Elem e, Layout l, hsize_t padding, hsize_t ub) {
    DsetSpec s;
    s.elem = e, s.layout = l, s.seed = ++seed;
    targets.push_back({file, s, padding, ub});
    write_file(at(file), s, padding, ub);
    return targets.back();
  };
  ::mkdir(at("sub").c_str(), 0755);
  const Target t_small = target("target_small_contiguous.h5", Elem::kF32, Layout::kContiguous, 0, 0);
  const Target t_big = target("target_big_contiguous.h5", Elem::kF32, Layout::kContiguous, 8192, 0);
  const Target t_big_chunked = target("target_big_chunked.h5", Elem::kF32, Layout::kChunked, 8192, 0);
  const Target t_f16 = target("target_f16_shuffle_deflate.h5", Elem::kF16, Layout::kShuffleDeflate, 0, 0);
  const Target t_ub = target("target_userblock_chunked.h5", Elem::kF32, Layout::kChunked, 0, 4096);
  const Target t_ub_deflate = target("target_userblock_deflate.h5", Elem::kF64, Layout::kDeflate, 0, 2048);
  const Target t_sub = target("sub/target_contiguous.h5", Elem::kF16, Layout::kContiguous, 8192, 0);
  struct Link {
    const char* name;
    const Target* t;
    bool absolute;
    hsize_t padding;  // 0: a link file smaller than the target; 16384: larger
  };
  for (const Link& k : {Link{"small_to_big_contiguous", &t_big, false, 0},
                        Link{"small_to_big_contiguous", &t_big, true, 0},
                        Link{"big_to_small_contiguous", &t_small, false, 16384},
                        Link{"big_to_small_contiguous", &t_small, true, 16384},
                        Link{"big_to_big_contiguous", &t_big, false, 16384},
                        Link{"small_to_big_chunked", &t_big_chunked, false, 0},
                        Link{"big_to_big_chunked", &t_big_chunked, true, 16384},
                        Link{"big_to_f16_shuffle_deflate", &t_f16, false, 16384},
                        Link{"small_to_userblock_chunked", &t_ub, false, 0},
                        Link{"big_to_userblock_chunked", &t_ub, true, 16384},
                        Link{"big_to_userblock_deflate", &t_ub_deflate, false, 16384},
                        Link{"big_to_subdir_contiguous", &t_sub, false, 16384}}) {
    const std::string name = std::string("extlink_") + (k.absolute ? "abs_" : "rel_") + k.name;
    write_link_file(at(name + ".h5"), k.absolute ? at(k.t->file) : k.t->file, "/train", k.padding);
    Case c;
    c.name = name, c.file = name + ".h5", c.method = method_of(k.t->spec), c.seed = !k.absolute;
    add(c, k.t->spec);
  }
  {  // two hops: link file -> link file -> target
    write_link_file(at("extlink_chain.h5"), "extlink_rel_big_to_small_contiguous.h5", "/train", 4096);
    Case c;
    c.name = "extlink_chain", c.file = "extlink_chain.h5", c.method = method_of(t_small.spec);
    add(c, t_small.spec);
  }
  {  // a file whose "train" links to a dataset of its own (libhdf5 shares the open file)
    DsetSpec s;
    s.seed = ++seed;
    const hid_t f = create_file(at("extlink_self.h5"));
    write_padding(f, "padding", 5000);
    write_dataset(f, "data/orig", s);
    need(H5Lcreate_external("extlink_self.h5", "/data/orig", f, "train", H5P_DEFAULT, H5P_DEFAULT) >= 0, "self link");
    H5Fclose(f);
    Case c;
    c.name = "extlink_self", c.file = "extlink_self.h5", c.method = method_of(s);
    add(c, s);
  }
  {  // a dangling external link: nothing to read, both readers refuse
    write_link_file(at("extlink_missing.h5"), "no_such_target.h5", "/train", 0);
    Case c;
    c.name = "extlink_missing", c.file = "extlink_missing.h5", c.open_fails = true, c.rows = 37, c.cols = 5;
    cases.push_back(c);
  }

  // External raw storage (H5Pset_external): the values live in other files.
  {
    DsetSpec s;
    s.seed = ++seed;
    s.external = {{at("external_one.bin"), 0}};
    const hid_t f = create_file(at("external_abs_one.h5"));
    write_dataset(f, "train", s);
    H5Fclose(f);
    Case c;
    c.name = "external_abs_one", c.file = "external_abs_one.h5", c.method = method_of(s), c.seed = false;
    add(c, s);
  }
  for (Elem e : {Elem::kF32, Elem::kF16, Elem::kF64}) {
    for (bool be : {false, true}) {
      DsetSpec s;
      s.elem = e, s.big_endian = be, s.seed = ++seed;
      const std::string name = std::string("external_rel_three_") + elem_name(e) + (be ? "be" : "le");
      const hsize_t bytes = static_cast<hsize_t>(s.rows * s.cols) * elem_size(e);
      s.external = {{name + "_a.bin", bytes / 3}, {name + "_b.bin", bytes / 4}, {name + "_c.bin", 0}};
      s.external_offset = 16;
      const hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
      need(H5Pset_efile_prefix(dapl, dir.c_str()) >= 0, "efile prefix");
      const hid_t f = create_file(at(name + ".h5"));
      write_dataset(f, "train", s, dapl);
      H5Fclose(f);
      H5Pclose(dapl);
      Case c;
      c.name = name, c.file = name + ".h5", c.method = method_of(s), c.needs_prefix_env = true;
      add(c, s);
    }
  }

  // Virtual datasets over several files, over datasets of their own file, and found through
  // HDF5_VDS_PREFIX.
  for (Elem e : {Elem::kF32, Elem::kF16}) {
    DsetSpec s;
    s.elem = e;
    const std::vector<std::int64_t> b = {0, 13, 25, 37};
    std::vector<std::pair<std::string, std::string>> src;
    for (int i = 0; i < 3; ++i) {
      DsetSpec p = s;
      p.rows = b[i + 1] - b[i], p.seed = ++seed, p.layout = i == 1 ? Layout::kShuffleDeflate : Layout::kContiguous;
      const std::string f = std::string("vsource_") + elem_name(e) + "_" + std::to_string(i) + ".h5";
      write_file(at(f), p);
      src.emplace_back(f, "/train");
    }
    const std::string name = std::string("virtual_three_files_") + elem_name(e);
    write_vds(at(name + ".h5"), src, b, s.cols, e, false);
    Case c;
    c.name = name, c.file = name + ".h5", c.method = ReadMethod::kHdf5, c.seed = false;
    add(c, s);
  }
  {
    DsetSpec s;
    const std::vector<std::int64_t> b = {0, 20, 37};
    const hid_t f = create_file(at("virtual_same_file.h5"));
    for (int i = 0; i < 2; ++i) {
      DsetSpec p = s;
      p.rows = b[i + 1] - b[i], p.seed = ++seed;
      write_dataset(f, "src/part" + std::to_string(i), p);
    }
    const hsize_t dims[2] = {37, 5};
    const hid_t vspace = H5Screate_simple(2, dims, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    for (int i = 0; i < 2; ++i) {
      const hsize_t sd[2] = {static_cast<hsize_t>(b[i + 1] - b[i]), 5}, st[2] = {static_cast<hsize_t>(b[i]), 0};
      const hid_t sspace = H5Screate_simple(2, sd, nullptr);
      H5Sselect_hyperslab(vspace, H5S_SELECT_SET, st, nullptr, sd, nullptr);
      need(H5Pset_virtual(dcpl, vspace, ".", ("/src/part" + std::to_string(i)).c_str(), sspace) >= 0, "mapping");
      H5Sclose(sspace);
    }
    H5Sselect_all(vspace);
    const hid_t ds = H5Dcreate2(f, "train", H5T_IEEE_F32LE, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    need(ds >= 0, "virtual dataset of its own file");
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(vspace);
    H5Fclose(f);
    Case c;
    c.name = "virtual_same_file", c.file = "virtual_same_file.h5", c.method = ReadMethod::kHdf5, c.seed = false;
    add(c, s);
  }
  {
    ::mkdir(at("vprefix").c_str(), 0755);
    DsetSpec s;
    const std::vector<std::int64_t> b = {0, 30, 37};
    std::vector<std::pair<std::string, std::string>> src;
    for (int i = 0; i < 2; ++i) {
      DsetSpec p = s;
      p.rows = b[i + 1] - b[i], p.seed = ++seed;
      const std::string f = "vprefix_source_" + std::to_string(i) + ".h5";
      write_file(at("vprefix/" + f), p);
      src.emplace_back(f, "/train");
    }
    write_vds(at("virtual_prefix.h5"), src, b, s.cols, Elem::kF32, false);
    Case c;
    c.name = "virtual_prefix", c.file = "virtual_prefix.h5", c.method = ReadMethod::kHdf5;
    c.needs_prefix_env = true, c.seed = false;
    add(c, s);
  }

  // Fill values: datasets written in part. Unallocated chunks and never-written contiguous
  // storage read as the fill value in libhdf5, and the reader refuses them by name; storage that
  // was allocated holds its bytes (fill values included) and reads the same either way.
  struct Fill {
    const char* name;
    Layout layout;
    std::int64_t written;
    bool early, never;
    std::optional<double> fill;
    std::int64_t unwritten_lo, unwritten_hi;
  };
  for (const Fill& k : {Fill{"chunked_deflate_half_written", Layout::kDeflate, 16, false, false, 7.5, 16, 37},
                        Fill{"chunked_half_written", Layout::kChunked, 16, false, false, std::nullopt, 16, 37},
                        Fill{"chunked_early_half_written", Layout::kChunked, 16, true, false, 7.5, 0, 0},
                        Fill{"contiguous_early_fill_half_written", Layout::kContiguous, 10, true, false, 7.5, 0, 0},
                        Fill{"contiguous_late_half_written", Layout::kContiguous, 10, false, false, std::nullopt, 0, 0},
                        Fill{"contiguous_fill_never_half_written", Layout::kContiguous, 10, true, true, 2.0, 0, 0},
                        Fill{"contiguous_never_written", Layout::kContiguous, 0, false, false, 7.5, 0, 37},
                        Fill{"compact_fill_half_written", Layout::kCompact, 10, false, false, 7.5, 0, 0}}) {
    DsetSpec s;
    s.layout = k.layout, s.written_rows = k.written, s.early_alloc = k.early, s.fill_never = k.never;
    s.fill = k.fill, s.seed = ++seed;
    const std::string name = std::string("fill_") + k.name;
    write_file(at(name + ".h5"), s);
    Case c;
    c.name = name, c.file = name + ".h5", c.method = method_of(s);
    if (k.written == 0 && k.layout == Layout::kContiguous) c.method = ReadMethod::kHdf5;  // no offset to read at
    c.unwritten_lo = k.unwritten_lo, c.unwritten_hi = k.unwritten_hi;
    add(c, s);
  }
  return cases;
}

}  // namespace shardtopk::test::h5m
