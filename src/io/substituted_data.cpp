// The row reader's refusal of data libhdf5 would make up: virtual datasets, external files,
// unallocated storage and chunks, contiguous storage cut short or recorded as too short, unfiltered
// chunks recorded as too short.
#include "io/substituted_data.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "io/h5_detail.hpp"
#include "shardtopk/error.hpp"

namespace shardtopk::io_detail {

using h5::Handle;

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

namespace {

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

// A contiguous dataset whose layout message records fewer bytes of storage than its shape needs
// (a damaged file: libhdf5 writes the product). libhdf5 reads a request larger than its sieve
// buffer (the recorded size, up to 64 KiB) from the file, but a smaller one through that buffer,
// which it fills only up to the recorded size and then copies from in full: the values past that
// size are whatever an earlier read left in the buffer, so they depend on what was read before.
// Refused for the rows of `range` that reach past the recorded size.
void refuse_storage_short_of_shape(hid_t ds, const std::string& where, std::int64_t n, std::int64_t d, size_t esize,
                                   RowRange range) {
  const std::uint64_t stored = H5Dget_storage_size(ds);
  H5Eclear2(H5E_DEFAULT);
  const std::uint64_t row_bytes = static_cast<std::uint64_t>(d) * esize;
  const std::int64_t whole_rows = static_cast<std::int64_t>(std::min<std::uint64_t>(stored / row_bytes, n));
  if (range.hi <= whole_rows) return;
  throw Error(detail::concat(where, " is damaged: its contiguous storage is recorded as ", stored, " bytes, fewer than the ",
                             static_cast<std::uint64_t>(n) * row_bytes, " that its [", n, ", ", d, "] values of ", esize,
                             " bytes need: HDF5 would return bytes left from an earlier read for ",
                             rows_text(std::max(range.lo, whole_rows), range.hi)));
}

}  // namespace

// Refuses, before any row is read, every way HDF5 substitutes data for what is missing in rows
// [lo, hi): virtual sources that are absent or too short, rows no mapping covers, external files
// absent or short, contiguous storage or chunks never written, contiguous storage recorded as
// shorter than the dataset, unfiltered chunks recorded as shorter than a chunk.
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
      // libhdf5 adds the sizes in unsigned 64-bit arithmetic, wrapping past 2^64, and maps bytes
      // through the wrapped sums: no valid list comes near (files hold less than 2^63 bytes)
      SHARDTOPK_EXPECTS(size == H5F_UNLIMITED || size <= static_cast<hsize_t>(std::numeric_limits<std::int64_t>::max() - cum),
                        where, ": its external file sizes add up to more than 2^63 - 1 bytes at file ", i, " ('", fname,
                        "', ", static_cast<unsigned long long>(size), " bytes): a damaged external file list");
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
    if (layout == H5D_CONTIGUOUS) {
      refuse_storage_short_of_shape(ds, where, n, d, esize, range);
      refuse_storage_past_end(ds, where, d, esize, range);
    }
    return;
  }
  SHARDTOPK_EXPECTS(status != H5D_SPACE_STATUS_NOT_ALLOCATED, where,
                    " has no chunk written (its storage was never allocated): ", rows_text(range.lo, range.hi),
                    " would read as ", fill_value_text(dcpl));
  // Partly written: find the first chunk of our rows that is missing, by the lookup H5Dread
  // itself uses (H5Dget_chunk_storage_size fails, or gives 0, for a chunk it would fill).
  const bool partly = status != H5D_SPACE_STATUS_ALLOCATED;
  // Without filters, a chunk's length as its index records it (a v1 B-tree records one for every
  // chunk) is the chunk's size in a valid file. libhdf5 reads a chunk that fits its chunk cache
  // into a buffer of the recorded length and copies a whole chunk out of it: past a shorter
  // record it copies memory it never read into.
  const bool unfiltered = H5Pget_nfilters(dcpl) == 0;
  if (!partly && !unfiltered) return;
  std::vector<hsize_t> cd(2, 1);
  STK_H5_CHECK(H5Pget_chunk(dcpl, 2, cd.data()), where, ": chunk shape");
  const std::int64_t cr = static_cast<std::int64_t>(cd[0]), cc = static_cast<std::int64_t>(cd[1]);
  SHARDTOPK_EXPECTS(cr >= 1 && cc >= 1, where, ": chunk shape ", cr, " x ", cc);
  constexpr hsize_t kMax = std::numeric_limits<hsize_t>::max();
  const hsize_t chunk_bytes = cd[0] <= kMax / cd[1] / esize ? cd[0] * cd[1] * esize : kMax;
#if H5_VERSION_GE(1, 10, 5)
  for (std::int64_t r0 = range.lo / cr * cr; r0 < range.hi; r0 += cr) {
    const std::int64_t lo = std::max(r0, range.lo), hi = std::min({r0 + cr, range.hi, n});
    for (std::int64_t c0 = 0; c0 < d; c0 += cc) {
      const hsize_t off[2] = {static_cast<hsize_t>(r0), static_cast<hsize_t>(c0)};
      hsize_t size = 0;
      if (partly) {
        const bool stored = H5Dget_chunk_storage_size(ds, off, &size) >= 0 && size > 0;
        H5Eclear2(H5E_DEFAULT);
        if (!stored)
          throw Error(detail::concat(where, ": ", rows_text(lo, hi), " were never written (the chunk at row ", r0,
                                     ", column ", c0, " is not allocated): HDF5 would return ", fill_value_text(dcpl),
                                     " for them"));
      }
      if (unfiltered) {
        unsigned mask = 0;
        haddr_t addr = HADDR_UNDEF;
        const bool found = H5Dget_chunk_info_by_coord(ds, off, &mask, &addr, &size) >= 0 && addr != HADDR_UNDEF;
        H5Eclear2(H5E_DEFAULT);
        if (found && size < chunk_bytes)
          throw Error(detail::concat(where, ": its chunk index records ", size, " bytes for the chunk at row ", r0,
                                     ", column ", c0, ", which holds ", chunk_bytes, " bytes without filters (a damaged ",
                                     "index): HDF5 would return bytes it never read for ", rows_text(lo, hi)));
      }
    }
  }
#else
  if (partly)
    throw Error(where + " has chunks that were never written (HDF5 " H5_VERS_INFO
                " cannot say which): HDF5 would return " + fill_value_text(dcpl) + " for them");
#endif
}

}  // namespace shardtopk::io_detail
