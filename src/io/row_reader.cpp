// Reading one rank's rows of a 2-D float dataset at storage speed (docs/PERFORMANCE.md,
// "Ingestion") without letting HDF5 substitute data for what is missing, and without ever
// reading other bytes than libhdf5 would (DESIGN.md invariant 8).
//
// Paths, chosen per dataset (choose_path):
//  - contiguous, little-endian IEEE float16/32/64: pread() of the raw bytes straight from the
//    dataset's file (H5Dget_offset), split over threads; values converted and checked on the
//    host. No HDF5 call touches the data, so no library lock and no soft conversion (16 MB/s for
//    float16).
//  - chunked with only deflate and/or shuffle: each chunk's stored bytes through libhdf5
//    (H5Dread_chunk, HDF5 >= 1.10.5 here) on the calling thread, then per chunk on the threads:
//    inflate (zlib), unshuffle, convert, check.
//  - anything else (compact, virtual, external storage, other filters, big-endian, other float
//    formats): H5Dread of the raw values on the calling thread (HDF5 is not thread-safe here),
//    then the same conversion and checks on the threads.
// The contiguous path reads through a duplicate of libhdf5's own descriptor of the file the
// dataset lives in, so an external link's target is read, never the link file (open_data_file),
// and only bytes inside that file's allocated space, after its user block; the chunk path lets
// libhdf5 find and read each chunk.
// Every check names the global row and column of the first bad value in row-major order, so the
// message does not depend on the thread count.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <thread>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define STK_X86 1
#endif

#include "core/half.hpp"
#include "io/h5_detail.hpp"
#include "shardtopk/corpus_io.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk {
namespace {

using h5::Handle;

enum class Elem { kF16, kF32, kF64, kOther };

size_t elem_bytes(Elem e) { return e == Elem::kF16 ? 2 : e == Elem::kF64 ? 8 : 4; }
size_t format_bytes(RowFormat f) { return f == RowFormat::kFloat16Bits ? 2 : 4; }

// ----------------------------------------------------------------------------- checks

// The first bad value of a run (or of a block: the smallest (row, col)).
struct Fault {
  enum Kind { kNone, kNonFinite, kOutOfRange, kIo } kind = kNone;
  std::int64_t row = std::numeric_limits<std::int64_t>::max();
  std::int64_t col = 0;
  double value = 0;
  const char* range_type = "";  // "float32", "float16", "bfloat16"
  double range_max = 0;
  std::string io;  // kIo: the message

