// FilterProgram: validation, the serialised form (broadcast between ranks, read by the GPU),
// equality and hash, packing several programs for one kernel launch.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "filter/filter_internal.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the serialised filter form is little-endian and written with memcpy: a big-endian host needs byte swaps"
#endif

namespace shardtopk {

namespace filter_detail {
namespace {

// Constants one program may hold: every list value, plus two per range (one per operator).
constexpr std::int64_t kMaxConstants = kFilterMaxValues + 2 * kFilterMaxNodes;

bool is_leaf(FilterOpCode c) {
  return c == FilterOpCode::kRangeInt || c == FilterOpCode::kRangeReal || c == FilterOpCode::kInInt ||
         c == FilterOpCode::kInReal;
}
bool is_int_leaf(FilterOpCode c) { return c == FilterOpCode::kRangeInt || c == FilterOpCode::kInInt; }

// The column of a leaf must exist with the leaf's type (the global id is an int64 column).
void check_column(const FilterOp& op, std::size_t i, const AttributeSchema& schema, const std::string& what) {
  const bool wants_int = is_int_leaf(op.code);
  if (op.column == kFilterIdColumn) {
    SHARDTOPK_EXPECTS(wants_int, what, "instruction ", i, " compares the global id with float64 values");
    return;
  }
  SHARDTOPK_EXPECTS(op.column >= 0 && static_cast<std::size_t>(op.column) < schema.size(), what, "instruction ", i,
                    " reads attribute column ", op.column, ", but the corpus has ", schema.size(), " attribute columns");
  const AttributeSpec& a = schema[static_cast<std::size_t>(op.column)];
  SHARDTOPK_EXPECTS((a.type == AttributeType::kInt64) == wants_int, what, "instruction ", i, " compares attribute '",
                    a.name, "' (", to_string(a.type), ") with ", wants_int ? "int64" : "float64", " values");
}

}  // namespace

int check_program(const std::vector<FilterOp>& ops, const std::vector<std::int64_t>& ints,
                  const std::vector<double>& reals, const AttributeSchema& schema, const std::string& what) {
  SHARDTOPK_EXPECTS(!ops.empty() && ops.size() <= static_cast<std::size_t>(kFilterMaxOps), what, "a program has 1 to ",
                    kFilterMaxOps, " instructions, this one ", ops.size());
  SHARDTOPK_EXPECTS(static_cast<std::int64_t>(ints.size() + reals.size()) <= kMaxConstants, what, "a program holds at most ",
                    kMaxConstants, " constants, this one ", ints.size() + reals.size());
  int depth = 0, max_depth = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const FilterOp& op = ops[i];
    SHARDTOPK_EXPECTS(op.reserved[0] == 0 && op.reserved[1] == 0 && op.reserved[2] == 0, what, "instruction ", i,
                      " has non-zero reserved bytes");
    if (is_leaf(op.code)) {
      check_column(op, i, schema, what);
      const bool ints_pool = is_int_leaf(op.code);
      const std::int64_t pool = static_cast<std::int64_t>(ints_pool ? ints.size() : reals.size());
      const std::int64_t first = op.first, count = op.count;
      SHARDTOPK_EXPECTS(first >= 0 && count >= 0 && first + count <= pool, what, "instruction ", i, " uses constants [",
                        first, ", ", first + count, ") of a pool of ", pool);
      const bool range = op.code == FilterOpCode::kRangeInt || op.code == FilterOpCode::kRangeReal;
      SHARDTOPK_EXPECTS(!range || count == 2, what, "instruction ", i, " is a range with ", count, " bounds");
      if (!ints_pool)
        for (std::int64_t k = first; k < first + count; ++k)
          SHARDTOPK_EXPECTS(!std::isnan(reals[static_cast<std::size_t>(k)]), what, "instruction ", i, " compares with NaN");
      for (std::int64_t k = first + 1; k < first + count; ++k) {
        const auto a = static_cast<std::size_t>(k - 1), b = static_cast<std::size_t>(k);
        const bool ordered = ints_pool ? (range ? ints[a] <= ints[b] : ints[a] < ints[b])
                                       : (range ? reals[a] <= reals[b] : reals[a] < reals[b]);
        SHARDTOPK_EXPECTS(ordered, what, "instruction ", i,
                          range ? " is a range with its lower bound above its upper bound"
                                : " has a set that is not strictly increasing");
      }
      ++depth;
    } else {
      SHARDTOPK_EXPECTS(op.code <= FilterOpCode::kOr, what, "instruction ", i, " has unknown opcode ",
                        static_cast<int>(op.code));
      SHARDTOPK_EXPECTS(op.column == 0 && op.first == 0 && op.count == 0, what, "instruction ", i,
                        " (opcode ", static_cast<int>(op.code), ") has operands");
      switch (op.code) {
        case FilterOpCode::kTrue:
        case FilterOpCode::kFalse: ++depth; break;
        case FilterOpCode::kNot: SHARDTOPK_EXPECTS(depth >= 1, what, "instruction ", i, " (not) has no operand"); break;
        case FilterOpCode::kAnd:
        case FilterOpCode::kOr:
          SHARDTOPK_EXPECTS(depth >= 2, what, "instruction ", i, " (and/or) has fewer than two operands");
          --depth;
          break;
        default: throw Error(detail::concat(what, "instruction ", i, " has unknown opcode ", static_cast<int>(op.code)));
      }
    }
    max_depth = std::max(max_depth, depth);
    SHARDTOPK_EXPECTS(max_depth <= kFilterMaxStack, what, "the program needs a stack deeper than ", kFilterMaxStack);
  }
  SHARDTOPK_EXPECTS(depth == 1, what, "the program leaves ", depth, " values on its stack instead of 1");
  return max_depth;
}

}  // namespace filter_detail

