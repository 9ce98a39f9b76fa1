#pragma once
/// @file filter.hpp
/// Filtered search, host side: per-row attribute columns, the filter language, compiled filter
/// programs (plain data for the host and the GPU), per-block min/max summaries, evaluation.
///
/// The language (docs/FILTERS.md has the full text): a filter is a JSON object with exactly one
/// key, its operator:
///   {"eq": {"tenant": 7}}              attribute equals a value
///   {"in": {"tag": [1, 5, 9]}}         attribute is one of the values (an empty list: no row)
///   {"range": {"year": [2019, 2024]}}  lo <= attribute <= hi; null for an open end
///   {"ids_in": [3, 17]}                the row's global id is one of these
///   {"ids_not_in": [3, 17]}            the row's global id is none of these
///   {"all": [f, ...]}                  every sub-filter passes (an empty list: every row)
///   {"any": [f, ...]}                  at least one sub-filter passes (an empty list: no row)
///   {"not": f}                         the sub-filter fails
/// Values: an int64 attribute takes JSON integers only (7.5 and 7.0 are refused: it compares
/// exactly); a float64 attribute takes any finite JSON number (an integer that is not exactly a
/// float64, such as 2^53 + 1, is refused); NaN and ±inf are refused everywhere; ids are int64.
/// Float comparisons are IEEE: -0.0 equals 0.0. Attribute data holds no NaN (refused on reading).
///
/// Limits: kFilterMaxDepth nesting levels, kFilterMaxNodes operators, kFilterMaxValues values in
/// all lists together; each is checked before the work it bounds (recursion, allocation).
/// Errors throw shardtopk::Error ("filter: ...") naming the operator, attribute or value and,
/// below the top level, where in the filter ("(at all[1].not)"); nothing is half-built.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shardtopk/types.hpp"
#include "shardtopk/shard_plan.hpp"

