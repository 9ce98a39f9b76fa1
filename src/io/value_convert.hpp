#pragma once
// Conversion of stored float values into a row format, with the checks every path of the row
// reader makes (finite, within the output's and the storage's range), naming the first bad value.

#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "shardtopk/corpus_io.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk::io_detail {

/// A dataset's element type as stored.
enum class Elem { kF16, kF32, kF64, kOther };

inline size_t elem_bytes(Elem e) { return e == Elem::kF16 ? 2 : e == Elem::kF64 ? 8 : 4; }

/// The first bad value of a run (or of a block: the smallest (row, col)).
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

/// Largest float32 magnitude (as bits of |x|) that the output format/storage keeps finite.
struct Limit {
  std::uint32_t bits = 0x7F800000u;  // |x| bits >= this is out of range (when finite); float32: Inf
  const char* type = "float32";
  double max = FLT_MAX;
};

/// The limit of values read as `format` into an engine storing `storage`.
Limit limit_for(RowFormat format, Dtype storage);

/// A run's result: index of its first bad value, or -1.
struct RunBad {
  std::ptrdiff_t index = -1;
  Fault::Kind kind = Fault::kNone;
  double value = 0;
  const char* range_type = "";
  double range_max = 0;
};

/// True when this CPU can convert float16 with F16C (ReadOptions::f16c may still turn it off).
bool cpu_has_f16c();

/// Converts n IEEE binary16 bit patterns h [n] into float32 f [n], exactly, whatever they hold
/// (±0, subnormals, ±inf and NaN included): with F16C where `f16c` (ReadOptions::f16c, config
/// key io.f16c) and cpu_has_f16c() allow it, else the portable conversion (the same bits).
void f16_bits_to_f32(const std::uint16_t* h, float* f, size_t n, bool f16c);

/// Rows of a block [rows, dim] in `format` read as float32 values, one row at a time: row(i) is
/// the block's own row (kFloat32) or its binary16 bits converted by f16_bits_to_f32 into this
/// reader's buffer (kFloat16Bits; valid until the next call). For code that takes float32 rows
/// and must give the same bits from either format (norms, digests). One per thread.
class RowsAsFloat32 {
 public:
  RowsAsFloat32(const void* data, RowFormat format, std::int64_t dim, bool f16c)
      : data_(data), format_(format), dim_(dim), f16c_(f16c) {
    if (format == RowFormat::kFloat16Bits) buf_.resize(static_cast<size_t>(dim));
  }
  const float* row(std::int64_t i) {
    if (format_ == RowFormat::kFloat32) return static_cast<const float*>(data_) + i * dim_;
    f16_bits_to_f32(static_cast<const std::uint16_t*>(data_) + i * dim_, buf_.data(), buf_.size(), f16c_);
    return buf_.data();
  }

 private:
  const void* data_;
  RowFormat format_;
  std::int64_t dim_;
  bool f16c_;
  std::vector<float> buf_;
};

/// Converts n values from `src` (elem) into `dst` (format), checking each. `src` may equal `dst`
/// when the element and format sizes match. `scratch` holds n floats (float64 to float16).
/// `f16c`: the caller's ReadOptions::f16c and cpu_has_f16c() both allow F16C.
RunBad convert_run(Elem e, const void* src, RowFormat fmt, void* dst, size_t n, const Limit& lim, float* scratch,
                   bool f16c);

}  // namespace shardtopk::io_detail