  bool before(const Fault& o) const {
    if (kind == kNone) return false;
    if (o.kind == kNone) return true;
    if ((kind == kIo) != (o.kind == kIo)) return kind == kIo;  // I/O errors first
    return row < o.row || (row == o.row && col < o.col);
  }
};

// Largest float32 magnitude (as bits of |x|) that the output format/storage keeps finite:
// half::to_f16 overflows from 65520 up, half::to_bf16 from 0x7F7F8000 up (round to nearest even).
constexpr std::uint32_t kF32Inf = 0x7F800000u;
constexpr std::uint32_t kF16Limit = 0x477FF000u;   // 65520.0f
constexpr std::uint32_t kBF16Limit = 0x7F7F8000u;  // 3.3961e38

struct Limit {
  std::uint32_t bits = kF32Inf;  // |x| bits >= this is out of range (when finite)
  const char* type = "float32";
  double max = FLT_MAX;
};

Limit limit_for(RowFormat f, Dtype storage) {
  if (f == RowFormat::kFloat16Bits || storage == Dtype::kFloat16) return {kF16Limit, "float16", 65504.0};
  if (storage == Dtype::kBFloat16) return {kBF16Limit, "bfloat16", static_cast<double>(half::from_bf16(0x7F7F))};
  return {};
}

// A run's result: index of its first bad value, or -1.
struct RunBad {
  std::ptrdiff_t index = -1;
  Fault::Kind kind = Fault::kNone;
  double value = 0;
  const char* range_type = "";
  double range_max = 0;
};

// Returns true when some |bits| >= lim (vectorises: a compare and an OR per value).
inline bool any_at_least(const std::uint32_t* u, size_t n, std::uint32_t lim) {
  std::uint32_t flag = 0;
  for (size_t i = 0; i < n; ++i)
    flag |= static_cast<std::uint32_t>(static_cast<std::int32_t>(u[i] & 0x7FFFFFFFu) >= static_cast<std::int32_t>(lim));
  return flag != 0;
}
inline bool any_f16_nonfinite(const std::uint16_t* h, size_t n) {
  std::uint16_t flag = 0;
  for (size_t i = 0; i < n; ++i)
    flag |= static_cast<std::uint16_t>(static_cast<std::int16_t>(h[i] & 0x7FFF) >= static_cast<std::int16_t>(0x7C00));
  return flag != 0;
}

RunBad find_f32(const float* x, size_t n, const Limit& lim) {
  RunBad b;
  for (size_t i = 0; i < n; ++i) {
    const std::uint32_t a = half::bits(x[i]) & 0x7FFFFFFFu;
    if (a >= kF32Inf) return {static_cast<std::ptrdiff_t>(i), Fault::kNonFinite, x[i]};
    if (a >= lim.bits) return {static_cast<std::ptrdiff_t>(i), Fault::kOutOfRange, x[i], lim.type, lim.max};
  }
  return b;
}

// float16 bits -> float32.
#ifdef STK_X86
// Converts and checks in one pass; returns true when some value is Inf/NaN (exponent all ones).
__attribute__((target("avx,f16c"))) bool f16_to_f32_f16c(const std::uint16_t* h, float* f, size_t n) {
  size_t i = 0;
  const __m128i exp = _mm_set1_epi16(0x7C00);
  __m128i bad = _mm_setzero_si128();
  for (; i + 8 <= n; i += 8) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i));
    bad = _mm_or_si128(bad, _mm_cmpeq_epi16(_mm_and_si128(x, exp), exp));
    _mm256_storeu_ps(f + i, _mm256_cvtph_ps(x));
  }
  bool any = _mm_movemask_epi8(bad) != 0;
  for (; i < n; ++i) {
    any |= (h[i] & 0x7C00) == 0x7C00;
    f[i] = half::from_f16(h[i]);
  }
  return any;
}
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* f, std::uint16_t* h, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(f + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) h[i] = half::to_f16(f[i]);
}
// F16C from CPUID (leaf 1, ECX bit 29): clang 14 has no __builtin_cpu_supports("f16c"); AVX
// (which also checks that the OS saves the YMM registers) from the builtin.
const bool kHaveF16c = [] {
  __builtin_cpu_init();  // this may run before libgcc's own constructor
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0 && __builtin_cpu_supports("avx");
}();
#else
const bool kHaveF16c = false;
#endif

// Returns true when some value is Inf/NaN (then `f` is unspecified). `f16c`: the caller's
// ReadOptions::f16c and the CPU both allow F16C.
bool f16_to_f32(const std::uint16_t* h, float* f, size_t n, bool f16c) {
#ifdef STK_X86
  if (f16c) return f16_to_f32_f16c(h, f, n);
#else
  (void)f16c;
#endif
  if (any_f16_nonfinite(h, n)) return true;
  // Exact table conversion (the same values as half::from_f16).
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (std::uint32_t i = 0; i < 65536; ++i) t[i] = half::from_f16(static_cast<std::uint16_t>(i));
    return t;
  }();
  for (size_t i = 0; i < n; ++i) f[i] = table[h[i]];
  return false;
}

void f32_to_f16(const float* f, std::uint16_t* h, size_t n, bool f16c) {
#ifdef STK_X86
  if (f16c) return f32_to_f16_f16c(f, h, n);
#else
  (void)f16c;
#endif
  for (size_t i = 0; i < n; ++i) h[i] = half::to_f16(f[i]);
}