namespace shardtopk {

// ------------------------------------------------------------------------------ limits

/// Rows per summary block: block b holds shard rows [b · kFilterBlockRows, (b + 1) · kFilterBlockRows).
inline constexpr std::int64_t kFilterBlockRows = 1024;
/// Nesting levels of one filter: {"eq": ...} alone is 1, {"not": {"eq": ...}} is 2.
inline constexpr int kFilterMaxDepth = 32;
/// Operators (JSON objects) in one filter.
inline constexpr int kFilterMaxNodes = 256;
/// Values in all the lists of one filter together (in, ids_in, ids_not_in).
inline constexpr std::int64_t kFilterMaxValues = 1 << 20;
/// Instructions of a compiled program: each operator compiles to at most two, and each member
/// of an all / any list after the first adds one (and / or).
inline constexpr int kFilterMaxOps = 3 * kFilterMaxNodes;
/// Evaluation stack depth of a compiled program (it needs at most kFilterMaxDepth + 1).
inline constexpr int kFilterMaxStack = 64;
/// Attribute columns per corpus (corpus.attributes).
inline constexpr int kFilterMaxAttributes = 64;
/// The column index a program uses for the row's global id.
inline constexpr std::int32_t kFilterIdColumn = -1;

// ------------------------------------------------------------------------------ attributes

/// One attribute's name (what filters call it) and type.
struct AttributeSpec {
  std::string name;
  AttributeType type = AttributeType::kInt64;
  bool operator==(const AttributeSpec& o) const { return name == o.name && type == o.type; }
};

/// The attributes of a corpus, in corpus.attributes order (a filter's column index is the
/// position here).
using AttributeSchema = std::vector<AttributeSpec>;

/// An attribute's name: the last component of its HDF5 dataset path ("meta/year" → "year";
/// trailing slashes ignored). Empty when the path has no component.
inline std::string attribute_name(const std::string& dataset_path) {
  std::string p = dataset_path;
  while (!p.empty() && p.back() == '/') p.pop_back();
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

/// One attribute column of a shard.
struct AttributeColumn {
  std::string name;
  AttributeType type = AttributeType::kInt64;
  std::vector<std::int64_t> ints;  ///< [rows] when type is kInt64, else empty
  std::vector<double> reals;       ///< [rows] when type is kFloat64, else empty (no NaN)
  std::int64_t rows() const {
    return type == AttributeType::kInt64 ? static_cast<std::int64_t>(ints.size())
                                         : static_cast<std::int64_t>(reals.size());
  }
};

/// Per-block bounds of one column: for block b, every row value v of the block has
/// min[b] <= v <= max[b] (int64 columns and global ids: ints_*; float64 columns: reals_*).
struct BlockBounds {
  std::vector<std::int64_t> ints_min, ints_max;  ///< [blocks] for int64 columns and global ids
  std::vector<double> reals_min, reals_max;      ///< [blocks] for float64 columns
};

/// The attributes of one shard: its columns, the global id of each of its rows (what ids_in
/// refers to), and the block summaries computed once here. Changed only by write_rows().
class AttributeTable {
 public:
  /// No attribute columns and no rows.
  AttributeTable() = default;

  /// Takes the shard's columns and global ids ([rows] each; rows = global_ids.size()) and
  /// computes the block summaries on `threads` threads (0: all cores).
  /// @throws Error when a column's length differs from the ids' (naming it), when two columns
  ///   share a name, when there are more than kFilterMaxAttributes columns, or when a float64
  ///   column holds NaN (naming the column and shard row). Nothing is kept on error.
  AttributeTable(std::vector<AttributeColumn> columns, std::vector<std::int64_t> global_ids, int threads = 0);

  std::int64_t rows() const { return static_cast<std::int64_t>(global_ids_.size()); }
  /// Summary blocks: ceil(rows / kFilterBlockRows).
  std::int64_t blocks() const { return (rows() + kFilterBlockRows - 1) / kFilterBlockRows; }
  int columns() const { return static_cast<int>(columns_.size()); }
  const AttributeSchema& schema() const { return schema_; }
  const AttributeColumn& column(int c) const { return columns_.at(static_cast<std::size_t>(c)); }
  /// [rows]: global id of each shard row.
  const std::vector<std::int64_t>& global_ids() const { return global_ids_; }
  /// Block bounds of column c, or of the global ids for c = kFilterIdColumn.
  const BlockBounds& bounds(int c) const {
    return c == kFilterIdColumn ? id_bounds_ : column_bounds_.at(static_cast<std::size_t>(c));
  }
  /// Bounds of column c (or of the global ids) over the whole table: one entry, the hull of
  /// every block's (empty vectors when the table has no rows); widened by write_rows like them.
  const BlockBounds& table_bounds(int c) const {
    return c == kFilterIdColumn ? id_hull_ : column_hulls_.at(static_cast<std::size_t>(c));
  }

  /// Overwrites rows slots[i], i in [0, n): global id ids[i] and, for each column c in schema
  /// order, values[c][i] (an int64_t or a double array [n], as the column's type; `values` may
  /// be nullptr when there are no columns). The block bounds of the rows' blocks are widened to
  /// hold the new values and never narrowed, so they bound every value a block's rows have held
  /// and the summaries stay sound (a row's old value may still widen them).
  /// @throws Error, changing nothing, for a slot outside [0, rows()), a null pointer, or NaN in
  ///   a float64 column (naming the column and the id).
  void write_rows(const std::int64_t* slots, std::int64_t n, const std::int64_t* ids, const void* const* values);

 private:
  std::vector<AttributeColumn> columns_;
  std::vector<std::int64_t> global_ids_;
  AttributeSchema schema_;
  std::vector<BlockBounds> column_bounds_;
  BlockBounds id_bounds_;
  std::vector<BlockBounds> column_hulls_;  // [columns] one entry: the whole table
  BlockBounds id_hull_;
};

/// Reads shard rows [range.lo, range.hi) of each attribute dataset (corpus.attributes) of the
/// HDF5 file `path` with hyperslab reads through libhdf5. Each dataset must be 1-D with
/// `corpus_rows` values (the corpus's N), of an attribute_dtype() type (any byte order); a
/// float one must hold no NaN in the range read.
/// @returns one column per dataset, in order, named by attribute_name(), [range.size()] each.
/// @throws Error naming the file and dataset: missing (listing those present), another rank or
///   length, another type (named, e.g. uint64), NaN (with its global row), duplicate names,
///   storage HDF5 would fill in (never written), a range outside [0, corpus_rows), a failed read.
std::vector<AttributeColumn> read_attribute_columns(const std::string& path, const std::vector<std::string>& datasets,
                                                    std::int64_t corpus_rows, RowRange range);

/// Whether an HDF5 dataset of element type `dtype` (a type name as `info` prints it: "int8" ..
/// "int64", "uint8" .. "uint64", "float32", "float64", "string", ...) may be an attribute:
/// integers that fit int64 exactly (read as int64) and floats (read as float64).
bool attribute_dtype(const std::string& dtype);

// ------------------------------------------------------------------------------ programs

/// Instruction codes of a compiled program (postfix: operands before their operator).
enum class FilterOpCode : std::uint8_t {
  kTrue = 0,       ///< push true
  kFalse = 1,      ///< push false
  kRangeInt = 2,   ///< push ints[first] <= column <= ints[first + 1] (int64 column or global id)
  kRangeReal = 3,  ///< push reals[first] <= column <= reals[first + 1] (float64 column)
  kInInt = 4,      ///< push column ∈ ints[first, first + count) (strictly increasing)
  kInReal = 5,     ///< push column ∈ reals[first, first + count) (strictly increasing)
  kNot = 6,        ///< pop a, push !a
  kAnd = 7,        ///< pop b, pop a, push a && b
  kOr = 8,         ///< pop b, pop a, push a || b
};

/// One instruction, 16 bytes, the same layout on the host, in the serialised form and on the GPU.
struct FilterOp {
  FilterOpCode code = FilterOpCode::kTrue;
  std::uint8_t reserved[3] = {0, 0, 0};
  std::int32_t column = 0;  ///< attribute index, or kFilterIdColumn (leaves only; 0 otherwise)
  std::int32_t first = 0;   ///< first constant in ints / reals (leaves only)
  std::int32_t count = 0;   ///< constants used (2 for a range; the set size for in)
};
static_assert(sizeof(FilterOp) == 16, "FilterOp is part of the serialised form");

/// Header of the serialised form (little-endian, 32 bytes), followed by n_ops FilterOp, n_ints
/// int64 and n_reals float64 (bit patterns). The whole image is a multiple of 8 bytes, and is
/// what the GPU reads.
struct FilterImageHeader {
  std::uint32_t magic = 0x464B5453u;  ///< "STKF"
  std::uint16_t version = 1;
  std::uint16_t max_stack = 0;        ///< evaluation stack depth the program needs
  std::int32_t n_ops = 0;
  std::int32_t n_ints = 0;
  std::int32_t n_reals = 0;
  std::int32_t reserved0 = 0;
  std::int64_t reserved1 = 0;
};
static_assert(sizeof(FilterImageHeader) == 32, "FilterImageHeader is part of the serialised form");

/// A compiled, validated filter: a postfix program over a row's attributes and global id, with
/// its int64 and float64 constant pools. Only compile_filter, parse_filter and
/// deserialize_filter make one (besides the default, which passes every row), so every program
/// is valid for the schema it was made with. Equal filters (after sorting and de-duplicating
/// lists, and compiling eq as a one-value range) give equal programs, bytes and hashes.
class FilterProgram {
 public:
  /// The filter that passes every row ({"all": []}).
  FilterProgram();

  const std::vector<FilterOp>& ops() const { return ops_; }
  const std::vector<std::int64_t>& ints() const { return ints_; }
  const std::vector<double>& reals() const { return reals_; }
  int max_stack() const { return max_stack_; }
  /// True when the program is the constant true (no filtering needed).
  bool passes_everything() const { return ops_.size() == 1 && ops_[0].code == FilterOpCode::kTrue; }

  /// Size of the serialised form in bytes (a multiple of 8).
  std::size_t serialized_bytes() const;
  /// Writes the serialised form (header, ops, ints, reals) to `out` (serialized_bytes() bytes).
  void serialize_to(std::uint8_t* out) const;
  /// The serialised form: what rank 0 broadcasts and what the GPU reads.
  std::vector<std::uint8_t> serialize() const;
  /// FNV-1a 64 of the serialised form: stable across processes, ranks and builds.
  std::uint64_t hash() const;

  bool operator==(const FilterProgram& o) const;
  bool operator!=(const FilterProgram& o) const { return !(*this == o); }

 private:
  friend class FilterCompiler;
  friend FilterProgram deserialize_filter(const std::uint8_t* data, std::size_t size, const AttributeSchema& schema);
  std::vector<FilterOp> ops_;
  std::vector<std::int64_t> ints_;
  std::vector<double> reals_;
  int max_stack_ = 1;
};

/// Compiles a filter (a parsed JSON value) against the attributes of `schema`.
/// @throws Error ("filter: ...") naming the offending operator, attribute, value or limit.
FilterProgram compile_filter(const nlohmann::json& filter, const AttributeSchema& schema);

/// Parses JSON text and compiles it. Nesting and the number of JSON values are bounded while
/// parsing, before the document is built (hostile input cannot exhaust stack or memory).
/// @throws Error for invalid JSON (with the parser's position) and as compile_filter.
FilterProgram parse_filter(const std::string& json_text, const AttributeSchema& schema);

/// Rebuilds a program from its serialised form, checking everything: header, sizes, opcodes,
/// columns and their types against `schema`, constant offsets, strictly increasing sets, finite
/// or infinite (never NaN) reals, stack discipline. Gives a program equal to the serialised one.
/// @throws Error naming what is wrong; never reads outside [data, data + size).
FilterProgram deserialize_filter(const std::uint8_t* data, std::size_t size, const AttributeSchema& schema);

/// Checks that every leaf of `program` reads a column `schema` has, with the leaf's type (cheap:
/// one pass over the instructions; run by every evaluation, and by the engine before packing).
/// @throws Error naming the instruction and column.
void check_filter_fits(const FilterProgram& program, const AttributeSchema& schema);

/// Size in bytes of pack_filter_programs's output for these programs.
std::size_t packed_filter_programs_bytes(const FilterProgram* const* programs, int count);

/// Packs `count` programs for the GPU into `out` (capacity bytes): a uint64 count, `count`
/// uint64 byte offsets from `out`, then each program's serialised form at its offset.
/// @returns the bytes written. @throws Error when capacity is too small (naming both sizes).
std::size_t pack_filter_programs(const FilterProgram* const* programs, int count, std::uint8_t* out,
                                 std::size_t capacity);

// ------------------------------------------------------------------------------ evaluation

/// What a block's summaries prove about a program: no row passes, some may, every row passes.
enum class BlockVerdict : std::uint8_t { kNone = 0, kSome = 1, kAll = 2 };

/// Interval analysis of `program` over the summaries of block `block` of `table`: kNone and
/// kAll only when the summaries prove them (sound, not complete).
/// @throws Error when the program does not fit the table's schema or the block is out of range.
BlockVerdict analyse_block(const FilterProgram& program, const AttributeTable& table, std::int64_t block);

/// The same analysis over the whole table's bounds (AttributeTable::table_bounds): kAll proves
/// that every row of the shard passes (its search may ignore the filter), kNone that none does.
/// kSome for a table without rows. @throws Error when the program does not fit the schema.
BlockVerdict analyse_table(const FilterProgram& program, const AttributeTable& table);

/// Whether shard row `row` passes (the scalar reference; no summaries).
/// @throws Error when the program does not fit the table's schema or the row is out of range.
bool passes(const FilterProgram& program, const AttributeTable& table, std::int64_t row);

/// Words of a row mask over `rows` rows: ceil(rows / 32).
inline std::int64_t filter_mask_words(std::int64_t rows) { return (rows + 31) / 32; }

/// Evaluates `program` over shard rows [rows.lo, rows.hi) of `table`.
/// @param[out] bits         [filter_mask_words(rows.size())]: bit (i % 32) of word i / 32 is set
///                          when row rows.lo + i passes; bits past the last row are 0.
/// @param[out] block_flags  optional, [blocks touched: (rows.hi - 1) / B - rows.lo / B + 1]: for
///                          each summary block meeting the range, 0 when none of its rows in the
///                          range passes, 2 when all do, 1 otherwise (exact, from the mask).
/// @param threads  0: OpenMP's default; 1: the calling thread only. Threads are used only when
///                 rows.lo is a multiple of 32 and the range spans many blocks.
/// Blocks whose summaries decide the answer are written without reading their rows; within a
/// block, a leaf the summaries decide is not evaluated row by row.
/// @throws Error when the program does not fit the table's schema or the range is outside it.
void evaluate_mask(const FilterProgram& program, const AttributeTable& table, RowRange rows, std::uint32_t* bits,
                   std::uint8_t* block_flags = nullptr, int threads = 0);

}  // namespace shardtopk
