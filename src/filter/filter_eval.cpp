// Host evaluation of filter programs: block verdicts from the summaries, the scalar reference
// `passes`, and `evaluate_mask`, which works one summary block (1024 rows, 32 mask words) at a
// time with a stack of block masks, so each leaf is one tight loop over a column.
#include <algorithm>
#include <cstring>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "filter/filter_internal.hpp"
#include "shardtopk/filter_semantics.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/filter.hpp"

namespace shardtopk {
namespace {

using namespace filter_detail;

constexpr int kBlockWords = static_cast<int>(kFilterBlockRows / 32);
static_assert(kFilterBlockRows % 32 == 0, "a summary block is a whole number of mask words");
// Blocks below which evaluate_mask stays on the calling thread (64 K rows: well under a
// millisecond of work, less than waking a thread team).
constexpr std::int64_t kMinBlocksForThreads = 64;

// Verdict of one leaf over entry i of bounds bb (a block's, or the table's hull).
std::uint8_t leaf_verdict(const FilterProgram& p, const FilterOp& op, const BlockBounds& bb, std::size_t i) {
  switch (op.code) {
    case FilterOpCode::kRangeInt: {
      const std::int64_t* c = p.ints().data() + op.first;
      return range_verdict(bb.ints_min[i], bb.ints_max[i], c[0], c[1]);
    }
    case FilterOpCode::kRangeReal: {
      const double* c = p.reals().data() + op.first;
      return range_verdict(bb.reals_min[i], bb.reals_max[i], c[0], c[1]);
    }
    case FilterOpCode::kInInt: return int_set_verdict(p.ints().data() + op.first, op.count, bb.ints_min[i], bb.ints_max[i]);
    case FilterOpCode::kInReal:
      return real_set_verdict(p.reals().data() + op.first, op.count, bb.reals_min[i], bb.reals_max[i]);
    default: return kVerdictSome;
  }
}

// Verdict of every instruction over block b (states[i] for instruction i); returns the program's.
std::uint8_t analyse(const FilterProgram& p, const AttributeTable& t, std::int64_t b, std::uint8_t* states) {
  const auto& ops = p.ops();
  return block_verdicts(ops.data(), static_cast<int>(ops.size()),
                        [&](const FilterOp& op) {
                          return leaf_verdict(p, op, t.bounds(op.column), static_cast<std::size_t>(b));
                        },
                        states);
}

// Mask of the first n bits of a word-sized slot w of a block with n rows.
inline std::uint32_t valid_bits(int n, int w) {
  const int left = n - 32 * w;
  return left >= 32 ? ~0u : left <= 0 ? 0u : (1u << left) - 1u;
}

// One stack slot: a verdict, and when it is "some", the block's mask words.
struct Slot {
  std::uint8_t state;
  std::uint32_t words[kBlockWords];
};

// Rows [r0, r0 + n) against one undecided leaf, into words (bits past n are 0).
void leaf_words(const FilterProgram& p, const FilterOp& op, const AttributeTable& t, std::int64_t r0, int n,
                std::uint32_t* words) {
  const int nw = (n + 31) / 32;
  auto fill = [&](auto&& pred) {
    for (int w = 0; w < nw; ++w) {
      const int base = 32 * w, m = std::min(32, n - base);
      std::uint32_t bits = 0;
      for (int j = 0; j < m; ++j) bits |= static_cast<std::uint32_t>(pred(base + j)) << j;
      words[w] = bits;
    }
  };
  if (op.code == FilterOpCode::kRangeInt || op.code == FilterOpCode::kInInt) {
    const std::int64_t* v =
        (op.column == kFilterIdColumn ? t.global_ids().data() : t.column(op.column).ints.data()) + r0;
    const std::int64_t* c = p.ints().data() + op.first;
    if (op.code == FilterOpCode::kRangeInt) {
      // lo <= x <= hi as one unsigned comparison (lo <= hi).
      const std::uint64_t lo = static_cast<std::uint64_t>(c[0]), width = static_cast<std::uint64_t>(c[1]) - lo;
      fill([&](int i) { return static_cast<std::uint64_t>(v[i]) - lo <= width; });
    } else {
      fill([&](int i) { return in_set(c, op.count, v[i]); });
    }
  } else {
    const double* v = t.column(op.column).reals.data() + r0;
    const double* c = p.reals().data() + op.first;
    if (op.code == FilterOpCode::kRangeReal) {
      const double lo = c[0], hi = c[1];
      fill([&](int i) { return in_range(v[i], lo, hi); });
    } else {
      fill([&](int i) { return in_set(c, op.count, v[i]); });
    }
  }
}

// Evaluates rows [r0, r0 + n) of block b (n <= kFilterBlockRows) into words[kBlockWords] (bits
// relative to r0; bits past n are 0). Returns the block flag: 0 none pass, 2 all pass, 1 else.
std::uint8_t eval_block(const FilterProgram& p, const AttributeTable& t, std::int64_t b, std::int64_t r0, int n,
                        std::uint32_t* words) {
  std::uint8_t states[kFilterMaxOps];
  const int nw = (n + 31) / 32;
  const std::uint8_t top = analyse(p, t, b, states);
  if (top != kVerdictSome) {
    for (int w = 0; w < nw; ++w) words[w] = top == kVerdictAll ? valid_bits(n, w) : 0u;
    return top == kVerdictAll ? 2 : 0;
  }
  Slot stack[kFilterMaxStack];
  int sp = 0;
  const auto& ops = p.ops();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const FilterOp& op = ops[i];
    switch (op.code) {
      case FilterOpCode::kNot: {
        Slot& a = stack[sp - 1];
        if (a.state == kVerdictSome)
          for (int w = 0; w < nw; ++w) a.words[w] = ~a.words[w] & valid_bits(n, w);
        else
          a.state = verdict_not(a.state);
        break;
      }
      case FilterOpCode::kAnd:
      case FilterOpCode::kOr: {
        Slot& a = stack[sp - 2];
        const Slot& c = stack[sp - 1];
        --sp;
        const bool is_and = op.code == FilterOpCode::kAnd;
        // The operand that decides the result alone (false for and, true for or) ...
        const std::uint8_t absorbing = is_and ? kVerdictNone : kVerdictAll;
        if (a.state == absorbing) break;
        if (c.state == absorbing) {
          a.state = absorbing;
          break;
        }
        // ... and the one that leaves the other unchanged.
        if (c.state != kVerdictSome) break;
        if (a.state != kVerdictSome) {
          a = c;
          break;
        }
        for (int w = 0; w < nw; ++w) a.words[w] = is_and ? (a.words[w] & c.words[w]) : (a.words[w] | c.words[w]);
        break;
      }
      default: {
        Slot& s = stack[sp++];
        s.state = states[i];  // kTrue / kFalse are decided; so is any leaf the summaries decide
        if (s.state == kVerdictSome) leaf_words(p, op, t, r0, n, s.words);
        break;
      }
    }
  }
  const Slot& r = stack[0];
  if (r.state != kVerdictSome) {
    for (int w = 0; w < nw; ++w) words[w] = r.state == kVerdictAll ? valid_bits(n, w) : 0u;
    return r.state == kVerdictAll ? 2 : 0;
  }
  int passing = 0;
  for (int w = 0; w < nw; ++w) {
    words[w] = r.words[w];
    passing += __builtin_popcount(r.words[w]);
  }
  return passing == 0 ? 0 : passing == n ? 2 : 1;
}

void check_row_range(const AttributeTable& t, RowRange rows) {
  SHARDTOPK_EXPECTS(rows.lo >= 0 && rows.lo <= rows.hi && rows.hi <= t.rows(), "filter: row range [", rows.lo, ", ",
                    rows.hi, ") is outside the shard's ", t.rows(), " rows");
}

}  // namespace

