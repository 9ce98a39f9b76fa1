#pragma once
// What the row reader refuses before it reads a row: every way libhdf5 would substitute data
// (zeros or the fill value) for what is missing in the rows asked for (DESIGN.md invariant 8).

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "shardtopk/shard_plan.hpp"

namespace shardtopk::io_detail {

/// "rows [lo, hi)".
std::string rows_text(std::int64_t lo, std::int64_t hi);

/// "the fill value (v)" of a dataset creation property list, or "the fill value".
std::string fill_value_text(hid_t dcpl);

/// Refuses, before any row is read, every way HDF5 substitutes data for what is missing in rows
/// `range` of dataset `ds` ([n, d], elements of `esize` bytes, named `name` in `path`): virtual
/// sources that are absent or too short, rows no mapping covers, external files absent or short,
/// contiguous storage or chunks never written, contiguous storage past the file's end or recorded
/// as shorter than the dataset, unfiltered chunks recorded as shorter than a chunk.
/// @throws Error naming the dataset, the rows and what HDF5 would return for them.
void refuse_substituted_data(hid_t file, hid_t ds, hid_t dcpl, const std::string& path, const std::string& name,
                             std::int64_t n, std::int64_t d, size_t esize, RowRange range);

}  // namespace shardtopk::io_detail