void check_filter_fits(const FilterProgram& p, const AttributeSchema& schema) {
  const auto& ops = p.ops();
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (filter_detail::is_leaf(ops[i].code))
      filter_detail::check_column(ops[i], i, schema, "filter: program does not fit the attribute table: ");
}

// ------------------------------------------------------------------------------ FilterProgram

FilterProgram::FilterProgram() { ops_.push_back(FilterOp{}); }  // kTrue

std::size_t FilterProgram::serialized_bytes() const {
  return sizeof(FilterImageHeader) + ops_.size() * sizeof(FilterOp) + (ints_.size() + reals_.size()) * 8;
}

namespace {
FilterImageHeader header_of(const FilterProgram& p) {
  FilterImageHeader h;
  h.max_stack = static_cast<std::uint16_t>(p.max_stack());
  h.n_ops = static_cast<std::int32_t>(p.ops().size());
  h.n_ints = static_cast<std::int32_t>(p.ints().size());
  h.n_reals = static_cast<std::int32_t>(p.reals().size());
  return h;
}

// FNV-1a 64, fed piece by piece (the same value as over the contiguous serialised bytes).
struct Fnv1a {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void add(const void* data, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  }
};
}  // namespace

void FilterProgram::serialize_to(std::uint8_t* out) const {
  const FilterImageHeader h = header_of(*this);
  std::memcpy(out, &h, sizeof h);
  out += sizeof h;
  std::memcpy(out, ops_.data(), ops_.size() * sizeof(FilterOp));
  out += ops_.size() * sizeof(FilterOp);
  if (!ints_.empty()) std::memcpy(out, ints_.data(), ints_.size() * 8);
  out += ints_.size() * 8;
  if (!reals_.empty()) std::memcpy(out, reals_.data(), reals_.size() * 8);
}

std::vector<std::uint8_t> FilterProgram::serialize() const {
  std::vector<std::uint8_t> out(serialized_bytes());
  serialize_to(out.data());
  return out;
}

std::uint64_t FilterProgram::hash() const {
  const FilterImageHeader h = header_of(*this);
  Fnv1a f;
  f.add(&h, sizeof h);
  f.add(ops_.data(), ops_.size() * sizeof(FilterOp));
  f.add(ints_.data(), ints_.size() * 8);
  f.add(reals_.data(), reals_.size() * 8);
  return f.h;
}

bool FilterProgram::operator==(const FilterProgram& o) const {
  // Byte comparison: reals by bit pattern, ops including their (zero) reserved bytes.
  return max_stack_ == o.max_stack_ && ops_.size() == o.ops_.size() && ints_ == o.ints_ &&
         reals_.size() == o.reals_.size() &&
         std::memcmp(ops_.data(), o.ops_.data(), ops_.size() * sizeof(FilterOp)) == 0 &&
         (reals_.empty() || std::memcmp(reals_.data(), o.reals_.data(), reals_.size() * 8) == 0);
}