BlockVerdict analyse_block(const FilterProgram& program, const AttributeTable& table, std::int64_t block) {
  check_filter_fits(program, table.schema());
  SHARDTOPK_EXPECTS(block >= 0 && block < table.blocks(), "filter: block ", block, " is outside the shard's ",
                    table.blocks(), " blocks");
  std::uint8_t states[kFilterMaxOps];
  return static_cast<BlockVerdict>(analyse(program, table, block, states));
}

BlockVerdict analyse_table(const FilterProgram& program, const AttributeTable& table) {
  check_filter_fits(program, table.schema());
  if (table.rows() == 0) return BlockVerdict::kSome;
  const auto& ops = program.ops();
  std::uint8_t states[kFilterMaxOps];
  return static_cast<BlockVerdict>(block_verdicts(
      ops.data(), static_cast<int>(ops.size()),
      [&](const FilterOp& op) { return leaf_verdict(program, op, table.table_bounds(op.column), 0); }, states));
}

bool passes(const FilterProgram& program, const AttributeTable& table, std::int64_t row) {
  check_filter_fits(program, table.schema());
  SHARDTOPK_EXPECTS(row >= 0 && row < table.rows(), "filter: row ", row, " is outside the shard's ", table.rows(),
                    " rows");
  const auto r = static_cast<std::size_t>(row);
  std::uint64_t stack = 0;  // bit 0 is the top; the program needs at most kFilterMaxStack <= 64 values
  for (const FilterOp& op : program.ops()) {
    bool v = false;
    switch (op.code) {
      case FilterOpCode::kTrue: v = true; break;
      case FilterOpCode::kFalse: v = false; break;
      case FilterOpCode::kRangeInt: {
        const std::int64_t x = op.column == kFilterIdColumn ? table.global_ids()[r] : table.column(op.column).ints[r];
        v = in_range(x, program.ints()[static_cast<std::size_t>(op.first)],
                     program.ints()[static_cast<std::size_t>(op.first) + 1]);
        break;
      }
      case FilterOpCode::kRangeReal:
        v = in_range(table.column(op.column).reals[r], program.reals()[static_cast<std::size_t>(op.first)],
                     program.reals()[static_cast<std::size_t>(op.first) + 1]);
        break;
      case FilterOpCode::kInInt: {
        const std::int64_t x = op.column == kFilterIdColumn ? table.global_ids()[r] : table.column(op.column).ints[r];
        v = in_set(program.ints().data() + op.first, op.count, x);
        break;
      }
      case FilterOpCode::kInReal:
        v = in_set(program.reals().data() + op.first, op.count, table.column(op.column).reals[r]);
        break;
      case FilterOpCode::kNot: stack ^= 1u; continue;
      case FilterOpCode::kAnd:
      case FilterOpCode::kOr: {
        const std::uint64_t b = stack & 1u;
        stack >>= 1;
        stack = op.code == FilterOpCode::kAnd ? (stack & ~std::uint64_t{1}) | (stack & b)
                                              : stack | b;
        continue;
      }
    }
    stack = (stack << 1) | static_cast<std::uint64_t>(v);
  }
  return (stack & 1u) != 0;
}

