#pragma once
// A logged write as rank 0 planned it (which slots die, where each new row goes), and the bytes
// in which rank 0 broadcasts a group of them to every rank. Internal header.
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "index/row_directory.hpp"

namespace shardtopk {

/// One logged request, planned: applied by every rank in seq order, kills first, then the rows.
struct WriteOp {
  std::uint64_t seq = 0;
  std::vector<SlotRef> kills;       ///< slots that die: deleted ids, and the old rows of replaced ids
  std::vector<SlotRef> places;      ///< [rows] where row i goes
  std::vector<std::int64_t> ids;    ///< [rows]
  std::vector<float> vectors;       ///< [rows, dim] as given (cosine: normalised when applied)
  std::vector<std::vector<std::uint64_t>> columns;  ///< [attribute columns][rows], schema order, value bits
  double max_norm = 0.0;            ///< the largest float64 norm of the rows (admission bound)
  std::int64_t max_norm_id = -1;    ///< and its id
  /// Rank 0's planning: each row's float64 norm ([rows], or empty: unknown). Not broadcast.
  std::vector<double> norms;

  std::int64_t rows() const { return static_cast<std::int64_t>(ids.size()); }
  /// Empties every field for `columns` attribute columns, keeping the buffers' capacity (a
  /// replay refills the ops of its last step instead of allocating new ones).
  void reset(std::size_t columns);
  /// Bytes encode_write_ops() gives this op.
  std::size_t encoded_bytes(std::int64_t dim) const;
  /// Bytes encode_write_ops() gives an op of `kills` kills and `rows` rows.
  static std::size_t encoded_bytes(std::size_t kills, std::size_t rows, std::int64_t dim, std::size_t columns);
};

/// Merges ops one at a time as they are planned, to the op merge_write_ops() would give for
/// them: each op's rows are copied once, into the merged op's buffers, where the replay of a long
/// log would otherwise copy every row twice (into its planned op, then into the merged one).
/// The buffers are kept from one group to the next.
class WriteMerger {
 public:
  /// Starts a group of ops of `dim` and `columns` attribute columns (the merger is empty).
  void start(std::int64_t dim, std::size_t columns);
  /// Appends an op: seq, kills, places ([rows]), max_norm, max_norm_id and norms ([rows] or
  /// empty) from `op`, and its rows from `ids` [rows], `vectors` [rows, dim] and `columns`
  /// [columns][rows] (each column's 8-byte values, schema order).
  void add(const WriteOp& op, const std::int64_t* ids, const float* vectors, const void* const* columns);
  /// Appends an op with its own rows.
  void add(const WriteOp& op);
  /// Ops appended since start().
  std::size_t ops() const { return op_norm_.size(); }
  /// The merged op into `out` (its buffers are taken for the next group's), and start() again.
  /// Requires ops() > 0.
  void finish(WriteOp* out);

 private:
  struct OpNorm {
    double max_norm;
    std::int64_t max_norm_id;
    bool known;  // the op's row norms were given
  };
  std::int64_t dim_ = 0;
  WriteOp rows_;                        // every row appended, in (op, row) order; the kills, deduplicated
  std::vector<std::uint8_t> kept_;      // [rows] 1: the last row written to its slot, not killed since
  std::vector<std::uint32_t> row_op_;   // [rows] the op the row came from
  std::vector<double> row_norm_;        // [rows] its float64 norm (unknown: computed when needed)
  std::vector<OpNorm> op_norm_;         // [ops]
  std::unordered_map<std::uint64_t, std::size_t> last_;  // slot -> its kept row
  std::unordered_set<std::uint64_t> killed_;
  std::vector<std::size_t> order_;      // finish(): the kept rows, by rank
  std::vector<std::size_t> at_;         // finish(): per rank, where its rows go
  std::vector<std::uint8_t> max_kept_;  // finish(): per op, 1: its own largest row is kept
  std::vector<const void*> columns_;  // add(op): the op's columns
};

/// One op with the effect of applying `ops` in order (kills first, then rows, op by op): the
/// union of their kills, and for each slot written the last row written to it unless a later op
/// killed it; rows are grouped by rank (in op order within a rank), so that each rank's rows are
/// contiguous; seq is the last op's; the norm is the largest of the rows kept. A group of
/// logged writes is applied as one (one engine write and one mask update per rank).
/// @param columns the attribute columns of every op.
WriteOp merge_write_ops(std::vector<WriteOp>&& ops, std::int64_t dim, std::size_t columns);
/// The same into `out`, whose buffers are reused (a long replay merges group after group of tens
/// of MB: fresh buffers would cost a page fault per 4 KB each time).
void merge_write_ops(std::vector<WriteOp>&& ops, std::int64_t dim, std::size_t columns, WriteOp* out);

/// The ops in order, as one buffer (little-endian, 8-byte words). `dim` and the number of
/// columns are the index's and not encoded.
std::vector<std::uint8_t> encode_write_ops(const std::vector<WriteOp>& ops, std::int64_t dim);
/// The same into `out` (replaced; its capacity reused).
void encode_write_ops(const std::vector<WriteOp>& ops, std::int64_t dim, std::vector<std::uint8_t>* out);

/// The ops back from encode_write_ops' bytes. @throws InternalError on inconsistent bytes.
std::vector<WriteOp> decode_write_ops(const std::uint8_t* data, std::size_t size, std::int64_t dim, int columns);
/// The same into `out` (replaced; the buffers of its ops reused).
void decode_write_ops(const std::uint8_t* data, std::size_t size, std::int64_t dim, int columns,
                      std::vector<WriteOp>* out);

}  // namespace shardtopk
