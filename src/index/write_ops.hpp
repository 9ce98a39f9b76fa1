#pragma once
// A logged write as rank 0 planned it (which slots die, where each new row goes), and the bytes
// in which rank 0 broadcasts a group of them to every rank. Internal header.
#include <cstddef>
#include <cstdint>
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