// Converts n values from `src` (elem) into `dst` (format), checking each. `src` may equal `dst`
// when the element and format sizes match. `scratch` holds n floats (float64 to float16).
RunBad convert_run(Elem e, const void* src, RowFormat fmt, void* dst, size_t n, const Limit& lim, float* scratch,
                   bool f16c) {
  if (e == Elem::kF32) {
    const float* x = static_cast<const float*>(src);
    if (any_at_least(reinterpret_cast<const std::uint32_t*>(x), n, lim.bits)) return find_f32(x, n, lim);
    if (fmt == RowFormat::kFloat32) {
      if (dst != src) std::memcpy(dst, src, n * 4);
    } else {
      f32_to_f16(x, static_cast<std::uint16_t*>(dst), n, f16c);
    }
    return {};
  }
  if (e == Elem::kF16) {
    const std::uint16_t* h = static_cast<const std::uint16_t*>(src);
    // every finite float16 fits float32 and bfloat16 (65504 < 3.39e38)
    const bool bad = fmt == RowFormat::kFloat32 ? f16_to_f32(h, static_cast<float*>(dst), n, f16c) : any_f16_nonfinite(h, n);
    if (bad) {
      for (size_t i = 0; i < n; ++i)
        if ((h[i] & 0x7C00) == 0x7C00) return {static_cast<std::ptrdiff_t>(i), Fault::kNonFinite, half::from_f16(h[i])};
    }
    if (fmt == RowFormat::kFloat16Bits && dst != src) std::memcpy(dst, src, n * 2);
    return {};
  }
  // float64: every value must be finite and within float32, then within the output's limit.
  const double* x = static_cast<const double*>(src);
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    if (!std::isfinite(v)) return {static_cast<std::ptrdiff_t>(i), Fault::kNonFinite, v};
    const float f = static_cast<float>(v);
    if (std::isinf(f)) return {static_cast<std::ptrdiff_t>(i), Fault::kOutOfRange, v, "float32", FLT_MAX};
    if ((half::bits(f) & 0x7FFFFFFFu) >= lim.bits)
      return {static_cast<std::ptrdiff_t>(i), Fault::kOutOfRange, v, lim.type, lim.max};
    if (fmt == RowFormat::kFloat32) static_cast<float*>(dst)[i] = f;
    else scratch[i] = f;
  }
  if (fmt == RowFormat::kFloat16Bits) f32_to_f16(scratch, static_cast<std::uint16_t*>(dst), n, f16c);
  return {};
}

// ----------------------------------------------------------------------------- helpers

std::string dirname_of(const std::string& p) {
  const auto s = p.rfind('/');
  return s == std::string::npos ? "." : (s == 0 ? "/" : p.substr(0, s));
}

bool is_regular_file(const std::string& p, long long* size = nullptr) {
  struct stat st;
  if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (size) *size = static_cast<long long>(st.st_size);
  return true;
}

// Candidate locations of a file HDF5 names relative to something: the entries of `prefixes`
// (':' separated, as libhdf5 reports them for the dataset: HDF5_VDS_PREFIX or
// HDF5_EXTFILE_PREFIX with "${ORIGIN}" already expanded), then `extra`, then as given.
std::vector<std::string> candidates(const std::string& name, const std::string& prefixes,
                                    const std::vector<std::string>& extra_dirs) {
  std::vector<std::string> out;
  if (!name.empty() && name[0] == '/') {
    out.push_back(name);
    return out;
  }
  std::stringstream ss(prefixes);
  std::string pre;
  while (std::getline(ss, pre, ':'))
    if (!pre.empty()) out.push_back(pre + "/" + name);
  for (const auto& d : extra_dirs) out.push_back(d + "/" + name);
  out.push_back(name);
  return out;
}

// The prefix libhdf5 applies to the dataset's external files (efile) or virtual sources (vds),
// from the dataset's access properties (where libhdf5 puts the environment's value), or "".
std::string dataset_prefix(hid_t ds, bool vds) {
  Handle dapl(H5Dget_access_plist(ds), H5Pclose);
  std::string out;
  if (dapl.ok()) {
    const ssize_t n = vds ? H5Pget_virtual_prefix(dapl.get(), nullptr, 0) : H5Pget_efile_prefix(dapl.get(), nullptr, 0);
    if (n > 0) {
      std::vector<char> b(static_cast<size_t>(n) + 1, 0);
      if ((vds ? H5Pget_virtual_prefix(dapl.get(), b.data(), b.size())
               : H5Pget_efile_prefix(dapl.get(), b.data(), b.size())) >= 0)
        out = b.data();
    }
  }
  H5Eclear2(H5E_DEFAULT);
  return out;
}