void evaluate_mask(const FilterProgram& program, const AttributeTable& table, RowRange rows, std::uint32_t* bits,
                   std::uint8_t* block_flags, int threads) {
  check_filter_fits(program, table.schema());
  check_row_range(table, rows);
  if (rows.size() == 0) return;
  const std::int64_t b0 = rows.lo / kFilterBlockRows, b1 = (rows.hi - 1) / kFilterBlockRows;
  const std::int64_t nblocks = b1 - b0 + 1;
  // With rows.lo a multiple of 32 every block's words land on whole output words, no two blocks
  // share one, and blocks can go to different threads; otherwise blocks are OR-ed in, in order.
  const bool aligned = rows.lo % 32 == 0;
  if (!aligned) std::memset(bits, 0, static_cast<std::size_t>(filter_mask_words(rows.size())) * 4);
  auto one_block = [&](std::int64_t b) {
    const std::int64_t c0 = std::max(rows.lo, b * kFilterBlockRows);
    const std::int64_t c1 = std::min(rows.hi, (b + 1) * kFilterBlockRows);
    const int n = static_cast<int>(c1 - c0);
    std::uint32_t words[kBlockWords];
    const std::uint8_t flag = eval_block(program, table, b, c0, n, words);
    if (block_flags) block_flags[b - b0] = flag;
    const std::int64_t off = c0 - rows.lo;
    const int nw = (n + 31) / 32;
    std::uint32_t* out = bits + off / 32;
    const int shift = static_cast<int>(off % 32);
    if (shift == 0) {
      std::memcpy(out, words, static_cast<std::size_t>(nw) * 4);
      return;
    }
    const std::int64_t total_words = filter_mask_words(rows.size());
    for (int w = 0; w < nw; ++w) {
      out[w] |= words[w] << shift;
      if (off / 32 + w + 1 < total_words) out[w + 1] |= words[w] >> (32 - shift);
    }
  };
#ifdef _OPENMP
  const int team = threads > 0 ? threads : omp_get_max_threads();
  if (aligned && team > 1 && nblocks >= kMinBlocksForThreads) {
#pragma omp parallel for num_threads(team) schedule(dynamic, 16)
    for (std::int64_t b = b0; b <= b1; ++b) one_block(b);
    return;
  }
#else
  (void)threads;
#endif
  for (std::int64_t b = b0; b <= b1; ++b) one_block(b);
}

}  // namespace shardtopk