FilterProgram deserialize_filter(const std::uint8_t* data, std::size_t size, const AttributeSchema& schema) {
  const std::string what = "filter image: ";
  SHARDTOPK_EXPECTS(data != nullptr || size == 0, what, "null data");
  SHARDTOPK_EXPECTS(size >= sizeof(FilterImageHeader), what, size, " bytes, shorter than its ",
                    sizeof(FilterImageHeader), "-byte header");
  FilterImageHeader h;
  std::memcpy(&h, data, sizeof h);
  const FilterImageHeader expect;
  SHARDTOPK_EXPECTS(h.magic == expect.magic, what, "bad magic number 0x", std::hex, h.magic, " (not a filter image)");
  SHARDTOPK_EXPECTS(h.version == expect.version, what, "version ", h.version, ", this build reads version ",
                    expect.version);
  SHARDTOPK_EXPECTS(h.reserved0 == 0 && h.reserved1 == 0, what, "non-zero reserved header fields");
  SHARDTOPK_EXPECTS(h.n_ops >= 1 && h.n_ops <= kFilterMaxOps, what, h.n_ops, " instructions (allowed: 1 .. ",
                    kFilterMaxOps, ")");
  constexpr std::int64_t kMaxConstants = kFilterMaxValues + 2 * kFilterMaxNodes;
  SHARDTOPK_EXPECTS(h.n_ints >= 0 && h.n_reals >= 0 && std::int64_t{h.n_ints} + h.n_reals <= kMaxConstants, what,
                    h.n_ints, " int64 and ", h.n_reals, " float64 constants (allowed: at most ", kMaxConstants,
                    " together)");
  const std::size_t need = sizeof h + static_cast<std::size_t>(h.n_ops) * sizeof(FilterOp) +
                           (static_cast<std::size_t>(h.n_ints) + static_cast<std::size_t>(h.n_reals)) * 8;
  SHARDTOPK_EXPECTS(size == need, what, size, " bytes, but its header describes ", need);
  FilterProgram p;
  const std::uint8_t* at = data + sizeof h;
  p.ops_.resize(static_cast<std::size_t>(h.n_ops));
  std::memcpy(p.ops_.data(), at, p.ops_.size() * sizeof(FilterOp));
  at += p.ops_.size() * sizeof(FilterOp);
  p.ints_.resize(static_cast<std::size_t>(h.n_ints));
  if (h.n_ints) std::memcpy(p.ints_.data(), at, p.ints_.size() * 8);
  at += p.ints_.size() * 8;
  p.reals_.resize(static_cast<std::size_t>(h.n_reals));
  if (h.n_reals) std::memcpy(p.reals_.data(), at, p.reals_.size() * 8);
  p.max_stack_ = filter_detail::check_program(p.ops_, p.ints_, p.reals_, schema, what);
  SHARDTOPK_EXPECTS(p.max_stack_ == h.max_stack, what, "header says stack depth ", h.max_stack, ", the program needs ",
                    p.max_stack_);
  return p;
}

// ------------------------------------------------------------------------------ packing

std::size_t packed_filter_programs_bytes(const FilterProgram* const* programs, int count) {
  SHARDTOPK_EXPECTS(count >= 0, "pack_filter_programs: negative count ", count);
  std::size_t n = 8 + 8 * static_cast<std::size_t>(count);
  for (int i = 0; i < count; ++i) n += programs[i]->serialized_bytes();
  return n;
}

std::size_t pack_filter_programs(const FilterProgram* const* programs, int count, std::uint8_t* out,
                                 std::size_t capacity) {
  const std::size_t need = packed_filter_programs_bytes(programs, count);
  SHARDTOPK_EXPECTS(need <= capacity, "pack_filter_programs: ", count, " programs need ", need,
                    " bytes, the buffer holds ", capacity);
  const std::uint64_t n = static_cast<std::uint64_t>(count);
  std::memcpy(out, &n, 8);
  std::size_t at = 8 + 8 * static_cast<std::size_t>(count);
  for (int i = 0; i < count; ++i) {
    const std::uint64_t off = at;
    std::memcpy(out + 8 + 8 * static_cast<std::size_t>(i), &off, 8);
    programs[i]->serialize_to(out + at);
    at += programs[i]->serialized_bytes();
  }
  return at;
}

}  // namespace shardtopk