std::string rows_text(std::int64_t lo, std::int64_t hi) {
  return "rows [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
}

std::string fill_value_text(hid_t dcpl) {
  double fill = 0;
  H5D_fill_value_t st;
  if (H5Pfill_value_defined(dcpl, &st) >= 0 && st != H5D_FILL_VALUE_UNDEFINED &&
      H5Pget_fill_value(dcpl, H5T_NATIVE_DOUBLE, &fill) >= 0) {
    std::ostringstream os;
    os << fill;
    return "the fill value (" + os.str() + ")";
  }
  H5Eclear2(H5E_DEFAULT);
  return "the fill value";
}

// Does `dataset` exist in the HDF5 file `file`, and how many rows does it have (-1: unknown)?
// Returns "" when it does, else why not.
std::string check_source_dataset(const std::string& file, const std::string& dataset, std::vector<hsize_t>* dims) {
  h5::silence();
  const htri_t is = H5Fis_hdf5(file.c_str());
  if (is <= 0) {
    H5Eclear2(H5E_DEFAULT);
    return "is not a readable HDF5 file";
  }
  Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.ok()) {
    const std::string r = h5::hdf5_reason();
    return "cannot be opened as HDF5" + (r.empty() ? "" : ": " + r);
  }
  // every path component must exist (H5Dopen2 of a missing one is an error, not a crash)
  std::string prefix;
  std::stringstream ss(h5::strip_slash(dataset));
  std::string part;
  while (std::getline(ss, part, '/')) {
    prefix += (prefix.empty() ? "" : "/") + part;
    if (H5Lexists(f.get(), prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return "has no dataset '" + h5::strip_slash(dataset) + "'";
    }
  }
  Handle ds(H5Dopen2(f.get(), h5::strip_slash(dataset).c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.ok()) {
    H5Eclear2(H5E_DEFAULT);
    return "has no dataset '" + h5::strip_slash(dataset) + "'";
  }
  Handle sp(H5Dget_space(ds.get()), H5Sclose);
  const int nd = H5Sget_simple_extent_ndims(sp.get());
  dims->assign(static_cast<size_t>(std::max(nd, 0)), 0);
  if (nd > 0) H5Sget_simple_extent_dims(sp.get(), dims->data(), nullptr);
  return "";
}

// Bounding rows [lo, hi) of a selection, clipped to [0, n).
bool selection_rows(hid_t space, std::int64_t n, std::int64_t* lo, std::int64_t* hi) {
  const int nd = H5Sget_simple_extent_ndims(space);
  if (nd < 1) return false;
  std::vector<hsize_t> start(nd), end(nd);
  if (H5Sget_select_bounds(space, start.data(), end.data()) < 0) {
    H5Eclear2(H5E_DEFAULT);
    return false;
  }
  *lo = static_cast<std::int64_t>(std::min<hsize_t>(start[0], static_cast<hsize_t>(n)));
  *hi = static_cast<std::int64_t>(std::min<hsize_t>(end[0] + 1, static_cast<hsize_t>(n)));
  return true;
}

// ------------------------------------------------------------------ data HDF5 would fill in

// A contiguous dataset whose storage runs past the end of its file's allocated space (a damaged
// or cut file): libhdf5 reads that part as zeros when it reads the whole dataset (and fails on
// some hyperslabs there). Refused for the rows of `range` it covers.
void refuse_storage_past_end(hid_t ds, const std::string& where, std::int64_t d, size_t esize, RowRange range) {
  const haddr_t off = H5Dget_offset(ds);
  Handle f(H5Iget_file_id(ds), H5Fclose);
  haddr_t eoa = HADDR_UNDEF;
  hsize_t ub = 0;
  Handle fcpl(f.ok() ? H5Fget_create_plist(f.get()) : -1, H5Pclose);
  if (off == HADDR_UNDEF || !fcpl.ok() || H5Fget_eoa(f.get(), &eoa) < 0 || eoa == HADDR_UNDEF ||
      H5Pget_userblock(fcpl.get(), &ub) < 0 || off < ub) {
    H5Eclear2(H5E_DEFAULT);
    return;  // nothing to compare: libhdf5 decides
  }
  const std::uint64_t row_bytes = static_cast<std::uint64_t>(d) * esize;
  const std::uint64_t start = off - ub;  // HDF5 address of the values
  const std::int64_t whole_rows = start >= eoa ? 0 : static_cast<std::int64_t>((eoa - start) / row_bytes);
  if (range.hi <= whole_rows) return;
  throw Error(detail::concat(where, " is damaged or cut short: its values start at byte ", static_cast<std::uint64_t>(off),
                             " and need ", row_bytes, " bytes per row, but the file's allocated space ends at byte ",
                             static_cast<std::uint64_t>(eoa + ub), ": HDF5 would return zeros for ",
                             rows_text(std::max(range.lo, whole_rows), range.hi)));
}

// Refuses, before any row is read, every way HDF5 substitutes data for what is missing in rows
// [lo, hi): virtual sources that are absent or too short, rows no mapping covers, external files
// absent or short, contiguous storage or chunks never written.
void refuse_substituted_data(hid_t file, hid_t ds, hid_t dcpl, const std::string& path, const std::string& name,
                             std::int64_t n, std::int64_t d, size_t esize, RowRange range) {
  (void)file;
  if (range.size() == 0) return;
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  const std::string where = "'" + path + "': dataset '" + name + "'";

  if (layout == H5D_VIRTUAL) {
    size_t count = 0;
    STK_H5_CHECK(H5Pget_virtual_count(dcpl, &count), where, ": virtual mappings");
    std::int64_t mapped_values = 0;
    std::vector<std::pair<std::int64_t, std::int64_t>> covered;
    for (size_t i = 0; i < count; ++i) {
      Handle vspace(H5Pget_virtual_vspace(dcpl, i), H5Sclose);
      Handle sspace(H5Pget_virtual_srcspace(dcpl, i), H5Sclose);
      STK_H5_CHECK(vspace.get(), where, ": virtual mapping ", i);
      STK_H5_CHECK(sspace.get(), where, ": virtual mapping ", i);
      std::int64_t vlo = 0, vhi = 0;
      if (!selection_rows(vspace.get(), n, &vlo, &vhi) || vhi <= range.lo || vlo >= range.hi) continue;
      // values of this mapping inside our rows
      Handle inter(H5Scopy(vspace.get()), H5Sclose);
      const hsize_t start[2] = {static_cast<hsize_t>(range.lo), 0};
      const hsize_t cnt[2] = {static_cast<hsize_t>(range.size()), static_cast<hsize_t>(d)};
      if (H5Sselect_hyperslab(inter.get(), H5S_SELECT_AND, start, nullptr, cnt, nullptr) >= 0)
        mapped_values += static_cast<std::int64_t>(H5Sget_select_npoints(inter.get()));
      H5Eclear2(H5E_DEFAULT);
      covered.emplace_back(std::max(vlo, range.lo), std::min(vhi, range.hi));

      const ssize_t fl = H5Pget_virtual_filename(dcpl, i, nullptr, 0);
      const ssize_t dl = H5Pget_virtual_dsetname(dcpl, i, nullptr, 0);
      STK_H5_CHECK(fl, where, ": source file name of virtual mapping ", i);
      STK_H5_CHECK(dl, where, ": source dataset name of virtual mapping ", i);
      std::vector<char> fb(static_cast<size_t>(fl) + 1, 0), db(static_cast<size_t>(dl) + 1, 0);
      H5Pget_virtual_filename(dcpl, i, fb.data(), fb.size());
      H5Pget_virtual_dsetname(dcpl, i, db.data(), db.size());
      const std::string src_file = fb.data(), src_ds = db.data();
      const std::string what = where + " is a virtual dataset; its " + rows_text(vlo, vhi) + " come from '" + src_file +
                               "' (dataset '" + src_ds + "')";
      SHARDTOPK_EXPECTS(src_file.find('%') == std::string::npos && src_ds.find('%') == std::string::npos, what,
                        ", a printf-style source name that shardtopk cannot check; refusing rather than risk HDF5 "
                        "filling missing sources with the fill value");
      std::string found, why = "does not exist";
      std::vector<hsize_t> sdims;
      std::vector<std::string> tried;
      if (src_file == ".") {
        found = path;
        why = check_source_dataset(path, src_ds, &sdims);
        tried.push_back(path);
      } else {
        for (const auto& c : candidates(src_file, dataset_prefix(ds, true), {dirname_of(path)})) {
          tried.push_back(c);
          if (is_regular_file(c)) {
            found = c;
            why = check_source_dataset(c, src_ds, &sdims);
            break;
          }
        }
      }
      if (found.empty() || !why.empty()) {
        std::string t;
        for (size_t k = 0; k < tried.size(); ++k) t += (k ? ", " : "") + tried[k];
        throw Error(what + ", which " + (found.empty() ? "does not exist (looked for " + t + ")" : "'" + found + "' " + why) +
                    ": HDF5 would return " + fill_value_text(dcpl) + " for those rows");
      }
      // the source must hold every value the mapping reads
      std::ostringstream sh;
      for (size_t k = 0; k < sdims.size(); ++k) sh << (k ? "," : "") << sdims[k];
      if (H5Sget_select_type(sspace.get()) == H5S_SEL_ALL) {
        // "all of the source" (the extent is only known once it is open): it must hold as many
        // values as the virtual selection
        hsize_t have = sdims.empty() ? 0 : 1;
        for (auto v : sdims) have *= v;
        const hssize_t need = H5Sget_select_npoints(vspace.get());
        if (need >= 0 && have < static_cast<hsize_t>(need))
          throw Error(detail::concat(what, ", but '", found, "' '", src_ds, "' is [", sh.str(), "] (", have,
                                     " values) and the mapping reads ", need, " values: HDF5 would return ",
                                     fill_value_text(dcpl), " for the values beyond it"));
        continue;
      }
      const int snd = H5Sget_simple_extent_ndims(sspace.get());
      std::vector<hsize_t> s0(std::max(snd, 1)), s1(std::max(snd, 1));
      if (snd > 0 && H5Sget_select_bounds(sspace.get(), s0.data(), s1.data()) >= 0) {
        bool fits = static_cast<int>(sdims.size()) == snd;
        for (int k = 0; fits && k < snd; ++k) fits = s1[k] < sdims[k] || s1[k] == H5S_UNLIMITED;
        if (!fits) {
          std::ostringstream need;
          for (int k = 0; k < snd; ++k) need << (k ? "," : "") << s1[k] + 1;
          throw Error(what + ", but '" + found + "' '" + src_ds + "' is [" + sh.str() + "] and the mapping reads up to [" +
                      need.str() + "]: HDF5 would return " + fill_value_text(dcpl) + " for the values beyond it");
        }
      }
      H5Eclear2(H5E_DEFAULT);
    }
    if (mapped_values < range.size() * d) {
      // the first row of our range that no mapping's rows cover, or else "some columns"
      std::sort(covered.begin(), covered.end());
      std::int64_t gap_lo = range.lo;
      for (const auto& c : covered) {
        if (c.first > gap_lo) break;
        gap_lo = std::max(gap_lo, c.second);
      }
      if (gap_lo < range.hi) {
        std::int64_t gap_hi = range.hi;
        for (const auto& c : covered)
          if (c.first > gap_lo) gap_hi = std::min(gap_hi, c.first);
        throw Error(where + " is a virtual dataset and its " + rows_text(gap_lo, gap_hi) +
                    " are not mapped to any source: HDF5 would return " + fill_value_text(dcpl) + " for them");
      }
      throw Error(where + " is a virtual dataset and " + std::to_string(range.size() * d - mapped_values) + " values of " +
                  rows_text(range.lo, range.hi) + " are not mapped to any source: HDF5 would return " +
                  fill_value_text(dcpl) + " for them");
    }
    return;
  }

  const int next = H5Pget_external_count(dcpl);
  if (next > 0) {
    const std::int64_t row_bytes = d * static_cast<std::int64_t>(esize);
    const std::int64_t need_end = range.hi * row_bytes;  // dataset bytes up to the end of our rows
    std::int64_t cum = 0;
    for (int i = 0; i < next && cum < need_end; ++i) {
      char fname[4096] = {0};
      off_t off = 0;
      hsize_t size = 0;
      STK_H5_CHECK(H5Pget_external(dcpl, static_cast<unsigned>(i), sizeof fname, fname, &off, &size), where,
                   ": external file ", i);
      const std::int64_t seg_lo = cum;
      const std::int64_t seg_hi = size == H5F_UNLIMITED ? std::numeric_limits<std::int64_t>::max() : cum + static_cast<std::int64_t>(size);
      cum = seg_hi;
      if (seg_hi <= range.lo * row_bytes) continue;
      const std::int64_t use_hi = std::min(seg_hi, need_end);  // bytes of this segment we read
      const std::int64_t r_lo = seg_lo / row_bytes, r_hi = std::min<std::int64_t>(n, (use_hi + row_bytes - 1) / row_bytes);
      const std::string what = where + " keeps its " + rows_text(r_lo, r_hi) + " in external file '" + fname + "'";
      std::string found;
      long long fsize = 0;
      std::vector<std::string> tried = candidates(fname, dataset_prefix(ds, false), {});
      for (const auto& c : tried) {
        if (is_regular_file(c, &fsize)) {
          found = c;
          break;
        }
      }
      if (found.empty()) {
        std::string t;
        for (size_t k = 0; k < tried.size(); ++k) t += (k ? ", " : "") + tried[k];
        int fd = ::open(tried.back().c_str(), O_RDONLY);
        const std::string os_err = fd < 0 ? std::strerror(errno) : "not a regular file";
        if (fd >= 0) ::close(fd);
        throw Error(what + ", which cannot be opened (" + os_err + "; looked for " + t +
                    "; relative names resolve from the current directory or HDF5_EXTFILE_PREFIX)");
      }
      const std::int64_t need_bytes = static_cast<std::int64_t>(off) + (use_hi - seg_lo);
      if (fsize < need_bytes) {
        const std::int64_t have_rows = (seg_lo + std::max<std::int64_t>(0, fsize - static_cast<std::int64_t>(off))) / row_bytes;
        throw Error(what + " ('" + found + "'), which holds " + std::to_string(fsize) + " bytes but must hold " +
                    std::to_string(need_bytes) + " (offset " + std::to_string(static_cast<long long>(off)) + " + " +
                    std::to_string(use_hi - seg_lo) + "): HDF5 would return zeros for " +
                    rows_text(std::max(have_rows, r_lo), r_hi));
      }
    }
    SHARDTOPK_EXPECTS(cum >= need_end, where, ": its external files hold ", cum, " bytes, fewer than the ", need_end,
                      " that rows up to ", range.hi, " need");
    return;
  }

  H5D_space_status_t status;
  STK_H5_CHECK(H5Dget_space_status(ds, &status), where, ": storage status");
  if (layout != H5D_CHUNKED) {
    SHARDTOPK_EXPECTS(status != H5D_SPACE_STATUS_NOT_ALLOCATED, where,
                      " has no data written (its storage was never allocated): ", rows_text(range.lo, range.hi),
                      " would read as ", fill_value_text(dcpl));
    if (layout == H5D_CONTIGUOUS) refuse_storage_past_end(ds, where, d, esize, range);
    return;
  }
  if (status == H5D_SPACE_STATUS_ALLOCATED) return;
  SHARDTOPK_EXPECTS(status != H5D_SPACE_STATUS_NOT_ALLOCATED, where,
                    " has no chunk written (its storage was never allocated): ", rows_text(range.lo, range.hi),
                    " would read as ", fill_value_text(dcpl));
  // Partly written: find the first chunk of our rows that is missing, by the lookup H5Dread
  // itself uses (H5Dget_chunk_storage_size fails, or gives 0, for a chunk it would fill).
  std::vector<hsize_t> cd(2, 1);
  STK_H5_CHECK(H5Pget_chunk(dcpl, 2, cd.data()), where, ": chunk shape");
  const std::int64_t cr = static_cast<std::int64_t>(cd[0]), cc = static_cast<std::int64_t>(cd[1]);
  SHARDTOPK_EXPECTS(cr >= 1 && cc >= 1, where, ": chunk shape ", cr, " x ", cc);
#if H5_VERSION_GE(1, 10, 5)
  for (std::int64_t r0 = range.lo / cr * cr; r0 < range.hi; r0 += cr) {
    for (std::int64_t c0 = 0; c0 < d; c0 += cc) {
      const hsize_t off[2] = {static_cast<hsize_t>(r0), static_cast<hsize_t>(c0)};
      hsize_t size = 0;
      const bool stored = H5Dget_chunk_storage_size(ds, off, &size) >= 0 && size > 0;
      H5Eclear2(H5E_DEFAULT);
      if (!stored) {
        const std::int64_t lo = std::max(r0, range.lo), hi = std::min({r0 + cr, range.hi, n});
        throw Error(detail::concat(where, ": ", rows_text(lo, hi), " were never written (the chunk at row ", r0,
                                   ", column ", c0, " is not allocated): HDF5 would return ", fill_value_text(dcpl),
                                   " for them"));
      }
    }
  }
#else
  throw Error(where + " has chunks that were never written (HDF5 " H5_VERS_INFO
              " cannot say which): HDF5 would return " + fill_value_text(dcpl) + " for them");
#endif
}

// ----------------------------------------------------------------------------- the reader

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

struct ThreadScratch {
  std::vector<unsigned char> raw, inflated, unshuffled;
  std::vector<float> f32;
  std::vector<unsigned char> tmp;
};

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
    f16c_ = kHaveF16c && opt.f16c;

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
    const ssize_t nl = H5Fget_name(f.get(), nullptr, 0);
    if (nl > 0) {
      std::vector<char> b(static_cast<size_t>(nl) + 1, 0);
      if (H5Fget_name(f.get(), b.data(), b.size()) >= 0) plan_.file = b.data();
    }
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
        chunks_.filters.push_back(static_cast<int>(f));
      } else if (f == H5Z_FILTER_SHUFFLE) {
        // libhdf5 unshuffles with the element size stored with the filter, not the type's
        if (nelem < 1 || static_cast<std::int64_t>(cdv[0]) != es) {
          H5Eclear2(H5E_DEFAULT);
          return use_hdf5("a shuffle filter whose element size is not the type's");
        }
        chunks_.filters.push_back(static_cast<int>(f));
      } else {  // fletcher32, szip, lzf, blosc, ...: libhdf5 applies them
        H5Eclear2(H5E_DEFAULT);
        return use_hdf5("a filter other than deflate and shuffle (filter " + std::to_string(f) + ")");
      }
    }
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
    STK_H5_CHECK(H5Dread(ds_.get(), mt.get(), mspace.get(), fspace.get(), H5P_DEFAULT, raw), "'", path_,
                 "': reading rows [", b0, ", ", b0 + rows, ") of '", info_.name, "' (truncated or corrupt file?)");
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
    // on the threads.
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
          uLongf out = static_cast<uLongf>(chunk_bytes);
          const int zr = ::uncompress(s.inflated.data(), &out, data, static_cast<uLong>(have));
          if (zr != Z_OK) return io_fault(std::string("deflate data is corrupt (zlib: ") + zError(zr) + ")");
          data = s.inflated.data();
          have = out;
        } else {  // shuffle: byte planes back to elements
          s.unshuffled.resize(have);
          const size_t ne = have / es;
          for (size_t b = 0; b < es; ++b) {
            const unsigned char* plane = data + b * ne;
            unsigned char* o = s.unshuffled.data() + b;
            for (size_t j = 0; j < ne; ++j) o[j * es] = plane[j];
          }
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
  // memory synchronously; measured 1.5-2x slower on the 2-core VM (docs/PERFORMANCE.md, "Ingest").
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
